"""The law of one copy of a base mechanism's likelihood ratio on a linear lattice, with every rounding one-sided:
certified CDF and survival bounds of a base loss, and the second-order constructions of random allocation's
copies (:mod:`fastpld.allocation`; ``docs/samplers.md``, "RandomAllocation").

With ``(A, B)`` the base's remove pair and ``L = dA/dB``, the lattice's buckets ``(x_k, x_(k+1)]`` carry bounds on
their ``B``-mass and their first moment ``E_B[L; bucket] = A(bucket)``; the dominated copies are contractions of
the pair into groups whose ratio is a lattice point (:func:`_contract_down`, :func:`_contract_up`), the dominating
ones connect-the-dots spreads (:func:`_spread`, :func:`_spread_pair`).  Every output is a one-sided CDF bound.
"""
from __future__ import annotations

import math

import numpy as np

from .mechanisms import ContinuousLoss, DiscreteLoss, PrivacyLoss

_U = np.finfo(np.float64).eps / 2


# --------------------------------------------------------------------------------------
# Certified CDF bounds of a base loss
# --------------------------------------------------------------------------------------
def _pos_err(loss: PrivacyLoss, y: np.ndarray) -> np.ndarray:
    """Bound on the position error of evaluating ``loss``'s CDF at the rounded ``y``."""
    ay = np.abs(np.where(np.isfinite(y), y, 0.0))
    shift = loss.cdf_shift(float(ay.max()) if ay.size else 0.0) if isinstance(loss, ContinuousLoss) else 0.0
    return 8 * _U * (ay + 1.0) + shift


def _bounds(loss: PrivacyLoss, y: np.ndarray, widen: float | np.ndarray = 0.0):
    """``(c_lo, c_hi, s_lo, s_hi)`` with ``c_lo <= Pr[Y <= y'] <= c_hi`` and ``s_lo <= Pr[Y > y'] <= s_hi`` for every
    ``y'`` within ``widen`` of ``y`` (finite part of ``Y``, conditioned on finite): the CDF and survival function at
    ``y`` moved by the position error (and ``widen``) each way, each within ``cdf_rel_error`` relative, so each of
    the four is accurate to that relative error where it is small.  (``1 - x`` rounds to within ``u`` absolute: a
    relative margin on ``x`` does not cover it where ``1 - x`` is small.)"""
    y = np.asarray(y, dtype=np.float64)
    d = _pos_err(loss, y) + widen
    if isinstance(loss, DiscreteLoss):
        c = np.concatenate([[0.0], np.cumsum(loss.probs)])
        c = np.minimum(c, 1.0)
        lo = c[np.searchsorted(loss.values, y - d, side="right")] * (1 - 4 * _U * loss.values.size)
        hi = np.minimum(c[np.searchsorted(loss.values, y + d, side="right")] * (1 + 4 * _U * loss.values.size), 1.0)
        return lo, hi, np.clip(1.0 - hi - 2 * _U, 0.0, 1.0), np.clip(1.0 - lo + 2 * _U, 0.0, 1.0)
    rel = float(loss.cdf_rel_error) + 8 * _U
    with np.errstate(invalid="ignore"):
        a, b = y - d, y + d
        ca, sa = np.asarray(loss.cdf(a), dtype=np.float64), np.asarray(loss.sf(a), dtype=np.float64)
        cb, sb = np.asarray(loss.cdf(b), dtype=np.float64), np.asarray(loss.sf(b), dtype=np.float64)
        c_lo = np.maximum(ca * (1 - rel), (1.0 - sa * (1 + rel)) - 2 * _U)
        c_hi = np.minimum(cb * (1 + rel), (1.0 - sb * (1 - rel)) + 2 * _U)
        s_lo = np.maximum(sb * (1 - rel), (1.0 - cb * (1 + rel)) - 2 * _U)
        s_hi = np.minimum(sa * (1 + rel), (1.0 - ca * (1 - rel)) + 2 * _U)
    out = []
    for v, at_minus_inf, at_inf, nan in ((c_lo, 0.0, 1.0, 0.0), (c_hi, 0.0, 1.0, 1.0), (s_lo, 1.0, 0.0, 0.0),
                                         (s_hi, 1.0, 0.0, 1.0)):
        v = np.where(np.isneginf(y), at_minus_inf, np.where(np.isposinf(y), at_inf, v))
        out.append(np.clip(np.nan_to_num(v, nan=nan), 0.0, 1.0))
    return tuple(out)


