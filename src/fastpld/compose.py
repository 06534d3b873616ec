"""Composition of privacy loss distributions by evolving discretisation.

A *plan* is a tree: leaves discretise one mechanism's privacy loss (Algorithm 1)
on the finest mesh of their chain, and each node convolves its children
(``m``-fold powers in the Fourier domain, modulo its window) after
re-discretising them onto the node's mesh.  ``glw`` is one node over one mesh,
``two_stage`` is Algorithm 2 (``k = k1 k2 + r``) and ``recursive`` is
Algorithm 3 generalised to any ``k`` by a mixed-radix expansion with carries.

Certificate (what makes the bounds rigorous).  Let ``Y^k`` be the exact
composition of the finite parts and ``Z`` the PMF we return.  We couple them as
follows and add up what each step costs.

* Truncation: each leaf copy is ``Y`` conditioned on its window; total
  variation ``instances * (mass outside)``, computed from the CDF itself.
* Discretisation: every leaf copy (Algorithm 1, mean preserved) and every
  re-discretised copy (mean-preserving split, ``E[Y~ | Y] = Y``) adds a
  difference of conditional mean zero lying in an interval of known length
  ``r``.  Ordered leaves first, they form one martingale, so Azuma-Hoeffding
  gives ``|sum| <= sqrt(sum r^2 / 2 * log(2 / eta))`` except with probability
  ``eta``.  This is the paper's Hoeffding step applied once to all stages
  instead of once per stage.  The mesh sizes ``h_i`` are chosen to minimise the
  predicted work subject to this term equalling the eps budget.
* Wrap-around: a node instance differs from the linear convolution of its
  inputs only if the linear sum leaves the window; every node's input PMFs are
  concrete, so this probability is bounded a posteriori by a Chernoff bound on
  their exact moment generating function, and charged once per instance.
* Round-off: FFT error is bounded per node (componentwise forward error
  ``12 u log2 N``, propagated through the powers and the inverse transform)
  and charged as total variation per instance; near frequency 0, where the
  ``m``-th power would amplify that error ``m``-fold, the spectrum comes from
  the inputs' central moments with a proved error instead
  (:func:`_series_spectrum`); nodes whose charge would not fit run in long
  double (with float64 forward FFTs where, past the series' range, the powers
  are negligible: docs/roundoff.md, section 3c).  CDF round-off widens the leaf coupling range (see
  :mod:`fastpld.discretize`).  Mean errors add ``instances * bias`` to eps.

The resulting pair ``(eps_spent, delta_spent)`` satisfies
``|Y^k - Z| <=_{delta_spent} eps_spent``; queries use these spent values.
"""
from __future__ import annotations

import concurrent.futures
import functools
import math
import numbers
import os
import threading
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from . import _answers, _fft, _kernels, resources
from . import mechanisms as _mechanisms
from . import _validation as V
from .curve import DirectionResult, PrivacyLossDistribution, StageInfo
from ._limits import BucketLimitError
from .discretize import GridPMF, discretize_loss, rediscretize, tail_mix_log_mgf, truncation_window
from .mechanisms import (DiscreteLoss, GaussianLoss, LaplaceLoss, Mechanism, PrivacyLoss, SubsampledLoss,
                         subsampled_log_mgf_rows)

__all__ = ["compose", "METHODS", "DEFAULT_MAX_BUCKETS"]

METHODS = ("auto", "glw", "two_stage", "recursive", "dominance")
DEFAULT_MAX_BUCKETS = 1 << 23

_U64 = np.finfo(np.float64).eps / 2
_ULD = float(np.finfo(np.longdouble).eps) / 2
_U64_CAST = _U64  # (tests patch _U64 to force long double nodes; a cast to float64 stays a cast)
_TWO_PI_LD = _kernels._TWO_PI_LD

# Shares of the delta budget (caps; the spent amounts are usually far smaller).
_SHARE_ETA = 0.4
_SHARE_TRUNC = 0.2
_SHARE_WRAP = 0.2
_SHARE_FP = 0.15
# Share of the eps budget kept for mean-correction bias and CDF round-off.
_EPS_RESERVE = 0.03
# long double nodes with the low-frequency series take float64 forward FFTs (docs/roundoff.md, 3c)
_MIXED_FORWARD = True
_MIXED_MIN_POWER = 256  # planner: powers from which the float64 forward pass is predicted to hold


# --------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------
class _Leaf:
    __slots__ = ("loss", "group", "count", "_atoms")

    def __init__(self, loss, group, count):
        self.loss, self.group, self.count = loss, group, count


class _Node:
    __slots__ = ("children", "group", "count", "label", "_atoms")

    def __init__(self, children, group, label):
        self.children = [(c, int(m)) for c, m in children if m > 0]
        self.group = group
        self.label = label
        self.count = sum(c.count * m for c, m in self.children)


class _Plan:
    def __init__(self, root, method, params, n_parts=1):
        self.root = root
        self.method = method
        self.params = params
        self.n_parts = n_parts  # distinct (loss, count) parts composed
        # topological order: children before parents
        order, seen = [], set()

        def visit(o):
            if id(o) in seen:
                return
            seen.add(id(o))
            if isinstance(o, _Node):
                for c, _ in o.children:
                    visit(c)
            order.append(o)

        visit(root)
        self.order = order
        inst = {id(root): 1}
        for o in reversed(order):
            if isinstance(o, _Node):
                for c, m in o.children:
                    inst[id(c)] = inst.get(id(c), 0) + inst[id(o)] * m
        self.instances = inst
        self.groups = sorted({o.group for o in order})
        self.n_nodes = sum(isinstance(o, _Node) for o in order)
        self.n_leaves = len(order) - self.n_nodes

    def copies_per_group(self):
        """Number of coupling differences per mesh group (leaf copies + re-discretised copies)."""
        a = {g: 0 for g in self.groups}
        for o in self.order:
            if isinstance(o, _Leaf):
                a[o.group] += self.instances[id(o)]
            else:
                for c, m in o.children:
                    if c.group != o.group:
                        a[o.group] += self.instances[id(o)] * m
        return a


def _chain(loss, count, method, arity, gid, top_group=0):
    """Top-level children (for a parent on ``top_group``) of a plan for ``loss`` composed ``count`` times.

    ``gid`` yields fresh group ids for the lower levels.
    """
    if method == "glw" or count < 4:
        return [(_Leaf(loss, top_group, 1), count)], {"levels": 1}
    if method == "two_stage":
        k1 = math.isqrt(count)
        k2, r = divmod(count, k1)
        g1 = next(gid)
        leaf = _Leaf(loss, g1, 1)
        a = _Node([(leaf, k1)], g1, f"k1={k1}")
        top = [(a, k2)]
        if r == 1:
            top.append((leaf, 1))
        elif r > 1:
            top.append((_Node([(leaf, r)], g1, f"r={r}"), 1))
        return top, {"k1": k1, "k2": k2, "r": r, "levels": 2}
    # recursive: mixed radix with constant arity; carries accumulate lower digits
    a = max(2, int(arity))
    t = 1
    while a ** t <= count // a:
        t += 1
    # levels: node_1..node_{t}; node_j = node_{j-1}^a on group g_j; top digit = count // a^t
    groups = [next(gid) for _ in range(t)]
    leaf = _Leaf(loss, groups[0], 1)
    nodes = [leaf]
    for j in range(1, t + 1):
        nodes.append(_Node([(nodes[j - 1], a)], groups[j - 1], f"x{a}"))
    digits = []
    rem = count
    for j in range(t):
        rem, d = divmod(rem, a)
        digits.append(d)
    top_digit = rem  # >= 1
    carry = None
    for j in range(t):  # carry_j combines node_0..node_j digits, lives on group of node_{j+1}
        d = digits[j]
        kids = []
        if carry is not None:
            kids.append((carry, 1))
        if d:
            kids.append((nodes[j], d))
        if not kids:
            continue
        if len(kids) == 1 and kids[0][1] == 1:
            carry = kids[0][0]
            continue
        carry = _Node(kids, groups[j], f"carry{j}")
    top = [(nodes[t], top_digit)]
    if carry is not None:
        top.append((carry, 1))
    return top, {"arity": a, "levels": t + 1}


