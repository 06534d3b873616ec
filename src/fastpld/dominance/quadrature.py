"""The quadrature of the dominance certificate's leaves: per lattice cell of a continuous loss, the masses ``int f``,
``int (1 - e^(lo - y)) f`` and ``int e^(lo - y) f`` with proved error bounds (:func:`_integrals`), from the
5-point rules of :mod:`fastpld.dominance.rules`, the log-distance rules near a support end, finer panels where the
rules disagree, and the lattice points' rounding (``docs/dominance.md``, "Leaf").  The subsampled Gaussian's in
one compiled call (``_leaf.psg_integrals``); the numpy code here is its reference and every other loss's.
(:mod:`fastpld.dominance.leaves` builds the leaves from them.)"""
from __future__ import annotations

import math

import numpy as np

from .. import _kernels
from ..samplers import MixtureLoss
from .ends import _end_tail_at, _exact_end
from .masses import _cdf_sf
from .rules import _GL5_RULE, _U_STEP, _log_panels, _panels, _rule_error

_U = np.finfo(np.float64).eps / 2  # unit roundoff

# the log-distance rules near a support end (panels of rules._U_STEP in u = log(distance to it)):
_U_STEP_NEAR = _U_STEP / 4  # their width for intervals clear of the end
_U_DEPTH = 45.0  # the deepest they go (in log(distance), below the interval's far edge)
_U_REFINE = 2  # at most this many refinements (panels a quarter as wide each) where their rules' bound is large
_NEAR_END = 256  # intervals within this many meshes of a support end may take them
_REL_CAP = 1e-10  # a leaf mass's relative error above this is charged as total variation (leaves._rel_cap): refined
_REFINE_REL = 1e-13  # an interval whose rules' error bounds are larger (relative) is integrated on finer panels
_REFINE_MAX_PANELS = 1 << 21  # at most this many finer panels per refinement level (~0.1 GB, ~0.2 s)


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
