"""The dominance certificate: pessimistic and optimistic PLDs carried through evolving grids.

The coupling certificate of :mod:`fastpld.compose` shifts epsilon by an Azuma-Hoeffding term over
every leaf copy, which forces leaf meshes of ``eps_error / sqrt(k)``.  This module certifies the
same evolving-discretisation plans without any epsilon shift (``docs/dominance.md``):

* **upper bound**: every leaf is replaced by a PLD that *dominates* it (its privacy curve is at
  least as high at every epsilon) and every re-discretisation by a dominating one.  Dominance is
  kept by composition with anything, so the composed PMF's curve lies above the true one; the only
  charges are the delta charges of the nodes (wrap-around, round-off) and of the truncated tails,
  as in the coupling certificate.  Both steps are *connect-the-dots* (Doroshenko et al. 2022): an
  atom at ``y`` between grid points ``lo < y < hi`` is replaced by atoms at ``lo`` and ``hi`` with
  the same mass under both distributions of the pair, i.e. ``(1 - e^(lo - y)) / (1 - e^(lo - hi))``
  of its mass at ``hi``.  Its error is second order in the mesh.
* **lower bound**: the same plan on *dominated* PLDs (curves at most the true one everywhere):
  each atom moves to the grid point at or below it (monotone coupling: lowering a loss can only
  lower the curve).  This rounding is first order in the mesh; the optimistic PMF runs on the
  same plan and meshes.

Both PMFs are exact compositions of their (dominating, dominated) leaves up to the node charges;
the floating-point error of a leaf's masses is charged as total variation per copy (a curve
perturbation of at most that much, by linearity of the composed curve in each factor).
"""
from __future__ import annotations

import functools
import importlib
import math

import numpy as np

from . import _validation as V
from .curve import Bounds, DirectionResult, PrivacyLossDistribution, _pack, _Query
from .discretize import GridPMF, truncation_window

from . import _kernels
from .mechanisms import ContinuousLoss, DiscreteLoss, SubsampledLoss

_dom = None  # the compiled balanced split (FASTPLD_PURE_PYTHON=1 or no build: the reference below)
if _kernels._core is not None:
    try:
        from . import _dominance as _dom  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - depends on the build
        _dom = None

__all__ = ["DominancePLD", "compose_dominance", "ctd_leaf", "dominated_leaf", "ctd_split", "dominated_split",
           "dominance_meshes", "leaf_mesh"]

_U = np.finfo(np.float64).eps / 2

# Gauss-Legendre nodes/weights on [-1, 1]: the 5-point rule of the leaves and the 4-point rule that
# checks it (an error of ten times their disagreement is charged, as for the partial means)
_GL5 = np.polynomial.legendre.leggauss(5)
_GL4 = np.polynomial.legendre.leggauss(4)


def _check_size(n, h, a, b, max_buckets):
    if n > max_buckets:
        raise ValueError(
            f"discretising the privacy loss needs {n} buckets (mesh {h:.3g} over [{a:.4g}, {b:.4g}]), more than "
            f"max_buckets={max_buckets}; increase the accuracy target or max_buckets")


def _atom_masses(loss: ContinuousLoss, atoms):
    """Masses of the atoms of a continuous loss and an error bound of each: the jumps of its CDF (a
    right-continuous closed form; the leaves check that atoms and density fill the window), or, for
    a subsampled loss, from its pair's closed forms."""
    if not atoms:
        return np.zeros(0), np.zeros(0)
    pair = getattr(loss, "pair", None)
    if isinstance(loss, SubsampledLoss) and tuple(atoms) == tuple(loss.atoms) and len(pair.atoms) == len(atoms):
        # a subsampled loss's atoms are the images of its pair's: their masses from the pair's own
        # CDFs (closed forms), where the loss's CDF through g^-1 may round across the atom
        x = np.asarray(pair.atoms, dtype=np.float64)
        jp = np.asarray(pair.cdf_P(x), dtype=np.float64) - np.asarray(pair.cdf_P(x, strict=True), dtype=np.float64)
        if loss.direction == "remove":
            below = np.nextafter(x, -np.inf)
            jq = np.asarray(pair.cdf_Q(x), dtype=np.float64) - np.asarray(pair.cdf_Q(below), dtype=np.float64)
            m = (1 - loss.q) * jp + loss.q * jq
        else:
            m = jp
        m = np.maximum(m, 0.0)
        return m, 16 * _U * m + 1e-300
    y = np.asarray(atoms, dtype=np.float64)
    below = np.nextafter(y, -np.inf)
    m = np.maximum(np.asarray(loss.cdf(y), dtype=np.float64) - np.asarray(loss.cdf(below), dtype=np.float64), 0.0)
    return m, 8 * loss.cdf_rel_error * m + 1e-300


