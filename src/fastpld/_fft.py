"""FFT backends behind one switch.

``numpy`` (pocketfft; float64 and long double) is the reference.  ``native``
(registered by :mod:`fastpld._native` when the compiled core and pyFFTW load)
reuses cached pyFFTW plans.  Select with :func:`set_backend`, the ``backend=``
keyword of :func:`fastpld.compose`, or the environment variable
``FASTPLD_BACKEND``.
"""
from __future__ import annotations

import os
import threading
import warnings
from bisect import bisect_left

import numpy as np

__all__ = ["set_backend", "get_backend", "available_backends", "fast_length", "Backend"]


class Backend:
    """Interface: real FFTs of a given length in float64 or long double.

    ``native`` backends also provide ``convolve(ins, N, dtype, u)`` (the whole
    Fourier-domain power of a node with its round-off bound, see
    :class:`fastpld._native.NativeBackend`) and run the compiled kernels; the
    numpy backend runs the reference code inline.
    """

    name = "abstract"
    native = False

    def rfft(self, x: np.ndarray, n: int) -> np.ndarray:
        raise NotImplementedError

    def irfft(self, X: np.ndarray, n: int) -> np.ndarray:
        raise NotImplementedError


class NumpyBackend(Backend):
    name = "numpy"

    def rfft(self, x, n):
        return np.fft.rfft(x, n)

    def irfft(self, X, n):
        return np.fft.irfft(X, n)


_BACKENDS: dict[str, Backend] = {"numpy": NumpyBackend()}
_lock = threading.Lock()
_current: list = [None]


def register_backend(backend: Backend) -> None:
    with _lock:
        _BACKENDS[backend.name] = backend


def available_backends() -> tuple[str, ...]:
    _load_native()
    return tuple(_BACKENDS)


_native_error: list = [None]


def _load_native() -> None:
    if "native" in _BACKENDS or _native_error[0] is not None:
        return
    try:
        from . import _native  # noqa: F401  (registers itself)
    except Exception as exc:  # pragma: no cover - depends on the build
        _native_error[0] = exc


def _native_unavailable(stacklevel: int) -> Backend:
    """Explicit request for ``native`` that cannot be served: warn and use numpy."""
    warnings.warn(f"the native backend is unavailable ({_native_error[0]}); using the numpy backend",
                  RuntimeWarning, stacklevel=stacklevel + 1)
    return _BACKENDS["numpy"]


def _default() -> Backend:
    env = os.environ.get("FASTPLD_BACKEND", "").strip().lower()
    _load_native()
    if env:
        if env not in _BACKENDS:
            if env == "native":
                return _native_unavailable(4)
            raise ValueError(f"FASTPLD_BACKEND must be one of {tuple(_BACKENDS)}, got {env!r}")
        return _BACKENDS[env]
    return _BACKENDS.get("native", _BACKENDS["numpy"])


def get_backend() -> str:
    """Name of the backend used when ``compose`` is called without ``backend=``."""
    if _current[0] is None:
        _current[0] = _default()
    return _current[0].name


def set_backend(name: str) -> None:
    """Select the default backend: ``"native"`` or ``"numpy"``."""
    if not isinstance(name, str):
        raise ValueError(f"backend must be a string, got {name!r}")
    _load_native()
    key = name.strip().lower()
    if key not in _BACKENDS:
        if key == "native":
            _current[0] = _native_unavailable(2)
            return
        raise ValueError(f"backend must be one of {tuple(_BACKENDS)}, got {name!r}")
    _current[0] = _BACKENDS[key]


def resolve(name: str | None) -> Backend:
    if name is None:
        get_backend()
        return _current[0]
    if not isinstance(name, str):
        raise ValueError(f"backend must be a string, got {name!r}")
    _load_native()
    key = name.strip().lower()
    if key not in _BACKENDS:
        if key == "native":
            return _native_unavailable(3)
        raise ValueError(f"backend must be one of {tuple(_BACKENDS)}, got {name!r}")
    return _BACKENDS[key]


def _fast_lengths(limit: int = 1 << 31) -> list[int]:
    out = []
    p2 = 1
    while p2 <= limit:
        p3 = p2
        while p3 <= limit:
            p5 = p3
            while p5 <= limit:
                p7 = p5
                while p7 <= limit:
                    out.append(p7)
                    p7 *= 7
                p5 *= 5
            p3 *= 3
        p2 *= 2
    return sorted(out)


_FAST = _fast_lengths()


def fast_length(n: int) -> int:
    """Smallest ``2^a 3^b 5^c 7^d >= n`` that is even (real FFTs), at least 2."""
    n = max(int(n), 2)
    i = bisect_left(_FAST, n)
    while _FAST[i] % 2:
        i += 1
    return _FAST[i]
