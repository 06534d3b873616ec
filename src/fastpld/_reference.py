"""Numpy references of the compiled kernels (:mod:`fastpld._core`, :mod:`fastpld._leaf`).

One function per compiled kernel, with the kernel's name; :mod:`fastpld._kernels` calls the compiled
kernel when it is built and the function here otherwise (``FASTPLD_PURE_PYTHON=1``, or tests that
set ``_kernels._core = None``).  Each gives the compiled kernel's results up to the order of
floating-point summation (where a docstring says "same operations", bitwise on one machine but for
the maths library), and raises ``ValueError`` where the kernel returns an error status.  Arguments
arrive converted by the dispatch (contiguous, the kernel's dtypes); outputs passed in are filled in
place, as the kernels do.

The fused leaf kernels (``_leaf.psg_window``, ``psg_leaf``, ``psg_leaf_full``) and the compiled
Chernoff window have their references in :mod:`fastpld.discretize` and :mod:`fastpld.composition.node` (the
numpy code those modules run themselves); the native backend's node kernels (``lattice_terms``,
``lattice_power``, ``power_direct``, ``finish_node``, ``series_input``) have theirs in
:mod:`fastpld.composition` (``lattice``, ``powers``, ``node``, ``series``).
"""
from __future__ import annotations

import math

import numpy as np

from ._dft_tables import dft_table
from ._lazy import lazy_module

signal = lazy_module("scipy.signal")
special = lazy_module("scipy.special")

__all__: list[str] = []

_TWO_PI_LD = 2 * np.longdouble("3.14159265358979323846264338327950288")
_TWO_PI = 2 * np.pi


# --------------------------------------------------------------------------------------
# Query tables and delta bounds (curve)
# --------------------------------------------------------------------------------------
def discounted_rcumsum(p: np.ndarray, factor: float) -> np.ndarray:
    """``out[j] = sum_{i >= j} p[i] factor^(i - j)`` (``_core.discounted_rcumsum``)."""
    if p.size == 0:
        return p.copy()
    return signal.lfilter([1.0], [1.0, -factor], p[::-1])[::-1]


def query_tables(p: np.ndarray, factor: float):
    """``(S1, T, dgrid)`` (``_core.query_tables``)."""
    S1 = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
    T = np.concatenate([discounted_rcumsum(p, factor), [0.0]])
    dgrid = np.maximum(S1[1:] - factor * T[1:], 0.0)
    return S1, T, dgrid


def delta_bounds(p: np.ndarray, v0: float, h: float, S1: np.ndarray, T: np.ndarray, padc: float, es: float,
                 ds: float, pinf: float, eps: np.ndarray):
    """``(lower, estimate, upper)`` of ``delta(eps)`` for one direction (``_core.delta_bounds``)."""
    n = p.size
    if n == 0:
        raise ValueError("delta_bounds: invalid argument")
    u = np.finfo(np.float64).eps / 2
    pp = np.concatenate([[0.0], p, [0.0]])

    def d_pad(x):
        J = np.clip(np.floor((x - v0) / h), -1, n).astype(np.int64) + 1
        J = np.minimum(J, n)
        vJ = v0 + h * J
        with np.errstate(over="ignore", under="ignore"):
            w = np.exp(np.minimum(x - vJ, 0.0))
        d = np.maximum(S1[J] - w * T[J], 0.0)
        err = 8 * u * (np.abs(x) + abs(v0) + h * n + 1.0)
        near = pp[J] * (x - (v0 + h * (J - 1)) <= err) + pp[J + 1] * (vJ - x <= err)
        return d, padc * S1[J] + err * (w * T[J] + near)

    du, pu = d_pad(eps - es)
    dl, pl = d_pad(eps + es)
    de, _ = d_pad(eps)
    up = np.minimum(1.0, (pinf + (1 - pinf) * np.minimum(1.0, du + pu + ds)) * (1 + 8 * u))
    lo = (pinf + (1 - pinf) * np.maximum(0.0, dl - pl - ds)) * (1 - 8 * u)
    return lo, np.clip(pinf + (1 - pinf) * de, lo, up), up