def _remove_law(loss: PrivacyLoss, lam: np.ndarray):
    """Bounds ``(c_lo, c_hi, s_lo, s_hi)`` on ``Pr_A[L <= lam]`` and ``Pr_A[lam < L < inf]`` (``Y`` the remove loss,
    ``+inf`` with probability ``p_inf``; ``L = e^Y``), each relative where it is small."""
    with np.errstate(divide="ignore"):
        y = np.log(lam)
    w = 1.0 - loss.p_inf
    return tuple(v * w * f for v, f in zip(_bounds(loss, y), (1 - 2 * _U, 1 + 2 * _U, 1 - 2 * _U, 1 + 2 * _U)))


def _add_law(loss: PrivacyLoss, lam: np.ndarray):
    """Bounds ``(c_lo, c_hi, s_lo, s_hi)`` on ``Pr[L' <= lam]`` and ``Pr[L' > lam]`` for ``L' = e^(-Y)`` (``Y`` the
    add loss; ``Y = +inf`` gives 0), each relative where it is small.

    ``Pr[L' <= lam] = p_inf + (1 - p_inf) Pr[Y >= -log lam]`` and ``Pr[L' > lam] = (1 - p_inf) Pr[Y < -log lam]``;
    ``Pr[Y > z + d] <= Pr[Y >= z] <= Pr[Y > z - d]`` absorbs both the atoms at ``z`` and the rounding of ``z``
    (the bounds are taken over ``2 d`` each way besides the position error)."""
    with np.errstate(divide="ignore"):
        z = -np.log(lam)
    c_lo, c_hi, s_lo, s_hi = _bounds(loss, z, 2 * _pos_err(loss, z))
    p = float(loss.p_inf)
    w = 1.0 - p
    # (each of the roundings of p + w x within u absolute)
    lo = np.where(lam <= 0, p, (p + w * s_lo) * (1 - 2 * _U) - 2 * _U)
    hi = np.where(lam <= 0, p, (p + w * s_hi) * (1 + 2 * _U) + 2 * _U)
    tail_lo = np.where(lam <= 0, w, c_lo * w * (1 - 2 * _U))
    tail_hi = np.where(lam <= 0, w, c_hi * w * (1 + 2 * _U))
    return np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0), tail_lo, tail_hi


def _round_up(g_lo: np.ndarray, total: float) -> tuple[np.ndarray, float]:
    """Masses at the points ``x_k`` of ``V`` rounded up (``(x_(k-1), x_k]`` to ``x_k``), from CDF lower bounds.

    Returns ``(masses, rest)``: ``rest`` (the mass above the last point, and any at ``+inf``) goes to
    ``+inf``.  A running maximum of lower bounds is a lower bound of the (non-decreasing) CDF.
    """
    c = np.maximum.accumulate(np.clip(g_lo, 0.0, total))
    m = np.diff(np.concatenate([[0.0], c]))
    return m, max(0.0, 1.0 - float(c[-1]))


def _from_upper_cdf(c: np.ndarray, total: float) -> np.ndarray:
    """Masses at the points from upper bounds ``c`` of a CDF there (the last entry replaced by ``total``: everything
    above the last point is capped down to it): a running minimum from the right of upper bounds is an upper bound
    (stochastically smaller).  With ``c[k]`` an upper bound of ``Pr[V < x_(k+1)]`` it rounds ``V`` down onto the
    points (``[x_k, x_(k+1))`` to ``x_k``)."""
    c = np.clip(np.asarray(c, dtype=np.float64).copy(), 0.0, total)
    c[-1] = total
    c = np.minimum.accumulate(c[::-1])[::-1]
    return np.diff(np.concatenate([[0.0], c]))


# --------------------------------------------------------------------------------------
# Second-order dominated laws of the copies (bases whose add pair is the remove pair reversed)
# --------------------------------------------------------------------------------------
def _dominance_module():
    """The compiled kernels of :mod:`fastpld._dominance`, or ``None`` (no build, or ``FASTPLD_PURE_PYTHON``)."""
    from .dominance import splits  # (lazily: it imports the compiled module)
    return splits._dom


_ALIGN_MARGIN = 1e-9  # an aligned atom's distance from its lattice point, relative (>> the CDF's position error)
_ALIGN_SHRINK = 0.9  # an aligned mesh is at least this fraction of the mesh asked
_ALIGN_CLEAR = 64  # meshes above an atom with no mass of L under B: it ends the support


