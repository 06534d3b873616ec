"""Kernel dispatch: the compiled core when built, the numpy reference otherwise.

Each function here converts its arguments once, then runs the Cython/C kernel of :mod:`fastpld._core`
(or :mod:`fastpld._leaf`, the subsampled Gaussian's) when it is available and otherwise the function
of the same name in :mod:`fastpld._reference`, with the same results up to the order of floating-point
summation.  ``FASTPLD_PURE_PYTHON=1`` forces the references (as msgpack does); tests also set
``_kernels._core = None`` (or ``_kernels._leaf = None``) to run them in-process, so both paths stay
tested.  A few kernels exist only compiled (:func:`psg_window`, :func:`psg_leaf`, :func:`psg_leaf_full`,
:func:`chernoff_window`, :func:`gauss_pair_moments`): they return ``None`` or are guarded by
:func:`have_leaf`, and their callers run their own numpy code.  The cosine tables that both paths read
are in :mod:`fastpld._dft_tables`.

The node kernels of the ``native`` backend (:func:`finish_node`, :func:`lattice_power`,
:func:`power_direct`, :func:`power_direct_bound`, :func:`lattice_terms`, :func:`series_input`) are
compiled only: the ``numpy`` backend runs their reference code in :mod:`fastpld.composition` itself
(``lattice``, ``powers``, ``node``, ``series``).
"""
from __future__ import annotations

import math
import os

import numpy as np

from . import _reference
from ._dft_tables import DFT_TABLE_ERR, DFT_TABLE_REL, dft_order, dft_table, sin2_table  # noqa: F401 (re-exported)
from ._lazy import lazy_module
from ._reference import (  # noqa: F401 (re-exported: compose and the tests read them here)
    _TWO_PI_LD,
    PSG_BIG_T,
    polar_power,
    quarter_angle,
    subsampled_ginv,
    turn_quarters,
)

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


