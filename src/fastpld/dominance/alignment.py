"""Leaf meshes aligned on the losses' atoms (``docs/dominance.md``, "Meshes").

A chain's lattices are anchored on an atom of each leaf (:attr:`fastpld.discretize.GridPMF.anchor`); another atom
off them costs the dominated chain first order: its leaf and splits move it down to the lattice point below, by
its distance from it in every copy, where a smooth part's error is second order in the mesh.  One loss's atoms
lie on every lattice of the plan where the coarsest mesh divides their spacing (or their common quantum); the
atoms of several losses rarely have a common quantum, but among the meshes a little finer than the planner's
some leave every atom close above a point of the coarsest lattice (:func:`_many_parts`).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..mechanisms import DiscreteLoss
from .masses import _atom_masses  # (the leaves' masses, hence their anchor)

_U = 2.0 ** -53
_QUANTUM_MAX_ATOMS = 16
_NEGLIGIBLE_ATOM = 1e-12  # (relative to the heaviest: leaf_mesh aligns its meshes with the others)
_QUANTUM_MAX_DEN = 64
_QUANTUM_MAX_RATIO = 1e4
# several losses' atoms: coarsest meshes down to 1/_ALIGN_FINER of the planner's, at most _ALIGN_CANDIDATES a
# spacing from the _ALIGN_SPACINGS heaviest; the modelled width within 1 + _ALIGN_SHARE of the planner's
_ALIGN_FINER = 4.0
_ALIGN_CANDIDATES = 2048
_ALIGN_SPACINGS = 8
_ALIGN_SHARE = 0.25
# ... and a spacing below G_t / _ALIGN_FINER itself (n = 1), down to G_t / _ALIGN_FAR: a spacing inside every cell
# of the coarsest lattice is a shift of its copies' mass times the spacing at any coarser mesh, a floor under the
# width that no rescaling by the planner's meshes lowers
_ALIGN_FAR = 64.0


def aligned_mesh(parts, R: float, h1: float, eps_model: float, far: bool = True) -> float:
    """The leaf mesh near ``h1`` (the planner's) whose lattices, the coarsest ``R h1``, hold the atoms of the
    ``parts`` (``(loss, copies)`` of one direction), or ``h1``.  ``eps_model``: the error the planner's meshes are
    expected to make (the atoms' first-order shift is weighed against it).  ``far``: several parts may take a
    spacing of theirs down to ``R h1 / _ALIGN_FAR`` (the direction that sets the width: another one's finer
    meshes cost time and narrow nothing that is asked)."""
    if len(parts) == 1:
        loss = parts[0][0]
        if not isinstance(loss, DiscreteLoss) and len(getattr(loss, "atoms", ())) == 0:
            return h1  # (no atoms to align: what the steps below return, without their small arrays)
        h = _one_part(loss, R, h1)
        if h != h1:
            return h
        offsets = [_offsets(parts[0][0])]
        if offsets[0][0].size < 2:
            return h
        # (atoms with no common quantum, a Poisson-subsampled randomized response's: weighed as several parts')
        return _many_parts(parts, R, h1, eps_model, far, offsets)
    return _many_parts(parts, R, h1, eps_model, far)


def _one_part(loss, R: float, h1: float) -> float:
    """The largest mesh at most ``h1`` on whose lattices, and on every coarser one of the plan, the atoms of a
    single loss with one or two atoms (or a common quantum) lie: their splits are then exact."""
    if isinstance(loss, DiscreteLoss):
        # (atoms of a negligible mass aside: one of 1e-15 beside two heavy ones -- a subsampled discrete loss's at
        # log(1 - q) where its base's pair has such a mass at L = -inf -- would leave the two without a common
        # lattice; off the lattices, it moves the curve by its mass times a mesh at most)
        pr = np.asarray(loss.probs, dtype=np.float64)
        pts = np.asarray(loss.values, dtype=np.float64)[pr > _NEGLIGIBLE_ATOM * float(pr.max())]
    else:
        pts = np.asarray(getattr(loss, "atoms", ()), dtype=np.float64)
    span = 0.0
    if 0 < pts.size <= 2:
        span = float(np.max(np.abs(pts)))
        if span > 0 and pts.size == 2 and abs(abs(pts[0]) - abs(pts[1])) > 1e-12 * span:
            span = abs(float(pts[1] - pts[0]))  # (a reversed direction lists its atoms in reverse)
    elif pts.size <= _QUANTUM_MAX_ATOMS and np.all(np.isfinite(pts)):
        # more atoms: their common quantum, if any (randomized response over c > 2 categories: -eps, 0, eps;
        # on lattices off it the width fell first order in the mesh, RR(0.5, 4) x 1e4 took five compositions
        # down to 2.4M-bucket FFTs, 3.8 s)
        span = _atom_quantum(pts)
    if span > 0:
        # the atoms (and those of every composition of them) on every lattice of the plan:
        # the coarsest mesh R h1 must divide span too
        M = max(1, math.ceil(span / (R * h1)))
        if not isinstance(loss, DiscreteLoss) and R * M < 2:
            # (a continuous part between two atoms at its support's ends -- a subsampled Laplace's -- takes two leaf
            # intervals at least: in one, a cell would hold both ends, whose integration rules each bound only
            # near one end; PoissonSubsampledLaplace(0.46, 0.00106) x 1 at rel_error 1e-2 was refused, its one
            # cell's error bound infinite.  The leaves now integrate such a cell in halves, quadrature._both_ends, which
            # answers these too; the floor is kept so that their meshes do not change)
            M = 2
        if isinstance(loss, DiscreteLoss):
            # (a power of two, at most M, for a discrete loss: the mesh span / (R M) is then exact where span is
            # (R is one too), and so are its lattice points on the atoms -- +-eps, and 0 -- whose splits are then
            # exact at every level; a mesh off by its rounding left an atom just below a point, and the dominated
            # leaf a whole mesh lower.  On its own lattices such a loss composes exactly: a coarser mesh costs
            # no width)
            M = 1 << (M.bit_length() - 1)
        aligned = span / (R * M)
        if aligned >= 1e-290:  # (atoms a few ulps of zero apart, PureDP(5e-324): the plain mesh)
            return aligned
    return h1


def _offsets(loss):
    """The atoms of ``loss`` less its leaf's anchor (the heaviest, as the leaves choose it) and their masses,
    negligible ones aside; none for a loss without atoms or with more than ``_QUANTUM_MAX_ATOMS``."""
    if isinstance(loss, DiscreteLoss):
        v = np.asarray(loss.values, dtype=np.float64)
        m = np.asarray(loss.probs, dtype=np.float64) * (1.0 - float(loss.p_inf))
    else:
        v = np.asarray(getattr(loss, "atoms", ()), dtype=np.float64)
        if not 1 < v.size <= _QUANTUM_MAX_ATOMS:
            return np.zeros(0), np.zeros(0)
        m = np.asarray(_atom_masses(loss, list(v))[0], dtype=np.float64)
    if not 1 < v.size <= _QUANTUM_MAX_ATOMS or not np.all(np.isfinite(v)):
        return np.zeros(0), np.zeros(0)
    top = int(np.argmax(m))
    keep = m > _NEGLIGIBLE_ATOM * float(m[top])
    keep[top] = False
    return v[keep] - v[top], m[keep]


def _many_parts(parts, R: float, h1: float, eps_model: float, far: bool = True, offsets=None) -> float:
    """The leaf mesh, among ``h1`` and those whose coarsest lattice's mesh ``G = R h`` divides one of the atoms'
    spacings from their anchors exactly (``G`` down to ``R h1 / _ALIGN_FINER``; where there are discrete parts
    with a common quantum of their atoms, only those that divide it), by a model of the width: the
    atoms' spacings ``o`` leave the first-order shift ``sum_atoms copies mass (o mod G)`` -- the dominated
    chain's lower bound moved down by it -- beside the planner's second-order error.  An atom within rounding
    below a lattice point costs nothing (the leaves move it up, charged its distance).  ``offsets``: the parts'
    :func:`_offsets`, where the caller has them.  Only the speed depends
    on the choice: every lattice is certified."""
    offs, wts, exact, exact_w = [], [], [], []
    for i, (loss, copies) in enumerate(parts):
        o, m = offsets[i] if offsets is not None else _offsets(loss)
        (exact if isinstance(loss, DiscreteLoss) else offs).append(o)
        (exact_w if isinstance(loss, DiscreteLoss) else wts).append(float(copies) * m)
    if not h1 > 0 or not any(o.size for o in offs + exact):
        return h1
    Gt = R * h1
    g = _atom_quantum(np.concatenate(exact)) if any(o.size for o in exact) else 0.0
    if g >= Gt / _ALIGN_FINER:
        # discrete parts: their compositions stay atoms, whose sums drift off a lattice that misses them by r, n r
        # after n copies, until the nodes' splits move them down by up to a mesh (first order at every level):
        # only the meshes dividing their common quantum (the other parts' atoms then weighed as below; a quantum
        # far below the planner's mesh leaves many atoms in a cell, which the splits treat as a density)
        n_lo = max(1, math.ceil(g / Gt))
        n_hi = max(n_lo, min(math.floor(g * _ALIGN_FINER / Gt), n_lo + _ALIGN_CANDIDATES - 1))
        cands = [np.array([Gt]), g / np.arange(n_lo, n_hi + 1, dtype=np.float64)]
    else:
        g = 0.0
        cands = [np.array([Gt])]
    # (the discrete parts' atoms weighed as the others': none off the lattices that divide their quantum)
    offs += exact
    wts += exact_w
    o, w = (np.concatenate(offs), np.concatenate(wts)) if offs else (np.zeros(0), np.zeros(0))
    for j in np.argsort(-w)[:_ALIGN_SPACINGS] if g == 0 else ():
        a = abs(float(o[j]))
        n_lo = max(1, math.ceil(a / Gt))
        n_hi = min(math.floor(a * _ALIGN_FINER / Gt), n_lo + _ALIGN_CANDIDATES - 1)
        if n_hi >= n_lo and a / n_lo >= 1e-290:
            cands.append(a / np.arange(n_lo, n_hi + 1, dtype=np.float64))
        elif far and n_hi < 1 and a >= Gt / _ALIGN_FAR and a >= 1e-290:
            cands.append(np.array([a]))
    G = np.concatenate(cands)
    r = np.mod(o[:, None], G[None, :])
    near = 64 * _U * (np.abs(o)[:, None] + G[None, :])
    r = np.where((r <= near) | (G[None, :] - r <= near), 0.0, r)
    shift = w @ r
    # the model's width at G: the planner's second-order error, scaled by (G / Gt)^2, plus the atoms' shift; the
    # coarsest G whose width is within (1 + _ALIGN_SHARE) of the planner's.  A mesh fixed while the planner's
    # shrinks soon leaves the set: the meshes follow its rescalings (a rule on the shift alone kept one mesh over
    # five of them)
    width = eps_model * (G / Gt) ** 2 + shift
    # (a spacing below G_t / _ALIGN_FINER only where its width is at most G / G_t of the planner's mesh's: the
    # buckets grow as G_t / G, and one taken for a direction whose width it did not set made a refused mix slower)
    width = np.where((G < Gt / _ALIGN_FINER * (1 - 1e-12)) & ~(width <= G / Gt * width[0]), np.inf, width)
    ok = width <= (1.0 + _ALIGN_SHARE) * eps_model
    if np.any(ok):
        best = int(np.argmax(np.where(ok, G, -np.inf)))
    else:
        # none the model expects to fit (the rescalings measure the width): the narrowest, where it is at most half
        # the planner's mesh's (two subsampled Laplaces: refused at rel_error 1e-4 with the planner's meshes), else
        # the planner's (a narrowest a little narrower took the meshes past what the leaves' mass error bounds
        # allow: PSG, PSL and a Poisson-subsampled randomized response, 3.9 s -> 19.5 s)
        best = int(np.argmin(width))
        if not width[best] <= 0.5 * width[0]:
            return h1
    if not float(G[best]) >= 1e-290:
        return h1  # (atoms a few ulps apart: the plain mesh)
    return float(G[best]) / R


def _atom_quantum(pts) -> float:
    """The largest ``g`` such that every point is an integer multiple of ``g`` to within ``1e-12`` of it (their
    ratios to the smallest nonzero one with denominators up to ``_QUANTUM_MAX_DEN``), or 0.  On a lattice of a
    mesh dividing ``g`` the points and all their sums lie on lattice points (an atom that misses one by its
    rounding is still split exactly: only the speed depends on it)."""
    a = np.abs(np.asarray(pts, dtype=np.float64))
    a = a[a > 0]
    if a.size == 0:
        return 0.0
    ref = float(a.min())
    if float(a.max()) > _QUANTUM_MAX_RATIO * ref:
        return 0.0  # (a quantum far below the atoms' spacing: no lattice of a useful mesh holds them all)
    den = 1
    for x in a:
        fr = Fraction(float(x) / ref).limit_denominator(_QUANTUM_MAX_DEN)
        if abs(float(fr) * ref - float(x)) > 1e-12 * float(x):
            return 0.0
        den = den * fr.denominator // math.gcd(den, fr.denominator)
        if den > _QUANTUM_MAX_DEN:
            return 0.0
    return ref / den
