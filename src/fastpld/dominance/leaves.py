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
from . import splits as _splits
from .ends import _anchor_end, _anchored_shift, _end_shift
from .atoms import _atom_places, _check_size, _discrete_leaf, _with_anchor
from .masses import _atom_masses, _cdf_sf
from .quadrature import _REL_CAP, _integrals
from .balance import rebalanced
from .splits import _balanced_split, _claimed_mass, _MARGIN, _split_lower

_U = np.finfo(np.float64).eps / 2  # unit roundoff


def _anchor_atom(loss, atoms) -> float:
    """The leaf's lattice point on an atom: the heaviest one in the window (its split is then exact; with the
    planner's meshes, every atom's is), 0 without atoms.  The chains' coarser lattices are anchored at the sum of
    it over the copies (:attr:`fastpld.discretize.GridPMF.anchor`)."""
    return atoms[int(np.argmax(_atom_masses(loss, atoms)[0]))] if atoms else 0.0


WINDOWS = ("windows",)  # the key of a composition's memo of truncation windows in its attempts' memos


def window(loss, tail: float, native: bool, windows: dict | None = None) -> tuple:
    """``truncation_window(loss, tail, native)``, kept in ``windows`` (a composition's, shared by its attempts and its
    planner's predictions, which ask the same windows: 13 times, 0.14 ms each, over a subsampled Laplace's three
    attempts; a deterministic function of its arguments)."""
    if windows is None:
        return truncation_window(loss, tail, native)
    key = (id(loss), float(tail), bool(native))
    hit = _memo_get(windows, key, loss)
    if hit is None:
        hit = truncation_window(loss, tail, native)
        _memo_put(windows, key, loss, hit)
    return hit


def _continuous_grid(loss: ContinuousLoss, h: float, tail: float, max_buckets: int, native: bool,
                     lat: float | None = None, windows: dict | None = None):
    """The leaf's lattice (mesh ``h``) over the window, the atoms inside it, the tails cut off, the
    lattice's first point exactly (``lat + i_lo h`` as :func:`fastpld.composition.roundoff._dyadic`'s pair: the
    point each lattice point ``e[j]`` stands for is ``lat + (i_lo + j) h``, its rounding charged by
    :func:`_integrals`), and ``lat`` (:func:`_anchor_atom`, or the one given: :mod:`fastpld.dominance.balance`).
    ``windows``: a composition's memo of truncation windows (:func:`window`)."""
    a0, b0 = window(loss, tail, native, windows)
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
    windows = memo.get(WINDOWS)
    # (the two chains of a direction may ask at once, on two threads -- the dominated chain shared out to the
    # thread whose short chain ended first, while the dominating one still computes this: the second waits for
    # the first's result, not computing it again; measured 1.08x the time at a sampler's numpy leaves otherwise)
    with memo.setdefault(("lock",) + key, threading.Lock()):
        hit = _memo_get(memo, key, loss)
        if hit is None:
            hit = _compute_leaf_data(loss, h, tail, max_buckets, native, cells, lat, windows)
            _memo_put(memo, key, loss, hit)
    return hit


def _compute_leaf_data(loss, h: float, tail: float, max_buckets: int, native: bool, cells: bool,
                       lat: float | None = None, windows: dict | None = None):
    e, atoms, truncated, origin, lat = _continuous_grid(loss, h, tail, max_buckets, native, lat, windows)
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
    lattice by :func:`_balanced_split`; for a loss with atoms also without its first-cell rule
    (``half_first=False``), that leaf kept where its curve is the higher and it leaves no more points empty
    (:func:`_other_start`).  The leaf's cells hold one merged atom each, about mid-cell, which that rule takes whole
    half a mesh down: first order where a support end's atom sits on the first point with mass above it (a
    subsampled Laplace on a 20th of its atoms' spacing: 2% of the mass in the interval above the bottom atom, the
    leaf 0.012 meshes low a copy, its lower bound 0.063 low at 10,000 copies).  Without the rule that interval is
    the next point's debt, which a thin support above may repay only with its top atom (PSL(0.114, 0.0011):
    epsilon(1e-5)'s lower bound 0.06 for 2.0168).  (Losses without atoms keep the rule: a subsampled Gaussian whose
    end cell holds most of the mass lay as high on average without it, but its bulk on every other point composed
    to a lower bound 0.026 lower at 4,337 copies than the rule's leaf re-anchored,
    :func:`~fastpld.dominance.balance.rebalanced`.)  The PMF is normalised for the FFTs; ``mass`` (<= 1) is the
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
        better = rebalanced(loss, out, e, h, remake)
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
# meshes from which the dominated leaf also tries the bounded split (splits._balanced_split), keeping the one with
# the higher tail (_higher_tail): from about 1 the unbounded one may sweep a decaying tail down
_BOUNDED_MESH = 0.25