def discounted_rcumsum(p: np.ndarray, factor: float) -> np.ndarray:
    """``out[j] = sum_{i >= j} p[i] factor^(i - j)``."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.discounted_rcumsum(p, float(factor))
    return _reference.discounted_rcumsum(p, factor)


def query_tables(p: np.ndarray, factor: float):
    """``(S1, T, dgrid)`` of :class:`fastpld.curve._Query`.

    ``S1[j] = sum_{i >= j} p_i``, ``T[j] = sum_{i >= j} p_i factor^(i-j)`` (both with a
    trailing 0) and ``dgrid[j] = max(S1[j+1] - factor T[j+1], 0)``.
    """
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.query_tables(p, float(factor))
    return _reference.query_tables(p, factor)


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
    return _reference.delta_bounds(p, v0, h, S1, T, padc, es, ds, pinf, eps)


def bucket_masses(F: np.ndarray, S: np.ndarray, split: int):
    """Bucket masses of Algorithm 1 from CDF/SF values at the ``n + 1`` edges: ``(q, total)``.

    CDF differences below bucket ``split - 1``, survival differences above it,
    the straddling bucket by complement; clipped at 0 (``q`` not normalised).
    """
    F = np.ascontiguousarray(F, dtype=np.float64)
    S = np.ascontiguousarray(S, dtype=np.float64)
    if _core is not None:
        return _core.bucket_masses(F, S, int(split))
    return _reference.bucket_masses(F, S, split)


def normalise_mean(q: np.ndarray, total: float):
    """``(q / total, sum_i i q_i / total)``."""
    q = np.array(q, dtype=np.float64)
    if _core is not None:
        mi = _core.normalise_mean(q, float(total))
        return q, mi
    return _reference.normalise_mean(q, total)


def leaf_roundoff(F, S, dens, tau: float, c0: float, limit: float):
    """``(widen, tv)``: edges whose movement ``(tau min(F, S) + c0) / (dens / 2)`` is at most
    ``limit`` widen the coupling range by twice the largest movement; the others are charged
    to total variation."""
    F = np.ascontiguousarray(F, dtype=np.float64)
    S = np.ascontiguousarray(S, dtype=np.float64)
    dens = np.ascontiguousarray(dens, dtype=np.float64)
    if _core is not None:
        return _core.leaf_roundoff(F, S, dens, float(tau), float(c0), float(limit))
    return _reference.leaf_roundoff(F, S, dens, tau, c0, limit)


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
    return _reference.psg_eval(t, q, v, sd, remove, want_pdf)


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
    return _reference.psg_moments(l_lo, l_hi, q, v, sd, remove, x16, w16, x8, w8)


def psg_mean_sq(q: float, v: float, sd: float, remove: bool):
    """``(I1, I2)`` of :func:`psg_moments` over the whole line (``E[g]``, ``E[g^2]``), bitwise its values.

    The compiled kernel skips the 8-point check and the round-off sums that :meth:`mean` and
    :meth:`std` do not use (the planner asks for them for every part of a long schedule).
    """
    if _core is not None and _leaf is not None and hasattr(_leaf, "psg_moments16"):
        return _leaf.psg_moments16(-math.inf, math.inf, float(q), float(v), float(sd), bool(remove), *_GL16)
    r = psg_moments(-math.inf, math.inf, q, v, sd, remove)
    return r[0], r[3]


def gauss_pair_moments(v: float, sd: float, q: float, remove: bool):
    """``(mean, std)`` of the subsampled Gaussian's loss by the compiled quadrature (``_core.gauss_pair_moments``,
    16-point Gauss-Legendre), or ``None`` without the compiled core: its numpy counterpart,
    :meth:`fastpld.mechanisms.SubsampledLoss._pair_moments`, differs in the last bits, so callers keep the
    two apart (any centre and scale give a valid truncation window)."""
    if _core is None:
        return None
    return _core.gauss_pair_moments(float(v), float(sd), float(q), bool(remove), *_GL16)


def have_leaf() -> bool:
    """Whether the fused leaf kernels (:func:`psg_window`, :func:`psg_leaf`) are available (they have no
    numpy version here: their references are :func:`fastpld.discretize._psg_window` and
    :func:`fastpld.discretize._discretize_continuous`)."""
    return _core is not None and _leaf is not None


def ndtri(p: float) -> float:
    """The standard normal quantile at ``p`` as ``scipy.special.ndtri`` gives it (``-inf`` at 0, ``inf`` at 1,
    ``nan`` outside), from the standard library (Wichura's AS241, ~1e-16 relative): only the windows' starting
    points take it (their ends are checked on the computed CDF), and scipy.special's import cost ~100 ms of a
    process's first composition."""
    p = float(p)
    if 0.0 < p < 1.0:
        from statistics import NormalDist
        return NormalDist().inv_cdf(p)
    return -math.inf if p == 0.0 else (math.inf if p == 1.0 else math.nan)


def _psg_quantiles(q: float, remove: bool, tail: float):
    """``(z1, z2, has_hi)`` of the compiled window (``fpld_psg_window``): the normal quantiles (:func:`ndtri`) at
    the tail over each mixture component's weight, as :func:`fastpld.discretize._psg_window` takes them."""
    if remove:
        z1 = ndtri(tail / (1 - q))
        has_hi = tail < q
        z2 = ndtri(tail / q) if has_hi else 0.0
    else:
        z1, z2, has_hi = ndtri(tail), 0.0, True
    return z1, z2, has_hi


def psg_window(q: float, v: float, sd: float, remove: bool, tail: float, steps: np.ndarray):
    """:func:`fastpld.discretize._psg_window` compiled (same arithmetic): ``(a, b)`` or ``None``.

    The normal quantiles come from :func:`ndtri` as there; the rest is one compiled call.
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


def pmf_moments(p: np.ndarray, cen: float):
    """``(total, mean, variance)`` of the weights ``p`` on the indices ``i - cen``."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.pmf_moments(p, float(cen))
    return _reference.pmf_moments(p, cen)


def mean_index(p: np.ndarray, compiled: bool = True) -> float:
    """``sum_i i p_i / sum_i p_i`` of float64 weights (the compiled kernel sums in index order;
    ``compiled=False``: the numpy expression, as the numpy backend's nodes use it)."""
    if compiled and _core is not None and p.dtype == np.float64 and p.flags.c_contiguous:
        return _core.mean_index(p)
    return _reference.mean_index(p)


def log_mgf_grid(p: np.ndarray, cen: float, s: np.ndarray, m: float, K: np.ndarray) -> None:
    """``K += m * log(sum_i p_i exp(s (i - cen)))`` for every ``s`` (in place)."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    s = np.ascontiguousarray(s, dtype=np.float64)
    if _core is not None:
        _core.log_mgf_grid(p, float(cen), s, float(m), K)
        return
    _reference.log_mgf_grid(p, cen, s, m, K)


def log_binomial_moments(lm: np.ndarray, lf: np.ndarray, lq1: float, lq: float, orders: np.ndarray) -> np.ndarray:
    """``out[r] = log sum_{j <= a} exp(lf[a+1] - lf[j+1] - lf[a-j+1] + (a-j) lq1 + j lq + lm[j])``, ``a = orders[r]``.

    The binomial Renyi moments of :func:`fastpld.mechanisms.pairs._log_binomial_moment`
    (``lm[j] = log E_P[e^(j L)]``, ``lf[i] = log((i-1)!)``, ``lq1 = log(1-q)``, ``lq = log q``).
    """
    lm = np.ascontiguousarray(lm, dtype=np.float64)
    lf = np.ascontiguousarray(lf, dtype=np.float64)
    orders = np.ascontiguousarray(orders, dtype=np.int64)
    if _core is not None:
        return _core.log_binomial_moments(lm, lf, float(lq1), float(lq), orders)
    return _reference.log_binomial_moments(lm, lf, lq1, lq, orders)


def binomial_chord(x: np.ndarray, shift: int, lm: np.ndarray, lf: np.ndarray, lq1: float, lq: float,
                   memo: np.ndarray) -> np.ndarray:
    """Chord bound ``(1 - w) Kb(a) + w Kb(a + 1)`` (``Kb(a)`` alone where ``w = 0``) at ``a = floor(x) + shift``,
    ``w = x - floor(x)``, with ``Kb`` the sums of :func:`log_binomial_moments`; ``memo`` (NaN = not yet
    computed, one entry per order, as many as ``lm``) caches ``Kb`` and is filled in place."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if _core is not None:
        return _core.binomial_chord(x, int(shift), lm, lf, float(lq1), float(lq), memo)
    return _reference.binomial_chord(x, shift, lm, lf, lq1, lq, memo)


def chernoff_quantiles(kp: np.ndarray, kn: np.ndarray, s: np.ndarray, c: float, lt: float):
    """``(lo, up)`` with ``up = min_i (c kp_i - lt) / s_i`` and ``lo = -min_i (c kn_i - lt) / s_i``.

    The planner's Chernoff quantiles (:func:`fastpld.composition.grids._chernoff_quantiles`): ``+inf``
    entries drop out of the minimum; a NaN side (or an empty grid) gives ``-inf`` / ``+inf``.
    """
    kp = np.ascontiguousarray(kp, dtype=np.float64)
    kn = np.ascontiguousarray(kn, dtype=np.float64)
    s = np.ascontiguousarray(s, dtype=np.float64)
    if _core is not None:
        return _core.chernoff_quantiles(kp, kn, s, float(c), float(lt))
    return _reference.chernoff_quantiles(kp, kn, s, c, lt)


def chernoff_window(ps, cens, ms, srel: np.ndarray, refine: np.ndarray, w: float):
    """Window ``(lo, hi, sp, Kp, sn, Kn)`` of :func:`fastpld.composition.node._chernoff_window` in one
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
    _reference.fold(p, cen, out)


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
    return _reference.split(p, offset, mesh_in, mesh_out, dtype, j0, m), j0, tmax


def small_dft(q: np.ndarray, steps: np.ndarray, N: int, out: np.ndarray) -> np.ndarray:
    """``out[k] = sum_j q_j e^(-2 pi i k steps_j / N)``, ``k = 0 .. N//2`` (an ``rfft`` of the folded input),
    summed sequentially over ``j`` in the given order, in ``out``'s precision (``q``'s dtype is its
    real part's).  ``n F`` operations: for inputs of a few buckets in a long FFT (error bound in
    :func:`dft_order`)."""
    if _core is not None:
        c, s = dft_table(N, q.dtype)
        _core.small_dft(q, steps, c, s, out.view(q.dtype))
        return out
    return _reference.small_dft(q, steps, N, out)


def low_dft(p: np.ndarray, cen: int, N: int, c: np.ndarray, s: np.ndarray, m: float, g: float, tau: float, kmax: int,
            X: np.ndarray, native: bool = True, XL: np.ndarray | None = None) -> int:
    """The first ``K`` values of the forward spectrum ``X`` of ``p`` (placed at ``(j - cen) mod N``) summed directly
    in long double from the tables ``c, s`` of ``cos, sin(2 pi r / N)``; ``K``, returned, from 1 where the FFT's
    amplified error ``m g (|X_k| + g)^(m - 1)`` is at most ``tau``, at most ``kmax``
    (:mod:`fastpld._lowdft`); ``XL`` (``2 kmax`` long doubles) receives the sums before their rounding."""
    if native and _core is not None:
        return _core.low_dft(p, int(cen), int(N), c, s, float(m), float(g), float(tau), int(kmax), X, XL)
    return _reference.low_dft(p, int(cen), int(N), c, s, float(m), float(g), float(tau), int(kmax), X, XL)


def dft_at(p: np.ndarray, cen: int, N: int, c: np.ndarray, s: np.ndarray, k: int, native: bool = True) -> complex:
    """One value ``sum_j p_j (c_r - i s_r)``, ``r = k (j - cen) mod N``, of :func:`low_dft`'s spectrum, in float64."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    if native and _core is not None:
        return _core.dft_at(p, int(cen), int(N), c, s, int(k))
    return _reference.dft_at(p, int(cen), int(N), c, s, int(k))


