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
  and charged as total variation per instance; nodes whose charge would not fit
  run in long double.  CDF round-off widens the leaf coupling range (see
  :mod:`fastpld.discretize`).  Mean errors add ``instances * bias`` to eps.

The resulting pair ``(eps_spent, delta_spent)`` satisfies
``|Y^k - Z| <=_{delta_spent} eps_spent``; queries use these spent values.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from . import _fft, _kernels
from . import _validation as V
from .curve import DirectionResult, PrivacyLossDistribution, StageInfo
from .discretize import GridPMF, discretize_loss, rediscretize, truncation_window
from .mechanisms import DiscreteLoss, Mechanism, PrivacyLoss

__all__ = ["compose", "METHODS", "DEFAULT_MAX_BUCKETS"]

METHODS = ("auto", "glw", "two_stage", "recursive")
DEFAULT_MAX_BUCKETS = 1 << 23

_U64 = np.finfo(np.float64).eps / 2
_ULD = float(np.finfo(np.longdouble).eps) / 2
_TWO_PI_LD = 2 * np.longdouble("3.14159265358979323846264338327950288")

# Shares of the delta budget (caps; the spent amounts are usually far smaller).
_SHARE_ETA = 0.4
_SHARE_TRUNC = 0.2
_SHARE_WRAP = 0.2
_SHARE_FP = 0.15
# Share of the eps budget kept for mean-correction bias and CDF round-off.
_EPS_RESERVE = 0.03


# --------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------
class _Leaf:
    __slots__ = ("loss", "group", "count")

    def __init__(self, loss, group, count):
        self.loss, self.group, self.count = loss, group, count


class _Node:
    __slots__ = ("children", "group", "count", "label")

    def __init__(self, children, group, label):
        self.children = [(c, int(m)) for c, m in children if m > 0]
        self.group = group
        self.label = label
        self.count = sum(c.count * m for c, m in self.children)


class _Plan:
    def __init__(self, root, method, params):
        self.root = root
        self.method = method
        self.params = params
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


