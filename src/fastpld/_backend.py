"""The FFT backend interface and the numpy backend (the reference).

:mod:`fastpld._fft` holds the switch between backends and registers the ``native`` one
(:mod:`fastpld._native`) when the compiled core and pyFFTW load.
"""
from __future__ import annotations

import numpy as np

from . import _kernels


class Backend:
    """Interface: real FFTs of a given length in float64 or long double.

    Every backend also computes a node's Fourier-domain power with its round-off bound
    (:meth:`convolve`): the ``native`` one with cached plans and the compiled kernels
    (:class:`fastpld._native.NativeBackend`), the numpy one with the reference code
    (:func:`fastpld.composition.powers.numpy_convolve`).
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

    def convolve(self, ins, N, dtype, u, ser=None, low=None, dead_log=800.0, fwd_dtype=None, direct=False, dft=None,
                 lat=None, raw=False, inv64=None, low_dft=None):
        """A node's power ``irfft(prod_c X_c^m_c)`` of its inputs ``ins`` (``(probs, centre_index, m)``) and its
        round-off bound: ``(out, l1, linf)``.  The arguments are described at
        :meth:`fastpld._native.NativeBackend.convolve`; every backend computes the same bound."""
        raise NotImplementedError

    def finish_node(self, out, shift: int, floor: float, trim: bool, N: int):
        """A node's output ``out`` of :meth:`convolve` rolled by ``-shift``, clipped at 0, its entries below
        ``floor`` set to 0 (if ``trim``) and the positive ones below 1e-300 dropped, cut to its nonzero range
        and normalised: ``(lin, first, dropped)`` with ``first`` the rolled index of ``lin[0]`` and ``dropped``
        an upper bound on the mass of the dropped entries.  ``ValueError`` if no mass is left."""
        raise NotImplementedError


def _same_precision(x, out):
    """``out``, if computed in ``x``'s precision: numpy's FFT runs in long double from numpy 2.0 on, but in
    float64 before it, while a long double node charges long double's round-off (a bound far too small)."""
    if np.asarray(x).dtype in (np.longdouble, np.clongdouble) and out.dtype not in (np.longdouble, np.clongdouble):
        raise RuntimeError("the numpy backend needs numpy >= 2.0 for long double FFTs "
                           f"(numpy {np.__version__} computes them in float64)")
    return out


class NumpyBackend(Backend):
    name = "numpy"

    def rfft(self, x, n):
        return _same_precision(x, np.fft.rfft(x, n))

    def irfft(self, X, n):
        return _same_precision(X, np.fft.irfft(X, n))

    def convolve(self, ins, N, dtype, u, ser=None, low=None, dead_log=800.0, fwd_dtype=None, direct=False, dft=None,
                 lat=None, raw=False, inv64=None, low_dft=None):
        # the reference code shares the round-off model of the composition (imported on first use: the
        # composition package imports this module)
        from .composition.powers import numpy_convolve
        return numpy_convolve(self, ins, N, dtype, u, ser, low, dead_log, fwd_dtype, direct, dft, lat, raw, inv64,
                              low_dft)

    def finish_node(self, out, shift, floor, trim, N):
        from .composition.powers import numpy_finish_node
        return numpy_finish_node(out, shift, floor, trim)
