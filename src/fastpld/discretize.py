"""Discretisation of privacy losses (Algorithm 1) and re-discretisation between grids.

Both produce a :class:`GridPMF`: probabilities ``p[i]`` at the values
``offset + i * mesh``.  Alongside the PMF they return what the certificate in
:mod:`fastpld.composition` needs:

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
total variation instead.  Position errors (the rounding of the edges, and of the
argument a loss transforms before its tail function, ``ContinuousLoss.cdf_shift``)
widen it by twice their bound (:func:`_edge_error`; ``docs/overflow.md``).

Coarse tails (certificate).  A leaf of a long composition needs a fine mesh ``h``
(Azuma-Hoeffding over every copy), but most of its window holds tiny probability.
Given ``coarse = (lam, budget)``, :func:`discretize_loss` keeps buckets of width
``h`` where the mass is and merges, in the tails, ``c`` consecutive buckets
(``c`` in 3, 9, 27, 81, aligned so that the levels nest) into one cell whose mass
sits at the cell's centre -- a point of the same fine grid (``c`` odd), so the
grid and every FFT downstream are unchanged; only the CDF is evaluated at fewer
edges.  A level-``c`` cell is used only where the tail mass beyond it is at most
a threshold chosen so that the extra cost below stays within ``budget`` at ``lam``.
The per-copy difference ``D = Y~ - Y`` then lies, given the region ``R`` (fine,
or level ``c``) that ``Y`` falls in, in an interval of length ``r_R = c_R h + widen``
around ``mu``.  With ``D' = D - E[D]`` (``|E[D]| <= bias``), ``m_R = E[D' | R]``,
``|m_R| <= a_R = |mu| + r_R / 2 + bias`` and ``sum_R p_R m_R = 0`` (so the fine
region's ``|m_f| <= sum_(R coarse) p_R a_R / p_f``), Hoeffding's lemma per region
and ``e^y <= 1 + y + y^2 e^|y| / 2`` give, for every real ``lam``,

    E[e^(lam D')] <= sum_R p_R e^(x_R) + |lam| sum_R p_R a_R (e^(x_R) - 1)
                     + sum_R p_R e^(x_R) (lam a_R)^2 e^(|lam| a_R) / 2,    x_R = lam^2 r_R^2 / 8

(:func:`tail_mix_log_mgf`; without coarse regions this is Hoeffding's ``e^(x_f)``).  The
region masses ``p_R`` are the normalised computed cell masses (the coupling's
own), inflated for their summation; moving mass from the fine region to a coarse
one only increases the bound.  :mod:`fastpld.composition` multiplies these MGF bounds
over the independent leaf copies and the re-discretisations' Hoeffding factors
and optimises the Chernoff bound over ``lam``.

Compiled leaf.  With ``native=True`` the subsampled Gaussian's leaf (window, cells, CDF/SF/density
at the edges, masses, partial mean, normalisation and round-off terms) runs in one compiled call,
:func:`fastpld._kernels.psg_leaf`, with the operations of the code below in the same order: the
same GridPMF, bitwise, given the same window and C library (numpy's SIMD ``exp``/``log`` move the numpy
window's ends and the partial mean's limits by a few ulps on AVX2/AVX-512 machines;
``tests/test_leaf_native.py``).  Other losses, and ``native=False``, run the code below.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from . import _kernels, resources
from . import _validation as V
from ._limits import BucketLimitError
from .mechanisms import ContinuousLoss, DiscreteLoss, GaussianLoss, PrivacyLoss, _generic_window

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
    #: coarse tail regions ``(p_R, r_R, a_R)`` of a leaf (see the module docstring); empty: all fine
    mix: tuple = ()
    #: the exact offset ``n / 2^e`` as ``(n, e)`` where known (the dominance chains' leaves, nodes and splits):
    #: the atoms lie at exactly ``origin + i * mesh``, and ``offset`` is within one ulp of it
    origin: tuple | None = None
    #: the exact point ``(n, e)`` the dominance chains' lattices are anchored at (a coarser lattice of this PMF's is
    #: ``anchor + mesh' * Z``): the sum over the copies composed of each leaf's anchor, its heaviest atom (a loss's
    #: atoms and their sums then lie on every lattice of a mesh dividing their spacing); ``None``: 0
    anchor: tuple | None = None

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
    if getattr(loss, "psg_params", None) is not None and tail < 1e-3:
        # (native: the same candidates and arithmetic in one compiled call)
        r = (_kernels.psg_window(*loss.psg_params, tail, _PSG_STEPS) if native and _kernels.have_leaf()
             else _psg_window(loss, tail))
        if r is not None:
            return r
    if type(loss) is GaussianLoss and tail < 1e-3:
        r = _gauss_window(loss, tail)
        if r is not None:
            return r
    cs = loss._native_moments() if native and hasattr(loss, "_native_moments") else None
    return _generic_window(loss, tail, *(cs if cs is not None else (loss.mean(), loss.std())))


def _gauss_window(loss, tail: float):
    """Window of the Gaussian loss ``N(m, s^2)`` from the normal quantile of ``tail``, then the steps of
    ``_PSG_STEPS`` outward (``None``: use the ladder): the first candidate whose *computed* CDF (or survival
    function) is at most ``tail`` is taken, as on the ladder, so any end returned is valid (two vector evaluations
    where the ladder took four of ~25 points and a merge of its steps: ~50 us of a Gaussian leaf)."""
    z = _kernels.ndtri(tail)
    if not math.isfinite(z):
        return None
    a_c = loss.m + loss.s * (z - _PSG_STEPS)
    b_c = loss.m - loss.s * (z - _PSG_STEPS)
    ok_a = np.flatnonzero(np.asarray(loss.cdf(a_c), dtype=np.float64) <= tail)
    ok_b = np.flatnonzero(np.asarray(loss.sf(b_c), dtype=np.float64) <= tail)
    if ok_a.size == 0 or ok_b.size == 0:
        return None
    a, b = float(a_c[ok_a[0]]), float(b_c[ok_b[0]])
    return (a, b) if a <= b and math.isfinite(a) and math.isfinite(b) else None


# steps (in standard deviations of L) past the Gaussian quantile tried by _psg_window
_PSG_STEPS = np.array([0.0, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56])


def _psg_window(loss, tail: float):
    """Window of the Poisson-subsampled Gaussian loss from the normal quantile of ``L`` (``None``: use
    the ladder).  ``Y = +-g(L)`` is monotone in ``L``, whose law is normal (``add``) or a two-normal
    mixture (``remove``), so each end is the image of the quantile of the mixture component that
    dominates that tail, then a few steps outward; the first candidate whose *computed* CDF (or
    survival function) is at most ``tail`` is taken, as on the ladder, so any end returned is valid."""
    q, v, sd, remove = loss.psg_params

    def g(l):
        # log(1 - q + q e^l), without overflow for large l
        with np.errstate(over="ignore", divide="ignore"):
            big = l + math.log(q) + np.log1p((1 - q) * np.exp(-np.minimum(l, 700.0)) / q)
            return np.where(l > 30, big, np.log1p(q * np.expm1(np.minimum(l, 30.0))))

    if remove:  # L ~ (1 - q) N(-v/2, v) + q N(v/2, v); Y = g(L)
        l_lo = -v / 2 + sd * _kernels.ndtri(tail / (1 - q)) - sd * _PSG_STEPS
        l_hi = v / 2 - sd * _kernels.ndtri(tail / q) + sd * _PSG_STEPS if tail < q else None
        y_lo = g(l_lo)
        y_hi = g(l_hi) if l_hi is not None else None
    else:  # L ~ N(-v/2, v); Y = -g(L): the lower tail of Y is the upper tail of L
        z = -_kernels.ndtri(tail)
        y_lo = -g(-v / 2 + sd * z + sd * _PSG_STEPS)
        y_hi = -g(-v / 2 - sd * z - sd * _PSG_STEPS)
    if y_hi is None or not (np.all(np.isfinite(y_lo)) and np.all(np.isfinite(y_hi))):
        return None
    F, S, _ = _kernels.psg_eval(np.concatenate([y_lo, y_hi]), q, v, sd, remove, want_pdf=False)
    k = _PSG_STEPS.size
    ok_lo = np.flatnonzero(F[:k] <= tail)
    ok_hi = np.flatnonzero(S[k:] <= tail)
    if ok_lo.size == 0 or ok_hi.size == 0:
        return None
    a, b = float(y_lo[ok_lo[0]]), float(y_hi[ok_hi[0]])
    return (a, b) if a <= b else None


def discretize_loss(loss: PrivacyLoss, mesh: float, tail: float, *, lattice: float = 0.0,
                    max_buckets: int = 1 << 24, native: bool = False,
                    coarse: tuple[float, float] | None = None) -> GridPMF:
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
    coarse : (float, float), optional
        ``(lam, budget)``: merge tail buckets into coarse cells (continuous losses; see the
        module docstring) where the extra log-MGF per copy at ``lam`` stays within ``budget``.

    Returns
    -------
    GridPMF
        Masses ``q_i`` at ``lattice + i h + mu`` with ``E[Y_tilde] = E[Y | window]``.
    """
    # (checked here, not by the numerical code, where they would turn into a NaN or an obscure error)
    if not (isinstance(mesh, (int, float, np.integer, np.floating)) and 0 < mesh < math.inf):
        raise ValueError(f"mesh must be a finite number > 0, got {V.show(mesh)}")
    if not (isinstance(tail, (int, float, np.integer, np.floating)) and 0 <= tail < math.inf):
        raise ValueError(f"tail must be a finite number >= 0, got {V.show(tail)}")
    if not (isinstance(lattice, (int, float, np.integer, np.floating)) and math.isfinite(lattice)):
        raise ValueError(f"lattice must be a finite number, got {V.show(lattice)}")
    if coarse is not None and not (len(coarse) == 2 and all(math.isfinite(x) for x in coarse) and coarse[1] >= 0):
        raise ValueError(f"coarse must be a pair (lam, budget) of finite numbers with budget >= 0, got {coarse!r}")
    if isinstance(loss, DiscreteLoss):
        return _discretize_discrete(loss, mesh, lattice, max_buckets)
    return _discretize_continuous(loss, mesh, tail, lattice, max_buckets, native, coarse)