def _build_plan(parts, method, arity, merge=None):
    """Plan for the heterogeneous list ``parts`` of ``(loss, count)``.

    ``merge=None``: every part's chain feeds one root (Appendix B with one block).
    ``merge=b``: parts are grouped into blocks of about ``b``, each block convolved
    on a fine narrow grid (one mesh group per level), the block results
    re-discretised onto a coarser, wider grid and grouped again, until at most
    ``b`` remain for the root: ``n`` distinct parts then cost ``O(n / b)`` small
    convolutions per level and ``O(log_b n)`` levels instead of ``n`` inputs to
    one full-size root.  Every level is an ordinary node of the plan, so the
    certificate (leaves, re-discretisations, wrap, round-off) covers it unchanged.
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
        return _Plan(root, method, params)
    b = max(2, int(merge))
    # similar parts side by side keep the narrow blocks narrow (order does not affect correctness)
    # (key: upper Chernoff quantile of each part at a moderate tail, from the cached MGF grids)
    kp = np.array([_k_grid(loss)[0] for loss, _ in parts]) * np.array([float(c) for _, c in parts])[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        size = np.min((kp + 20.0) / _S_ABS, axis=1)
    order = sorted(range(len(parts)), key=lambda i: (size[i], parts[i][1]))
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
    return _Plan(root, method, params)


# --------------------------------------------------------------------------------------
# Window estimates for planning (Chernoff bounds from the mechanisms' MGFs)
# --------------------------------------------------------------------------------------
_S_ABS = np.geomspace(1e-7, 1e5, 361)


def _k_grid(loss):
    """Cached ``(K(+s), K(-s))`` on the absolute grid ``_S_ABS``."""
    cache = getattr(loss, "_fastpld_kgrid", None)
    if cache is None:
        s = _S_ABS
        if isinstance(loss, DiscreteLoss):
            kp, kn = loss.log_mgf(s), loss.log_mgf(-s)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                kp = np.asarray(loss.log_mgf(np.where(s <= 512, s, np.nan)), dtype=np.float64)
                kn = np.asarray(loss.log_mgf(np.where(s <= 512, -s, np.nan)), dtype=np.float64)
            kp = np.where(np.isnan(kp), np.inf, kp)
            kn = np.where(np.isnan(kn), np.inf, kn)
        cache = (kp, kn)
        try:
            loss._fastpld_kgrid = cache
        except AttributeError:  # pragma: no cover
            pass
    return cache


def _est_window(parts, tail):
    """Approximate ``[lo, hi]`` holding ``sum_i (count_i copies of loss_i)`` up to ``tail`` each side."""
    # called ~10 times per candidate plan: one array operation per loss
    kp = kn = None
    lo_sup = hi_sup = 0.0
    for loss, c in parts:
        a, b = _k_grid(loss)
        kp = c * a if kp is None else kp + c * a
        kn = c * b if kn is None else kn + c * b
        lo_sup += c * loss.support[0] if math.isfinite(loss.support[0]) else -math.inf
        hi_sup += c * loss.support[1] if math.isfinite(loss.support[1]) else math.inf
    lo, up = _chernoff_quantiles(kp, kn, tail)
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
_T_NODE = 350.0
_T_LEAF = 800.0
_T_LEAF_POINT = 5.0
_T_POINT_LD = 1.25  # per point of a long double node, per child FFT, at log2 N = 12
_T_POINT_64 = 0.12


def _predict(plan, eps_az, log_term, wrap_tail, trunc_tail, wcache=None, budgets=None):
    """Choose meshes per group and predict the work; returns (meshes, cost, sizes).

    ``wcache`` (a dict shared by the candidate plans of one composition) memoises the
    windows of objects holding copies of a single loss, keyed by the log tail rounded
    to an integer (prediction only: execution computes its own windows).
    """
    with np.errstate(invalid="ignore", over="ignore"):  # once here, not per _est_window call
        return _predict_impl(plan, eps_az, log_term, wrap_tail, trunc_tail, wcache, budgets)


def _predict_impl(plan, eps_az, log_term, wrap_tail, trunc_tail, wcache, budgets):
    if wcache is None:
        wcache = {}
    a = plan.copies_per_group()
    widths = {g: 0.0 for g in plan.groups}
    node_w = {}
    single = {}  # per object holding copies of one loss: (loss, copies)
    agg = {}  # per other object: summed MGF grids and supports of its leaf copies (bottom-up)

    def window_single(loss, copies, tail):
        # computed at the key's canonical tail, so the memo's answer does not depend on which
        # plan asked first (the prediction, hence the meshes, must be deterministic)
        lt = round(math.log(tail))
        key = (id(loss), copies, lt)
        r = wcache.get(key)
        if r is None:
            r = wcache[key] = _est_window([(loss, copies)], math.exp(lt))
        return r

    def get_agg(o):
        r = agg.get(id(o))
        if r is None:
            loss, copies = single[id(o)]
            kp, kn = _k_grid(loss)
            lo, hi = loss.support
            r = (copies * kp, copies * kn, copies * lo if math.isfinite(lo) else -math.inf,
                 copies * hi if math.isfinite(hi) else math.inf)
        return r

    for o in plan.order:
        inst = plan.instances[id(o)]
        if isinstance(o, _Leaf):
            lo, hi = window_single(o.loss, 1, trunc_tail / max(inst, 1))
            w = hi - lo
            widths[o.group] += _LEAF_COST * w
            single[id(o)] = (o.loss, 1)
        else:
            tail = wrap_tail / max(inst, 1)
            kids = [single.get(id(c)) for c, _ in o.children]
            if all(k is not None for k in kids) and len({id(k[0]) for k in kids}) == 1:
                copies = sum(k[1] * m for k, (_, m) in zip(kids, o.children))
                single[id(o)] = (kids[0][0], copies)
                lo, hi = window_single(kids[0][0], copies, tail)
            else:
                kp = kn = None
                lo_s = hi_s = 0.0
                for c, m in o.children:
                    ckp, ckn, clo, chi = get_agg(c)
                    kp = m * ckp if kp is None else kp + m * ckp
                    kn = m * ckn if kn is None else kn + m * ckn
                    lo_s += m * clo
                    hi_s += m * chi
                agg[id(o)] = (kp, kn, lo_s, hi_s)
                lo, hi = _agg_window(kp, kn, lo_s, hi_s, tail)
                if not (math.isfinite(lo) and math.isfinite(hi)):
                    lo, hi = _est_window(_leaf_parts(o), tail)
            w = hi - lo
            widths[o.group] += w * (len(o.children) + 1)
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
    for o in plan.order:
        n = node_w[id(o)] / meshes[o.group] + 1
        sizes[id(o)] = n
        if isinstance(o, _Leaf):
            cost += _T_LEAF + _T_LEAF_POINT * n
        else:
            nn = max(n, 2.0)
            lg = math.ceil(math.log2(nn))
            inst = plan.instances[id(o)]
            msum = sum(m for _, m in o.children)
            est64 = inst * (2.0 * msum * 12 * _U64 * lg + 4 * _U64)
            # _run_node tries float64 up to the node's share of the round-off budget; the measured
            # charge is typically a few times est64, so the try is predicted to hold up to half of it
            ld = est64 > 0.25 * allowance and est64 > 0.5 * node_allowance
            if ld:
                fp_pred += inst * (2.0 * msum * 12 * _ULD * lg + 4 * _ULD)
            elif est64 > 0.25 * allowance:
                fp_pred += 2.5 * est64
            per_point = _T_POINT_LD if ld else _T_POINT_64
            if ld and est64 <= node_allowance:  # the float64 try that is redone
                per_point += _T_POINT_64
            cost += _T_NODE + nn * (len(o.children) + 1) * per_point * lg / 12
    # (a plan whose measured charges do not fit is not fatal: compose falls back to the next one)
    if budgets is not None and fp_pred > 0.9 * (budgets.delta - budgets.eta):
        cost = 1e15 * (1 + fp_pred / budgets.delta)  # likely refused for round-off: rank last
    return meshes, cost, sizes


def _chernoff_quantiles(kp, kn, tail):
    """``(lo, up)`` with ``Pr[S < lo], Pr[S > up] <= tail`` from summed log-MGF grids on ``+-_S_ABS``.

    ``+inf`` grid entries (unknown MGF) drop out of the minimum; non-finite if nothing is known.
    """
    lt = math.log(tail)
    with np.errstate(invalid="ignore", over="ignore"):
        up = float(np.min((kp - lt) / _S_ABS))
        lo = -float(np.min((kn - lt) / _S_ABS))
    return (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(up) else up)


def _agg_window(kp, kn, lo_sup, hi_sup, tail):
    """Chernoff window of a sum from its summed MGF grids (as :func:`_est_window`, non-finite if unknown)."""
    lo, up = _chernoff_quantiles(kp, kn, tail)
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
    moments and the log-MGF grid come from the compiled kernels (same sums).
    """
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


