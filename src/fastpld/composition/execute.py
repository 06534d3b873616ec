"""Execution of a plan for one direction, and the certificate it returns.

Leaves first, then the nodes in plan order; every step adds its charges (truncation, wrap-around,
round-off, the coupling ranges of the discretisations) and the plan is stopped as soon as they
cannot fit the budget.  See the package docstring for the certificate.
"""
from __future__ import annotations

import math

import numpy as np

from .._limits import BucketLimitError
from ..curve import StageInfo
from ..discretize import GridPMF, discretize_loss, rediscretize
from .budget import _EtaError, _check_tv, _coarse_spec, _eta_check, _mixed_azuma
from .node import _run_node
from .plan import _Leaf, _Node
from .roundoff import _U64, _ULD, _rounding_gamma


def _execute(plan, meshes, budgets, backend, max_buckets, eps_limit=None, leaf_fn=None, split_fn=None, position=0):
    """Run a plan for one direction; returns (final GridPMF, eps_spent, delta_spent, stages, cert).

    ``eps_limit``: stop (:class:`_EtaError`) as soon as the measured delta charges make an eps
    term above it certain, instead of running the rest of a plan whose answer would be refused.
    ``leaf_fn(loss, mesh, tail, max_buckets, native, copies=instances)`` and ``split_fn(pmf, mesh, native)`` replace
    Algorithm 1 and the mean-preserving split (the dominance certificate, :mod:`fastpld.dominance`,
    runs the same nodes on its own leaves and re-discretisations; it reads only the delta charges).
    ``position``: how the nodes round their offsets (:func:`fastpld.composition.node._run_node`; the dominance
    chains: up for the dominating one, down for the dominated one).
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
    tv_leaf = 0.0  # (the leaves' share of tv_fp: their mass error bounds, named in a refusal)
    log_mass = 0.0  # (dominated leaves and splits may lose mass: log of the composed total, <= 0)
    log_rel = 0.0  # (dominating ones: relative rounding of their masses, a factor e^log_rel on the curve)
    tv_rel = 0.0  # (... and the same errors as total variation: dominance.result._rel_tv)
    stages = []
    coarse, mixes = (_coarse_spec(plan, budgets) if leaf_fn is None else None), []
    for o in plan.order:
        # refuse as soon as the charges already exceed the budget (before more FFTs)
        _check_tv(budgets, tv_trunc, tv_wrap, tv_fp, tv_leaf)
        inst = plan.instances[id(o)]
        if isinstance(o, _Leaf):
            tail = budgets.trunc / (n_objects * inst * 2)
            if leaf_fn is not None:
                pmf = leaf_fn(o.loss, meshes[o.group], tail, max_buckets, backend.native, copies=inst)
            else:
                pmf = discretize_loss(o.loss, meshes[o.group], tail, max_buckets=max_buckets,
                                      native=backend.native, coarse=coarse)
            results[id(o)] = pmf
            log_mass += inst * math.log(getattr(pmf, "mass", 1.0))
            log_rel += inst * getattr(pmf, "rel", 0.0)
            tv_rel += inst * _rounding_tv(pmf)
            V += inst * pmf.coupling_range**2
            if pmf.mix:
                mixes.append((inst, pmf.coupling_range, pmf.mix))
            bias += inst * pmf.bias
            tv_trunc += inst * pmf.truncated
            tv_fp += inst * pmf.tv
            tv_leaf += inst * pmf.tv
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
                tv_rel += copies * _rounding_tv(rd)
                V += copies * rd.coupling_range**2
                bias += copies * rd.bias
                tv_fp += copies * rd.tv
                pmf = rd
            inputs.append((pmf, m))
        _check_tv(budgets, tv_trunc, tv_wrap, tv_fp, tv_leaf)  # re-discretisation charges, before the FFT
        out, info = _run_node(o, inputs, inst, budgets, n_objects, backend, max_buckets, n_nodes=plan.n_nodes,
                              position=position)
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
        bias += inst * info["pos_err"]  # (the output's offset against the exact sum of its inputs' positions)
        stages.append(StageInfo(o.label, sum(c.count * m for c, m in o.children), h,
                                (float(out.offset), float(out.offset + h * (out.probs.size - 1))),
                                info["N"], inst, inst * info["wrap"], inst * info["fp"], 0.0,
                                "longdouble" if info["dtype"] is np.longdouble else "float64"))
    final = results[id(plan.root)]
    if np.asarray(final.probs).dtype != np.float64:
        tv_fp += _U64  # the cast below rounds every entry (relative u64): TV <= u64 / 2
    final = GridPMF(np.asarray(final.probs, dtype=np.float64), float(final.offset), final.mesh)
    # The Azuma failure probability is the planned share (deterministic: the eps term then does
    # not depend on backend-level noise in the other charges); only when the measured charges
    # overrun their shares does it take what they leave of the budget.
    tv = tv_trunc + tv_wrap + tv_fp
    _check_tv(budgets, tv_trunc, tv_wrap, tv_fp, tv_leaf)
    eta = min(budgets.eta, budgets.delta - tv)
    azuma = math.sqrt(V / 2 * math.log(2.0 / eta)) if not mixes else _mixed_azuma(V, mixes, math.log(2.0 / eta))
    eps_spent = azuma + bias
    delta_spent = min(budgets.delta, (eta + tv) * (1 + 4 * _U64))
    cert = {"eta": eta, "azuma": azuma, "variance_proxy": V, "bias": bias, "log_mass": log_mass, "log_rel": log_rel,
            "tv_rel": tv_rel,
            "truncation": tv_trunc, "wrap": tv_wrap, "roundoff": tv_fp,
            # leaves with coarse tails and what they add to the eps term over all-fine leaves of the same V
            "coarse_leaves": len(mixes), "coarse_tail_eps": azuma - math.sqrt(V / 2 * math.log(2.0 / eta))}
    return final, eps_spent, delta_spent, stages, cert


def _rounding_tv(pmf) -> float:
    """The total variation of a dominating leaf's or split's relative rounding (``rel``: every entry within a factor
    ``e^(+-rel)`` of the exact one): its own bound ``tv_rel`` where it has one (a leaf's: the cells' absolute errors
    summed, docs/dominance.md, "The reversed direction, deferred"), else ``(e^rel - 1)`` times its mass (1 within
    its own total variation: :func:`fastpld.dominance.result._rel_tv` takes the chain's total times ``e^(T + c)``)."""
    tv = getattr(pmf, "tv_rel", None)
    if tv is not None:
        return tv
    return math.expm1(getattr(pmf, "rel", 0.0)) * (1 + 8 * _U64)


def _roundoff_floor(plan):
    """A lower bound on the round-off every execution of ``plan`` charges, whatever its meshes: each
    instance of a node that convolves (not a lone child passed through) charges its normalisation,
    ``gamma_(ceil(log2 N) + 24)`` in its precision (:func:`_node_tv`), at least ``gamma_25`` of long
    double's ``u``.  A ``delta_error`` at or below it is refused without executing the plan."""
    n = sum(plan.instances[id(o)] for o in plan.order
            if isinstance(o, _Node) and not (len(o.children) == 1 and o.children[0][1] == 1))
    return n * _rounding_gamma(25, _ULD)


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