# Largest |loss - lattice| / mesh: bucket indices (int64) and the edges' half-integers stay exact in
# float64 below 2^52 (the rounding of an atom's index is charged, see _discretize_discrete)
_MAX_INDEX = {"continuous": 2.0**52, "discrete": 2.0**52}


def _check_reach(lo: float, hi: float, h: float, lattice: float, kind: str) -> None:
    """Refuse losses whose values lie beyond the grid's reach (e.g. ``PureDP(1e300)``), by name: a
    :class:`BucketLimitError` (the grid would need that many points), so that a planner takes its next candidate
    plan (a degenerate candidate's mesh of 5e-105 refused a heterogeneous composition that others certify)."""
    reach = max(abs(lo - lattice), abs(hi - lattice)) / h
    if not reach < _MAX_INDEX[kind]:
        raise BucketLimitError(
            f"the privacy loss reaches {max(abs(lo), abs(hi)):.4g}, beyond the grid of mesh {h:.3g} "
            f"(|value| / mesh must stay below {_MAX_INDEX[kind]:.4g}): the mechanism's epsilon, or its "
            "sensitivity over its noise, is too large to account for; reduce it or increase eps_error", reach
        )


def _edge_error(loss, lat: float, h: float, i_lo: int, i_hi: int) -> float:
    """Bound on how far each computed edge ``lat + (i - 0.5) h`` (and the loss's CDF at it) may sit from the
    exact one: the two roundings of the edge, ``2 u (|edge| + |lat|)``, plus ``loss.cdf_shift``.  The
    coupling range widens by twice this (each bucket's two edges)."""
    tmax = max(abs(lat + (i_lo - 0.5) * h), abs(lat + (i_hi + 0.5) * h))
    return loss.cdf_shift(tmax) + 2 * _U * (tmax + abs(lat))