def _aligned_mesh(h: float, b_loss: PrivacyLoss, lift: bool) -> float:
    """A mesh ``<= h`` that puts the atoms of ``L`` under ``B`` where the contraction (:func:`_contract_down`,
    or :func:`_contract_up` if ``lift``) moves them least.

    A group's ratio is its point; an atom whose bucket lies below a group's point needs that much mass above
    it to balance it, and one at the top of the support has none: the group left open there is lowered onto the
    point below it (lowering) or raised onto the point above it (lifting), first order in the atom's mass
    (Laplace(2)'s atoms hold 80% of it, at the ends of the support).  So an atom is best just below a lattice
    point, but for the top one of a lowering contraction, best just above one.  The candidates put one atom a
    relative :data:`_ALIGN_MARGIN` from a point on its side, with the mesh within :data:`_ALIGN_SHRINK` of ``h``,
    and the one with the least mass-weighted distance of all atoms from their sides is taken (``h`` among them).
    ``b_loss`` is the add loss: ``L = e^(-Y)`` under ``B``."""
    atoms = [float(a) for a in getattr(b_loss, "atoms", ()) if math.isfinite(a)]
    if not atoms or not isinstance(b_loss, ContinuousLoss):
        return h
    y = np.array(atoms)
    with np.errstate(all="ignore"):
        below = np.asarray(b_loss.cdf(np.nextafter(y, -np.inf)), dtype=np.float64)  # (Pr[Y < y])
        mass = np.asarray(b_loss.cdf(y), dtype=np.float64) - below
        c = np.exp(-y)  # (the atoms' values of L)
        # (no mass of L in (c, c + _ALIGN_CLEAR h]: Y in [-log(c + ..), -y))
        above = below - np.asarray(b_loss.cdf(-np.log(c + _ALIGN_CLEAR * h)), dtype=np.float64)
    ok = np.isfinite(c) & (c > 0) & (mass > 0)
    if not ok.any():
        return h
    c, mass, top = c[ok], mass[ok], (above[ok] <= 1e-15)
    side = np.where(top & (not lift), 1.0, -1.0)  # (+1: just above a point; -1: just below one)
    cands = [h]
    for ci, si in zip(c, side):
        pos = float(ci) * (1.0 - si * _ALIGN_MARGIN)  # (the point)
        n0 = int(math.ceil(pos / h))
        cands.extend(pos / np.arange(n0, int(math.floor(n0 / _ALIGN_SHRINK)) + 1))
    meshes = np.array(cands)
    r = c[None, :] / meshes[:, None]  # (the atoms' positions in meshes)
    dist = np.where(side[None, :] < 0, np.ceil(r) - r, r - np.floor(r))
    cost = (dist * mass[None, :]).sum(axis=1)
    return float(meshes[int(np.argmin(cost))])


def _contract_py(x, a, b, lift):
    """Reference of the compiled ``_dominance.contract_lattice``: the groups of :func:`_contract_down`
    (``lift=False``) and :func:`_contract_up` (``True``).

    The buckets ``k = 0 .. n-1`` (``(x_k, x_(k+1)]``; ``a`` bounds the first moment ``a_k`` of each under ``B`` and
    ``b`` its mass, from below and above for ``lift=False``, the other way round for ``True``) are taken in order,
    each from the share ``p`` of it already used.  The group of the target point ``x_j`` takes what is left of the
    buckets below ``j`` (each ratio at most ``x_j``: balance ``a - x_j b <= 0``) and then shares of the buckets
    from ``j`` on (ratio at least ``x_j``) until its balance crosses 0: bounded from below and at least 0
    (lowering), or bounded from above and at most 0 (lifting; a group of buckets below ``j`` only has ratio at
    most ``x_j`` whatever the bounds).  It closes inside bucket ``k`` at the share ``p`` (``kend[j] = k``,
    ``phi[j] = p``) and the next target is ``x_(k+1)``.  Returns ``(kend, phi, j)``, ``j`` the target of the group
    left open at the end (``kend = -1`` for the points no group targets)."""
    n = a.size
    kend = np.full(n + 1, -1, dtype=np.int64)
    phi = np.zeros(n + 1)
    sg = 1.0 if lift else -1.0
    j, k, bal, p = 1, 0, 0.0, 0.0
    x, a, b = x.tolist(), a.tolist(), b.tolist()
    while k < n and j <= n:
        T = x[j] * (1 - sg * 2 * _U)
        tb = T * b[k]
        tk = (a[k] - tb) + sg * 2 * _U * (abs(a[k]) + tb)
        if k < j:
            bal = bal + (1.0 - p) * tk
            bal = bal + sg * 2 * _U * abs(bal)
            p = 0.0
            k += 1
            continue
        if lift:
            if bal > 0.0 or tk > 0.0:
                full = bal + (1.0 - p) * tk
                full = full + 2 * _U * abs(full)
                if bal > 0.0 or full > 0.0:
                    need = 0.0
                    if bal < 0.0:
                        need = max((-bal / tk) * (1 - 4 * _U) - 2 * _U, 0.0)
                    p = min(p + need, 1.0)
                    kend[j] = k
                    phi[j] = p
                    j = k + 1
                    bal = 0.0
                    continue
        else:
            if bal >= 0.0:
                kend[j] = k
                phi[j] = p
                j = k + 1
                bal = 0.0
                continue
            if tk > 0.0:
                need = (-bal / tk) * (1 + 4 * _U) + 2 * _U
                if p + need < 1.0:
                    p = p + need
                    kend[j] = k
                    phi[j] = p
                    j = k + 1
                    bal = 0.0
                    continue
        bal = bal + (1.0 - p) * tk
        bal = bal + sg * 2 * _U * abs(bal)
        p = 0.0
        k += 1
    return kend, phi, j


