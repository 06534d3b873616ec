"""The planner's cost model: meshes per mesh group and the predicted time of a plan.

:func:`_predict` shares the eps budget of the discretisation term among the mesh groups so that the
predicted work is smallest, and predicts each step's size, precision and time (microseconds, a
model fitted on native runs: docs/performance.md, "Planner's time model").  Planning only.
"""
from __future__ import annotations

import math

import numpy as np

from .plan import _Leaf
from .precision import (_dft_leaves, _has_atoms, _predicted_fp_dft, _predicted_fp_plain, _predicted_fp_series,
                        _predicted_precision)
from .roundoff import _U64, _ULD
from .series import _SERIES_R
from .windows import _grid_stack, _mixed_node_windows, _single_windows, _tightened_grid_stack


_LEAF_COST = 24.0  # a bucketed CDF point costs about this many FFT points (mesh shape weights)
# Time model of _predict, microseconds: fixed costs per node and leaf and costs per point, fitted on
# native runs (the fits, their workloads and dates: docs/performance.md, "The planner's time model")
_T_NODE = 300.0
_T_NODE_LD = 700.0  # extra fixed cost of a long double node (series and kernels in long double)
_T_LEAF = 500.0
_T_LEAF_POINT = 0.3
_T_POINT_LD = 0.09  # per point of a long double node, per child FFT, at log2 N = 12
_T_POINT_64 = 0.022
# Heterogeneous plans (more than two distinct parts: blocks of many children with small powers)
# mostly run direct-power float64 nodes, whose cost the terms above overstate and misshape: fitted
# as a fixed cost, a cost per point of the children (fold and the window's log-MGF sums) and per FFT point
_T_NODE_DIRECT = 270.0
_T_CHILD_POINT = 0.010
_T_POINT_DIRECT = 0.0051
# and their leaves: the compiled subsampled-Gaussian leaf (coarse tails), and the others
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
    """:func:`_predict` (under its ``errstate``)."""
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
    height = {}  # leaves 0, nodes 1 + their highest child (for _mixed_node_windows)
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
    # (heterogeneous plans: their blocks sum many truncated leaves, see _tightened_grid_stack)
    agg_stack = _tightened_grid_stack(stack, plan, wcache) if plan.n_parts > 2 else stack
    windows = _mixed_node_windows(plan, single, keys, height, wrap_tail, agg_stack, native)
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
            if _predicted_fp_plain(sk[0], sk[1], 13, _U64) > pw_allow:
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
            if _predicted_fp_plain(st[0], st[1], lg) > 0.25 * allowance:  # (_predicted_precision's test for the atoms)
                pk = (st, lg, _has_atoms(o))
            if len(pk) == 3 and _dft_leaves(o, sizes):
                pk = pk + (True,)
            r = pp_memo.get(pk)
            if r is None:
                inst, msum, mmax, nk = st
                est64, est_ser, ld, mixed = _predicted_precision(inst, msum, mmax, lg, o, allowance, node_allowance)
                if ld and len(pk) == 4:  # lattice leaves through direct DFTs (sections 3e-3f of docs/roundoff.md)
                    fp_add = _predicted_fp_dft(inst, msum, _ULD, 2.0 ** lg, budgets.delta, mmax)
                elif ld:
                    fp_add = (_predicted_fp_series(inst, msum, lg, mmax, False, _ULD)
                              if est_ser < est64 else _predicted_fp_plain(inst, msum, lg, _ULD))
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
                                           budgets.fp / max(plan.n_nodes, 1), _U64)
    return _point_cost(len(o.children), ld, mixed) / _T_POINT_64