def table_sum(w: np.ndarray, steps: np.ndarray, tab: np.ndarray, F: int) -> np.ndarray:
    """``out[k] = sum_j w_j tab[(k steps_j) mod N]`` for ``k < F`` (``N = len(tab)``), in ``w``'s precision."""
    w = np.ascontiguousarray(w)
    steps = np.ascontiguousarray(steps, dtype=np.int64)
    tab = np.ascontiguousarray(tab, dtype=w.dtype)
    out = np.empty(F, dtype=w.dtype)
    if _core is not None:
        _core.table_sum(w, steps, tab, out)
        return out
    return _reference.table_sum(w, steps, tab, F, out)


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
    _reference.spectrum_terms(X, m, logmag, phase, quarter, lr64, lrg64, ph64, g, first, dead, mq)


_EMPTY = np.zeros(0)


def power_fp(logmag, phase, quarter, LR, LRG, PH, ms, g, u, N, Pc, K=0, lp_low=None, amp_low=None, dead=None):
    """Write the polar power ``exp(logmag) e^(i phase) i^quarter`` into ``Pc``; return the weighted sums
    ``(sum_k w_k amp_k^2, sum_k w_k P_k^2)`` of the round-off bound of
    :func:`fastpld.composition.roundoff._fp_fft_bound`.

    For ``k < K`` the bound terms are ``amp_low[k]`` and ``exp(lp_low[k])`` (the accurate
    low-frequency series of :func:`fastpld.composition.series._series_spectrum`).
    """
    ms = np.ascontiguousarray(ms, dtype=np.float64)
    lp_low = _EMPTY if lp_low is None else np.ascontiguousarray(lp_low, dtype=np.float64)
    amp_low = _EMPTY if amp_low is None else np.ascontiguousarray(amp_low, dtype=np.float64)
    if dead is None:
        dead = np.zeros(logmag.shape[0], dtype=np.uint8)
    if _core is not None:
        return _core.power_fp(logmag, phase, LR, LRG, PH, ms, float(g), float(u), int(N), Pc, int(K), lp_low,
                              amp_low, dead, quarter)
    return _reference.power_fp(logmag, phase, quarter, LR, LRG, PH, ms, g, u, N, Pc, K, lp_low, amp_low)


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
    return _reference.series_moments(p, cen, d, R1, out)


