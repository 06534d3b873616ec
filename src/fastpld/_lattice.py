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
_DIRECT_MAX = 4_000_000  # products of lengths up to this: direct convolutions (numpy), exact to gamma_n


def _conv(a: np.ndarray, b: np.ndarray, n_out: int, mode: str):
    """``a * b`` kept on indices ``0..n_out``: ``mode="drop"`` discards the rest, ``"clamp"`` adds it to
    index ``n_out``.  Returns ``(c, err)`` with ``err`` a bound on the l1 distance to the exact result.

    For non-negative inputs truncation commutes with the sum (a sum beyond ``n_out`` has a partial sum
    beyond it or not, and ``min(x + y, n) = min(min(x, n) + min(y, n), n)``), so powers computed with
    truncation at every step are exact laws of the truncated (or capped) sums.
    """
    la, lb = a.size, b.size
    L = la + lb - 1
    if la * lb <= _DIRECT_MAX:
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

    One transform, its ``m``-th power and one inverse where a cyclic length of at most
    :data:`_ONE_FFT_MAX` times ``n_out + 1`` holds the sum but for a tail bounded below :data:`_ONE_FFT_WRAP`
    (:func:`_power_fft`); else repeated squaring, truncated at every step (:func:`_conv`), whose errors
    propagate as ``|x^ * y^ - x * y|_1 <= e_x |y^|_1 + e_y |x|_1`` (sub-probabilities).
    """
    if m == 0:
        out = np.zeros(1)
        out[0] = 1.0
        return out, 0.0
    if m >= 2 and p.size * p.size > _DIRECT_MAX:
        r = _power_fft(p, m, n_out, mode, err0)
        if r is not None:
            return r
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


# (a power of m copies by repeated squaring takes ~log2(m) + popcount(m) convolutions of twice the lattice, three
# transforms each; one transform of the whole sum takes two, of a length that must also hold its tail)
_ONE_FFT_MAX = 4.0  # the cyclic length tried up to this many times the kept lattice (memory: 16 bytes a point)
_ONE_FFT_WRAP = 1e-15  # the wrapped-around tail allowed (l1, charged with the round-off)


def _tail_log_bound(p: np.ndarray, m: int, N: int) -> float:
    """An upper bound on ``log Pr[X_1 + .. + X_m >= N]``, ``X_i`` independent with law ``p`` on ``0, 1, ..``
    (a sub-probability: the same bound on the measure): Chernoff, ``m log E[e^(s X)] - s N`` minimised over a
    grid of ``s`` (any ``s > 0`` is a bound).  Each block of ``B`` entries is counted at its last index (only
    larger), so that ``E[e^(s X)]`` is a sum over ``n / B`` blocks; each log-sum within ~``30 u`` relative of
    exact, raised by ``1e-12`` relative."""
    n = p.size
    B = 1 << max(0, int(math.log2(max(1.0, N / (64.0 * m)))))  # (m B <= N / 64: the blocks cost little)
    nb = -(-n // B)
    mass = np.zeros(nb * B)
    mass[:n] = p
    mass = mass.reshape(nb, B).sum(axis=1)
    keep = mass > 0
    if not keep.any():
        return -math.inf
    ends = (np.arange(nb, dtype=np.float64) * B + (B - 1))[keep]
    lm = np.log(mass[keep])
    best = 0.0
    for s in np.geomspace(0.5, 2e4, 48) / N:
        z = lm + s * ends
        top = float(z.max())
        K = top + math.log(float(np.exp(z - top).sum()))
        K += 1e-12 * (1.0 + abs(K))
        best = min(best, m * K - s * N)
    return best


def _power_fft(p: np.ndarray, m: int, n_out: int, mode: str, err0: float):
    """``p^(*m)`` on ``0..n_out`` as :func:`_power` truncates it, from one cyclic transform of length ``N``.

    Copies at or beyond a cut only make sums that are not kept apart (``"drop"``: beyond ``n_out``, dropped;
    ``"clamp"``: at or beyond ``n_out``, all gathered there, ``|p|_1^m`` less the rest), so the transform takes ``p``
    below the cut (``q``; a capped law's atom at the lattice's end, which would carry its sums far, stays out).  The
    exact cyclic power of ``q`` is its linear power plus the mass of the sums at or beyond ``N`` folded back
    (:func:`_tail_log_bound`, at most :data:`_ONE_FFT_WRAP`), and the linear power's entries below the cut are the
    truncated power's (non-negative summands: a sum below the cut has every copy below it).  ``None`` where no
    ``N`` of at most :data:`_ONE_FFT_MAX` lattices holds the tail (the caller squares instead).

    Round-off (long double, ``u``; ``eta = 12 u log2 N`` the normwise FFT bound of :func:`_conv`): the forward
    spectrum ``X^`` within ``eta sqrt(N) |q|_2`` (l2) of ``X``, ``|X_k| <= |q|_1``, so every ``|X^_k| <= rho =
    |q|_1 + eta sqrt(N) |q|_2``; ``|a^m - b^m| <= m rho^(m-1) |a - b|``; the power by repeated squaring and
    multiplication within ``3 m u rho^m`` relative (each complex product within ``sqrt(5) u``, squaring doubles a
    relative error); the inverse within ``eta`` of its norm.  The output's l2 error is then at most ``2 (m
    rho^(m-1) eta |q|_2 + 3 m u rho^m + eta rho^m (1 + 3 m u))`` (the 2: the real transforms' half spectra), its
    l1 error on the ``n`` entries kept ``sqrt(n)`` times that, plus the rounding to float64.
    """
    cut = n_out if mode == "clamp" else n_out + 1  # (the entries kept from the linear power: 0 .. cut - 1)
    q = p[:cut]
    if q.size == 0:
        return None
    N = None
    for c in (1.0, 1.25, 1.5, 2.0, 3.0, _ONE_FFT_MAX):
        cand = sfft.next_fast_len(int(math.ceil(c * cut)), real=True)
        log_wrap = _tail_log_bound(q, m, cand)
        if log_wrap <= math.log(_ONE_FFT_WRAP):
            N = cand
            break
    if N is None:
        return None
    wrap = math.exp(log_wrap)
    u = _ULD
    eta = 12 * u * math.log2(N)
    l2 = float(np.linalg.norm(q))
    beta_q = float(np.sum(q, dtype=np.longdouble))
    rho = beta_q * (1 + 4 * _U) + eta * math.sqrt(N) * l2
    rho_m1 = rho ** (m - 1) * (1 + 4 * m * _U)
    X = sfft.rfft(q.astype(np.longdouble), N)
    Y = None
    k = m
    while True:  # (repeated squaring: the relative error 3 m u above)
        if k & 1:
            Y = X.copy() if Y is None else np.multiply(Y, X, out=Y)
        k >>= 1
        if not k:
            break
        np.multiply(X, X, out=X)
    del X
    y = sfft.irfft(Y, N)
    del Y
    c = np.asarray(y[:cut], dtype=np.float64)
    del y
    e2 = 2.0 * (m * rho_m1 * eta * l2 + 3 * m * u * rho_m1 * rho + eta * rho_m1 * rho * (1 + 3 * m * u))
    err = math.sqrt(cut) * e2 * (1 + 1e-9) + 2 * _U * float(np.abs(c).sum()) + wrap * (1 + 1e-9)
    np.maximum(c, 0.0, out=c)  # (the exact values are >= 0: clipping only moves towards them)
    if mode == "clamp":
        # the capped sum's last entry: |p|_1^m less the rest (within the bound above; beta^m within (m + 4) u
        # relative, the rest's sum within gamma_(log2 n + 2))
        beta = float(np.sum(p, dtype=np.longdouble))
        rest = float(np.sum(c, dtype=np.longdouble))
        total = beta ** m
        c = np.append(c, max(0.0, total - rest))
        err = 2 * err + (m + 4) * _U * total + 2 * (math.log2(cut + 1) + 4) * _U * rest
    # the input's own error: |x^(*m) - y^(*m)|_1 <= (1 + e)^m - 1 for |x|_1, |y|_1 <= 1 + e
    err += math.expm1(m * math.log1p(err0)) * (1 + 1e-9) if err0 > 0 else 0.0
    return c, err


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

    ``"larger"``: survival function raised by ``err`` and by what ``p`` lacks of ``total``, at most ``total``
    (stochastically larger; the missing mass, at least ``err``, is for the caller to put at ``+inf``), from sums
    taken from the top, so that a tail of masses each below ``u`` keeps its mass.  ``"smaller"``: CDF raised by ``err`` and by what ``p`` holds below ``total`` (its rounding:
    that mass goes to the lowest point), at most ``total`` (stochastically smaller).
    """
    if direction == "larger":
        # from the top: the survival function at each point raised by err (and by what p lacks of total), at most
        # total, the lowest point taking the rest.  (The CDF lowered by err, as before, summed the masses from the
        # bottom: near 1 each addition rounds to u, so a tail of many masses below u vanished -- 1.3e-14 of a
        # dominating random allocation loss above loss 13.4 (Gaussian(0.6), 2 steps), whose curve fell below the exact
        # one there -- and a sum above total by rounding took that excess off the tail)
        if p.size == 0:
            return p.copy()
        tail = np.cumsum(p[::-1])[::-1]  # (sums from the top: each to its relative accuracy)
        r = np.minimum(np.append(tail[1:], 0.0) + (err + max(0.0, total - float(tail[0]))), total)
        r = np.maximum.accumulate(r[::-1])[::-1]  # (survival bounds from above, non-increasing)
        return np.concatenate([[total], r[:-1]]) - r
    c = np.cumsum(p)
    # (setting c[-1] = total alone put the deficit at the highest value: 1.9e-13 of a dominated random
    # allocation loss at 3.45, where the true tail is ~1e-33, and its curve above the exact one)
    deficit = max(0.0, total - float(c[-1])) if c.size else 0.0
    c = np.minimum(c + (err + deficit), total)
    c[-1] = total
    c = np.minimum.accumulate(c[::-1])[::-1]
    return np.diff(np.concatenate([[0.0], c]))
