"""The dominance certificate's re-discretisations: connect-the-dots onto a coarser lattice (dominating)
and the balanced split (dominated), with the compiled balanced split's numpy reference
(``docs/dominance.md``, facts 3-5)."""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import _kernels
from ..composition.roundoff import _dyadic_ratio, _dyadic_sum, _pairwise_gamma, _rounded
from ..discretize import GridPMF

_dom = None  # the compiled balanced split (FASTPLD_PURE_PYTHON=1 or no build: the reference below)
if _kernels._core is not None:
    try:
        from .. import _dominance as _dom  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - depends on the build
        _dom = None

_U = np.finfo(np.float64).eps / 2  # unit roundoff

_MARGIN = 1e-12  # relative margin of every balance against the rounding of its terms


def _claimed_mass(ratio: float, n: int, rel: float = 0.0) -> float:
    """The mass a dominated PMF claims (:attr:`GridPMF.mass`, ``<= 1``): ``ratio`` (what it kept of its input's mass,
    from numpy's pairwise sums; its ``n`` entries are its masses divided by their sum) lowered by ``rel`` (the input
    mass's own error, relative), by ``16 u`` (each entry's division and the products here) and by twice the pairwise
    sum's error bound (:func:`fastpld.composition.roundoff._pairwise_gamma`): the stored entries sum to at least
    ``(1 - u) / (1 + gamma)``, and the nodes normalise their inputs, so a sum ``1 - theta`` would leave
    ``(1 - theta)^k`` of the mass after ``k`` copies.  Every copy pays it: ``O(log n) u``, not a running sum's
    ``(n - 1) u`` (docs/dominance.md, "Mass")."""
    return min(ratio * (1.0 - rel - 16 * _U - 2 * _pairwise_gamma(n)), 1.0)


def _balanced_split(j, s, a, H, n, cell=4, bounded=False, half_first=True):
    """Atoms of mass ``a`` at ``j H + s`` (``0 <= s < H``, sorted) onto the lattice points ``0..n-1``
    (times ``H``), dominated; returns the masses per point (summing to ``a.sum()`` but for rounding).

    The points are taken in increasing order.  Point ``g`` receives every atom left below it, then
    atoms (or, for the last one, a fraction) of its interval ``[g H, (g + 1) H)`` until its
    *balance* ``sum a (1 - e^(g H - y))`` over what it received is >= 0: the merged atom (a
    post-processing of the pair, hence dominated) then has loss >= ``g H``, and it is moved down onto
    the point keeping its mass ``sum a`` under the first distribution (each hinge ``a (1 - e^(eps - y))_+``
    only falls as ``y`` does: ``docs/dominance.md``, fact 4).  Where the support is sparse (atoms further
    apart than ``H``), a cell takes atoms past the next point; the points in between receive nothing.
    Balances are made exactly zero (up to a relative margin against rounding).  A cell that its interval
    cannot balance (at the top end of the support) keeps the atoms at or above its point (each has a loss at
    least the point's, so has their merge) and sends those left below it to the point below, each keeping its
    mass (their losses are at least that point's); it sent all but the atoms on its point down, and a heavy atom
    a little above the top point went a whole mesh down in every copy (a subsampled Laplace's: -0.41 meshes of
    mean a copy).  The first cell also takes the lower
    half of its interval (an atom on the midpoint half); starting the cells' boundaries at the midpoints
    keeps them there (the boundaries' offsets follow a neutral recursion, so a bad start would persist).
    No mass is lost.  ``cell`` bounds the atoms per cell for the rounding of the sums (the result is
    lowered by it).

    ``bounded``: a point takes atoms of its own interval only (but for the first cell's lower half, none past it):
    where they cannot repay the atoms left below it, those go to the point below, as at the top end.  Each point's
    debt is ``e^x - 1`` per unit of an atom ``x`` below it, and an atom ``x`` above repays at most ``1 - e^-x``: on
    meshes of about 1 and more the unbounded split's points reach further and further up for atoms to repay it,
    and a decaying tail -- each interval lighter than the one below -- is swept down whole (one copy of a Gaussian
    at ``mu = 100`` on a mesh of 3.9: 4 meshes low on average, nothing above ``mu^2 / 2 + 2.8 mu``).  Bounded, such
    a tail's atoms go to their intervals' lower points (first order, as rounding down).

    ``half_first=False``: the first cell takes no part of its interval (atoms on its point only), so that its
    interval's atoms are repaid as the next point's debt.  The dominated leaf of a loss with atoms tries it
    (``leaves._other_start``): its cells hold one merged atom each, at about the middle of the interval, and the rule
    took the first interval's atom whole half a mesh down -- first order where a support end's atom holds the first
    point (a subsampled Laplace on a 20th of its atoms' spacing: 2% of the mass, its lower bound 0.06 low at 10,000
    copies).
    """
    j = np.ascontiguousarray(j, dtype=np.int64)
    s = np.ascontiguousarray(s, dtype=np.float64)
    a = np.ascontiguousarray(a, dtype=np.float64)
    out = (_dom.balanced_split(j, s, a, float(H), int(n), _MARGIN, bool(bounded), bool(half_first)) if _dom is not None
           else _balanced_split_py(j, s, a, float(H), int(n), _MARGIN, bool(bounded), bool(half_first)))
    return out * _split_lower(cell)


