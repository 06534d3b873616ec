"""The support ends of a dominance leaf's loss: the mass between an end and a point (its tail), at exact distances
from the subsampled Gaussian's end ``log(1 - q)`` where the points themselves would round onto the end, and the
lattice anchored there (:func:`_anchor_end`) with the charge that takes (:func:`_end_shift`).  Used by
:mod:`fastpld.dominance.leaves`."""
from __future__ import annotations

import math

import numpy as np

_U = np.finfo(np.float64).eps / 2  # unit roundoff


def _psg_end(loss) -> float | None:
    """The subsampled Gaussian's end ``log(1 - q)`` (:func:`_exact_end`'s), else None."""
    if getattr(loss, "psg_params", None) is None:
        return None
    for side, end in enumerate(getattr(loss, "support", ())):
        if math.isfinite(end) and _exact_end(loss, side):
            return float(end)
    return None


def _anchor_end(loss, a0: float, b0: float) -> float:
    """The leaf's lattice point on the subsampled Gaussian's end ``log(1 - q)`` where the window ``[a0, b0]`` holds
    it (:func:`_psg_end`), else 0.  At a small noise multiplier most of each step's mass lies within ~1e-18 of
    that end, a near-atom: off the lattice, the dominated chain rounds it down by up to a mesh in every copy (the
    rescalings then miss the width: PSG(0.15, 0.001) x 1e3); on a lattice point (as an atom, :func:`_anchor_atom`) it
    is exact in both chains, at the cost of :func:`_end_shift`."""
    end = _psg_end(loss)
    return end if end is not None and a0 <= end <= b0 else 0.0


def _end_shift(loss, lat: float) -> float:
    """The charge (per copy, as total variation) of a lattice anchored at the end ``log(1 - q)``
    (:func:`_anchor_end`), or of a subsampled Laplace's ends (:func:`_psl_end`, whatever ``lat``), else 0.  The
    leaf's integrals are those of the computed model, whose end is the float ``s = log1p(-q)``, the lattice point:
    none of its mass crosses that cell end, and none is charged there.  The exact loss lies within ``16 u |s|`` of
    the model near the end (``s`` within ``8 u |s|`` of the exact end, log1p within 4 ulp, and the map from ``L``
    moves with it): a shift of the loss by at most ``r`` per copy moves the composed curve by at most ``k r e^(k r)``
    (``|d delta / d eps| <= 1``), for either bound.  With ``k r <= 1e-5`` (:func:`_anchored_shift` checks it) that is
    ``r (1 + 1e-5)`` a copy."""
    r = _from_end_shift(loss)
    if r:
        # (a subsampled Laplace's ends, or a mixture's parts', integrated at exact distances from the float ends: the
        # loss evaluated there is within end_shift of the exact one, wherever the lattice is anchored)
        return r * (1 + 1e-5)
    return 16 * _U * abs(lat) * (1 + 1e-5) if lat != 0.0 and lat == _psg_end(loss) else 0.0


def _from_end_shift(loss) -> float:
    """The largest :meth:`~fastpld.mechanisms.SubsampledLoss.end_shift` of ``loss`` or of a mixture's parts
    (:class:`fastpld.samplers.MixtureLoss`, integrated part by part) whose ends are :func:`_psl_end`'s, else 0."""
    if _psl_end(loss, 0) or _psl_end(loss, 1):
        return loss.end_shift()
    return max((_from_end_shift(part) for part in getattr(loss, "parts", ())), default=0.0)


def _psl_end(loss, side: int) -> bool:
    """Whether the support end on ``side`` is one a subsampled loss evaluates at exact distances from
    (:meth:`fastpld.mechanisms.SubsampledLoss.from_end`: the subsampled Laplace's)."""
    m = getattr(loss, "end_map", None)
    return getattr(loss, "psg_params", None) is None and m is not None and m(side) is not None


def _end_tail(loss, t, side: int):
    """The mass between ``t`` and the support end on ``side`` (0: below ``t``, 1: above): the CDF or survival
    function, but without an atom at that end where the loss says how much of it is continuous
    (:meth:`~fastpld.mechanisms.ContinuousLoss.end_mass`; the Laplace losses, subsampled or not).  The atom is
    its own mass of the leaf: counted in a cell's error bound too, it charged a subsampled Laplace's leaf a third
    of its mass per copy where the cell holding the end needed the rules near the end."""
    t = np.asarray(t, dtype=np.float64)
    end = loss.support[side]
    if end in loss.atoms:
        m = loss.end_mass(t, side)
        if m is not None:
            return np.asarray(m, dtype=np.float64)
    return np.asarray(loss.cdf(t) if side == 0 else loss.sf(t), dtype=np.float64)