# --------------------------------------------------------------------------------------
# Algorithm 1 (discretize)
# --------------------------------------------------------------------------------------
def bucket_masses(F: np.ndarray, S: np.ndarray, split: int):
    """Bucket masses from CDF/SF values at the edges: ``(q, total)`` (``_core.bucket_masses``)."""
    n = F.size - 1
    if n < 1 or S.size != F.size or not 1 <= split <= n:
        raise ValueError("bucket_masses: invalid argument")
    q = np.empty(n, dtype=np.float64)
    q[: split - 1] = np.diff(F[:split])
    q[split:] = S[split:n] - S[split + 1:]
    q[split - 1] = 1.0 - F[split - 1] - S[split]
    np.maximum(q, 0.0, out=q)
    return q, float(q.sum())


def normalise_mean(q: np.ndarray, total: float):
    """``(q / total, sum_i i q_i / total)`` (``_core.normalise_mean``, which normalises ``q`` in place)."""
    if not total > 0:
        raise ValueError("normalise_mean: no positive probability mass")
    qn = q / total
    return qn, float(np.dot(np.arange(qn.size), qn))


def leaf_roundoff(F, S, dens, tau: float, c0: float, limit: float):
    """``(widen, tv)`` of the discretisation's round-off (``_core.leaf_roundoff``)."""
    dev = tau * np.minimum(F, S) + c0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # (a denormal density: inf, as 0's)
        move = np.where(dens > 0, dev / (0.5 * dens), np.inf)
    small = move <= limit
    widen = 2 * float(move[small].max()) if small.any() else 0.0
    return widen, float(dev[~small].sum())


def pmf_moments(p: np.ndarray, cen: float):
    """``(total, mean, variance)`` of the weights ``p`` on the indices ``i - cen`` (``_core.pmf_moments``)."""
    idx = np.arange(p.size, dtype=np.float64) - cen
    tot = float(p.sum())
    if not tot > 0:
        raise ValueError("pmf_moments: no positive probability mass")
    mu = float(np.dot(idx, p) / tot)
    return tot, mu, float(np.dot((idx - mu) ** 2, p) / tot)


def mean_index(p: np.ndarray) -> float:
    """``sum_i i p_i / sum_i p_i`` (``_core.mean_index`` sums in index order; this is numpy's sum)."""
    # (no np.dot: a BLAS dot wakes OpenBLAS's threads, milliseconds per call on a busy machine)
    return float(np.sum(np.arange(p.size, dtype=np.float64) * p) / p.sum())


# --------------------------------------------------------------------------------------
# The subsampled Gaussian (_leaf: psg_l, psg_dl, psg_eval, psg_moments)
# --------------------------------------------------------------------------------------
#: above this loss value the subsampled losses' ``g^-1(t) = log(e^t - 1 + q) - log q`` is evaluated as
#: ``t - log q`` (``e^t`` overflows at 709.78; the dropped ``log1p(-(1 - q) e^-t)`` is below 1e-304)
PSG_BIG_T = 700.0


def subsampled_ginv(t, q: float, want_dl: bool = False):
    """``l = g^-1(t) = log(e^t - 1 + q) - log q`` (``-inf`` for ``t <= log(1 - q)``) and, if ``want_dl``,
    ``dl/dt = e^t / (e^t - 1 + q)``, for every float ``t`` (the C leaf's ``psg_l``/``psg_dl``, same operations).

    Three forms, none of which overflows or cancels: ``t > PSG_BIG_T``: ``t - log q`` and 1 (exact but for
    terms below 1e-304); ``0 <= t <= PSG_BIG_T``: ``log(expm1(t) + q) - log q`` (two non-negative terms;
    exactly 0 at 0); ``t < 0``: ``e^t - 1 + q = (1 - q) expm1(t - log(1 - q))``, so ``l = log(1 - q) + log(expm1(d)) - log q``
    and ``dl/dt = (expm1(d) + 1) / expm1(d)`` with ``d = t - log(1 - q)`` (exact where ``t`` is near the
    support's end: ``expm1(t) + q`` lost every digit there).  The one error this leaves is that of the
    rounded ``log1p(-q)``: the values are those at a point within ``SubsampledLoss.cdf_shift`` of ``t``.
    """
    t = np.asarray(t, dtype=np.float64)
    lq, ylo = math.log(q), math.log1p(-q)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        big, neg = t > PSG_BIG_T, t < 0
        em1 = np.expm1(np.clip(t, 0.0, PSG_BIG_T))
        arg = em1 + q
        dn = np.expm1(np.minimum(t, 0.0) - ylo)
        l = np.where(big, t - lq, np.where(neg, np.where(dn > 0, ylo + np.log(dn) - lq, -np.inf),
                                           np.log(arg) - lq))
        if not want_dl:
            return l
        dl = np.where(big, 1.0, np.where(neg, (dn + 1.0) / dn, (em1 + 1.0) / arg))
    return l, dl


