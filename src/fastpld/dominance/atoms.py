"""Atoms on a dominance lattice in exact arithmetic: the leaves of discrete losses (pure DP, randomized response,
approximate DP, custom PMFs) in both chains, and the dominated leaf's placement of a continuous loss's atoms
(``docs/dominance.md``, "The lower (dominated) chain").  A lattice's point ``j`` stands for ``origin + j h``
exactly; an atom's point and offset are computed from that, so nothing is charged for positions but the exact
distance an atom is moved up."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .._limits import BucketLimitError
from ..composition.roundoff import _dyadic, _rounded
from ..discretize import GridPMF
from ..mechanisms import DiscreteLoss

_U = np.finfo(np.float64).eps / 2  # unit roundoff


def _check_size(n, h, a, b, max_buckets):
    """A leaf's lattice of ``n`` points (mesh ``h`` over ``[a, b]``) within ``max_buckets``, else refused."""
    if n > max_buckets:
        raise BucketLimitError(
            f"discretising the privacy loss needs {n} buckets (mesh {h:.3g} over [{a:.4g}, {b:.4g}]), more than "
            f"max_buckets={max_buckets}; increase the accuracy target or max_buckets", n)


def _exact_points(ys, masses, fo: Fraction, fh: Fraction, near, move_up: bool, top=None):
    """Each value ``y`` of ``ys`` on the lattice of points ``fo + j fh`` (exact rationals): ``(j, off, tv)``, its point
    at or below it and its exact offset above that point.  ``move_up`` (a dominated leaf): a value within
    ``near[i]`` (its float positions' rounding) below the next point -- below ``top`` points, where given -- goes
    onto that point instead (offset 0), charged its mass (``masses``, rounded up) times its exact distance (raising a
    loss by ``d`` raises the curve by at most its mass times ``d``, docs/dominance.md); ``tv``: their sum, with its
    rounding.  The discrete leaves and the dominated leaf's atoms place theirs by it."""
    js, offs, tv = [], [], 0.0
    for y, ma, nr in zip(ys, masses, near):
        t = (Fraction(float(y)) - fo) / fh
        j = math.floor(t)
        off = (t - j) * fh  # (>= 0: the distance above point j)
        if move_up and (top is None or j + 1 < top) and float(fh - off) <= nr:
            tv += float(ma) * float(fh - off) * (1 + 4 * _U)
            j, off = j + 1, Fraction(0)
        js.append(j)
        offs.append(off)
    return js, offs, tv * (1 + 2 * (len(js) + 2) * _U)


def _atom_places(atoms, masses, e, h: float, origin):
    """The dominated leaf's atoms on its lattice (point ``j`` stands for ``origin + j h`` exactly, ``origin`` a
    :func:`~fastpld.composition.roundoff._dyadic` pair): ``(j, s, tv)``, each atom's point at or below it and its
    offset ``s`` above that point, rounded down (its loss only lower), in exact arithmetic (a few atoms).  An atom
    within rounding below the next point -- a mesh that divides the atoms' spacing but not exactly in floats (the
    planner's aligned meshes) -- goes onto that point instead, charged (:func:`_exact_points`); else its balanced
    split would take it a whole mesh down, a first-order loss in every copy (a subsampled Laplace's second atom, a
    third of the mass: its lower bound 7.3 for a true 16.75 at 38,766 copies, the composition refused at every mesh
    down to 8M-bucket FFTs).  One within rounding above a point goes down onto it (only lower)."""
    e0 = abs(float(e[0])) if e.size else 0.0
    near = [8 * _U * (abs(float(y)) + e0 + h) for y in atoms]  # (the float positions' rounding)
    js, offs, tv = _exact_points(atoms, masses, Fraction(origin[0], 1 << origin[1]), Fraction(h), near, True,
                                 e.size)
    pj, ps = [], []
    for j, off, nr in zip(js, offs, near):
        if float(off) <= nr:
            off = Fraction(0)  # (moved down onto its point: only lower, and the split keeps it whole there)
        x = float(off)
        if Fraction(x) > off:  # (rounded down)
            x = math.nextafter(x, -math.inf)
        pj.append(min(max(j, 0), e.size - 1))
        ps.append(max(x, 0.0))
    return pj, ps, tv