def _buckets(law):
    """Bounds ``(lo, hi)`` on the masses of the buckets ``(x_k, x_(k+1)]`` from bounds ``law = (c_lo, c_hi, s_lo,
    s_hi)`` of the CDF and the survival function at the points (the better of the two differences: the survival
    function's keeps the upper tail's buckets to their relative accuracy, where the CDF's are ``u``-wide)."""
    c_lo, c_hi, s_lo, s_hi = law
    lo = np.maximum(np.maximum(c_lo[1:] - c_hi[:-1], s_lo[:-1] - s_hi[1:]), 0.0) * (1 - 2 * _U)
    hi = np.maximum(np.minimum(c_hi[1:] - c_lo[:-1], s_hi[:-1] - s_lo[1:]), 0.0) * (1 + 2 * _U)
    return lo, np.maximum(hi, lo)


def _contract(x, a, b, lift):
    """:func:`_contract_py`, compiled where built."""
    x, a, b = (np.ascontiguousarray(v, dtype=np.float64) for v in (x, a, b))
    dom = _dominance_module()
    if dom is not None:
        return dom.contract_lattice(x, a, b, bool(lift))
    return _contract_py(x, a, b, bool(lift))


def _fill(out: np.ndarray) -> np.ndarray:
    """NaN entries replaced by the nearest set entry to their left (the first entry is set)."""
    idx = np.where(np.isnan(out), 0, np.arange(out.size))
    np.maximum.accumulate(idx, out=idx)
    return out[idx]


def _contract_down(x, ca, cb):
    """CDF upper bounds, at the points ``x_0 .. x_(n-1)``, of the laws of ``L`` under ``A`` and under ``B``
    after a contraction onto the points and a lowering (a dominated pair, second order in the mesh).

    ``ca`` and ``cb`` are bounds ``(c_lo, c_hi, s_lo, s_hi)`` on the CDF and survival function of ``L`` under ``A``
    and under ``B`` at the points (:func:`_remove_law`, :func:`_add_law`; ``dA = L dB``).  The buckets
    ``(x_k, x_(k+1)]`` are merged, in order, into groups whose likelihood ratio ``A(group) / B(group)`` is at
    least their target point and put there (:func:`_contract_py`: the group of ``x_j`` takes what is left of the
    buckets below ``j`` and then shares of the buckets above until its balance ``a - x_j b`` is ``>= 0``, certified
    from the bounds).  A merge of parts of the sample space (shares of a bucket: a randomised one) is a
    post-processing of the pair, so the merged pair is dominated (Blackwell) and so is its random allocation;
    lowering a value under both ``A`` and ``B`` only lowers the allocation's loss under ``P`` (monotone coupling),
    and a group whose balance is ``>= 0`` is lowered by no more than the margins.  The CDFs of the outputs are
    taken from above (stochastically smaller: no charge).  What is left open at the end (the top of the range) is
    lowered onto the last group's point.  Each group spans about two buckets and keeps its mean: the pair loses
    only the variance inside the groups, ``O(h^2)`` of each copy's; rounding every bucket down to its lower end
    moved each copy by ``h / 2`` on average (first order, and the epochs add it up), and contracting fixed pairs
    of buckets (each pair's imbalance lowered) ``(h^2 / 4)`` times the density's total variation."""
    n = x.size - 1
    a_lo, a_hi = _buckets(ca)
    _, b_hi = _buckets(cb)
    kend, phi, j_open = _contract(x, a_lo, b_hi, False)
    sel = np.flatnonzero(kend >= 0)
    ks = kend[sel]
    outs = []
    for (_, c_hi, _, _), hi in ((ca, a_hi), (cb, b_hi)):
        out = np.full(n + 1, np.nan)
        out[0] = c_hi[0]
        out[sel] = (c_hi[ks] + phi[sel] * hi[ks] * (1 + 2 * _U)) * (1 + 2 * _U)
        out[max(j_open - 1, 0):] = c_hi[n]  # (the group left open: lowered onto x_(j - 1))
        outs.append(_fill(out)[:n])
    return outs