def _continuous_grid(loss: ContinuousLoss, h: float, tail: float, max_buckets: int, native: bool):
    """The leaf's lattice (mesh ``h``) over the window, the atoms inside it, and the tails cut off."""
    a0, b0 = truncation_window(loss, tail, native)
    atoms = [x for x in loss.atoms if a0 < x <= b0]
    # the heaviest atom on a grid point (its split is then exact; with the planner's mesh, all are)
    lat = (atoms[int(np.argmax(_atom_masses(loss, atoms)[0]))] if atoms else 0.0)
    i_lo = math.floor((a0 - lat) / h)
    i_hi = math.ceil((b0 - lat) / h)
    n = i_hi - i_lo + 1
    _check_size(n, h, a0, b0, max_buckets)
    e = lat + h * np.arange(i_lo, i_hi + 1, dtype=np.float64)
    out = np.asarray(loss.cdf(e[:1]), dtype=np.float64)[0] + np.asarray(loss.sf(e[-1:]), dtype=np.float64)[0]
    # (the CDF is computed at a point within cdf_shift of the window's end: the mass in between, at
    # most that distance times the density there, is charged too)
    shift = loss.cdf_shift(max(abs(float(e[0])), abs(float(e[-1]))))
    dens = float(np.max(np.asarray(loss.pdf(np.array([e[0], e[-1]])), dtype=np.float64)))
    truncated = float(out) * (1 + 8 * loss.cdf_rel_error) + 4 * shift * dens
    return e, atoms, truncated


def _leaf_data(loss, h: float, tail: float, max_buckets: int, native: bool, memo: dict | None):
    """:func:`_continuous_grid` and :func:`_integrals` of a leaf.  ``memo`` (one composition's, shared
    by its two chains, dropped with it) keeps them for the other chain's leaf of the same loss and mesh."""
    key = (id(loss), float(h), float(tail))
    hit = memo.get(key) if memo is not None else None
    if hit is None or hit[0] is not loss:
        e, atoms, truncated = _continuous_grid(loss, h, tail, max_buckets, native)
        hit = (loss, e, atoms, truncated, _integrals(loss, e[:-1], h))
        if memo is not None:
            memo[key] = hit
    return hit[1:]


def _integrals(loss, lo, h):
    """Per interval ``(lo_j, lo_j + h]`` of the continuous part: the masses ``int f``,
    ``int (1 - e^(lo_j - y)) f`` and ``int e^(lo_j - y) f`` by 5-point rules, and error
    bounds of each (ten times the 4-point rules' disagreement, plus rounding).  Each interval is
    integrated over its part inside the support (the density need not be smooth across a support
    end), and intervals whose rules disagree by more than ``_REFINE_REL`` relative are split into
    8, 64, then 512 panels (near a support end the density of a subsampled loss is steep)."""
    s_lo, s_hi = getattr(loss, "support", (-math.inf, math.inf))
    c0 = np.clip(lo, s_lo, s_hi) - lo
    c1 = np.clip(lo + h, s_lo, s_hi) - lo
    c1 = np.maximum(c1, c0)
    a, a_err, n, n_err, b, b_err = _panels(loss, lo, c0, c1)
    # an interval holding a support end, or within one mesh of it: the integral in u = log(distance
    # to the end), where the density of a subsampled loss is smooth (f(y) dy = f(end +- e^u) e^u du),
    # on panels of width _U_STEP from the interval's far edge down to e^-45 of its distance (clipped
    # at its near edge); what lies closer to the end is bounded by the CDF (or survival function)
    done = np.zeros(lo.size, dtype=bool)
    for side in (0, 1):
        near_end = (lo - h < s_lo) if side == 0 else (lo + 2 * h > s_hi)
        bad = np.flatnonzero(near_end & (c1 > c0) & ((a_err > _REFINE_REL * a) | (n_err > _REFINE_REL * n)
                                                       | (b_err > _REFINE_REL * b)))
        if bad.size == 0:
            continue
        # offsets (from lo) of the end, and the distances of the interval's far and near edges from it
        end = (s_lo - lo[bad]) if side == 0 else (s_hi - lo[bad])
        d_far = (c1[bad] - end) if side == 0 else (end - c0[bad])
        d_near = np.maximum((c0[bad] - end) if side == 0 else (end - c1[bad]), 0.0)
        with np.errstate(divide="ignore"):
            u_near = np.log(d_near / d_far)  # (-inf where the end is inside)
        u = -_U_STEP * np.arange(int(45 / _U_STEP) + 1)  # 0 .. -45 (relative to log d_far)
        top = np.maximum(u[None, :-1], u_near[:, None])  # each panel clipped at the near edge
        bot = np.maximum(u[None, 1:], u_near[:, None])
        half = 0.5 * (top - bot)
        res = []
        for x, w in (_GL5, _GL4):
            uu = bot[:, :, None] + half[:, :, None] * (1.0 + x)[None, None, :]
            d = d_far[:, None, None] * np.exp(uu)
            t = end[:, None, None] + (d if side == 0 else -d)  # offsets from lo
            f = np.asarray(loss.pdf((lo[bad, None, None] + t).ravel()), dtype=np.float64).reshape(t.shape)
            f = f * d * half[:, :, None]  # dy = d du
            res.append(((f * w).sum(axis=(1, 2)), (f * -np.expm1(-t) * w).sum(axis=(1, 2)),
                        (f * np.exp(-t) * w).sum(axis=(1, 2))))
        (a5, n5, b5), (a4, n4, b4) = res
        inner = end + (d_far if side == 0 else -d_far) * math.exp(-45.0)
        if side == 0:
            rest = np.asarray(loss.cdf(lo[bad] + inner), dtype=np.float64)
        else:
            rest = np.asarray(loss.sf(lo[bad] + inner), dtype=np.float64)
        rest = np.where(np.isfinite(u_near) & (u_near > -45.0), 0.0, np.maximum(rest, 0.0) * (1 + 1e-6))
        a[bad], a_err[bad] = a5, 10.0 * np.abs(a5 - a4) + 16 * _U * a5 + rest
        n[bad], n_err[bad] = n5, 10.0 * np.abs(n5 - n4) + 16 * _U * n5 + rest
        b[bad], b_err[bad] = b5, 10.0 * np.abs(b5 - b4) + 16 * _U * b5 + rest
        done[bad] = True
    for level in range(1, 4):
        bad = np.flatnonzero(~done & ((a_err > _REFINE_REL * a) | (n_err > _REFINE_REL * n) | (b_err > _REFINE_REL * b)))
        if bad.size == 0:
            break
        m = 8 ** level
        k = np.arange(m + 1) / m
        edges = c0[bad, None] + (c1[bad] - c0[bad])[:, None] * k[None, :]
        sub = _panels(loss, np.repeat(lo[bad], m), edges[:, :-1].ravel(), edges[:, 1:].ravel())
        for arr, val in zip((a, a_err, n, n_err, b, b_err), sub):
            arr[bad] = val.reshape(-1, m).sum(axis=1)
    return a, a_err, n, n_err, b, b_err


