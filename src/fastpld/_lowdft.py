"""The low frequencies of a float64 node's input spectra, summed directly (docs/roundoff.md, section 3i).

Shared, as :mod:`fastpld._fft_error`, by the native backend's node and the numpy backend's reference.

A node raises each input spectrum ``X`` to the power ``m``; the forward FFT computes ``X`` to within
``g = 12 u ceil(log2 N)``, and where ``|X| ~ 1`` the power amplifies that ``m``-fold.  The low-frequency series
(:mod:`fastpld.composition.series`) recomputes those frequencies from the input's moments: ``(R + 3) n`` long
double products for an input of ``n`` buckets, whatever the number of frequencies they serve.  A narrow input
raised to a moderate power needs few of them: where ``m g |X|^(m - 1)`` still matters ``|X|^m`` is not
negligible, about ten frequencies for the x50 node of a subsampled Gaussian's leaf.  There each value is summed
directly here, ``K`` long double products per non-zero entry (a leaf's thin-tail cells leave most of its points
empty) from the float64 table of the FFT length's cosines and sines, to within ``~1.5 u``
(:func:`low_dft_error`); the node's direct power takes their powers in long double and charges
that bound at those frequencies instead of ``g`` (``NativeBackend.convolve(..., low_dft=...)``, reference
:func:`fastpld.composition.powers._direct_power`).
"""
from __future__ import annotations

import math

import numpy as np

from . import _kernels, resources
from ._dft_tables import DFT_TABLE_ERR, dft_table

_U64 = float(np.finfo(np.float64).eps) / 2
_ULD = float(np.finfo(np.longdouble).eps) / 2  # (composition.roundoff's)

# the frequencies summed directly: those where the FFT's amplified error m g (|X| + g)^(m - 1) exceeds this share
# of the summed values' own charge at frequency 0 (m g_low plus the power's rounding), so that what the FFT's
# error adds past them is small against what the node is charged anyway
_TAU_SHARE = 0.1
# ... at most this share of a forward FFT's work (N log2 N) per input, K products per non-zero entry; a wider input
# or a larger power takes the series (or long double) instead
_COST_SHARE = 0.5
# ... and where the FFT's amplified error at the first frequency past the count is at most this many times tau (a few
# frequencies more would have been summed: PSG(0.7, 0.01)'s leaf, 2.8x at its count of 54, was charged as predicted;
# a Gaussian subsampled without replacement, 28x at 52, its natural count 152, was charged 5-8x the prediction)
_CHECK_SLACK = 8.0
_BLOCK = 64  # terms per long double block sum (C LOWDFT_BLOCK)
_MIN_POWER = 8  # (as the series: smaller powers amplify the FFT's error too little to matter)


