"""The accuracy the adapters ask of :func:`fastpld.compose` (one place for all of them)."""
from __future__ import annotations

from .. import _validation as V
from ..composition.api import compose as _compose

DEFAULT_REL_ERROR = 1e-3  # by default the certified interval within 0.1% of epsilon (dominance)
FALLBACK_EPS_ERROR = 0.01  # where the dominance certificate refuses: the coupling certificate at this


def accuracy(eps_error, rel_error) -> tuple[bool, float | None, float]:
    """``(fallback, rel_error, eps_error)`` of an adapter's arguments: neither given is the default
    (``rel_error`` 1e-3, and ``eps_error`` 0.01 where that composition is refused: ``fallback``)."""
    rel = V.relative_accuracy(rel_error, eps_error)
    fallback = rel is None and eps_error is None
    rel = DEFAULT_REL_ERROR if fallback else rel
    return fallback, rel, V.eps_error(FALLBACK_EPS_ERROR if eps_error is None else eps_error)


def compose(events, rel_error, eps_error, fallback: bool, **kwargs):
    """:func:`fastpld.compose` of ``events`` at ``rel_error`` (at ``eps_error`` when it is ``None``);
    a composition refused at ``rel_error`` (the dominance certificate's charges or size, or a method
    that takes no ``rel_error``) is composed at ``eps_error`` when ``fallback``, else the refusal is raised."""
    if rel_error is None:
        return _compose(events, eps_error=eps_error, **kwargs)
    try:
        return _compose(events, rel_error=rel_error, **kwargs)
    except ValueError:
        if not fallback:
            raise
        return _compose(events, eps_error=eps_error, **kwargs)