def _discretize_discrete(loss: DiscreteLoss, h: float, lattice: float, max_buckets: int = 1 << 24) -> GridPMF:
    # the grid spans the atoms: refuse before bincount allocates it (and before int64 overflows)
    span = (float(loss.values[-1]) - float(loss.values[0])) / h + 2
    if not span <= max_buckets:
        raise BucketLimitError(
            f"discretising the privacy loss needs {span:.4g} buckets (mesh {h:.3g} over "
            f"[{loss.values[0]:.4g}, {loss.values[-1]:.4g}]), more than max_buckets={max_buckets}; "
            "increase eps_error or max_buckets", span)
    _check_reach(float(loss.values[0]), float(loss.values[-1]), h, lattice, "discrete")
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
    # (each atom's index floor((v - lattice) / h + 0.5) is that of a point within 6 u |v - lattice| of v:
    # the atoms' displacements idx h + lattice + mu - v spread over h plus twice that)
    crange = h + 12 * _U * max(abs(float(loss.values[0]) - lattice), abs(float(loss.values[-1]) - lattice))
    _check_mu(mu, h, crange - h)
    return GridPMF(q / total, ref + mu, h, coupling_range=crange, tv=tv, bias=bias)


def _check_mu(mu, h, slack):
    if abs(mu) > 0.5 * h * (1 + 1e-6) + slack:
        raise ValueError(
            f"DiscretizeRV mean correction |mu| = {abs(mu):.3g} exceeds half the mesh ({0.5 * h:.3g}): "
            "the mechanism's CDF and its mean are inconsistent (for a custom mechanism check that cdf, "
            "sf and the partial mean describe the same distribution); a finer mesh (smaller eps_error) "
            "does not fix an inconsistent distribution"
        )


