"""Certified answers in the terms of attacks: trade-off curves, TPR at FPR, Gaussian-DP mu, Renyi DP.

For one neighbouring direction the composed privacy loss is ``Y = log(A/B)``
drawn under ``A`` (``+inf`` with probability ``p_inf``); its privacy curve,
for every real ``eps``, is ``delta(eps) = sup_S A(S) - e^eps B(S)``.  The
trade-off function of the direction is the smallest type-II error of a test of
``H0: B`` against ``H1: A`` at type-I error ``alpha``,

    beta(alpha) = T(B, A)(alpha) = sup_{eps real} max(0, 1 - delta(eps) - e^eps alpha),

the convex-conjugate duality of f-DP and privacy curves (Dong, Roth, Su 2019,
Prop. 2.12; Zhu, Dong, Wang 2022).  Everything returned here is the minimum
over the directions fastpld composes (the worst ordered pair of neighbouring
datasets).  The certified bounds come from the same coupling certificate as
:meth:`fastpld.PrivacyLossDistribution.delta`: with the grid PMF ``Z`` and its
exact Neyman-Pearson curve ``T_Z`` (piecewise linear),

    (1 - p_inf) (T_Z(alpha e^eps_s / (1 - p_inf)) - delta_s) <= beta(alpha)
        <= (1 - p_inf) (T_Z(alpha e^-eps_s / (1 - p_inf)) + delta_s),

evaluated exactly (the sup over eps is attained at a grid point) and padded by
round-off.  The derivation is in ``docs/fdp.md``.  Renyi divergences come from
the mechanisms' log-MGFs (upper bounds, exact for Gaussian and discrete
mechanisms and for the subsampled Gaussian at integer orders) and from the
composed PMF (lower bound).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import _validation as V
from .curve import Bounds

from ._lazy import lazy_module

special = lazy_module("scipy.special")

__all__ = ["GDPResult", "gaussian_tradeoff", "tradeoff", "tpr", "advantage", "gdp_mu", "renyi", "attack_target"]

_U = np.finfo(np.float64).eps / 2


class GDPResult(NamedTuple):
    """The Gaussian-DP summary of a composed mechanism.

    Attributes
    ----------
    mu : Bounds
        Certified bounds on the smallest ``mu`` such that ``beta(alpha) >=
        G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu)`` for every ``alpha`` in
        ``alpha_range``.  ``mu.upper`` is a certified mu-GDP guarantee over that
        range; ``mu.upper = inf`` if none can be certified.
    alpha_range : tuple of float
        The type-I errors over which mu is taken.
    all_alpha : bool
        ``True`` if ``alpha_range`` is the whole ``[0, 1]`` (then mu-GDP in the
        sense of Dong, Roth and Su), ``False`` if it is a sub-range.
    binding_alpha : float
        Where the estimated curve comes closest to ``G_mu``: the alpha that
        decides mu.
    max_gap : float
        ``max beta_est(alpha) - G_{mu.estimate}(alpha)`` over the range (on the
        check grid: steps of 0.1% in alpha and in 1 - alpha): how far the curve lies
        above the Gaussian curve that summarises it (0 if the curve is Gaussian).
    gap_alpha : float
        Where ``max_gap`` is attained.
    """

    mu: Bounds
    alpha_range: tuple
    all_alpha: bool
    binding_alpha: float
    max_gap: float
    gap_alpha: float


def gaussian_tradeoff(mu: float, alpha) -> np.ndarray:
    """``G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu)``, the trade-off function of mu-GDP (vectorised)."""
    a = np.asarray(alpha, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        return special.ndtr(-special.ndtri(a) - mu)  # -ndtri(a) = Phi^-1(1 - a), accurate for small a


# --------------------------------------------------------------------------------------
# one direction: the Neyman-Pearson curve of the grid PMF
# --------------------------------------------------------------------------------------
class _Direction:
    """The trade-off curve ``T_Z`` of one direction's grid PMF, and the certified bounds on beta.

    The NP tests "reject when Z >= v_j" have ``a_j = sum_{i >= j} p_i e^{-v_i}``
    (type I, under B) and ``b_j = 1 - S1[j]`` (type II, under A); ``T_Z`` is
    their linear interpolation (randomised tests) and equals the sup over eps
    of ``1 - d_Z(eps) - e^eps a``, attained at ``eps = v_j`` on the piece
    ``[a_{j+1}, a_j]``:

        T_Z(a) = 1 - S1[j+1] - (e^{v_j} a - e^{-h} T[j+1]).

    ``a_j`` is held in log space (``log T[j] - v_j``): ``e^{-v_j}`` overflows.
    """

    def __init__(self, q, d):
        self.q = q
        self.es = float(d.eps_spent)
        self.ds = float(d.delta_spent)
        self.pinf = float(d.p_inf)
        n = q.n
        self.n = n
        self.v = q.values(np.arange(n, dtype=np.float64))
        with np.errstate(divide="ignore"):
            la = np.log(q.T) - q.values(np.arange(n + 1, dtype=np.float64))
        la[n] = -np.inf
        # non-increasing in exact arithmetic; make the computed one so (changes are within round-off)
        self.la = np.minimum.accumulate(la)
        self.f = math.exp(-q.h)
        # relative round-off of the cumulative sums S1 and T (as curve._Query)
        self.rs = 16 * (n + 8) * _U

    def _candidates(self, k):
        for off in (-2, -1, 0):
            yield np.clip(k + off, 0, self.n - 1)

    def tz(self, log_a, side):
        """``T_Z(a)`` before clipping at 0, rounded down (``side=-1``) or up (``+1``); vectorised over ``log a``.

        Round-off: ``1 - S1`` and the subtraction (a few ``u``), the sums
        (relative ``16 (n + 8) u`` of ``S1[j]``), and the exponent ``v_j + log a``
        (absolute ``u (|v_j| + |log a| + 2)``, relative to ``e^{v_j} a``), with
        the same again for a piece chosen from a rounded ``log a_j``.
        """
        q, la = self.q, self.la
        log_a = np.asarray(log_a, dtype=np.float64)
        lab = np.where(np.isfinite(log_a), np.abs(log_a), 0.0)
        # first k with la_k <= log a: the optimal piece is j = k - 1; try its neighbours too (a piece
        # chosen from a rounded la_k is at worst next to the right one; every piece gives a value <= T_Z)
        k = np.searchsorted(-la, -log_a, side="left")
        s0 = float(q.S1[0])
        best = np.full(log_a.shape, 1.0 - s0 + side * (8 * _U + self.rs * s0))  # a >= a_0: the eps -> -inf end
        for j in self._candidates(k):
            with np.errstate(over="ignore", invalid="ignore"):
                e = np.exp(self.v[j] + log_a)
                val = 1.0 - q.S1[j + 1] - (e - self.f * q.T[j + 1])
                pad = 8 * _U + self.rs * (q.S1[j] + e) + 32 * _U * (np.abs(self.v[j]) + lab + 2) * e
                val = val + side * pad
            best = np.maximum(best, np.where(np.isfinite(val), val, -np.inf))
        return best

    def bounds(self, alpha):
        """Certified ``(lower, estimate, upper)`` on this direction's ``beta(alpha)``."""
        alpha = np.asarray(alpha, dtype=np.float64)
        if self.pinf >= 1.0:
            z = np.zeros(alpha.shape)
            return z, z, z
        with np.errstate(divide="ignore"):
            lalpha = np.log(alpha)
        l1p = math.log1p(-self.pinf)
        m = 1.0 - self.pinf
        # log alpha has absolute error u |log alpha|: absorbed by the exponent term of the pad (x2)
        lo = (m * (self.tz(lalpha + self.es - l1p, -1) - self.ds)) * (1 - 8 * _U) - 4 * _U
        up = (m * (self.tz(lalpha - self.es - l1p, +1) + self.ds)) * (1 + 8 * _U) + 4 * _U
        lo = np.clip(lo, 0.0, 1.0)
        # every trade-off function has beta(alpha) <= 1 - alpha
        up = np.clip(np.minimum(up, (1.0 - alpha) + 2 * _U), 0.0, 1.0)
        est = np.clip(m * self.tz(lalpha - l1p, 0), lo, up)
        return lo, est, up

    def tz_inverse(self, b, side):
        """``T_Z^{-1}(b) = inf{a : T_Z(a) <= b}`` rounded down (``side=-1``) or up (``+1``), vectorised.

        ``T_Z^{-1}`` is convex and piecewise linear with vertices ``(b_j, a_j)``,
        ``b_j = 1 - S1[j]``; on ``[b_j, b_{j+1}]`` it is
        ``e^{-v_j} (e^{-h} T[j+1] + 1 - S1[j+1] - b)``.  Every piece's line lies
        below it, so the maximum over the pieces tried is a lower bound, and the
        right piece is among them (up to round-off, which is padded).
        """
        q = self.q
        b = np.asarray(b, dtype=np.float64)
        bv = np.maximum.accumulate(1.0 - q.S1)  # non-decreasing in exact arithmetic
        k = np.searchsorted(bv, b, side="right")
        best = np.full(b.shape, -np.inf)
        for j in self._candidates(k):
            w = self.f * q.T[j + 1] + (1.0 - q.S1[j + 1]) - b
            w = w + side * (8 * _U + self.rs * q.S1[j])
            with np.errstate(divide="ignore", invalid="ignore"):
                lw = np.log(np.maximum(w, 0.0)) - self.v[j]
            lw = lw + side * 32 * _U * (np.abs(self.v[j]) + np.where(np.isfinite(lw), np.abs(lw), 0.0) + 2)
            best = np.maximum(best, lw)
        with np.errstate(over="ignore"):
            a = np.exp(best)
        b_min = max(0.0, 1.0 - float(q.S1[0]))
        a = np.where(b >= 1.0, 0.0, a)
        # below the curve's floor no a reaches b (upper: +inf; lower: the floor is reached at a_0)
        a = np.where(b < b_min, np.inf if side > 0 else math.exp(self.la[0]), a)
        return a

    def inverse_bounds(self, y):
        """Certified ``(lower, upper)`` on ``T^{-1}(y)`` of this direction's true curve (vectorised in ``y``).

        ``T >= F`` with ``F(a) = m (T_Z(a e^{eps_s} / m) - delta_s)`` implies
        ``T^{-1} >= F^{-1}``, and ``T <= m (T_Z(a e^{-eps_s} / m) + delta_s)``
        implies the mirror upper bound (generalised inverses; ``m = 1 - p_inf``).
        """
        y = np.asarray(y, dtype=np.float64)
        if self.pinf >= 1.0:
            z = np.zeros(y.shape)
            return z, z
        m = 1.0 - self.pinf
        b_lo = (y / m + self.ds) * (1 + 8 * _U) + 4 * _U
        b_up = (y / m - self.ds) * (1 - 8 * _U) - 4 * _U
        lo = m * math.exp(-self.es) * self.tz_inverse(b_lo, -1) * (1 - 8 * _U)
        with np.errstate(invalid="ignore"):
            up = np.where(b_up < 0, np.inf, m * math.exp(self.es) * self.tz_inverse(np.maximum(b_up, 0.0), +1)
                          * (1 + 8 * _U))
        # T^{-1} is itself a trade-off function: T^{-1}(y) <= 1 - y
        up = np.minimum(up, 1.0 - y + 2 * _U)
        return np.clip(lo, 0.0, 1.0), np.clip(up, 0.0, 1.0)


