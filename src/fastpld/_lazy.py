"""Import heavy dependencies on first use.

``import fastpld`` should cost little more than ``import numpy``: a service or a
CLI call that never reaches a code path needing :mod:`scipy.special` or
:mod:`scipy.signal` should not pay their import time (about 0.2 s and 0.5 s).
Modules write ``special = lazy_module("scipy.special")`` and use ``special.ndtr``
exactly as before; the first attribute access imports the real module and the
looked-up attribute is memoised on the proxy, so later calls cost one instance
attribute lookup and call the very same function (results are bitwise equal).
"""
from __future__ import annotations

import importlib

__all__ = ["lazy_module"]


class _LazyModule:
    """Stand-in for a module that is imported on its first attribute access."""

    def __init__(self, name: str):
        self.__dict__["_lazy_name"] = name

    def __getattr__(self, attr: str):
        # only reached when ``attr`` is not memoised yet; importlib's module locks
        # make concurrent first uses safe, and memoising the same object twice is harmless
        value = getattr(importlib.import_module(self.__dict__["_lazy_name"]), attr)
        self.__dict__[attr] = value
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_name']!r}>"


def lazy_module(name: str) -> _LazyModule:
    """A proxy for module ``name`` that imports it on first attribute access."""
    return _LazyModule(name)
