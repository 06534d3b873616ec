"""Kernel dispatch: the compiled core when built, numpy/scipy otherwise.

``FASTPLD_PURE_PYTHON=1`` forces the fallback (as msgpack does), so both paths
stay tested.
"""
from __future__ import annotations

import os

import numpy as np
from scipy import signal

_core = None
if os.environ.get("FASTPLD_PURE_PYTHON", "") not in ("1", "true", "yes"):
    try:
        from . import _core  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - depends on the build
        _core = None

HAVE_CORE = _core is not None


def discounted_rcumsum(p: np.ndarray, factor: float) -> np.ndarray:
    """``out[j] = sum_{i >= j} p[i] factor^(i - j)``."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.discounted_rcumsum(p, float(factor))
    if p.size == 0:
        return p.copy()
    return signal.lfilter([1.0], [1.0, -factor], p[::-1])[::-1]
