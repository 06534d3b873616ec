"""Kernel dispatch: the compiled core when built, numpy otherwise.

Each function runs the Cython/C kernel of :mod:`fastpld._core` when it is
available and otherwise a numpy implementation with the same results (up to
the order of floating-point summation).  ``FASTPLD_PURE_PYTHON=1`` forces the
numpy implementations (as msgpack does); tests also set ``_kernels._core = None``
to run them in-process, so both paths stay tested.  The leaf kernels of the
subsampled Gaussian live in :mod:`fastpld._leaf` and follow the same switch.

The ``numpy`` FFT backend does not come through here: it keeps the reference
code inline in :mod:`fastpld.compose` and :mod:`fastpld.discretize`; the
``native`` backend calls these kernels.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ._lazy import lazy_module

signal = lazy_module("scipy.signal")
special = lazy_module("scipy.special")

_core = None
if os.environ.get("FASTPLD_PURE_PYTHON", "") not in ("1", "true", "yes"):
    try:
        from . import _core  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - depends on the build
        _core = None

HAVE_CORE = _core is not None

_leaf = None
if _core is not None:
    try:
        from . import _leaf  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - depends on the build
        _leaf = None

_TWO_PI_LD = 2 * np.longdouble("3.14159265358979323846264338327950288")
_TWO_PI = 2 * np.pi


def discounted_rcumsum(p: np.ndarray, factor: float) -> np.ndarray:
    """``out[j] = sum_{i >= j} p[i] factor^(i - j)``."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.discounted_rcumsum(p, float(factor))
    if p.size == 0:
        return p.copy()
    return signal.lfilter([1.0], [1.0, -factor], p[::-1])[::-1]


def query_tables(p: np.ndarray, factor: float):
    """``(S1, T, dgrid)`` of :class:`fastpld.curve._Query`.

    ``S1[j] = sum_{i >= j} p_i``, ``T[j] = sum_{i >= j} p_i factor^(i-j)`` (both with a
    trailing 0) and ``dgrid[j] = max(S1[j+1] - factor T[j+1], 0)``.
    """
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.query_tables(p, float(factor))
    S1 = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
    T = np.concatenate([discounted_rcumsum(p, factor), [0.0]])
    dgrid = np.maximum(S1[1:] - factor * T[1:], 0.0)
    return S1, T, dgrid


def delta_bounds(p: np.ndarray, v0: float, h: float, S1: np.ndarray, T: np.ndarray, padc: float, es: float,
                 ds: float, pinf: float, eps: np.ndarray):
    """``(lower, estimate, upper)`` of ``delta(eps)`` for one direction of a composed PMF.

    :meth:`fastpld.curve.PrivacyLossDistribution.delta` for one direction, with
    :meth:`fastpld.curve._Query.delta` inlined (same operations): ``p`` holds the
    masses at ``v0 + j h``, ``S1``/``T`` its :func:`query_tables`, ``padc`` the
    relative round-off pad of the tables, ``es``/``ds`` the spent eps/delta errors
    and ``pinf`` the mass at infinity.
    """
    p = np.ascontiguousarray(p, dtype=np.float64)
    eps = np.ascontiguousarray(eps, dtype=np.float64)
    if _core is not None:
        return _core.delta_bounds(p, float(v0), float(h), S1, T, float(padc), float(es), float(ds), float(pinf), eps)
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


def bucket_masses(F: np.ndarray, S: np.ndarray, split: int):
    """Bucket masses of Algorithm 1 from CDF/SF values at the ``n + 1`` edges: ``(q, total)``.

    CDF differences below bucket ``split - 1``, survival differences above it,
    the straddling bucket by complement; clipped at 0 (``q`` not normalised).
    """
    F = np.ascontiguousarray(F, dtype=np.float64)
    S = np.ascontiguousarray(S, dtype=np.float64)
    if _core is not None:
        return _core.bucket_masses(F, S, int(split))
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
    """``(q / total, sum_i i q_i / total)``."""
    q = np.array(q, dtype=np.float64)
    if _core is not None:
        mi = _core.normalise_mean(q, float(total))
        return q, mi
    if not total > 0:
        raise ValueError("normalise_mean: no positive probability mass")
    qn = q / total
    return qn, float(np.dot(np.arange(qn.size), qn))