def _fp_fft_bound(specs, N, u):
    """Bound on ||computed - exact||_1 of irfft(prod X_c^m_c) (see module docstring).

    ``specs``: list of (X_computed, m).  Returns (l1_bound, linf_bound).
    """
    g = 12.0 * u * math.ceil(math.log2(max(N, 2)))
    log_prod = 0.0
    amp = 0.0
    logs = []
    for X, m in specs:
        r = np.abs(X).astype(np.float64)
        with np.errstate(divide="ignore"):
            lr = np.log(r)
            lrg = np.log(r + g)
        logs.append((lr, lrg, m, np.angle(X).astype(np.float64)))
        log_prod = log_prod + m * lrg
    # derivative term: sum_c m_c (r_c+g)^(m_c-1) g prod_{c' != c} (r_c'+g)^(m_c')
    with np.errstate(over="ignore", invalid="ignore"):
        for lr, lrg, m, ph in logs:
            amp = amp + m * g * np.exp(log_prod - lrg)
        # rounding of the power itself (polar form): relative error ~ u (1 + m|log r| + m|phase|)
        prod_r = np.exp(sum(m * lr for lr, _, m, _ in logs))
        cond = sum(1.0 + m * (np.abs(np.where(np.isfinite(lr), lr, 0.0)) + np.abs(ph)) for lr, _, m, ph in logs)
        # + m u: |X| itself is rounded (relative u) before the m-th power
        amp = amp + (8 * cond + 2 * sum(m for *_, m, _ in logs)) * u * prod_r
    amp = np.where(np.isfinite(amp), amp, 0.0)
    w = np.full(amp.shape, 2.0)
    w[0] = 1.0
    if N % 2 == 0:
        w[-1] = 1.0
    e2 = math.sqrt(float(np.sum(w * amp**2)))
    p2 = math.sqrt(float(np.sum(w * np.exp(2 * log_prod))))  # >= ||P||_2 (full spectrum)
    l2 = (e2 + g * p2) / math.sqrt(N)
    return e2 + g * p2, l2