def _panels(loss, lo, c0, c1):
    """5- and 4-point rules on the panels ``[lo + c0, lo + c1]`` (see :func:`_integrals`)."""
    half = 0.5 * (c1 - c0)
    res = []
    for gl in (_GL5, _GL4):
        x, w = gl
        t = c0[:, None] + half[:, None] * (1.0 + x[None, :])
        y = lo[:, None] + t
        f = np.asarray(loss.pdf(y.ravel()), dtype=np.float64).reshape(y.shape) * half[:, None]
        fw = f * w[None, :]
        res.append((fw.sum(axis=1), (fw * -np.expm1(-t)).sum(axis=1), (fw * np.exp(-t)).sum(axis=1)))
    (a5, n5, b5), (a4, n4, b4) = res
    err = lambda x5, x4: 10.0 * np.abs(x5 - x4) + 16 * _U * x5
    return a5, err(a5, a4), n5, err(n5, n4), b5, err(b5, b4)


def _check_window(total, truncated, err):
    """The leaf's masses (density and atoms) must add up to the window's mass from the CDF: a
    mechanism whose CDF, density and atoms disagree is refused rather than answered wrong."""
    window = 1.0 - truncated
    if not abs(total - window) <= 1e-9 + 2 * err:
        raise ValueError(
            f"the mechanism's density and atoms hold {total:.12g} of the window's mass {window:.12g} (from its "
            "CDF): its cdf, pdf and atoms are inconsistent (for a custom mechanism check that they describe the "
            "same distribution)")


def ctd_leaf(loss, h: float, tail: float, max_buckets: int = 1 << 24, native: bool = False, *,
             memo: dict | None = None) -> GridPMF:
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
    e, atoms, truncated, (a, a_err, nu, nu_err, _, _) = _leaf_data(loss, h, tail, max_buckets, native, memo)
    n = e.size
    den = -math.expm1(-h)
    up = np.minimum((nu + nu_err) / den * (1 + 4 * _U), a)
    p = np.zeros(n)
    p[:-1] += a - up
    p[1:] += up
    # the masses' errors: relative (a factor e^(+-rel) on every mass, which composes into a factor on
    # the curve: charged as such) where they are below _REL_CAP, total variation elsewhere (the
    # far tails, where the rules' relative error grows)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(a > 0, a_err / a, np.inf)
    small = r <= _REL_CAP
    rel = float(r[small].max()) if small.any() else 0.0
    err = float(a_err[~small].sum())
    if atoms:
        m, m_err = _atom_masses(loss, atoms)
        err += float(m_err.sum())
        for y, ma in zip(atoms, m):
            j = int(np.clip(np.searchsorted(e, y, side="left") - 1, 0, n - 2))  # e_j < y <= e_{j+1}
            w = min(1.0, -math.expm1(-(y - e[j])) / den + 8 * _U * (abs(y) + 1) / h)
            p[j] += ma * (1 - w)
            p[j + 1] += ma * w
    total = float(p.sum())
    if not total > 0:
        raise ValueError("the discretisation window holds no probability mass; the mechanism parameters are degenerate")
    _check_window(total, truncated, err)
    tv = 2 * err / total
    pmf = GridPMF(p / total, float(e[0]), h, tv=tv, truncated=truncated)
    # (the entries: a difference and a sum of two products, the sum, the normalisation)
    pmf.rel = 2 * (rel + 4 * _U) + (math.log2(n) + 8) * _U  # (np.sum is pairwise)
    return pmf