class _Charges(NamedTuple):
    """What :class:`_Direction` reads of a direction's result: its epsilon shift, delta charges and ``p_inf``."""

    eps_spent: float
    delta_spent: float
    p_inf: float


class _DominanceDirection:
    """One direction of a dominance composition (:class:`fastpld.dominance.DominancePLD`): the lower
    bounds on ``beta`` from the dominating chain, the upper ones from the dominated chain.

    Both chains' curves bound the true one at every real ``eps`` (``docs/dominance.md``, facts 1-5;
    truncation, re-discretisation and the balanced split move losses only one way): with ``m = 1 -
    p_inf``, ``d_up`` and ``d_lo`` the chains' normalised grid PMFs' curves,

        delta <= p_inf + m e^r (d_up + c_up) <= p_inf + m (d_up + e^r c_up + e^r - 1),
        delta <= p_inf + m (d_up + c_up + T),
        delta >= p_inf' + m' (M d_lo - c_lo) >= p_inf' + m' (d_lo - (1 - M) - c_lo)

    (``p_inf'`` and ``m' = 1 - p_inf'`` the dominated chain's, at most the dominating one's: a dominating
    loss's mass at ``+inf`` may hold its rounding charges; ``r`` the dominating chain's relative rounding, ``T``
    the same as total variation, ``M`` the mass the dominated chain kept, ``d <= 1``).  These are the coupling
    certificate's bounds with no epsilon shift and delta charges ``min(e^r c_up + e^r - 1, c_up + T)`` and
    ``c_lo + 1 - M``, so :class:`_Direction` bounds ``beta``
    (its lower bound from the first, its upper bound from the second) and the inverse curve alike.
    """

    def __init__(self, q_up, d_up, q_lo, d_lo):
        from .dominance.result import _kept_mass, _rel_factor, _rel_tv
        f = _rel_factor(d_up)
        c = float(d_up.delta_spent)
        ds_up = min(f * c + (f - 1.0), c + _rel_tv(d_up)) * (1 + 8 * _U)
        kept = _kept_mass(d_lo)
        ds_lo = (float(d_lo.delta_spent) + (1.0 - kept)) * (1 + 8 * _U)
        self.up = _Direction(q_up, _Charges(0.0, ds_up, float(d_up.p_inf)))
        self.lo = _Direction(q_lo, _Charges(0.0, ds_lo, float(d_lo.p_inf)))
        # (gdp_mu's default alpha range follows the charges of the lower bounds on beta, which certify mu)
        self.ds = ds_up
        self.pinf = float(d_up.p_inf)

    def bounds(self, alpha):
        lo = self.up.bounds(alpha)[0]
        up = self.lo.bounds(alpha)[2]
        return lo, np.clip(0.5 * (lo + up), lo, np.maximum(lo, up)), up

    def inverse_bounds(self, y):
        return self.up.inverse_bounds(y)[0], self.lo.inverse_bounds(y)[1]


