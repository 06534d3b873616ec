"""The arities of the dominance certificate's plans: for a single part of ``k`` copies, the arity whose recursive plan
does the least work (nodes that convolve, and half a node per re-discretisation), and the larger arities tried in
turn where the nodes' round-off does not fit ``delta_error`` (:func:`fastpld.dominance.planner._compose_arities`).
The choices are pure functions of ``k``, kept as plans are (:func:`fastpld.clear_caches` drops them unless
``keep_plans``)."""
from __future__ import annotations

import functools
import math

from .. import resources

# growth sqrt(64) = 8 per level: every lattice nested in the next; fewer levels than 16 (measured
# 0.6-0.9x its time on subsampled Gaussians, Gaussians, pure DP and heterogeneous plans at rel_error 1e-3)
_DEFAULT_ARITY = 64
_ARITIES = (_DEFAULT_ARITY, 256, 1024, 4096)  # tried in turn when a plan's charges do not fit delta_error


def _arities(dir_parts):
    """The arities :func:`fastpld.dominance.planner._compose_arities` tries in turn, as ``(arity, last)``: the
    default one (:func:`_homogeneous_arity`), then those near ``_ARITIES`` (:func:`_nearby_arity`) above it, each
    found only when the one before has not certified (the searches near 1024 and 4096 copies took 2-3 ms of a new
    count's answer, which the default arity serves but for round-off at the largest counts).  The one near the
    largest of ``_ARITIES``, at least ``0.75 * 4096``, is above every other and the last."""
    a0 = _homogeneous_arity(dir_parts)
    yield a0, False
    seen = {a0}
    for i, a in enumerate(_ARITIES):
        b = _nearby_arity(dir_parts, a)
        if b > a0 and b not in seen:
            seen.add(b)
            yield b, i == len(_ARITIES) - 1


# a single part's arity is chosen in this range (the fewest nodes and re-discretisations): measured faster than 64
# alone on every frontier workload where they differ (k = 100 .. 1e6: 0.66-0.87x the time, fewer carries);
# larger arities make larger first nodes (256: slower at k = 1e5, 1e6, where they save no work and are not chosen);
# up to 320 where they do: k = 1e7 (250: 160 x 250^2) and 3e6 (200), 0.95-1.05x the time of 100 and 50 for subsampled
# Gaussians, Gaussian, 0.2-0.6x for pure and approximate DP (their leaves are a few buckets: a large first node is
# cheap, a level less is not)
_ARITY_RANGE = (40, 320)
# ... and up to this many copies a single node (arity k, no re-discretisation; the least work from 40 copies on
# anyway): at k = 300-500 0.82-0.93x the time of the two levels on the Gaussian and subsampled Gaussians and
# Laplaces, 0.45x on Laplace(3), 0.62x on pure DP; from ~640 copies on its one large node costs about as much as the
# two levels' (0.93-1.07x at k = 640, 0.76-1.33x at k = 1,000 depending on the loss)
_SINGLE_NODE_MAX = 512


def _plan_work(count: int, arity: int) -> float:
    """The work of a single part's recursive plan at ``arity <= count`` (as
    :func:`fastpld.composition.plan._chain` builds it): its nodes that convolve, and half a node per
    re-discretisation (a split and a forward transform).  (Evaluated for every arity of a range at each new count,
    :func:`_least_work`: plain integer steps, no lists.)"""
    a, t = arity, 1
    q, p = count // a, a
    while p <= q:  # (the levels: a^t <= count // a)
        p *= a
        t += 1
    conv, red = t, t - 1  # node_1 .. node_t (node_j on level j - 1's lattice; from node_2 on, re-discretised)
    rem = count
    carry = -1  # the lattice level of the carry so far (a node or a lone child passed on; -1: none yet)
    for j in range(t):
        rem, d = divmod(rem, a)
        lv = j - 1 if j else 0  # (node_j's lattice: the leaf's for j = 0)
        if carry < 0:
            if d == 1:  # (a lone child is passed on)
                carry = lv
            elif d:
                conv += 1
                red += lv != j
                carry = j
        elif d:  # (the carry and d copies of node_j's: a node; a lone carry is passed on)
            conv += 1
            red += (carry != j) + (lv != j)
            carry = j
    # the root (its own lattice): node_t's power and the carry.  (A root passing node_t through is node_t itself,
    # :func:`_plan_at`, but counted as a node and a re-discretisation here: at k = 1e4 arity 100 -- two nodes, 100^2
    # -- took 1.15x the time of 125 -- 125 and 80 copies -- whose work it would otherwise undercut)
    kids = 1 + (carry >= 0)
    red += kids
    conv += not (kids == 1 and rem == 1)
    return conv + 0.5 * red


def _single_count(dir_parts) -> int | None:
    """The number of copies where every direction is a single part of the same count, else ``None``."""
    counts = {int(c) for _, parts in dir_parts for _, c in parts}
    if any(len(parts) != 1 for _, parts in dir_parts) or len(counts) != 1:
        return None
    return next(iter(counts))


def _homogeneous_arity(dir_parts) -> int:
    """The default arity: for directions of a single part, the arity in ``_ARITY_RANGE`` whose plan does the
    least work (:func:`_plan_work`; ties: the nearest to 64), else ``_DEFAULT_ARITY``."""
    k = _single_count(dir_parts)
    return _DEFAULT_ARITY if k is None else _least_work_arity(k)


def _nearby_arity(dir_parts, a: int) -> int:
    """The arity tried in place of ``a`` (one of ``_ARITIES``, when the nodes' round-off needs fewer instances of
    the first node): for directions of a single part of ``k`` copies, the arity within ``_NEAR_RANGE`` of ``a``
    whose plan does the least work (:func:`_plan_work`; ties: the nearest to ``a``), else ``a``.  The first node's
    round-off, which decides the arity here, changes by ~1/arity: a few tens of percent at most, where round
    numbers of copies save whole nodes (k = 1e7: arity 250 composes 250, 250 and 160 copies -- three nodes --
    where 256 takes six and a leaf of 128 copies)."""
    k = _single_count(dir_parts)
    return a if k is None else _least_work_near(k, a)


_NEAR_RANGE = (0.75, 1.25)


def _least_work(k: int, lo: int, hi: int, near: int) -> int:
    """The arity in ``lo..hi`` whose plan for ``k`` copies does the least work (ties: the nearest to ``near``)."""
    return min(range(lo, hi + 1), key=lambda a: (_plan_work(k, a), abs(a - near)))


@functools.lru_cache(maxsize=256)
def _least_work_near(k: int, a: int) -> int:
    lo, hi = math.ceil(_NEAR_RANGE[0] * a), math.floor(_NEAR_RANGE[1] * a)
    if k < hi:  # (k at most a few arities: the arity asked)
        return a
    return _least_work(k, lo, hi, a)


@functools.lru_cache(maxsize=256)
def _least_work_arity(k: int) -> int:
    lo, hi = _ARITY_RANGE
    if k < lo:  # (one node below every arity of the range: the default's plan)
        return _DEFAULT_ARITY
    if k <= _SINGLE_NODE_MAX:  # (one node, the plan's root: _plan_at)
        return k
    return _least_work(k, lo, min(hi, k), _DEFAULT_ARITY)


# (plan choices, as the FFT plans: kept by clear_caches(keep_plans=True), dropped by a full clear)
resources.on_clear(_least_work_arity.cache_clear, plans=True)
resources.on_clear(_least_work_near.cache_clear, plans=True)