def dominated_leaf(loss, h: float, tail: float, max_buckets: int = 1 << 24, native: bool = False, *,
                   memo: dict | None = None) -> GridPMF:
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
        return _discrete_leaf(loss, h, max_buckets, upper=False)
    e, atoms, truncated, (a5, a_err, _, _, b5, b_err) = _leaf_data(loss, h, tail, max_buckets, native, memo)
    a = np.maximum(a5 - a_err, 0.0)  # A-mass, rounded down
    b = b5 + b_err  # B-mass times e^lo, rounded up
    ok = (a > 0) & (b > 0)
    # the atom's offset from lo: log(A / B), with A rounded down and B up (its loss only lower)
    s = np.clip(np.log(a[ok] / b[ok]) - 4 * _U, 0.0, h)
    idx, ms, ss = [np.flatnonzero(ok)], [a[ok]], [s]
    if atoms:
        m, m_err = _atom_masses(loss, atoms)
        m = np.maximum(m - m_err, 0.0)  # rounded down
        for y, ma in zip(atoms, m):
            j = int(np.clip(np.searchsorted(e, y, side="right") - 1, 0, e.size - 1))  # e_j <= y
            idx.append(np.array([j]))
            ms.append(np.array([ma]))
            ss.append(np.array([max(0.0, y - e[j] - 8 * _U * (abs(y) + 1))]))
    j = np.concatenate(idx)
    sj = np.concatenate(ss)
    order = np.lexsort((sj, j))
    out = _balanced_split(j[order], sj[order], np.concatenate(ms)[order], h, e.size)
    # the window's mass, from the CDF at its ends (relative error <= 8 cdf_rel_error: the mass kept is
    # lowered by it)
    window = 1.0 - truncated / (1 + 8 * loss.cdf_rel_error)
    if not window > 0 or not out.sum() > 0:
        raise ValueError("the discretisation window holds no probability mass; the mechanism parameters are degenerate")
    kept = float(out.sum())
    pmf = GridPMF(out / kept, float(e[0]), h, truncated=truncated)
    # (kept: a sum of n positive terms; the division: u per entry; both only lower the mass claimed)
    pmf.mass = min(kept / window * (1 - 16 * loss.cdf_rel_error - (e.size + 8) * 2 * _U), 1.0)
    return pmf


_U_STEP = 0.125  # width of the panels in log(distance) at a support end
_REL_CAP = 1e-10  # a leaf mass's relative error above this is charged as total variation instead
_REFINE_REL = 1e-13  # an interval whose rules disagree by more (relative) is integrated on finer panels

_MARGIN = 1e-12  # relative margin of every balance against the rounding of its terms


def _balanced_split(j, s, a, H, n, cell=4):
    """Atoms of mass ``a`` at ``j H + s`` (``0 <= s < H``, sorted) onto the lattice points ``0..n-1``
    (times ``H``), dominated; returns the masses per point (summing to at most ``a.sum()``).

    The points are taken in increasing order.  Point ``g`` receives every atom left below it, then
    atoms (or, for the last one, a fraction) of its interval ``[g H, (g + 1) H)`` until its
    *balance* ``sum a (1 - e^(g H - y))`` over what it received is >= 0: the merged atom (a
    post-processing of the pair, hence dominated) then has loss >= ``g H``, and it is moved down onto
    the point keeping its mass under the second distribution (``A = e^(g H) B``, which only lowers
    the curve).  Where the support is sparse (atoms further apart than ``H``), a cell takes atoms past
    the next point; the points in between receive nothing.  Balances are made exactly zero (up to a relative margin against rounding), so no
    mass is lost but at the ends of the support (a cell its interval cannot balance sends all but
    the atoms on its point to the point below, where its balance is positive): the first cell also takes the lower half of its
    interval (an atom on the midpoint half), whose positive balance is lost; starting the cells'
    boundaries at the midpoints keeps them there (the boundaries' offsets follow a neutral
    recursion, so a bad start would persist).  A cell that its interval cannot balance goes to the
    point below, where its balance is positive.  ``cell`` bounds the atoms per cell for the rounding
    of the sums (the result is lowered by it).
    """
    j = np.ascontiguousarray(j, dtype=np.int64)
    s = np.ascontiguousarray(s, dtype=np.float64)
    a = np.ascontiguousarray(a, dtype=np.float64)
    out = (_dom.balanced_split(j, s, a, float(H), int(n), _MARGIN) if _dom is not None
           else _balanced_split_py(j, s, a, float(H), int(n), _MARGIN))
    return out * (1 - 8 * _U * (cell + 3))