def _split_lower(cell: int) -> float:
    """The factor lowering the balanced split's masses for the rounding of its sums (at most ``cell`` atoms a
    cell; :func:`_balanced_split`, and the dominated leaf's compiled ``_dominance.dominated_cells``)."""
    return 1 - 8 * _U * (cell + 3)


def _balanced_split_py(j, s, a, H, n, margin, bounded=False, half_first=True):
    """Reference of the compiled kernel :func:`fastpld._dominance.balanced_split` (same operations)."""
    out = np.zeros(n)
    m = a.size
    i = 0
    r = 1.0
    started = False
    for g in range(n):
        bal = neg = acc = acc0 = acc_lo = acc_hi = 0.0
        first = half_first and not started
        while i < m and j[i] < g:
            x = (g - j[i]) * H - s[i]
            c = r * a[i] * math.expm1(x)
            bal -= c
            neg += c
            acc += r * a[i]
            acc_lo += r * a[i]
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
                    acc += f * a[i]
                    acc_hi += f * a[i]
                    r -= f
                    if r > 0.0:
                        break
                    i += 1
                    r = 1.0
                    continue
                break
            if bounded and j[i] > g:  # (what its interval cannot repay: not balanced, below)
                break
            c = r * a[i] * -math.expm1(-x)
            if c > need:
                f = need / (a[i] * -math.expm1(-x))
                acc += f * a[i]
                acc_hi += f * a[i]
                r -= f
                bal += f * a[i] * -math.expm1(-x)
                break
            bal += c
            acc += r * a[i]
            acc_hi += r * a[i]
            i += 1
            r = 1.0
        if acc + acc0 > 0.0:
            started = True
        if bal >= 0.5 * margin * neg:  # (the target was margin * neg: up to its rounding)
            out[g] += acc + acc0
        else:  # the top end: atoms at or above the point stay, those left below go down (each >= that point)
            out[g] += acc0 + acc_hi
            if acc_lo > 0.0:
                out[g - 1] += acc_lo
    return out


def _split_prep(pmf: GridPMF, mesh: float):
    """The atoms' masses (float64), their positions in units of ``mesh`` and those positions' rounding."""
    p = np.asarray(pmf.probs, dtype=np.float64)
    i = np.arange(p.size, dtype=np.float64)
    t = (pmf.offset + pmf.mesh * i) / mesh
    # absolute error of t: of the sum offset + mesh i (relative to its terms), of the division
    slack = 8 * _U * ((abs(pmf.offset) + pmf.mesh * i) / mesh + np.abs(t) + 2)
    return p, t, slack


def _ctd_split_py(pmf: GridPMF, mesh: float):
    """Reference of the compiled :func:`fastpld._dominance.ctd_split`: ``(out, j0)``."""
    p, t, slack = _split_prep(pmf, mesh)
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
    return out, j0


