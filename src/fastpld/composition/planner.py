"""The plan search: candidate plans for a composition and the cheapest predicted ones, ranked.

Candidates are a chain shape per part (``glw``, ``two_stage``, ``recursive`` with an arity) and a grouping
of distinct parts into blocks; each is built (:mod:`.plan`) and predicted (:mod:`.cost`).  Small problems
try every combination, large ones search chain and grouping in turn.  :func:`fastpld.composition.api.compose`
executes the ranked plans in order until one certifies.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _fft
from ..mechanisms import DiscreteLoss, GaussianLoss, LaplaceLoss
from .cost import _predict
from .grids import _S_GRID, _cumulant_grids
from .plan import _Leaf, _Node, _build_plan, _chain_signature, _merge_order
from .windows import _grid_stack


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
    # auto: the cheapest predicted plan among those that can win.  Every candidate costs planning
    # time, so arities below 16 (many nodes, each with a fixed cost; never the cheapest in the paper's
    # workloads since the series) are left out.
    # Since the low-frequency series (_series_spectrum), large powers stay in float64, so one
    # grid (glw) is a candidate up to 4096 copies and wide arities (256, 1024) are candidates
    # (faster at k = 2^10 for the subsampled Gaussian and Laplace: docs/performance.md).
    kmax = max(c for _, c in parts)
    chains = [("glw", None)] if kmax <= 4096 else []
    # (8192: where delta_error is near the round-off floor, fewer bottom instances are what certifies,
    # e.g. Laplace at 2^30 and delta_error 1e-10: docs/performance.md)
    chains += [("two_stage", None)] + [("recursive", a) for a in (16, 32, 64, 256, 1024, 8192) if a < kmax or a <= 64]
    return chains, merges


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
    _cumulant_grids([loss for loss, _ in parts], native)  # every part's grids, in one pass where possible
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
        # the dearest to predict, and the cost is only roughly unimodal in the
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
                q20 = np.min((st[1][[st[0][id(loss)] for loss, _ in parts]] + 20.0) / _S_GRID, axis=1).tolist()
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
        # (the predicted cost is unimodal in the block size in practice; an evaluation of a plan of
        # many parts is dear, so the search starts where the optimum usually is)
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
