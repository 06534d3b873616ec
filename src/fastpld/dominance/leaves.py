"""The dominance certificate's leaves: a mechanism's privacy loss on a lattice, dominating
(connect-the-dots, :func:`ctd_leaf`) or dominated (merged cells moved down by the balanced split,
:func:`dominated_leaf`), with their quadrature, thin-tail cells and error charges
(``docs/dominance.md``, "The upper (dominating) chain", "The lower (dominated) chain", "Thin tails")."""
from __future__ import annotations

import math
import threading

import numpy as np

from .. import _kernels
from ..composition.roundoff import _dyadic_ratio, _dyadic_sum, _rounded
from ..discretize import GridPMF, truncation_window
from ..mechanisms import ContinuousLoss, DiscreteLoss
from ..samplers import MixtureLoss
from . import splits as _splits
from .ends import _anchor_end, _anchored_shift, _end_shift, _end_tail_at, _exact_end
from .atoms import _atom_places, _check_size, _discrete_leaf, _with_anchor
from .masses import _atom_masses, _cdf_sf
from .rules import _GL5_RULE, _U_STEP, _log_panels, _panels, _rule_error
from .balance import rebalanced
from .splits import _balanced_split, _claimed_mass, _MARGIN, _split_lower

_U = np.finfo(np.float64).eps / 2  # unit roundoff


def _anchor_atom(loss, atoms) -> float:
    """The leaf's lattice point on an atom: the heaviest one in the window (its split is then exact; with the
    planner's meshes, every atom's is), 0 without atoms.  The chains' coarser lattices are anchored at the sum of
    it over the copies (:attr:`fastpld.discretize.GridPMF.anchor`)."""
    return atoms[int(np.argmax(_atom_masses(loss, atoms)[0]))] if atoms else 0.0


def _continuous_grid(loss: ContinuousLoss, h: float, tail: float, max_buckets: int, native: bool,
                     lat: float | None = None):
    """The leaf's lattice (mesh ``h``) over the window, the atoms inside it, the tails cut off, the
    lattice's first point exactly (``lat + i_lo h`` as :func:`fastpld.composition.roundoff._dyadic`'s pair: the
    point each lattice point ``e[j]`` stands for is ``lat + (i_lo + j) h``, its rounding charged by
    :func:`_integrals`), and ``lat`` (:func:`_anchor_atom`, or the one given: :mod:`fastpld.dominance.balance`)."""
    a0, b0 = truncation_window(loss, tail, native)
    atoms = [x for x in loss.atoms if a0 < x <= b0]
    if lat is None:
        lat = _anchor_atom(loss, atoms) if atoms else _anchor_end(loss, a0, b0)
    i_lo = math.floor((a0 - lat) / h)
    i_hi = math.ceil((b0 - lat) / h)
    n = i_hi - i_lo + 1
    _check_size(n, h, a0, b0, max_buckets)
    e = lat + h * np.arange(i_lo, i_hi + 1, dtype=np.float64)
    psg = getattr(loss, "psg_params", None)
    if psg is not None:
        # (the subsampled Gaussian's three evaluations in one call: the same values, a few microseconds less)
        F, S, f = _kernels.psg_eval(np.array([e[0], e[-1]]), *psg)
        out, ends = F[0] + S[1], f
    else:
        out = np.asarray(loss.cdf(e[:1]), dtype=np.float64)[0] + np.asarray(loss.sf(e[-1:]), dtype=np.float64)[0]
        ends = loss.pdf(np.array([e[0], e[-1]]))
    # (the CDF is computed at a point within cdf_shift of the window's end: the mass in between, at
    # most that distance times the density there, is charged too)
    shift = loss.cdf_shift(max(abs(float(e[0])), abs(float(e[-1]))))
    dens = float(np.max(np.asarray(ends, dtype=np.float64)))
    truncated = float(out) * (1 + 8 * loss.cdf_rel_error) + 4 * shift * dens
    return e, atoms, truncated, _dyadic_sum([(1, lat), (i_lo, h)]), lat


def _leaf_data(loss, h: float, tail: float, max_buckets: int, native: bool, memo: dict | None, cells: bool = True,
               lat: float | None = None):
    """:func:`_continuous_grid` and :func:`_integrals` of a leaf: ``(e, atoms, truncated, (starts, sizes), integrals,
    origin, lat)``.  ``memo`` (one composition's, shared
    by its two chains, dropped with it) keeps them for the other chain's leaf of the same loss and mesh.
    ``cells``: the thin tails in cells (:func:`_tail_blocks`), else every lattice interval its own; ``lat``: the
    lattice's anchor where not the default one (:mod:`fastpld.dominance.balance`)."""
    key = ("data", id(loss), float(h), float(tail), cells) + (() if lat is None else (float(lat),))
    hit = _memo_get(memo, key, loss)
    if hit is not None:
        return hit
    if memo is None:
        return _compute_leaf_data(loss, h, tail, max_buckets, native, cells, lat)
    # (the two chains of a direction may ask at once, on two threads -- the dominated chain shared out to the
    # thread whose short chain ended first, while the dominating one still computes this: the second waits for
    # the first's result, not computing it again; measured 1.08x the time at a sampler's numpy leaves otherwise)
    with memo.setdefault(("lock",) + key, threading.Lock()):
        hit = _memo_get(memo, key, loss)
        if hit is None:
            hit = _compute_leaf_data(loss, h, tail, max_buckets, native, cells, lat)
            _memo_put(memo, key, loss, hit)
    return hit


def _compute_leaf_data(loss, h: float, tail: float, max_buckets: int, native: bool, cells: bool,
                       lat: float | None = None):
    e, atoms, truncated, origin, lat = _continuous_grid(loss, h, tail, max_buckets, native, lat)
    if cells:
        starts, sizes = _tail_blocks(loss, e, h)
    else:
        starts, sizes = np.arange(e.size - 1, dtype=np.int64), np.ones(e.size - 1, dtype=np.int64)
    ints = _integrals(loss, e[starts], h * sizes, _negligible(tail, starts.size),
                      anchor=lat if _end_shift(loss, lat) and lat in getattr(loss, "support", ()) else None)
    return e, atoms, truncated, (starts, sizes), _outside_exact(loss, ints, starts, sizes, h, origin), origin, lat