def _run_node(node, inputs, inst, budgets, n_objects, backend, max_buckets, n_nodes=None):
    """Convolve the node's inputs; returns (GridPMF, info dict)."""
    h = inputs[0][0].mesh
    # centre each input at its mean index (keeps phases small in the powers)
    ins = []
    base_val = 0.0
    full = 1
    for pmf, m in inputs:
        p = np.asarray(pmf.probs)
        pf = p.astype(np.float64)
        cen = int(round(float(np.dot(np.arange(pf.size), pf) / pf.sum())))
        ins.append((p, cen, m))
        base_val += m * (pmf.offset + cen * h)
        full += m * (p.size - 1)
    w_per = budgets.wrap / (n_objects * inst)
    if len(ins) == 1 and ins[0][2] == 1:
        p, cen, m = ins[0]
        return GridPMF(p, inputs[0][0].offset, h), {"N": p.size, "wrap": 0.0, "fp": 0.0, "dtype": p.dtype, "window": (0, p.size - 1)}
    lo_full = -sum(m * cen for _, cen, m in ins)
    lo, hi, tail = _chernoff_window(ins, w_per, backend.native)
    need = hi - lo + 1
    if need >= full:
        N = _fft.fast_length(full)
        c = lo_full
        wrap = 0.0
    else:
        N = _fft.fast_length(need)
        if N >= full:
            N = _fft.fast_length(full)
            c = lo_full
            wrap = 0.0
        else:
            c = lo - (N - need) // 2
            wrap = tail(c + N, True) + tail(c - 1, False)
    if N > max_buckets:
        raise ValueError(
            f"composition needs an FFT of {N} buckets at mesh {h:.3g} (node {node.label}), more than "
            f"max_buckets={max_buckets}; increase eps_error or max_buckets"
        )
    # precision: long double where the float64 round-off charge would not fit.  Nodes whose
    # predicted float64 charge is small run in float64; those within the node's share of the
    # round-off budget (budgets.fp / nodes: leaves and re-discretisations charge ~u per copy)
    # try float64 and are redone in long double only if the measured charge exceeds that share.
    # (The precision only decides how much is charged; every node charges its own measured bound.)
    allowance = budgets.fp / n_objects
    node_allowance = budgets.fp / n_nodes if n_nodes else allowance
    msum = sum(m for _, _, m in ins)
    est64 = inst * (2.0 * msum * 12 * _U64 * math.ceil(math.log2(N)) + 4 * _U64)
    if est64 <= 0.25 * allowance:
        dtypes = (np.float64,)
    elif est64 <= node_allowance:
        dtypes = (np.float64, np.longdouble)
    else:
        dtypes = (np.longdouble,)
    for dtype in dtypes:
        u = _U64 if dtype is np.float64 else _ULD
        specs = []
        logmag = phase = None
        if backend.native:  # cached plans, compiled placement/power/round-off kernels (same arithmetic)
            out, fp_l1, fp_linf = backend.convolve(ins, N, dtype, u)
        for p, cen, m in ([] if backend.native else ins):
            buf = np.zeros(N, dtype=dtype)
            pos = (np.arange(p.size) - cen) % N
            np.add.at(buf, pos, p.astype(dtype))
            X = backend.rfft(buf, N)
            specs.append((X, m))
            with np.errstate(divide="ignore", invalid="ignore"):
                lr = np.log(np.abs(X))
                ph = np.angle(X)
            logmag = m * lr if logmag is None else logmag + m * lr
            phase = m * ph if phase is None else phase + m * ph
        if not backend.native:
            # reduce by 2 pi in the node's precision: a float64 2 pi would put float64-size phase errors
            # (|phase| * 2.4e-16) into long double nodes, whose charge assumes long double accuracy
            phase = np.remainder(phase, _TWO_PI_LD if dtype is np.longdouble else 2 * np.pi)
            with np.errstate(under="ignore"):
                Pc = np.exp(logmag) * (np.cos(phase) + 1j * np.sin(phase))
            Pc[~np.isfinite(logmag)] = 0
            out = backend.irfft(Pc, N)
            fp_l1, fp_linf = _fp_fft_bound(specs, N, u)
        if len(dtypes) == 1 or dtype is np.longdouble or inst * (2 * fp_l1 + 4 * u) <= node_allowance:
            break
    lin = np.roll(out, -(c % N)) if c % N else out
    # exact result is non-negative: clipping only moves towards it
    lin = np.maximum(lin, 0)
    tv_fp = 2 * fp_l1 + 4 * u
    # drop round-off-level entries where the charge fits (keeps next windows tight); the
    # charge is N * floor >= the mass removed, not the mass itself, so that it does not depend
    # on which backend's noise happens to fall below the floor (bounds agree across backends)
    floor = fp_linf
    trim_charge = 2 * N * floor
    if inst * trim_charge <= 0.25 * allowance:
        lin = np.where(lin < floor, 0, lin)
        tv_fp += trim_charge
    # entries below float64's range would vanish when the next node casts to float64 for its
    # Chernoff MGF: drop them here and charge their (tiny) mass
    tiny = (lin > 0) & (lin < 1e-300)
    if tiny.any():
        tv_fp += 2 * float(np.sum(lin[tiny]) if lin.dtype == np.float64 else tiny.sum() * 1e-300)
        lin = np.where(tiny, 0, lin)
    nz = np.flatnonzero(lin)
    if nz.size == 0:
        raise ValueError("composition lost all probability mass to round-off; increase eps_error or delta_error")
    a, b = int(nz[0]), int(nz[-1])
    lin = lin[a:b + 1]
    lin = lin / lin.sum()
    # base_val = sum m_c (offset_c + cen_c h); entry j of lin is the index sum I' = c + a + j
    offset = base_val + (c + a) * h
    info = {"N": N, "wrap": wrap, "fp": tv_fp, "dtype": dtype, "window": (c, c + N - 1)}
    return GridPMF(lin, offset, h), info