def _directions(pld):
    cache = pld.__dict__.setdefault("_fdp_dirs", {})
    if not cache:
        lower = getattr(pld, "lower_directions", None)
        for name, d in pld.directions.items():
            if lower is None:
                cache[name] = _Direction(pld._q[name], d)
            else:
                cache[name] = _DominanceDirection(pld._q[name], d, pld._ql[name], lower[name])
    return cache


def _one_order_only(mech) -> bool:
    """A subsampled mechanism restricted to one neighbouring order (its loss says nothing of the reverse pair)."""
    return (getattr(mech, "neighboring", "add_or_remove") != "add_or_remove"
            and 0.0 < getattr(mech, "sampling_probability", 0.0) < 1.0)


def _reverse(pld):
    """Per direction, the direction whose pair is its reverse (``None`` if unknown).

    With both directions, ``add`` is the reverse pair of ``remove`` (every
    built-in mechanism's add loss is its remove pair reversed, or the same law
    when the mechanism is symmetric; a custom loss given for both directions
    dominates both orders).  A single direction is its own reverse unless a
    subsampled mechanism was restricted to one order (``neighboring="remove"``
    or ``"add"``).
    """
    names = list(pld.directions)
    if any(_one_order_only(m) for m, _ in pld.events):  # its factor of either direction has no reverse
        return {n: None for n in names}
    if set(names) == {"remove", "add"}:
        return {"remove": "add", "add": "remove"}
    return {n: n for n in names}