def _balanced_split_py(j, s, a, H, n, margin):
    """Reference of the compiled kernel :func:`fastpld._dominance.balanced_split` (same operations)."""
    out = np.zeros(n)
    m = a.size
    i = 0
    r = 1.0
    started = False
    for g in range(n):
        bal = neg = acc = acc0 = 0.0
        first = not started
        while i < m and j[i] < g:
            x = (g - j[i]) * H - s[i]
            c = r * a[i] * math.expm1(x)
            bal -= c
            neg += c
            acc += r * a[i] * math.exp(x)
            i += 1
            r = 1.0
        while i < m and j[i] >= g:
            x = (j[i] - g) * H + s[i]  # y - point >= 0 (atoms past the next point: a sparse support)
            if x == 0.0:
                acc0 += r * a[i]
                i += 1
                r = 1.0
                continue
            need = margin * neg - bal
            if need <= 0.0:
                if first and x <= 0.5 * H * (1 + 1e-9):  # the first cell: the lower half of its interval
                    f = r if x < 0.5 * H * (1 - 1e-9) else 0.5 * r  # (an atom on the midpoint: half)
                    bal += f * a[i] * -math.expm1(-x)
                    acc += f * a[i] * math.exp(-x)
                    r -= f
                    if r > 0.0:
                        break
                    i += 1
                    r = 1.0
                    continue
                break
            c = r * a[i] * -math.expm1(-x)
            if c > need:
                f = need / (a[i] * -math.expm1(-x))
                acc += f * a[i] * math.exp(-x)
                r -= f
                bal += f * a[i] * -math.expm1(-x)
                break
            bal += c
            acc += r * a[i] * math.exp(-x)
            i += 1
            r = 1.0
        if acc + acc0 > 0.0:
            started = True
        if bal >= 0.5 * margin * neg:  # (the target was margin * neg: up to its rounding)
            out[g] += acc + acc0
        else:  # atoms on the point stay; the rest goes down (g > 0: the first cell has nothing below)
            out[g] += acc0
            out[g - 1] += acc * math.exp(-H)
    return out


def _discrete_leaf(loss: DiscreteLoss, h: float, max_buckets: int, upper: bool) -> GridPMF:
    v = np.asarray(loss.values, dtype=np.float64)
    pr = np.asarray(loss.probs, dtype=np.float64)
    lat = float(v[0])
    span = (float(v[-1]) - lat) / h + 2
    _check_size(span, h, lat, float(v[-1]), max_buckets)
    t = (v - lat) / h
    # grid index at or below each atom; an atom within rounding of a grid point counts as on it
    # (moving mass up by |d| changes the curve by at most mass * |d|: charged)
    j = np.floor(t + 8 * _U * (np.abs(t) + 1)).astype(np.int64)
    d = v - (lat + j * h)
    noise = np.minimum(d, 0.0)
    d = np.maximum(d, 0.0)
    tv_pos = float(np.sum(pr * -noise)) + 8 * _U * v.size
    n = int(j[-1]) + 2
    p = np.zeros(n)
    if upper:
        w = np.where(d > 0, np.minimum(1.0, -np.expm1(-np.maximum(d, 0.0)) / -math.expm1(-h) + 8 * _U), 0.0)
        np.add.at(p, j, pr * (1 - w))
        np.add.at(p, j + 1, pr * w)
    else:
        np.add.at(p, j, pr)
    p /= p.sum()
    pmf = GridPMF(p, lat, h, tv=tv_pos)
    # (the products, the sums into each entry and the normalisation: relative rounding; the
    # dominating leaf charges it as a factor, the dominated one lowers its mass by it)
    r = (math.log2(n) + 8 + np.max(np.bincount(j, minlength=n))) * 2 * _U
    if upper:
        pmf.rel = r
    else:
        pmf.mass = 1.0 - r
    return pmf


def _split_prep(pmf: GridPMF, mesh: float):
    p = np.asarray(pmf.probs, dtype=np.float64)
    cast = _U if np.asarray(pmf.probs).dtype != np.float64 else 0.0  # (a long double node's cast: relative)
    i = np.arange(p.size, dtype=np.float64)
    t = (pmf.offset + pmf.mesh * i) / mesh
    # absolute error of t: of the sum offset + mesh i (relative to its terms), of the division
    slack = 8 * _U * ((abs(pmf.offset) + pmf.mesh * i) / mesh + np.abs(t) + 2)
    return p, t, slack, cast