def _dominated_masses(loss, e, atoms, starts, sizes, a5, a_err, b5, b_err, h: float, origin=None):
    """The dominated leaf's masses on its lattice ``e`` from its cells' integrals: ``(p, kept, tv)``, ``p`` divided
    by its sum ``kept`` (where positive; see :func:`dominated_leaf`) and ``tv`` what placing the atoms costs the
    curve (:func:`_atom_places`; ``origin``, the exact point of ``e[0]``, is needed where there are atoms).  A loss
    without atoms in two compiled calls without the GIL around numpy's log (``_dominance.dominated_ratio``,
    ``dominated_cells``: the same operations and numpy's pairwise sum, the same bits); the numpy code below is its
    reference (and that of every loss with atoms).  On meshes of at least ``_BOUNDED_MESH`` the bounded split's
    masses too, and the leaf whose tail is higher kept (:func:`_higher_tail`); for a loss with atoms each split also
    without its first-cell rule (:func:`_other_start`)."""
    if not atoms and _native_masses():
        # (numpy's log between them: its SIMD log rounds differently from libm's, alike wherever an element sits;
        # the cells are in order and each atom inside its cell, so the atoms are sorted as the lexsort below sorts
        # them)
        a, b, ratio = _splits._dom.dominated_ratio(a5, a_err, b5, b_err)
        lr = np.log(ratio)
        return _higher_tail(lambda bounded: _splits._dom.dominated_cells(
            a, b, lr, starts, sizes, e.size, h, _U, _MARGIN, _split_lower(_SPLIT_CELL), bounded), h) + (0.0,)
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
    j, sj, ms = j[order], sj[order], np.concatenate(ms)[order]

    def split(bounded, half=True):
        out = _balanced_split(j, sj, ms, h, e.size, cell=_SPLIT_CELL, bounded=bounded, half_first=half)
        kept = float(out.sum())
        return (out / kept if kept > 0 else out), kept

    if atoms:
        # (a loss with atoms: with the first-cell rule and without it, the higher kept -- see dominated_leaf)
        return _higher_tail(lambda bounded: _other_start(split(bounded), split(bounded, False), h), h) + (tv,)
    return _higher_tail(split, h) + (tv,)


def _holes(p) -> int:
    """Lattice points without mass between a leaf's first and last massed ones."""
    nz = np.flatnonzero(p)
    return int(nz[-1] - nz[0] + 1 - nz.size) if nz.size else 0


def _other_start(res, alt, h: float):
    """The dominated leaf with the balanced split's first-cell rule (``res``) or without it (``alt``): ``alt`` where
    its curve is the higher (:func:`_higher_of`) and it leaves no more points empty.  Empty points every other one
    are a spectrum's second peak at the Nyquist frequency, which a node's power raises with its FFT's error: Laplace(10)
    x 1e4's leaf without the rule lay 4e-4 meshes higher, but with 29 of its 59 points empty (the rule's: 2) its first
    node went to long double, 0.82 ms against 0.13.  (Where the rule took nothing the two are the same masses:
    ``res`` without the curves' comparison.)"""
    if np.array_equal(alt[0], res[0]) or _holes(alt[0]) > _holes(res[0]):
        return res
    return _higher_of(res, alt, h)


def _higher_tail(split, h: float):
    """The dominated leaf ``(p, kept)`` of ``split(bounded)`` (the balanced split onto the lattice of mesh ``h``):
    the unbounded one, or on meshes of at least ``_BOUNDED_MESH`` the bounded one where its curve is the higher
    between ``_TAIL_RANGE``: the sum of the log-ratio of the curves at the lattice points there decides (the query
    tables' ``dgrid``, :func:`fastpld._kernels.query_tables`; both are dominated: the choice only decides how
    tight).  No mass is lost by either, so both ``kept`` are positive or neither."""
    res = split(False)
    if not (h >= _BOUNDED_MESH and res[1] > 0):
        return res
    return _higher_of(res, split(True), h)


def _higher_of(res, alt, h: float):
    """Of two dominated leaves ``(p, kept)`` on one lattice of mesh ``h``, ``alt`` where its curve is the higher
    between ``_TAIL_RANGE`` (the sum of the log-ratio of the curves at the lattice points there), else ``res``."""
    if not (res[1] > 0 and alt[1] > 0):
        return res
    f = math.exp(-h)
    with np.errstate(all="ignore"):
        d0, d1 = _kernels.query_tables(res[0], f)[2], _kernels.query_tables(alt[0], f)[2]
        hi = np.maximum(d0, d1)
        live = (hi >= _TAIL_RANGE[0]) & (hi <= _TAIL_RANGE[1])
        score = float(np.sum(np.log(np.maximum(d1[live], 1e-300)) - np.log(np.maximum(d0[live], 1e-300))))
    return alt if score > 0 else res


_TAIL_RANGE = (1e-10, 1e-2)


_REL_TOTAL = 1e-7  # ... or (quadrature._REL_CAP) above this over the leaf's copies where that is larger (_rel_cap)
_NEGLIGIBLE_SHARE = 0.01  # of the truncation allowance: the cells' errors charged as total variation