class _BudgetError(ValueError):
    """The measured delta charges of a plan exceed ``delta_error`` (another plan may fit)."""


def _check_tv(budgets, tv_trunc, tv_wrap, tv_fp):
    if not budgets.delta - (tv_trunc + tv_wrap + tv_fp) > 0:
        raise _BudgetError(
            f"delta_error={budgets.delta:.3g} is too small for this composition: round-off alone costs "
            f"{tv_fp:.3g} (wrap-around {tv_wrap:.3g}, truncation {tv_trunc:.3g}; round-off grows with the number "
            f"of compositions); increase delta_error"
        )


def _execute(plan, meshes, budgets, backend, max_buckets):
    """Run a plan for one direction; returns (final GridPMF, eps_spent, delta_spent, stages, cert)."""
    results = {}
    redisc = {}
    n_objects = plan.n_nodes + plan.n_leaves
    V = 0.0
    bias = 0.0
    tv_trunc = tv_wrap = tv_fp = 0.0
    stages = []
    for o in plan.order:
        # refuse as soon as the charges already exceed the budget (before more FFTs)
        _check_tv(budgets, tv_trunc, tv_wrap, tv_fp)
        inst = plan.instances[id(o)]
        if isinstance(o, _Leaf):
            tail = budgets.trunc / (n_objects * inst * 2)
            pmf = discretize_loss(o.loss, meshes[o.group], tail, max_buckets=max_buckets, native=backend.native)
            results[id(o)] = pmf
            V += inst * pmf.coupling_range**2
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
                        raise ValueError(
                            f"re-discretisation needs {size} buckets at mesh {h:.3g} (node {o.label}), more than "
                            f"max_buckets={max_buckets}; increase eps_error or max_buckets"
                        )
                    rd = rediscretize(pmf, h, dtype=pmf.probs.dtype if pmf.probs.dtype == np.longdouble else np.float64,
                                      native=backend.native)
                    redisc[key] = rd
                rd = redisc[key]
                copies = inst * m
                V += copies * rd.coupling_range**2
                bias += copies * rd.bias
                tv_fp += copies * rd.tv
                pmf = rd
            inputs.append((pmf, m))
        _check_tv(budgets, tv_trunc, tv_wrap, tv_fp)  # re-discretisation charges, before the FFT
        out, info = _run_node(o, inputs, inst, budgets, n_objects, backend, max_buckets, n_nodes=plan.n_nodes)
        results[id(o)] = out
        tv_wrap += inst * info["wrap"]
        tv_fp += inst * info["fp"]
        stages.append(StageInfo(o.label, sum(c.count * m for c, m in o.children), h,
                                (float(out.offset), float(out.offset + h * (out.probs.size - 1))),
                                info["N"], inst, inst * info["wrap"], inst * info["fp"], 0.0,
                                "longdouble" if info["dtype"] is np.longdouble else "float64"))
    final = results[id(plan.root)]
    final = GridPMF(np.asarray(final.probs, dtype=np.float64), float(final.offset), final.mesh)
    # The Azuma failure probability is the planned share (deterministic: the eps term then does
    # not depend on backend-level noise in the other charges); only when the measured charges
    # overrun their shares does it take what they leave of the budget.
    tv = tv_trunc + tv_wrap + tv_fp
    _check_tv(budgets, tv_trunc, tv_wrap, tv_fp)
    eta = min(budgets.eta, budgets.delta - tv)
    azuma = math.sqrt(V / 2 * math.log(2.0 / eta))
    eps_spent = azuma + bias
    delta_spent = min(budgets.delta, (eta + tv) * (1 + 4 * _U64))
    cert = {"eta": eta, "azuma": azuma, "variance_proxy": V, "bias": bias,
            "truncation": tv_trunc, "wrap": tv_wrap, "roundoff": tv_fp}
    return final, eps_spent, delta_spent, stages, cert


# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------
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
    """Per direction, the list of (loss, count) with identical losses merged."""
    dirs = {}
    symmetric = True
    for mech, c in events:
        losses = mech.privacy_losses()
        if losses["add"] is not losses["remove"]:
            symmetric = False
    names = ("remove",) if symmetric else ("remove", "add")
    for d in names:
        acc = {}
        for mech, c in events:
            loss = mech.privacy_losses()[d]
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
    # auto: the cheapest predicted plan among those that can win.  Planning costs about a
    # millisecond per candidate, so arities below 8 (many nodes, ~0.35 ms each) are left out,
    # and one grid (glw) is only a candidate for small counts.
    kmax = max(c for _, c in parts)
    chains = [("glw", None)] if kmax <= 256 else []
    chains += [("two_stage", None)] + [("recursive", a) for a in (8, 16, 32, 64)]
    return chains, merges


def _chain_signature(count, method, arity):
    """Shape of the chain tree for ``count`` (multiplicities and sharing, no losses)."""
    top, _ = _chain(None, count, method, arity, iter(range(1, 1 << 30)))
    ids = {}

    def shape(o):
        if isinstance(o, _Leaf):
            return "L"
        if id(o) not in ids:
            ids[id(o)] = (len(ids), tuple((shape(c), m) for c, m in o.children))
        return ids[id(o)]

    return tuple((shape(o), m) for o, m in top if m > 0)