def series_eval(a: np.ndarray, cerr: np.ndarray, step, rho: float, fact_r1: float, K: int, native: bool = True):
    """``(re, im, dz)`` of the low-frequency series at ``phi_k = k step``, ``k < K`` (see ``_core.series_eval``).

    ``a`` (float64 or long double, length ``R + 1``, ``R`` even) are the coefficients, ``cerr``
    their error weights; the evaluation runs in ``a``'s precision.
    """
    re = np.empty(K, dtype=a.dtype)
    im = np.empty(K, dtype=a.dtype)
    dz = np.empty(K)
    cerr = np.ascontiguousarray(cerr, dtype=np.float64)
    if native and _core is not None and a.dtype in (np.float64, np.longdouble):
        _core.series_eval(np.ascontiguousarray(a), cerr, np.array([step], dtype=a.dtype), float(rho), float(fact_r1),
                          re, im, dz)
        return re, im, dz
    return _reference.series_eval(a, cerr, step, rho, fact_r1, K, re, im, dz)


# --------------------------------------------------------------------------------------
# Node kernels of the native backend (compiled only: the numpy backend runs its own code)
# --------------------------------------------------------------------------------------
def _compiled(name: str):
    if _core is None:
        raise RuntimeError(f"the compiled kernel _core.{name} is unavailable (fastpld._core is not built)")
    return getattr(_core, name)