def leaf_roundoff(F, S, dens, tau: float, c0: float, limit: float):
    """``(widen, tv)``: edges whose movement ``(tau min(F, S) + c0) / (dens / 2)`` is at most
    ``limit`` widen the coupling range by twice the largest movement; the others are charged
    to total variation."""
    F = np.ascontiguousarray(F, dtype=np.float64)
    S = np.ascontiguousarray(S, dtype=np.float64)
    dens = np.ascontiguousarray(dens, dtype=np.float64)
    if _core is not None:
        return _core.leaf_roundoff(F, S, dens, float(tau), float(c0), float(limit))
    dev = tau * np.minimum(F, S) + c0
    with np.errstate(divide="ignore", invalid="ignore"):
        move = np.where(dens > 0, dev / (0.5 * dens), np.inf)
    small = move <= limit
    widen = 2 * float(move[small].max()) if small.any() else 0.0
    return widen, float(dev[~small].sum())


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


def psg_eval(t: np.ndarray, q: float, v: float, sd: float, remove: bool, want_pdf: bool = True,
             want_cdf: bool = True):
    """``(F, S, pdf)`` of the Poisson-subsampled Gaussian privacy loss at ``t``.

    The pair is ``P = N(-v/2, v)``, ``Q = N(v/2, v)`` for ``L`` (``sd = sqrt(v)``);
    ``remove``: ``Y = log(1 - q + q e^L)`` with ``L ~ (1-q) P + q Q``, else
    ``Y = -log(1 - q + q e^L)`` with ``L ~ P`` (see
    :class:`fastpld.mechanisms.SubsampledLoss`).  ``pdf`` is ``None`` unless ``want_pdf``; the
    compiled kernel skips the normal probabilities (``F``, ``S`` are then ``None``) unless ``want_cdf``.
    """
    t = np.ascontiguousarray(t, dtype=np.float64)
    if _core is not None and _leaf is not None:  # (tests set _core = None to run every reference)
        F, S, P = _leaf.psg_eval(t.ravel(), float(q), float(v), float(sd), bool(remove), bool(want_pdf),
                                 bool(want_cdf))
        shape = lambda a: None if a is None else a.reshape(t.shape)
        return shape(F), shape(S), shape(P)
    if not (0 < q < 1 and v > 0 and sd > 0):
        raise ValueError("psg_eval: invalid argument")
    tt = t if remove else -t
    l, dl = subsampled_ginv(tt, q, want_dl=True)  # (every float t: no overflow, no cancellation)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        zp = (l + v / 2) / sd
        if remove:
            zq = (l - v / 2) / sd
            F = (1 - q) * special.ndtr(zp) + q * special.ndtr(zq)
            S = (1 - q) * special.ndtr(-zp) + q * special.ndtr(-zq)
        else:
            top = t >= -math.log1p(-q)
            F = np.where(top, 1.0, special.ndtr(-zp))
            S = np.where(top, 0.0, special.ndtr(zp))
        P = None
        if want_pdf:
            cden = 1.0 / (sd * math.sqrt(2 * math.pi))
            dens = np.exp(-0.5 * zp * zp) * cden
            if remove:
                dens = (1 - q) * dens + q * (np.exp(-0.5 * zq * zq) * cden)
            dens = dens * dl
            P = np.where(np.isfinite(dens), dens, 0.0)
    return F, S, P


def _gl_rule(n):
    x, w = np.polynomial.legendre.leggauss(n)
    return np.ascontiguousarray(x), np.ascontiguousarray(w)


_GL16 = _gl_rule(16)
_GL8 = _gl_rule(8)


