"""FFT backends behind one switch.

``numpy`` (pocketfft; float64 and long double, :mod:`fastpld._backend`) is the reference.
``native`` (:mod:`fastpld._native`, registered here when the compiled core and pyFFTW load)
reuses cached pyFFTW plans.  Select with :func:`set_backend`, the ``backend=``
keyword of :func:`fastpld.compose`, or the environment variable
``FASTPLD_BACKEND``.
"""
from __future__ import annotations

import os
import threading
import warnings
from bisect import bisect_left

from ._backend import Backend, NumpyBackend

__all__ = ["set_backend", "get_backend", "available_backends", "fast_length", "Backend"]


_BACKENDS: dict[str, Backend] = {"numpy": NumpyBackend()}
_lock = threading.Lock()
_current: list = [None]


def register_backend(backend: Backend) -> None:
    with _lock:
        _BACKENDS[backend.name] = backend


def available_backends() -> tuple[str, ...]:
    """Names of the FFT backends that can run in this process.

    ``"numpy"`` (pocketfft, the reference) is always available; ``"native"`` (cached pyFFTW plans
    and the compiled kernels) when the compiled core is built and pyFFTW imports.  Asking for this
    loads the native backend if it has not been loaded yet.

    Returns
    -------
    tuple of str
        For example ``("numpy", "native")``.

    Examples
    --------
    >>> import fastpld
    >>> "numpy" in fastpld.available_backends()
    True
    """
    _load_native()
    return tuple(_BACKENDS)


_native_error: list = [None]


def _load_native() -> None:
    if "native" in _BACKENDS or _native_error[0] is not None:
        return
    try:
        from ._native import NativeBackend
    except Exception as exc:  # pragma: no cover - depends on the build
        _native_error[0] = exc
        return
    register_backend(NativeBackend())


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
    """Name of the backend used when :func:`fastpld.compose` is called without ``backend=``.

    Until :func:`set_backend` is called this is ``FASTPLD_BACKEND`` if set, else ``"native"`` when
    available, else ``"numpy"``.

    Returns
    -------
    str
        ``"native"`` or ``"numpy"``.

    Raises
    ------
    ValueError
        If ``FASTPLD_BACKEND`` names no backend.

    Warns
    -----
    RuntimeWarning
        If ``FASTPLD_BACKEND=native`` but the native backend cannot load (numpy is used).
    """
    if _current[0] is None:
        _current[0] = _default()
    return _current[0].name


def set_backend(name: str) -> None:
    """Select the FFT backend :func:`fastpld.compose` uses by default, process-wide.

    Both backends return the same certified answers up to the rounding of their maths libraries
    (PMFs, estimates and bounds agree to about 1e-9 relative); ``native`` is faster.
    ``compose(..., backend=...)`` overrides the choice for one call.

    Parameters
    ----------
    name : {"native", "numpy"}
        Backend name (case and surrounding spaces ignored).

    Raises
    ------
    ValueError
        If ``name`` is not a string or names no backend.

    Warns
    -----
    RuntimeWarning
        If ``"native"`` is asked for but cannot load; the numpy backend is selected instead.

    Examples
    --------
    >>> import fastpld
    >>> previous = fastpld.get_backend()
    >>> fastpld.set_backend("numpy")
    >>> fastpld.get_backend()
    'numpy'
    >>> fastpld.set_backend(previous)
    """
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


def _smallest_even(table, n: int, beyond) -> int:
    """Smallest even entry of the sorted ``table`` that is ``>= max(n, 2)``.

    Past the table's last even entry the answer is ``beyond(n)``: the table is finite, and a
    length asked for there (e.g. a composition far beyond ``max_buckets``) must still get an
    answer, so that the caller can refuse it with its own error.
    """
    n = max(int(n), 2)
    i = bisect_left(table, n)
    while i < len(table) and table[i] % 2:
        i += 1
    return table[i] if i < len(table) else beyond(n)


def _smallest_c2a(n: int, mantissas) -> int:
    """Smallest ``c 2^a >= n`` over ``c`` in ``mantissas`` (each even for ``a >= 1``), exact for any int."""
    return min(c << max(0, (-(-n // c) - 1).bit_length()) for c in mantissas)


# Float64 node lengths: c 2^a with c in _MANTISSAS (eight per octave, at most 14% apart; every
# smaller 7-smooth length).  Fewer distinct lengths than all 7-smooth ones (~30 per octave near
# 10^4): FFTW builds each length's first plan from scratch (~3-4 ms of twiddle set-up, measured
# for forward and inverse plans of 2^14, 3 2^12, 7 2^11), which dominated a first composition with
# many nodes (1000 distinct mechanisms x 10: 100 distinct lengths, ~0.7 s), for ~5% more points.
_MANTISSAS = (16, 18, 20, 21, 24, 27, 28, 30)
_FAST_Q = sorted({n for n in _FAST if n <= 32} | {c << a for c in _MANTISSAS for a in range(28)})


def fast_length(n: int) -> int:
    """Smallest even length ``>= n`` (at least 2) of the form ``c 2^a``, ``c`` in
    ``{16, 18, 20, 21, 24, 27, 28, 30}``, or a 7-smooth length up to 32."""
    return _smallest_even(_FAST_Q, n, lambda m: _smallest_c2a(m, _MANTISSAS))


_FAST_23 = [n for n in _FAST if n % 5 and n % 7]


def fast_length_23(n: int) -> int:
    """Smallest even ``2^a 3^b >= n``, at least 2 (the long double FFT's fastest lengths)."""
    return _smallest_even(_FAST_23, n, lambda m: _smallest_c2a(m, (2 * 3 ** b for b in range(40))))