def finish_node(out, shift, floor_, trim, scale=1.0):
    """``_core.finish_node``: one pass over a node's output (roll, clip, trim, normalise); reference: the numpy
    steps of :func:`fastpld.composition.node._run_node`."""
    return _compiled("finish_node")(out, shift, floor_, trim, scale)


def lattice_power(L, Phi, Q, dL, dP, up, u, N, Pc):
    """``_core.lattice_power``: a lattice-spectrum node's power into ``Pc`` and its round-off sums; reference:
    ``composition.lattice._lattice_amp`` and ``composition.powers._lattice_power_numpy``."""
    return _compiled("lattice_power")(L, Phi, Q, dL, dP, up, u, N, Pc)


def power_direct(X, m, P, B, D, g, first, work=None, rdead=0.0, K=None, klow=0, rho=1.0, XL=None):
    """``_core.power_direct``: one input spectrum of a float64 node's direct power (forward error ``rho g`` below
    ``klow``, and there the powers of ``XL`` in long double: :mod:`fastpld._lowdft`); reference:
    ``composition.powers._direct_power``."""
    return _compiled("power_direct")(X, m, P, B, D, g, first, work, rdead, K, klow, rho, XL)


def power_direct_ld(X, m, P, B, D, g, first, rdead=0.0, K=None):
    """``_core.power_direct_ld``: one input spectrum of a long double node's direct power (``X``, ``P``: long
    double ``(re, im)`` interleaved); reference: ``composition.powers._direct_power``."""
    return _compiled("power_direct_ld")(X, m, P, B, D, g, first, rdead, K)


def power_direct_bound(B, D, g, msum, u, N, K=-1, klow=0, c1_low=0.0):
    """``_core.power_direct_bound``: the round-off sums of the direct powers (the products' rounding ``c1_low`` below
    ``klow``); reference: ``composition.powers._direct_power``."""
    return _compiled("power_direct_bound")(B, D, g, msum, u, N, K, klow, c1_low)


def lattice_terms(*args):
    """``_core.lattice_terms`` (same arguments): one input's terms of ``composition.lattice._lattice_spectrum``,
    its reference."""
    return _compiled("lattice_terms")(*args)


def series_input(*args):
    """``_core.series_input`` (same arguments): one input's low-frequency series terms; reference:
    ``composition.series._series_input``."""
    return _compiled("series_input")(*args)
