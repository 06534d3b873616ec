"""Where a dominated leaf's lattice goes when the loss's mass crowds a finite support end (``docs/dominance.md``, "The
dominated leaf at a support end").

The balanced split (:func:`fastpld.dominance.splits._balanced_split`) puts a point's atoms on it where their merged
loss is at least the point.  Mass next to a support end and off the lattice cannot balance there -- at the lower end
the whole loss's balance ``sum a (1 - e^(-y))`` is ``1 - Q = 0``, at the upper end nothing lies above -- so it is
moved a part of a mesh down in every copy (PSG(0.52, 0.008) at mesh 0.0168: the leaf's mean 0.87 meshes low).  Any
lattice gives a dominated leaf; one through the point where that mass balances places it better.
"""
from __future__ import annotations

import math

import numpy as np

from .quadrature import _integrals

# A dominated leaf whose mean lies more than this many meshes below the loss's tries lattices anchored where the mass
# next to a support end balances: a well placed leaf is ~1e-3 meshes off, one whose end cell holds most of the mass off
# the lattice a good part of a mesh, in every copy
_ANCHOR_DEFICIT = 0.02
# ... kept only where its variance is at least this share of the default leaf's: on a mesh wider than the loss's
# spread the end cell holds nearly all of it, and anchored at its merged loss (~0) the leaf is nearly one atom, its
# mean right and its variance gone (PSG(1.19, 0.0013) at mesh 0.0018: 0.18 of the loss's against 0.40) -- a lower
# bound far below the default's once composed, and in a mix the widths then grew on finer meshes
_ANCHOR_VARIANCE = 0.9
_ANCHOR_STEPS = 8  # the upper end's fixed point: at most this many steps (any anchor gives a dominated leaf)
_ANCHOR_REACH = 8  # ... within this many meshes of the end (the mass it balances spreads over a few meshes there)


def rebalanced(loss, p, e, h: float, remake):
    """The dominated leaf of ``loss`` on a lattice through a balance point (:func:`_balance_anchors`), where its
    default leaf (masses ``p`` on the lattice ``e``, mesh ``h``) lies more than ``_ANCHOR_DEFICIT`` meshes low and the
    new one's mean is higher with a variance at least ``_ANCHOR_VARIANCE`` of its; else ``None``.
    ``remake(anchor)``: ``(masses, data)``, the
    leaf's masses ``(p, kept, tv)`` and lattice data on that anchor (the leaf's own construction).  Returns the best
    ``remake`` result."""
    deficit, mean = _mean_deficit(loss, p, e)
    if not deficit > _ANCHOR_DEFICIT * h:
        return None
    var = _variance(p, e, mean)  # (only here: the check runs on every dominated leaf, this pass only where it fires)
    best = None
    for alt in _balance_anchors(loss, e, h):
        masses, data = remake(alt)
        dd, mm = _mean_deficit(loss, masses[0], data[0])
        if dd < deficit and masses[1] > 0:
            vv = _variance(masses[0], data[0], mm)
            if vv >= _ANCHOR_VARIANCE * var:
                deficit, var, best = dd, vv, (masses, data)
    return best


def _mean_deficit(loss, p, e) -> tuple:
    """``(d, m)``: how far the mean ``m`` of the masses ``p`` on the lattice ``e`` lies below ``loss``'s mean
    (``d = -inf`` where the loss has no mean or ``p`` no mass)."""
    try:
        mu = float(loss.mean())
    except (NotImplementedError, AttributeError, TypeError, ValueError):
        return -math.inf, math.nan
    tot = float(np.sum(p))
    if not (math.isfinite(mu) and tot > 0):
        return -math.inf, math.nan
    # (np.sum of products, not np.dot: a dot of this length wakes OpenBLAS's threads, which then spin on the other
    # core while the chains' FFTs run there -- PSG(0.8, 0.001) x 1e5 took 13.5 ms against 8.5)
    m = float(np.sum(p * e)) / tot
    return mu - m, m


def _variance(p, e, m: float) -> float:
    """The variance of the masses ``p`` on the lattice ``e`` about their mean ``m`` (:func:`_mean_deficit`'s)."""
    return float(np.sum(p * (e - m) ** 2)) / float(np.sum(p))


def _merged_loss(loss, lo: float, w: float) -> float | None:
    """The loss of the interval ``(lo, lo + w]`` merged into one atom, ``lo + log(A / B)`` (its masses under the two
    distributions, :func:`fastpld.dominance.quadrature._integrals`), or ``None`` where either is not positive."""
    a, _, _, _, b, _ = _integrals(loss, np.array([float(lo)]), np.array([float(w)]))
    a, b = float(a[0]), float(b[0])
    if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
        return None
    return float(lo) + math.log(a / b)


def _balance_anchors(loss, e, h: float) -> list:
    """Lattice anchors for the dominated leaf of a loss whose mass crowds a finite support end inside the window
    ``e``.  At the lower end ``s``: the point ``P = `` the merged loss of ``[s, s + h)`` -- the cell below ``P`` holds
    ``[s, P)``, and with the next cell's atoms (above ``P``) it merges at or above ``P``.  At the upper end ``s``:
    ``P`` the merged loss of ``[P - h, s]`` (a fixed point, by iteration from ``(s - h, s]``'s): the cell below ``P``
    and those above it then merge at exactly ``P`` (the points above ``P``, where they cannot balance, send their
    atoms below them down to ``P``).  Any anchor gives a dominated leaf; these only place it better."""
    out = []
    s_lo, s_hi = getattr(loss, "support", (-math.inf, math.inf))
    if math.isfinite(s_lo) and e[0] - h <= s_lo <= e[-1] - h:
        p = _merged_loss(loss, s_lo, h)
        if p is not None and s_lo < p < s_lo + h:
            out.append(p)
    if math.isfinite(s_hi) and e[0] + h <= s_hi <= e[-1] + h:
        p = _merged_loss(loss, s_hi - h, h)
        for _ in range(_ANCHOR_STEPS):
            if p is None or not s_hi - _ANCHOR_REACH * h < p < s_hi:
                break
            nxt = _merged_loss(loss, p - h, s_hi - p + h)
            if nxt is None or abs(nxt - p) <= 1e-3 * h:
                p = nxt if nxt is not None else p
                break
            p = nxt
        if p is not None and s_hi - _ANCHOR_REACH * h < p < s_hi:
            out.append(p)
    return out
