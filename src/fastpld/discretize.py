"""Discretisation of privacy losses (Algorithm 1) and re-discretisation between grids.

Both produce a :class:`GridPMF`: probabilities ``p[i]`` at the values
``offset + i * mesh``.  Alongside the PMF they return what the certificate in
:mod:`fastpld.compose` needs:

* ``coupling_range`` -- the length of the interval that ``Y - Y_tilde`` lies in
  for every copy (``h`` for Algorithm 1, widened by the round-off of the CDF,
  see below; ``h`` for the split re-discretisation);
* ``tv`` -- total variation charged per copy (truncated tails, round-off that
  cannot be expressed as a coupling);
* ``bias`` -- a bound on ``|E[Y] - E[Y_tilde]|`` per copy.

Round-off of the CDF (certificate).  The bucket masses are differences of the
computed CDF (below the median) or survival function (above it), each with
relative error at most ``tau`` (``PrivacyLoss.cdf_rel_error``).  The exact
real sums of the computed masses are then the exact masses of *slightly moved*
bucket edges ``e'`` with ``|F(e') - F(e)| <= 4 (tau + u) min(F(e), 1 - F(e))``,
hence ``|e' - e| <= that / min density near e``.  The coupling of Algorithm 1
with the moved edges is exact, and its range widens from ``h`` by twice the
largest edge movement.  Where the density vanishes the movement is charged to
total variation instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import _kernels
from .mechanisms import ContinuousLoss, DiscreteLoss, PrivacyLoss, _generic_window

__all__ = ["GridPMF", "discretize_loss", "rediscretize", "truncation_window"]

_U = np.finfo(np.float64).eps / 2


@dataclass
class GridPMF:
    """Probabilities ``probs[i]`` at ``offset + i * mesh`` (finite part of a PRV)."""

    probs: np.ndarray
    offset: float
    mesh: float
    coupling_range: float = 0.0
    tv: float = 0.0
    bias: float = 0.0
    truncated: float = 0.0

    @property
    def values(self) -> np.ndarray:
        return self.offset + self.mesh * np.arange(self.probs.size)

    def mean(self) -> float:
        p = np.asarray(self.probs, dtype=np.float64)
        return float(self.offset + self.mesh * np.dot(np.arange(p.size), p) / p.sum())


def truncation_window(loss: ContinuousLoss, tail: float, native: bool = False) -> tuple[float, float]:
    """Points ``a <= b`` with ``cdf(a) <= tail`` and ``sf(b) <= tail`` (see :func:`mechanisms.ladder`).

    ``native``: the ladder's centre and scale may come from compiled moments (any centre and
    scale give a valid window; the ladder then starts from the same place).
    """
    cs = loss._native_moments() if native and hasattr(loss, "_native_moments") else None
    return _generic_window(loss, tail, *(cs if cs is not None else (loss.mean(), loss.std())))


def discretize_loss(loss: PrivacyLoss, mesh: float, tail: float, *, lattice: float = 0.0,
                    max_buckets: int = 1 << 24, native: bool = False) -> GridPMF:
    """Algorithm 1 (DiscretizeRV): bucket ``Y`` on ``lattice + mesh * Z`` and correct the mean.

    Parameters
    ----------
    loss : PrivacyLoss
        Finite part of the privacy loss to discretise.
    mesh : float
        Bucket width ``h``.
    tail : float
        Largest probability left out of the window on each side (charged as
        total variation per copy).
    lattice : float
        Centre of bucket 0.
    max_buckets : int
        Refuse with ``ValueError`` beyond this many buckets.
    native : bool
        Use the compiled kernels (same arithmetic) instead of the numpy reference.

    Returns
    -------
    GridPMF
        Masses ``q_i`` at ``lattice + i h + mu`` with ``E[Y_tilde] = E[Y | window]``.
    """
    if isinstance(loss, DiscreteLoss):
        return _discretize_discrete(loss, mesh, lattice, max_buckets)
    return _discretize_continuous(loss, mesh, tail, lattice, max_buckets, native)


def _discretize_discrete(loss: DiscreteLoss, h: float, lattice: float, max_buckets: int = 1 << 24) -> GridPMF:
    # the grid spans the atoms: refuse before bincount allocates it (and before int64 overflows)
    span = (float(loss.values[-1]) - float(loss.values[0])) / h + 2
    if not span <= max_buckets:
        raise ValueError(
            f"discretising the privacy loss needs {span:.4g} buckets (mesh {h:.3g} over "
            f"[{loss.values[0]:.4g}, {loss.values[-1]:.4g}]), more than max_buckets={max_buckets}; "
            "increase eps_error or max_buckets"
        )
    idx = np.floor((loss.values - lattice) / h + 0.5).astype(np.int64)
    i0 = int(idx[0])
    counts = np.bincount(idx - i0)
    q = np.bincount(idx - i0, weights=loss.probs)
    # exact masses unless several atoms share a bucket (one rounding per addition)
    tv = float(_U * np.sum(q[counts > 1] * (counts[counts > 1] - 1)))
    total = q.sum()
    ref = lattice + i0 * h
    disc_mean = float(np.dot(np.arange(q.size), q) / total) * h
    true_mean = float(np.dot(loss.values - ref, loss.probs))  # relative to ref: less cancellation
    mu = true_mean - disc_mean
    bias = 8 * _U * (float(np.dot(np.abs(loss.values - ref), loss.probs)) + abs(disc_mean)) * loss.values.size
    _check_mu(mu, h, 0.0)
    return GridPMF(q / total, ref + mu, h, coupling_range=h, tv=tv, bias=bias)


def _check_mu(mu, h, slack):
    if abs(mu) > 0.5 * h * (1 + 1e-6) + slack:
        raise ValueError(
            f"DiscretizeRV mean correction |mu| = {abs(mu):.3g} exceeds half the mesh ({0.5 * h:.3g}): "
            "the mechanism's CDF and its mean are inconsistent (for a custom mechanism check that cdf, "
            "sf and the partial mean describe the same distribution); a finer mesh (smaller eps_error) "
            "does not fix an inconsistent distribution"
        )


def _discretize_continuous(loss: ContinuousLoss, h: float, tail: float, lattice: float, max_buckets: int,
                           native: bool = False) -> GridPMF:
    a0, b0 = truncation_window(loss, tail, native)
    # keep atoms away from bucket edges so that every edge lies where F is continuous
    for shift in (0.0, 0.25, 0.125, 0.375):
        lat = lattice + shift * h
        ok = all(abs(((x - lat) / h + 0.5) % 1.0 - 0.0) > 1e-6 and abs(((x - lat) / h + 0.5) % 1.0 - 1.0) > 1e-6
                 for x in loss.atoms)
        if ok:
            break
    i_lo = math.floor((a0 - lat) / h + 0.5)
    i_hi = math.ceil((b0 - lat) / h - 0.5)
    n = i_hi - i_lo + 1
    if n > max_buckets:
        raise ValueError(
            f"discretising the privacy loss needs {n} buckets (mesh {h:.3g} over [{a0:.4g}, {b0:.4g}]), "
            f"more than max_buckets={max_buckets}; increase eps_error or max_buckets"
        )
    edges = lat + (np.arange(i_lo, i_hi + 2) - 0.5) * h
    # (a loss may evaluate all three at once, sharing work between them; same values)
    both = getattr(loss, "_cdf_sf_pdf", None)
    if both is not None:
        F, S, dens = both(edges)
    else:
        F = loss.cdf(edges)
        S = loss.sf(edges)
        dens = None
    # lower half from CDF differences, upper half from survival differences
    split = int(np.searchsorted(F, 0.5))  # first edge with F >= 1/2
    split = min(max(split, 1), n)  # bucket index split-1 straddles the median
    if native:
        q, total = _kernels.bucket_masses(F, S, split)
    else:
        q = np.empty(n, dtype=np.float64)
        q[: split - 1] = np.diff(F[:split])
        q[split:] = S[split:n] - S[split + 1:]
        q[split - 1] = 1.0 - F[split - 1] - S[split]
        np.maximum(q, 0.0, out=q)
        total = float(q.sum())
    out_lo, out_hi = float(F[0]), float(S[-1])
    truncated = (out_lo + out_hi) * (1 + 8 * loss.cdf_rel_error)
    if not total > 0:
        raise ValueError("the discretisation window holds no probability mass; the mechanism parameters are degenerate")

    # mean of Y conditioned on the window, relative to the bucket-0 centre (less cancellation)
    ref = lat + i_lo * h
    # (256 panels: the 8- vs 16-point rule splits panels adaptively where F is not smooth enough,
    # e.g. at a bounded support; more uniform panels only add CDF evaluations)
    pm_edges = edges if edges.size <= 257 else np.concatenate([edges[:: max(1, (edges.size - 1) // 256)], edges[-1:]])
    pm_edges = np.unique(pm_edges)
    part, part_err = loss.partial_mean(pm_edges)
    inside = 1.0 - out_lo - out_hi
    true_mean = part / inside - ref
    mean_err = part_err / inside + 8 * loss.cdf_rel_error * abs(part / inside) + 8 * _U * abs(ref)
    if native:
        qn, mean_index = _kernels.normalise_mean(q, total)
        disc_mean = mean_index * h
    else:
        qn = q / total
        disc_mean = float(np.dot(np.arange(n), qn)) * h
    mu = true_mean - disc_mean

    # round-off certificate: edge movement -> coupling range; where density vanishes -> TV
    tau = 4 * (loss.cdf_rel_error + _U)
    if dens is None:
        dens = loss.pdf(edges)
    if native:
        widen, tv = _kernels.leaf_roundoff(F, S, dens, tau, 4 * _U * (out_lo + out_hi), 1e-3 * h)
    else:
        dev = tau * np.minimum(F, S) + 4 * _U * (out_lo + out_hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            move = np.where(dens > 0, dev / (0.5 * dens), np.inf)
        small = move <= 1e-3 * h
        widen = 2 * float(move[small].max()) if small.any() else 0.0
        tv = float(dev[~small].sum())
    _check_mu(mu, h, widen)
    return GridPMF(qn, ref + mu, h, coupling_range=h + widen, tv=tv, bias=mean_err, truncated=truncated)


def rediscretize(pmf: GridPMF, mesh: float, dtype=np.float64, *, native: bool = False) -> GridPMF:
    """Mean-preserving split of ``pmf`` onto the lattice ``mesh * Z``.

    Each atom at ``v`` with ``j h <= v < (j+1) h`` sends ``(j+1 - v/h)`` of its
    mass to ``j h`` and ``(v/h - j)`` to ``(j+1) h``, so ``E[Y_tilde | Y] = Y``
    and ``Y_tilde - Y`` lies in an interval of length ``h``.  This conditional
    mean-zero property makes all re-discretisation errors of a plan one
    martingale (see :mod:`fastpld.compose`).  ``native``: the compiled split
    kernel (same products, sums in index order).
    """
    p = np.asarray(pmf.probs)
    n = p.size
    if native:
        out, j0, tmax = _kernels.split(p, pmf.offset, pmf.mesh, mesh, dtype)
        ratio = mesh / pmf.mesh
        eps = float(np.finfo(dtype).eps) / 2
        return GridPMF(out, j0 * mesh, mesh, coupling_range=mesh, tv=4 * (ratio + 3) * eps,
                       bias=4 * _U * tmax * mesh)
    t = (pmf.offset + pmf.mesh * np.arange(n, dtype=np.float64)) / mesh
    j = np.floor(t)
    theta = (t - j).astype(dtype)
    j = j.astype(np.int64)
    j0 = int(j[0])
    jj = j - j0
    m = int(jj[-1]) + 2
    pd = p.astype(dtype, copy=False)
    lower = _group_sum(pd * (1 - theta), jj, m)
    upper = _group_sum(pd * theta, jj + 1, m)
    out = lower + upper
    # rounding: each output sums at most ratio+2 products; TV per copy
    ratio = mesh / pmf.mesh
    eps = float(np.finfo(dtype).eps) / 2
    tv = 4 * (ratio + 3) * eps
    bias = 4 * _U * float(np.max(np.abs(t))) * mesh
    return GridPMF(out, j0 * mesh, mesh, coupling_range=mesh, tv=tv, bias=bias)


def _group_sum(vals, idx, m):
    """Sum ``vals`` into ``m`` bins given non-decreasing integer ``idx`` (any float dtype)."""
    out = np.zeros(m, dtype=vals.dtype)
    if vals.size == 0:
        return out
    starts = np.flatnonzero(np.concatenate([[True], idx[1:] != idx[:-1]]))
    out[idx[starts]] = np.add.reduceat(vals, starts)
    return out