def _anchored(split, side: int):
    """``split`` (its offsets rounded towards ``side``: up for the dominating split, every atom at or above its
    point, down for the dominated one) onto the lattice ``pmf.anchor + mesh * Z`` instead of ``mesh * Z``: the same
    split of ``pmf`` shifted by its anchor (exactly: its ``origin``), the result shifted back (every position
    relative, so the split and its charges are those of the shifted PMF).  A loss's atoms and all their sums then
    lie on the chain's coarser lattices where the meshes divide their spacing (the planner's for one or two atoms),
    as they did only for atoms at multiples of the mesh: a subsampled randomized response's two atoms composed 61
    times were split onto lattices off them, the dominated chain's epsilon 0.1% low at every mesh."""
    @functools.wraps(split)
    def run(pmf: GridPMF, mesh: float, native: bool = False) -> GridPMF:
        a = pmf.anchor
        if a is None or a[0] == 0 or pmf.origin is None:
            return split(pmf, mesh, native)
        rel = _dyadic_sum([(1, pmf.origin), (-1, a)])
        res = split(GridPMF(pmf.probs, _rounded(rel, side), pmf.mesh, origin=rel), mesh, native)
        res.origin = _dyadic_sum([(1, res.origin), (1, a)])
        res.offset = _rounded(res.origin, side)
        res.anchor = a
        return res
    return run