def _outside_exact(loss, ints, starts, sizes, h: float, origin):
    """The cells' integrals ``ints`` with no error bound on the cells that lie beyond an end of the support exactly
    (the end a lattice point: point ``j`` stands for ``origin + j h``; a Laplace loss's lattice starts on its
    heaviest atom, at an end).  Their integrals are 0 and exact, but the rules' position charge at their edge on the
    end (the density next to it times the rounding of a point there, :func:`_integrals`) made them cells of no
    mass with an error: total variation in every copy (1e-15 a copy of a subsampled Laplace's leaf, 7e-11 over its
    70,733 copies).  Where the end is no lattice point, a sliver of the support may lie in such a cell: unchanged."""
    s_lo, s_hi = getattr(loss, "support", (-math.inf, math.inf))
    ends = [(side, x) for side, x in ((0, s_lo), (1, s_hi)) if math.isfinite(x)]
    if not ends or starts.size == 0:
        return ints
    out = None
    for side, x in ends:
        t = _dyadic_ratio(_dyadic_sum([(1, float(x)), (-1, origin)]), h)  # (the end in lattice units, exactly)
        if t is None:
            continue  # (not on a lattice point)
        beyond = (starts >= t) if side == 1 else (starts + sizes <= t)
        if beyond.any():
            out = [np.array(v, dtype=np.float64) for v in ints] if out is None else out
            for k in (1, 3, 5):  # (the error bounds of the three integrals; the integrals are 0 there)
                out[k][beyond & (out[k - 1] == 0)] = 0.0
    return ints if out is None else tuple(out)


def _memo_get(memo: dict | None, key, loss):
    """What ``memo`` keeps under ``key`` for this very ``loss`` (keys hold ``id(loss)``, which a freed loss
    may pass on), or ``None``."""
    hit = memo.get(key) if memo is not None else None
    return hit[1] if hit is not None and hit[0] is loss else None


def _memo_put(memo: dict | None, key, loss, value) -> None:
    if memo is not None:
        memo[key] = (loss, value)


def _leaf_key(kind: str, loss, h: float, tail: float, copies: int | None) -> tuple:
    """``(cells, key)`` of a leaf: thin-tail cells unless it has fewer than ``_CELL_MIN_COPIES`` copies."""
    cells = copies is None or copies >= _CELL_MIN_COPIES
    return cells, (kind, id(loss), float(h), float(tail), cells)


_BLOCK = 32  # lattice intervals per cell where the window's tails are thin (see _tail_blocks)
_BLOCKS = (_BLOCK, 4)  # the cell sizes, largest first (each divides the previous one)
_BLOCK_SHARE = 1e-3  # a thin tail's mass times its cells' width squared, against the fine cells' h^2
# Leaves composed fewer times than this take no cells: a cell's chord moves the curve's far quantiles
# (delta ~1e-9, where its mass lies) by up to its width, to first order, and with few copies nothing
# averages that out (a Gaussian once: epsilon(1e-9) some 30x wider than the fine lattice's, erratic in h)
_CELL_MIN_COPIES = 64


def _tail_blocks(loss, e, h: float):
    """The leaf's cells: ``(starts, sizes)`` in lattice intervals, every interval ``(e_j, e_(j+1)]`` in
    exactly one cell.  Where the mass beyond a stretch of ``M`` intervals (towards the window's nearer
    end, the stretch included) is at most ``_BLOCK_SHARE / M^2``, the stretch is one cell (``M`` in
    ``_BLOCKS``, the largest that fits, stretches aligned on multiples of ``M``); elsewhere each
    interval is its own.  Connect-the-dots (and the dominated leaf's merge) hold on any cells made of
    lattice intervals, and their error is second order: a cell of width ``w`` and mass ``p`` adds
    ``O(p w^2)`` to the composed curves' gap (the chord's gap integrates to at most ``p w^2 / 8`` over
    epsilon), against ``O(h^2)`` for the fine cells; the cells of size ``M`` hold at most
    ``_BLOCK_SHARE / M^2`` of mass on each side, adding at most ``2 _BLOCK_SHARE h^2`` each, while the
    window's thin tails -- most of it for a small sampling rate -- cost a fraction of the quadrature."""
    psg = getattr(loss, "psg_params", None)
    if psg is not None and _kernels.have_leaf() and len(_BLOCKS) == 2:
        # (the subsampled Gaussian's in one compiled pass without the GIL, the same evaluations and comparisons:
        # on two threads the other direction's leaf runs meanwhile; the kernel takes two cell sizes)
        return _kernels._leaf.psg_tail_cells(np.ascontiguousarray(e, dtype=np.float64), float(psg[0]),
                                             float(psg[1]), float(psg[2]), bool(psg[3]), _BLOCK_SHARE,
                                             _BLOCKS[0], _BLOCKS[1])
    return _scan_cells(loss, e)