def _build_plan(parts, method, arity, merge=None, native=False, order=None):
    """Plan for the heterogeneous list ``parts`` of ``(loss, count)``.

    ``merge=None``: every part's chain feeds one root (Appendix B with one block).
    ``merge=b``: parts are grouped into blocks of about ``b``, each block convolved
    on a fine narrow grid (one mesh group per level), the block results
    re-discretised onto a coarser, wider grid and grouped again, until at most
    ``b`` remain for the root: ``n`` distinct parts then cost ``O(n / b)`` small
    convolutions per level and ``O(log_b n)`` levels instead of ``n`` inputs to
    one full-size root.  Every level is an ordinary node of the plan, so the
    certificate (leaves, re-discretisations, wrap, round-off) covers it unchanged.

    ``order``: :func:`_merge_order` of ``parts`` if already known (the candidates of one composition share it).
    """
    gid = iter(range(1, 1 << 30))
    params = []
    if merge is None or len(parts) <= merge:
        top = []
        for loss, count in parts:
            t, p = _chain(loss, count, method, arity, gid)
            top.extend(t)
            params.append(p)
        root = _Node(top, 0, "root")
        return _Plan(root, method, params, len(parts))
    b = max(2, int(merge))
    if order is None:
        order = _merge_order(parts, native)
    g = next(gid)
    tops = []
    for i in order:
        loss, count = parts[i]
        t, p = _chain(loss, count, method, arity, gid, top_group=g)
        tops.append(t)
        params.append(p)
    level = 1
    items = tops  # each item: a list of (object, multiplicity) to convolve on group g
    while True:
        nb = -(-len(items) // b)
        bounds = [len(items) * j // nb for j in range(nb + 1)]  # balanced blocks
        nodes = []
        for j in range(nb):
            kids = [kid for it in items[bounds[j]:bounds[j + 1]] for kid in it if kid[1] > 0]
            if len(kids) == 1 and kids[0][1] == 1:
                nodes.append(kids[0][0])  # a lone child passes through
            else:
                nodes.append(_Node(kids, g, f"block{level}"))
        if len(nodes) <= b:
            break
        g = next(gid)
        level += 1
        items = [[(o, 1)] for o in nodes]
    root = _Node([(o, 1) for o in nodes], 0, "root")
    for p in params:
        p["merge"] = b
        p["merge_levels"] = level + 1
    return _Plan(root, method, params, len(parts))


def _merge_order(parts, native=False):
    """Order of the parts in grouped plans: similar parts side by side keep the narrow blocks narrow
    (order does not affect correctness).  Key: upper Chernoff quantile of each part at a moderate
    tail, from the cached MGF grids."""
    kp = np.array([_k_grid(loss, native)[0] for loss, _ in parts]) * np.array([float(c) for _, c in parts])[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        size = np.min((kp + 20.0) / _S_ABS, axis=1).tolist()  # (Python floats: numpy scalars sort slowly)
    return sorted(range(len(parts)), key=lambda i: (size[i], parts[i][1]))


# --------------------------------------------------------------------------------------
# Window estimates for planning (Chernoff bounds from the mechanisms' MGFs)
# --------------------------------------------------------------------------------------
_S_ABS = np.geomspace(1e-7, 1e5, 361)


def _k_grid(loss, native=False):
    """Cached ``(K(+s), K(-s))`` on the absolute grid ``_S_ABS``.

    ``native``: subsampled losses take their binomial moments from the compiled kernel (cached
    apart from the numpy backend's grids: each backend's plans must not depend on call history).
    """
    native = bool(native) and isinstance(loss, SubsampledLoss)
    attr = "_fastpld_kgrid_native" if native else "_fastpld_kgrid"
    cache = getattr(loss, attr, None)
    if cache is None:
        s = _S_ABS
        if isinstance(loss, DiscreteLoss):
            kp, kn = loss.log_mgf(s), loss.log_mgf(-s)
        else:
            lmgf = (lambda x: loss.log_mgf(x, native=True)) if native else loss.log_mgf
            with np.errstate(over="ignore", invalid="ignore"):
                # one vectorised call for both signs (elementwise: the same values as two calls)
                sc = np.where(s <= 512, s, np.nan)
                both = np.asarray(lmgf(np.concatenate([sc, -sc])), dtype=np.float64)
                kp, kn = both[:s.size], both[s.size:]
            kp = np.where(np.isnan(kp), np.inf, kp)
            kn = np.where(np.isnan(kn), np.inf, kn)
            kp, kn = _gauss_extend(loss, kp, kn)
        cache = (kp, kn)
        try:
            setattr(loss, attr, cache)
        except AttributeError:  # pragma: no cover
            pass
    return cache


def _gauss_extend(loss, kp, kn, far=None):
    """Planning only: extend the log-MGF grids past ``s = 512`` for losses that are Gaussian there.

    The mechanisms' MGFs are evaluated up to ``s = 512``; a loss with a tiny standard deviation
    (huge noise, e.g. the subsampled Gaussian calibrated for ``k = 2^30``: sd ~ 7e-6) needs
    ``s ~ 1e5`` for a tight Chernoff window, and the capped grid predicted windows up to 1000x too
    wide (meshes, sizes, costs and round-off estimates of the plans followed).  Where ``K(512)`` or
    ``K(-512)`` agrees with ``s mean + s^2 sd^2 / 2`` to ``delta <= 1e-3`` (relative), both grids
    take the minimum with that quadratic inflated by ``4 delta s / 512`` (the cubic term's growth)
    while the inflation stays below 25% (the other side's MGF is often a loose convexity bound).
    Predictions only: execution bounds its windows from the concrete PMFs.

    ``far``: :func:`_far_from_gauss` of the grids if already known (it decides without the moments).
    """
    i = _I512
    if far is None:
        far = bool(_far_from_gauss(kp[None, :], kn[None, :])[0])
    if far:  # the test below fails whatever the moments are: they need not be computed
        return kp, kn
    try:
        mu, sd = float(loss.mean()), float(loss.std())
    except Exception:  # pragma: no cover - a loss without moments keeps the capped grid
        return kp, kn
    if not (math.isfinite(mu) and math.isfinite(sd) and sd > 0):
        return kp, kn
    s = _S_ABS
    deltas = []
    for k, sign in ((kp, 1.0), (kn, -1.0)):
        g0 = sign * s[i] * mu + 0.5 * (s[i] * sd) ** 2
        ok = math.isfinite(k[i]) and g0 > 0
        deltas.append(max(abs(float(k[i]) - g0) / g0, 1e-9) if ok else math.inf)
    delta = min(deltas)
    if delta > 1e-3:
        return kp, kn
    # one side's MGF is tight and Gaussian at s = 512: the loss is Gaussian at that scale, so the
    # other side (the mechanisms bound one side by a loose convexity argument) follows the same
    # quadratic, on the whole grid; both continue past 512 while the inflation stays below 25%
    infl = 4.0 * delta * s / s[i]
    out = []
    for k, sign in ((kp, 1.0), (kn, -1.0)):
        ext = np.where(infl <= 0.25, (sign * s * mu + 0.5 * (s * sd) ** 2) * (1 + infl), np.inf)
        out.append(np.minimum(k, ext))
    return out[0], out[1]


_I512 = int(np.searchsorted(_S_ABS, 512.0, side="right")) - 1  # _gauss_extend's test point
_I1 = int(np.argmin(np.abs(_S_ABS - 1.0)))  # s = 1 (to round-off) on the grid: K(1) for _hetero_stack
# grid points for the second-moment bound of _far_from_gauss (every third from s = 1e-3: any s is valid)
_E2_S = np.nonzero(_S_ABS >= 1e-3)[0][::3]


def _far_from_gauss(kp, kn):
    """Rows of the 2-D grids ``(kp, kn)`` where :func:`_gauss_extend` returns the grids unchanged whatever
    the loss's mean and standard deviation (so that they need not be computed: a quadrature per loss).

    Its test compares ``K(+-512)`` with ``g0 = +-512 mu + 512^2 sd^2 / 2`` and keeps the grids when both
    sides miss by more than 0.1%.  Since ``cosh(x) - 1 >= x^2 / 2``, ``E[Y^2] <= (e^K(s) - 1 + e^K(-s) - 1)
    / s^2`` for the upper bounds ``K`` on the grid (any ``s``; :meth:`PrivacyLoss.log_mgf` bounds from
    above), and ``|mu|, sd <= sqrt(E[Y^2])``; a side whose ``K(+-512)`` is infinite, or above ``1.0011``
    times the largest ``g0`` these allow, misses (the 1e-4 slack covers the rounding and the moments'
    quadrature error, ~1e-12 relative).  Planning only; tested against the moments' test itself.
    """
    s = _S_ABS[_E2_S]
    with np.errstate(over="ignore", invalid="ignore"):
        e2 = np.min((np.expm1(kp[:, _E2_S]) + np.expm1(kn[:, _E2_S])) / (s * s), axis=1)
        si = _S_ABS[_I512]
        g_hi = (si * np.sqrt(e2) + 0.5 * (si * si) * e2) * 1.0011  # NaN (never far) if e2 < 0 by round-off
        far = [~np.isfinite(k[:, _I512]) | (k[:, _I512] > g_hi) for k in (kp, kn)]
    return far[0] & far[1]


def _k_grids(losses, native=False):
    """``[_k_grid(loss, native) for loss in losses]``, the missing grids of subsampled losses in one pass.

    Heterogeneous schedules have one loss per part: :func:`fastpld.mechanisms.subsampled_log_mgf_rows`
    evaluates all their MGFs at once and :func:`_far_from_gauss` spares most of them the moments of
    :func:`_gauss_extend`; the cached grids are bitwise those of :func:`_k_grid` (tested).
    """
    attr = "_fastpld_kgrid_native" if native else "_fastpld_kgrid"
    todo, seen = [], set()
    for loss in losses:
        # (exactly SubsampledLoss: a subclass may have its own log_mgf)
        if type(loss) is SubsampledLoss and id(loss) not in seen and getattr(loss, attr, None) is None:
            seen.add(id(loss))
            todo.append(loss)
    if len(todo) > 1:
        s = _S_ABS
        with np.errstate(over="ignore", invalid="ignore"):
            sc = np.where(s <= 512, s, np.nan)  # as _k_grid
            both = subsampled_log_mgf_rows(todo, np.concatenate([sc, -sc]), native=native)
            kp, kn = both[:, :s.size], both[:, s.size:]
            kp = np.where(np.isnan(kp), np.inf, kp)
            kn = np.where(np.isnan(kn), np.inf, kn)
            far = _far_from_gauss(kp, kn)
        for r, (loss, f) in enumerate(zip(todo, far.tolist())):
            cache = (kp[r], kn[r]) if f else _gauss_extend(loss, kp[r], kn[r], False)
            try:
                setattr(loss, attr, (cache[0], cache[1]))
            except AttributeError:  # pragma: no cover
                pass
    return [_k_grid(loss, native) for loss in losses]


def _est_window(parts, tail, native=False):
    """Approximate ``[lo, hi]`` holding ``sum_i (count_i copies of loss_i)`` up to ``tail`` each side.

    ``native``: the quantiles of one part come from the compiled kernel (same arithmetic).
    """
    # called ~10 times per candidate plan: one array operation per loss
    kp = kn = None
    lo_sup = hi_sup = 0.0
    if native and len(parts) == 1:
        loss, c = parts[0]
        a, b = _k_grid(loss, True)
        lo, up = _kernels.chernoff_quantiles(a, b, _S_ABS, float(c), math.log(tail))
        lo_sup = c * loss.support[0] if math.isfinite(loss.support[0]) else -math.inf
        hi_sup = c * loss.support[1] if math.isfinite(loss.support[1]) else math.inf
    for loss, c in ([] if native and len(parts) == 1 else parts):
        a, b = _k_grid(loss, native)
        kp = c * a if kp is None else kp + c * a
        kn = c * b if kn is None else kn + c * b
        lo_sup += c * loss.support[0] if math.isfinite(loss.support[0]) else -math.inf
        hi_sup += c * loss.support[1] if math.isfinite(loss.support[1]) else math.inf
    if kp is not None:
        lo, up = _chernoff_quantiles(kp, kn, tail, native)
    if not (math.isfinite(up) and math.isfinite(lo)):  # no MGF known: Gaussian approximation
        mean = var = 0.0
        for loss, c in parts:
            mean += c * loss.mean()
            var += c * loss.std() ** 2
        z = math.sqrt(-2 * math.log(tail)) * 1.5
        if not math.isfinite(up):
            up = mean + z * math.sqrt(var)
        if not math.isfinite(lo):
            lo = mean - z * math.sqrt(var)
    return max(lo, lo_sup), min(up, hi_sup)


# --------------------------------------------------------------------------------------
# Mesh choice
# --------------------------------------------------------------------------------------
_LEAF_COST = 24.0  # a bucketed CDF point costs about this many FFT points (mesh shape weights)
# time model of _predict, microseconds (fitted with native FFTs on a 2-core x86-64 machine)
# (refitted 2026-11-26 on native runs with the low-frequency series: float64 nodes ~0.3 ms + 0.045 us
# per point of a one-child node, long double ~1 ms + 0.18 us; leaves ~0.5-0.9 ms)
_T_NODE = 300.0
_T_NODE_LD = 700.0  # extra fixed cost of a long double node (series and kernels in long double)
_T_LEAF = 500.0
_T_LEAF_POINT = 0.3
_T_POINT_LD = 0.09  # per point of a long double node, per child FFT, at log2 N = 12
_T_POINT_64 = 0.022
# Heterogeneous plans (more than two distinct parts: blocks of many children with small powers)
# mostly run direct-power float64 nodes, whose cost the terms above overstate ~2x and misshape:
# fitted (2026-11-26, 1532 nodes of 1000 x 10, 50 x 100 and 200 x 5 subsampled Gaussian schedules
# at block sizes 2 to 64) as a fixed cost, a cost per point of the children (fold and the window's
# log-MGF sums) and per FFT point, within ~10% of the measured node time per plan.
_T_NODE_DIRECT = 270.0
_T_CHILD_POINT = 0.010
_T_POINT_DIRECT = 0.0051
# and their leaves (same day, in those schedules and 50 x 100 Laplace and Gaussian ones): the
# compiled subsampled-Gaussian leaf (coarse tails) ~30 us + 0.016-0.026 us per bucket, others
# ~150-270 us at a few hundred buckets
_T_LEAF_PSG = 30.0
_T_LEAF_PSG_POINT = 0.02
_T_LEAF_H = 150.0
_T_LEAF_H_POINT = 0.06


def _predict(plan, eps_az, log_term, wrap_tail, trunc_tail, wcache=None, budgets=None, native=False):
    """Choose meshes per group and predict the work; returns (meshes, cost, sizes).

    ``native``: the MGF grids and Chernoff quantiles come from the compiled kernels.

    ``wcache`` (a dict shared by the candidate plans of one composition) memoises the
    windows of objects holding copies of a single loss, keyed by the log tail rounded
    to an integer (prediction only: execution computes its own windows).
    """
    with np.errstate(invalid="ignore", over="ignore"):  # once here, not per _est_window call
        return _predict_impl(plan, eps_az, log_term, wrap_tail, trunc_tail, wcache, budgets, native)


def _predict_impl(plan, eps_az, log_term, wrap_tail, trunc_tail, wcache, budgets, native=False):
    if wcache is None:
        wcache = {}
    widths = {g: 0.0 for g in plan.groups}
    node_w = {}
    # Windows first, in array passes (a heterogeneous plan has a leaf per part and blocks of many
    # children); then the widths are added up in plan order as before (the same sums, bitwise).
    # single: per object holding copies of one loss, (loss, copies); its window is memoised in
    # wcache, computed at the key's canonical tail, so the memo's answer does not depend on which
    # plan asked first (the prediction, hence the meshes, must be deterministic)
    single = {}
    keys = {}
    stats = {}  # per node: (instances, sum and max of the multiplicities, number of children)
    height = {}  # leaves 0, nodes 1 + their highest child (for _agg_windows)
    a = {g: 0 for g in plan.groups}  # plan.copies_per_group(), in this pass
    leaf_lt = {}
    insts = plan.instances
    for o in plan.order:
        inst = insts[id(o)]
        if isinstance(o, _Leaf):
            a[o.group] += inst
            height[id(o)] = 0
            single[id(o)] = (o.loss, 1)
            lt = leaf_lt.get(inst)
            if lt is None:
                lt = leaf_lt[inst] = round(math.log(trunc_tail / max(inst, 1)))
            keys[id(o)] = (id(o.loss), 1, lt)
            continue
        g = o.group
        h = 0
        ms = []
        for c, m in o.children:
            ms.append(m)
            if c.group != g:
                a[g] += inst * m
            hc = height[id(c)]
            if hc > h:
                h = hc
        height[id(o)] = h + 1
        stats[id(o)] = (inst, sum(ms), max(ms), len(ms))
        first = single.get(id(o.children[0][0]))
        if first is None:
            continue
        copies = 0
        for c, m in o.children:
            k = single.get(id(c))
            if k is None or k[0] is not first[0]:
                break
            copies += k[1] * m
        else:
            single[id(o)] = (first[0], copies)
            keys[id(o)] = (id(first[0]), copies, round(math.log(wrap_tail / max(inst, 1))))
    stack = _grid_stack(wcache, [s[0] for s in single.values()], native)
    _single_windows(wcache, [(single[i][0], k) for i, k in keys.items() if k not in wcache], native, stack)
    # (heterogeneous plans: their blocks sum many truncated leaves, see _hetero_stack)
    agg_stack = _hetero_stack(stack, plan, wcache) if plan.n_parts > 2 else stack
    windows = _agg_windows(plan, single, keys, height, wrap_tail, agg_stack, native)
    # _precision_weight depends on the node through its stats only, and on its atoms where the
    # plain round-off estimate matters (as in _predicted_precision, which asks for them only then)
    pw_memo = {}
    pw_allow = 0.25 * (budgets.fp / (plan.n_nodes + plan.n_leaves)) if budgets is not None else math.inf
    for o in plan.order:
        key = keys.get(id(o))
        lo, hi = wcache[key] if key is not None else windows[id(o)]
        w = hi - lo
        if isinstance(o, _Leaf):
            widths[o.group] += _LEAF_COST * w
        else:
            sk = stats[id(o)]
            if _fp_plain(sk[0], sk[1], 13, _U64_CAST) > pw_allow:
                sk = (sk, _has_atoms(o))
            pw = pw_memo.get(sk)
            if pw is None:
                pw = pw_memo[sk] = _precision_weight(o, plan, budgets)
            widths[o.group] += w * (len(o.children) + 1) * pw
        node_w[id(o)] = w
    shape = {}
    for g in plan.groups:
        wg = max(widths[g], 1e-300)
        ag = max(a[g], 1)
        shape[g] = (wg / ag) ** (1.0 / 3.0)
    denom = sum(a[g] * shape[g] ** 2 for g in plan.groups)
    scale = eps_az / math.sqrt(max(denom, 1e-300) * log_term / 2)
    meshes = {g: scale * shape[g] for g in plan.groups}
    # predicted time in microseconds (fitted on this machine's kind): a fixed cost per node and
    # leaf, and per FFT point a cost that is ~10x higher in long double; the precision follows
    # _run_node's rule, and plans whose predicted round-off charge would not fit are ranked last
    cost = 0.0
    fp_pred = 0.0
    sizes = {}
    n_obj = plan.n_nodes + plan.n_leaves
    allowance = budgets.fp / n_obj if budgets is not None else math.inf
    node_allowance = budgets.fp / max(plan.n_nodes, 1) if budgets is not None else math.inf
    pp_memo = {}  # per (stats, atoms, lg): the precision guess's share of the cost and charge
    hetero = plan.n_parts > 2
    for o in plan.order:
        n = node_w[id(o)] / meshes[o.group] + 1
        sizes[id(o)] = n
        if isinstance(o, _Leaf):
            if not hetero:
                cost += _T_LEAF + _T_LEAF_POINT * n
            elif native and getattr(o.loss, "psg_params", None) is not None:
                cost += _T_LEAF_PSG + _T_LEAF_PSG_POINT * n
            else:
                cost += _T_LEAF_H + _T_LEAF_H_POINT * n
        else:
            nn = max(n, 2.0)
            lg = math.ceil(math.log2(nn))
            st = stats[id(o)]
            pk = (st, lg)
            if _fp_plain(st[0], st[1], lg) > 0.25 * allowance:  # (_predicted_precision's test for the atoms)
                pk = (st, lg, _has_atoms(o))
            if len(pk) == 3 and _dft_leaves(o, sizes):
                pk = pk + (True,)
            r = pp_memo.get(pk)
            if r is None:
                inst, msum, mmax, nk = st
                est64, est_ser, ld, mixed = _predicted_precision(inst, msum, mmax, lg, o, allowance, node_allowance)
                if ld and len(pk) == 4:  # lattice leaves through direct DFTs (sections 3e-3f of docs/roundoff.md)
                    fp_add = _fp_dft(inst, msum, _ULD, 2.0 ** lg, budgets.delta, mmax)
                elif ld:
                    fp_add = (_fp64_series(inst, msum, lg, mmax, False, _ULD)
                              if est_ser < est64 else _fp_plain(inst, msum, lg, _ULD))
                elif est64 > 0.25 * allowance:
                    fp_add = 2.5 * est_ser
                else:
                    fp_add = None
                per_point = _point_cost(nk, ld, mixed)
                if ld and est_ser <= node_allowance:  # the float64 try that is redone
                    per_point += _T_POINT_64
                r = pp_memo[pk] = (fp_add, ld, per_point)
            fp_add, ld, per_point = r
            if fp_add is not None:
                fp_pred += fp_add
            # direct power where _run_node runs one: float64 without the series (which needs a
            # large multiplicity and children short against N)
            child_pts = sum(sizes[id(c)] for c, _ in o.children) if hetero and not ld else 0.0
            if hetero and not ld and (fp_add is None or st[2] < 8 or child_pts * (_SERIES_R + 3) > 2 * nn * math.log2(nn)):
                cost += _T_NODE_DIRECT + _T_CHILD_POINT * child_pts + _T_POINT_DIRECT * nn * (len(o.children) + 1) * lg / 12
            else:
                cost += _T_NODE + (_T_NODE_LD if ld else 0.0) + nn * (len(o.children) + 1) * per_point * lg / 12
    # (a plan whose measured charges do not fit is not fatal: compose falls back to the next one)
    if budgets is not None and fp_pred > 0.9 * (budgets.delta - budgets.eta):
        cost = 1e15 * (1 + fp_pred / budgets.delta)  # likely refused for round-off: rank last
    return meshes, cost, sizes


def _grid_stack(wcache, losses, native):
    """``(row, KP, KN, LO, HI)``: the MGF grids of ``losses`` as matrix rows (``row``: by ``id(loss)``) and
    their support ends; built once per composition (memoised in ``wcache``), extended as needed."""
    key = ("grid stack", bool(native))
    st = wcache.get(key)
    have = st[0] if st is not None else {}
    new = list({id(x): x for x in losses if id(x) not in have}.values())
    if st is not None and not new:
        return st
    grids = _k_grids(new, native)
    row = dict(st[0]) if st is not None else {}
    for loss in new:
        row[id(loss)] = len(row)
    parts = [np.array([g[0] for g in grids]).reshape(len(new), _S_ABS.size),
             np.array([g[1] for g in grids]).reshape(len(new), _S_ABS.size),
             np.array([loss.support[0] for loss in new], dtype=np.float64),
             np.array([loss.support[1] for loss in new], dtype=np.float64)]
    if st is not None:
        parts = [np.concatenate([old, p]) for old, p in zip(st[1:], parts)]
    st = wcache[key] = (row, *parts)
    return st


def _single_windows(wcache, todo, native, stack=None):
    """Fill ``wcache[(id(loss), copies, lt)]`` with ``_est_window([(loss, copies)], e^lt)`` for ``todo``
    (pairs ``(loss, key)``), in one array pass per ``lt``: the same quotients and minima as the
    Chernoff kernels (bitwise); the rare keys without finite quantiles go through _est_window.
    ``stack``: :func:`_grid_stack` holding the losses, if at hand.  (Called under _predict's errstate.)"""
    todo = list({k: (loss, k) for loss, k in todo}.values())
    if len(todo) < 4:
        for loss, k in todo:
            wcache[k] = _est_window([(loss, k[1])], math.exp(k[2]), native)
        return
    st = stack if stack is not None else _grid_stack(wcache, [loss for loss, _ in todo], native)
    srow = st[0]
    by_lt = {}
    for loss, k in todo:
        by_lt.setdefault(k[2], []).append((loss, k))
    for lt_key, items in by_lt.items():
        if len(items) < 8:  # (a few: the per-key kernel costs less than the array set-up)
            for loss, k in items:
                wcache[k] = _est_window([(loss, k[1])], math.exp(k[2]), native)
            continue
        lt = math.log(math.exp(lt_key))  # as _est_window(..., math.exp(lt)) takes the log of its tail
        rows = np.array([srow[id(loss)] for loss, _ in items], dtype=np.intp)
        copies = [k[1] for _, k in items]
        kp, kn = np.take(st[1], rows, axis=0), np.take(st[2], rows, axis=0)
        if any(c != 1 for c in copies):  # (x * 1.0 == x)
            c = np.array(copies, dtype=np.float64)[:, None]
            np.multiply(c, kp, out=kp)
            np.multiply(c, kn, out=kn)
        np.subtract(kp, lt, out=kp)
        np.subtract(kn, lt, out=kn)
        up = np.minimum.reduce(np.divide(kp, _S_ABS, out=kp), axis=1).tolist()
        lo = (-np.minimum.reduce(np.divide(kn, _S_ABS, out=kn), axis=1)).tolist()
        lo_s, hi_s = st[3][rows].tolist(), st[4][rows].tolist()
        for j, (loss, k) in enumerate(items):
            lo_j, up_j = lo[j], up[j]
            if not (math.isfinite(lo_j) and math.isfinite(up_j)):  # NaN or no MGF: _est_window's fallback
                wcache[k] = _est_window([(loss, k[1])], math.exp(lt_key), native)
                continue
            # (copies >= 1: an infinite support end stays infinite, as _est_window's test for it gave)
            wcache[k] = (max(lo_j, copies[j] * lo_s[j]), min(up_j, copies[j] * hi_s[j]))


def _hetero_stack(stack, plan, wcache):
    """:func:`_grid_stack` restricted to the plan's losses, their ``K(-s)`` grids tightened.

    ``K(-s)`` of a subsampled loss is a chord between integer orders: ``0`` on ``[0, 1]`` and far
    above the truth past it, so the lower Chernoff quantile of a block of many such leaves was
    about ``-log(1/tail)``, its predicted window 2-4x too wide at the second level, and the planner
    picked small blocks.  A privacy loss has ``K(0) = K(-1) = 0`` and, near Gaussian,
    ``K(s) ~ v s (s + 1) / 2`` with ``v ~ K(1)``; the subsampled losses' left tails are lighter
    than that, so ``K(-s)`` is taken as the smaller of its grid and ``1.25 K(1) s (s - 1) / 2``.
    Planning only (execution bounds its windows from the concrete PMFs).  (Capping each leaf's
    grid past its truncation window was tried as well: no predicted cost changed.)
    """
    srow, kp, kn, s_lo, s_hi = stack
    used = {}  # the plan's losses: the returned stack has their rows only (a sample plan: a few)
    for o in plan.order:
        if isinstance(o, _Leaf):
            r = srow.get(id(o.loss))
            if r is not None:
                used[id(o.loss)] = (r, isinstance(o.loss, SubsampledLoss))
    if not any(sub for _, sub in used.values()):
        return stack
    rows = sorted(set(used.values()))
    key = ("hetero stack", np.array(rows, dtype=np.intp).tobytes())  # (the candidate plans share it)
    out = wcache.get(key)
    if out is None:
        sel = np.array([r for r, _ in rows], dtype=np.intp)
        kp2, kn2 = kp[sel], kn[sel]
        sub = np.array([i for i, (_, is_sub) in enumerate(rows) if is_sub], dtype=np.intp)
        quad = 1.25 * kp2[sub, _I1][:, None] * (_S_ABS * (_S_ABS - 1.0) / 2.0)[None, :]
        kn2[sub] = np.where(np.isfinite(quad), np.minimum(kn2[sub], quad), kn2[sub])
        out = wcache[key] = ({r: i for i, (r, _) in enumerate(rows)}, kp2, kn2, s_lo[sel], s_hi[sel])
    new_row = out[0]
    return ({i: new_row[r] for i, (r, _) in used.items()}, *out[1:])


def _agg_windows(plan, single, keys, height, wrap_tail, stack, native):
    """Wrap windows of the nodes not holding copies of one loss (``keys`` has those): their children's
    summed MGF grids (``sum_c m_c (copies_c K_c)``) and Chernoff quantiles, as _predict_impl computed them
    node by node, here in array passes over the nodes of one height and number of children.

    The sums run child by child in child order (``acc + row``), the quotients and minima are the
    Chernoff kernels' (bitwise the same windows); a node without finite quantiles gets _est_window's.
    ``stack``: :func:`_grid_stack` of the single-loss objects' losses.  (Called under _predict's errstate.)
    """
    srow, s_kp, s_kn, s_lo, s_hi = stack
    groups = {}
    for o in plan.order:
        if id(o) not in keys:
            groups.setdefault((height[id(o)], len(o.children)), []).append(o)
    agg = {}  # id(node) -> (kp row, kn row, lo_sum, hi_sum)
    out = {}
    n_s = _S_ABS.size
    lo_l, hi_l = s_lo.tolist(), s_hi.tolist()
    for (_, k), nodes in sorted(groups.items(), key=lambda t: t[0]):
        nb = len(nodes)
        if nb * k <= 8:  # a few children: node by node, as _predict_impl did (the array set-up costs more)
            for o in nodes:
                kp = kn = None
                lo_s = hi_s = 0.0
                for c, m in o.children:
                    s = single.get(id(c))
                    if s is not None:
                        copies, r = s[1], srow[id(s[0])]
                        ckp, ckn, clo, chi = copies * s_kp[r], copies * s_kn[r], copies * lo_l[r], copies * hi_l[r]
                    else:
                        ckp, ckn, clo, chi = agg[id(c)]
                    kp = m * ckp if kp is None else kp + m * ckp
                    kn = m * ckn if kn is None else kn + m * ckn
                    lo_s += m * clo
                    hi_s += m * chi
                agg[id(o)] = (kp, kn, lo_s, hi_s)
                tail = wrap_tail / max(plan.instances[id(o)], 1)
                w = _agg_window(kp, kn, lo_s, hi_s, tail, native)
                if not (math.isfinite(w[0]) and math.isfinite(w[1])):
                    w = _est_window(_leaf_parts(o), tail, native)
                out[id(o)] = w
            continue
        kp_in = kn_in = None
        sel, rows, cop, mul, sups = [], [], [], [], []
        pos = 0
        for o in nodes:
            lo_s = hi_s = 0.0
            for c, m in o.children:
                s = single.get(id(c))
                if s is not None:
                    copies = s[1]
                    r = srow[id(s[0])]
                    sel.append(pos)
                    rows.append(r)
                    # (copies >= 1: an infinite end stays infinite, as _predict_impl's test for it gave)
                    clo, chi = copies * lo_l[r], copies * hi_l[r]
                else:
                    copies = 1  # x * 1.0 == x: an aggregate enters as it is
                    ckp, ckn, clo, chi = agg[id(c)]
                    if kp_in is None:
                        kp_in, kn_in = np.empty((nb * k, n_s)), np.empty((nb * k, n_s))
                    kp_in[pos] = ckp
                    kn_in[pos] = ckn
                cop.append(copies)
                mul.append(m)
                lo_s += m * clo
                hi_s += m * chi
                pos += 1
            sups.append((lo_s, hi_s))
        if kp_in is None:  # only leaf-like children: one gather
            rows = np.array(rows, dtype=np.intp)
            kp_in, kn_in = np.take(s_kp, rows, axis=0), np.take(s_kn, rows, axis=0)
        elif rows:
            kp_in[sel] = s_kp[rows]
            kn_in[sel] = s_kn[rows]
        # m (copies K), in place (the multiplication by copies skipped where all are 1: exact)
        if any(x != 1 for x in cop):
            copies = np.array(cop, dtype=np.float64)[:, None]
            np.multiply(copies, kp_in, out=kp_in)
            np.multiply(copies, kn_in, out=kn_in)
        mult = np.array(mul, dtype=np.float64)[:, None]
        np.multiply(mult, kp_in, out=kp_in)
        np.multiply(mult, kn_in, out=kn_in)
        kp_in = kp_in.reshape(nb, k, n_s)
        kn_in = kn_in.reshape(nb, k, n_s)
        kp, kn = kp_in[:, 0].copy(), kn_in[:, 0].copy()
        for j in range(1, k):  # child by child, as the sequential sum
            np.add(kp, kp_in[:, j], out=kp)
            np.add(kn, kn_in[:, j], out=kn)
        tails = [wrap_tail / max(plan.instances[id(o)], 1) for o in nodes]
        lt = np.array([math.log(t) for t in tails])[:, None]
        up = np.minimum.reduce((kp - lt) / _S_ABS, axis=1)  # (np.min without its wrapper)
        lo = -np.minimum.reduce((kn - lt) / _S_ABS, axis=1)
        for b, o in enumerate(nodes):
            agg[id(o)] = (kp[b], kn[b], sups[b][0], sups[b][1])
            lo_b, up_b = float(lo[b]), float(up[b])
            # (_chernoff_quantiles: NaN -> -inf / +inf; _agg_window: clipped to the supports)
            lo_b = -math.inf if math.isnan(lo_b) else lo_b
            up_b = math.inf if math.isnan(up_b) else up_b
            w = (max(lo_b, sups[b][0]), min(up_b, sups[b][1]))
            if not (math.isfinite(w[0]) and math.isfinite(w[1])):
                w = _est_window(_leaf_parts(o), tails[b], native)
            out[id(o)] = w
    return out


def _predicted_precision(inst, msum, mmax, lg, node, allowance, node_allowance, u64=None):
    """The planner's guess of a node's precision: ``(est64, est_ser, ld, mixed)``.

    ``est64``/``est_ser``: predicted float64 charges, plain and with the low-frequency series
    (the series, and the lattice test, only where the plain charge matters); ``ld``: long double,
    since _run_node tries float64 up to the node's share of the round-off budget and the measured
    charge is typically a few times the estimate, so the try is predicted to hold up to half of it;
    ``mixed``: a long double node with the series (large powers) takes float64 forward FFTs
    (docs/roundoff.md 3c).  ``u64``: float64's ``u`` if not the (patchable) ``_U64``.
    """
    est64 = _fp_plain(inst, msum, lg, u64)
    if est64 <= 0.25 * allowance:
        return est64, est64, False, False
    est_ser = _fp64_series(inst, msum, lg, mmax, _has_atoms(node), u64)
    ld = est_ser > 0.5 * node_allowance
    return est64, est_ser, ld, ld and est_ser < est64 and msum >= _MIXED_MIN_POWER


def _point_cost(n_children, ld, mixed):
    """Predicted time per FFT point of a node (per child FFT, at ``log2 N = 12``), microseconds."""
    if mixed:  # children forward in float64, one inverse in long double
        return (n_children * _T_POINT_64 + _T_POINT_LD) / (n_children + 1)
    return _T_POINT_LD if ld else _T_POINT_64


def _precision_weight(o, plan, budgets):
    """Relative cost per point of a node for the mesh shape: long double nodes cost ~4x (2.5x with
    float64 forward FFTs) a float64 point, so their group should get a larger share of the eps
    budget.  The precision is guessed with _run_node's rule at ``log2 N = 13`` (the meshes, hence
    ``N``, are not known yet); planning only."""
    if budgets is None:
        return 1.0
    # (float64's actual u, not _U64: tests patch that to run the same meshes all in long double)
    _, _, ld, mixed = _predicted_precision(plan.instances[id(o)], sum(m for _, m in o.children),
                                           max(m for _, m in o.children), 13, o,
                                           budgets.fp / (plan.n_nodes + plan.n_leaves),
                                           budgets.fp / max(plan.n_nodes, 1), _U64_CAST)
    return _point_cost(len(o.children), ld, mixed) / _T_POINT_64


def _chernoff_quantiles(kp, kn, tail, native=False):
    """``(lo, up)`` with ``Pr[S < lo], Pr[S > up] <= tail`` from summed log-MGF grids on ``+-_S_ABS``.

    ``+inf`` grid entries (unknown MGF) drop out of the minimum; non-finite if nothing is known.
    ``native``: one pass of the compiled kernel (same arithmetic, same result).
    """
    lt = math.log(tail)
    if native:
        return _kernels.chernoff_quantiles(kp, kn, _S_ABS, 1.0, lt)
    with np.errstate(invalid="ignore", over="ignore"):
        up = float(np.min((kp - lt) / _S_ABS))
        lo = -float(np.min((kn - lt) / _S_ABS))
    return (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(up) else up)


def _agg_window(kp, kn, lo_sup, hi_sup, tail, native=False):
    """Chernoff window of a sum from its summed MGF grids (as :func:`_est_window`, non-finite if unknown)."""
    lo, up = _chernoff_quantiles(kp, kn, tail, native)
    return max(lo, lo_sup), min(up, hi_sup)


def _leaf_parts(node):
    acc = {}
    stack = [(node, 1)]
    while stack:
        o, mult = stack.pop()
        if isinstance(o, _Leaf):
            acc[id(o.loss)] = (o.loss, acc.get(id(o.loss), (o.loss, 0))[1] + mult)
        else:
            for c, m in o.children:
                stack.append((c, mult * m))
    return list(acc.values())


# --------------------------------------------------------------------------------------
# Execution
# --------------------------------------------------------------------------------------
@dataclass
class _Budgets:
    eps: float
    delta: float
    eta: float
    trunc: float
    wrap: float
    fp: float

    @classmethod
    def split(cls, eps, delta):
        """``delta`` shared out as :func:`compose` shares it (``_SHARE_*``)."""
        return cls(eps=eps, delta=delta, eta=_SHARE_ETA * delta, trunc=_SHARE_TRUNC * delta,
                   wrap=_SHARE_WRAP * delta, fp=_SHARE_FP * delta)


# Chernoff s-grid (in units of 1/sd of the index sum): a coarse grid, then a refinement around
# the optimum of each side.  s -> (K(s) + c) / s is unimodal (its derivative's numerator
# s K'(s) - K(s) - c increases, K being convex), so the optimum lies between the coarse
# neighbours of the best coarse point, and the refinement reaches the spacing of a 56-point
# grid over the same range with ~13 MGF evaluations per side instead of 56.  Any s > 0 gives a
# valid bound: the grid only decides how tight the window and the wrap charge are.
_S_REL = np.geomspace(0.02, 80.0, 12)
_S_REFINE = (_S_REL[1] / _S_REL[0]) ** (np.array([-4, -3, -2, -1, 1, 2, 3, 4]) / 5.0)


def _chernoff_window(inputs, w, native=False):
    """Window of the linear index sum and helpers for exact tail bounds.

    ``inputs``: list of (probs, centre_index, m).  Returns (lo, hi, tailfun) where
    ``tailfun(x, upper)`` bounds ``Pr[I >= x]`` / ``Pr[I <= x]``.  ``native``: the
    moments and the log-MGF grid come from the compiled kernels (same sums), and the whole
    search below runs in one compiled call when the core is built (same steps, same result).
    """
    if native:
        r = _kernels.chernoff_window([p for p, _, _ in inputs], [cen for _, cen, _ in inputs],
                                     [m for _, _, m in inputs], _S_REL, _S_REFINE, w)
        if r is not None:
            lo_n, hi_n, sp_n, Kp_n, sn_n, Kn_n = r

            def tail_n(x, upper):
                e = Kp_n - sp_n * x if upper else Kn_n - sn_n * x
                return float(min(1.0, math.exp(min(0.0, float(e.min())))))

            return lo_n, hi_n, tail_n
    sd2 = 0.0
    ks = []
    for p, cen, m in inputs:
        pf = np.asarray(p, dtype=np.float64)
        if native:
            sd2 += m * _kernels.pmf_moments(pf, cen)[2]
            ks.append((pf, cen, m))
            continue
        idx = np.arange(pf.size, dtype=np.float64) - cen
        tot = pf.sum()
        mu = float(np.dot(idx, pf) / tot)
        sd2 += m * float(np.dot((idx - mu) ** 2, pf) / tot)
        with np.errstate(divide="ignore"):
            logp = np.log(pf)
        ks.append((logp, idx, m))
    sd = math.sqrt(sd2) if sd2 > 0 else 1.0

    def log_mgf(s_all):
        """Exact log-MGF of the index sum at ``s_all`` (plus a round-off margin)."""
        K = np.zeros_like(s_all)
        for a, idx, m in ks:
            if native:
                _kernels.log_mgf_grid(a, idx, s_all, m, K)
                continue
            M = s_all[:, None] * idx[None, :] + a[None, :]
            mx = M.max(axis=1)
            K += m * (mx + np.log(np.exp(M - mx[:, None]).sum(axis=1)))
        return K + 1e-9 * (1 + np.abs(K))  # round-off margin on the log-MGF

    lw = math.log(2.0 / w)
    s = _S_REL / sd
    last = s.size - 1
    # coarse points first around the optimum of a Gaussian sum (s sd = sqrt(2 log(2/w))), then
    # outwards on a side while its best point is at the edge of what was evaluated (unimodal)
    k0 = int(round(math.log(math.sqrt(2 * lw) / _S_REL[0]) / math.log(_S_REL[1] / _S_REL[0])))
    k0 = min(max(k0, 2), last - 2)
    Kp_d, Kn_d = {}, {}
    need_u = need_l = list(range(k0 - 2, k0 + 3))
    while need_u or need_l:
        K = log_mgf(np.concatenate([s[need_u], -s[need_l]]))
        Kp_d.update(zip(need_u, K[: len(need_u)]))
        Kn_d.update(zip(need_l, K[len(need_u):]))
        iu = min(Kp_d, key=lambda i: (Kp_d[i] + lw) / s[i])
        il = max(Kn_d, key=lambda i: (Kn_d[i] + lw) / -s[i])
        need_u = ([j for j in (iu - 1, iu - 2) if j >= 0 and j not in Kp_d]
                  + [j for j in (iu + 1, iu + 2) if j <= last and j not in Kp_d])
        need_l = ([j for j in (il - 1, il - 2) if j >= 0 and j not in Kn_d]
                  + [j for j in (il + 1, il + 2) if j <= last and j not in Kn_d])
        if iu - 1 in Kp_d or iu == 0:
            need_u = [j for j in need_u if j > iu]
        if iu + 1 in Kp_d or iu == last:
            need_u = [j for j in need_u if j < iu]
        if il - 1 in Kn_d or il == 0:
            need_l = [j for j in need_l if j > il]
        if il + 1 in Kn_d or il == last:
            need_l = [j for j in need_l if j < il]
    ku, kl = sorted(Kp_d), sorted(Kn_d)
    Kp = np.array([Kp_d[i] for i in ku])
    Kn = np.array([Kn_d[i] for i in kl])
    s_u, s_l = s[ku], s[kl]
    # refine each side around its best coarse point (staying between its coarse neighbours)
    ru = s[iu] * _S_REFINE[(4 if iu == 0 else 0):(4 if iu == last else 8)]
    rl = s[il] * _S_REFINE[(4 if il == 0 else 0):(4 if il == last else 8)]
    Kr = log_mgf(np.concatenate([ru, -rl]))
    sp = np.concatenate([s_u, ru])
    sn = -np.concatenate([s_l, rl])
    Kp = np.concatenate([Kp, Kr[: ru.size]])
    Kn = np.concatenate([Kn, Kr[ru.size:]])

    def tail(x, upper):
        if upper:
            e = Kp - sp * x
        else:
            e = Kn - sn * x
        return float(min(1.0, math.exp(min(0.0, float(e.min())))))

    u_star = float(np.min((Kp + lw) / sp))
    l_star = float(np.max((Kn + lw) / sn))
    return math.floor(l_star) + 1, math.ceil(u_star) - 1, tail


_SERIES_R = 48  # degree of the low-frequency series
_SERIES_PHI = 4.0  # used for theta max|j - c| <= 4: remainder <= 4^49 / 49! ~ 5e-34
_SERIES_MIN_ABS = 0.25  # and only while |1 - Z| >= 0.25 holds (Lipschitz constants of log and arg)
_FACT = [float(math.factorial(r)) for r in range(_SERIES_R + 2)]


def _polar_rel(cond, msum, C, u):
    """Relative error of a polar power ``prod_c X_c^m_c = exp(L) cis(Phi) i^Q`` from the rounding of its
    evaluation (docs/roundoff.md sections 3 and 7): ``cond = sum_c m_c (|log|X_c|| + |psi_c|)``,
    ``msum = sum_c m_c``, ``C`` inputs, every maths-library call (``|X|``, ``log``, ``atan2``, ``exp``,
    ``cos``, ``sin``) within 4 ulp (8 u relative): ``m log|X|`` errs by ``m (8 u + 9 u |log|X||)``, ``m psi``
    by ``9 u m |psi|``, the sums over inputs by ``(C - 1) u`` of their terms' magnitudes, ``exp`` and
    ``cis`` by ``8 u`` each, the products by ``1.5 u``, the reduction mod ``2 pi`` by ``20 u + 2.6 u |Phi|``
    (at most 2 ulp in ``2 pi`` per multiple, one rounding): ``u ((11 + C) cond + 8 msum + 37.5)`` to first
    order, and 1.01 for the higher orders (the relative error is far below 0.02)."""
    return 1.01 * u * ((11 + C) * cond + 8 * msum + 40)


def _gamma(k, u):
    return k * u / (1.0 - k * u)


def _series_spectrum(ins, N, dtype=np.float64, native=True):
    """Accurate low-frequency spectrum of a node: ``(K, L, Phi, dL, dPhi, g_extra, scale)`` or ``None``.

    Why: a node raises each input spectrum ``X`` to the power ``m``; an FFT computes ``X`` to
    an absolute ``g ~ u log N``, and near frequency 0 (``|X| ~ 1``) that error grows ``m``-fold,
    which made large powers need long double and made the round-off charge grow like ``k u``.
    Here, for the frequencies ``theta_k = 2 pi k / N`` with ``theta_k d rho <= 4`` (``d``, a power
    of two, bounds ``|j - cen|`` on the input's support; ``d rho >= max |j - cen - c d|``), the input's
    characteristic function is expanded about its mean ``c d``:
    ``X / mu0 = e^(-i theta c d) (1 - Z')``, ``Z' = -sum_(r>=1) (-i theta d)^r C_r / (r! mu0)``
    with the central moments ``C_r`` of ``s = (j - cen) / d`` (long double pairwise sums and a
    binomial transform), evaluated with a rigorous bound ``dZ`` on ``|Z'~ - Z'|`` (moment
    rounding, Horner rounding, Taylor remainder ``4^49 / 49!``).  The linear phase
    ``m theta c d`` is reduced exactly (integer part modulo ``N``).  Then ``m log|1 - Z'|`` and
    ``m arg(1 - Z')`` carry errors ``~ m dZ`` with ``dZ ~ u |Z'|``: where ``|X|^m`` matters,
    ``m |Z'| = O(1)``, so the error no longer grows with ``m``.  Evaluated in ``dtype``
    (float64 or long double: the node's precision).

    ``native``: the compiled kernels (the numpy backend keeps the numpy reference).

    The spectrum computed for an input is that of ``mu0~ p / mu0`` (its normalised PMF times the
    computed total ``mu0~``): a common scale per input, which the node's normalisation removes
    (``scale`` bounds ``sum m |log(mu0~ / mu0)|``; ``_run_node`` widens ``l1`` by ``1 + 2 scale``).
    The FFT values at the other frequencies approximate the same scaled spectrum within
    ``g + |mu0~ - mu0|``: ``g_extra`` is that addition.  ``L, Phi`` (in ``dtype``) are the summed
    ``m log|X|`` and ``m arg X`` at ``k < K``; ``dL, dPhi`` bound their errors.  ``None`` when
    no frequency qualifies.
    """
    F = N // 2 + 1
    R = _SERIES_R
    W = np.dtype(dtype).type
    u = _U64 if W is np.float64 else _ULD  # working precision of the evaluation
    LD = np.longdouble
    two_pi = W(_TWO_PI_LD) if W is LD else 2 * math.pi
    heads = []
    K = F
    for p, cen, m in ins:
        n = p.size
        tmax = max(cen, n - 1 - cen, 1)
        d = 2.0 ** math.ceil(math.log2(tmax))
        Mld = _kernels.series_moments(np.ascontiguousarray(p), cen, d, R + 3, native)
        if not Mld[0] > 0:
            return None
        c = Mld[1] / Mld[0]  # expansion point (the mean, in units of d); any value is exact below
        rho = (tmax / d + abs(float(c))) * (1 + 1e-12)  # |s_j - c| <= rho
        K = min(K, int(math.floor(_SERIES_PHI * N / (2 * math.pi * d * rho))) + 1)
        heads.append((d, Mld, c, rho))
    if K < 2:
        return None
    K0 = K
    Ltot = np.zeros(K, dtype=W)
    Ptot = np.zeros(K, dtype=W)
    dL = np.zeros(K)
    dP = np.zeros(K)
    absL = np.zeros(K)
    absP = np.zeros(K)
    g_extra = 0.0
    scale = 0.0
    for (p, cen, m), (d, Mld, c, rho) in zip(ins, heads):
        n = p.size
        lev = max(n - 1, 1).bit_length() + _kernels.SERIES_BLOCK + 1
        mu0l = Mld[0]
        mu0 = float(mu0l)
        Kc, d0, Lc, Pc, dLc, dPc, aL, aP = _series_input(Mld, c, rho, d, m, n, N, K0, W, u, lev, two_pi, native)
        if Kc < K:
            K = Kc
            if K < 2:
                return None
        g_extra = max(g_extra, d0)
        scale += m * d0 / (mu0 - d0)
        Ltot = Ltot + Lc
        Ptot = Ptot + Pc
        absL += aL
        absP += aP
        dL += dLc
        dP += dPc
        # the scale: log|mu0~ e^(-i theta c d) (1 - Z')| = log mu0~ + log|1 - Z'|
        ls = W(m) * W(np.log(mu0l))  # |log mu0~| ~ u: its rounding is negligible
        Ltot = Ltot + ls
        absL += abs(float(ls))
        dL += 4 * u * abs(float(ls))
    C = len(ins)
    dL = dL + _gamma(2 * C, u) * absL
    dP = dP + _gamma(2 * C, u) * absP
    if scale > 1e-6:
        return None
    return K, Ltot[:K], Ptot[:K], dL[:K], dP[:K], g_extra, scale


def _series_input(Mld, c, rho, d, m, n, N, K0, W, u, lev, two_pi, native=True):
    """One input's terms of :func:`_series_spectrum`: ``(K, d0, L, Phi, dL, dPhi, |L|, |Phi|)``.

    ``K``: the first frequency where ``|1 - Z'| - dZ < 1/4`` (``K0`` if none); the arrays have
    ``K0`` entries, valid below ``K``.  Compiled (``_core.series_input``) when built and ``native``
    (the numpy backend keeps this numpy reference).
    """
    R = _SERIES_R
    uld = _ULD
    LD = np.longdouble
    fact_ld, fact, binom = _SERIES_CONST
    hor_g = _SERIES_HOR[W is LD]
    if native and _kernels._core is not None:
        L = np.zeros(K0, dtype=W)
        P = np.zeros(K0, dtype=W)
        dL, dP, aL, aP = np.zeros(K0), np.zeros(K0), np.zeros(K0), np.zeros(K0)
        Kc, d0 = _kernels._core.series_input(Mld, np.array([c], dtype=LD), float(rho), float(d), float(m), int(n),
                                             int(N), fact_ld, fact, binom, hor_g, _SERIES_GC, float(u), float(uld),
                                             int(lev), _FACT[R + 1], np.array([two_pi], dtype=W), L, P, dL, dP, aL, aP)
        return Kc, d0, L, P, dL, dP, aL, aP
    k = np.arange(K0).astype(W)
    kk = np.arange(K0, dtype=np.int64)
    mu0l = Mld[0]
    mu0 = float(mu0l)
    # |mu0~ - mu0| of the compensated long double sum (mu0~ is the series' scale): u + gamma_(2n)^2
    d0 = 1.02 * (uld + _gamma(2 * n + 2, uld) ** 2) * mu0
    # |M~_i - M_i| <= gamma_(i + lev) A_i, A_i >= sum p |s|^i: even i from M_i itself, odd i by
    # Cauchy-Schwarz sqrt(A_(i-1) A_(i+1))
    gi = _gamma(np.arange(R + 3.0) + lev, uld)
    Mf = Mld.astype(np.float64)
    A = np.empty(R + 3)
    A[0::2] = Mf[0::2] * (1 + 1.01 * gi[0::2])
    A[1::2] = np.sqrt(A[0:-1:2] * A[2::2]) * 1.01  # R even: A has R + 3 entries
    A = np.minimum(A, mu0 + d0)  # |s| <= 1
    e = (gi * A)[: R + 1]
    # M_0, M_1 are compensated sums (their errors would grow with m: a mean shift)
    g2 = _gamma(2 * n + 2, uld) ** 2
    e[:2] = 1.01 * (uld * np.abs(Mf[:2]) + g2 * A[:2])
    # central moments about c by the binomial transform (long double), with their errors
    Mld = Mld[: R + 1]
    pc = np.cumprod(np.concatenate([[LD(1)], np.full(R, -c, dtype=LD)]))  # (-c)^r, r roundings
    # row r of the lower-triangular binomial matrix times M_i (-c)^(r - i) (zeros above the diagonal)
    shift = np.zeros((R + 1, R + 1), dtype=LD)
    idx = np.arange(R + 1)
    diff = idx[:, None] - idx[None, :]
    low = diff >= 0
    shift[low] = pc[diff[low]]
    terms = binom * shift * Mld[None, :]
    Cm = terms.sum(axis=1)
    magf = np.abs((binom * shift).astype(np.float64))
    eC = magf @ e + _SERIES_GC * np.abs(terms.astype(np.float64)).sum(axis=1)
    # series coefficients of Z' (|C_r| relative rounding of the division/cast in da)
    a = (Cm / (mu0l * fact_ld)).astype(W)
    af = np.abs(a.astype(np.float64))
    da = 1.01 * (1.01 * eC + np.abs(Cm.astype(np.float64)) * d0 / mu0) / (mu0 * fact) + 5 * u * af
    # Horner in phi^2 (relative error of phi <= 3 u, in hor_g): Re Z' = a2 phi^2 - a4 phi^4 + ...,
    # Im Z' = a1 phi - a3 phi^3 + ...; dz adds the coefficient errors, Horner rounding and the
    # Taylor remainder 1.01 (phi rho)^(R+1) / (R+1)!  (|s - c| <= rho)
    re, im, dz = _kernels.series_eval(a, da + hor_g * af, W(two_pi * W(d) / W(N)), rho, _FACT[R + 1], K0, native)
    wre = 1 - re
    wabs = np.hypot(wre, im).astype(np.float64)
    gap = wabs * (1 - 10 * u) - dz  # (hypot within 4 ulp, and 1 - Re's rounding)
    bad = np.flatnonzero(~(gap >= _SERIES_MIN_ABS))
    Kc = int(bad[0]) if bad.size else K0
    # log |1 - Z'| = log1p(v) / 2, v = Im^2 - Re (2 - Re); |log|w'| - log|w|| <= |w' - w| / min |w|
    v = im * im - re * (2 - re)
    with np.errstate(divide="ignore", invalid="ignore"):  # only k < K (|1 - Z'| >= 1/4) is used
        lw = np.log1p(v) / 2
        ref, imf, lwf = np.abs(re.astype(np.float64)), np.abs(im.astype(np.float64)), np.abs(lw.astype(np.float64))
        den = 0.99 * gap * gap
        # (+ log1p's rounding: 4 ulp = 8 u relative, docs/roundoff.md section 7)
        dlw = dz / gap + 0.5 * _gamma(4, u) * (ref * (2 + ref) + imf * imf) / den + 8 * u * lwf
        ph = np.arctan2(-im, wre)
        # (rounding 1 - Re moves w along the real axis: the angle moves by |Im| |dw| / |w|^2)
        dph = (math.pi / 2) * dz / gap + u * (1 + ref) * imf / (gap * gap) + 8 * u * np.abs(ph.astype(np.float64))
    # linear phase -m theta c d of the shift to c: T = m c d (long double; d a power of two),
    # T = Ti + Tf with Ti an integer whose phase 2 pi (k Ti mod N) / N is reduced exactly
    T = LD(m) * c * LD(d)
    Ti = int(np.rint(T))
    Tf = W(T - LD(Ti))
    step = W(two_pi / W(N))
    lin = -step * ((kk * Ti) % N).astype(W) - step * k * Tf
    dlin = 8 * u * (2 * math.pi) + (2 * math.pi / N) * kk * (2 * uld * abs(float(T)) + 4 * u * abs(float(Tf)))
    Lc = W(m) * lw
    mph = W(m) * ph
    aL = np.abs(Lc.astype(np.float64))
    aP = np.abs(mph.astype(np.float64)) + np.abs(lin.astype(np.float64))
    dLc = 1.01 * m * dlw + 2 * u * aL
    dPc = 1.01 * m * dph + 2 * u * np.abs(mph.astype(np.float64)) + 1.01 * dlin
    return Kc, d0, Lc, mph + lin, dLc, dPc, aL, aP


_SERIES_CONST = (
    np.array([math.factorial(r) for r in range(_SERIES_R + 1)], dtype=np.longdouble),
    np.array([float(math.factorial(r)) for r in range(_SERIES_R + 1)]),
    np.array([[math.comb(r, i) for i in range(_SERIES_R + 1)] for r in range(_SERIES_R + 1)], dtype=np.longdouble),
)
# Horner rounding per coefficient, float64 / long double: a_r passes <= r + 2 roundings of the
# Horner steps, and phi (relative error 3 u) enters as phi^r, x = phi^2 (7 u) as x^(r/2): <= 5r + 2
_SERIES_HOR = {False: np.array([_gamma(6 * r + 8, _U64) for r in range(_SERIES_R + 1)]),
               True: np.array([_gamma(6 * r + 8, _ULD) for r in range(_SERIES_R + 1)])}
# rounding of the binomial transform (products and the sum of row r), long double
_SERIES_GC = np.array([_gamma(3 * r + 3, _ULD) for r in range(_SERIES_R + 1)])


def _series_amp(ser, u_node):
    """``(lp_low, amp_low)`` of :func:`_fp_fft_bound` at the series frequencies for a node in ``u_node``.

    ``|exp(L~) cis(Phi~) - exp(L) cis(Phi)| <= e^L~ (expm1(dL) + e^dL dPhi)``, plus the polar
    evaluation in the node's precision (``exp``, reduction mod 2 pi, ``cos``, ``sin``, products).
    """
    K, L, P, dL, dP = ser[:5]
    L = L.astype(np.float64)
    P = P.astype(np.float64)
    with np.errstate(over="ignore", under="ignore"):
        amp = 1.01 * np.exp(L) * (np.expm1(dL) + np.exp(dL) * dP + 8 * u_node * (5 + np.abs(P) + np.abs(L)))
    return L + dL, amp


def _fp_fft_bound(specs, N, u, g_extra=0.0, low=None, fwd=None, detail=False):
    """Bound on ||computed - exact||_1 of irfft(prod X_c^m_c) (see module docstring).

    ``specs``: list of (X_computed, m).  ``low = (K, lp_low, amp_low)`` replaces the bound
    terms of the first ``K`` frequencies (accurate series, :func:`_series_spectrum`);
    ``g_extra`` widens the FFT error of the others (the series' scale).  ``fwd = (g, u_pol)``
    (float64 forward FFTs in a long double node, :func:`fastpld._fft._fwd_error`): the forward
    error and the polar rounding of the spectra; the inverse stays ``12 u log2 N`` with the node's ``u``.
    Returns (l1_bound, linf_bound), and with ``detail`` also the spectral error ``e2`` and ``||P||_2``.
    """
    g = 12.0 * u * math.ceil(math.log2(max(N, 2))) + g_extra
    g_inv = g
    if fwd is not None:
        g_inv = 12.0 * u * math.ceil(math.log2(max(N, 2)))
        g, u = fwd
    log_prod = 0.0
    amp = 0.0
    logs = []
    for X, m in specs:
        r = np.abs(X).astype(np.float64)
        with np.errstate(divide="ignore"):
            lr = np.log(r)
            lrg = np.log(r + g)
        logs.append((lr, lrg, m, _kernels.quarter_angle(X)[0].astype(np.float64)))  # psi: arg X mod pi/2
        log_prod = log_prod + m * lrg
    # derivative term: sum_c m_c (r_c+g)^(m_c-1) g prod_{c' != c} (r_c'+g)^(m_c')
    with np.errstate(over="ignore", invalid="ignore"):
        for lr, lrg, m, ph in logs:
            amp = amp + m * g * np.exp(log_prod - lrg)
        # rounding of the power itself (polar form, every maths-library call within 4 ulp = 8 u, docs/roundoff.md
        # section 7): relative error <= 1.01 u ((11 + C) sum m (|log r| + |psi|) + 8 sum m + 40)
        prod_r = np.exp(sum(m * lr for lr, _, m, _ in logs))
        cond = sum(m * (np.abs(np.where(np.isfinite(lr), lr, 0.0)) + np.abs(ph)) for lr, _, m, ph in logs)
        amp = amp + _polar_rel(cond, sum(m for *_, m, _ in logs), len(logs), u) * prod_r
    amp = np.where(np.isfinite(amp), amp, 0.0)
    if low is not None:
        K, lp_low, amp_low = low
        amp = np.array(amp, dtype=np.float64)
        amp[:K] = amp_low
        log_prod = np.array(log_prod, dtype=np.float64)
        log_prod[:K] = lp_low
    w = np.full(amp.shape, 2.0)
    w[0] = 1.0
    if N % 2 == 0:
        w[-1] = 1.0
    e2 = math.sqrt(float(np.sum(w * amp**2)))
    p2 = math.sqrt(float(np.sum(w * np.exp(2 * log_prod))))  # >= ||P||_2 (full spectrum)
    l2 = (e2 + g_inv * p2) / math.sqrt(N)
    if detail:
        return e2 + g_inv * p2, l2, e2, p2
    return e2 + g_inv * p2, l2


def _has_atoms(o):
    """Whether a node convolves leaf PMFs of a loss with point masses (lattice-like inputs).

    Such PMFs have spectral peaks far from frequency 0 where ``|X| ~ 1`` again; there the
    low-frequency series does not apply and the plain ``m g`` estimate stands.  Only direct
    leaf children count: re-discretised onto a coarser mesh, the lattice is smeared (measured:
    the roots of Laplace plans fit float64 with the series).
    """
    r = getattr(o, "_atoms", None)
    if r is None:
        r = any(isinstance(c, _Leaf) and (bool(getattr(c.loss, "atoms", ())) or isinstance(c.loss, DiscreteLoss))
                for c, _ in getattr(o, "children", ()))
        o._atoms = r
    return r


def _fp_plain(inst, msum, lg, u=None):
    """Predicted round-off charge of a node with plain FFT powers: the ``m``-fold amplification
    of the FFT error ``12 u log2 N``, per instance (``u``: float64's unless given)."""
    u = _U64 if u is None else u  # read at call time (tests patch _U64)
    return inst * (2.0 * msum * 12 * u * lg + 4 * u)


# Planning only: a node raising lattice-like leaves (two large atoms) charges ~5.4x the plain
# estimate's m g per instance (the spectral peaks; measured 4.1-6.3x on Laplace at k = 2^30); with
# direct DFTs g is ~12 u (two atoms of ~1/2, _kernels.dft_order) plus the power's 2 u.
_LATTICE_FP = 5.4
_G_DFT = 14.0


def _fp_dft(inst, msum, u, N=None, delta=None, mmax=None):
    """Predicted round-off charge of a node whose lattice-like inputs take direct DFTs.  Where
    :func:`_use_lattice` takes the lattice spectra of section 3f (``N`` and ``delta`` given), the inverse
    FFT's ``12 u log2 N ||P||_2``, with ``||P||_2 ~ 3 sqrt(N / sqrt(pi m))`` (a two-atom power of width
    ~sqrt(m) on a sub-lattice; measured 2-3x that on Laplace at k = 2^30), which is what is left of it."""
    plain = inst * (2.0 * msum * _LATTICE_FP * _G_DFT * u + 4 * u)
    if N is not None and delta is not None and _use_lattice(plain, msum if mmax is None else mmax, delta):
        return inst * (12.0 * math.ceil(math.log2(max(N, 2))) * u * 3.0 * math.sqrt(N / math.sqrt(math.pi * msum))
                       + 4 * u)
    return plain


# the lattice spectra cost ~0.5 ms more than the DFT path on a 2^30 Laplace node (measured 4.1 vs 3.5 ms
# for the whole composition at delta_error 1e-7): taken only where the DFT path's predicted charge would
# take more than this share of delta_error
_LATTICE_MIN_SHARE = 0.1


def _use_lattice(dft_charge, mmax, delta):
    """Whether a node of few-bucket inputs takes the lattice spectra (section 3f of docs/roundoff.md)."""
    return _LATTICE_SPECTRA and mmax >= 8 and dft_charge > _LATTICE_MIN_SHARE * delta


def _dft_leaves(o, sizes):
    """Whether the planner expects node ``o``'s inputs to take direct DFTs: all children leaves
    of losses with atoms, with at most ``_DFT_MAX_N`` buckets predicted (or as many atoms, split
    onto two buckets each, for discrete losses)."""
    for c, _ in o.children:
        if not isinstance(c, _Leaf):
            return False
        loss = c.loss
        if isinstance(loss, DiscreteLoss):
            if 2 * np.asarray(loss.values).size > _DFT_MAX_N and sizes[id(c)] > _DFT_MAX_N:
                return False
        elif not getattr(loss, "atoms", ()) or sizes[id(c)] > _DFT_MAX_N:
            return False
    return True


def _fp64_series(inst, msum, lg, mmax, lattice=False, u=None):
    """Predicted float64 round-off charge of a node with the low-frequency series (at most the plain one).

    Near frequency 0 the error no longer grows with ``m``; what is left is the inverse FFT
    (``~ 3 g``) and, for moderate ``m``, the frequencies past the series' range
    (``|X|^m ~ e^(-m / 32)`` there for inputs up to ~16 standard deviations wide).
    ``u``: another precision's (long double: the same shape, measured ~5 g per instance at ``k = 2^30``).
    """
    u = _U64 if u is None else u
    plain = _fp_plain(inst, msum, lg, u)
    if mmax < 8 or lattice:  # _run_node uses the series only where some power is >= 8
        return plain
    g = 12 * u * lg
    return min(plain, inst * (2.0 * (3.0 + msum * math.exp(-msum / 32.0)) * g + 4 * u))


def _spectrum(backend, p, cen, N, fdt, dft_in=None):
    """The numpy backend's spectrum of one input: ``rfft`` of its circular placement, or its
    direct DFT (``dft_in``: :func:`fastpld._kernels.dft_order`'s ``(q, steps, err)``)."""
    if dft_in is not None:
        out = np.empty(N // 2 + 1, dtype=np.clongdouble if np.dtype(fdt) == np.longdouble else np.complex128)
        return _kernels.small_dft(dft_in[0], dft_in[1], N, out)
    buf = np.zeros(N, dtype=fdt)
    np.add.at(buf, (np.arange(p.size) - cen) % N, np.asarray(p).astype(fdt))
    return backend.rfft(buf, N)


_TRIU: dict = {}  # n -> read-only np.triu_indices(n, 1), for n <= _TRIU_MAX (direct-DFT inputs have <= 32 masses)
_TRIU_MAX = 64


def _lag_sums(q, t, W):
    """``(a, lags, cnt)`` of :func:`_lattice_spectrum`: the distinct lags ``d = |t_j - t_l| > 0`` of the pairs
    ``j < l`` (ascending), how many pairs have each, and ``a_d = sum q_j q_l`` over them in ``W``, accumulated
    in the pairs' row-major order (as ``np.unique`` and ``np.add.at``; a bincount over the lags instead of a
    sort: the offsets are distinct integers)."""
    n = q.size
    tri = _TRIU.get(n)
    if tri is None:
        tri = np.triu_indices(n, 1)
        for x in tri:
            x.setflags(write=False)
        if n <= _TRIU_MAX:
            tri = _TRIU.setdefault(n, tri)
    jj, ll = tri
    d = np.abs(t[jj] - t[ll])
    full = np.bincount(d)
    lags = np.flatnonzero(full)
    inv = (np.cumsum(full > 0) - 1)[d]
    a = np.zeros(lags.size, dtype=W)
    np.add.at(a, inv, q[jj] * q[ll])
    return a, lags.astype(np.int64), full[lags]


# entries per array kept (larger ones are allocated per call): a lattice node's nine arrays then hold at most
# 2^16 (16 + 16 + 1 + 6 x 8) bytes = 5.3 MB per workspace (Laplace at k = 2^30 needs 8193 entries)
_SCRATCH_MAX = 1 << 16


def _scratch(name, n, dtype):
    """This workspace's reusable array ``name`` of ``n`` entries of ``dtype``, contents undefined: for a
    node's temporaries that are consumed before the node ends (the next request of ``name`` in this
    workspace, which one thread uses at a time, returns the same memory unless it was evicted).  Why:
    large temporaries allocated afresh per node come back as new pages whenever the C allocator has
    returned its free memory to the system in between (a mixed workload does): Laplace at k = 2^30 after
    other jobs took 256 page faults in its first node, ~1.5 ms of a 10 ms composition.  At most one array
    per name and workspace, each of at most ``_SCRATCH_MAX`` entries, kept within
    :func:`fastpld.set_cache_limit`."""
    dt = np.dtype(dtype)
    if n > _SCRATCH_MAX:
        return np.empty(n, dtype=dt)
    ws = resources.workspace()
    key = ("scratch", name)
    a = ws.get(key)
    if a is None or a.dtype != dt or a.size < n:
        a = np.empty(max(n, 1024), dtype=dt)
        ws.put(key, a, a.nbytes)
    return a[:n]


def _crude_up(m, r, e, slow):
    """``m log((r + e) / slow)`` rounded upwards: ``r = hypot`` of the computed DFT and ``e`` (a hypot or a
    constant) within 4 ulp each, the sum, division and product (float64, docs/roundoff.md section 7): the
    argument inflated by ``16 u64``, ``log`` (4 ulp) and the product by ``10 u64`` of the result."""
    x = m * np.log((r + e) * (1 + 16 * _U64) / slow)
    return x + 10 * _U64 * np.abs(x)


def _lattice_spectrum(ins, dft, N, dtype, native=True, skip_log=None, abs_rfft=None, scratch=False):
    """Accurate ``m log|X|``, ``m arg X`` at every frequency of a node whose inputs take direct DFTs
    (docs/roundoff.md, section 3f): ``(F, L, Phi, dL, dPhi, Q, up)``.

    Why: at the spectral peaks of lattice-like inputs (``|X| ~ 1`` far from frequency 0) a spectrum
    error ``g`` becomes ``m g`` in ``X^m``.  Here, per input with masses ``q_j`` at offsets ``t_j``
    (sum ``S``): ``1 - |X / S|^2 = 4 sum_(d > 0) a_d sin^2(theta d / 2) / S^2`` with the lag sums
    ``a_d = sum_(t_j - t_l = d) q_j q_l``, all terms non-negative, so it is computed with a small
    *relative* error ``eta`` (relatively accurate ``sin^2`` table, sums of positive terms), and
    ``m log|X / S| = (m / 2) log1p(-x)`` errs by ``(m / 2) x eta / (1 - x (1 + eta))``: where
    ``|X|^m`` matters, ``m x = O(1)``.  The phase: ``arg X = psi + q pi/2`` (exact quarter turns) with
    ``psi`` from the DFT's components, whose per-frequency running error bounds ``E_re, E_im`` (the
    table's relative error, the products' and the partial sums' roundings) give
    ``|psi~ - psi| <= arcsin(((|x| + E_x) E_y + (|y| + E_y) E_x) / (|X~| (|X~| - E)))``: near a peak the
    component along ``X`` carries the large error and hardly moves the angle.  ``up``: a crude
    upper bound ``sum m log((|X~| + E) / S_low)`` on ``log|P|`` where ``x`` is near 1.
    ``L`` and ``Phi`` are in ``dtype`` (the node's precision); ``Q`` sums the quarter turns mod 4.
    ``native``: the compiled kernel (``_core.lattice_terms``, one pass per input); this function's numpy
    code is its reference.  ``skip_log`` (single-input nodes): frequencies where a crude bound on ``|X|^m``
    is below ``e^-skip_log`` keep only ``up = -skip_log`` (``L = -inf``, ``dL = inf``: the power there is 0
    and its error at most ``e^up``), without the DFT, logarithms and angles; that bound comes from a float64
    FFT, ``abs_rfft(p, cen, N, out)`` (default numpy's; any FFT within the error model ``12 u log2 N``, the
    backend's :meth:`fastpld._fft.Backend.abs_rfft`).  ``scratch`` (native only): the outputs are this
    thread's :func:`_scratch` arrays, valid until its next lattice node.
    """
    W = np.dtype(dtype).type
    u = _U64 if W is np.float64 else _ULD
    F = N // 2 + 1
    cdt = np.clongdouble if W is np.longdouble else np.complex128
    core = _kernels._core if native else None
    # (scratch: the kernel's first input assigns every entry, so they need no zeros)
    def array(name, dt):
        return _scratch("lat." + name, F, dt) if core is not None and scratch else np.zeros(F, dtype=dt)

    L, Phi, Q = array("L", W), array("Phi", W), array("Q", np.uint8)
    dL, dP, up, absL, absP = (array(x, np.float64) for x in ("dL", "dP", "up", "absL", "absP"))
    s2 = _kernels.sin2_table(N, W)
    tab = 1.0 + _kernels.DFT_TABLE_REL
    c_tab, s_tab = _kernels.dft_table(N, W)
    skip_below = -skip_log if (skip_log is not None and len(ins) == 1) else -math.inf
    for i, ((p, cen, m), (q, steps, err0)) in enumerate(zip(ins, dft)):
        n = q.size
        # 1 - |X / S|^2 from the lag sums
        t = np.where(steps <= N // 2, steps, steps - N)
        a, lags, cnt = _lag_sums(q, t, W)
        S = W(0)
        for qj in q:  # sequential: relative error gamma_(n-1)
            S = S + qj
        # eta: the table (squared), a_d (products and additions), a_d s2, the sum over lags, / S^2 (with S's own error)
        eta = 1.01 * u * (2 * _kernels.DFT_TABLE_REL + 1 + (int(cnt.max()) + 1 if cnt.size else 0) + 1 + lags.size
                          + 3 + 2 * n)
        slow = float(S) * (1 - 2 * n * u)  # <= the exact sum of q
        # the DFT's error per component: the products (u |t_j|), the table (DFT_TABLE_REL u |t_j|) and the
        # additions (u sum_i |s_i|, the partial sums of the ascending terms: |s_i| <= sum_(l <= i) |t_l|, so
        # term l counts in n - l of them): 1.01 u sum_j wt_j |table entry_j| with wt_j = q_j (tab + n - j)
        wt = q * (W(tab) + W(n) - np.arange(n).astype(W))
        # which frequencies are dead: a crude bound from a float64 FFT (the error model's 12 u64 log2 N, plus
        # the cast of the input), far cheaper than the long double DFT at every frequency
        pre = _EMPTY_F64
        thr = 0.0
        if i == 0 and skip_below > -math.inf:
            g64 = 1.01 * (12.0 * _U64_CAST * math.ceil(math.log2(max(N, 2))) + _U64_CAST)
            # dead where |X~| < thr: there |X| <= |X~| + g64 < slow e^(skip_below / m), so |X / S|^m < e^skip_below,
            # which is their bound (up = skip_below; no logarithm per frequency); the factor covers the
            # roundings of thr and of |X~|
            thr = (slow * math.exp(skip_below / m) - g64) * (1.0 - 1e-12)
            pre = _scratch("lat.pre", F, np.float64) if scratch else np.empty(F)
            (abs_rfft or _fft.NumpyBackend().abs_rfft)(np.ascontiguousarray(p, dtype=np.float64), cen, N, pre)
        if core is not None:
            core.lattice_terms(q, wt, steps, c_tab, s_tab, a, lags, s2, float(m), eta, u, slow, err0 * u, skip_below,
                               pre, thr, i == 0, L, Phi, Q, dL, dP, up, absL, absP)
            continue
        X = _kernels.small_dft(q, steps, N, np.empty(F, dtype=cdt))
        Ere = 1.01 * u * _kernels.table_sum(wt, steps, np.abs(c_tab), F).astype(np.float64)
        Eim = 1.01 * u * _kernels.table_sum(wt, steps, np.abs(s_tab), F).astype(np.float64)
        D = _kernels.table_sum(a, lags, s2, F) * W(4)
        x = D / (S * S)
        xf = x.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            Lc = W(0.5 * m) * np.log1p(-x)
            den = 1.0 - xf * (1.0 + eta)
            Lf = Lc.astype(np.float64)
            # (+ log1p's rounding, <= 4 ulp = 8 u relative for any libm numpy may use, the product by m / 2)
            dLc = np.where(den > 0, 0.5 * m * xf * eta / np.where(den > 0, den, 1.0), np.inf) + 12 * u * np.abs(Lf)
            # crude: |X / S| <= (|X~| + E) / (S (1 - 2 n u)); skipped frequencies (below skip_below with the
            # a-priori error err0 u of the DFT) keep that bound
            r = np.hypot(X.real.astype(np.float64), X.imag.astype(np.float64))
            E = np.hypot(Ere, Eim)
            if pre.size:
                skip = pre < thr
                up_c = np.where(skip, skip_below, _crude_up(m, r, E, slow))
            else:
                up0 = _crude_up(m, r, err0 * u, slow)
                skip = up0 < skip_below
                up_c = np.where(skip, up0, _crude_up(m, r, E, slow))
            psi, qq = _kernels.quarter_angle(X)
            odd = (qq & 1).astype(bool)
            Ex = np.where(odd, Eim, Ere)  # the turned components' bounds: odd turns swap them
            Ey = np.where(odd, Ere, Eim)
            xr = np.where(odd, np.abs(X.imag), np.abs(X.real)).astype(np.float64)
            xi = np.where(odd, np.abs(X.real), np.abs(X.imag)).astype(np.float64)
            sang = ((xr + Ex) * Ey + (xi + Ey) * Ex) / (r * (r - E))
            ok = (r > E) & (sang < 1)
            psif = psi.astype(np.float64)
            # (+ atan2's rounding, <= 4 ulp = 8 u relative)
            dpsi = np.where(ok, 1.01 * np.arcsin(np.where(ok, sang, 0.0)), np.pi) + 8 * u * np.abs(psif)
        if skip.any():
            Lc = np.where(skip, -np.inf, Lc).astype(W)
            Lf = Lc.astype(np.float64)
            psi = np.where(skip, 0, psi).astype(W)
            psif = psi.astype(np.float64)
            qq = np.where(skip, 0, qq)
            dLc = np.where(skip, np.inf, dLc)
            dpsi = np.where(skip, 0.0, dpsi)
        L = L + Lc
        Phi = Phi + W(m) * psi
        Q = ((Q + (int(m) % 4) * qq.astype(np.int64)) & 3).astype(np.uint8)
        dL = dL + dLc
        dP = dP + m * dpsi + 2 * u * m * np.abs(psif)
        up = up + up_c
        absL += np.where(np.isfinite(Lf), np.abs(Lf), 0.0)
        absP += m * np.abs(psif)
    C = len(ins)
    dL = dL + _gamma(2 * C, u) * absL
    dP = dP + _gamma(2 * C, u) * absP
    return F, L, Phi, dL, dP, Q, up


_EMPTY_F64 = np.zeros(0)


def _lattice_amp(lat, u_node):
    """``(lp, amp)`` of the round-off bound at every frequency for :func:`_lattice_spectrum`'s node.

    ``amp`` bounds ``|computed - exact|`` of the power: the smaller of ``e^L~ (expm1(dL) + e^dL dPhi)``
    plus the polar evaluation (as :func:`_series_amp`) and ``|computed| + e^up``; ``lp`` bounds the
    log of both powers' magnitudes."""
    _, L, P, dL, dP, _, up = lat
    Lf = L.astype(np.float64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        # skipped frequencies (L = -inf: power 0, the exact one at most e^up) need only the crude terms
        amp = np.exp(up)
        lp = up + 1e-12
        live = np.flatnonzero(np.isfinite(Lf))
        Lv, dLv, upv = Lf[live], dL[live], up[live]
        # (exp, cis and the products 8 u + 8 u + 1.5 u, the reduction mod 2 pi 20 u + 2.6 u |Phi|: section 7)
        pol = 8 * u_node * (5 + np.abs(P[live].astype(np.float64)) + np.abs(Lv))
        mag = np.exp(Lv)
        fine = 1.01 * mag * (np.expm1(dLv) + np.exp(dLv) * dP[live] + pol)
        crude = 1.01 * mag * (1 + pol) + amp[live]
        amp[live] = np.where(np.isfinite(fine), np.minimum(fine, crude), crude)
        hi = Lv + dLv
        lp[live] = np.maximum(Lv, np.where(np.isfinite(hi), np.minimum(hi, upv), upv)) + 1e-12
    return lp, amp


def _lattice_power_numpy(backend, lat, N, dtype, u):
    """Reference of ``NativeBackend.convolve(lat=...)`` (``_core.lattice_power`` and the inverse FFT): the
    power from :func:`_lattice_spectrum` at every frequency, its bound from :func:`_lattice_amp` and the
    inverse FFT's: ``(l1, linf, out)``."""
    _, L, Phi, _, _, Q, _ = lat
    lp, amp = _lattice_amp(lat, u)
    Pc = _kernels.polar_power(L, Phi, Q)
    w = np.full(amp.shape, 2.0)
    w[0] = 1.0
    if N % 2 == 0:
        w[-1] = 1.0
    with np.errstate(over="ignore", under="ignore"):
        e2 = math.sqrt(float(np.sum(w * amp**2)))
        p2 = math.sqrt(float(np.sum(w * np.exp(2 * lp))))
    l1 = e2 + 12.0 * u * math.ceil(math.log2(max(N, 2))) * p2
    return l1, l1 / math.sqrt(N), backend.irfft(Pc, N)


def _numpy_power(backend, ins, N, dtype, fdt, u, ser, low, g_extra, dft=None):
    """Reference (numpy backend) of ``NativeBackend.convolve``: ``(l1, linf, out)``.

    ``fdt``: precision of the forward transforms (float64 in a long double node: section 3c of
    docs/roundoff.md; the whole node in ``dtype`` if that forward error is not negligible).
    ``dft``: per input ``(q, steps, err)``: direct DFTs instead of forward FFTs (section 3e; ``fdt``
    is then ``dtype``).
    """
    specs = []
    logmag = phase = None
    quarter = 0
    if dft is not None:
        fdt = dtype
    for i, (p, cen, m) in enumerate(ins):
        X = _spectrum(backend, p, cen, N, fdt, None if dft is None else dft[i])
        specs.append((X, m))
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.log(np.abs(X)).astype(dtype)
            psi, q = _kernels.quarter_angle(X)  # arg X = psi + q pi/2, |psi| <= pi/4
            ph = psi.astype(dtype)
        logmag = m * lr if logmag is None else logmag + m * lr
        phase = m * ph if phase is None else phase + m * ph
        quarter = (quarter + (int(m) % 4) * q.astype(np.int64)) & 3
    fwd = _fft._fwd_error(ins, N, fdt, u, ser, dft)
    fp_l1, fp_linf, e2, p2 = _fp_fft_bound(specs, N, u, g_extra, low, fwd, detail=True)
    if fdt is not dtype and e2 > _fft._MIXED_RATIO * (_fft._low_e2(low) + (fp_l1 - e2)):
        return _numpy_power(backend, ins, N, dtype, dtype, u, ser, low, g_extra)
    if ser is not None:
        logmag[:ser[0]] = ser[1]
        phase[:ser[0]] = ser[2]
        quarter[:ser[0]] = 0
    # (reduced by 2 pi in the node's precision: a float64 2 pi would put float64-size phase errors
    # (|phase| * 2.4e-16) into long double nodes, whose charge assumes long double accuracy)
    out = backend.irfft(_kernels.polar_power(logmag, phase, quarter), N)
    return fp_l1, fp_linf, out


# direct DFTs for inputs with at most this many non-zero buckets (n (N/2 + 1) products, against the
# FFT's ~N log2 N: measured no slower up to here; Laplace leaves at k = 2^30 have ~21, pure DP 2-4)
_DFT_MAX_N = 32

# large powers of few-bucket inputs take the lattice spectra of section 3f (off: the DFT spectra go
# through the plain polar bound, and the low-frequency series; kept switchable for tests and A/B runs)
_LATTICE_SPECTRA = True

_DIRECT_MAX_POWER = 1 << 20  # direct powers' bound assumes M u <= 1e-10 (see _direct_power)


def _direct_power(backend, ins, N, u, dft=None):
    """Reference (numpy backend) of the direct powers of a float64 node without the series
    (``NativeBackend.convolve(direct=True)``, same arithmetic): ``(l1, linf, out)``.

    Instead of the polar form, ``P = prod_c X_c^m_c`` is computed by binary powering and
    products (complex products by the textbook formula: relative error at most ``sqrt(5) u``
    each without FMA [Brent, Percival & Zimmermann 2007], ``2 u`` with FMA; any addition chain for ``x^m`` and
    the product over the inputs accumulate ``M - 1`` such roundings, ``M = sum m_c``), so
    ``|P~ - prod X~_c^m_c| <= ((1 + sqrt(5) u)^(M - 1) - 1) B <= 4.01 (M - 1) u B`` with
    ``B = prod (|X~_c| + g)^m_c``.  The forward error ``|X~_c - X_c| <= g`` propagates as in
    :func:`_fp_fft_bound`: ``g B sum_c m_c / (|X~_c| + g)``.  ``B`` and that sum are computed in
    float64 (relative error below ``(2M + 3C) u <= 3e-10`` for ``M <= 2^20``): both terms are
    inflated by ``1 + 1e-9``, and ``M 1e-300`` covers underflow (every factor is at most ~1, so
    an underflowed ``B`` leaves at most ``M 2.3e-308`` of either term).  No logarithms, no
    trigonometric calls: the bound is of the polar form's size (both are dominated by the forward
    term) at a fraction of its cost (docs/roundoff.md, section 3d).
    """
    g, _ = _fft._fwd_error(ins, N, np.float64, u, None, dft)
    P = B = D = None
    msum = 0
    for i, (p, cen, m) in enumerate(ins):
        X = _spectrum(backend, p, cen, N, np.float64, None if dft is None else dft[i])
        r = np.sqrt(X.real * X.real + X.imag * X.imag)  # (relative error <= 2 u, inside the 1e-9 inflation)
        x, rg = X, r + g
        y = np.ones_like(X)
        b = np.ones_like(r)
        e = int(m)
        while True:
            if e & 1:
                y = y * x
                b = b * rg
            e >>= 1
            if not e:
                break
            x = x * x
            rg = rg * rg
        d = m / (r + g)
        P, B, D = (y, b, d) if P is None else (P * y, B * b, D + d)
        msum += int(m)
    with np.errstate(under="ignore"):
        amp = (g * D + 4.01 * (msum - 1) * u) * B * (1 + 1e-9) + msum * 1e-300
        w = np.full(amp.shape, 2.0)
        w[0] = 1.0
        if N % 2 == 0:
            w[-1] = 1.0
        e2 = math.sqrt(float(np.sum(w * amp * amp)))
        p2 = math.sqrt(float(np.sum(w * B * B))) * (1 + 1e-9)
    g_inv = 12.0 * u * math.ceil(math.log2(max(N, 2)))
    out = backend.irfft(P, N)
    l1 = e2 + g_inv * p2
    return l1, l1 / math.sqrt(N), out


def _node_tv(removed, N, u):
    """Total variation charged for one node instance whose clipped, trimmed output is within
    ``removed`` (l1) of the exact unnormalised result ``y`` (docs/roundoff.md, section 3).

    With ``a`` the clipped output, ``||a - y||_1 <= E`` and ``S = sum a``, ``|S - sum y| <= E``:
    ``||a / S - y / sum y||_1 <= E / S + |sum y - S| / S <= 2 E / S``, so the total variation
    (half the l1 distance) is at most ``E / S`` with ``S >= sum y - E >= 0.99 - E`` (the inputs'
    sums are 1 up to their last roundings).  The normalisation itself (numpy's pairwise sum,
    at most ``ceil(log2 N) + 19`` roundings, and one division per entry) moves every entry by a
    relative ``gamma_(ceil(log2 N) + 24)`` at most: half of that in total variation, charged in
    full.  (A long double output that a float64 FFT reads is rounded entrywise: charged to that
    FFT's error, :func:`fastpld._fft._fwd_error`; the final result's cast in :func:`_execute`.)"""
    lg = math.ceil(math.log2(max(N, 2)))
    tv = removed / (0.99 - removed) if removed < 0.5 else 1.0
    return tv + _gamma(lg + 24, u)


def _run_node(node, inputs, inst, budgets, n_objects, backend, max_buckets, n_nodes=None):
    """Convolve the node's inputs; returns (GridPMF, info dict)."""
    h = inputs[0][0].mesh
    # centre each input at its mean index (keeps phases small in the powers)
    ins = []
    base_val = 0.0
    full = 1
    for pmf, m in inputs:
        p = np.asarray(pmf.probs)
        pf = np.asarray(p, dtype=np.float64)  # (a copy only for long double inputs)
        cen = int(round(_kernels.mean_index(pf, backend.native)))
        ins.append((p, cen, m))
        base_val += m * (pmf.offset + cen * h)
        full += m * (p.size - 1)
    w_per = budgets.wrap / (n_objects * inst)
    if len(ins) == 1 and ins[0][2] == 1:
        p, cen, m = ins[0]
        return GridPMF(p, inputs[0][0].offset, h), {"N": p.size, "wrap": 0.0, "fp": 0.0, "dtype": p.dtype,
                                                   "window": (0, p.size - 1), "series": 0, "dft": False,
                                                   "lattice": False}
    lo_full = -sum(m * cen for _, cen, m in ins)
    lo, hi, tail = _chernoff_window(ins, w_per, backend.native)
    need = hi - lo + 1

    def place(length):
        # FFT length, window start and wrap-around bound for FFT lengths from `length`
        if need >= full:
            return length(full), lo_full, 0.0
        n_fft = length(need)
        if n_fft >= full:
            return length(full), lo_full, 0.0
        start = lo - (n_fft - need) // 2
        return n_fft, start, tail(start + n_fft, True) + tail(start - 1, False)

    N, c, wrap = place(_fft.fast_length)
    if N > max_buckets:
        raise BucketLimitError(
            f"composition needs an FFT of {N} buckets at mesh {h:.3g} (node {node.label}), more than "
            f"max_buckets={max_buckets}; increase eps_error or max_buckets", N)
    # precision: long double where the float64 round-off charge would not fit.  Nodes whose
    # predicted float64 charge is small run in float64; those within the node's share of the
    # round-off budget (budgets.fp / nodes: leaves and re-discretisations charge ~u per copy)
    # try float64 and are redone in long double only if the measured charge exceeds that share.
    # (The precision only decides how much is charged; every node charges its own measured bound.)
    allowance = budgets.fp / n_objects
    node_allowance = budgets.fp / n_nodes if n_nodes else allowance
    msum = sum(m for _, _, m in ins)
    mmax = max(m for _, _, m in ins)
    lg = math.ceil(math.log2(N))
    est64 = _fp_plain(inst, msum, lg)
    if est64 <= 0.25 * allowance:
        dtypes = (np.float64,)
    elif _fp64_series(inst, msum, lg, mmax, _has_atoms(node)) <= node_allowance:
        dtypes = (np.float64, np.longdouble)
    else:
        dtypes = (np.longdouble,)
        # the long double FFT is fastest on 2^a 3^b lengths (measured 31-38 ns per point near 8k
        # against 42-50 with factors 5 and 7): worth up to 8% more points
        N2, c2, wrap2 = place(_fft.fast_length_23)
        if N2 <= 1.08 * N and N2 <= max_buckets:
            N, c, wrap = N2, c2, wrap2
    # accurate low-frequency spectra where a power's round-off amplification matters: only where
    # some power is large (with small powers the plain bound has no m-fold growth) and the inputs'
    # moments cost less than a few FFTs (a block of many wide children with small powers would pay
    # (R + 3) n per child for nothing: measured 25% of a 200 x 10 heterogeneous composition)
    use_series = (est64 > 0.25 * allowance and mmax >= 8
                  and sum(p.size for p, _, _ in ins) * (_SERIES_R + 3) <= 2 * N * math.log2(N))
    dft_ok = est64 > 0.25 * allowance and all(np.count_nonzero(p) <= _DFT_MAX_N for p, _, _ in ins)
    for dtype in dtypes:
        u = _U64 if dtype is np.float64 else _ULD
        low = None
        g_extra = 0.0
        # (not where the lattice spectra below take every frequency: few-bucket inputs, large powers and
        # a charge that matters)
        want_lat = dft_ok and _use_lattice(_fp_dft(inst, msum, u), mmax, budgets.delta)
        ser = _series_spectrum(ins, N, dtype, backend.native) if use_series and not want_lat else None
        if ser is not None:
            lp_low, amp_low = _series_amp(ser, u)
            low = (ser[0], lp_low, amp_low)
            g_extra = ser[5]
        # a long double node whose large powers come from the series near frequency 0 takes float64
        # forward FFTs: elsewhere |X|^m is negligible, so the float64 forward error barely counts
        # (docs/roundoff.md, section 3c; the whole node falls back to long double where it does)
        # (not for lattice-like inputs, whose spectral peaks past the series' range make it fall back)
        fdt = (np.float64 if (dtype is np.longdouble and ser is not None and _MIXED_FORWARD and not _has_atoms(node))
               else dtype)
        # inputs of a few buckets (the leaves of lattice-like losses at large k): direct DFTs, whose
        # error does not grow with log N and whose ascending sums keep it near the largest masses'
        # (docs/roundoff.md, section 3e); only where the round-off matters and the bound is at most
        # half the FFT's (the forward transforms then run in the node's precision)
        dft = None
        if dft_ok:
            dft = [_kernels.dft_order(p, cen, N, dtype) for p, cen, _ in ins]
            if not want_lat and max(e for _, _, e in dft) > 6.0 * lg:  # (the lattice spectra need no such gain)
                dft = None
            else:
                fdt = dtype
        # (native) frequencies whose product is below e^(10 - T) are skipped and charged 2 e^(10 - T)
        # each (see convolve): T such that all N/2 + 1 such charges, over the node's copies (x inst)
        # and into total variation (x 4), stay below 1e-6 of the node's round-off allowance
        dead_log = min(800.0, max(40.0, 10.0 + math.log(4.0 * (N // 2 + 1) * inst / (1e-6 * allowance))))
        # large powers of such inputs: accurate log-magnitudes and phases at every frequency (section 3f),
        # in place of the low-frequency series
        lat = None
        if dft is not None and want_lat:
            lat = _lattice_spectrum(ins, dft, N, dtype, backend.native, dead_log, backend.abs_rfft, scratch=True)
            ser, low, g_extra = None, None, 0.0
        # float64 without the series: powers as products (cheaper than the polar form, same size of bound)
        direct = dtype is np.float64 and ser is None and lat is None and msum <= _DIRECT_MAX_POWER
        if direct:
            if backend.native:
                out, fp_l1, fp_linf = backend.convolve(ins, N, dtype, u, dead_log=dead_log, direct=True, dft=dft,
                                                       raw=True)
            else:
                fp_l1, fp_linf, out = _direct_power(backend, ins, N, u, dft)
        elif backend.native:  # cached plans, compiled placement/power/round-off kernels (same arithmetic)
            out, fp_l1, fp_linf = backend.convolve(ins, N, dtype, u, ser=ser, low=low, dead_log=dead_log,
                                                   fwd_dtype=fdt, dft=dft, lat=lat, raw=True)
        elif lat is not None:
            fp_l1, fp_linf, out = _lattice_power_numpy(backend, lat, N, dtype, u)
        if not backend.native and not direct and lat is None:
            fp_l1, fp_linf, out = _numpy_power(backend, ins, N, dtype, fdt, u, ser, low, g_extra, dft)
        if ser is not None:  # the series' common scale, removed by the normalisation below
            fp_l1 *= 1 + 2 * ser[6]
            fp_linf *= 1 + 2 * ser[6]
        if len(dtypes) == 1 or dtype is np.longdouble or inst * _node_tv(fp_l1, N, u) <= node_allowance:
            break
    # removed = l1 bound on what clipping, trimming and dropping leave between lin and the exact
    # (unnormalised) result; the charge follows from it after the normalisation (_node_tv)
    removed = fp_l1
    # drop round-off-level entries where the charge fits (keeps next windows tight); the
    # charge is N * floor >= the mass removed, not the mass itself, so that it does not depend
    # on which backend's noise happens to fall below the floor (bounds agree across backends)
    floor = fp_linf
    trim_charge = N * floor
    trim = inst * trim_charge <= 0.25 * allowance
    if trim:
        removed += trim_charge
    core = _kernels._core if backend.native else None
    if core is not None:  # the steps below in one compiled pass (out: the plan's unscaled buffer, raw=True)
        lin, a, tiny_mass, n_tiny = core.finish_node(out, c % N, float(floor), trim, 1.0 / N)
        if n_tiny:
            removed += tiny_mass if lin.dtype == np.float64 else n_tiny * 1e-300
    else:
        lin = np.roll(out, -(c % N)) if c % N else out
        # exact result is non-negative: clipping only moves towards it
        lin = np.maximum(lin, 0)
        if trim:
            lin = np.where(lin < floor, 0, lin)
        # entries below float64's range would vanish when the next node casts to float64 for its
        # Chernoff MGF: drop them here and charge their (tiny) mass
        tiny = (lin > 0) & (lin < 1e-300)
        if tiny.any():
            removed += float(np.sum(lin[tiny]) if lin.dtype == np.float64 else tiny.sum() * 1e-300)
            lin = np.where(tiny, 0, lin)
        nz = np.flatnonzero(lin)
        if nz.size == 0:
            raise ValueError("composition lost all probability mass to round-off; increase eps_error or delta_error")
        a = int(nz[0])
        lin = lin[a:int(nz[-1]) + 1]
        lin = lin / lin.sum()
    tv_fp = _node_tv(removed, N, u)
    # base_val = sum m_c (offset_c + cen_c h); entry j of lin is the index sum I' = c + a + j
    offset = base_val + (c + a) * h
    info = {"N": N, "wrap": wrap, "fp": tv_fp, "dtype": dtype, "window": (c, c + N - 1),
            "series": ser[0] if ser is not None else 0, "dft": dft is not None, "lattice": lat is not None}
    return GridPMF(lin, offset, h), info


_COARSE_SHARE = 0.01  # share of eps_error the leaves' coarse tails may add to the discretisation term


def _coarse_spec(plan, budgets):
    """``(lam, budget)`` for the leaves' coarse tails (:mod:`fastpld.discretize`): ``lam`` is the
    Chernoff parameter at which the planned Azuma term is tight (``2 log(2/eta) / eps_az``), and
    each leaf copy may add ``budget`` to its log-MGF there, i.e. ``_COARSE_SHARE`` of eps_error
    over all leaf copies.  Only a heuristic for the cells: :func:`_mixed_azuma` certifies."""
    copies = sum(plan.instances[id(o)] for o in plan.order if isinstance(o, _Leaf))
    lam = 2 * math.log(2.0 / budgets.eta) / (budgets.eps * (1 - _EPS_RESERVE))
    return lam, _COARSE_SHARE * budgets.eps * lam / max(copies, 1)


def _mixed_azuma(V, mixes, log_term):
    """Chernoff bound on ``|sum of the coupling differences|`` at failure probability ``2 e^-log_term``
    when some leaves have coarse tails.

    ``V``: sum of squared coupling ranges of every copy (the leaves' fine ranges included);
    ``mixes``: ``(instances, fine range, regions)`` of the leaves with coarse tails, whose log-MGF
    bound (:func:`fastpld.discretize.tail_mix_log_mgf`) replaces their Hoeffding term
    ``lam^2 r^2 / 8``.  Differences ordered leaves first form a martingale, so for every
    ``lam > 0`` ``Pr[|S| >= (log_psi(lam) + log_term) / lam] <= 2 e^-log_term``; the minimum
    over a grid of ``lam`` around the uniform optimum ``sqrt(8 log_term / V)`` is returned.
    """
    plain = V - sum(inst * r * r for inst, r, _ in mixes)
    inst = np.array([float(i) for i, _, _ in mixes])[:, None]
    r_f = [r for _, r, _ in mixes]
    regions = [m for _, _, m in mixes]

    def bound(lam):
        psi = lam * lam * (max(plain, 0.0) / 8) + np.sum(inst * tail_mix_log_mgf(lam, r_f, regions), axis=0)
        return (psi + log_term) / lam

    # a coarse grid, then a finer one between the best point's neighbours (any lam is valid)
    lam0 = math.sqrt(8 * log_term / V) * np.geomspace(0.25, 1.25, 33)
    b0 = bound(lam0)
    i = int(np.argmin(b0))
    lam1 = np.linspace(lam0[max(i - 1, 0)], lam0[min(i + 1, lam0.size - 1)], 17)
    return float(min(b0[i], np.min(bound(lam1)))) * (1 + 1e-12)


class _BudgetError(ValueError):
    """The measured delta charges of a plan exceed ``delta_error`` (another plan may fit)."""


class _EtaError(_BudgetError):
    """The delta charges measured so far (``tv``) leave too little failure probability for the
    planned meshes' discretisation term to fit eps_error."""

    def __init__(self, msg, tv):
        super().__init__(msg)
        self.tv = tv


def _eta_check(budgets, tv, v_lo, eps_limit):
    """Raise :class:`_EtaError` once the final eps term is certain to exceed ``eps_limit``: the
    Azuma term is at least ``sqrt(V / 2 log(2 / eta))`` with ``V >= v_lo`` (every copy's coupling
    range is at least its mesh) and ``eta = min(budgets.eta, delta - charges)``, and charges only grow."""
    if eps_limit is None or not budgets.delta - tv > 0:  # (the latter: _check_tv's refusal, next)
        return
    eta = min(budgets.eta, budgets.delta - tv)
    if math.sqrt(v_lo / 2 * math.log(2.0 / eta)) <= eps_limit:
        return
    raise _EtaError(
        f"the delta charges ({tv:.3g}) leave {max(eta, 0.0):.3g} of delta_error={budgets.delta:.3g} for the "
        f"discretisation term, too little for eps_error={eps_limit:.4g} at the planned meshes; increase "
        f"eps_error or delta_error", tv)


def _check_tv(budgets, tv_trunc, tv_wrap, tv_fp):
    if not budgets.delta - (tv_trunc + tv_wrap + tv_fp) > 0:
        raise _BudgetError(
            f"delta_error={budgets.delta:.3g} is too small for this composition: round-off alone costs "
            f"{tv_fp:.3g} (wrap-around {tv_wrap:.3g}, truncation {tv_trunc:.3g}; round-off grows with the number "
            f"of compositions); increase delta_error"
        )


def _execute(plan, meshes, budgets, backend, max_buckets, eps_limit=None, leaf_fn=None, split_fn=None):
    """Run a plan for one direction; returns (final GridPMF, eps_spent, delta_spent, stages, cert).

    ``eps_limit``: stop (:class:`_EtaError`) as soon as the measured delta charges make an eps
    term above it certain, instead of running the rest of a plan whose answer would be refused.
    ``leaf_fn(loss, mesh, tail, max_buckets, native)`` and ``split_fn(pmf, mesh, native)`` replace
    Algorithm 1 and the mean-preserving split (the dominance certificate, :mod:`fastpld.dominance`,
    runs the same nodes on its own leaves and re-discretisations; it reads only the delta charges).
    """
    results = {}
    redisc = {}
    # a result is dropped once its last consumer ran: a heterogeneous plan's leaves would otherwise
    # all stay alive to the end (1000 leaves of ~10^4 buckets: 76 MB)
    consumers = {}
    v_lo = 0.0  # lower bound on the final V: every coupling range is at least its mesh
    for o in plan.order:
        if isinstance(o, _Leaf):
            v_lo += plan.instances[id(o)] * meshes[o.group] ** 2
            continue
        for c, m in o.children:
            consumers[id(c)] = consumers.get(id(c), 0) + 1
            if c.group != o.group:
                v_lo += plan.instances[id(o)] * m * meshes[o.group] ** 2
    v_lo *= 0.99
    n_objects = plan.n_nodes + plan.n_leaves
    V = 0.0
    bias = 0.0
    tv_trunc = tv_wrap = tv_fp = 0.0
    log_mass = 0.0  # (dominated leaves and splits may lose mass: log of the composed total, <= 0)
    log_rel = 0.0  # (dominating ones: relative rounding of their masses, a factor e^log_rel on the curve)
    stages = []
    coarse, mixes = (_coarse_spec(plan, budgets) if leaf_fn is None else None), []
    for o in plan.order:
        # refuse as soon as the charges already exceed the budget (before more FFTs)
        _check_tv(budgets, tv_trunc, tv_wrap, tv_fp)
        inst = plan.instances[id(o)]
        if isinstance(o, _Leaf):
            tail = budgets.trunc / (n_objects * inst * 2)
            if leaf_fn is not None:
                pmf = leaf_fn(o.loss, meshes[o.group], tail, max_buckets, backend.native)
            else:
                pmf = discretize_loss(o.loss, meshes[o.group], tail, max_buckets=max_buckets,
                                      native=backend.native, coarse=coarse)
            results[id(o)] = pmf
            log_mass += inst * math.log(getattr(pmf, "mass", 1.0))
            log_rel += inst * getattr(pmf, "rel", 0.0)
            V += inst * pmf.coupling_range**2
            if pmf.mix:
                mixes.append((inst, pmf.coupling_range, pmf.mix))
            bias += inst * pmf.bias
            tv_trunc += inst * pmf.truncated
            tv_fp += inst * pmf.tv
            stages.append(StageInfo("leaf", 1, pmf.mesh, (float(pmf.offset), float(pmf.offset + pmf.mesh * (pmf.probs.size - 1))),
                                    pmf.probs.size, inst, inst * pmf.truncated, inst * pmf.tv, inst * pmf.coupling_range**2,
                                    "float64"))
            continue
        h = meshes[o.group]
        inputs = []
        for c, m in o.children:
            pmf = results[id(c)]
            if c.group != o.group:
                key = (id(c), o.group)
                if key not in redisc:
                    size = math.ceil(pmf.mesh * (np.asarray(pmf.probs).size - 1) / h) + 2
                    if size > max_buckets:
                        raise BucketLimitError(
                            f"re-discretisation needs {size} buckets at mesh {h:.3g} (node {o.label}), more than "
                            f"max_buckets={max_buckets}; increase eps_error or max_buckets", size)
                    if split_fn is not None:
                        rd = split_fn(pmf, h, backend.native)
                    else:
                        rd = rediscretize(pmf, h, native=backend.native,
                                          dtype=pmf.probs.dtype if pmf.probs.dtype == np.longdouble else np.float64)
                    redisc[key] = rd
                rd = redisc[key]
                copies = inst * m
                log_mass += copies * math.log(getattr(rd, "mass", 1.0))
                log_rel += copies * getattr(rd, "rel", 0.0)
                V += copies * rd.coupling_range**2
                bias += copies * rd.bias
                tv_fp += copies * rd.tv
                pmf = rd
            inputs.append((pmf, m))
        _check_tv(budgets, tv_trunc, tv_wrap, tv_fp)  # re-discretisation charges, before the FFT
        out, info = _run_node(o, inputs, inst, budgets, n_objects, backend, max_buckets, n_nodes=plan.n_nodes)
        _eta_check(budgets, tv_trunc + tv_wrap + tv_fp + inst * (info["wrap"] + info["fp"]), v_lo, eps_limit)
        results[id(o)] = out
        del inputs
        for c, _ in o.children:
            consumers[id(c)] -= 1
            if consumers[id(c)] == 0:
                del results[id(c)]
                for g in plan.groups:
                    redisc.pop((id(c), g), None)
        tv_wrap += inst * info["wrap"]
        tv_fp += inst * info["fp"]
        stages.append(StageInfo(o.label, sum(c.count * m for c, m in o.children), h,
                                (float(out.offset), float(out.offset + h * (out.probs.size - 1))),
                                info["N"], inst, inst * info["wrap"], inst * info["fp"], 0.0,
                                "longdouble" if info["dtype"] is np.longdouble else "float64"))
    final = results[id(plan.root)]
    if np.asarray(final.probs).dtype != np.float64:
        tv_fp += _U64_CAST  # the cast below rounds every entry (relative u64): TV <= u64 / 2
    final = GridPMF(np.asarray(final.probs, dtype=np.float64), float(final.offset), final.mesh)
    # The Azuma failure probability is the planned share (deterministic: the eps term then does
    # not depend on backend-level noise in the other charges); only when the measured charges
    # overrun their shares does it take what they leave of the budget.
    tv = tv_trunc + tv_wrap + tv_fp
    _check_tv(budgets, tv_trunc, tv_wrap, tv_fp)
    eta = min(budgets.eta, budgets.delta - tv)
    azuma = math.sqrt(V / 2 * math.log(2.0 / eta)) if not mixes else _mixed_azuma(V, mixes, math.log(2.0 / eta))
    eps_spent = azuma + bias
    delta_spent = min(budgets.delta, (eta + tv) * (1 + 4 * _U64))
    cert = {"eta": eta, "azuma": azuma, "variance_proxy": V, "bias": bias, "log_mass": log_mass, "log_rel": log_rel,
            "truncation": tv_trunc, "wrap": tv_wrap, "roundoff": tv_fp,
            # leaves with coarse tails and what they add to the eps term over all-fine leaves of the same V
            "coarse_leaves": len(mixes), "coarse_tail_eps": azuma - math.sqrt(V / 2 * math.log(2.0 / eta))}
    return final, eps_spent, delta_spent, stages, cert


# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------
def _roundoff_floor(plan):
    """A lower bound on the round-off every execution of ``plan`` charges, whatever its meshes: each
    instance of a node that convolves (not a lone child passed through) charges its normalisation,
    ``gamma_(ceil(log2 N) + 24)`` in its precision (:func:`_node_tv`), at least ``gamma_25`` of long
    double's ``u``.  A ``delta_error`` at or below it is refused without executing the plan."""
    n = sum(plan.instances[id(o)] for o in plan.order
            if isinstance(o, _Node) and not (len(o.children) == 1 and o.children[0][1] == 1))
    return n * _gamma(25, _ULD)


def _plan_name(plan):
    """The plan's method as reported (``DirectionResult.method``)."""
    name = plan.method if plan.method != "recursive" else f"recursive(arity={plan.params[0].get('arity')})"
    if plan.params[0].get("merge"):
        name += f"+blocks({plan.params[0]['merge']})"
    return name


def _refusal(budget_errors, size_errors, max_buckets):
    """The error when no candidate plan certifies: the limit that binds.

    Plans within ``max_buckets`` refused for their delta charges: delta_error (or eps_error) is
    the limit, the first such refusal (the cheapest plan's) is raised, as a :class:`_BudgetError`,
    noting the plans that were too large.  Every plan too large: max_buckets is the limit, the
    refusal of the smallest is raised."""
    if budget_errors:
        exc = budget_errors[0]
        if size_errors:
            least = min(size_errors, key=lambda e: e.needed if not math.isnan(e.needed) else math.inf)
            exc = type(exc)(f"{exc} (no candidate plan certifies: {len(budget_errors)} were refused for their "
                            f"charges, {len(size_errors)} need more than max_buckets={max_buckets}, at least "
                            f"{least.needed:.4g})", *([exc.tv] if isinstance(exc, _EtaError) else []))
        return exc
    least = min(size_errors, key=lambda e: e.needed if not math.isnan(e.needed) else math.inf)
    if len(size_errors) > 1:
        return BucketLimitError(f"{least} (the smallest of {len(size_errors)} candidate plans)", least.needed)
    return least


def _normalise_events(mechanism, count):
    if isinstance(mechanism, Mechanism):
        if count is None:
            raise ValueError("count is required when composing a single mechanism")
        return [(mechanism, V.positive_int("count", count))]
    if count is not None:
        raise ValueError("count must not be given with a list of (mechanism, count) pairs")
    if isinstance(mechanism, (str, bytes)) or not isinstance(mechanism, Sequence) and not hasattr(mechanism, "__iter__"):
        raise ValueError(f"mechanism must be a Mechanism or a list of (mechanism, count) pairs, got {mechanism!r}")
    events = []
    for i, item in enumerate(mechanism):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise ValueError(f"events[{i}] must be a (mechanism, count) pair, got {item!r}")
        mech, c = item
        if not isinstance(mech, Mechanism):
            raise ValueError(f"events[{i}][0] must be a Mechanism, got {mech!r}")
        events.append((mech, V.positive_int(f"events[{i}] count", c)))
    if not events:
        raise ValueError("events must not be empty")
    return events


def _direction_parts(events):
    """Per direction, the list of (loss, count) with identical losses merged.

    Each distinct mechanism is asked for its losses once (equal mechanisms share the answer): the
    parts do not depend on what the loss cache evicts in between."""
    memo = {}
    maps = []
    for mech, c in events:
        try:
            losses = memo.get(mech)
            if losses is None:
                losses = memo[mech] = mech.privacy_losses()
        except TypeError:  # an unhashable mechanism
            losses = mech.privacy_losses()
        maps.append(losses)
    symmetric = all(m["add"] is m["remove"] for m in maps)
    names = ("remove",) if symmetric else ("remove", "add")
    dirs = {}
    for d in names:
        acc = {}
        for (mech, c), losses in zip(events, maps):
            loss = losses[d]
            key = id(loss)
            if key in acc:
                acc[key] = (loss, acc[key][1] + c)
            else:
                acc[key] = (loss, c)
        dirs[d] = list(acc.values())
    return dirs


_MERGES = (2, 4, 8, 16, 32)


def _candidates(method, parts, arity=None):
    """Candidate chains ``[(method, arity)]`` and groupings ``[merge block size or None]``.

    ``glw`` stays one grid.  ``two_stage`` may group many distinct parts into blocks
    of about ``sqrt(n)`` (Appendix B); ``recursive`` and ``auto`` also try
    multi-level grouping (blocks of ``b`` for several ``b``).
    """
    n = len(parts)
    if method == "glw":
        return [("glw", None)], [None]
    merges = [None]
    if n > 2:
        merges.append(max(2, math.isqrt(n - 1) + 1))  # two levels: blocks of ~sqrt(n), then the root
    if method == "two_stage":
        return [("two_stage", None)], merges
    merges += [b for b in _MERGES if b < n and b not in merges]
    if arity is not None:
        return [("recursive", arity)], merges
    if method == "recursive":
        return [("recursive", a) for a in (4, 8, 16, 32, 64)], merges
    # auto: the cheapest predicted plan among those that can win.  Planning costs a fraction of
    # a millisecond per candidate, so arities below 16 (many nodes, ~0.3 ms each; never the cheapest in
    # the paper's workloads since the series) are left out.
    # Since the low-frequency series (_series_spectrum), large powers stay in float64, so one
    # grid (glw) is a candidate up to 4096 copies and wide arities (256, 1024) are candidates
    # (measured: PSG q=0.2 at k=2^10 from ~11 to ~8 ms, Laplace at 2^10 from 4.3 to 3.7 ms).
    kmax = max(c for _, c in parts)
    chains = [("glw", None)] if kmax <= 4096 else []
    # (8192: where delta_error is near the round-off floor, fewer bottom instances are what certifies:
    # Laplace at 2^30 and 1e-10, recursive(8192) 9.9 ms against two_stage's 15.5 ms)
    chains += [("two_stage", None)] + [("recursive", a) for a in (16, 32, 64, 256, 1024, 8192) if a < kmax or a <= 64]
    return chains, merges


@functools.lru_cache(maxsize=4096)
def _chain_signature(count, method, arity):
    """Shape of the chain tree for ``count`` (multiplicities and sharing, no losses).

    Memoised: a pure function of its arguments (the same answer whoever asks first)."""
    top, _ = _chain(None, count, method, arity, iter(range(1, 1 << 30)))
    ids = {}

    def shape(o):
        if isinstance(o, _Leaf):
            return "L"
        if id(o) not in ids:
            ids[id(o)] = (len(ids), tuple((shape(c), m) for c, m in o.children))
        return ids[id(o)]

    return tuple((shape(o), m) for o, m in top if m > 0)


resources.on_clear(_chain_signature.cache_clear)
resources.on_clear(lambda: _TRIU.clear())


# The planner's predicted sizes (Chernoff windows of the untruncated losses) against the executed
# ones, largest step per plan (54 plans: Gaussian, Laplace, pure DP, randomized response, subsampled
# Gaussian and Laplace, homogeneous and heterogeneous, k from 1 to 10^5): executed / predicted within
# [0.90, 1.07] for Gaussian, Laplace and discrete losses, but down to 0.083 for subsampled ones (their
# MGF bounds are loose in the tails, and loosest for tiny sampling rates).  A plan is refused from its
# prediction only when even the executed size this allows would exceed max_buckets, so plans with
# subsampled (or custom) losses are never refused from it: they stop at the first step too large.
_PEAK_SLACK = 1.25


def _predicted_peak(plan, sizes):
    """``(peak, slack, is_node)``: the largest predicted leaf (buckets) or node (FFT length) of ``plan``, the
    factor by which the executed size may fall short of the prediction (``inf``: never refuse from it),
    and whether that step is a node."""
    peak = 0.0
    slack = _PEAK_SLACK
    is_node = False
    for o in plan.order:
        n = sizes[id(o)]
        if isinstance(o, _Leaf):
            t = type(o.loss)
            if not (t is GaussianLoss or t is LaplaceLoss or isinstance(o.loss, DiscreteLoss)):
                slack = math.inf
        elif math.isfinite(n) and n < 2.0 ** 62:
            n = _fft.fast_length(math.ceil(n))
        if not n <= peak:  # (NaN: unknown, counted as too large)
            peak = n if not math.isnan(n) else math.inf
            is_node = isinstance(o, _Node)
    return peak, slack, is_node


_EARLY_STOP_US = 5000.0  # see _choose_plan
_MERGE_START = 16  # smallest block size where _choose_plan's search for the grouping starts
_PRODUCT_LIMIT = 256  # candidate plans x parts above which chain and grouping are searched in turn


def _choose_plan(parts, method, arity, eps_az, log_term, budgets, native=False, merge="any"):
    """Cheapest predicted plan: the full product of candidates for small problems,
    else coordinate search (chain, then grouping, then chain again).

    ``native``: the MGF grids (cached on the losses) come from the compiled kernels.
    ``merge``: only this grouping (a block size or ``None``) instead of every candidate grouping.
    """
    chains, merges = _candidates(method, parts, arity)
    if merge != "any":
        merges = [merge]
    _k_grids([loss for loss, _ in parts], native)  # every part's grids, in one pass where possible
    memo = {}
    wcache = {}
    # chains that build the same tree for every count present are one candidate
    counts = sorted({c for _, c in parts})
    sig = {ch: tuple(_chain_signature(c, ch[0], ch[1]) for c in counts) for ch in chains}
    chains = [ch for i, ch in enumerate(chains) if sig[ch] not in {sig[x] for x in chains[:i]}]

    merge_order = []  # _merge_order of the parts, once for every grouped candidate

    def evaluate(chain, merge):
        key = (chain, merge)
        if key not in memo:
            if merge is not None and len(parts) > merge and not merge_order:
                merge_order.extend(_merge_order(parts, native))
            plan = _build_plan(parts, chain[0], chain[1], merge, native, order=merge_order or None)
            n_obj = plan.n_nodes + plan.n_leaves
            meshes, cost, sizes = _predict(plan, eps_az, log_term, budgets.wrap / n_obj, budgets.trunc / n_obj,
                                           wcache, budgets, native)
            plan.peak, plan.peak_slack, plan.peak_node = _predicted_peak(plan, sizes)
            memo[key] = (cost, plan, meshes)
        return memo[key]

    if len(chains) * len(merges) * len(parts) <= _PRODUCT_LIMIT:
        for c in chains:
            if c[0] != "recursive":
                for m in merges:
                    evaluate(c, m)
        # recursive arities from the widest down; for a cheap composition (predicted below
        # _EARLY_STOP_US) stop once the predicted cost rises: the narrow arities' deep chains are
        # the dearest to predict (~0.1 ms each), and the cost is only roughly unimodal in the
        # arity, so a dearer composition, where a few percent outweigh the planning, tries them all
        prev = math.inf
        for c in sorted((c for c in chains if c[0] == "recursive"), key=lambda ch: -ch[1]):
            best = min(evaluate(c, m)[0] for m in merges)
            # (and once it rises from a plan that fits into the plans ranked last for their predicted
            # round-off: narrower arities have more instances at the bottom level, so no more of them fit)
            if best > prev and (prev < _EARLY_STOP_US or best >= 1e15 > prev):
                break
            prev = best
    else:
        # rank the chains on an evenly spaced sample of the parts, then try every grouping
        # for the best chain on all parts (planning stays linear in the number of parts)
        if len(chains) > 1:
            # by value, never by id(): the sample (hence the chosen chain) must not depend on memory addresses
            st = _grid_stack(wcache, [loss for loss, _ in parts], native)
            with np.errstate(invalid="ignore", over="ignore"):
                q20 = np.min((st[1][[st[0][id(loss)] for loss, _ in parts]] + 20.0) / _S_ABS, axis=1).tolist()
            order = sorted(range(len(parts)), key=lambda i: (parts[i][1], q20[i], i))
            sample = [parts[order[j * (len(parts) - 1) // 15]] for j in range(16)]
            sm = [m for m in merges if m is None or m < len(sample)]
            m0 = min(sm[1:], key=lambda b: abs(b - 4)) if len(sm) > 1 else None
            costs = []
            for c in chains:
                plan = _build_plan(sample, c[0], c[1], m0, native)
                n_obj = plan.n_nodes + plan.n_leaves
                costs.append(_predict(plan, eps_az, log_term, budgets.wrap / n_obj, budgets.trunc / n_obj, wcache,
                                      budgets, native)[1])
            c_best = chains[int(np.argmin(costs))]
        else:
            c_best = chains[0]
        # the single root only while it can compete; block sizes by descent from _MERGE_START
        # (the predicted cost is unimodal in the block size in practice; each evaluation of a
        # 1000-part plan costs ~30 ms, so the search starts where the optimum usually is)
        bs = sorted(b for b in merges if b is not None)
        # (and always when it is the only grouping, as for glw: a search must leave a candidate)
        if None in merges and (len(parts) <= 64 or not bs):
            evaluate(c_best, None)
        if bs:
            # (from ~sqrt(n) for many parts, the two-level grouping: where 1000 parts end up)
            start = max(_MERGE_START, math.isqrt(len(parts) - 1) + 1)
            i = min(range(len(bs)), key=lambda j: (abs(math.log(bs[j] / start)), bs[j]))

            def cost(j):
                return evaluate(c_best, bs[j])[0]

            cost(i)
            for step in (-1, 1):  # down while it improves; up only if the first step down did not
                j = i
                while 0 <= j + step < len(bs) and cost(j + step) < cost(j):
                    j += step
                if j != i:
                    break
    return sorted(memo.values(), key=lambda t: t[0])


_PARALLEL_MIN_US = 2000.0  # predicted cost (µs) below which the second direction stays on the calling thread
_PREFETCH_MIN_PARTS = 32
_pool_lock = threading.Lock()
_pool: list = [None, None]  # (executor, pid), made on first use
_POOL_MAX = 64  # worker threads at most (each job holds a compute slot: as many run as resources.thread_limit)


def _after_fork_in_child():
    # the parent's lock may have been held by another thread at the fork, and the executor's
    # threads do not exist here: start afresh
    global _pool_lock
    _pool_lock = threading.Lock()
    _pool[:] = [None, None]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def default_threads() -> int:
    """Threads a composition uses when ``compose`` is not told (``threads=None``).

    The environment variable ``FASTPLD_NUM_THREADS`` (a positive integer) sets it for every
    caller, calibration and the accountant included (``1``: everything on the calling thread,
    e.g. in a server that runs many compositions at once); otherwise 2 when this process may run
    on more than one CPU, else 1.  A composition has at most two independent parts (the add and
    remove directions of an asymmetric mechanism such as the subsampled Gaussian), so more
    threads would idle.  The second thread is used only while fewer than
    :func:`fastpld.thread_limit` threads compose in the whole process.
    """
    env = os.environ.get("FASTPLD_NUM_THREADS")
    if env is not None and env.strip():
        try:
            return V.positive_int("FASTPLD_NUM_THREADS", int(env))
        except ValueError:
            raise ValueError(f"FASTPLD_NUM_THREADS must be a positive integer, got {env!r}") from None
    return 2 if resources._affinity() > 1 else 1


def _try_submit(fn):
    """``fn`` started on a worker thread (a Future) if a compute slot is free
    (:func:`fastpld.resources.try_acquire_slot`), else ``None``: under a server's load a composition
    runs on its own thread instead of oversubscribing the cores.

    The worker threads live as long as the process; the job holds the slot (and uses its
    workspace: plans and scratch arrays) until it ends.
    """
    ws = resources.try_acquire_slot()
    if ws is None:
        return None
    with _pool_lock:
        # (a forked child inherits the executor but not its threads: work sent there would never
        # run, so a child makes its own pool)
        if _pool[0] is None or _pool[1] != os.getpid():
            _pool[0] = concurrent.futures.ThreadPoolExecutor(max_workers=_POOL_MAX, thread_name_prefix="fastpld")
            _pool[1] = os.getpid()
    executor = _pool[0]
    try:
        return executor.submit(resources.run_in_slot, ws, fn)
    except RuntimeError:  # interpreter shutting down
        resources._slots.release(ws)
        return None


def _run_jobs(jobs, threads, predicted_us):
    """Results of ``jobs`` (callables), the first on a worker thread when that pays (:func:`_try_submit`).

    Every job finishes before this returns or raises (no work outlives the call), and the first
    job's error wins, as when they run in turn; the results do not depend on the threading.
    """
    fut = None
    if len(jobs) > 1 and threads > 1 and predicted_us >= _PARALLEL_MIN_US:
        fut = _try_submit(jobs[0])
    if fut is None:
        return [job() for job in jobs]
    try:
        rest = [job() for job in jobs[1:]]
    finally:
        head = fut.result()  # waits; its error (if any) takes precedence, as if it had run first
    return [head] + rest


def compose(mechanism, count: int | None = None, *, eps_error: float | None = None, delta_error: float = 1e-10,
            rel_error: float | None = None, method: str = "auto", backend: str | None = None,
            arity: int | None = None, max_buckets: int = DEFAULT_MAX_BUCKETS,
            threads: int | None = None) -> PrivacyLossDistribution:
    """Compose privacy loss distributions with certified error.

    Parameters
    ----------
    mechanism : Mechanism or list of (Mechanism, int)
        One mechanism composed ``count`` times, or a heterogeneous list of
        ``(mechanism, count)`` pairs.
    count : int, optional
        Number of compositions of a single ``mechanism``.
    eps_error, delta_error : float
        Target errors: the result ``Z`` satisfies ``|Y - Z| <=_delta_error eps_error``
        for the exact composed privacy loss ``Y``, so that
        ``delta_Z(eps + eps_error) - delta_error <= delta(eps) <= delta_Z(eps - eps_error) + delta_error``.
        ``eps_error`` defaults to 0.1 (unless ``rel_error`` is given).
    rel_error : float, optional
        The accuracy asked relative to epsilon instead of ``eps_error`` (give one of them): the
        certified interval of ``epsilon(delta)`` at most ``rel_error`` times epsilon wide (so both
        bounds within ``rel_error`` of the truth, relative), checked at deltas 1e-3 .. 1e-9, for
        epsilons of at least 0.01 (below: ``rel_error * 0.01``, absolute).  The width counts the
        discretisation; where ``delta`` is within a few orders of ``delta_error`` the delta charges
        widen it further.  Certified by dominance: ``method`` "auto" or "dominance".
    method : {"auto", "glw", "two_stage", "recursive", "dominance"}
        ``glw``: one fine grid (Gopi-Lee-Wutschitz); ``two_stage``: Algorithm 2;
        ``recursive``: Algorithm 3 for any ``k`` (``arity`` chooses the branching;
        default: the cheapest of several); ``auto``: the cheapest predicted plan (with
        ``eps_error``; with ``rel_error``: the dominance certificate).
        ``dominance``: the recursive plan on a dominating and a dominated PMF, certified
        without an epsilon shift (``docs/dominance.md``); there ``eps_error`` is the accuracy
        asked of each bound of ``epsilon(delta)`` (checked at deltas 1e-3 .. 1e-9) and
        ``arity`` defaults to 64 (256 where its round-off does not fit ``delta_error``).
    backend : {"native", "numpy"}, optional
        FFT backend (default: :func:`fastpld.get_backend`).
    arity : int, optional
        Branching factor of the recursive method.
    max_buckets : int
        Refuse (``ValueError``) before allocating an FFT or a discretisation
        larger than this.
    threads : int, optional
        ``1`` runs everything on the calling thread; ``2`` or more lets the two directions
        (add and remove) of an asymmetric composition run concurrently, the second on a
        process-wide worker thread when a compute slot is free (the compiled kernels and FFTs
        release the GIL; at most :func:`fastpld.thread_limit` threads compose at once, process-wide).
        Default: :func:`default_threads`.  The result does not depend on it.

    Returns
    -------
    PrivacyLossDistribution
        Query with ``delta(eps)`` and ``epsilon(delta)``; both return
        ``Bounds(lower, estimate, upper)``.  Answers are kept (see :func:`fastpld.set_cache_limit`):
        a repeated question returns a copy of the kept answer, bitwise the same as a fresh
        composition; its arrays are shared and read-only.
    """
    events = _normalise_events(mechanism, count)
    if rel_error is not None:
        rel_error = V.rel_error(rel_error)
        if eps_error is not None:
            raise ValueError("give eps_error or rel_error, not both")
        if method not in ("auto", "dominance"):
            raise ValueError(f"rel_error applies to methods 'auto' and 'dominance' (the dominance certificate); "
                             f"method {method!r} takes an absolute eps_error")
        method = "dominance"
    eps_err = V.eps_error(0.1 if eps_error is None else eps_error)
    delta_err = V.delta_error(delta_error)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if arity is not None:
        arity = V.positive_int("arity", arity)
        if arity < 2:
            raise ValueError(f"arity must be >= 2, got {arity}")
        if method not in ("recursive", "auto", "dominance"):
            raise ValueError("arity applies to methods 'recursive' and 'dominance' only")
    max_buckets = V.positive_int("max_buckets", max_buckets)
    threads = default_threads() if threads is None else V.positive_int("threads", threads)
    be = _fft.resolve(backend)

    dir_parts = list(_direction_parts(events).items())

    def compute():
        with resources.compute_slot():
            pld = _compose_parts(dir_parts, events, eps_err, delta_err, method, arity, max_buckets, threads, be,
                                 rel_error)
        _mechanisms._refresh_sizes(m for m, _ in events)  # (their MGF grids and tables grew)
        return pld

    key = (tuple((name, tuple(parts)) for name, parts in dir_parts), eps_err, delta_err, method, arity, be.name,
           max_buckets) + ((("rel_error", rel_error),) if rel_error is not None else ())
    try:
        hash(key)
        loss_keys = {_mechanisms._loss_key(m) for m, _ in events}
    except TypeError:  # a custom loss or mechanism that cannot be a key: composed every time
        return compute()
    return _answers.answer(key, compute, events, loss_keys)


def _compose_parts(dir_parts, events, eps_err, delta_err, method, arity, max_buckets, threads, be, rel_error=None):
    """:func:`compose` of validated arguments (``dir_parts``: :func:`_direction_parts` of ``events``)."""
    if method == "dominance":
        from .dominance import compose_dominance  # (a certificate of its own; imported where used)
        return compose_dominance(dir_parts, events, eps_err, delta_err, be, arity, max_buckets, threads, rel_error)
    budgets = _Budgets.split(eps_err, delta_err)
    log_term = math.log(2.0 / budgets.eta)
    eps_az = eps_err * (1 - _EPS_RESERVE)
    def run(ranked):
        # the cheapest predicted plan first; if its measured round-off/wrap charges do not fit
        # delta_error (the prediction cannot see, e.g., the spectral peaks of lattice PMFs), or it
        # needs more than max_buckets, the next ones, so that the answer is the fastest plan that
        # certifies, and a refusal means that no candidate certifies
        # (a plan whose measured charges leave too little failure probability for its meshes --
        # the round-off of large powers of lattice PMFs is ~5x the prediction -- stops as soon as
        # that is certain: measured 3.6 -> 1.8 ms per refused plan for Laplace at k = 2^30).
        # A plan predicted to need more than max_buckets (by more than the prediction's error) is
        # refused without executing it.
        budget_errors, size_errors = [], []
        for _, plan, meshes in ranked:
            peak = getattr(plan, "peak", 0.0)
            if peak > max_buckets * getattr(plan, "peak_slack", math.inf):
                what = (f"composition needs an FFT of {peak:.0f} buckets" if plan.peak_node and math.isfinite(peak)
                        else f"discretising the privacy loss needs {peak:.4g} buckets")
                size_errors.append(BucketLimitError(
                    f"{what} (the planner's prediction for the largest step of the {_plan_name(plan)} plan), more "
                    f"than max_buckets={max_buckets}; increase eps_error or max_buckets", peak))
                continue
            floor = _roundoff_floor(plan)
            if floor * (1 - 1e-6) >= budgets.delta:
                budget_errors.append(_BudgetError(
                    f"delta_error={budgets.delta:.3g} is too small for this composition: the {_plan_name(plan)} plan's "
                    f"node normalisations alone are charged at least {floor:.3g} of round-off; increase delta_error"))
                continue
            try:
                final, eps_spent, delta_spent, stages, cert = _execute(plan, meshes, budgets, be, max_buckets,
                                                                       eps_limit=eps_err)
                if eps_spent > eps_err:
                    raise _BudgetError(
                        f"the certified eps error {eps_spent:.4g} exceeds eps_error={eps_err:.4g} (round-off and "
                        f"truncation left delta {cert['eta']:.3g} for the discretisation term; mean-correction "
                        f"bias {cert['bias']:.3g}); increase eps_error or delta_error"
                    )
                return plan, final, eps_spent, delta_spent, stages, cert
            except _BudgetError as exc:
                budget_errors.append(exc)
            except BucketLimitError as exc:
                size_errors.append(exc)
        raise _refusal(budget_errors, size_errors, max_buckets)

    def finish(name, parts, out):
        plan, final, eps_spent, delta_spent, stages, cert = out
        p_inf_log = sum(c * math.log1p(-loss.p_inf) for loss, c in parts)
        return DirectionResult(final, -math.expm1(p_inf_log), eps_spent, delta_spent, tuple(stages), cert,
                               _plan_name(plan))

    def shape(plan):
        return plan.method, plan.params[0].get("arity"), plan.params[0].get("merge")

    name0, parts0 = dir_parts[0]
    # many distinct parts: the second direction's MGF grids (~0.1 ms per part) are computed on a
    # worker thread while this one plans the first direction
    prefetch = None
    if len(dir_parts) == 2 and threads > 1 and len(dir_parts[1][1]) >= _PREFETCH_MIN_PARTS:
        prefetch = _try_submit(lambda: _k_grids([loss for loss, _ in dir_parts[1][1]], be.native))
    try:
        ranked0 = _choose_plan(parts0, method, arity, eps_az, log_term, budgets, be.native)
    finally:
        if prefetch is not None:
            prefetch.result()
    jobs = [lambda: finish(name0, parts0, run(ranked0))]
    if len(dir_parts) == 2:
        name1, parts1 = dir_parts[1]
        # The add and remove losses of one mechanism have the same shape of plan: for auto, the
        # second direction predicts only the first one's top-ranked chain and grouping (its meshes
        # are still predicted for its own loss), and ranks every candidate only if that plan is
        # refused.  (The top-ranked plan, not the one the first direction ends up executing: the
        # second direction does not wait for the first, and its answer does not depend on threads.)
        reuse = shape(ranked0[0][1]) if method == "auto" and arity is None else None

        def second():
            refused = None
            if reuse is not None:
                try:
                    return finish(name1, parts1, run(_choose_plan(parts1, reuse[0], reuse[1], eps_az, log_term,
                                                                  budgets, be.native, merge=reuse[2])))
                except (_BudgetError, BucketLimitError):
                    refused = reuse
            ranked = _choose_plan(parts1, method, arity, eps_az, log_term, budgets, be.native)
            return finish(name1, parts1, run([r for r in ranked if shape(r[1]) != refused] or ranked))

        jobs.append(second)
    directions = dict(zip([name for name, _ in dir_parts], _run_jobs(jobs, threads, ranked0[0][0])))
    return PrivacyLossDistribution(directions, eps_err, delta_err, tuple(events), be.name)