def psg_moments(l_lo: float, l_hi: float, q: float, v: float, sd: float, remove: bool):
    """``int g^k dmu`` over ``l_lo <= L <= l_hi`` for ``k = 1, 2`` with ``g(l) = log(1 - q + q e^l)``.

    ``mu`` is the law of ``L`` (see :func:`psg_eval`).  Gauss-Legendre (16 points) on equal
    panels of width ``<= min(sd, 1)`` (the density's scale and ``g``'s strip of analyticity
    ``|Im l| < pi``), restricted to ``[-v/2 - 40 sd, v/2 + 40 sd]`` (outside: mass below
    ``e^-800``).  Returns ``(I1, d1, r1, I2, d2, r2)``: the integrals, the summed panel
    disagreements ``|I_16 - I_8|`` with the 8-point rule and bounds on the round-off of the
    sums, ``(panels + 40) u sum |terms|`` (16 terms per panel, then the panel values; a few
    roundings per term in ``g`` and the density).
    """
    (x16, w16), (x8, w8) = _GL16, _GL8
    if _core is not None and _leaf is not None:
        return _leaf.psg_moments(float(l_lo), float(l_hi), float(q), float(v), float(sd), bool(remove),
                                 x16, w16, x8, w8)
    if not (0 < q < 1 and v > 0 and sd > 0) or math.isnan(l_lo) or math.isnan(l_hi):
        raise ValueError("psg_moments: invalid argument")
    h = v / 2
    lo, hi = max(-h - 40 * sd, l_lo), min(h + 40 * sd, l_hi)
    if not hi > lo:
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    npan = max(1, math.ceil((hi - lo) / min(sd, 1.0)))
    step = (hi - lo) / npan
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


def have_leaf() -> bool:
    """Whether the fused leaf kernels (:func:`psg_window`, :func:`psg_leaf`) are available (they have no
    numpy version here: their references are :func:`fastpld.discretize._psg_window` and
    :func:`fastpld.discretize._discretize_continuous`)."""
    return _core is not None and _leaf is not None


def _psg_quantiles(q: float, remove: bool, tail: float):
    """``(z1, z2, has_hi)`` of the compiled window (``fpld_psg_window``): scipy's normal quantiles at the
    tail over each mixture component's weight, as :func:`fastpld.discretize._psg_window` takes them."""
    if remove:
        z1 = float(special.ndtri(tail / (1 - q)))
        has_hi = tail < q
        z2 = float(special.ndtri(tail / q)) if has_hi else 0.0
    else:
        z1, z2, has_hi = float(special.ndtri(tail)), 0.0, True
    return z1, z2, has_hi


def psg_window(q: float, v: float, sd: float, remove: bool, tail: float, steps: np.ndarray):
    """:func:`fastpld.discretize._psg_window` compiled (same arithmetic): ``(a, b)`` or ``None``.

    The normal quantiles come from scipy's ``ndtri`` as there; the rest is one compiled call.
    """
    return _leaf.psg_window(q, v, sd, remove, tail, *_psg_quantiles(q, remove, tail), steps)


def psg_leaf(q: float, v: float, sd: float, remove: bool, cre: float, lat: float, h: float, i_lo: int, i_hi: int,
             levels):
    """Algorithm 1 for the subsampled Gaussian on buckets ``i_lo..i_hi`` in one compiled call.

    ``levels``: ``(c, threshold)`` per coarse level (decreasing ``c``, filtered as in
    :func:`fastpld.discretize._coarse_cells`).  Returns ``(probs, (ref, mu, widen, tv, mean_err,
    truncated, total, pc3, pc9, pc27, pc81, cells))`` (``pcC``: the summed masses of the cells of
    size ``C``) or ``None`` (the caller runs the numpy code).
    """
    (x16, w16), (x8, w8) = _GL16, _GL8
    return _leaf.psg_leaf(q, v, sd, remove, cre, lat, h, i_lo, i_hi, levels, x16, w16, x8, w8)


def psg_leaf_full(q: float, v: float, sd: float, remove: bool, cre: float, tail: float, steps: np.ndarray,
                  lattice: float, h: float, max_buckets: int, levels):
    """Window and leaf of the subsampled Gaussian in one compiled call (``_leaf.psg_leaf_full``):
    ``(probs, offset, coupling_range, tv, bias, truncated, mix, mu, slack)`` or ``None`` (the caller
    runs :func:`fastpld.discretize._discretize_continuous`'s own code).  ``levels``: ``(c, threshold)``
    of the coarse levels with ``threshold > tail``, decreasing ``c``."""
    z1, z2, has_hi = _psg_quantiles(q, remove, tail)
    (x16, w16), (x8, w8) = _GL16, _GL8
    return _leaf.psg_leaf_full(q, v, sd, remove, cre, tail, z1, z2, has_hi, steps, lattice, h,
                               min(int(max_buckets), 1 << 62), levels, x16, w16, x8, w8)