def _exact_end(loss, side: int) -> bool:
    """Whether the support end on ``side`` is a subsampled Gaussian's ``log(1 - q)`` end, whose density and tails
    :func:`_psg_from_end` gives at exact distances from it (the points ``end +- d`` round to within an ulp of the
    end's magnitude: all of ``d`` below ~1e-18, where a small sigma puts most of the mass), or a subsampled
    Laplace's end (:func:`_psl_end`)."""
    psg = getattr(loss, "psg_params", None)
    if psg is None:
        return _psl_end(loss, side)  # (the subsampled Laplace's ends: SubsampledLoss.from_end)
    return side == (0 if psg[3] else 1)


def _psg_from_end(psg, d, tail: bool, delta=None):
    """The subsampled Gaussian's density (``tail`` false) or its mass between the ``log(1 - q)`` end and the point
    (``tail``: its CDF, remove, or survival function, add) at distances ``d`` from that end, with ``expm1(d)`` for
    ``expm1(tt - log(1 - q))`` (``_kernels.psg_eval``'s ``tt < 0`` branch; the C ``psg_end_tail`` and
    ``fpld_psg_logpanels``).  Only for ``d < -log(1 - q)``.  With ``tail``, also a bound on the tails' relative
    error: ``l`` is within ``dl = 10 u (|log(1 - q)| + |log expm1(d)| + |log q| + v / 2 + 1)`` of the exact ``l``
    (each libm call within 4 ulp), so each normal argument ``z`` within ``dl / sd``, which moves ``Phi(z)`` by at most
    ``(|z| + 1) dl / sd`` of itself (``phi / Phi <= |z| + 1``); ``z``'s own rounding ``2 u |z| (|z| + 1)``, the normal
    CDF's argument ``z / sqrt 2`` rounded (``~z^2 u``), the CDF itself and the mixture's sum ``24 u``.  With ``delta``
    (the density): also its relative error bound, the distances within ``delta`` of the exact ones
    (:func:`fastpld._reference.psg_density_rel`)."""
    from .. import _reference  # (where used: the import stays light)
    q, v, sd, remove = psg
    ylo, logq = math.log1p(-q), math.log(q)
    d = np.asarray(d, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # (subsampled_ginv's t < 0 form with d for t - log(1 - q))
        em1 = np.expm1(d)
        lem = np.log(em1)
        l = np.where(em1 > 0, (ylo + lem) - logq, -np.inf)
        dl = (em1 + 1.0) / em1
        F, S, P = _reference.psg_at_l(l, dl, q, v, sd, remove, want_pdf=not tail)
        if not tail:
            if delta is None:
                return P
            return P, _reference.psg_density_rel(l, dl, delta, abs(logq) + abs(ylo), v, sd)
        zp, zq, h = (l + v / 2) / sd, (l - v / 2) / sd, v / 2
        z = np.maximum(np.abs(zp), np.abs(zq)) if remove else np.abs(zp)
        rel = (z + 1) * (10 * _U * (abs(ylo) + np.abs(lem) + abs(logq) + h + 1) / sd) + (3 * z * z + 2 * z + 24) * _U
    return (F if remove else S), rel


def _end_tail_at(loss, s_end: float, d, side: int):
    """:func:`_end_tail` at distances ``d`` from the support end ``s_end`` on ``side``, and a bound on its relative
    error: at the exact distances where :func:`_exact_end` (:func:`_psg_from_end`), else at the rounded points
    (``16 cdf_rel_error``)."""
    d = np.asarray(d, dtype=np.float64)
    if _psl_end(loss, side):
        _, _, val, rel, ok = loss.from_end(d, side)
        if ok.all():
            return val, rel
        far = _end_tail(loss, s_end + (d if side == 0 else -d), side)
        return np.where(ok, val, far), np.where(ok, rel, 16 * loss.cdf_rel_error)
    if _exact_end(loss, side):
        psg = loss.psg_params
        near = d < -math.log1p(-psg[0])
        val, rel = _psg_from_end(psg, np.where(near, d, 0.0), True)
        if near.all():
            return val, rel
        far = _end_tail(loss, s_end + (d if side == 0 else -d), side)
        return np.where(near, val, far), np.where(near, rel, 16 * loss.cdf_rel_error)
    return _end_tail(loss, s_end + (d if side == 0 else -d), side), np.full(d.shape, 16 * loss.cdf_rel_error)


def _anchored_shift(loss, lat: float, copies: int | None) -> float:
    """:func:`_end_shift` of a leaf of ``copies`` copies, which must keep ``copies r <= 1e-5``."""
    r = _end_shift(loss, lat)
    if r and (copies or 1) * r > 1e-5:
        raise ValueError(f"the loss's end log(1 - q) = {lat:.6g} is on the lattice of {copies} copies, whose shift "
                         f"bound ({copies} x {r:.3g}) exceeds 1e-5; compose fewer copies or give eps_error")
    return r
