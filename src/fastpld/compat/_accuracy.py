"""The accuracy the adapters ask of :func:`fastpld.compose`: the library's default (one place for all of them)."""
from __future__ import annotations

from .. import _validation as V
from ..composition.api import compose as _compose


def accuracy(eps_error, rel_error) -> tuple[bool, float | None, float | None]:
    """``(default, rel_error, eps_error)`` of an adapter's arguments (:func:`fastpld._validation.accuracy`):
    neither given is the library's default (``rel_error`` 1e-3, and ``eps_error`` 0.01 where that
    composition is refused: :func:`fastpld.compose` falls back by itself)."""
    rel, eps, default = V.accuracy(rel_error, eps_error)
    return default, rel, eps


def compose(events, rel_error, eps_error, default: bool, **kwargs):
    """:func:`fastpld.compose` of ``events`` at the accuracy of :func:`accuracy` (``default``: compose's own)."""
    if default:
        return _compose(events, **kwargs)
    return _compose(events, rel_error=rel_error, eps_error=eps_error, **kwargs)