def ctd_split(pmf: GridPMF, mesh: float, native: bool = False) -> GridPMF:
    """Connect-the-dots re-discretisation onto the lattice ``mesh * Z`` (dominates ``pmf``)."""
    p, t, slack, cast = _split_prep(pmf, mesh)
    j = np.floor(t).astype(np.int64)
    theta = np.clip(t - j, 0.0, 1.0)
    den = -math.expm1(-mesh)
    # share sent up, raised by its rounding and by the position error of t (pessimistic)
    w = -np.expm1(-theta * mesh) / den
    w = np.minimum(1.0, w + 8 * _U + slack * mesh / den)
    j0 = int(j[0])
    m = int(j[-1]) - j0 + 2
    out = np.zeros(m)
    np.add.at(out, j - j0, p * (1 - w))
    np.add.at(out, j - j0 + 1, p * w)
    ratio = mesh / pmf.mesh
    res = GridPMF(out, j0 * mesh, mesh)
    # every output entry is a sum of at most ratio + 2 positive products: relative rounding
    res.rel = cast + 2 * (ratio + 3) * _U
    return res


def dominated_split(pmf: GridPMF, mesh: float, native: bool = False) -> GridPMF:
    """Re-discretisation onto ``mesh * Z`` dominated by ``pmf`` (:func:`_balanced_split`)."""
    p, t, slack, cast = _split_prep(pmf, mesh)
    # atoms within rounding of a lattice point sit on it (moved up by at most slack * mesh: the
    # curve moves by at most that mass times it, charged); the others at their exact offset, rounded down
    r = np.rint(t)
    on = np.abs(t - r) <= slack
    tv = float(np.sum(p[on] * slack[on])) * mesh
    t = np.where(on, r, t - slack)
    j = np.floor(t).astype(np.int64)
    s = np.where(on, 0.0, np.clip((t - j) * mesh, 0.0, mesh))
    ratio = mesh / pmf.mesh
    j0 = int(j[0])
    m = int(j[-1]) - j0 + 2
    out = _balanced_split(j - j0, s, p, mesh, m, cell=int(ratio) + 2)
    total = float(out.sum())
    res = GridPMF(out / total, j0 * mesh, mesh, tv=tv)
    # (the output was lowered by its rounding; the sums, the cast and the division only lower the mass claimed)
    res.mass = min(total / float(p.sum()) * (1 - 2 * cast - 2 * (out.size + p.size + 4) * _U), 1.0)
    return res


# --------------------------------------------------------------------------------------
# Plans and execution
# --------------------------------------------------------------------------------------
def dominance_meshes(plan, h1: float) -> dict:
    """Mesh per group: ``h1`` times the power of two nearest ``sqrt(K / copies_g)``.

    A re-discretisation at mesh ``H`` moves each copy's loss by ``O(H^2)`` (connect-the-dots and
    the balanced split are second order), and its copies enter the final composition ``copies_g``
    times: equal shares ``copies_g H_g^2 ~ K h1^2`` (``K`` the leaf copies) let the meshes grow like
    the square root of the copies composed before them, and every stage holds about the same number
    of buckets.  Powers of two keep every lattice nested in the next (the balanced split is exact on
    nested lattices; on incommensurate ones its cells drift).
    """
    copies = plan.copies_per_group()
    K = max(copies.values())
    return {g: h1 * 2.0 ** round(0.5 * math.log2(K / max(c, 1))) for g, c in copies.items()}


def leaf_mesh(parts, plan, eps_error: float, scale: float = 1.0) -> float:
    """Leaf mesh ``h1`` for an absolute epsilon error of about ``eps_error`` per bound.

    Each group's re-discretisations (and the leaves) move the composed loss by about
    ``copies_g H_g^2 / 12`` (the mean shift of connect-the-dots; the balanced split's is of the
    same size), and with :func:`dominance_meshes` every group contributes about ``K h1^2 / 12``:
    the shifts of the ``S`` groups add up to ``S K h1^2 / 12``, which moves epsilon by as much.
    ``scale`` multiplies the result (a second attempt, see :func:`compose_dominance`).  A single
    part with one or two atoms takes the largest mesh below that on whose lattice, and on
    every coarser lattice of the plan, its atoms lie (their splits are then exact).
    """
    copies = plan.copies_per_group()
    K = max(copies.values())
    S = len(copies)
    h1 = scale * math.sqrt(12.0 * eps_error / (_SHIFT_FACTOR * S * K))
    if len(parts) == 1:
        loss = parts[0][0]
        pts = (np.asarray(loss.values, dtype=np.float64) if isinstance(loss, DiscreteLoss)
               else np.asarray(getattr(loss, "atoms", ()), dtype=np.float64))
        if 0 < pts.size <= 2:
            span = float(np.max(np.abs(pts)))
            if span > 0 and pts.size == 2 and abs(abs(pts[0]) - abs(pts[1])) > 1e-12 * span:
                span = float(pts[1] - pts[0])
            if span > 0:
                # the atoms (and those of every composition of them) on every lattice of the plan:
                # the coarsest mesh R h1 must divide span too
                R = max(dominance_meshes(plan, 1.0).values())
                h1 = span / (R * math.ceil(span / (R * h1)))
    return h1