def _combine(pld, alpha, sharpen=False):
    """Bounds on ``min over directions of T_d(alpha)``; ``sharpen``: use that each ``T_d`` is monotone and convex."""
    lo = est = up = None
    dirs = _directions(pld)
    rev = _reverse(pld)
    for name, dr in dirs.items():
        l, e, u = dr.bounds(alpha)
        r = rev.get(name)
        if r is not None:
            # beta of this pair is the inverse of the reverse pair's: T = T_r^{-1} (resolves alpha -> 1)
            il, iu = dirs[r].inverse_bounds(alpha)
            l = np.maximum(l, il)
            u = np.minimum(u, iu)
            e = np.clip(e, l, u)
        if sharpen:  # per direction: the minimum over two directions need not be convex
            l, e, u = _monotone(alpha, l, e, u)
        lo = l if lo is None else np.minimum(lo, l)
        est = e if est is None else np.minimum(est, e)
        up = u if up is None else np.minimum(up, u)
    return lo, est, up


def _lower_hull(x, y):
    """Values at ``x`` (sorted) of the largest convex function below the points ``(x_i, y_i)``."""
    hull = []  # indices of the lower convex hull (monotone chain)
    for i in range(x.size):
        while len(hull) >= 2:
            i0, i1 = hull[-2], hull[-1]
            # drop i1 if it lies on or above the chord from i0 to i
            if (y[i1] - y[i0]) * (x[i] - x[i0]) >= (y[i] - y[i0]) * (x[i1] - x[i0]):
                hull.pop()
            else:
                break
        hull.append(i)
    h = np.asarray(hull)
    xh, yh = x[h], y[h]
    k = np.clip(np.searchsorted(xh, x, side="right"), 1, xh.size - 1)
    # interpolation round-off is relative to the segment's end values: pad it outward
    pad = 8 * _U * (np.abs(yh[k - 1]) + np.abs(yh[k]))
    return np.interp(x, xh, yh) + pad