def _discretize_continuous(loss: ContinuousLoss, h: float, tail: float, lattice: float, max_buckets: int,
                           native: bool = False, coarse: tuple[float, float] | None = None) -> GridPMF:
    if native and tail < 1e-3 and getattr(loss, "psg_params", None) is not None and not loss.atoms and _kernels.have_leaf():
        # the subsampled Gaussian: window and leaf below in one compiled call, the same operations
        # (None: the window or the range takes another branch below)
        r = _kernels.psg_leaf_full(*loss.psg_params, loss.cdf_rel_error, tail, _PSG_STEPS, lattice, h, max_buckets,
                                   _coarse_levels(h, tail, coarse))
        if r is not None:
            probs, offset, crange, tv, bias, truncated, mix, mu, slack = r
            _check_mu(mu, h, slack)
            return GridPMF(probs, offset, h, coupling_range=crange, tv=tv, bias=bias, truncated=truncated, mix=mix)
    a0, b0 = truncation_window(loss, tail, native)
    _check_reach(a0, b0, h, lattice, "continuous")
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
        raise BucketLimitError(
            f"discretising the privacy loss needs {n} buckets (mesh {h:.3g} over [{a0:.4g}, {b0:.4g}]), "
            f"more than max_buckets={max_buckets}; increase eps_error or max_buckets", n)
    if native and getattr(loss, "psg_params", None) is not None and _kernels.have_leaf():
        pmf = _psg_leaf(loss, h, tail, lat, i_lo, i_hi, n, coarse)
        if pmf is not None:
            return pmf
    # cells: fine buckets, or (coarse tails) runs of c buckets starting at absolute index starts[k]
    cells = _coarse_cells(loss, lat, h, i_lo, i_hi, coarse, tail) if coarse is not None else None
    if cells is None:
        edges = lat + (np.arange(i_lo, i_hi + 2) - 0.5) * h
    else:
        starts, sizes = cells
        edges = lat + (np.append(starts, i_hi + 1) - 0.5) * h
    m_cells = edges.size - 1
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
    split = min(max(split, 1), m_cells)  # cell index split-1 straddles the median
    if native:
        q, total = _kernels.bucket_masses(F, S, split)
    else:
        q = np.empty(m_cells, dtype=np.float64)
        q[: split - 1] = np.diff(F[:split])
        q[split:] = S[split:m_cells] - S[split + 1:]
        q[split - 1] = 1.0 - F[split - 1] - S[split]
        np.maximum(q, 0.0, out=q)
        total = float(q.sum())
    if cells is not None:  # each cell's mass at its centre, a point of the fine grid (sizes are odd)
        qc = q
        q = np.zeros(n, dtype=np.float64)
        q[starts + (sizes - 1) // 2 - i_lo] = qc
    out_lo, out_hi = float(F[0]), float(S[-1])
    truncated = (out_lo + out_hi) * (1 + 8 * loss.cdf_rel_error)
    if not total > 0:
        raise ValueError("the discretisation window holds no probability mass; the mechanism parameters are degenerate")

    # mean of Y conditioned on the window, relative to the bucket-0 centre (less cancellation)
    ref = lat + i_lo * h
    # (256 panels: the 8- vs 16-point rule splits panels adaptively where F is not smooth enough,
    # e.g. at a bounded support; more uniform panels only add CDF evaluations)
    pm_edges = edges if edges.size <= 257 else np.concatenate([edges[:: max(1, (edges.size - 1) // 256)], edges[-1:]])
    # (np.unique without its sort: the edges are non-decreasing)
    pm_edges = pm_edges[np.concatenate([[True], pm_edges[1:] != pm_edges[:-1]])]
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
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # (a denormal density: inf, as 0's)
            move = np.where(dens > 0, dev / (0.5 * dens), np.inf)
        small = move <= 1e-3 * h
        widen = 2 * float(move[small].max()) if small.any() else 0.0
        tv = float(dev[~small].sum())
    # the edges' position error (their rounding; a subsampled loss also rounds g^-1(t))
    widen = widen + 2 * _edge_error(loss, lat, h, i_lo, i_hi)
    mix = ()
    if cells is not None:
        # regions: the cells of each size c > 1; p_R from the normalised cell masses (inflated for
        # their summation), r_R = c h + widen, a_R >= |E[D' | R]|
        pc = np.bincount(sizes, weights=qc)  # mass per cell size
        mix = tuple((min(1.0, float(pc[c]) / total * (1 + 1e-9) + 1e-300), c * h + widen,
                     abs(mu) + (c * h + widen) / 2 + mean_err)
                    for c in _COARSE_LEVELS[::-1] if c < pc.size and pc[c] > 0)
    # (coarse cells move the discretised mean by at most their mass times half their width)
    _check_mu(mu, h, widen + sum(p * r for p, r, _ in mix))
    return GridPMF(qn, ref + mu, h, coupling_range=h + widen, tv=tv, bias=mean_err, truncated=truncated, mix=mix)


def _coarse_levels(h: float, tail: float, coarse) -> list:
    """``(c, threshold)`` of the coarse levels whose threshold exceeds ``tail`` (the filter of
    :func:`_coarse_cells` but for ``4 c <= n``), decreasing ``c``; empty without ``coarse``."""
    if coarse is None:
        return []
    thr = _coarse_thresholds(h, float(coarse[0]), float(coarse[1]))
    return [(c, thr[c]) for c in _COARSE_LEVELS if c in thr and thr[c] > tail]


def _psg_leaf(loss, h: float, tail: float, lat: float, i_lo: int, i_hi: int, n: int, coarse):
    """The rest of :func:`_discretize_continuous` for the subsampled Gaussian in one compiled call
    (:func:`fastpld._kernels.psg_leaf`): the coarse cells of :func:`_coarse_cells`, the CDF/SF/density
    at the edges, masses, partial mean, normalisation and round-off certificate with the same
    operations in the same order, so every field equals the native path's above bitwise
    (tests/test_leaf_native.py).  ``None``: run that path instead."""
    levels = ()
    if coarse is not None and n >= _COARSE_MIN_BUCKETS:  # (the filter of _coarse_cells)
        thr = _coarse_thresholds(h, float(coarse[0]), float(coarse[1]))
        levels = [(c, thr[c]) for c in _COARSE_LEVELS if c in thr and thr[c] > tail and 4 * c <= n]
    q, v, sd, remove = loss.psg_params
    try:
        r = _kernels.psg_leaf(q, v, sd, remove, loss.cdf_rel_error, lat, h, i_lo, i_hi, levels)
    except ValueError as e:
        if "no mass" in str(e):
            raise ValueError("the discretisation window holds no probability mass; the mechanism parameters "
                             "are degenerate") from None
        raise
    if r is None:
        return None
    qn, (ref, mu, widen, tv, mean_err, truncated, total, pc3, pc9, pc27, pc81, _) = r
    # (the edges' position error, as _discretize_continuous adds it)
    widen = widen + 2 * _edge_error(loss, lat, h, i_lo, i_hi)
    mix = tuple((min(1.0, pc / total * (1 + 1e-9) + 1e-300), c * h + widen, abs(mu) + (c * h + widen) / 2 + mean_err)
                for c, pc in ((3, pc3), (9, pc9), (27, pc27), (81, pc81)) if pc > 0)
    _check_mu(mu, h, widen + sum(p * r for p, r, _ in mix))
    return GridPMF(qn, ref + mu, h, coupling_range=h + widen, tv=tv, bias=mean_err, truncated=truncated, mix=mix)


_COARSE_LEVELS = (81, 27, 9, 3)  # odd (cell centres on the fine grid), each dividing the next
_COARSE_MAX_TAIL = 1e-4  # per side: coarse cells only in the tails, whatever the budget
# coarse cells only pay for their search (~n / 81 + 200 CDF points and some Python) on wide leaves
# whose cells are much fewer than the buckets (measured: 895 buckets, 60% cells: 0.79 vs 0.53 ms)
_COARSE_MIN_BUCKETS = 2048
_COARSE_MAX_FRACTION = 0.6


def tail_mix_log_mgf(lam, r_f, mixes) -> np.ndarray:
    """Upper bounds on ``log E[e^(lam D')]`` of leaf copies (module docstring): shape ``(J, len(lam))``.

    ``r_f``: the ``J`` leaves' fine coupling ranges; ``mixes``: per leaf its coarse regions
    ``(p_R, r_R, a_R)`` (an empty tuple gives Hoeffding's ``lam^2 r_f^2 / 8``).
    """
    lam = np.abs(np.asarray(lam, dtype=np.float64))[None, :]
    r_f = np.asarray(r_f, dtype=np.float64).reshape(-1, 1)
    k = max([len(m) for m in mixes] + [1])
    reg = np.zeros((r_f.shape[0], k, 3))  # padding regions have p = 0 (no contribution)
    for j, m in enumerate(mixes):
        if m:
            reg[j, :len(m)] = m
    p, r, a = (reg[:, :, i:i + 1] for i in range(3))
    x_f = lam * lam * (r_f * r_f / 8)
    sa = (p * a).sum(axis=1)  # >= p_f |m_f|
    p_f_true = 1.0 - p.sum(axis=1)
    p_f = np.maximum(p_f_true, 0.5)  # (tails hold <= 8e-4 in practice; below 1/2 no bound is claimed)
    a_f = sa / p_f
    x = lam[:, None, :] ** 2 * (r * r / 8)
    la = lam[:, None, :] * a
    xf = x_f[:, None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        # (M - e^(x_f)) e^(-x_f): the fine region's e^(x_f) factored out
        t = (p * (np.expm1(x - xf) + np.exp(-xf) * la * np.expm1(x) + np.exp(x - xf) * la * la / 2 * np.exp(la))).sum(axis=1)
        t += np.exp(-x_f) * lam * sa * np.expm1(x_f) + p_f * (lam * a_f) ** 2 / 2 * np.exp(lam * a_f)
        out = (x_f + np.log1p(t)) * (1 + 1e-12)
    # the fine term p_f (lam a_f)^2 / 2 e^(lam a_f) decreases in p_f: the clamp above is only valid
    # while it does not raise p_f
    return np.where(np.isnan(out) | (p_f_true < 0.5), np.inf, out)


@functools.lru_cache(maxsize=256)
def _coarse_thresholds(h: float, lam: float, budget: float) -> dict:
    """Per-side tail-mass thresholds of the coarse levels: level ``c`` adds at most ``budget / 4``
    to the log-MGF bound per copy at ``lam`` (estimated with ``|mu| <= h / 2``; the certificate
    uses the measured masses, so the thresholds only decide speed and tightness)."""
    out = {}
    x_f = lam * lam * h * h / 8
    for c in _COARSE_LEVELS:
        r = c * h
        a = (r + h) / 2
        x = lam * lam * r * r / 8
        if x > 600:
            continue
        g = (math.expm1(x - x_f) + math.exp(-x_f) * lam * a * math.expm1(x) + math.exp(x - x_f) * (lam * a) ** 2 / 2
             * math.exp(lam * a) + lam * a * math.expm1(x_f))
        p = min(_COARSE_MAX_TAIL, budget / (4 * g) / 2)
        if p > 1e-300:
            out[c] = p
    return out


resources.on_clear(_coarse_thresholds.cache_clear)


def _coarse_cells(loss, lat: float, h: float, i_lo: int, i_hi: int, coarse, tail: float = 0.0):
    """Cells ``(starts, sizes)`` (absolute bucket indices) covering ``[i_lo, i_hi]``: fine where the
    mass is, coarse in the tails (``None``: no coarse cell pays off).  The boundaries are searched
    on the CDF at multiples of the coarsest size, then refined between evaluated points."""
    n = i_hi - i_lo + 1
    if n < _COARSE_MIN_BUCKETS:
        return None
    lam, budget = coarse
    thr = _coarse_thresholds(h, float(lam), float(budget))
    # (a level whose threshold is below the mass left outside the window has no cell to take)
    levels = [c for c in _COARSE_LEVELS if c in thr and thr[c] > tail and 4 * c <= n]
    if not levels:
        return None
    end = i_hi + 1
    psg = getattr(loss, "psg_params", None)

    def ev(idx):
        x = lat + (idx - 0.5) * h
        if psg is not None:  # CDF and survival function in one pass
            return _kernels.psg_eval(x, *psg, want_pdf=False)[:2]
        return loss.cdf(x), loss.sf(x)

    cmax = levels[0]
    g = np.arange(-(-i_lo // cmax) * cmax, end + 1, cmax, dtype=np.int64)  # edges at multiples of cmax
    if g.size < 2:
        return None
    F0, S0 = ev(g)
    # upper side: u_c = first multiple of c past the median with S <= thr_c (S non-increasing); it
    # lies in (k - cmax, k] for the first point k of the coarse grid that qualifies.  Lower side:
    # l_c = last multiple of c before the median with F <= thr_c, in [k, k + cmax).
    T = np.array([thr[c] for c in levels])
    jm = int(np.searchsorted(F0, 0.5))  # first coarse point with F >= 1/2 (F non-decreasing)
    up_ok = S0[None, jm:] <= T[:, None]
    lo_ok = F0[None, :jm] <= T[:, None]
    ku = [int(g[jm + np.argmax(r)]) if r.any() else None for r in up_ok]
    kl = [int(g[jm - 1 - np.argmax(r[::-1])]) if r.any() else None for r in lo_ok]
    cand_u = [np.arange(-(-max(k - cmax + c, i_lo) // c) * c, k, c) if k is not None and c < cmax else None
              for c, k in zip(levels, ku)]
    cand_l = [np.arange(k + c, min(k + cmax, end + 1), c) if k is not None and c < cmax else None
              for c, k in zip(levels, kl)]
    cand = [x for x in cand_u + cand_l if x is not None]
    if cand:
        sizes_c = [x.size for x in cand]
        F1, S1 = ev(np.concatenate(cand))
        cuts = np.cumsum([0] + sizes_c)
        parts = iter([(F1[a:b], S1[a:b]) for a, b in zip(cuts[:-1], cuts[1:])])
    ub, lb = {}, {}
    u_prev, l_prev = end, i_lo
    for c, k, cu in zip(levels, ku, cand_u):
        u = u_prev
        if k is not None:
            if cu is not None:
                Fc, Sc = next(parts)
                ok = np.flatnonzero((Sc <= thr[c]) & (Fc >= 0.5))
                k = int(cu[ok[0]]) if ok.size else k
            u = min(k, u_prev)
        ub[c] = u_prev = u
    for c, k, cl in zip(levels, kl, cand_l):
        lo_c = l_prev
        if k is not None:
            if cl is not None:
                Fc, Sc = next(parts)
                ok = np.flatnonzero((Fc <= thr[c]) & (Sc >= 0.5))
                k = int(cl[ok[-1]]) if ok.size else k
            lo_c = max(k, l_prev)
        lb[c] = l_prev = lo_c
    runs = []  # (first start, cell size, number of cells) in increasing order

    def fill(a, b, lv):
        # cells of size levels[lv] aligned to its multiples inside [a, b), the ends with smaller sizes
        if a >= b:
            return
        if lv >= len(levels):
            runs.append((a, 1, b - a))
            return
        c = levels[lv]
        a2, b2 = -(-a // c) * c, (b // c) * c
        if a2 >= b2:
            fill(a, b, lv + 1)
            return
        fill(a, a2, lv + 1)
        runs.append((a2, c, (b2 - a2) // c))
        fill(b2, b, lv + 1)

    # [i_lo, l_cmax) level cmax, [l_c, l_next) level next, ..., fine, ..., [u_cmax, end) level cmax
    bounds_lo = [i_lo] + [lb[c] for c in levels]
    for k in range(len(levels)):
        fill(bounds_lo[k], bounds_lo[k + 1], k)
    fill(lb[levels[-1]], ub[levels[-1]], len(levels))
    bounds_up = [ub[c] for c in reversed(levels)] + [end]
    for k in range(len(levels)):
        fill(bounds_up[k], bounds_up[k + 1], len(levels) - 1 - k)
    r = np.array(runs, dtype=np.int64)
    sizes = np.repeat(r[:, 1], r[:, 2])
    # the cells are contiguous: each starts where the previous one ends
    starts = np.empty(sizes.size, dtype=np.int64)
    starts[0] = i_lo
    np.cumsum(sizes[:-1], out=starts[1:])
    starts[1:] += i_lo
    if starts.size > _COARSE_MAX_FRACTION * n:
        return None
    return starts, sizes


def rediscretize(pmf: GridPMF, mesh: float, dtype=np.float64, *, native: bool = False) -> GridPMF:
    """Mean-preserving split of ``pmf`` onto the lattice ``mesh * Z``.

    Each atom at ``v`` with ``j h <= v < (j+1) h`` sends ``(j+1 - v/h)`` of its
    mass to ``j h`` and ``(v/h - j)`` to ``(j+1) h``, so ``E[Y_tilde | Y] = Y``
    and ``Y_tilde - Y`` lies in an interval of length ``h``.  This conditional
    mean-zero property makes all re-discretisation errors of a plan one
    martingale (see :mod:`fastpld.composition`).  ``native``: the compiled split
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