def _discrete_leaf(loss: DiscreteLoss, h: float, max_buckets: int, upper: bool) -> GridPMF:
    v = np.asarray(loss.values, dtype=np.float64)
    pr = np.asarray(loss.probs, dtype=np.float64)
    lat = float(v[0])
    span = (float(v[-1]) - lat) / h + 2
    _check_size(span, h, lat, float(v[-1]), max_buckets)
    # each atom's lattice point at or below it (the lattice's points are exactly lat + j h) and its distance d above
    # it, in exact rational arithmetic (a few atoms): no position is rounded, none is charged (the float positions
    # had charged 8 u (|v| + |lat| + h) per copy: 1.8e-9 at PureDP(0.1) x 1e7).  The dominated leaf keeps each
    # atom at its point but one within rounding below the next point (a mesh not dividing the atoms' spacing
    # exactly, in floats): moved up onto that point, charged its exact distance, not a whole mesh down
    if v.size > _EXACT_ATOMS:
        return _discrete_leaf_float(v, pr, lat, h, upper)
    # (the lattice through the heaviest atom, which anchors the chain's coarser lattices: GridPMF.anchor; its
    # first point lat + i0 h at or below the lowest atom)
    anchor = float(v[int(np.argmax(pr))])
    fa, fh = Fraction(anchor), Fraction(h)
    i0 = math.floor((Fraction(lat) - fa) / fh)
    fl = fa + i0 * fh
    js, offs, tv_pos = _exact_points(v, pr, fl, fh, [8 * _U * (abs(float(x)) + abs(lat) + h) for x in v], not upper)
    j = np.array(js, dtype=np.int64)
    d = np.array([float(off) for off in offs])
    return _discrete_pmf(j, d, pr, (fl.numerator, fl.denominator.bit_length() - 1), h, upper, tv_pos, anchor)


# discrete losses with more atoms than this place them in floating point (charged): the exact placement costs ~10 us
# an atom in Python (a CustomPMF of 10,000 atoms: 0.1 s a leaf); pure DP, randomized response, approximate DP have 2-3
_EXACT_ATOMS = 64


def _discrete_leaf_float(v, pr, lat: float, h: float, upper: bool) -> GridPMF:
    """:func:`_discrete_leaf` in floating point: each atom's point at or below it, an atom within rounding of a
    point counted as on it, and every copy charged its atoms' position error (moving mass up by ``|d|`` changes the
    curve by at most mass times it)."""
    t = (v - lat) / h
    j = np.floor(t + 8 * _U * (np.abs(t) + 1)).astype(np.int64)
    d = v - (lat + j * h)
    noise = np.minimum(d, 0.0)
    d = np.maximum(d, 0.0)
    # (the computed displacements: the sum's rounding, (n + 2) u relative, and every atom's position
    # error against the exact lattice point lat + j h, at most 8 u (|v| + |lat| + h) per unit of mass)
    tv_pos = (float(np.sum(pr * -noise)) * (1 + 2 * (v.size + 2) * _U)
              + 8 * _U * (float(np.max(np.abs(v))) + abs(lat) + h) * (1 + (v.size + 1) * _U))
    return _discrete_pmf(j, d, pr, _dyadic(lat), h, upper, tv_pos)


def _with_anchor(pmf: GridPMF, lat: float) -> GridPMF:
    """``pmf`` with its lattice anchored at the atom ``lat`` (:attr:`GridPMF.anchor`; 0: none)."""
    if lat != 0.0:
        pmf.anchor = _dyadic(lat)
    return pmf


def _discrete_pmf(j, d, pr, origin, h: float, upper: bool, tv_pos: float, anchor: float = 0.0) -> GridPMF:
    """The discrete leaf's PMF from its atoms' points ``j`` and distances ``d`` above them (fact 5 for the
    dominating leaf, each atom on its point for the dominated one); point ``j`` is ``origin + j h`` exactly (a
    :func:`~fastpld.composition.roundoff._dyadic` pair), ``anchor`` the atom its chain's lattices are anchored at."""
    n = int(j[-1]) + 2
    p = np.zeros(n)
    if upper:
        w = np.where(d > 0, np.minimum(1.0, -np.expm1(-np.maximum(d, 0.0)) / -math.expm1(-h) + 8 * _U), 0.0)
        np.add.at(p, j, pr * (1 - w))
        np.add.at(p, j + 1, pr * w)
    else:
        np.add.at(p, j, pr)
    p /= p.sum()
    pmf = _with_anchor(GridPMF(p, _rounded(origin, 1 if upper else -1), h, tv=tv_pos, origin=origin), anchor)
    # (the products, the sums into each entry and the normalisation: relative rounding; the
    # dominating leaf charges it as a factor, the dominated one lowers its mass by it)
    r = (math.log2(n) + 8 + np.max(np.bincount(j, minlength=n))) * 2 * _U
    if upper:
        pmf.rel = r
    else:
        pmf.mass = 1.0 - r
    return pmf
