"""FFT backends behind one switch.

``numpy`` (pocketfft; float64 and long double) is the reference.  ``native``
(registered by :mod:`fastpld._native` when the compiled core and pyFFTW load)
reuses cached pyFFTW plans.  Select with :func:`set_backend`, the ``backend=``
keyword of :func:`fastpld.compose`, or the environment variable
``FASTPLD_BACKEND``.
"""
from __future__ import annotations

import math
import os
import threading
import warnings
from bisect import bisect_left

import numpy as np

from . import _kernels

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

    def abs_rfft(self, p: np.ndarray, cen: int, n: int, out: np.ndarray) -> np.ndarray:
        """``out[:] = |rfft(fold(p, cen), n)|`` (float64 ``p``, ``out`` of ``n // 2 + 1``), returned."""
        buf = np.empty(n)
        _kernels.fold(p, cen, buf)
        return np.abs(self.rfft(buf, n), out=out)


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


# --------------------------------------------------------------------------------------
# Forward-transform error of a node (shared by the native kernel path and the numpy reference)
# --------------------------------------------------------------------------------------
_U64 = float(np.finfo(np.float64).eps) / 2

# A long double node with float64 forward FFTs falls back to long double forward FFTs when the
# float64 forward error adds more than this multiple of the long double floor to the spectral error.
_MIXED_RATIO = 1.0


def _fwd_error(ins, N, fwd_dtype, u, ser=None, dft=None):
    """``(g, u_pol)``: componentwise error of each computed input spectrum and the unit round-off
    charged to the polar decomposition ``|X|, arg X`` (docs/roundoff.md, section 3).

    Same precision throughout (``fwd_dtype`` is the node's): ``g = 12 u ceil(log2 N)`` plus the
    series' scale ``ser[5]``, ``u_pol = u`` (unchanged model); a float64 node reading long double
    inputs adds their rounding into its buffer (below).  Float64 forward FFTs in a long
    double node (section 3c): the model's float64 ``g``, plus the rounding of placing the long
    double input into the float64 buffer (one cast and at most ``ceil(n / N) - 1`` folding
    additions per entry: ``gamma_(ceil(n/N))`` relative, so at most that times ``||p||_1`` per
    frequency); ``|X|`` and ``arg X`` are then float64 values, so the polar evaluation is
    charged at float64's ``u`` (an upper bound for its long double ``exp``, ``cos``, ``sin``).

    ``dft``: the inputs' spectra come from :func:`fastpld._kernels.small_dft` in the node's
    precision (``fwd_dtype`` is the node's): ``g`` is the largest of their bounds
    (:func:`fastpld._kernels.dft_order`, cast included) instead of the FFT's (section 3e).
    """
    lg = math.ceil(math.log2(max(N, 2)))
    extra = ser[5] if ser is not None else 0.0
    if dft is not None:
        return max(err for _, _, err in dft) * u + extra, u
    if np.dtype(fwd_dtype) != np.dtype(np.float64):
        return 12.0 * u * lg + extra, u
    cast = 0.0
    if any(np.asarray(p).dtype != np.float64 for p, _, _ in ins):
        # long double inputs rounded into the float64 buffer (a float64 node after a long double one)
        folds = max(-(-np.asarray(p).size // N) for p, _, _ in ins)
        cast = folds * _U64 / (1 - folds * _U64) * 1.01  # gamma_folds, inputs normalised (||p||_1 <= 1.01)
    if u == _U64:
        return 12.0 * u * lg + cast + extra, u
    return 12.0 * _U64 * lg + cast + extra, _U64


def _low_e2(low):
    """``sqrt(sum_k w_k amp_k^2)`` over the series frequencies (``low = (K, lp, amp)``), else 0."""
    if not low:
        return 0.0
    K, _, amp = low
    a = np.asarray(amp[:K], dtype=np.float64)
    if a.size == 0:
        return 0.0
    return math.sqrt(2.0 * float(np.dot(a, a)) - float(a[0]) ** 2)