def _ctd_split_exact_py(p: np.ndarray, n0: int, R: int, hin: float, mesh: float):
    """Reference of the compiled :func:`fastpld._dominance.ctd_split_exact`: ``(out, j0)`` for atoms at exactly
    ``(n0 + i) hin`` and ``mesh = R hin``: each share sent up one of ``R`` values, raised by ``10 u`` (0 on a point)."""
    r = np.arange(R, dtype=np.float64)
    ws = np.minimum(-np.expm1(-(r * hin)) / -math.expm1(-mesh) + 10 * _U, 1.0)
    ws[0] = 0.0  # (an atom on a lattice point stays on it: exactly)
    q = n0 + np.arange(p.size, dtype=np.int64)
    j = q // R
    w = ws[q - j * R]
    j0 = int(n0 // R)
    out = np.zeros(int((n0 + p.size - 1) // R) - j0 + 2)
    nz = p != 0
    np.add.at(out, j[nz] - j0, p[nz] * (1 - w[nz]))
    np.add.at(out, j[nz] - j0 + 1, p[nz] * w[nz])
    return out, j0


_EXACT_CTD_MAX_R = 4096  # (ctd_split_exact's table of shares: at most this many)


def _ctd_split(pmf: GridPMF, mesh: float, native: bool = False) -> GridPMF:
    """Connect-the-dots re-discretisation onto the lattice ``mesh * Z`` (dominates ``pmf``); ``native``: the
    compiled kernel (one pass), else its numpy reference.

    Where ``pmf``'s exact positions lie on a lattice nested in the target (:func:`_exact_nesting`: the chains'
    splits of a loss without atoms), the shares come from the exact offsets, ``R`` of them (``ctd_split_exact``: no
    ``expm1`` per atom, and no allowance for the positions' rounding, which raised every share by ``~8 u |t|``)."""
    p = np.ascontiguousarray(pmf.probs, dtype=np.float64)
    nest = _exact_nesting(pmf, mesh)
    if nest is not None and nest[1] <= _EXACT_CTD_MAX_R:
        if native and _dom is not None:
            out, j0 = _dom.ctd_split_exact(p, nest[0], nest[1], float(pmf.mesh), float(mesh))
        else:
            out, j0 = _ctd_split_exact_py(p, nest[0], nest[1], float(pmf.mesh), float(mesh))
    elif native and _dom is not None:
        out, j0 = _dom.ctd_split(p, float(pmf.offset), float(pmf.mesh), float(mesh))
    else:
        out, j0 = _ctd_split_py(pmf, mesh)
    cast = _U if np.asarray(pmf.probs).dtype != np.float64 else 0.0  # (a long double node's cast: relative)
    ratio = mesh / pmf.mesh
    # (the lattice's offset j0 mesh rounded up: every atom at or above the point it was split onto)
    origin = _dyadic_sum([(j0, mesh)])
    res = GridPMF(out, _rounded(origin, 1), mesh, origin=origin)
    # every output entry is a sum of at most ratio + 2 positive products (in any order): relative rounding
    res.rel = cast + 2 * (ratio + 3) * _U
    return res


def _dominated_prep_py(pmf: GridPMF, mesh: float):
    """Reference of the compiled :func:`fastpld._dominance.dominated_prep`: ``(j - j0, s, tv, j0, m)``."""
    p, t, slack = _split_prep(pmf, mesh)
    # atoms within rounding of a lattice point sit on it (moved up by at most 2 slack * mesh -- slack from the
    # computed position to the point, at most slack more to the exact position --: the curve moves by at most that
    # mass times it, charged); the others at their exact offset, rounded down
    r = np.rint(t)
    on = np.abs(t - r) <= slack
    tv = 2.0 * float(np.sum(p[on] * slack[on])) * mesh
    t = np.where(on, r, t - slack)
    j = np.floor(t).astype(np.int64)
    s = np.where(on, 0.0, np.clip((t - j) * mesh, 0.0, mesh))
    j0 = int(j[0])
    return j - j0, s, tv, j0, int(j[-1]) - j0 + 2


def _exact_nesting(pmf: GridPMF, mesh: float):
    """``(n0, R)`` where ``pmf``'s atoms lie at exactly ``(n0 + i) h`` (its exact ``origin``) and ``mesh = R h``,
    both integers (``h`` its mesh), else ``None``."""
    if pmf.origin is None:
        return None
    R = _dyadic_ratio(mesh, pmf.mesh)
    n0 = _dyadic_ratio(pmf.origin, pmf.mesh)
    if R is None or n0 is None or R < 1 or abs(n0) + np.asarray(pmf.probs).size + R >= 1 << 62:
        return None
    return n0, R


def _dominated_prep_exact_py(n: int, n0: int, R: int, hin: float):
    """Reference of the compiled :func:`fastpld._dominance.dominated_prep_exact`: ``(j - j0, s, 0, j0, m)``."""
    q = n0 + np.arange(n, dtype=np.int64)
    j = q // R
    r = q - j * R
    s = (r.astype(np.float64) * hin) * (1 - 2 * _U)
    j0 = int(j[0])
    return j - j0, s, 0.0, j0, int(j[-1]) - j0 + 2


def _dominated_split(pmf: GridPMF, mesh: float, native: bool = False) -> GridPMF:
    """Re-discretisation onto ``mesh * Z`` dominated by ``pmf`` (:func:`_balanced_split`); ``native``: the
    atoms' cells from the compiled kernel, else its numpy reference.

    Where ``pmf``'s exact positions lie on a lattice nested in the target (:func:`_exact_nesting`: every node
    and split of the dominance chains of a loss without atoms), each atom's cell and offset are exact integers
    (the offset times the input mesh rounded down): an atom on a lattice point is known to be on it.  Elsewhere
    the positions are computed in floating point, and an atom within their rounding of a lattice point is
    placed on it and charged (``tv``: it may lie just below; ~16 u |v| of the mass on such points per copy,
    1/R of it on a nested lattice -- 6.3e-11 over the 40,000 copies of a re-discretisation at q = 1e-4 x 1e7)."""
    p = np.ascontiguousarray(pmf.probs, dtype=np.float64)
    cast = _U if np.asarray(pmf.probs).dtype != np.float64 else 0.0  # (a long double node's cast: relative)
    nest = _exact_nesting(pmf, mesh)
    if nest is not None:
        if native and _dom is not None:
            j, s, tv, j0, m = _dom.dominated_prep_exact(p.size, nest[0], nest[1], float(pmf.mesh))
        else:
            j, s, tv, j0, m = _dominated_prep_exact_py(p.size, nest[0], nest[1], float(pmf.mesh))
    elif native and _dom is not None:
        j, s, tv, j0, m = _dom.dominated_prep(p, float(pmf.offset), float(pmf.mesh), float(mesh))
    else:
        j, s, tv, j0, m = _dominated_prep_py(pmf, mesh)
    ratio = mesh / pmf.mesh
    out = _balanced_split(j, s, p, mesh, m, cell=int(ratio) + 2)
    total = float(out.sum())
    origin = _dyadic_sum([(j0, mesh)])
    res = GridPMF(out / total, _rounded(origin, -1), mesh, tv=tv, origin=origin)  # (rounded down: at or below)
    # (the output was lowered by its rounding; the input's sum, pairwise, is at most gamma below its exact one, and
    # the cast lowers its mass; see _claimed_mass for the output's sum)
    res.mass = _claimed_mass(total / float(p.sum()), out.size, 2 * cast + 2 * _pairwise_gamma(p.size))
    return res


ctd_split, dominated_split = _anchored(_ctd_split, 1), _anchored(_dominated_split, -1)
