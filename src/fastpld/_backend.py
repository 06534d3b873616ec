"""The FFT backend interface and the numpy backend (the reference).

:mod:`fastpld._fft` holds the switch between backends and registers the ``native`` one
(:mod:`fastpld._native`) when the compiled core and pyFFTW load.
"""
from __future__ import annotations

import numpy as np

from . import _kernels


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
