"""Lattice convolutions of non-negative sequences with a certified round-off bound (random allocation's
sums of many copies: :mod:`fastpld.allocation`).

The convolutions run in long double (x87, ``u = 2^-64``) through scipy's FFT; the l1 error of each is
bounded by the normwise FFT error (Higham, *Accuracy and stability of numerical algorithms*, Sec. 24.1)
and propagated through the powers (``docs/samplers.md``, "Random allocation").
"""
from __future__ import annotations

import math

import numpy as np

from ._lazy import lazy_module

sfft = lazy_module("scipy.fft")

_U = np.finfo(np.float64).eps / 2
_ULD = max(float(np.finfo(np.longdouble).eps) / 2, 0.0)


def _conv(a: np.ndarray, b: np.ndarray, n_out: int, mode: str):
    """``a * b`` kept on indices ``0..n_out``: ``mode="drop"`` discards the rest, ``"clamp"`` adds it to
    index ``n_out``.  Returns ``(c, err)`` with ``err`` a bound on the l1 distance to the exact result.

    For non-negative inputs truncation commutes with the sum (a sum beyond ``n_out`` has a partial sum
    beyond it or not, and ``min(x + y, n) = min(min(x, n) + min(y, n), n)``), so powers computed with
    truncation at every step are exact laws of the truncated (or capped) sums.
    """
    la, lb = a.size, b.size
    L = la + lb - 1
    if la * lb <= 4_000_000:
        c = np.convolve(a, b)
        # sums of non-negative products: each entry within gamma_n of exact (Higham, Thm 3.5)
        n = min(la, lb)
        err = 1.01 * (n + 2) * _U * float(c.sum())
    else:
        nfft = sfft.next_fast_len(L, real=True)
        # in long double (x87 80-bit: u ~ 5.4e-20), so that the round-off charged below stays far
        # under the deltas asked for; the result is rounded to float64 (one more relative u)
        fa = sfft.rfft(a.astype(np.longdouble), nfft)
        fb = fa if b is a else sfft.rfft(b.astype(np.longdouble), nfft)  # (a square: one transform)
        c = np.asarray(sfft.irfft(fa * fb, nfft)[:L], dtype=np.float64)
        # normwise error of FFT-based convolution: |fl(F x) - F x|_2 <= eta |F x|_2 with
        # eta = 12 u log2 N (the bound used for fastpld's FFT nodes), |F a|_inf <= |a|_1 <= 1; the
        # result's l2 error is then at most 3 (eta + 2u)(|a|_2 + |b|_2)(1 + eta sqrt(N)), and its l1
        # error sqrt(L) times that
        u = _ULD
        eta = 12 * u * math.log2(nfft)
        e2 = 3 * (eta + 2 * u) * (float(np.linalg.norm(a)) + float(np.linalg.norm(b))) * (1 + eta * math.sqrt(nfft))
        err = 2.0 * math.sqrt(L) * e2 + 2 * _U * float(np.abs(c).sum())
        np.maximum(c, 0.0, out=c)  # (the exact values are >= 0: clipping only moves towards them)
    if L > n_out + 1:
        over = float(c[n_out + 1:].sum())
        c = c[: n_out + 1].copy()
        if mode == "clamp":
            c[n_out] += over
    return c, err


def _power(p: np.ndarray, m: int, n_out: int, mode: str, err0: float):
    """``p^(*m)`` truncated as in :func:`_conv`, with a bound on its l1 error (``err0``: that of ``p``).

    Errors propagate as ``|x^ * y^ - x * y|_1 <= e_x |y^|_1 + e_y |x|_1`` (sub-probabilities).
    """
    if m == 0:
        out = np.zeros(1)
        out[0] = 1.0
        return out, 0.0
    result, er = None, 0.0
    base, eb = p, err0
    while True:
        if m & 1:
            if result is None:
                result, er = base, eb
            else:
                c, fresh = _conv(result, base, n_out, mode)
                er = er * (1 + eb) + eb + fresh
                result = c
        m >>= 1
        if not m:
            break
        c, fresh = _conv(base, base, n_out, mode)
        eb = eb * (2 + eb) + fresh
        base = c
    return result, er


def _trim(p: np.ndarray, mode: str, tol: float = 1e-300):
    """Cut trailing entries below ``tol`` in total: dropped (``"drop"``, i.e. sent to ``+inf``) or added to the
    new last entry (``"clamp"``)."""
    tail = np.cumsum(p[::-1])[::-1]
    keep = int(np.searchsorted(-tail, -tol, side="right"))  # first index whose tail mass is <= tol
    keep = max(keep, 1)
    if keep >= p.size:
        return p
    out = p[:keep].copy()
    if mode == "clamp":
        out[-1] += float(tail[keep])
    return out


def _fix_cdf(p: np.ndarray, err: float, direction: str, total: float):
    """Masses whose CDF is a bound of the exact CDF of a law within l1 distance ``err`` of ``p``.

    ``"larger"``: CDF lowered by ``err`` (stochastically larger; the missing mass is for the caller to
    put at ``+inf``).  ``"smaller"``: CDF raised by ``err``, at most ``total`` (stochastically smaller).
    """
    c = np.cumsum(p)
    if direction == "larger":
        c = np.maximum.accumulate(np.clip(c - err, 0.0, None))
    else:
        c = np.minimum(c + err, total)
        c[-1] = total
        c = np.minimum.accumulate(c[::-1])[::-1]
    return np.diff(np.concatenate([[0.0], c]))
