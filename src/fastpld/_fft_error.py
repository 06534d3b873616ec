"""The forward-transform error of a node's input spectra (docs/roundoff.md, sections 3 and 3c).

Shared by the native backend's compiled node (:meth:`fastpld._native.NativeBackend.convolve`) and the
numpy backend's reference (:mod:`fastpld.composition.powers`): the same model in one place.
"""
from __future__ import annotations

import math

import numpy as np

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


def _inverse64_l1(e2: float, p2: float, N: int) -> float:
    """The ``l1`` round-off bound of a long double node's direct power (spectral error ``e2``, ``||P||_2 <= p2``
    in the norm of :func:`fastpld.composition.powers._direct_power`) when its inverse FFT runs in float64
    (docs/roundoff.md, section 3h).

    The computed power ``P~`` is within ``e2`` of the exact one, so ``||P~||_2 <= p2 + e2``; rounding it to
    complex128 moves each component by at most ``u`` of it (``u ||P~||_2`` in all), and the float64 inverse FFT
    adds ``12 u ceil(log2 N)`` of the norm of what it reads, ``(1 + u) ||P~||_2``.  Both are taken on
    ``(1 + 3 u)(p2 + e2)``, the norm's own float64 evaluation included."""
    g64 = 12.0 * _U64 * math.ceil(math.log2(max(N, 2)))
    return e2 + (g64 + 2.0 * _U64) * (1.0 + 3.0 * _U64) * (p2 + e2)