def psg_mean_sq(q: float, v: float, sd: float, remove: bool):
    """``(I1, I2)`` of :func:`psg_moments` over the whole line (``E[g]``, ``E[g^2]``), bitwise its values.

    The compiled kernel skips the 8-point check and the round-off sums that :meth:`mean` and
    :meth:`std` do not use (the planner asks for them for every part of a long schedule).
    """
    if _core is not None and _leaf is not None and hasattr(_leaf, "psg_moments16"):
        return _leaf.psg_moments16(-math.inf, math.inf, float(q), float(v), float(sd), bool(remove), *_GL16)
    r = psg_moments(-math.inf, math.inf, q, v, sd, remove)
    return r[0], r[3]


def pmf_moments(p: np.ndarray, cen: float):
    """``(total, mean, variance)`` of the weights ``p`` on the indices ``i - cen``."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.pmf_moments(p, float(cen))
    idx = np.arange(p.size, dtype=np.float64) - cen
    tot = float(p.sum())
    if not tot > 0:
        raise ValueError("pmf_moments: no positive probability mass")
    mu = float(np.dot(idx, p) / tot)
    return tot, mu, float(np.dot((idx - mu) ** 2, p) / tot)


def mean_index(p: np.ndarray, compiled: bool = True) -> float:
    """``sum_i i p_i / sum_i p_i`` of float64 weights (the compiled kernel sums in index order;
    ``compiled=False``: the numpy expression, as the numpy backend's nodes use it)."""
    if compiled and _core is not None and p.dtype == np.float64 and p.flags.c_contiguous:
        return _core.mean_index(p)
    # (no np.dot: a BLAS dot wakes OpenBLAS's threads, milliseconds per call on a busy machine)
    return float(np.sum(np.arange(p.size, dtype=np.float64) * p) / p.sum())


def log_mgf_grid(p: np.ndarray, cen: float, s: np.ndarray, m: float, K: np.ndarray) -> None:
    """``K += m * log(sum_i p_i exp(s (i - cen)))`` for every ``s`` (in place)."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    s = np.ascontiguousarray(s, dtype=np.float64)
    if _core is not None:
        _core.log_mgf_grid(p, float(cen), s, float(m), K)
        return
    if not (p > 0).any():
        raise ValueError("log_mgf_grid: no positive probability mass")
    idx = np.arange(p.size, dtype=np.float64) - cen
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    M = s[:, None] * idx[None, :] + logp[None, :]
    mx = M.max(axis=1)
    K += m * (mx + np.log(np.exp(M - mx[:, None]).sum(axis=1)))


def log_binomial_moments(lm: np.ndarray, lf: np.ndarray, lq1: float, lq: float, orders: np.ndarray) -> np.ndarray:
    """``out[r] = log sum_{j <= a} exp(lf[a+1] - lf[j+1] - lf[a-j+1] + (a-j) lq1 + j lq + lm[j])``, ``a = orders[r]``.

    The binomial Renyi moments of :func:`fastpld.mechanisms._log_binomial_moment`
    (``lm[j] = log E_P[e^(j L)]``, ``lf[i] = log((i-1)!)``, ``lq1 = log(1-q)``, ``lq = log q``).
    """
    lm = np.ascontiguousarray(lm, dtype=np.float64)
    lf = np.ascontiguousarray(lf, dtype=np.float64)
    orders = np.ascontiguousarray(orders, dtype=np.int64)
    if _core is not None:
        return _core.log_binomial_moments(lm, lf, float(lq1), float(lq), orders)
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
    """Chord bound ``(1 - w) Kb(a) + w Kb(a + 1)`` (``Kb(a)`` alone where ``w = 0``) at ``a = floor(x) + shift``,
    ``w = x - floor(x)``, with ``Kb`` the sums of :func:`log_binomial_moments`; ``memo`` (NaN = not yet
    computed, one entry per order, as many as ``lm``) caches ``Kb`` and is filled in place."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if _core is not None:
        return _core.binomial_chord(x, int(shift), lm, lf, float(lq1), float(lq), memo)
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
    """``(lo, up)`` with ``up = min_i (c kp_i - lt) / s_i`` and ``lo = -min_i (c kn_i - lt) / s_i``.

    The planner's Chernoff quantiles (:func:`fastpld.compose._chernoff_quantiles`): ``+inf``
    entries drop out of the minimum; a NaN side (or an empty grid) gives ``-inf`` / ``+inf``.
    """
    kp = np.ascontiguousarray(kp, dtype=np.float64)
    kn = np.ascontiguousarray(kn, dtype=np.float64)
    s = np.ascontiguousarray(s, dtype=np.float64)
    if _core is not None:
        return _core.chernoff_quantiles(kp, kn, s, float(c), float(lt))
    if s.size == 0:
        return -math.inf, math.inf
    with np.errstate(invalid="ignore", over="ignore"):
        up = float(np.min((c * kp - lt) / s))
        lo = -float(np.min((c * kn - lt) / s))
    return (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(up) else up)


def chernoff_window(ps, cens, ms, srel: np.ndarray, refine: np.ndarray, w: float):
    """Window ``(lo, hi, sp, Kp, sn, Kn)`` of :func:`fastpld.compose._chernoff_window` in one
    compiled call (its coarse-to-fine search, the same kernels and arithmetic), or ``None``
    without the compiled core or for more than 64 inputs (the caller then runs the search itself)."""
    if _core is None or not 0 < len(ps) <= 64:
        return None
    return _core.chernoff_window([np.ascontiguousarray(p, dtype=np.float64) for p in ps], [float(c) for c in cens],
                                 [float(m) for m in ms], np.ascontiguousarray(srel, dtype=np.float64),
                                 np.ascontiguousarray(refine, dtype=np.float64), float(w))


def fold(p: np.ndarray, cen: int, out: np.ndarray) -> None:
    """Circular placement into ``out`` (any float dtype): ``out[:] = 0; out[(i - cen) mod N] += p[i]``."""
    if _core is not None and p.dtype in (np.float64, np.longdouble) and p.flags.c_contiguous:
        _core.fold(p, int(cen), out)
        return
    N = out.size
    out[:] = 0
    np.add.at(out, (np.arange(p.size) - cen) % N, p.astype(out.dtype))


def split(p: np.ndarray, offset: float, mesh_in: float, mesh_out: float, dtype):
    """Mean-preserving split of atoms at ``offset + i mesh_in`` onto the lattice ``mesh_out Z``.

    Returns ``(out, j0, tmax)``: masses at ``(j0 + k) mesh_out`` in ``dtype`` and
    ``max |offset + i mesh_in| / mesh_out`` (for the bias bound).
    """
    n = p.size
    t0 = offset / mesh_out
    t1 = (offset + mesh_in * float(n - 1)) / mesh_out
    j0 = int(math.floor(t0))
    m = int(math.floor(t1)) - j0 + 2
    tmax = max(abs(t0), abs(t1))
    if _core is not None and p.dtype in (np.float64, np.longdouble) and p.flags.c_contiguous:
        out = np.empty(m, dtype=dtype)
        _core.split(p, float(offset), float(mesh_in), float(mesh_out), j0, out, np.empty(m, dtype=dtype))
        return out, j0, tmax
    t = (offset + mesh_in * np.arange(n, dtype=np.float64)) / mesh_out
    j = np.floor(t)
    theta = (t - j).astype(dtype)
    jj = j.astype(np.int64) - j0
    pd = p.astype(dtype, copy=False)
    out = np.zeros(m, dtype=dtype)
    np.add.at(out, jj, pd * (1 - theta))
    up = np.zeros(m, dtype=dtype)
    np.add.at(up, jj + 1, pd * theta)
    return out + up, j0, tmax


# --------------------------------------------------------------------------------------
# Direct DFT of inputs with few buckets (compose._run_node, docs/roundoff.md section 3e)
# --------------------------------------------------------------------------------------
# Per component, every table entry is within 6 u of cos / sin of 2 pi r / N: the reduced angle
# phi = (pi/2) a / N, |phi| <= pi/4, carries 3 roundings (<= 3.01 u |phi| <= 2.4 u absolute) and
# cosl / sinl at most 2 ulp (<= 4 u |value| <= 2.9 u for sin's values <= 0.71, <= 2 u for cos's
# values in [0.71, 1)); quarter turns are exact swaps and negations.  Float64 tables are the long
# double ones rounded (within u64 of the exact values), not numpy's float64 sin / cos (whose SIMD
# versions may err by up to 4 ulp).
DFT_TABLE_ERR = 6.0
# tables are kept in the process-wide store (fastpld.resources, least recently used first out): a long
# double table of a 6k-point node costs ~1 ms of cosl / sinl and ~190 kB
_DFT_TABLES = None  # the store's region, made on first use


def _nbytes(v):
    return sum(a.nbytes for a in (v if isinstance(v, tuple) else (v,)))


def _dft_region():
    global _DFT_TABLES
    if _DFT_TABLES is None:
        from . import resources
        _DFT_TABLES = resources.region("dft_tables")
    return _DFT_TABLES


def _dft_cache_put(key, value):
    _dft_region().put(key, value, _nbytes(value))


def _dft_cache_get(key):
    return _dft_region().get(key)


_HALF_PI_LD = np.longdouble("1.57079632679489661923132169163975144")


def _reduced_angles(n: int, M: int):
    """``(q, phi)`` for ``2 pi r / M``, ``r = 0 .. n-1``: the nearest quarter turn ``q`` (mod 4; integers,
    exact) and the long double angle ``phi = (pi/2) (4 r - q M) / M`` in ``[-pi/4, pi/4]`` (three roundings)."""
    ld = np.dtype(np.longdouble)
    r = np.arange(n, dtype=np.int64)
    q = (4 * r + M // 2) // M
    phi = ((4 * r - q * M).astype(ld) * _HALF_PI_LD) / ld.type(M)
    return q & 3, phi


def dft_table(N: int, dtype):
    """``(c, s)``: ``cos`` and ``sin`` of ``2 pi r / N`` for ``r = 0 .. N-1`` in ``dtype`` (kept within
    :func:`fastpld.set_cache_limit`).  Each entry comes from an angle reduced to ``[-pi/4, pi/4]`` exactly
    (integer quarter turns), so it is within ``DFT_TABLE_ERR`` u of the exact value."""
    dt = np.dtype(dtype)
    key = (int(N), dt.char)
    t = _dft_cache_get(key)
    if t is not None:
        return t
    if dt != np.longdouble:
        c, s = (x.astype(dt) for x in dft_table(N, np.longdouble))
    else:
        q, phi = _reduced_angles(N, N)
        cp, sp = np.cos(phi), np.sin(phi)
        c = np.select([q == 0, q == 1, q == 2], [cp, -sp, -cp], sp).astype(dt)
        s = np.select([q == 0, q == 1, q == 2], [sp, cp, -sp], -cp).astype(dt)
    c.setflags(write=False)
    s.setflags(write=False)
    _dft_cache_put(key, (c, s))
    return c, s


def dft_order(p: np.ndarray, cen: int, N: int, dtype):
    """``(q, steps, err)`` for :func:`small_dft`: the non-zero masses in ascending order (in ``dtype``),
    their offsets ``(j - cen) mod N`` and the bound ``err`` on ``|X~_k - X_k|`` at every frequency, in
    units of ``u`` (of ``dtype``).

    Summing in ascending order keeps the partial sums small until the largest masses come: a
    sequential sum of products errs by at most ``u (sum |t_i| + sum_(i >= 2) |s_i|)`` per component
    (first order; ``1.01`` covers the rest), with ``|s_i| <= P_i`` (ascending partial sums of
    ``p``, table entries <= 1); the table adds ``DFT_TABLE_ERR u p_j`` and the cast of ``p`` into
    ``dtype`` ``u p_j``; the complex modulus is at most ``sqrt 2`` times the componentwise bound.
    """
    p = np.asarray(p)
    nz = np.flatnonzero(p)  # zero buckets add nothing (sparse inputs: the atoms of pure DP)
    order = nz[np.argsort(p[nz], kind="stable")]
    q = np.ascontiguousarray(p[order], dtype=dtype)
    steps = np.ascontiguousarray((order.astype(np.int64) - int(cen)) % int(N))
    pf = np.asarray(p[order], dtype=np.float64)
    P = np.cumsum(pf)
    S = float(P[-1]) if P.size else 0.0
    err = math.sqrt(2.0) * (1.01 * (S + float(np.sum(P[1:]))) + (DFT_TABLE_ERR + 1.0) * S) * (1 + 1e-9)
    return q, steps, err


def small_dft(q: np.ndarray, steps: np.ndarray, N: int, out: np.ndarray) -> np.ndarray:
    """``out[k] = sum_j q_j e^(-2 pi i k steps_j / N)``, ``k = 0 .. N//2`` (an ``rfft`` of the folded input),
    summed sequentially over ``j`` in the given order, in ``out``'s precision (``q``'s dtype is its
    real part's).  ``n F`` operations: for inputs of a few buckets in a long FFT (error bound in
    :func:`dft_order`)."""
    c, s = dft_table(N, q.dtype)
    F = N // 2 + 1
    if _core is not None:
        _core.small_dft(q, steps, c, s, out.view(q.dtype))
        return out
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


# Relative error of every table entry (for the lattice spectra, which need it near zeros): an entry is
# +-sinl(phi) or +-cosl(phi) of the reduced angle, |phi| <= pi/4 with relative error 3.01 u; sin moves
# by at most 3.01 u (phi / sin phi) <= 3.35 u relative, cos by at most 3.01 u (pi/4) tan(phi) <= 2.4 u
# relative; libm adds 2 ulp <= 4 u relative.  (Float64 tables: the long double values rounded, u64.)
DFT_TABLE_REL = 7.5


def sin2_table(N: int, dtype):
    """``sin(pi r / N)^2`` for ``r = 0 .. N-1`` in ``dtype``, relatively accurate (``2 DFT_TABLE_REL + 1`` u):
    the squares of the sines :func:`dft_table` ``(2 N)`` would hold, computed alone (cached with it)."""
    dt = np.dtype(dtype)
    key = (int(N), dt.char, "s2")
    t = _dft_cache_get(key)
    if t is not None:
        return t
    # sin(2 pi r / (2N)) as in dft_table(2 N): +-sin or +-cos of the reduced angle by the quarter turn
    # (the sign goes in the square)
    q, phi = _reduced_angles(N, 2 * N)
    odd = (q & 1).astype(bool)
    v = np.empty(N, dtype=np.longdouble)
    v[odd] = np.cos(phi[odd])
    v[~odd] = np.sin(phi[~odd])
    t = (v * v).astype(dt)  # (float64: the long double square rounded once more, inside the bound)
    t.setflags(write=False)
    _dft_cache_put(key, t)
    return t


def table_sum(w: np.ndarray, steps: np.ndarray, tab: np.ndarray, F: int) -> np.ndarray:
    """``out[k] = sum_j w_j tab[(k steps_j) mod N]`` for ``k < F`` (``N = len(tab)``), in ``w``'s precision."""
    w = np.ascontiguousarray(w)
    steps = np.ascontiguousarray(steps, dtype=np.int64)
    tab = np.ascontiguousarray(tab, dtype=w.dtype)
    out = np.empty(F, dtype=w.dtype)
    if _core is not None:
        _core.table_sum(w, steps, tab, out)
        return out
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


def spectrum_terms(X, m, logmag, phase, quarter, lr64, lrg64, ph64, g, first, dead=None, rdead=0.0) -> None:
    """Accumulate ``m log|X|``, ``m psi`` (in ``X``'s precision; ``arg X = psi + q pi/2``,
    :func:`quarter_angle`), ``quarter += m q (mod 4)`` and the float64 terms of the round-off bound
    (``log|X|``, ``log(|X| + g)``, ``psi``) for one input spectrum.

    The compiled kernel marks frequencies with ``|X| < rdead`` in ``dead`` and skips them (the
    numpy version computes every frequency and leaves ``dead`` at 0: the bounds differ by the skip
    charges, at most 1e-6 of the node's round-off allowance).
    """
    if dead is None:
        dead = np.zeros(X.shape[0], dtype=np.uint8)
        rdead = 0.0
    mq = int(m) % 4
    if _core is not None:
        _core.spectrum_terms(X, float(m), logmag, phase, lr64, lrg64, ph64, float(g), bool(first), dead, float(rdead),
                             quarter, mq)
        return
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


_EMPTY = np.zeros(0)


def power_fp(logmag, phase, quarter, LR, LRG, PH, ms, g, u, N, Pc, K=0, lp_low=None, amp_low=None, dead=None):
    """Write the polar power ``exp(logmag) e^(i phase) i^quarter`` into ``Pc``; return the weighted sums
    ``(sum_k w_k amp_k^2, sum_k w_k P_k^2)`` of the round-off bound of :func:`fastpld.compose._fp_fft_bound`.

    For ``k < K`` the bound terms are ``amp_low[k]`` and ``exp(lp_low[k])`` (the accurate
    low-frequency series of :func:`fastpld.compose._series_spectrum`).
    """
    ms = np.ascontiguousarray(ms, dtype=np.float64)
    lp_low = _EMPTY if lp_low is None else np.ascontiguousarray(lp_low, dtype=np.float64)
    amp_low = _EMPTY if amp_low is None else np.ascontiguousarray(amp_low, dtype=np.float64)
    if dead is None:
        dead = np.zeros(logmag.shape[0], dtype=np.uint8)
    if _core is not None:
        return _core.power_fp(logmag, phase, LR, LRG, PH, ms, float(g), float(u), int(N), Pc, int(K), lp_low,
                              amp_low, dead, quarter)
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
        # polar-power rounding, every maths-library call within 4 ulp (compose._polar_rel)
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


SERIES_BLOCK = 16  # the compiled pairwise sum's block length (enters the error bound)


def series_moments(p: np.ndarray, cen: int, d: float, R1: int, native: bool = True) -> np.ndarray:
    """Scaled power moments ``M_r = sum_j p_j ((j - cen) / d)^r``, ``r < R1``, in long double.

    ``d`` is a power of two, so the scaling is exact.  Summation is pairwise: every term
    takes part in at most ``ceil(log2 n) + SERIES_BLOCK`` additions in either
    implementation, and the powers in ``r`` roundings, so
    ``|M~_r - M_r| <= gamma_(r + ceil(log2 n) + SERIES_BLOCK + 1) sum_j p_j |s_j|^r`` (long double ``u``).
    ``M_0`` and ``M_1`` are compensated (Sum2 of the exact terms ``p_j`` and of ``p_j s_j`` split
    into exact halves): ``|M~_r - M_r| <= u |M_r| + gamma_(2n)^2 sum_j p_j |s_j|^r``.
    """
    out = np.empty(R1, dtype=np.longdouble)
    if native and _core is not None and p.dtype in (np.float64, np.longdouble) and p.flags.c_contiguous:
        _core.series_moments(p, int(cen), float(d), out)
        return out
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


def series_eval(a: np.ndarray, cerr: np.ndarray, step, rho: float, fact_r1: float, K: int, native: bool = True):
    """``(re, im, dz)`` of the low-frequency series at ``phi_k = k step``, ``k < K`` (see ``_core.series_eval``).

    ``a`` (float64 or long double, length ``R + 1``, ``R`` even) are the coefficients, ``cerr``
    their error weights; the evaluation runs in ``a``'s precision.
    """
    W = a.dtype.type
    re = np.empty(K, dtype=a.dtype)
    im = np.empty(K, dtype=a.dtype)
    dz = np.empty(K)
    cerr = np.ascontiguousarray(cerr, dtype=np.float64)
    if native and _core is not None and a.dtype in (np.float64, np.longdouble):
        _core.series_eval(np.ascontiguousarray(a), cerr, np.array([step], dtype=a.dtype), float(rho), float(fact_r1),
                          re, im, dz)
        return re, im, dz
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