_MAX_PLAN_TRIES = 4  # plans tried in order of predicted cost when one is refused for its delta charges
_PRODUCT_LIMIT = 256  # candidate plans x parts above which chain and grouping are searched in turn


def _choose_plan(parts, method, arity, eps_az, log_term, budgets, merge="any"):
    """Cheapest predicted plan: the full product of candidates for small problems,
    else coordinate search (chain, then grouping, then chain again).  ``merge``: only this
    grouping (a block size or ``None``) instead of every candidate grouping."""
    chains, merges = _candidates(method, parts, arity)
    if merge != "any":
        merges = [merge]
    memo = {}
    wcache = {}
    # chains that build the same tree for every count present are one candidate
    counts = sorted({c for _, c in parts})
    sig = {ch: tuple(_chain_signature(c, ch[0], ch[1]) for c in counts) for ch in chains}
    chains = [ch for i, ch in enumerate(chains) if sig[ch] not in {sig[x] for x in chains[:i]}]

    def evaluate(chain, merge):
        key = (chain, merge)
        if key not in memo:
            plan = _build_plan(parts, chain[0], chain[1], merge)
            n_obj = plan.n_nodes + plan.n_leaves
            meshes, cost, _ = _predict(plan, eps_az, log_term, budgets.wrap / n_obj, budgets.trunc / n_obj,
                                       wcache, budgets)
            memo[key] = (cost, plan, meshes)
        return memo[key]

    if len(chains) * len(merges) * len(parts) <= _PRODUCT_LIMIT:
        for c in chains:
            for m in merges:
                evaluate(c, m)
    else:
        # rank the chains on an evenly spaced sample of the parts, then try every grouping
        # for the best chain on all parts (planning stays linear in the number of parts)
        if len(chains) > 1:
            # by value, never by id(): the sample (hence the chosen chain) must not depend on memory addresses
            order = sorted(range(len(parts)), key=lambda i: (parts[i][1], parts[i][0].mean(), parts[i][0].std(), i))
            sample = [parts[order[j * (len(parts) - 1) // 15]] for j in range(16)]
            sm = [m for m in merges if m is None or m < len(sample)]
            m0 = min(sm[1:], key=lambda b: abs(b - 4)) if len(sm) > 1 else None
            costs = []
            for c in chains:
                plan = _build_plan(sample, c[0], c[1], m0)
                n_obj = plan.n_nodes + plan.n_leaves
                costs.append(_predict(plan, eps_az, log_term, budgets.wrap / n_obj, budgets.trunc / n_obj, wcache,
                                      budgets)[1])
            c_best = chains[int(np.argmin(costs))]
        else:
            c_best = chains[0]
        # block sizes in increasing order until the predicted cost rises (it is unimodal in
        # practice); the single root only while it can compete
        if len(parts) <= 64 and None in merges:
            evaluate(c_best, None)
        prev = math.inf
        for m in sorted(b for b in merges if b is not None):
            c = evaluate(c_best, m)[0]
            if c > prev:
                break
            prev = c
    return sorted(memo.values(), key=lambda t: t[0])


def compose(mechanism, count: int | None = None, *, eps_error: float = 0.1, delta_error: float = 1e-10,
            method: str = "auto", backend: str | None = None, arity: int | None = None,
            max_buckets: int = DEFAULT_MAX_BUCKETS) -> PrivacyLossDistribution:
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
    method : {"auto", "glw", "two_stage", "recursive"}
        ``glw``: one fine grid (Gopi-Lee-Wutschitz); ``two_stage``: Algorithm 2;
        ``recursive``: Algorithm 3 for any ``k`` (``arity`` chooses the branching;
        default: the cheapest of several); ``auto``: the cheapest predicted plan.
    backend : {"native", "numpy"}, optional
        FFT backend (default: :func:`fastpld.get_backend`).
    arity : int, optional
        Branching factor of the recursive method.
    max_buckets : int
        Refuse (``ValueError``) before allocating an FFT or a discretisation
        larger than this.

    Returns
    -------
    PrivacyLossDistribution
        Query with ``delta(eps)`` and ``epsilon(delta)``; both return
        ``Bounds(lower, estimate, upper)``.
    """
    events = _normalise_events(mechanism, count)
    eps_err = V.eps_error(eps_error)
    delta_err = V.delta_error(delta_error)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if arity is not None:
        arity = V.positive_int("arity", arity)
        if arity < 2:
            raise ValueError(f"arity must be >= 2, got {arity}")
        if method not in ("recursive", "auto"):
            raise ValueError("arity applies to method='recursive' only")
    max_buckets = V.positive_int("max_buckets", max_buckets)
    be = _fft.resolve(backend)

    budgets = _Budgets(
        eps=eps_err, delta=delta_err, eta=_SHARE_ETA * delta_err, trunc=_SHARE_TRUNC * delta_err,
        wrap=_SHARE_WRAP * delta_err, fp=_SHARE_FP * delta_err,
    )
    log_term = math.log(2.0 / budgets.eta)
    eps_az = eps_err * (1 - _EPS_RESERVE)
    directions = {}
    reuse = None  # chain and grouping chosen for the first direction of an auto composition

    def run(ranked):
        # the cheapest predicted plan first; if its measured round-off/wrap charges do not fit
        # delta_error (the prediction cannot see, e.g., the spectral peaks of lattice PMFs),
        # the next ones, so that the answer is the fastest plan that certifies
        first_error = None
        for cost, plan, meshes in ranked[:_MAX_PLAN_TRIES]:
            try:
                final, eps_spent, delta_spent, stages, cert = _execute(plan, meshes, budgets, be, max_buckets)
                if eps_spent > eps_err:
                    raise _BudgetError(
                        f"the certified eps error {eps_spent:.4g} exceeds eps_error={eps_err:.4g} (round-off and "
                        f"truncation left delta {cert['eta']:.3g} for the discretisation term; mean-correction "
                        f"bias {cert['bias']:.3g}); increase eps_error or delta_error"
                    )
                return plan, final, eps_spent, delta_spent, stages, cert
            except _BudgetError as exc:
                first_error = first_error or exc
        raise first_error

    for name, parts in _direction_parts(events).items():
        p_inf_log = sum(c * math.log1p(-loss.p_inf) for loss, c in parts)
        p_inf = -math.expm1(p_inf_log)
        out = None
        if reuse is not None:
            # the add and remove losses of one mechanism have the same shape of plan: predict only
            # the first direction's chain here (its meshes are still predicted for this loss), and
            # rank every candidate only if that plan is refused
            try:
                out = run(_choose_plan(parts, reuse[0], reuse[1], eps_az, log_term, budgets, merge=reuse[2]))
            except _BudgetError:
                out = None
        if out is None:
            out = run(_choose_plan(parts, method, arity, eps_az, log_term, budgets))
        plan, final, eps_spent, delta_spent, stages, cert = out
        if method == "auto" and arity is None and reuse is None:
            # (heterogeneous too: the directions of the same mechanisms have the same shape of plan)
            reuse = (plan.method, plan.params[0].get("arity"), plan.params[0].get("merge"))
        method_name = plan.method if plan.method != "recursive" else f"recursive(arity={plan.params[0].get('arity')})"
        if plan.params[0].get("merge"):
            method_name += f"+blocks({plan.params[0]['merge']})"
        directions[name] = DirectionResult(final, p_inf, eps_spent, delta_spent, tuple(stages), cert, method_name)
    return PrivacyLossDistribution(directions, eps_err, delta_err, tuple(events), be.name)