def _spread(x, ca, cb):
    """CDF upper bounds at the points ``x_0 .. x_(n-1)`` of the law of ``L`` under ``B`` with every bucket
    ``(x_k, x_(k+1)]`` split between its ends keeping its mass and its mean (connect-the-dots: a mean-preserving
    spread, a dominating pair; for the add direction's copies, whose curve is convex in each): the share
    ``(a - k h b) / h`` at ``x_(k+1)``, the rest at ``x_k``.  The share is taken from below and the CDF from above
    (stochastically smaller: the add loss only larger).  Second order in the mesh, where rounding every copy down
    moved it by ``h / 2`` on average."""
    a_lo, _ = _buckets(ca)
    b_lo, b_hi = _buckets(cb)
    X = x[:-1] * (1 + 2 * _U)  # (>= the lattice value k h)
    xb = X * b_hi
    h = float(x[1])  # (the mesh: x_1 = h exactly)
    up = np.minimum(np.maximum((a_lo - xb) - 4 * _U * (a_lo + xb), 0.0) / h * (1 - 2 * _U), b_lo)
    return cb[1][1:] - up


def _spread_pair(x, ca, cb):
    """CDF lower bounds at the points ``x_0 .. x_n`` of the laws of ``L`` under ``A''`` and ``B''``: every bucket
    ``(x_k, x_(k+1)]`` of ``L`` under ``B`` split between its ends keeping its mass and its mean (a mean-preserving
    spread of the likelihood ratio: the pair ``(A'' = L B'', B'')`` dominates ``(A, B)``, Blackwell, and so does its
    random allocation), the share ``d = ((k + 1) h b - a) / h`` at ``x_k`` and the rest at ``x_(k+1)``; under ``A''``
    the point ``x_k`` holds ``x_k`` times its ``B''``-mass, so its CDF at ``x_k`` is ``Pr_A[L <= x_k] + x_k d``.  The
    shares are taken from below (the CDFs from below: stochastically larger, the remove loss only larger; what
    they miss goes to ``+inf``).  Mass of ``B`` beyond ``x_n`` is left out (``+inf``).  Second order in the mesh,
    where the canonical pair of ``A`` rounded up spreads every copy by ``O(h)`` of its mass."""
    n = x.size - 1
    a_lo, a_hi = _buckets(ca)
    b_lo, b_hi = _buckets(cb)
    h = float(x[1])
    X1 = x[1:] * (1 - 2 * _U)  # (<= the lattice value (k + 1) h)
    xb = X1 * b_lo
    d = np.maximum((xb - a_hi) - 4 * _U * (xb + a_hi), 0.0) / h * (1 - 2 * _U)  # (<= the exact share at x_k)
    d = np.minimum(d, b_lo)
    out_b = np.empty(n + 1)
    out_b[:n] = cb[0][:n] + d
    out_b[n] = cb[0][n]
    out_a = np.empty(n + 1)
    out_a[:n] = ca[0][:n] + x[:n] * (1 - 2 * _U) * d * (1 - 2 * _U)
    out_a[n] = ca[0][n]
    return out_a, out_b


def _contract_up(x, ca, cb):
    """CDF lower bounds at the points ``x_0 .. x_n`` of the law of ``L`` under ``B`` after a contraction onto
    the points and a raising (stochastically larger than a merged pair: the add direction's dominated copies).

    :func:`_contract_down` with the balances bounded from above and crossing 0 from below: each group's ratio
    is at most its point, and it is raised onto it.  The CDF from below (what the bounds miss goes up, and what
    the last point misses to ``+inf``, as before); what is left open at the end (the top of the range) is raised
    onto the open group's point."""
    n = x.size - 1
    _, a_hi = _buckets(ca)
    b_lo, _ = _buckets(cb)
    kend, phi, j_open = _contract(x, a_hi, b_lo, True)
    c_lo = cb[0]
    out = np.full(n + 1, np.nan)
    out[0] = c_lo[0]
    sel = np.flatnonzero(kend >= 0)
    ks = kend[sel]
    out[sel] = (c_lo[ks] + phi[sel] * b_lo[ks] * (1 - 2 * _U)) * (1 - 2 * _U)
    out[min(j_open, n):] = c_lo[n]  # (the group left open: raised onto x_j)
    return _fill(out)