# the composed shift of each chain, measured at 1.2-2.2 times the sum of the groups' mean shifts
# (Gaussian, Laplace, subsampled Gaussian): eps_error then bounds each side's error in most cases
_SHIFT_FACTOR = 3.0


# --------------------------------------------------------------------------------------
# Composition and the result
# --------------------------------------------------------------------------------------
_REFERENCE_DELTAS = (1e-3, 1e-5, 1e-7, 1e-9)  # where compose_dominance checks the width it reached
_DEFAULT_ARITY = 16  # growth sqrt(16) = 4 per level: every lattice nested in the next (4: more levels, slower)
_ARITIES = (_DEFAULT_ARITY, 64, 256)
_MERGE = 8  # block size of heterogeneous plans (50 distinct parts: 3.5 -> 2.1 s against 4 and 16)  # tried in turn when a plan's charges do not fit delta_error


def compose_dominance(dir_parts, events, eps_error: float, delta_error: float, backend, arity: int | None,
                      max_buckets: int, threads: int) -> "DominancePLD":
    """Both chains (dominating, dominated) for every direction (``dir_parts``: the grouped parts of
    ``events`` per direction); see :func:`fastpld.compose`."""
    compose_mod = importlib.import_module("fastpld.compose")
    if arity is not None:
        return _compose_dominance(compose_mod, dir_parts, events, eps_error, delta_error, backend, arity,
                                  max_buckets, threads)
    # the default arity first; where its nodes' round-off does not fit delta_error (many copies: the
    # first node's charge counts once per instance), larger ones: fewer instances of each node
    first = None
    for a in _ARITIES:
        try:
            return _compose_dominance(compose_mod, dir_parts, events, eps_error, delta_error, backend, a,
                                      max_buckets, threads)
        except compose_mod._BudgetError as exc:
            first = first or exc
    raise first


def _compose_dominance(compose_mod, dir_parts, events, eps_error, delta_error, backend, arity, max_buckets,
                       threads):
    budgets = compose_mod._Budgets(eps=eps_error, delta=delta_error, eta=delta_error, trunc=0.3 * delta_error,
                                   wrap=0.3 * delta_error, fp=0.4 * delta_error)
    # many distinct parts: grouped into blocks (one mesh group per level), as the coupling planner does
    plans = [(name, parts, compose_mod._build_plan(parts, "recursive", arity,
                                                   merge=_MERGE if len(parts) > _MERGE else None))
             for name, parts in dir_parts]
    scale = 1.0
    for attempt in range(2):
        jobs = []
        memo = {}  # the leaves' grids and integrals, shared by the two chains of this attempt
        for name, parts, plan in plans:
            h1 = leaf_mesh(parts, plan, eps_error, scale)
            meshes = dominance_meshes(plan, h1)
            p_inf = -math.expm1(sum(c * math.log1p(-loss.p_inf) for loss, c in parts))
            for upper in (True, False):
                jobs.append(functools.partial(_run_chain, compose_mod, plan, meshes, budgets, backend, max_buckets,
                                              p_inf, upper, arity, memo))
        out = compose_mod._run_jobs(jobs, threads, 0.0)
        upper = {name: out[2 * i] for i, (name, _, _) in enumerate(plans)}
        lower = {name: out[2 * i + 1] for i, (name, _, _) in enumerate(plans)}
        pld = DominancePLD(upper, lower, eps_error, delta_error, tuple(events), backend.name)
        # the planner's model of the shifts is good to a factor of a few: where the certified width
        # of epsilon at the reference deltas exceeds 2 eps_error, compose once more on meshes
        # scaled for it (the error is second order in the meshes)
        width = pld._reference_width()
        if attempt or not width > 2.0 * eps_error:
            return pld
        scale = 0.95 * math.sqrt(2.0 * eps_error / width)
    return pld


def _run_chain(compose_mod, plan, meshes, budgets, backend, max_buckets, p_inf, upper, arity, memo):
    leaf_fn, split_fn = (ctd_leaf, ctd_split) if upper else (dominated_leaf, dominated_split)
    leaf_fn = functools.partial(leaf_fn, memo=memo)
    final, _, _, stages, cert = compose_mod._execute(plan, meshes, budgets, backend, max_buckets,
                                                     leaf_fn=leaf_fn, split_fn=split_fn)
    charges = (cert["truncation"] + cert["wrap"] + cert["roundoff"]) * (1 + 8 * _U)
    cert = {"truncation": cert["truncation"], "wrap": cert["wrap"], "roundoff": cert["roundoff"],
            "log_mass": cert["log_mass"], "log_rel": cert["log_rel"], "bound": "upper" if upper else "lower"}
    return DirectionResult(final, p_inf, 0.0, charges, tuple(stages), cert, f"dominance(arity={arity})")