def _monotone(alpha, lo, est, up):
    """Sharpen the bounds at a set of alphas with what every trade-off function is.

    beta is non-increasing: ``lower(alpha_i) >= lower(alpha_j)`` for ``alpha_j >=
    alpha_i`` and ``upper(alpha_i) <= upper(alpha_j)`` for ``alpha_j <=
    alpha_i``.  beta is convex: below ``upper`` at the points, it is below the
    chords between them, so the lower convex hull of the upper bounds is still an
    upper bound (and makes the upper curve convex).
    """
    if alpha.size <= 1:
        return lo, est, up
    order = np.argsort(alpha, kind="stable")
    inv = np.empty_like(order)
    inv[order] = np.arange(order.size)
    lo_s = np.maximum.accumulate(lo[order][::-1])[::-1]
    up_s = np.minimum.accumulate(up[order])
    a_s = alpha[order]
    # at equal alphas the running minimum already holds the smallest upper bound
    uniq, first = np.unique(a_s, return_index=True)
    if uniq.size > 2:
        hv = _lower_hull(uniq, up_s[first])
        hv = np.minimum(hv, up_s[first])
        up_s = np.minimum(up_s, hv[np.searchsorted(uniq, a_s)])
    lo, up = lo_s[inv], up_s[inv]
    return lo, np.clip(est, lo, up), up


# --------------------------------------------------------------------------------------
# public functions (the methods of PrivacyLossDistribution call these)
# --------------------------------------------------------------------------------------
def tradeoff(pld, alpha) -> Bounds:
    """Certified bounds on the trade-off curve ``beta(alpha)``; see :meth:`PrivacyLossDistribution.tradeoff`."""
    a = V.query_array("alpha", alpha, lo=0.0, hi=1.0)
    flat = a.ravel()
    lo, est, up = _combine(pld, flat, sharpen=True)
    lo, est, up = (x.reshape(a.shape) for x in (lo, est, up))
    if np.ndim(alpha) == 0:
        return Bounds(float(lo), float(est), float(up))
    return Bounds(lo, est, up)


def tpr(pld, fpr) -> Bounds:
    """Certified bounds on the best attack's true-positive rate ``1 - beta(fpr)``."""
    try:
        b = tradeoff(pld, fpr)
    except ValueError as exc:
        raise ValueError(str(exc).replace("alpha", "fpr")) from None
    if isinstance(b.lower, float):
        return Bounds(1.0 - b.upper, 1.0 - b.estimate, 1.0 - b.lower)
    # 1 - x is exact for x in [1/2, 1] and within u/2 otherwise: pad the bounds outward
    return Bounds(np.maximum(1.0 - b.upper - _U, 0.0), 1.0 - b.estimate, np.minimum(1.0 - b.lower + _U, 1.0))


def advantage(pld) -> Bounds:
    """Certified bounds on ``max_alpha (1 - alpha - beta(alpha)) = max TPR - FPR = delta(0)``."""
    return pld.delta(0.0)