def low_dft_error(n: int) -> float:
    """The bound on ``|X~_k - X_k|`` of a directly summed spectrum value (the long double sum, before its rounding:
    the value whose power the node takes) of an input of ``n`` buckets with ``||p||_1 <= 1.01`` (the node's inputs
    are normalised PMFs, as :func:`fastpld._fft_error._fwd_error` takes them).  Per component: the float64 table
    entries within ``u64 + DFT_TABLE_ERR uld`` of the exact ones (the long double ones rounded); each product
    ``p_j t`` rounded in long double and at most ``L = 64 + ceil(n / 64) + ceil(log2 n) + 8`` long double additions
    per term (blocks of 64, then the blocks' sums; numpy's pairwise sum in the reference makes fewer),
    ``gamma_(L + 1)`` of ``sum |p_j t|``.  The complex modulus is at most ``sqrt 2`` times the componentwise
    bound."""
    n = max(int(n), 1)
    L = _BLOCK + -(-n // _BLOCK) + math.ceil(math.log2(n + 1)) + 8
    gam = (L + 1) * _ULD / (1 - (L + 1) * _ULD)
    per = (_U64 + DFT_TABLE_ERR * _ULD) + gam
    return math.sqrt(2.0) * per * 1.01 * (1 + 1e-9)


def power_rounding(msum: int, C: int) -> float:
    """The relative rounding of a node's product ``prod_c X_c^m_c`` at the frequencies where every input's value is
    summed directly: each power in long double by binary powering (``m_c - 1`` textbook complex products, ``sqrt(5)
    uld`` each) and multiplied into the float64 product in long double (one product more), rounded to float64 once
    per input (``u64``): at most ``4.01 (M + C) uld + 1.01 C u64`` of ``prod |X~_c|^m_c`` (for ``M uld`` tiny)."""
    return 4.01 * (msum + C) * _ULD + 1.01 * C * _U64


def plan(ins, N: int, native: bool = True):
    """Per input ``(p, cen, m)`` of a float64 node of FFT length ``N``: the largest number of low frequencies to sum
    directly (0: none), or ``None`` where some input's would cost more than ``_COST_SHARE`` of a forward FFT (or
    no input needs them): ``K`` products per non-zero entry (the compiled sums skip the zeros).  The count is
    estimated from the input's variance (``|X_k| ~ e^(-theta_k^2 var / 2)``) and checked at the first frequency
    past it (:func:`fastpld._kernels.dft_at`, within ``_CHECK_SLACK``): a narrow bulk in wide tails decays slower
    than its variance says, and the FFT's amplified error at the frequencies left would be charged (the leaf of a
    Gaussian subsampled without replacement: 5-8x the prediction), so its count is none.  The kernel stops where
    the FFT's own values suffice (:func:`spectrum`); the estimate only moves the cost and the charge, never the
    bound's validity."""
    lg = math.ceil(math.log2(max(N, 2)))
    g = 12.0 * _U64 * lg
    msum = sum(m for _, _, m in ins)
    out = []
    for p, cen, m in ins:
        p = np.asarray(p)
        if m < _MIN_POWER or p.dtype != np.float64:
            out.append(0)
            continue
        n = p.size
        # (the sums run over the non-zero entries alone: a leaf's thin-tail cells leave most of its points empty)
        kmax = int(_COST_SHARE * N * lg / max(int(np.count_nonzero(p)), 1))
        tau = _tau(m, n, msum)
        x = math.log(m * g / tau)
        if x <= 0:
            out.append(0)
            continue
        var = float(_kernels.pmf_moments(p, cen)[2])
        k_est = (math.ceil(math.sqrt(2 * x / ((m - 1) * var)) * N / (2 * math.pi)) + 1) if var > 0 else N
        if k_est > kmax:
            return None
        count = min(kmax, N // 2 + 1, max(2 * k_est, 8))  # (room for a spectrum that decays slower)
        if count < N // 2 + 1:
            c, s = _table(N, native)
            if m * g * (abs(_kernels.dft_at(p, cen, N, c, s, count, native)) + g) ** (m - 1) > _CHECK_SLACK * tau:
                return None
        out.append(count)
    return tuple(out) if any(out) else None


def predicted_charge(inst: int, ins, N: int) -> float:
    """The round-off a float64 node's direct power with its low frequencies summed is predicted to charge over its
    ``inst`` instances, in the form of :func:`fastpld.composition.precision._predicted_fp_series`: the inverse FFT's
    ``~3 g`` and, near frequency 0, the summed values' ``M g_low`` and the power's rounding (:func:`power_rounding`),
    doubled.  (``M g_low`` grows with the power ``M``, where the series' error does not: its node prefers the series
    where this is much larger.)"""
    g = 12.0 * _U64 * math.ceil(math.log2(max(N, 2)))
    msum = sum(m for _, _, m in ins)
    gl = max(low_dft_error(np.asarray(p).size) for p, _, _ in ins)
    return inst * (2.0 * (3.0 * g + msum * gl + power_rounding(msum, len(ins))) + 4 * _U64)


def _tau(m, n, msum) -> float:
    # (with the float64 products' rounding 4.01 (M - 1) u, not the long double ones' power_rounding the summed
    # frequencies are charged: a larger tau, fewer frequencies summed; any tau gives a valid bound)
    return _TAU_SHARE * (m * low_dft_error(n) + 4.01 * (msum - 1) * _U64)


def _table(N: int, native: bool):
    """The float64 cosines and sines of ``2 pi r / N``: :func:`fastpld._dft_tables.dft_table`'s, kept with the
    calling thread's FFT plans where ``native`` (the length's twiddles, as the plans keep theirs: kept by
    ``clear_caches(keep_plans=True)``)."""
    if not native:
        return dft_table(N, np.float64)
    ws = resources.workspace()
    key = ("lowdft", int(N))
    t = ws.get(key)
    if t is None:
        t = dft_table(N, np.float64)
        ws.put(key, t, 16 * int(N))
    return t


def spectrum(X, p, cen: int, N: int, m: int, g: float, kmax: int, msum: int, native: bool):
    """Overwrite the forward spectrum ``X`` (``N // 2 + 1`` complex values) of ``p`` placed at ``(j - cen) mod N``
    at its first ``K`` frequencies by the directly summed values (rounded): ``K`` from 1 where ``m g (|X_k| +
    g)^(m - 1)`` is at most ``tau`` (:func:`_tau`), at most ``kmax``.  Returns ``(K, rho, XL)``: ``XL`` the long
    double sums (interleaved), within ``rho g`` of the exact values (:func:`low_dft_error`); ``X`` holds them
    rounded, within ``u64`` more (``|X|`` for the power's bound)."""
    c, s = _table(N, native)
    p = np.ascontiguousarray(p, dtype=np.float64)
    tau = _tau(m, p.size, msum)
    XL = np.empty(2 * int(kmax), dtype=np.longdouble)
    K = _kernels.low_dft(p, cen, N, c, s, m, g, tau, kmax, X, native, XL)
    return K, min(1.0, low_dft_error(p.size) / g), XL