class DominancePLD(PrivacyLossDistribution):
    """A composition certified by dominance: its upper curve comes from a dominating PMF, its
    lower curve from a dominated one, with no epsilon shift (see :mod:`fastpld.dominance`).

    ``directions`` holds the dominating chain's results (as for the other methods: ``stages``,
    ``method``, ``delta_spent``), ``lower_directions`` the dominated chain's.  ``eps_spent`` is 0.
    Bounds per direction, with ``d`` the curve of a finite grid PMF and ``c`` its chain's delta
    charges (truncated tails, wrap-around, round-off: total variation):

        delta(eps) <= p_inf + (1 - p_inf) e^r (d_up(eps) + c_up)
        delta(eps) >= p_inf + (1 - p_inf) (m d_lo(eps) - c_lo)

    where ``m <= 1`` is the mass the dominated chain kept (its PMF is normalised for the FFTs) and
    ``r`` the relative rounding of the dominating chain's masses (leaves and re-discretisations:
    entries within a factor ``e^(+-rel)`` of exact ones compose into such a factor on the curve).
    The estimate is the midpoint of the certified interval.
    """

    def __init__(self, upper, lower, eps_error, delta_error, events, backend):
        super().__init__(upper, eps_error, delta_error, events, backend)
        self.lower_directions = lower
        self._ql = {name: _Query(d.pmf, backend == "native") for name, d in lower.items()}

    def _reference_width(self) -> float:
        """Largest certified width of ``epsilon(delta)`` over the reference deltas that certify."""
        width = 0.0
        for d in _REFERENCE_DELTAS:
            try:
                b = self.epsilon(d)
            except ValueError:
                continue
            width = max(width, b.upper - b.lower)
        return width

    def delta(self, epsilon) -> Bounds:
        """Bounds on ``delta(epsilon)``; ``epsilon`` a float >= 0 or an array of them."""
        eps = V.query_array("epsilon", epsilon, lo=0.0)
        if np.isinf(eps).any():
            raise ValueError("epsilon must be finite")
        lo = up = None
        for name, d in self.directions.items():
            dl = self.lower_directions[name]
            pinf = d.p_inf
            du, pu = self._q[name].delta(eps)
            f = math.exp(d.certificate["log_rel"]) * (1 + 8 * _U)
            u = np.minimum(1.0, (pinf + (1 - pinf) * np.minimum(1.0, f * (du + pu + d.delta_spent))) * (1 + 8 * _U))
            m = math.exp(dl.certificate["log_mass"]) * (1 - 8 * _U)
            dd, pl = self._ql[name].delta(eps)
            l = (pinf + (1 - pinf) * np.maximum(0.0, m * (dd - pl) - dl.delta_spent)) * (1 - 8 * _U)
            lo = l if lo is None else np.maximum(lo, l)
            up = u if up is None else np.maximum(up, u)
        return _pack(lo, 0.5 * (lo + up), up, np.ndim(epsilon) == 0)

    def epsilon(self, delta) -> Bounds:
        """Bounds on ``epsilon(delta)`` (the smallest eps with ``delta(eps) <= delta``), clipped at 0.

        Raises ``ValueError`` if ``delta`` is outside ``(0, 1]`` or too small to certify a finite
        upper bound (at or below the mass at infinity plus the delta charges).
        """
        dq = V.query_array("delta", delta, lo=0.0, hi=1.0, lo_open=True)
        one = dq >= 1.0
        lo = up = None
        for name, d in self.directions.items():
            dl = self.lower_directions[name]
            q, ql = self._q[name], self._ql[name]
            pinf = d.p_inf
            if (dq[~one] <= pinf).any():
                raise ValueError(
                    f"delta={float(np.min(dq[~one])):.3g} is at or below the probability of an infinite privacy "
                    f"loss ({pinf:.3g}): no finite epsilon exists")
            if pinf >= 1.0:
                z = np.zeros(dq.shape)
                lo, up = (z if a is None else a for a in (lo, up))
                continue
            base = (dq - pinf) / (1 - pinf)
            x_up = base / (math.exp(d.certificate["log_rel"]) * (1 + 8 * _U)) - d.delta_spent
            x_up = x_up - q.bracket_pad(np.maximum(x_up, 0.0))
            if (x_up[~one] <= 0).any():
                raise ValueError(
                    f"delta={float(np.min(dq[~one])):.3g} is too small to certify: the composition spent a delta error "
                    f"of {d.delta_spent:.3g}; compose with a smaller delta_error")
            u = q.epsilon(x_up)
            u = u + q.eps_pad(u)
            m = math.exp(dl.certificate["log_mass"]) * (1 - 8 * _U)
            l = ql.epsilon(np.minimum((base + dl.delta_spent) / m + ql.pad, 2.0))
            l = l - ql.eps_pad(l)
            lo = l if lo is None else np.maximum(lo, l)
            up = u if up is None else np.maximum(up, u)
        lo = np.where(one, 0.0, np.maximum(lo, 0.0))
        up = np.where(one, 0.0, np.maximum(up, 0.0))
        lo = np.minimum(lo, up)
        return _pack(lo, 0.5 * (lo + up), up, np.ndim(delta) == 0)