def _range(pld, alpha_range):
    if alpha_range is None:
        slack = max(dr.ds + dr.pinf for dr in _directions(pld).values())
        lo = min(1e-2, max(1e-12, 1e3 * slack))
        return (lo, 1.0 - lo), False
    if not (isinstance(alpha_range, (tuple, list)) and len(alpha_range) == 2):
        raise ValueError(f"alpha_range must be a (low, high) pair, got {alpha_range!r}")
    lo = V.probability("alpha_range[0]", alpha_range[0])
    hi = V.probability("alpha_range[1]", alpha_range[1])
    if not lo < hi:
        raise ValueError(f"alpha_range must satisfy low < high, got {alpha_range!r}")
    return (lo, hi), (lo == 0.0 and hi == 1.0)


def _mu_at(alpha, beta):
    """``Phi^-1(1 - alpha) - Phi^-1(beta)``: the mu whose G_mu passes through (alpha, beta)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        m = -special.ndtri(alpha) - special.ndtri(beta)
    # alpha = 0 with beta = 1, or alpha = 1 with beta = 0, constrain nothing
    return np.where(np.isnan(m), -np.inf, m)


def _check_points(lo_a, hi_a, ratio=1e-3):
    """Type-I errors at which gdp_mu evaluates the curve: the range ends and a grid fine in log alpha
    near 0 and in log(1 - alpha) near 1 (steps of ``ratio``)."""
    pts = [np.array([lo_a, hi_a])]
    mid = min(max(0.5, lo_a), hi_a)
    if lo_a < mid:
        num = int(min(math.log(mid / max(lo_a, 1e-300)) / ratio, 200_000)) + 2
        pts.append(np.geomspace(max(lo_a, 1e-300), mid, num))
    if mid < hi_a:
        num = int(min(math.log((1 - mid) / max(1 - hi_a, 1e-300)) / ratio, 200_000)) + 2
        pts.append(1.0 - np.geomspace(1 - mid, max(1 - hi_a, 1e-300), num))
    a = np.unique(np.concatenate(pts))
    return a[(a >= lo_a) & (a <= hi_a)]


def gdp_mu(pld, alpha_range=None) -> GDPResult:
    """Certified Gaussian-DP mu; see :meth:`PrivacyLossDistribution.gdp_mu`."""
    (lo_a, hi_a), whole = _range(pld, alpha_range)
    alphas = _check_points(lo_a, hi_a)
    lo, est, up = _combine(pld, alphas)
    # mu upper: on [x_i, x_{i+1}] the true curve is >= L(x_{i+1}) (it is non-increasing) and
    # G_mu <= G_mu(x_i), so G_mu(x_i) <= L(x_{i+1}) for every i certifies G_mu <= beta on the range
    # (pointwise-rigorous; the grid's spacing costs about log(1 + ratio) / |z| in mu)
    if alphas.size > 1:
        mu_up = float(np.max(_mu_at(alphas[:-1], lo[1:])))
    else:
        mu_up = float(_mu_at(alphas, lo)[0])
    # mu lower: any alpha in the range with beta <= U(alpha) forces mu >= mu_at(alpha, U(alpha))
    mu_lo = float(np.max(_mu_at(alphas, up)))
    mu_est_pts = _mu_at(alphas, est)
    k = int(np.argmax(mu_est_pts))
    mu_est = float(mu_est_pts[k])
    # ndtr / ndtri are accurate to a few ulps: a relative margin, outward
    mu_up = mu_up * (1 + 1e-9) + 1e-12 if math.isfinite(mu_up) else math.inf
    mu_lo = max(mu_lo * (1 - 1e-9) - 1e-12, 0.0) if math.isfinite(mu_lo) else mu_lo
    mu_est = min(max(mu_est, mu_lo), mu_up)
    if math.isfinite(mu_est):
        gap = est - gaussian_tradeoff(max(mu_est, 0.0), alphas)
        g = int(np.argmax(gap))
        max_gap, gap_alpha = float(gap[g]), float(alphas[g])
    else:
        max_gap, gap_alpha = math.inf, float(alphas[k])
    return GDPResult(Bounds(mu_lo, mu_est, mu_up), (lo_a, hi_a), whole, float(alphas[k]), max_gap, gap_alpha)


# --------------------------------------------------------------------------------------
# Renyi divergence
# --------------------------------------------------------------------------------------
def _pmf_log_mgf_lower(q, d, s):
    """Certified lower bound on ``log E[e^{sY}]`` (``s > 0``) of the composed finite part from its grid PMF.

    On the coupling's good event ``Y >= Z - eps_s``; the bad event has mass at
    most ``delta_s``, so ``E[e^{sY}] >= e^{-s eps_s} (E[e^{sZ}] - m)`` where
    ``m`` is the largest contribution of any ``delta_s`` of Z's mass (its top).
    """
    p = q.p
    v = q.values(np.arange(q.n, dtype=np.float64))
    # remove mass ds from the top of Z (a little more: the tail sums below are rounded)
    ds = float(d.delta_spent) * (1 + 8 * (q.n + 8) * _U) + 1e-300
    tail = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])  # tail[j] = mass at indices >= j
    keep = p.copy()
    cut = np.searchsorted(-tail, -ds, side="left")  # first j with tail[j] <= ds
    keep[cut:] = 0.0
    if cut > 0:
        keep[cut - 1] = max(0.0, p[cut - 1] - (ds - tail[cut]))
    with np.errstate(divide="ignore"):
        lw = np.log(keep) + s * v
    lm = special.logsumexp(lw)
    if not np.isfinite(lm):
        return -math.inf
    # round-off of the sum and the exponents, outward (relative to the sum)
    rel = 4 * (q.n + 8) * _U + 8 * _U * (s * np.max(np.abs(v)) + 2) + 8 * (q.n + 4) * _U
    return float(lm + math.log1p(-min(rel, 0.5)) - s * d.eps_spent)


def _pmf_log_mgf_upper(q, d, s, y_max):
    """Certified upper bound on ``log E[e^{sY}]`` (``s > 0``) when the composed loss is at most ``y_max``."""
    v = q.values(np.arange(q.n, dtype=np.float64))
    with np.errstate(divide="ignore"):
        lm = special.logsumexp(np.log(q.p) + s * v)
    rel = 4 * (q.n + 8) * _U + 8 * _U * (s * np.max(np.abs(v)) + 2) + 8 * (q.n + 4) * _U
    good = lm + math.log1p(rel) + s * d.eps_spent
    bad = math.log(d.delta_spent) + s * y_max if d.delta_spent > 0 else -math.inf
    return float(np.logaddexp(good, bad) * (1 + 4 * _U) + 4 * _U)


def renyi(pld, order) -> Bounds:
    """Certified bounds on the Renyi divergence of the composed mechanism; see :meth:`PrivacyLossDistribution.renyi`."""
    o = V.query_array("order", order, lo=1.0)
    if (o <= 1.0).any() or np.isinf(o).any():
        raise ValueError(f"order must be finite and > 1, got {order!r}")
    flat = o.ravel()
    s = flat - 1.0
    lo_all = np.full(flat.shape, -np.inf)
    up_all = np.full(flat.shape, -np.inf)
    est_all = np.full(flat.shape, -np.inf)
    for name, d in pld.directions.items():
        if d.p_inf > 0:  # A puts mass where B has none: every order > 1 diverges
            lo_all[:] = up_all[:] = est_all[:] = np.inf
            break
        # upper: composition adds the log-MGFs of the finite parts (each an upper bound, exact for
        # Gaussian and discrete losses and for the subsampled Gaussian at integer orders)
        k = np.zeros(flat.shape)
        for mech, c in pld.events:
            loss = mech.privacy_losses()[name]
            if loss.p_inf > 0:
                k[:] = np.inf
                break
            with np.errstate(over="ignore", invalid="ignore"):
                val = np.asarray(loss.log_mgf(s), dtype=np.float64)
            k = k + c * np.where(np.isnan(val), np.inf, val)
        with np.errstate(over="ignore", invalid="ignore"):
            up = k / s
            up = np.where(np.isfinite(up), up + 64 * _U * (np.abs(up) + 1) * max(len(pld.events), 1), np.inf)
        q = pld._q[name]
        # when every loss is bounded above, the PMF gives an upper bound too: E[e^{sY}] <=
        # e^{s eps_s} E[e^{sZ}] + delta_s e^{s Y_max} (the coupling's bad event lies below Y_max)
        y_max = sum(c * mech.privacy_losses()[name].support[1] for mech, c in pld.events)
        if math.isfinite(y_max):
            up_pmf = np.array([_pmf_log_mgf_upper(q, d, si, y_max) for si in s]) / s
            up = np.minimum(up, up_pmf)
        lo = np.array([_pmf_log_mgf_lower(q, d, si) for si in s]) / s
        lo = np.where(np.isfinite(lo), lo, 0.0)
        lo = np.maximum(lo, 0.0)  # Renyi divergences are >= 0
        with np.errstate(divide="ignore"):
            est_pmf = np.array([special.logsumexp(np.log(q.p) + si * q.values(np.arange(q.n, dtype=np.float64)))
                                for si in s]) / s
        est = np.where(np.isfinite(up), np.minimum(up, np.maximum(est_pmf, lo)), np.maximum(est_pmf, lo))
        lo_all = np.maximum(lo_all, lo)
        up_all = np.maximum(up_all, up)
        est_all = np.maximum(est_all, est)
    lo_all = np.minimum(lo_all, up_all)
    est_all = np.clip(est_all, lo_all, up_all)
    lo_all, est_all, up_all = (x.reshape(o.shape) for x in (lo_all, est_all, up_all))
    if np.ndim(order) == 0:
        return Bounds(float(lo_all), float(est_all), float(up_all))
    return Bounds(lo_all, est_all, up_all)


# --------------------------------------------------------------------------------------
# calibration to an operational target (used by fastpld.calibrate)
# --------------------------------------------------------------------------------------
def attack_target(count, target_epsilon, target_delta, target_tpr, at_fpr, target_mu, alpha_range, eps_error,
                  delta_error, max_buckets, method):
    """``(target, mechanism -> certified upper value, name)`` for :func:`fastpld.calibrate`.

    ``target_tpr`` with ``at_fpr``: the certified upper TPR at ``at_fpr``.
    ``target_mu``: the certified upper Gaussian-DP mu over ``alpha_range``.
    Default errors: ``eps_error = 0.02`` (the bound on TPR moves alpha by a
    factor ``e^eps_error``), ``delta_error = min(1e-10,
    (target_tpr - at_fpr) / 1000)`` for TPR and ``1e-12`` for mu.
    """
    from .composition.api import compose

    if target_epsilon is not None or target_delta is not None:
        raise ValueError("give either target_epsilon/target_delta or an attack target (target_tpr with at_fpr, "
                         "or target_mu), not both")
    if target_mu is not None:
        if target_tpr is not None or at_fpr is not None:
            raise ValueError("give either target_mu or target_tpr with at_fpr, not both")
        mu = V.positive_float("target_mu", target_mu)
        ee = V.eps_error(0.02 if eps_error is None else eps_error)
        de = V.delta_error(1e-12 if delta_error is None else delta_error)

        def run(mech):
            pld = compose(mech, count, eps_error=ee, delta_error=de, method=method, max_buckets=max_buckets)
            return pld.gdp_mu(alpha_range).mu.upper

        return mu, run, "target_mu"
    if target_tpr is None or at_fpr is None:
        raise ValueError("target_tpr and at_fpr must be given together")
    tt = V.probability("target_tpr", target_tpr, open_low=True, open_high=True)
    fa = V.probability("at_fpr", at_fpr, open_high=True)
    if not tt > fa:
        raise ValueError(f"target_tpr={tt:g} must exceed at_fpr={fa:g}: every mechanism allows the attack "
                         "that flips a biased coin, whose TPR equals its FPR")
    ee = V.eps_error(0.02 if eps_error is None else eps_error)
    de = V.delta_error(max(min(1e-10, (tt - fa) / 1000), 1e-250) if delta_error is None else delta_error)

    def run(mech):
        pld = compose(mech, count, eps_error=ee, delta_error=de, method=method, max_buckets=max_buckets)
        return pld.tpr(fa).upper

    return tt, run, "target_tpr"