def _scan_cells(loss, e):
    """:func:`_tail_blocks` by numpy (any loss; the reference of the compiled ``_leaf.psg_tail_cells``)."""
    n = e.size - 1
    size = np.ones(n, dtype=np.int64)  # per interval: the size of its cell
    m0 = _BLOCKS[-1]
    if n // m0 < 3:
        return np.arange(n, dtype=np.int64), size
    # the CDF and survival function at every multiple of the smallest size (the larger ones' edges among them)
    below, above = _cdf_sf(loss, e[np.arange(n // m0 + 1) * m0])
    for M in _BLOCKS:
        nb = n // M
        if nb < 3:
            continue
        # block b is [e[b M], e[(b + 1) M]]; a last partial block stays fine.  The mass beyond it, upwards
        # (sf at its lower edge) and downwards (cdf at its upper edge)
        up = above[np.arange(nb) * (M // m0)]
        down = below[np.arange(1, nb + 1) * (M // m0)]
        tau = _BLOCK_SHARE / M ** 2
        # (the CDF's rounding: its relative error is the loss's cdf_rel_error, far below the margin here)
        coarse = ((up <= tau) | (down <= tau)) & np.isfinite(up) & np.isfinite(down)
        # (a block of M within a larger cell stays in it: sizes only grow from the largest down)
        free = (size[:nb * M].reshape(nb, M) == 1).all(axis=1)
        size[:nb * M][np.repeat(coarse & free, M)] = M
    if (size == 1).all():
        return np.arange(n, dtype=np.int64), size
    # a cell starts where its size's alignment says (every size divides the larger ones): runs of one size are
    # unions of aligned blocks, so each run's cells start at its first interval and every size after it
    edges = np.concatenate([[0], np.flatnonzero(np.diff(size)) + 1, [n]])
    starts = np.concatenate([np.arange(a, b, size[a], dtype=np.int64) for a, b in zip(edges[:-1], edges[1:])])
    return starts, size[starts]


def _negligible(tail: float, cells: int) -> float:
    """A cell's mass error at most this is charged as total variation (not as a relative factor) and
    not refined: all of them add at most ``_NEGLIGIBLE_SHARE`` of the leaf's truncation allowance
    ``tail`` per copy (the thin tails' cells, whose masses are ~1e-8 and errors ~1e-27)."""
    return _NEGLIGIBLE_SHARE * tail / max(cells, 1)


def _both_ends(loss, lo, h, tiny, anchor, both, s_lo, s_hi):
    """:func:`_integrals` where the cells ``both`` hold the whole support, both its ends (a subsampled Laplace's,
    narrower than the mesh): each end's rules bound the density near that end only (reaching the other one from
    its distance, their bound was infinite, and a step was refused), so such a cell is integrated in two halves
    split at the support's midpoint ``m``, one end in each, and their integrals combined: ``a = a1 + a2``,
    ``b = b1 + c b2`` and ``n = n1 + (a2 - c b2)`` with ``c = e^(lo - m)`` (the second half's weights are taken from
    ``m``), the errors added: ``c``'s relative error ``crel`` (``exp`` within an ulp, and ``lo - m`` rounded: ``u |lo - m|``
    in the exponent) times ``c b2``, and ``4 u`` of the terms for the three roundings at most of each combination."""
    with np.errstate(all="ignore"):  # (the cells ``both`` are computed whole here too, to no avail: replaced below)
        out = [np.array(x, dtype=np.float64) for x in _integrals(loss, lo, h, tiny, anchor, whole=False)]
    lb = lo[both]
    hb = h[both] if np.ndim(h) else np.full(both.size, float(h))
    m = 0.5 * (s_lo + s_hi)
    a1, e1a, n1, e1n, b1, e1b = _integrals(loss, lb, m - lb, 0.5 * tiny, anchor, whole=False)
    a2, e2a, _, _, b2, e2b = _integrals(loss, np.full(both.size, m), lb + hb - m, 0.5 * tiny, None, whole=False)
    c = np.exp(lb - m)
    crel = 4 * _U + _U * np.abs(lb - m)
    ce = c * (1 + crel)  # (an upper bound on the exact c)
    out[0][both] = a1 + a2
    out[1][both] = e1a + e2a + 4 * _U * (a1 + a2)
    out[4][both] = b1 + c * b2
    out[5][both] = e1b + ce * e2b + crel * ce * b2 + 4 * _U * (b1 + ce * b2)
    out[2][both] = n1 + (a2 - c * b2)
    out[3][both] = e1n + e2a + ce * e2b + crel * ce * b2 + 4 * _U * (np.abs(n1) + a2 + ce * b2)
    return tuple(out)


def _log_errors(i5, i4, R, rest):
    """The error bounds of the log-distance rules' three integrals ``i5`` (``i4``: the 4-point rule's, or ``None``;
    ``R``: the proved truncation bounds): the rules' truncation (:func:`rules._rule_error`), their sums' rounding
    ``16 u`` and ``rest``, the tail beyond their depth."""
    return tuple(_rule_error(x5, x4, r) + 16 * _U * x5 + rest for x5, x4, r in zip(i5, i4, R))


def _integrals(loss, lo, h, tiny: float = 0.0, anchor: float | None = None, whole: bool = True):
    """Per interval ``(lo_j, lo_j + h]`` of the continuous part: the masses ``int f``,
    ``int (1 - e^(lo_j - y)) f`` and ``int e^(lo_j - y) f`` by 5-point rules, and error
    bounds of each (the truncation error's proved bound for the subsampled Gaussian, the Gaussian, the Laplace and the
    subsampled Laplace, else ten times the 4-point rules' disagreement; plus rounding).  Each interval is
    integrated over its part inside the support (the density need not be smooth across a support
    end), and intervals whose rules' error bounds exceed ``_REFINE_REL`` relative (N's against the
    cell's mass times ``1 - e^-w``: what it moves) are split into
    8, 64, then 512 panels (near a support end the density of a subsampled loss is steep), but for
    those whose mass error is at most ``tiny`` (:func:`_negligible`: charged as total variation).

    The subsampled Gaussian's (``loss.psg_params``) in one compiled call, ``_leaf.psg_integrals`` (C
    ``fpld_psg_integrals``), with this module's constants; the numpy code below is its reference (and that of
    every other loss)."""
    if isinstance(loss, MixtureLoss):
        # (the integrals are linear in the density: each component's on the same intervals, weighted as its density
        # is -- each with the rules at its own support's ends, which lie inside the mixture's support, where its
        # density is as steep as at an end: a truncated Poisson batch of a Laplace mechanism missed 8.4e-7 of the
        # window's mass there, and its leaf refused)
        out = None
        for part, w in zip(loss.parts, loss.w):
            if not w > 0:
                continue
            r = _integrals(part, lo, h, tiny / w)
            out = [w * x for x in r] if out is None else [o + w * x for o, x in zip(out, r)]
        a, a_err, n, n_err, b, b_err = out
        return (a, a_err + 4 * _U * a, n, n_err + 4 * _U * np.abs(n), b, b_err + 4 * _U * b)
    s_lo, s_hi = getattr(loss, "support", (-math.inf, math.inf))
    psg = getattr(loss, "psg_params", None)
    if (psg is not None and _kernels._core is not None and _kernels._leaf is not None
            and hasattr(_kernels._leaf, "psg_integrals")):
        # (the subsampled Gaussian's in one compiled call that releases the GIL -- the numpy glue below held it,
        # ~0.2 ms a call, while the other direction's leaf waited -- with the same rules, branches and
        # comparisons: the same values up to round-off, a refined cell's panels summed in order and the depth
        # ladder's exp and log libm's)
        return _kernels._leaf.psg_integrals(
            np.ascontiguousarray(lo, dtype=np.float64),
            float(h) if np.ndim(h) == 0 else np.ascontiguousarray(h, dtype=np.float64), float(tiny),
            float(s_lo), float(s_hi), float(psg[0]), float(psg[1]), float(psg[2]), bool(psg[3]),
            float(loss.cdf_rel_error), float(_NEAR_END), _REFINE_REL, _U_STEP, _U_STEP_NEAR, _U_DEPTH, _U_REFINE,
            _REL_CAP, _REFINE_MAX_PANELS, *_GL5_RULE, math.nan if anchor is None else float(anchor))
    if whole and math.isfinite(s_lo) and math.isfinite(s_hi):
        # (within the lattice points' rounding of the ends: a cell ending a few ulps short of the upper end is still
        # the cell that holds the support, the sliver beyond in the next one)
        tol = 8 * _U * (abs(s_lo) + abs(s_hi) + float(np.max(h)))
        both = np.flatnonzero((lo <= s_lo + tol) & (lo + h >= s_hi - tol))
        if both.size:
            return _both_ends(loss, lo, h, tiny, anchor, both, s_lo, s_hi)
    c0 = np.clip(lo, s_lo, s_hi) - lo
    c1 = np.clip(lo + h, s_lo, s_hi) - lo
    c1 = np.maximum(c1, c0)
    a, a_err, n, n_err, b, b_err, ea, en, eb = _panels(loss, lo, c0, c1)
    # (ea, en, eb: the density's rounding at the chosen rules' nodes, added to the errors at the end: refining does
    # not reduce it, so it takes no part in the choices)
    # (N's error moves n_err / (1 - e^-w) of the cell's mass up by one cell (ctd_leaf raises N by it):
    # it is measured against the cell's mass, not against N, which is small where the mass sits near lo)
    nscale = -np.expm1(-(h if np.ndim(h) else np.full(lo.size, h)))
    # an interval near a support end (within _NEAR_END meshes) whose rules disagree: the integral in
    # u = log(distance to the end), where the density of a subsampled loss is smooth (f(y) dy =
    # f(end +- e^u) e^u du), on panels of width _U_STEP from the interval's far edge to its near edge,
    # or, for one holding the end, down to e^-D of its distance, D the least of 5, 10, .., 45 where
    # the CDF (or survival function) there is below 1e-18 of the interval's mass (what lies closer is
    # bounded by it and charged).  An interval holding the end or within one mesh of it takes these
    # rules; one farther away takes them where their error bound is the smaller, else it is refined below
    done = np.zeros(lo.size, dtype=bool)
    endrules = np.zeros(lo.size, dtype=bool)
    for side in (0, 1):
        s_end = s_lo if side == 0 else s_hi
        if not math.isfinite(s_end):
            continue  # (no end on this side)
        near_end = (lo - _NEAR_END * h < s_lo) if side == 0 else (lo + (_NEAR_END + 1) * h > s_hi)
        at_end = (lo - h < s_lo) if side == 0 else (lo + 2 * h > s_hi)  # (always: the first rules fail there)
        # (but not a cell holding the other end and not this one, whose own side's rules bound it: on a support two
        # cells wide the first cell is also within a mesh of the upper end, and these rules, reaching the lower end
        # from the upper one's distance, bound it by infinity -- a subsampled Laplace step refused.  A cell holding
        # both ends is integrated in halves, _both_ends)
        holds_lo, holds_hi = lo <= s_lo, lo + h >= s_hi
        at_end &= ~((holds_hi & ~holds_lo) if side == 0 else (holds_lo & ~holds_hi))
        fails = (a_err > _REFINE_REL * a) | (n_err > _REFINE_REL * a * nscale) | (b_err > _REFINE_REL * b)
        bad = np.flatnonzero(near_end & (c1 > c0) & (at_end | (a_err > tiny)) & fails)
        if bad.size == 0:
            continue
        # offsets (from lo) of the end, and the distances of the interval's far and near edges from it
        end = (s_lo - lo[bad]) if side == 0 else (s_hi - lo[bad])
        d_far = (c1[bad] - end) if side == 0 else (end - c0[bad])
        d_near = np.maximum((c0[bad] - end) if side == 0 else (end - c1[bad]), 0.0)
        with np.errstate(divide="ignore"):
            u_near = np.log(d_near / d_far)  # (-inf where the end is inside)
        # the depth D: the CDF beyond e^-D of the far edge's distance against the interval's mass (the
        # first rules' estimate; D = 45 where that is not positive)
        deep = ~(u_near > -_U_DEPTH)
        depth = np.full(bad.size, _U_DEPTH)
        if deep.any():
            ladder = np.arange(5.0, _U_DEPTH + 1, 5.0)
            dist = d_far[deep] * np.exp(-ladder[:, None])
            with np.errstate(all="ignore"):
                tl = _end_tail_at(loss, s_end, dist.ravel(), side)[0].reshape(dist.shape)
            small = (tl <= 1e-18 * a[bad][deep][None, :]) & (a[bad][deep] > 0)[None, :]
            first = np.where(small.any(axis=0), np.argmax(small, axis=0), ladder.size - 1)
            depth[deep] = ladder[first]
        # panels [max(-(k + 1) step, ulo), -k step], k = 0, 1, .., down to ulo (relative to log d_far)
        ulo = np.where(deep, -depth, u_near)
        # (the intervals clear of the end on panels a quarter as wide: N's rules then agree to ~1e-15, and
        # their few panels cost less than the refinement below)
        step = np.where(deep, _U_STEP, _U_STEP_NEAR)
        (a5, n5, b5), (a4, n4, b4), (ea5, en5, eb5), (Ra, Rn, Rb) = _log_panels(loss, lo[bad], end, d_far, ulo,
                                                                              side, step)
        # the tail beyond the depth, at the distance de = d_far e^-D.  In a cell holding the end (at exact
        # distances, _exact_end) it is the cell's mass between the end and de, at offsets within de of the end's:
        # added to the integrals (ra, rn, rb; the weights at the end's offset move by at most de over it), its
        # error bounds (the tail's relative error, the weights' spread, their rounding) in rest; elsewhere
        # charged to every rule (it may lie beyond the cell)
        de = d_far * np.exp(-depth)
        with np.errstate(all="ignore"):
            tail_m, tail_rel = _end_tail_at(loss, s_end, de, side)
        m = np.where(deep, np.maximum(tail_m, 0.0), 0.0)
        holds = deep & (d_near == 0.0) & _exact_end(loss, side)
        ra = np.where(holds, m, 0.0)
        rn = ra * -np.expm1(-end)
        rb = ra * np.exp(-end)
        rest = np.where(holds, m * (tail_rel + 8 * _U + 2 * de), m * (1 + 1e-6))
        ae, ne, be = _log_errors((a5, n5, b5), (a4, n4, b4), (Ra, Rn, Rb), rest)
        # (a density steep in u leaves the rules apart: a subsampled Gaussian's is a Gaussian of width
        # ~1/sigma there, and at sigma 2 the rules of the cell holding the end disagreed by 2.7e-9 of its mass,
        # charged as total variation in every copy (2.3e-8 at q = 1e-4 x 1e6); those whose mass error would be
        # charged so (above _REL_CAP relative, see ctd_leaf, and not negligible) are integrated again on panels
        # a quarter as wide, twice at most, keeping the smaller bound)
        # (only where the rules' truncation is most of the bound, and not again where a refinement did not cut
        # it 4x: a density that is not smooth in u, the subsampled Laplace's, gains nothing -- 1.3x its time)
        step = np.array(step, dtype=np.float64)
        # (the rules' truncation bound: refined where it is most of an error that would be total variation -- left
        # there, a subsampled Gaussian's add leaf next to its end charged 2.7e-12 a copy at PSG(1.5, 0.02) x 50)
        dis = _rule_error(a5, a4, Ra)
        live = np.ones(bad.size, dtype=bool)
        for _ in range(_U_REFINE):
            worse = np.flatnonzero(live & (ae > _REL_CAP * (a5 + ra)) & (ae > tiny) & (dis > 0.5 * ae))
            if worse.size == 0 or float(np.sum(np.ceil(-ulo[worse] / (step[worse] / 4)))) > _REFINE_MAX_PANELS:
                break
            step[worse] /= 4
            (a5w, n5w, b5w), (a4w, n4w, b4w), (eaw, enw, ebw), (Raw, Rnw, Rbw) = _log_panels(
                loss, lo[bad][worse], end[worse], d_far[worse], ulo[worse], side, step[worse])
            aew, new, bew = _log_errors((a5w, n5w, b5w), (a4w, n4w, b4w), (Raw, Rnw, Rbw), rest[worse])
            better = aew + new + bew < ae[worse] + ne[worse] + be[worse]
            live[worse[~(aew < 0.25 * ae[worse])]] = False
            w = worse[better]
            a5[w], ae[w], n5[w], ne[w], b5[w], be[w] = (a5w[better], aew[better], n5w[better], new[better],
                                                      b5w[better], bew[better])
            ea5[w], en5[w], eb5[w] = eaw[better], enw[better], ebw[better]
            dis[w] = _rule_error(a5w, a4w, Raw)[better]
        # (those holding the end or within one mesh of it always; the others where the bound is smaller)
        close = at_end[bad]
        take = close | (ae + ne + be < a_err[bad] + n_err[bad] + b_err[bad])
        sel = bad[take]
        a[sel], a_err[sel] = (a5 + ra)[take], ae[take]
        n[sel], n_err[sel] = (n5 + rn)[take], ne[take]
        b[sel], b_err[sel] = (b5 + rb)[take], be[take]
        ea[sel], en[sel], eb[sel] = ea5[take], en5[take], eb5[take]
        done[sel] = close[take] | ((ae <= _REFINE_REL * (a5 + ra)) & (ne <= _REFINE_REL * (a5 + ra) * nscale[bad])
                                   & (be <= _REFINE_REL * (b5 + rb)))[take]
        # (rules at exact distances from the float end log1p(-q), within 8 u |s| of the exact one (4 ulp): the cell's
        # mass moves by at most 16 u |s|, which moves N and B by at most that times B; no position charge at the end)
        held = bad[take & close & holds]
        n_err[held] += 16 * _U * abs(s_end) * b[held]
        b_err[held] += 16 * _U * abs(s_end) * b[held]
        endrules[held] = True
    for level in range(1, 4):
        bad = np.flatnonzero(~done & (a_err > tiny)
                             & ((a_err > _REFINE_REL * a) | (n_err > _REFINE_REL * a * nscale) | (b_err > _REFINE_REL * b)))
        if bad.size == 0:
            break
        m = 8 ** level
        if bad.size * m > _REFINE_MAX_PANELS:
            break  # (bounded work and memory: the coarser rules' error bounds stand, charged as they are)
        k = np.arange(m + 1) / m
        edges = c0[bad, None] + (c1[bad] - c0[bad])[:, None] * k[None, :]
        sub = _panels(loss, np.repeat(lo[bad], m), edges[:, :-1].ravel(), edges[:, 1:].ravel())
        for arr, val in zip((a, a_err, n, n_err, b, b_err, ea, en, eb), sub):
            arr[bad] = val.reshape(-1, m).sum(axis=1)
        for arr, val in zip((ea, en, eb), sub[0:6:2]):  # (the m panels' values summed: m u of their sizes)
            arr[bad] += m * _U * np.abs(val).reshape(-1, m).sum(axis=1)
    a_err, n_err, b_err = a_err + ea, n_err + en, b_err + eb
    # The rules integrate over [lo + c0, lo + c1] in floating point: each end lies within 4 u (|y| + w)
    # of the lattice point it stands for (lo + w rounded, the lattice's own rounding), which moves
    # up to f(end) times that between neighbouring cells -- relative u |y| / w of a small cell's mass,
    # 1e-13 and more far from zero, beyond the rules' 16 u.  Charged to all three integrals (their
    # integrands are at most f), with the density at every cell end (one evaluation each)
    ends = np.append(lo, lo[-1] + (h if np.ndim(h) == 0 else h[-1])) if lo.size else lo
    at_anchor = None
    if lo.size and anchor is not None:
        # (a lattice anchored at the end log(1 - q) has a point exactly there: the cell end standing for it is put on
        # it -- the sum lo + h may round off it -- and charged no position: the computed model, whose end that is,
        # has no mass beyond it; the exact loss's shift from the model there is charged by the leaf, _end_shift)
        w_first, w_last = (h, h) if np.ndim(h) == 0 else (h[0], h[-1])
        if abs(ends[0] - anchor) <= (4 * _U) * (abs(anchor) + w_first):
            at_anchor = 0
        elif abs(ends[-1] - anchor) <= (4 * _U) * (abs(anchor) + w_last):
            at_anchor = ends.size - 1
        else:
            # (an end integrated at exact distances from it inside the window: a subsampled Laplace's heaviest atom,
            # which the window holds, SubsampledLoss.from_end -- the same, its neighbour beyond the end empty; charged
            # there, the density of the near-atom next to it times the point's rounding was 1.6e-10 of the cell's
            # mass.  The subsampled Gaussian's end, anchored, is always the first or last point)
            near = np.flatnonzero(np.abs(ends - anchor) <= (4 * _U) * (abs(anchor) + np.max(h)))
            if near.size == 1 and anchor in (s_lo, s_hi) and _exact_end(loss, 0 if anchor == s_lo else 1):
                at_anchor = int(near[0])
        if at_anchor is not None:
            ends[at_anchor] = anchor
    if lo.size:
        with np.errstate(all="ignore"):
            f_end = np.asarray(loss.pdf(ends), dtype=np.float64)
        delta = (4 * _U) * (np.abs(ends) + np.max(h))
        pos = np.abs(f_end) * delta
        odd = np.flatnonzero(~np.isfinite(pos))
        if odd.size:
            # (a density not finite at an end, e.g. singular at a support end: the mass within delta of
            # it, from the CDF or the survival function, whichever is smaller, and their rounding)
            F1, S1 = _cdf_sf(loss, ends[odd] + delta[odd])
            F0, S0 = _cdf_sf(loss, ends[odd] - delta[odd])
            use_f = F1 <= S0
            pos[odd] = (np.where(use_f, np.abs(F1 - F0), np.abs(S0 - S1))
                        + 16 * loss.cdf_rel_error * np.where(use_f, np.abs(F1), np.abs(S0)) + 1e-300)
        if at_anchor is not None:
            pos[at_anchor] = 0.0
        move = pos[:-1] + pos[1:]
        # (likewise a support end inside the window, where the rules start or stop: the density next to
        # it, inside; below or above it there is no mass)
        for side, s_end in ((0, s_lo), (1, s_hi)):
            if not (math.isfinite(s_end) and ends[0] < s_end < ends[-1]):
                continue
            # (the cell whose rules start there, or stop there: an upper end on a lattice point -- the planner's
            # meshes put a Laplace loss's atoms at its ends on them -- ends the cell below it, not the empty one
            # above it, whose zero mass made the charge total variation in every copy)
            j = int(np.clip(np.searchsorted(ends, s_end, side="right" if side == 0 else "left") - 1, 0, lo.size - 1))
            if endrules[j]:
                # (its rules at exact distances from the end and the mass closer than their depth added from the
                # tail there: nothing in the cell moves with the positions; near a spiky end -- a small sigma -- the
                # density next to it, times d_s, is no bound on the mass within d_s, which grows faster than d_s)
                continue
            d_s = (4 * _U) * (abs(s_end) + float(np.max(h)))
            with np.errstate(all="ignore"):
                f_s = float(np.asarray(loss.pdf(np.array([math.nextafter(s_end, math.inf if side == 0
                                                                          else -math.inf)])))[0])
            if not math.isfinite(f_s):
                F, S = _cdf_sf(loss, np.array([s_end + d_s if side == 0 else s_end - d_s]))
                f_s, d_s = 1.0, float(F[0] if side == 0 else S[0]) * (1 + 16 * loss.cdf_rel_error) + 1e-300
            move[j] += abs(f_s) * d_s
        move = move * (1 + 1e-6)
        a_err = a_err + move
        n_err = n_err + move
        b_err = b_err + move
    return a, a_err, n, n_err, b, b_err


def _check_window(total, truncated, err, loss=None):
    """The leaf's masses (density and atoms) must add up to the window's mass from the CDF: a
    mechanism whose CDF, density and atoms disagree is refused rather than answered wrong."""
    window = 1.0 - truncated
    if not abs(total - window) <= 1e-9 + 2 * err:
        custom = loss is None or type(loss).__module__.endswith("custom")
        why = ("its cdf, pdf and atoms are inconsistent (check that they describe the same distribution)" if custom
               else "the density misses mass the quadrature cannot resolve (near-atoms of a mechanism at extreme "
                    "parameters, e.g. a subsampled Gaussian with a tiny sigma); give eps_error for the coupling "
                    "certificate")
        raise ValueError(f"the mechanism's density and atoms hold {total:.12g} of the window's mass {window:.12g} "
                         f"(from its CDF): {why}")


# Where a density underflows (|z| > 37.6 for the normal factors) its relative error bound (ContinuousLoss.pdf_error)
# does not hold, but its absolute error is at most a few DBL_MIN times the factors around it (below 1e-287 a cell for
# the subsampled Gaussian at sigma <= 1000 and meshes >= 1e-8; the log-distance rules' weight d cancels dl/dt near
# the end), so all of a leaf's cells, up to 1e7 of them, miss less than this per copy: charged as total variation
_UNDERFLOW_TV = 1e-280


def ctd_leaf(loss, h: float, tail: float, max_buckets: int = 1 << 24, native: bool = False, *,
             memo: dict | None = None, copies: int | None = None) -> GridPMF:
    """Connect-the-dots leaf: a PMF on a lattice of mesh ``h`` whose privacy curve dominates ``loss``'s.

    Each interval ``(e_j, e_j + h]`` of the window sends ``int (1 - e^(e_j - y)) dF(y) / (1 - e^-h)``
    of its mass to ``e_j + h`` and the rest to ``e_j``: the chord of the interval's privacy curve.
    The continuous part's integrals are 5-point Gauss-Legendre rules per interval; the upper share
    is raised by its error bound (only more pessimistic), and the error bounds of the masses are
    charged as total variation (``tv``, with their normalisation: twice their sum).  Atoms are split
    exactly.  The window's tails are cut off and charged (``truncated``), as in Algorithm 1.
    """
    if isinstance(loss, DiscreteLoss):
        return _discrete_leaf(loss, h, max_buckets, upper=True)
    cells, key = _leaf_key("ctd", loss, h, tail, copies)
    hit = _memo_get(memo, key, loss)
    if hit is not None:
        return hit  # (another leaf of the same loss, mesh and tail: a pilot's proxy repeats them)
    e, atoms, truncated, (starts, sizes), (a, a_err, nu, nu_err, _, _), origin, lat = _leaf_data(
        loss, h, tail, max_buckets, native, memo, cells)
    n = e.size
    p, total, rel, err = _ctd_masses(loss, e, atoms, starts, sizes, a, a_err, nu, nu_err, h, tail, _rel_cap(copies))
    if not total > 0 and not truncated < 1.0:
        raise ValueError("the discretisation window holds no probability mass; the mechanism parameters are degenerate")
    # (the errors charged as a factor too: at most rel each.  A window whose CDF holds mass where the cells hold none
    # -- a near-atom within ulps of a support end, PSG(1e-3, 0.01)'s add direction -- is refused here, saying so)
    _check_window(total, truncated, err + rel * total, loss)
    if not total > 0:
        raise ValueError("the discretisation window holds no probability mass; the mechanism parameters are degenerate")
    if not math.isfinite(err):
        raise ValueError("the dominance certificate cannot bound this mechanism's density (pdf_error is infinite "
                         "where the leaf integrates it: a CustomCDF without pdf, whose numerical derivative nothing "
                         "bounds); give it a pdf, or eps_error for the coupling certificate")
    tv = 2 * err / total + _anchored_shift(loss, lat, copies) + _UNDERFLOW_TV
    pmf = _with_anchor(GridPMF(p, _rounded(origin, 1), h, tv=tv, truncated=truncated, origin=origin), lat)
    # (the entries: a difference and a sum of two products, the sum, the normalisation)
    pmf.rel = 2 * (rel + 4 * _U) + (math.log2(n) + 8) * _U  # (np.sum is pairwise)
    if not atoms:
        # the same errors as total variation (execute: ``tv_rel``): the cells' masses within a_err of the exact
        # ones (every cell's, the ones charged above too), twice that after the normalisation, and each entry's
        # rounding relative to it, on masses that sum to 1 (a few u more)
        pmf.tv_rel = (2 * float(np.sum(a_err)) / total + (math.log2(n) + 16) * _U) * (1 + 1e-6)
    _memo_put(memo, key, loss, pmf)
    return pmf


def _native_masses() -> bool:
    """Whether the leaves' bodies run compiled (``_dominance.ctd_cells``, ``dominated_cells``: with the balanced
    split, ``splits._dom``; tests set it to ``None`` for the numpy references)."""
    return _splits._dom is not None and hasattr(_splits._dom, "ctd_cells")


# the sizes a cell may have (1 and _BLOCKS): the connect-the-dots leaf's chord denominators by size
_CELL_SIZES = np.arange(_BLOCKS[0] + 1, dtype=np.int64)


def _rel_cap(copies: int | None) -> float:
    """The largest relative error of a leaf's mass charged as a factor on the curve (above it: as total variation),
    for a leaf of ``copies`` copies: ``_REL_CAP``, or ``_REL_TOTAL / copies`` where larger.  The factor ``e^(copies
    rel)`` the leaf puts on the composed curve then stays below ``e^_REL_TOTAL``; the same error as total variation
    costs ``2 copies rel`` times the cell's mass in delta, absolute: a subsampled Laplace of scale ~0.1 holds half
    its mass within ~1e-6 of its lower end, where the density's rounding alone is ~5e-11 of it (relative ~1.0-2.5e-10
    above _REL_CAP), and its compositions of a few copies were refused at delta_error 1e-10 for that charge."""
    return max(_REL_CAP, _REL_TOTAL / max(int(copies or 1), 1))


def _ctd_masses(loss, e, atoms, starts, sizes, a, a_err, nu, nu_err, h: float, tail: float,
                cap: float | None = None):
    """The connect-the-dots leaf's masses on its lattice ``e`` from its cells' integrals: ``(p, total, rel, err)``,
    ``p`` divided by its sum ``total`` (where positive), ``rel`` the masses' relative error charged as a factor
    and ``err`` their error charged as total variation (see :func:`ctd_leaf`; ``cap``: :func:`_rel_cap`, default
    ``_REL_CAP``).  A loss without atoms in one
    compiled call without the GIL (``_dominance.ctd_cells``: the same operations and numpy's pairwise sums, the
    same bits); the numpy code below is its reference (and that of every loss with atoms)."""
    n = e.size
    den = -math.expm1(-h)
    cap = _REL_CAP if cap is None else cap
    if not atoms and _native_masses():
        # (the chord's denominators as the numpy code rounds them: numpy's expm1 for cells of several intervals,
        # libm's for one; numpy's SIMD expm1 rounds each element alike wherever it sits in the array)
        dens = -np.expm1(-h * _CELL_SIZES)
        dens[1] = den
        return _splits._dom.ctd_cells(a, a_err, nu, nu_err, starts, sizes, n, dens, _U, cap,
                                      _negligible(tail, starts.size))
    # (a cell of m intervals: its chord between its end points.  Its denominator 1 - e^-(m h) within 4 ulp of libm's
    # expm1 (8 u, as every maths-library call is taken here) and u from m h; the sum, the division and the product u
    # each: raising the upper share by 16 u, relative, keeps it at or above the exact chord's -- only more pessimistic)
    up = np.minimum((nu + nu_err) / np.where(sizes == 1, den, -np.expm1(-h * sizes)) * (1 + 16 * _U), a)
    p = np.zeros(n)
    p[starts] += a - up
    p[starts + sizes] += up
    # the masses' errors: relative (a factor e^(+-rel) on every mass, which composes into a factor on
    # the curve: charged as such) where they are below the cap, total variation elsewhere (the
    # far tails, where the rules' relative error grows)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(a > 0, a_err / a, np.inf)
    small = (r <= cap) & (a_err > _negligible(tail, starts.size))
    rel = float(r[small].max()) if small.any() else 0.0
    err = float(a_err[~small].sum())
    if atoms:
        # (the atoms' errors likewise: relative where below the cap -- a large atom's, charged as total variation
        # in every copy, outgrew delta_error over 1,000 copies of fixed-size batches -- total variation elsewhere)
        m, m_err = _atom_masses(loss, atoms)
        with np.errstate(divide="ignore", invalid="ignore"):
            ra = np.where(m > 0, m_err / m, np.inf)
        as_rel = ra <= cap
        if as_rel.any():
            rel = max(rel, float(ra[as_rel].max()))
        err += float(m_err[~as_rel].sum())
        for y, ma in zip(atoms, m):
            j = int(np.clip(np.searchsorted(e, y, side="left") - 1, 0, n - 2))  # e_j < y <= e_{j+1}
            w = min(1.0, -math.expm1(-(y - e[j])) / den + 8 * _U * (abs(y) + 1) / h)
            p[j] += ma * (1 - w)
            p[j + 1] += ma * w
    total = float(p.sum())
    return (p / total if total > 0 else p), total, rel, err


def dominated_leaf(loss, h: float, tail: float, max_buckets: int = 1 << 24, native: bool = False, *,
                   memo: dict | None = None, copies: int | None = None) -> GridPMF:
    """A PMF on a lattice of mesh ``h`` whose privacy curve is at most ``loss``'s (the lower chain).

    Each interval of the window is merged into one atom that keeps its masses under both
    distributions of the pair (post-processing, hence dominated); the masses come from 5-point
    Gauss-Legendre rules per interval, the first lowered and the second raised by their error
    bounds, so that the atom's mass and loss are only lower.  The atoms are then moved onto the
    lattice by :func:`_balanced_split`.  The PMF is normalised for the FFTs; ``mass`` (<= 1) is the
    fraction of the window's mass it kept.
    """
    # a loss computed as a dominating bound may carry a dominated one (fastpld.allocation)
    loss = getattr(loss, "dominated_loss", None) or loss
    if isinstance(loss, DiscreteLoss):
        pmf = _discrete_leaf(loss, h, max_buckets, upper=False)
        slack = float(getattr(loss, "lower_slack", 0.0) or 0.0)
        if slack > 0:
            # (a random allocation epoch's mass at loss -inf, put at its lowest value: lower_slack.  Claimed away
            # from every atom instead, it is at -inf: for any non-decreasing f, (1 - s) E_G[f] <= E_F[f] where F is
            # the loss without that mass and G = F + s at its lowest value, since f there is at most F's average;
            # so each copy's claimed mass times (1 - s) keeps every composed curve below the true one)
            pmf.mass = pmf.mass * (1.0 - slack) * (1 - 2 * _U)
        return pmf
    cells, key = _leaf_key("dominated", loss, h, tail, copies)
    hit = _memo_get(memo, key, loss)
    if hit is not None:
        return hit
    e, atoms, truncated, (starts, sizes), (a5, a_err, _, _, b5, b_err), origin, lat = _leaf_data(
        loss, h, tail, max_buckets, native, memo, cells)
    out, kept, tv = _dominated_masses(loss, e, atoms, starts, sizes, a5, a_err, b5, b_err, h, origin)
    if not atoms:
        # (a loss whose mass crowds a support end off the lattice: the lattice anchored where that mass balances,
        # where that places the leaf better -- any lattice gives a dominated leaf; balance.rebalanced)
        def remake(alt):
            d = _leaf_data(loss, h, tail, max_buckets, native, memo, cells, lat=alt)
            o, k, t = _dominated_masses(loss, d[0], d[1], *d[3], d[4][0], d[4][1], d[4][4], d[4][5], h, d[5])
            return (o, k, t), d
        better = rebalanced(loss, out, e, h, _integrals, remake)
        if better is not None:
            (out, kept, tv), (e, atoms, truncated, _, _, origin, lat) = better
    tv = tv + _anchored_shift(loss, lat, copies)
    # the window's mass, from the CDF at its ends: below the true one by at most 8 cdf_rel_error of the mass cut off
    # plus twice the CDF's shift there (_continuous_grid), both within 3 `truncated`; the claimed mass is lowered by
    # 4 truncated (relative: the window's error is that of the tails, not of the whole mass)
    window = 1.0 - truncated / (1 + 8 * loss.cdf_rel_error)
    if not window > 0 or not kept > 0:
        raise ValueError("the discretisation window holds no probability mass; the mechanism parameters are degenerate")
    pmf = _with_anchor(GridPMF(out, _rounded(origin, -1), h, tv=tv, truncated=truncated, origin=origin), lat)
    pmf.mass = _claimed_mass(kept / window, out.size, 4 * truncated / window)
    _memo_put(memo, key, loss, pmf)
    return pmf


_SPLIT_CELL = 4  # the dominated leaf's balanced split: its bound on the atoms a cell sums, for their rounding


def _dominated_masses(loss, e, atoms, starts, sizes, a5, a_err, b5, b_err, h: float, origin=None):
    """The dominated leaf's masses on its lattice ``e`` from its cells' integrals: ``(p, kept, tv)``, ``p`` divided
    by its sum ``kept`` (where positive; see :func:`dominated_leaf`) and ``tv`` what placing the atoms costs the
    curve (:func:`_atom_places`; ``origin``, the exact point of ``e[0]``, is needed where there are atoms).  A loss
    without atoms in two compiled calls without the GIL around numpy's log (``_dominance.dominated_ratio``,
    ``dominated_cells``: the same operations and numpy's pairwise sum, the same bits); the numpy code below is its
    reference (and that of every loss with atoms)."""
    if not atoms and _native_masses():
        # (numpy's log between them: its SIMD log rounds differently from libm's, alike wherever an element sits;
        # the cells are in order and each atom inside its cell, so the atoms are sorted as the lexsort below sorts
        # them)
        a, b, ratio = _splits._dom.dominated_ratio(a5, a_err, b5, b_err)
        return _splits._dom.dominated_cells(a, b, np.log(ratio), starts, sizes, e.size, h, _U, _MARGIN,
                                            _split_lower(_SPLIT_CELL)) + (0.0,)
    a = np.maximum(a5 - a_err, 0.0)  # A-mass, rounded down
    b = b5 + b_err  # B-mass times e^lo, rounded up
    ok = (a > 0) & (b > 0)
    # the atom's offset from lo: log(A / B), with A rounded down and B up (its loss only lower), lowered by the
    # ratio's rounding (u, absolute in the log) and log's own (4 ulp of its value, as every libm call is taken)
    lr = np.log(a[ok] / b[ok])
    s = np.clip(lr - 4 * _U - 8 * _U * np.abs(lr), 0.0, h * sizes[ok])
    j0 = starts[ok]
    big = sizes[ok] > 1
    if big.any():
        # a merged cell of several intervals: its atom lies in interval j0 + k of the cell; the offset
        # from that interval's start, lowered by its rounding (the loss only lower)
        k = np.minimum(np.floor(s[big] / h), sizes[ok][big] - 1)
        sb = s[big] - k * h
        s[big] = np.clip(sb - 4 * _U * (s[big] + h), 0.0, h * (1 - 4 * _U))
        j0 = j0.copy()
        j0[big] += k.astype(np.int64)
    idx, ms, ss = [j0], [a[ok]], [s]
    tv = 0.0
    if atoms:
        m, m_err = _atom_masses(loss, atoms)
        pj, ps, tv = _atom_places(atoms, m + m_err, e, h, origin)
        idx.append(np.asarray(pj, dtype=np.int64))
        ms.append(np.maximum(m - m_err, 0.0))  # rounded down
        ss.append(np.asarray(ps, dtype=np.float64))
    j = np.concatenate(idx)
    sj = np.concatenate(ss)
    order = np.lexsort((sj, j))
    out = _balanced_split(j[order], sj[order], np.concatenate(ms)[order], h, e.size, cell=_SPLIT_CELL)
    kept = float(out.sum())
    return (out / kept if kept > 0 else out), kept, tv


_U_STEP_NEAR = _U_STEP / 4  # their width for intervals clear of the end
_U_DEPTH = 45.0  # the deepest they go (in log(distance), below the interval's far edge)
_U_REFINE = 2  # at most this many refinements (panels a quarter as wide each) where their rules' bound is large
_NEAR_END = 256  # intervals within this many meshes of a support end may take them
_REL_CAP = 1e-10  # a leaf mass's relative error above this is charged as total variation instead ...
_REL_TOTAL = 1e-7  # ... or above this over the leaf's copies where that is larger (_rel_cap)
_NEGLIGIBLE_SHARE = 0.01  # of the truncation allowance: the cells' errors charged as total variation
_REFINE_REL = 1e-13  # an interval whose rules' error bounds are larger (relative) is integrated on finer panels
_REFINE_MAX_PANELS = 1 << 21  # at most this many finer panels per refinement level (~0.1 GB, ~0.2 s)