def psg_eval(t: np.ndarray, q: float, v: float, sd: float, remove: bool, want_pdf: bool = True):
    """``(F, S, pdf)`` of the Poisson-subsampled Gaussian privacy loss at ``t`` (``_leaf.psg_eval``)."""
    if not (0 < q < 1 and v > 0 and sd > 0):
        raise ValueError("psg_eval: invalid argument")
    tt = t if remove else -t
    l, dl = subsampled_ginv(tt, q, want_dl=True)  # (every float t: no overflow, no cancellation)
    return psg_at_l(l, dl, q, v, sd, remove, None if remove else t >= -math.log1p(-q), want_pdf)


def psg_at_l(l, dl, q: float, v: float, sd: float, remove: bool, top=None, want_pdf: bool = True):
    """:func:`psg_eval`'s ``(F, S, pdf)`` from ``l = g^-1(+-t)`` and ``dl/dt`` (``top``: where the add direction's
    ``t`` is at or above its end, ``F = 1``, ``S = 0``; ``None``: nowhere).  Also the subsampled Gaussian at exact
    distances from its end (:func:`fastpld.dominance.ends._psg_from_end`)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        zp = (l + v / 2) / sd
        if remove:
            zq = (l - v / 2) / sd
            F = (1 - q) * special.ndtr(zp) + q * special.ndtr(zq)
            S = (1 - q) * special.ndtr(-zp) + q * special.ndtr(-zq)
        else:
            F, S = special.ndtr(-zp), special.ndtr(zp)
            if top is not None:
                F, S = np.where(top, 1.0, F), np.where(top, 0.0, S)
        P = None
        if want_pdf:
            cden = 1.0 / (sd * math.sqrt(2 * math.pi))
            dens = np.exp(-0.5 * zp * zp) * cden
            if remove:
                dens = (1 - q) * dens + q * (np.exp(-0.5 * zq * zq) * cden)
            dens = dens * dl
            P = np.where(np.isfinite(dens), dens, 0.0)
    return F, S, P


def psg_density_rel(l, dl, delta, lq: float, v: float, sd: float):
    """A bound on the relative error of :func:`psg_at_l`'s density from the computed ``l`` and ``dl`` (``dl/dt``) at
    a point whose ``t`` lies within ``delta`` of the exact node's, against the exact density there (the C
    ``psg_density_rel``, the same formula; ``lq``: ``|log q| + |log(1 - q)|``).  ``l`` is within
    ``Dl = 10 u (1 + 2 |l| + 2 lq) + dl delta`` of the exact ``l``, so each normal argument ``z`` within ``Dl / sd``,
    moving ``exp(-z^2 / 2)`` by ``|z| Dl / sd`` in log; ``z``'s rounding and its square's ``2.5 u z^2`` (and
    ``sd = sqrt(v)`` rounded against ``1 / sigma``, ``1.5 u z^2``), ``exp`` and the products ``24 u``, ``dl/dt``'s
    ``11 u`` and ``|dl - 1| delta``, the mixture ``4 u``; ``Z = (|l| + v / 2) / sd`` bounds both arguments.  The
    sum ``x`` bounds the log of the ratio: ``x (1 + x)`` for ``x < 1/2``, else ``inf`` (docs/dominance.md, "The
    density's rounding")."""
    u = np.finfo(np.float64).eps / 2
    al = np.abs(l)
    z = (al + 0.5 * v) / sd
    with np.errstate(invalid="ignore", over="ignore"):
        dlz = 10 * u * (1 + 2 * al + 2 * lq) + np.abs(dl) * delta
        x = (z * dlz / sd + (4 * z * z + 40) * u + np.abs(dl - 1.0) * delta) * (1 + 1e-6)
        return np.where(x < 0.5, x * (1 + x), np.inf)


def psg_moments(l_lo: float, l_hi: float, q: float, v: float, sd: float, remove: bool, x16: np.ndarray,
                w16: np.ndarray, x8: np.ndarray, w8: np.ndarray):
    """``(I1, d1, r1, I2, d2, r2)`` of :func:`fastpld._kernels.psg_moments` (``_leaf.psg_moments``) with the
    16- and 8-point Gauss-Legendre rules ``(x16, w16)``, ``(x8, w8)``."""
    if not (0 < q < 1 and v > 0 and sd > 0) or math.isnan(l_lo) or math.isnan(l_hi):
        raise ValueError("psg_moments: invalid argument")
    h = v / 2
    lo, hi = max(-h - 40 * sd, l_lo), min(h + 40 * sd, l_hi)
    if not hi > lo:
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    npan = max(1, math.ceil((hi - lo) / min(sd, 1.0)))
    step = (hi - lo) / npan
    # (every panel, also over the whole line where the compiled kernel skips the far ones, C psg_skip: numpy's
    # pairwise sums over fewer panels would group the terms differently, a few ulp apart)
    a = lo + step * np.arange(npan, dtype=np.float64)
    b = np.append(a[1:], hi)
    mid, half = 0.5 * (a + b), 0.5 * (b - a)
    lq1, lq = math.log1p(-q), math.log(q)
    cden = 1.0 / (sd * math.sqrt(2 * math.pi))
    out = []
    res = {}
    for n, (x, w) in ((16, (x16, w16)), (8, (x8, w8))):
        l = mid[:, None] + half[:, None] * x[None, :]
        zp = (l + h) / sd
        dens = np.exp(-0.5 * zp * zp) * cden
        if remove:
            zq = (l - h) / sd
            dens = (1 - q) * dens + q * (np.exp(-0.5 * zq * zq) * cden)
        g = np.logaddexp(lq1, lq + l)
        res[n] = (half * ((g * dens) @ w), half * ((g * g * dens) @ w),
                  half * (np.abs(w * (g * dens)).sum(axis=1)), half * ((w * (g * g * dens)).sum(axis=1)))
    for k in range(2):
        i16, i8 = res[16][k], res[8][k]
        rnd = float(res[16][2 + k].sum()) * (npan + 40) * (np.finfo(np.float64).eps / 2)
        out += [float(i16.sum()), float(np.abs(i16 - i8).sum()), rnd]
    return tuple(out)


# --------------------------------------------------------------------------------------
# Planning: MGF grids, binomial moments, Chernoff quantiles
# --------------------------------------------------------------------------------------
def log_mgf_grid(p: np.ndarray, cen: float, s: np.ndarray, m: float, K: np.ndarray) -> None:
    """``K += m * log(sum_i p_i exp(s (i - cen)))`` for every ``s``, in place (``_core.log_mgf_grid``)."""
    if not (p > 0).any():
        raise ValueError("log_mgf_grid: no positive probability mass")
    idx = np.arange(p.size, dtype=np.float64) - cen
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    M = s[:, None] * idx[None, :] + logp[None, :]
    mx = M.max(axis=1)
    K += m * (mx + np.log(np.exp(M - mx[:, None]).sum(axis=1)))


def log_binomial_moments(lm: np.ndarray, lf: np.ndarray, lq1: float, lq: float, orders: np.ndarray) -> np.ndarray:
    """The binomial Renyi moments at integer ``orders`` (``_core.log_binomial_moments``)."""
    if orders.size and orders.min() < 0:
        raise ValueError("log_binomial_moments: invalid argument")
    out = np.empty(orders.size)
    for r, a in enumerate(orders.tolist()):
        j = np.arange(a + 1)
        with np.errstate(invalid="ignore"):
            t = lf[a + 1] - lf[j + 1] - lf[a - j + 1] + np.where(a - j > 0, (a - j) * lq1, 0.0) + j * lq + lm[: a + 1]
        mx = float(t.max())
        out[r] = mx + math.log(float(np.exp(t - mx).sum())) if math.isfinite(mx) else mx
    return out


def binomial_chord(x: np.ndarray, shift: int, lm: np.ndarray, lf: np.ndarray, lq1: float, lq: float,
                   memo: np.ndarray) -> np.ndarray:
    """Chord bound of the binomial moments at real orders, filling ``memo`` (``_core.binomial_chord``)."""
    lo = np.floor(x)
    if x.size and not (lo.min() >= 0 and lo.max() + shift + 1 <= memo.size - 1):
        raise ValueError("binomial_chord: invalid argument")
    a = lo.astype(np.int64) + int(shift)
    need = np.unique(np.concatenate([a, a + 1]))
    need = need[np.isnan(memo[need])]
    if need.size:
        memo[need] = log_binomial_moments(lm, lf, lq1, lq, need)
    w = x - lo
    with np.errstate(invalid="ignore"):
        return np.where(w == 0, memo[a], (1 - w) * memo[a] + w * memo[np.minimum(a + 1, memo.size - 1)])


def chernoff_quantiles(kp: np.ndarray, kn: np.ndarray, s: np.ndarray, c: float, lt: float):
    """``(lo, up)`` Chernoff quantiles of a grid of log-MGFs (``_core.chernoff_quantiles``)."""
    if s.size == 0:
        return -math.inf, math.inf
    with np.errstate(invalid="ignore", over="ignore"):
        up = float(np.min((c * kp - lt) / s))
        lo = -float(np.min((c * kn - lt) / s))
    return (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(up) else up)


# --------------------------------------------------------------------------------------
# Placement on grids (compose)
# --------------------------------------------------------------------------------------
def fold(p: np.ndarray, cen: int, out: np.ndarray) -> None:
    """``out[:] = 0; out[(i - cen) mod N] += p[i]`` (``_core.fold``)."""
    N = out.size
    out[:] = 0
    np.add.at(out, (np.arange(p.size) - cen) % N, p.astype(out.dtype))


def split(p: np.ndarray, offset: float, mesh_in: float, mesh_out: float, dtype, j0: int, m: int) -> np.ndarray:
    """Masses at ``(j0 + k) mesh_out``, ``k < m``, of the mean-preserving split (``_core.split``)."""
    n = p.size
    t = (offset + mesh_in * np.arange(n, dtype=np.float64)) / mesh_out
    j = np.floor(t)
    theta = (t - j).astype(dtype)
    jj = j.astype(np.int64) - j0
    pd = p.astype(dtype, copy=False)
    out = np.zeros(m, dtype=dtype)
    np.add.at(out, jj, pd * (1 - theta))
    up = np.zeros(m, dtype=dtype)
    np.add.at(up, jj + 1, pd * theta)
    return out + up

# --------------------------------------------------------------------------------------
# Spectra: direct DFTs, polar powers, the low-frequency series (compose)
# --------------------------------------------------------------------------------------
def small_dft(q: np.ndarray, steps: np.ndarray, N: int, out: np.ndarray) -> np.ndarray:
    """``out[k] = sum_j q_j e^(-2 pi i k steps_j / N)``, ``k = 0 .. N//2``, summed in the given order
    (``_core.small_dft``)."""
    c, s = dft_table(N, q.dtype)
    F = N // 2 + 1
    re = np.zeros(F, dtype=q.dtype)
    im = np.zeros(F, dtype=q.dtype)
    k = np.arange(F, dtype=np.int64)
    for qj, st in zip(q, steps):
        r = (k * int(st)) % N
        re = re + qj * c[r]
        im = im - qj * s[r]
    out.real = re
    out.imag = im
    return out


def low_dft(p: np.ndarray, cen: int, N: int, c: np.ndarray, s: np.ndarray, m: float, g: float, tau: float, kmax: int,
            X: np.ndarray, XL: np.ndarray | None = None) -> int:
    """``X[k]`` for ``k < K`` replaced by ``sum_j p_j (c_r - i s_r)``, ``r = k (j - cen) mod N``, the products and
    sums in long double (numpy's pairwise sums); ``K`` the first ``k >= 1`` where ``m g (|X_k| + g)^(m - 1) <= tau``,
    at most ``kmax`` (``_core.low_dft``)."""
    ld = np.longdouble
    F = N // 2 + 1
    kend = min(kmax, F)
    xr, xi = X.real[1:kend], X.imag[1:kend]
    with np.errstate(under="ignore"):
        small = np.flatnonzero(m * g * (np.sqrt(xr * xr + xi * xi) + g) ** (m - 1.0) <= tau)
    K = int(small[0]) + 1 if small.size else max(kend, 1)
    pl = np.asarray(p, dtype=np.float64).astype(ld)
    j = np.arange(p.size, dtype=np.int64) - int(cen)
    for f in range(K):
        r = (j * f) % N
        re, im = np.sum(pl * c[r].astype(ld)), -np.sum(pl * s[r].astype(ld))
        X[f] = complex(float(re), float(im))
        if XL is not None:
            XL[2 * f], XL[2 * f + 1] = re, im
    return K


def dft_at(p: np.ndarray, cen: int, N: int, c: np.ndarray, s: np.ndarray, k: int) -> complex:
    """``sum_j p_j (c_r - i s_r)``, ``r = k (j - cen) mod N``, in float64 (``_core.dft_at``)."""
    j = np.flatnonzero(p)
    r = ((j - int(cen)) * int(k)) % N
    return complex(float(np.dot(p[j], c[r])), -float(np.dot(p[j], s[r])))


def table_sum(w: np.ndarray, steps: np.ndarray, tab: np.ndarray, F: int, out: np.ndarray) -> np.ndarray:
    """``out[k] = sum_j w_j tab[(k steps_j) mod N]`` for ``k < F`` (``_core.table_sum``)."""
    N = tab.size
    k = np.arange(F, dtype=np.int64)
    acc = np.zeros(F, dtype=w.dtype)
    for wj, st in zip(w, steps):
        acc = acc + wj * tab[(k * int(st)) % N]
    out[:] = acc
    return out


def quarter_angle(X):
    """``(psi, q)`` with ``arg X = psi + q pi / 2`` (mod ``2 pi``), ``q`` in 0..3 and ``|psi| <= pi/4``:
    ``psi`` is the ``atan2`` of ``X`` turned back by ``q`` quarter turns (an exact swap and negation),
    so its rounding is relative to ``|psi|``, not to ``|arg X|`` (docs/roundoff.md, section 3e)."""
    re, im = X.real, X.imag
    q = np.where(np.abs(re) >= np.abs(im), np.where(re >= 0, 0, 2), np.where(im > 0, 1, 3)).astype(np.uint8)
    xr = np.select([q == 0, q == 1, q == 2], [re, im, -re], -im)
    xi = np.select([q == 0, q == 1, q == 2], [im, -re, -im], re)
    return np.arctan2(xi, xr), q


def turn_quarters(P, Q):
    """``P * i^Q`` in place (exact: swaps and negations)."""
    re, im = P.real.copy(), P.imag.copy()
    Q = np.asarray(Q) & 3
    P.real = np.select([Q == 0, Q == 1, Q == 2], [re, -im, -re], im)
    P.imag = np.select([Q == 0, Q == 1, Q == 2], [im, re, -im], -re)
    return P


def polar_power(logmag, phase, quarter):
    """``exp(logmag) e^(i phase) i^quarter``, 0 where ``logmag`` is not finite (the numpy reference of the
    compiled polar evaluation, ``_core._polar``): the phase reduced mod 2 pi in its own precision (a long
    double 2 pi for long double phases: a float64 one would add float64-size phase errors), the quarter
    turns exact."""
    ph = np.remainder(phase, _TWO_PI_LD if phase.dtype == np.longdouble else _TWO_PI)
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        P = np.exp(logmag) * (np.cos(ph) + 1j * np.sin(ph))
    P[~np.isfinite(logmag)] = 0
    return turn_quarters(P, quarter)


def spectrum_terms(X, m, logmag, phase, quarter, lr64, lrg64, ph64, g, first, dead, mq) -> None:
    """The terms of one input spectrum (``_core.spectrum_terms``, without its skip of dead frequencies:
    ``dead`` stays 0); ``mq = m mod 4``."""
    if first:
        dead[:] = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.abs(X)
        ph, q = quarter_angle(X)
        lr = np.log(a)
        r = a.astype(np.float64)
        lr64[:] = np.log(r)
        lrg64[:] = np.log(r + g)
    ph64[:] = ph.astype(np.float64)
    if first:
        logmag[:] = m * lr
        phase[:] = m * ph
        quarter[:] = (mq * q) & 3
    else:
        logmag += m * lr
        phase += m * ph
        quarter[:] = (quarter + mq * q) & 3


def power_fp(logmag, phase, quarter, LR, LRG, PH, ms, g, u, N, Pc, K, lp_low, amp_low):
    """The polar power into ``Pc`` and the weighted sums of its round-off bound (``_core.power_fp``)."""
    Pc[:] = polar_power(logmag, phase, quarter)
    with np.errstate(over="ignore", invalid="ignore"):
        log_prod = 0.0
        for c in range(ms.size):
            log_prod = log_prod + ms[c] * LRG[c]
        amp = 0.0
        for c in range(ms.size):
            amp = amp + ms[c] * g * np.exp(log_prod - LRG[c])
        cond = 0.0
        sum_lr = 0.0
        for c in range(ms.size):
            sum_lr = sum_lr + ms[c] * LR[c]
            cond = cond + ms[c] * (np.abs(np.where(np.isfinite(LR[c]), LR[c], 0.0)) + np.abs(PH[c]))
        # polar-power rounding, every maths-library call within 4 ulp (composition.roundoff._polar_rel)
        amp = amp + 1.01 * u * ((11 + ms.size) * cond + 8 * float(ms.sum()) + 40) * np.exp(sum_lr)
        amp = np.where(np.isfinite(amp), amp, 0.0)
        if K:
            amp = np.array(amp, dtype=np.float64)
            amp[:K] = amp_low[:K]
            log_prod = np.array(log_prod, dtype=np.float64)
            log_prod[:K] = lp_low[:K]
        w = np.full(amp.shape, 2.0)
        w[0] = 1.0
        if N % 2 == 0:
            w[-1] = 1.0
        return float(np.sum(w * amp**2)), float(np.sum(w * np.exp(2 * log_prod))), 0.0


def series_moments(p: np.ndarray, cen: int, d: float, R1: int, out: np.ndarray) -> np.ndarray:
    """Scaled power moments in long double, pairwise sums (``_core.series_moments``)."""
    n = p.size
    s = (np.arange(n, dtype=np.float64) - cen).astype(np.longdouble) / np.longdouble(d)
    n2 = 1 << max(0, (n - 1).bit_length())
    A = np.zeros((R1, n2), dtype=np.longdouble)
    pw = p.astype(np.longdouble)
    for r in range(R1):
        A[r, :n] = pw
        pw = pw * s
    while A.shape[1] > 1:
        h = A.shape[1] // 2
        A = A[:, :h] + A[:, h:]
    out[:] = A[:, 0]
    # M_0, M_1: pairwise TwoSum tree over exact terms (errors kept exactly, summed at the end)
    x = p.astype(np.longdouble)
    t = np.longdouble(4294967297.0) * x
    hi = t - (t - x)
    lo = x - hi
    for r, terms in ((0, x), (1, np.concatenate([hi * s, lo * s]))):
        if r >= R1:
            break
        m = 1 << max(0, (terms.size - 1).bit_length())
        v = np.zeros(m, dtype=np.longdouble)
        v[: terms.size] = terms
        err = np.zeros(m, dtype=np.longdouble)
        while v.size > 1:
            h = v.size // 2
            a, b = v[:h], v[h:]
            sm = a + b
            bb = sm - a
            err = err[:h] + err[h:] + ((a - (sm - bb)) + (b - bb))
            v = sm
        out[r] = v[0] + err[0]
    return out


def series_eval(a: np.ndarray, cerr: np.ndarray, step, rho: float, fact_r1: float, K: int, re: np.ndarray,
                im: np.ndarray, dz: np.ndarray):
    """``(re, im, dz)`` of the low-frequency series (``_core.series_eval``)."""
    W = a.dtype.type
    R = a.size - 1
    phi = np.arange(K).astype(W) * W(step)
    x = phi * phi
    acc = np.full(K, a[R], dtype=a.dtype)
    for r in range(R - 2, 1, -2):
        acc = a[r] - x * acc
    re[:] = x * acc
    acc = np.full(K, a[R - 1], dtype=a.dtype)
    for r in range(R - 3, 0, -2):
        acc = a[r] - x * acc
    im[:] = phi * acc
    phf = phi.astype(np.float64)
    err = np.zeros(K)
    pw = np.ones(K)
    for r in range(1, R + 1):
        pw = pw * phf
        err += cerr[r] * pw
    dz[:] = 1.01 * (2 * err + 2 * 1.01 * (phf * rho * 1.001) ** (R + 1) / fact_r1)
    return re, im, dz
