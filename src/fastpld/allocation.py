"""Random allocation (balls-in-bins): each record takes part in exactly one (or ``num_selected``) of
``num_steps`` steps.

One epoch of ``num_steps`` steps of a base mechanism, in which every record is used in exactly one
step chosen uniformly at random (independently across records), is one :class:`RandomAllocation`
mechanism; epochs compose with ``count`` and with everything else.  The pair that is certified and
why it dominates the epoch are in ``docs/samplers.md`` (section "Random allocation").

Sketch.  Let ``(A, B)`` be the base's dominating pair for the remove direction (``A`` with the
record), ``L = dA/dB``.  One epoch is dominated, in the remove direction, by ``P = (1/t) sum_i
(A at step i, B elsewhere)`` against ``Q = B^t`` and, in the add direction, by ``(Q, P)`` built from
the base's add pair (Feldman and Shenfeld 2025; Chua et al. 2025 for the Gaussian).  With
``S = sum_i L(x_i)``, ``dP/dQ = S/t``; under ``P`` the law of ``S`` is that of ``L_A + R`` with
``L_A`` drawn under ``A`` and ``R`` the sum of ``t - 1`` independent copies of ``L`` under ``B``.
So the remove loss is ``log((L_A + R)/t)`` and the add loss ``-log(S'/t)`` with ``S'`` a sum of
``t`` copies of ``e^(-Y_add)`` (the base's add loss).  The laws of these sums are computed on a
linear lattice with every rounding in one direction:

* ``bound="upper"``: a *dominating* loss.  Remove: the base pair is replaced by the canonical pair
  of its loss rounded up onto the lattice (a dominating pair of the base), whose random allocation
  dominates the base's (post-processing by the product kernel); the remaining truncations only move
  mass up (to ``+inf``).  Add: every copy of ``e^(-Y_add)`` rounded down (the loss only grows).
* ``bound="lower"``: a *dominated* loss (every value only lower).  Remove: ``L_A`` rounded down and
  each copy of ``L`` under ``B`` replaced by a stochastically smaller law; add: copies rounded up.

The FFT round-off of the lattice convolutions is bounded (normwise FFT error, propagated through the
powers) and charged by moving that much probability to ``+inf`` (upper) or to the lowest value
(lower): the result stays stochastically above (below) the exact law of the rounded sums.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from . import _validation as V
from ._lattice import _conv, _fix_cdf, _power, _trim
from ._lazy import lazy_module
from ._copies import (_add_law, _aligned_mesh, _contract_down, _contract_up, _from_upper_cdf, _remove_law, _round_up,
                      _spread, _spread_pair)
from .mechanisms import DiscreteLoss, Gaussian, Laplace, Mechanism, PrivacyLoss, _cached
from .samplers import _ManyAtomLoss, _check_mechanism, _check_neighboring, _select

special = lazy_module("scipy.special")

__all__ = ["RandomAllocation"]

_U = np.finfo(np.float64).eps / 2
_NEIGHBOURING = ("add_or_remove", "remove", "add")
_BOUNDS = ("upper", "lower")
# lattice points of the sum (the mesh is the sum's range over this); at most _MAX_POINTS
_POINTS = 1 << 20
_MAX_POINTS = 1 << 21
# a mesh above _FINE_MESH takes _MAX_POINTS; above _MAX_MESH the answer would be too loose: refused
_FINE_MESH = 0.02
# (the dominated losses' bias is first order in the mesh, the dominating ones' mostly 1/t of it)
_FINE_MESH_LOWER = 0.002
_MAX_MESH = 0.25
# probability left beyond the caps of one copy (charged: +inf for upper bounds)
_TAIL = 1e-17
# the most probability a dominating remove loss may put at +inf per epoch where a heavy tail does not fit
# the widest lattice with the tail above (it enters every delta: delta below it cannot be certified)
_MAX_TAIL_CHARGE = 1e-9
# the dominated add loss's copies beyond its widest lattice (their sums at -inf, put at the lowest value: lower_slack)
_MAX_LOWER_SLACK = 1e-12
# mesh of the geometric grid of the remove loss's heavy coordinate beyond the lattice
_GEO_RATIO = 1.0 + 2.0 ** -9
# levels of the coarsened law of R used with that heavy coordinate
_R_LEVELS = 64
# mesh of the epoch loss's values (rounded onto it, in the certified direction): fewer atoms
_VALUE_MESH = 2.0 ** -13
# probability of each far tail of an epoch loss merged into one atom (or, upper tail of a dominating
# loss, sent to +inf)
_TAIL_MERGE = 1e-20
# largest number of steps per epoch
_MAX_STEPS = 10 ** 6


# --------------------------------------------------------------------------------------
# The losses
# --------------------------------------------------------------------------------------
def _reversed_pair(mech: Mechanism) -> bool:
    """Whether the base's add loss is the PRV of its remove pair reversed, exactly (then the add loss's
    ``e^(-Y)`` has the law of ``L = dA/dB`` under ``B``): the Gaussian and Laplace mechanisms, whose one loss
    serves both directions.  (A custom or sampled base's add loss need only dominate the reverse order.)"""
    return type(mech) in (Gaussian, Laplace)


def _moment(loss: PrivacyLoss, s: float, fallback: float) -> float:
    """``E[e^(s Y)]`` of the finite part (an upper bound), or ``fallback`` where unknown."""
    try:
        v = float(np.asarray(loss.log_mgf(np.array([s])), dtype=np.float64)[0])
    except (NotImplementedError, ValueError):
        return fallback
    return math.exp(v) if math.isfinite(v) and v < 700 else fallback


def _cap(tail_fn, lo: float, tol: float) -> float:
    """Smallest tried ``lam >= lo`` (doubling) with ``tail_fn(lam) <= tol`` (at most ``2^60 lo``)."""
    lam = max(lo, 1.0)
    for _ in range(60):
        if tail_fn(lam) <= tol:
            return lam
        lam *= 2.0
    return lam


def _geometric(lo: float, hi: float) -> np.ndarray:
    n = int(math.ceil(math.log(hi / lo) / math.log(_GEO_RATIO))) if hi > lo else 0
    return lo * _GEO_RATIO ** np.arange(1, n + 1)


def _mesh(span: float, points: int, fine: float | None = None) -> tuple[float, int]:
    """``(mesh, points)`` for a lattice over ``[0, span]``: finer (up to :data:`_MAX_POINTS`) when coarse,
    refused when the mesh would exceed :data:`_MAX_MESH` (the sums' scale is ``E[L] <= 1`` per copy)."""
    if not (math.isfinite(span) and span > 0):
        raise ValueError(f"random allocation: the base privacy loss has no finite range (got {span!r})")
    if span / points > (_FINE_MESH if fine is None else fine) and 2 * (points + 1) <= _MAX_POINTS:
        points = 2 * (points + 1) - 1  # (twice the entries; FFT-friendly lengths kept)
    h = span / points
    if not h <= _MAX_MESH:
        raise ValueError(
            f"mechanism: random allocation of this base needs a lattice of mesh {h:.4g} (> {_MAX_MESH}) for the "
            f"sums of likelihood ratios over [0, {span:.4g}]: the base's privacy loss has too heavy a tail (e.g. "
            "too little noise for its sensitivity, or a pure-DP epsilon far above 1) for a certified answer that "
            "is not vacuous; a PoissonSubsampled base at rate 1/num_steps is not a bound for it either")
    return h, points


def _widest(points: int) -> float:
    """The widest span :func:`_mesh` gives a lattice asked with ``points`` (just below its largest mesh)."""
    return 0.999 * _MAX_MESH * (2 * (points + 1) - 1 if 2 * (points + 1) <= _MAX_POINTS else points)


def _remove_loss(loss: PrivacyLoss, t: int, upper: bool, points: int,
                 b_loss: PrivacyLoss | None = None) -> DiscreteLoss:
    """The remove loss ``log((L_A + R)/t)`` of one epoch (dominating if ``upper``, else dominated).

    ``b_loss``: the base's add loss where its pair is the remove pair reversed (then ``e^(-Y_add)`` has the law of
    ``L`` under ``B``, and the dominated loss is second order in the mesh: :func:`_contract_down`)."""
    mean_b = 1.0  # E_B[L] <= 1
    second = _moment(loss, 1.0, math.inf)  # E_A[L] = E_B[L^2], a bound on the variance under B
    var_b = second if math.isfinite(second) else None
    # A[lam < L < inf], bounded from above to its relative accuracy (w less a CDF bound has only u absolute)
    a_tail = lambda lam: float(_remove_law(loss, np.array([lam]))[3][0])  # noqa: E731
    w = 1.0 - loss.p_inf
    # B[L > lam] <= A[L > lam] / lam: the cap of one copy under B (for the upper bound the copies
    # beyond it are charged at +inf; the lower bound caps them down, so it needs no heavy tail)
    cap_b = _cap(lambda lam: a_tail(lam) / lam, 1.0, 100 * _TAIL / t)
    if var_b is None:
        var_b = cap_b  # (E_B[L^2; L <= cap] <= cap E_B[L] <= cap)
    r_max = (t - 1) * mean_b + 12.0 * math.sqrt((t - 1) * var_b) + 30.0 * math.sqrt(var_b) + 1.0
    widest = _widest(points // 2 - 1)  # (R's lattice)
    if upper:
        if (t - 1) * mean_b + cap_b > widest and r_max < widest:
            # a heavy tail (a Gaussian base below sigma ~0.6): the copies' cap lowered to what the widest
            # lattice holds; the copies beyond it are charged as before (R = +inf: mass at +inf), here
            # t B[L > cap] <= t A[L > cap] / cap of it, refused above _MAX_TAIL_CHARGE
            cap_b = widest - (t - 1) * mean_b
            charge = t * a_tail(cap_b) / cap_b
            if not charge <= _MAX_TAIL_CHARGE:
                raise ValueError(
                    f"mechanism: random allocation of this base would put {charge:.3g} of probability at an infinite "
                    f"privacy loss per epoch (more than {_MAX_TAIL_CHARGE:g}): the base's privacy loss has too heavy "
                    "a tail (too little noise for its sensitivity) for a certified answer that is not vacuous")
        r_max = max(r_max, (t - 1) * mean_b + cap_b)
    elif b_loss is not None:
        # (the contraction is second order in the mesh: the lattice can hold the copies' tail, as the dominating
        # loss's does, where capping R at r_max lowered the sums of a heavy tail -- Gaussian(0.8) x 1000 steps: R
        # beyond it with probability ~1e-6, at delta 1e-5 a quarter of a percent of epsilon)
        r_max = max(r_max, min((t - 1) * mean_b + cap_b, widest))
    h, _ = _mesh(r_max, points // 2 - 1, _FINE_MESH if upper or b_loss is not None else _FINE_MESH_LOWER)
    if not upper and b_loss is not None:
        h = _aligned_mesh(h, b_loss, False)
    n_r = int(math.ceil(r_max / h))
    lam_fine = h * np.arange(n_r + 1, dtype=np.float64)
    cap_a = _cap(a_tail, lam_fine[-1], _TAIL)
    geo = _geometric(lam_fine[-1], cap_a)
    x = np.concatenate([lam_fine, geo])
    law = _remove_law(loss, x)
    g_lo, g_hi = law[0], law[1]
    law_fine = tuple(v[: n_r + 1] for v in law)
    if upper and b_loss is not None:
        # the pair with every bucket of L under B spread between its ends (_spread_pair), beyond the lattice as below
        ca_out, cb_out = _spread_pair(lam_fine, law_fine, _add_law(b_loss, lam_fine))
        a, a_inf = _round_up(np.concatenate([ca_out, g_lo[n_r + 1:]]), w)
        a[0] = 0.0
        b_fine, _ = _round_up(cb_out, 1.0)  # (B beyond the lattice: R = +inf, charged below as missing mass)
        b_fine = _trim(b_fine, "drop")
        b_err = 1e-14
    elif upper:
        a, a_inf = _round_up(g_lo, w)  # A': masses at x (x_0 = 0 gets none), the rest at +inf
        a[0] = 0.0
        # B': the canonical pair's B, a / x at x, the rest at 0 (a valid pair: E_A'[1/L] <= E_A[1/L] <= 1)
        bq = np.zeros_like(a)
        bq[1:] = a[1:] / x[1:]
        b_fine = bq[: n_r + 1].copy()
        b_fine[0] = max(0.0, 1.0 - math.fsum(bq) * (1 + 4 * _U))  # (each a / x within u)
        # (B' beyond the lattice: R = +inf, charged below as missing mass)
        b_fine = _trim(b_fine, "drop")
        b_err = 1e-14  # (l1 error of these masses: each within a few u, their sum exact to u)
    elif b_loss is not None:
        # the pair contracted onto the lattice and lowered (_contract_down), beyond it as below
        ca_out, cb_out = _contract_down(lam_fine, law_fine, _add_law(b_loss, lam_fine))
        a = _from_upper_cdf(np.concatenate([ca_out, g_hi[n_r + 1:], [w]]), w)
        a_inf = float(loss.p_inf)
        b_fine = _trim(_from_upper_cdf(np.concatenate([cb_out, [1.0]]), 1.0), "clamp")
        b_err = 1e-14
    else:
        gh_next = np.concatenate([g_hi[1:], [w]])
        a = _from_upper_cdf(gh_next, w)  # A rounded down; beyond the last point capped to it
        a_inf = float(loss.p_inf)
        # a stochastically smaller law of L under B: a lower bound of each bucket's A-mass over its
        # upper end, placed at its lower end; the rest at 0
        bucket = np.maximum(g_lo[1:] - g_hi[:-1], 0.0)
        bl = bucket / x[1:]
        b_fine = np.zeros(n_r + 1)
        fine_b = bl[:n_r]  # buckets (x_(k-1), x_k], k = 1..n_r, to x_(k-1)
        b_fine[:n_r] += fine_b
        b_fine[n_r] += float(bl[n_r:].sum())  # coarse buckets capped down to the lattice's end
        b_fine[0] += max(0.0, 1.0 - math.fsum(b_fine) * (1 + 4 * _U))
        b_fine = _trim(b_fine, "clamp")
        b_err = 1e-14  # (as above)
    mode = "drop" if upper else "clamp"
    r, r_err = _power(b_fine, t - 1, n_r, mode, b_err)
    r_err += 1e-14 * t
    r_total = float(r.sum())
    a_fine = a[: n_r + 1]
    a_geo = a[n_r + 1:]
    n_s = 2 * n_r
    s, s_err = _conv(a_fine, r, n_s, mode)
    s_err += r_err * float(a_fine.sum()) + 1e-14
    if upper:
        s = _fix_cdf(s, s_err, "larger", 1.0)
    else:
        s = _fix_cdf(s, s_err, "smaller", float(a_fine.sum()))
    slack = 0.0
    if not upper and s[0] > 0:  # S = 0 (loss -inf) is put at the lowest value: recorded as slack
        slack = float(s[0])
        s = s.copy()
        s[1] += slack
    vals = [np.log(h * np.arange(s.size, dtype=np.float64)[1:] / t)]
    masses = [s[1:]]
    if a_geo.size and float(a_geo.sum()) > 0:
        # the heavy coordinate beyond the lattice: R coarsened to a few levels (rounded up for the upper
        # bound, down for the lower), one atom per (geometric point, level)
        cdf = np.cumsum(r)
        q = np.linspace(0.0, 1.0, _R_LEVELS + 1)[1:-1] * r_total
        idx = np.unique(np.clip(np.concatenate([[0], np.searchsorted(cdf, q), [r.size - 1]]), 0, r.size - 1))
        if upper:
            c = np.maximum.accumulate(np.clip(cdf - r_err, 0.0, None))[idx]
            lv = np.diff(np.concatenate([[0.0], c]))  # mass of (r_(l-1), r_l] at r_l
        else:
            c = np.minimum(cdf + r_err, 1.0)
            c[-1] = 1.0
            c = np.minimum.accumulate(c[::-1])[::-1]
            ends = np.concatenate([idx[1:] - 1, [r.size - 1]])
            lv = np.diff(np.concatenate([[0.0], c[ends]]))  # mass of [r_l, r_(l+1)) at r_l
        xs = geo  # (both roundings leave each coarse mass at its own point of x)
        keep = a_geo > 0
        vv = np.log(np.add.outer(xs[keep], h * idx) / t).ravel()
        mm = np.multiply.outer(a_geo[keep], lv).ravel()
        vals.append(vv)
        masses.append(mm)
    v = np.concatenate(vals)
    m = np.concatenate(masses)
    finite = float(m.sum())
    if upper:
        p_inf = min(1.0, max(a_inf, 1.0 - finite))
    else:
        p_inf = float(loss.p_inf)
    out = _allocation_loss(v, m, p_inf, h, not upper)
    out.lower_slack = slack
    return out


def _add_loss(loss: PrivacyLoss, t: int, upper: bool, points: int,
              a_loss: PrivacyLoss | None = None) -> DiscreteLoss:
    """The add loss ``-log(S'/t)``, ``S'`` a sum of ``t`` copies of ``e^(-Y_add)``.

    ``a_loss``: the base's remove loss where the add pair is the remove pair reversed (then ``Pr_A[L <= x]`` gives
    the copies' first moments per bucket, and the dominated loss is second order in the mesh: :func:`_contract_up`)."""
    second = _moment(loss, -2.0, math.inf)  # E[L'^2]
    tail = lambda lam: float(_add_law(loss, np.array([lam]))[3][0])  # noqa: E731  (Pr[L' > lam], from above)
    cap = _cap(tail, 1.0, _TAIL / t)
    var = second if math.isfinite(second) else cap
    s_max = t + 12.0 * math.sqrt(t * var) + 20.0 * math.sqrt(var)
    if not upper:
        # (the dominated loss cannot cap S' down; sums beyond the lattice go to -inf, see lower_slack.)  It holds the
        # copies up to where their tail is below _TAIL / t, or the widest lattice where t times the tail beyond it is
        # at most _MAX_LOWER_SLACK (the tail read from above: 1 less a CDF bound rounds to 0 below ~1e-16)
        widest = _widest(points - 1)
        if cap > widest:
            if not t * tail(widest) <= _MAX_LOWER_SLACK:
                raise ValueError(
                    "mechanism: the dominated add loss of this random allocation would leave more than "
                    f"{_MAX_LOWER_SLACK:g} of probability beyond its widest lattice (too heavy a tail)")
            cap = widest
        s_max = max(s_max, cap)
    else:
        # capping S' at s_max raises the losses of the sums above it (to -log(s_max / t) < 0): a sum of t copies is
        # at most t cap but for copies beyond cap (at most _TAIL of probability), and the bound above lies ~12
        # standard deviations out.  (Capped at max(cap, t + 1), a third of the mass of Laplace(1) x 10 steps had its
        # loss raised, by 0.06 on average: harmless for one epoch's curve at eps >= 0, but a composition adds the
        # raised losses up -- 100 epochs: epsilon <= 21.06 where the dominated loss gives >= 17.39.)
        s_max = min(s_max, max(t * cap, t + 1.0))
    h, _ = _mesh(s_max, points - 1, _FINE_MESH if upper or a_loss is not None else _FINE_MESH_LOWER)
    if not upper and a_loss is not None:
        h = _aligned_mesh(h, loss, True)
    n_s = int(math.ceil(s_max / h))
    lam = h * np.arange(n_s + 1, dtype=np.float64)
    law = _add_law(loss, lam)
    g_lo, g_hi = law[0], law[1]
    if upper and a_loss is not None:  # each bucket split between its ends (_spread), capped at the lattice's end
        b = _from_upper_cdf(np.append(_spread(lam, _remove_law(a_loss, lam), law), 1.0), 1.0)
        mode = "clamp"
    elif upper:  # each copy rounded down, capped at the end of the lattice: S' only smaller
        gh_next = np.concatenate([g_hi[1:], [1.0]])
        b = _from_upper_cdf(gh_next, 1.0)
        mode = "clamp"
    elif a_loss is not None:  # contracted onto the lattice and raised; beyond it: +inf, as below
        out = _contract_up(lam, _remove_law(a_loss, lam), law)
        b, _ = _round_up(out, 1.0)
        mode = "drop"
    else:  # rounded up; beyond the lattice: +inf (S' = +inf, the loss -inf)
        b, _ = _round_up(g_lo, 1.0)
        mode = "drop"
    b = _trim(b, mode)
    s, err = _power(b, t, n_s, mode, 1e-14)
    err += 1e-14 * t
    if upper:
        s = _fix_cdf(s, err, "smaller", 1.0)
        p_inf = float(s[0])  # S' = 0: loss +inf
        vals = -np.log(h * np.arange(1, s.size, dtype=np.float64) / t)
        return _allocation_loss(vals, s[1:], p_inf, h, False)
    s = _fix_cdf(s, err, "larger", 1.0)
    missing = max(0.0, 1.0 - float(s.sum()))  # S' = +inf (loss -inf): put at the lowest value
    p_inf = float(s[0])
    s = s.copy()
    s[-1] += missing
    vals = -np.log(h * np.arange(1, s.size, dtype=np.float64) / t)
    out = _allocation_loss(vals, s[1:], p_inf, h, True)
    out.lower_slack = missing
    return out


_MAX_COMBOS = 2_000_000


def _count_vectors(n: int, m: int) -> np.ndarray | None:
    """All vectors of ``m`` non-negative integers summing to ``n`` (``None`` if more than :data:`_MAX_COMBOS`)."""
    if math.comb(n + m - 1, m - 1) > _MAX_COMBOS:
        return None
    rows = np.zeros((1, 0), dtype=np.int64)
    left = np.array([n], dtype=np.int64)
    for _ in range(m - 1):
        reps = left + 1
        idx = np.repeat(np.arange(rows.shape[0]), reps)
        c = np.concatenate([np.arange(r) for r in reps]) if reps.size else np.zeros(0, dtype=np.int64)
        rows = np.column_stack([rows[idx], c])
        left = left[idx] - c
    return np.column_stack([rows, left])


def _multinomial(n: int, log_w: np.ndarray):
    """``(counts, log pmf)`` of the multinomial law of ``n`` draws with log-probabilities ``log_w``."""
    counts = _count_vectors(n, log_w.size)
    if counts is None:
        return None, None, None
    with np.errstate(invalid="ignore"):
        terms = np.where(counts > 0, counts * log_w[None, :], 0.0)
    g = special.gammaln(counts + 1)
    lp = special.gammaln(n + 1) - g.sum(axis=1) + terms.sum(axis=1)
    # absolute error of each log pmf: the terms' roundings (a few u of their magnitudes), and the
    # weights' own (each log w within ~4 u (m + 1) of the exact, times n draws)
    err = 8 * _U * (special.gammaln(n + 1) + g.sum(axis=1) + np.abs(terms).sum(axis=1)) + 4 * _U * (log_w.size + 1) * n
    return counts, lp, err


def _exact_discrete(rem: DiscreteLoss, add: DiscreteLoss, t: int, upper: bool):
    """Exact epoch losses for a discrete base with few atoms (multinomial enumeration), or ``None``.

    Remove: ``log((L_A + R)/t)``, ``R`` a sum of ``t - 1`` draws of ``L`` under the canonical ``B`` of the
    remove loss; add: ``-log(S'/t)``, ``S'`` a sum of ``t`` draws of ``e^(-Y_add)``.  The masses' rounding
    is charged: each mass lowered by its error bound, the rest at ``+inf`` (upper) or at the lowest value
    (lower).  The atoms are gathered on a grid in the certified direction by :func:`_snap`.
    """
    out = {}
    # remove: canonical pair
    w = 1.0 - rem.p_inf
    lam_a = np.exp(rem.values)
    log_b = np.log(rem.probs) + math.log(w) - rem.values
    b_zero = max(0.0, 1.0 - float(np.exp(special.logsumexp(log_b))))
    lam_b = lam_a
    if b_zero > 1e-15:
        lam_b = np.concatenate([lam_b, [0.0]])
        log_b = np.concatenate([log_b, [math.log(b_zero)]])
    log_b = log_b - special.logsumexp(log_b)  # (renormalised: the charge below covers it)
    counts, lp, err = _multinomial(t - 1, log_b)
    if counts is None or counts.shape[0] * rem.values.size > _MAX_COMBOS:
        return None
    r = counts @ lam_b
    s_vals = np.add.outer(lam_a, r).ravel()
    s_mass = np.exp(np.add.outer(np.log(rem.probs) + math.log(w), lp)).ravel()
    rel = np.add.outer(np.full(rem.values.size, 8 * _U), err).ravel()
    out["remove"] = _exact_loss(np.log(s_vals / t), s_mass, rel, rem.p_inf, upper)
    # add: sums of t copies of e^(-Y)
    lam = np.exp(-add.values)
    log_q = np.log(add.probs) + math.log1p(-add.p_inf)
    if add.p_inf > 0:
        lam = np.concatenate([lam, [0.0]])
        log_q = np.concatenate([log_q, [math.log(add.p_inf)]])
    counts, lp, err = _multinomial(t, log_q)
    if counts is None:
        return None
    sv = counts @ lam
    zero = sv <= 0  # S' = 0: loss +inf
    p_inf = float(np.exp(lp[zero] + err[zero]).sum()) if upper else float(np.exp(lp[zero] - err[zero]).sum())
    with np.errstate(divide="ignore"):
        out["add"] = _exact_loss(-np.log(sv[~zero] / t), np.exp(lp[~zero]), err[~zero], p_inf, upper)
    return out


def _exact_loss(values, masses, rel, p_inf, upper):
    # each mass lowered by its error bound (e^-err); what is missing goes to +inf (upper) or to the lowest
    # value (lower; the enumeration's lowest value is the true lowest)
    masses = masses * np.exp(-(np.asarray(rel) + 4 * _U))
    if upper:
        return _allocation_loss(values, masses, max(p_inf, 1.0 - float(masses.sum()) - 0.0), 0.0, False)
    lowest = int(np.argmin(values))
    masses = masses.copy()
    masses[lowest] += max(0.0, 1.0 - p_inf - float(masses.sum()))
    return _allocation_loss(values, masses, p_inf, 0.0, True)


class AllocationLoss(_ManyAtomLoss):
    """The discrete loss of one epoch of random allocation (see :mod:`fastpld.allocation`).

    Attributes
    ----------
    mesh : float
        Lattice mesh of the sum.
    dominated : bool
        ``True`` for the dominated (lower-bound) loss.
    lower_slack : float
        For the dominated add loss: probability of sums beyond the lattice, whose loss (below every
        value here) is put at the lowest value; 0 otherwise.
    """

    lower_slack = 0.0
    _lower_factory = None
    _lower = None

    @property
    def dominated_loss(self):
        """The dominated loss of the same epoch (for the dominance certificate), built on first use;
        ``None`` where it cannot be built (a heavy-tailed base: then only upper bounds are certified)."""
        if self._lower is None and self._lower_factory is not None:
            try:
                self._lower = self._lower_factory()
            except ValueError:
                self._lower_factory = None  # (not retried)
        return self._lower


def _snap(values, masses, dominated):
    """The atoms gathered on the multiples of :data:`_VALUE_MESH` (fewer atoms), second order in the mesh.

    With ``x = e^(-Y)``, the curve ``E[(1 - e^eps x)_+]`` is convex in ``x``, and so is a composition's in each
    factor's ``x`` (the product with the other factors' is linear in it).  A dominating loss splits each atom
    between the grid points below and above it, keeping its mass and its mean of ``x`` (connect-the-dots: a
    mean-preserving spread of ``x``; the share moved up is raised by its rounding, which only moves mass up), so
    every curve rises.  A dominated loss merges the atoms of each cell ``[k M, (k + 1) M)`` into one at ``-log`` of
    their mean of ``x`` (Jensen: every curve falls), rounded down; its values are not on the grid.  The values,
    computed in floating point, are first moved by their rounding bound in the certified direction.  (Rounding
    each atom up, resp. down, onto the grid moved the loss by up to a mesh per copy, first order: at 100 epochs of
    Gaussian(2) x 10 steps 0.35% of epsilon between the bounds, 0.21% with the mesh 2^-20.)"""
    M = _VALUE_MESH
    slack = 16 * _U * (np.abs(values) + 1.0)
    v = values - slack if dominated else values + slack
    k = np.floor(v / M)
    k = np.where(k * M > v, k - 1, k)  # (the quotient's rounding: the point at or below v)
    d = v - k * M  # (within 2 u (|v| + 1) of the exact distance, in [0, M])
    k = k.astype(np.int64)
    k0 = int(k.min())
    j = k - k0  # (each atom's cell, from the lowest)
    n = np.bincount(j)  # (atoms per cell)
    if not dominated:
        # the share at the upper point: (1 - e^-d) / (1 - e^-M), from an upper bound of d, raised by 8 u
        d_hi = np.minimum(d + 2 * _U * (np.abs(v) + 1.0), M)
        w = np.where(d > 0, np.minimum(1.0, np.expm1(-d_hi) / math.expm1(-M) * (1 + 8 * _U)), 0.0)
        size = n.size + 1
        out = (np.bincount(j, weights=masses * (1.0 - w), minlength=size)
               + np.bincount(j + 1, weights=masses * w, minlength=size))
        idx = np.flatnonzero(out > 0)
        # (each share within 2 u, each point's sum of its n shares within n u: their l1 distance from the exact
        # split, taken off the CDF -- stochastically larger, the rest at +inf, _fix_cdf)
        err = (2 * int(n.max()) + 4) * _U * float(masses.sum()) * 1.01
        return (idx + k0) * M, _fix_cdf(out[idx], err, "larger", 1.0)
    # the cell's mass P and its sum X of mass e^(-(y - k M)) (each term in [e^-M, 1]): the merged atom at
    # k M + log(P / X), each sum within n u relative (n atoms in the cell), exp and log within 2 u; lowered by
    # that, kept in [k M, (k + 1) M) (the exact value lies in [k M, (k + 1) M]: clipping up to k M keeps it below)
    P = np.bincount(j, weights=masses)
    X = np.bincount(j, weights=masses * np.exp(-d))
    idx = np.flatnonzero(P > 0)
    base = (idx + k0) * M
    with np.errstate(divide="ignore"):
        vm = base + np.log(P[idx] / X[idx])
    vm = vm - (2.0 * n[idx] + 8.0) * _U - 4 * _U * np.abs(vm)
    vm = np.minimum(np.maximum(vm, base), np.nextafter(base + M, -np.inf))
    # (each cell's mass within n u: added to the CDF -- stochastically smaller, _fix_cdf)
    err = (int(n.max()) + 2) * _U * float(masses.sum()) * 1.01
    return vm, _fix_cdf(P[idx], err, "smaller", float(P[idx].sum()))


def _merge_tails(values, masses, dominated):
    """Atoms in the far tails (at most :data:`_TAIL_MERGE` of probability each side) merged, in the
    certified direction: for a dominating loss the low tail into the first atom above it and the high
    tail to ``+inf`` (returned as extra mass at infinity); for a dominated loss the high tail into the
    last atom below it and the low tail into the lowest atom.  Fewer atoms: the discretisations of
    :mod:`fastpld.compose` charge round-off per atom."""
    n = values.size
    if n < 3:
        return values, masses, 0.0
    lo = int(np.searchsorted(np.cumsum(masses), _TAIL_MERGE, side="right"))  # atoms [0, lo) hold <= tail
    hi = n - int(np.searchsorted(np.cumsum(masses[::-1]), _TAIL_MERGE, side="right"))  # [hi, n) too
    lo, hi = min(lo, n - 1), max(hi, 1)
    if lo >= hi:
        return values, masses, 0.0
    v, m = values[lo:hi].copy(), masses[lo:hi].copy()
    low, high = float(masses[:lo].sum()), float(masses[hi:].sum())
    if dominated:
        m[-1] += high
        if lo > 0:
            return np.concatenate([values[:1], v]), np.concatenate([[low], m]), 0.0
        return v, m, 0.0
    m[0] += low
    return v, m, high


def _allocation_loss(values, masses, p_inf, h, dominated):
    masses = np.maximum(np.asarray(masses, dtype=np.float64), 0.0)
    keep = masses > 0
    values, masses = np.asarray(values, dtype=np.float64)[keep], masses[keep]
    values, masses = _snap(values, masses, dominated)
    values, masses, extra_inf = _merge_tails(values, masses, dominated)
    p_inf = p_inf + extra_inf
    total = float(masses.sum())
    if not total > 0:
        raise ValueError("random allocation: the epoch's privacy loss has no finite part")
    p_inf = min(max(p_inf, 0.0), 1.0)
    if not dominated:  # (the finite masses are renormalised to 1 - p_inf: for an upper bound, never up)
        p_inf = max(p_inf, 1.0 - total)
    out = AllocationLoss(values, masses / total, p_inf=p_inf)
    out.mesh = h
    out.dominated = dominated
    return out


# --------------------------------------------------------------------------------------
# The mechanism
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RandomAllocation(Mechanism):
    """One epoch of ``num_steps`` steps in which every record is used in exactly one random step.

    (Balls-in-bins sampling: each record is put in one of the ``num_steps`` batches uniformly at
    random, independently of the others; Chua et al. 2025, Feldman and Shenfeld 2025.)  Compose
    epochs with ``count``.  The base mechanism is read in the add/remove relation (for DP-SGD:
    ``Gaussian(sigma)`` with clipping norm 1), its ``"remove"`` loss for the remove direction and its
    ``"add"`` loss for the add direction.

    The losses are computed on a lattice with one-sided roundings (``docs/samplers.md``):
    ``bound="upper"`` gives losses that dominate the epoch's, so every *upper* bound of a
    composition is certified for the true mechanism; a composition's lower bounds are then reported
    as the trivial ones (0), since those of the dominating losses lie above the truth by the lattice
    rounding.  ``bound="lower"`` gives dominated losses: their *lower* bounds are certified and the
    upper bounds reported as the trivial ones (epsilon ``inf``, delta 1).  Each upper loss carries
    its dominated counterpart, so ``compose(..., method="dominance")`` certifies both bounds for the
    true mechanism in one call; ``method="auto"`` takes that certificate for these losses where its
    charges fit ``delta_error``, else a coupling plan (upper bounds only).

    Parameters
    ----------
    mechanism : Mechanism
        The base mechanism of one step (any fastpld mechanism, including samplers and custom ones).
    num_steps : int
        Steps per epoch ``t >= 1`` (at most ``10**6``).  ``t = 1`` is the base mechanism itself.
    num_selected : int, default 1
        Steps ``k`` each record takes part in per epoch (a uniformly random ``k``-subset of the steps).
        ``k > 1`` is certified through ``k`` one-selection epochs over blocks of ``floor(t/k)`` or
        ``ceil(t/k)`` steps, which dominate it (``docs/samplers.md``): compositions of it certify upper
        bounds only (lower bounds reported as the trivial ones), except at ``k = t`` (the base
        composed ``t`` times); ``bound="lower"`` then raises ``ValueError``.  Such an epoch is composed
        (:func:`fastpld.compose`, the accountants), not used as the base of another sampler.
    neighboring : {"add_or_remove", "remove", "add"}, default "add_or_remove"
        As for :class:`~fastpld.PoissonSubsampled`: both directions (the larger curve is reported) or one.
    bound : {"upper", "lower"}, default "upper"
        Dominating (certified upper bounds) or dominated (certified lower bounds) losses.

    Examples
    --------
    >>> import fastpld
    >>> epoch = fastpld.RandomAllocation(fastpld.Gaussian(1.0), num_steps=100)
    >>> pld = fastpld.compose(epoch, 10)  # 10 epochs
    """

    mechanism: Mechanism
    num_steps: int
    num_selected: int = 1
    neighboring: str = "add_or_remove"
    bound: str = "upper"

    def __post_init__(self):
        _check_mechanism(self.mechanism)
        t = V.positive_int("num_steps", self.num_steps)
        if t > _MAX_STEPS:
            raise ValueError(f"num_steps must be at most {_MAX_STEPS} (the lattice of the sum would be too coarse "
                             f"or too large), got {t}")
        k = V.positive_int("num_selected", self.num_selected)
        if k > t:
            raise ValueError(f"num_selected must be between 1 and num_steps={t}, got {k}")
        _check_neighboring(self.neighboring, _NEIGHBOURING)
        if self.bound not in _BOUNDS:
            raise ValueError(f"bound must be one of {_BOUNDS}, got {self.bound!r}")
        if self.bound == "lower" and 1 < k < t:
            raise ValueError(
                f"bound='lower' needs num_selected=1 (or num_selected=num_steps), got num_selected={k}: an epoch "
                "with num_selected > 1 is certified through blocks of one selection each, which dominate it, "
                "so only its upper bounds are certified")
        object.__setattr__(self, "num_steps", t)
        object.__setattr__(self, "num_selected", k)

    def _losses(self, upper: bool):
        base = self.mechanism.privacy_losses()
        t = self.num_steps
        if isinstance(base["remove"], DiscreteLoss) and isinstance(base["add"], DiscreteLoss):
            exact = _exact_discrete(base["remove"], base["add"], t, upper)
            if exact is not None:
                return exact
        # (the add loss first: a heavy tail refuses its dominated one at once, where the remove loss's would have
        # been built first for nothing -- Gaussian(0.5) x 100 steps: 4 s)
        rev = _reversed_pair(self.mechanism)
        add = _add_loss(base["add"], t, upper, _POINTS, base["remove"] if rev else None)
        rem = _remove_loss(base["remove"], t, upper, _POINTS, base["add"] if rev else None)
        return {"remove": rem, "add": add}

    def _components(self):
        # k of t: the composition of k one-selection epochs over blocks of floor(t/k) or ceil(t/k) steps
        # (sizes adding up to t), which dominates it (docs/samplers.md, "num_selected > 1"); blocks of one
        # step are the base mechanism itself
        k, t = self.num_selected, self.num_steps
        if k == 1:
            return None
        small, r = divmod(t, k)
        out = []
        for size, copies in ((small, k - r), (small + 1, r)):
            if copies:
                block = (RandomAllocation(self.mechanism, 1, 1, self.neighboring) if size == 1 else
                         _AllocationBlock(self.mechanism, size, self.neighboring))
                out.append((block, copies))
        return out

    def privacy_losses(self):
        if self.num_selected > 1:
            raise ValueError(
                f"RandomAllocation with num_selected={self.num_selected} is a composition (of num_selected "
                "one-selection blocks), not one privacy loss: compose it (fastpld.compose, an accountant); it "
                "cannot be the base mechanism of another sampler")
        if self.num_steps == 1:
            return _select(self.mechanism.privacy_losses(), self.neighboring)
        upper = self.bound == "upper"

        def build():
            losses = self._losses(upper)
            if upper:
                lower_mech = RandomAllocation(self.mechanism, self.num_steps, self.num_selected, "add_or_remove",
                                              "lower")
                for d in ("remove", "add"):
                    losses[d]._lower_factory = (lambda d=d: lower_mech.privacy_losses()[d])
            return losses

        key_mech = RandomAllocation(self.mechanism, self.num_steps, self.num_selected, "add_or_remove", self.bound)
        losses = _cached(key_mech, build)
        return _select(losses, self.neighboring)


@dataclass(frozen=True)
class _AllocationBlock(Mechanism):
    """One block of a :class:`RandomAllocation` with ``num_selected > 1``: the dominating losses of a
    one-selection epoch of ``num_steps`` steps, without their dominated counterparts.  The composition
    of the blocks dominates the epoch but is not dominated by it, so its lower bounds are not the
    epoch's: compositions report the trivial ones (:func:`fastpld.curve._certified_sides`)."""

    mechanism: Mechanism
    num_steps: int
    neighboring: str = "add_or_remove"

    def privacy_losses(self):
        def build():
            full = RandomAllocation(self.mechanism, self.num_steps).privacy_losses()
            copies = {}
            for loss in full.values():
                if id(loss) not in copies:
                    c = copy.copy(loss)
                    c._lower_factory = None  # (upper bounds only)
                    c._lower = None
                    copies[id(loss)] = c
            return {d: copies[id(loss)] for d, loss in full.items()}

        key_mech = _AllocationBlock(self.mechanism, self.num_steps)
        return _select(_cached(key_mech, build), self.neighboring)


def _upper_only(mech):
    """``mech`` for a question that reads upper bounds only (calibration's searches): a one-selection
    :class:`RandomAllocation` becomes its block (the same dominating losses without their dominated
    counterparts, which take as long again to build); anything else is returned as it is."""
    if (type(mech) is RandomAllocation and mech.num_selected == 1 and mech.num_steps > 1
            and mech.bound == "upper"):
        return _AllocationBlock(mech.mechanism, mech.num_steps, mech.neighboring)
    return mech
