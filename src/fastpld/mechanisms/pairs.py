"""Poisson subsampling: the dominating pairs ``(P, Q)`` of the base mechanisms and binomial moments.

A pair describes ``L = log(Q/P)`` under ``P`` and under ``Q``;
:class:`fastpld.mechanisms.subsampled.SubsampledLoss` turns it into the privacy loss of the
Poisson-subsampled mechanism.  The binomial Renyi moments ``log E_P[(M/P)^a]`` of the mixture
``M = (1-q) P + q Q`` at integer orders bound its log-MGF.
"""
from __future__ import annotations

import math

import numpy as np

from .. import resources
from .._lazy import lazy_module
from .base import _U
from .losses import LaplaceLoss
from .quadrature import _gl_integrate

special = lazy_module("scipy.special")

__all__: list[str] = []


class _BasePair:
    """A pair ``P`` (base) vs ``Q`` (shifted) with ``L = log(Q/P)``; used by subsampling."""

    atoms: tuple = ()
    support: tuple = (-math.inf, math.inf)

    def cdf_P(self, l, *, strict=False):  # Pr_P[L <= l] (or < l if strict)
        raise NotImplementedError

    def cdf_Q(self, l):
        raise NotImplementedError

    def sf_P(self, l, *, strict=False):  # Pr_P[L > l] (or >= l if strict)
        raise NotImplementedError

    def sf_Q(self, l):
        raise NotImplementedError

    def pdf_P(self, l):
        raise NotImplementedError

    def pdf_Q(self, l):
        raise NotImplementedError

    def pdf_slope_ops(self, l):
        """``(slope, ops)``: a bound on ``|d log pdf / dl|`` of ``pdf_P`` and ``pdf_Q`` at ``l``, and on their
        relative rounding there (:meth:`fastpld.mechanisms.SubsampledLoss.pdf_error`; the Gaussian pair's is
        :func:`fastpld._reference.psg_density_rel`, the compiled leaf's formula)."""
        raise NotImplementedError

    def log_moment_P(self, lam):
        """``log E_P[e^(lam L)]`` for real ``lam`` (closed form)."""
        raise NotImplementedError

    def expect(self, f, under):
        """``E[f(L)]`` under ``P`` or ``Q`` (``under`` in ``{"P", "Q"}``) by quadrature, or ``None``.

        ``f`` must be vectorised and analytic in the strip ``|Im l| < pi`` (as
        ``log(1 - q + q e^l)`` is): panels of width <= 1 in ``l`` make 16-point
        Gauss-Legendre accurate to round-off.
        """
        return None


_PSG_MIN_SIGMA = 1e-3  # (see _GaussPair)


class _GaussPair(_BasePair):
    """``P = N(0, sigma^2)``, ``Q = N(1, sigma^2)``: ``L = (2w - 1)/(2 sigma^2)``."""

    def __init__(self, sigma):
        self.sg = float(sigma)
        if not self.sg >= _PSG_MIN_SIGMA:
            # the loss reaches ~1/(2 sigma^2) > 5e5 (beyond any grid at a useful mesh), and its moment
            # quadratures (panels <= 1 wide over ~1/sigma^2) would take seconds before a refusal
            raise ValueError(
                f"sigma / sensitivity must be >= {_PSG_MIN_SIGMA:g} for a Poisson-subsampled Gaussian (its privacy "
                f"loss exceeds 1/(2 sigma^2) = {0.5 / self.sg**2:.3g} otherwise), got {self.sg!r}"
            )
        self.v = 1.0 / self.sg**2  # L ~ N(-v/2, v) under P, N(v/2, v) under Q
        self.sd = math.sqrt(self.v)
        self.lscale = self.v / 2  # (the size of the offsets added to L; SubsampledLoss.cdf_shift)

    def cdf_P(self, l, *, strict=False):
        return special.ndtr((l + self.v / 2) / self.sd)

    def sf_P(self, l, *, strict=False):
        return special.ndtr(-(l + self.v / 2) / self.sd)

    def cdf_Q(self, l):
        return special.ndtr((l - self.v / 2) / self.sd)

    def sf_Q(self, l):
        return special.ndtr(-(l - self.v / 2) / self.sd)

    def pdf_P(self, l):
        z = (l + self.v / 2) / self.sd
        return np.exp(-0.5 * z * z) / (self.sd * math.sqrt(2 * math.pi))

    def pdf_Q(self, l):
        z = (l - self.v / 2) / self.sd
        return np.exp(-0.5 * z * z) / (self.sd * math.sqrt(2 * math.pi))

    def log_moment_P(self, lam):
        lam = np.asarray(lam, dtype=np.float64)
        return lam * (lam - 1) * self.v / 2

    def expect(self, f, under):
        # L = centre + sd z, z ~ N(0, 1); |z| <= 40 holds all but e^-800 of the mass
        centre = -self.v / 2 if under == "P" else self.v / 2
        width = min(1.0, 1.0 / self.sd)  # <= 1 in l (f's strip) and <= 1 in z (the density's scale)
        n = int(math.ceil(80.0 / width))
        edges = np.linspace(-40.0, 40.0, n + 1)
        g = lambda z: f(centre + self.sd * z) * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        return _gl_integrate(g, edges[:-1], edges[1:], 16)


_LAPLACE_FINE = 1600.0  # (see _LaplacePair.expect)


class _LaplacePair(_BasePair):
    """``P = Lap(0, b)``, ``Q = Lap(D, b)``: ``L`` in ``[-eps0, eps0]`` with atoms at the ends."""

    def __init__(self, eps0):
        self.e = float(eps0)
        self.atoms = (-self.e, self.e)
        self.support = (-self.e, self.e)
        self._q = LaplaceLoss(self.e)
        self.lscale = self.e  # (the size of the offsets added to L; SubsampledLoss.cdf_shift)

    # Under Q, L is the Laplace PRV.
    def cdf_Q(self, l):
        return self._q.cdf(l)

    def sf_Q(self, l):
        return self._q.sf(l)

    def pdf_Q(self, l):
        return self._q.pdf(l)

    # Under P: atom 1/2 at -e, atom e^{-e}/2 at +e, density e^{-(l+e)/2}/4 inside.
    def cdf_P(self, l, *, strict=False):
        l = np.asarray(l, dtype=np.float64)
        e = self.e
        inside = 1.0 - 0.5 * np.exp(-(np.clip(l, -e, e) + e) / 2)
        if strict:
            return np.where(l <= -e, 0.0, np.where(l > e, 1.0, inside))
        return np.where(l < -e, 0.0, np.where(l >= e, 1.0, inside))

    def sf_P(self, l, *, strict=False):
        l = np.asarray(l, dtype=np.float64)
        e = self.e
        inside = 0.5 * np.exp(-(np.clip(l, -e, e) + e) / 2)
        if strict:
            return np.where(l <= -e, 1.0, np.where(l > e, 0.0, inside))
        return np.where(l < -e, 1.0, np.where(l >= e, 0.0, inside))

    def pdf_P(self, l):
        l = np.asarray(l, dtype=np.float64)
        e = self.e
        return np.where((l > -e) & (l < e), 0.25 * np.exp(-(np.clip(l, -e, e) + e) / 2), 0.0)

    def pdf_slope_ops(self, l):
        # (both densities e^(+-l/2) up to constants: slope 1/2; l +- e rounded, halved, exp: (|l| + e) u / 2 + 9 u)
        return 0.5, (0.5 * (np.abs(l) + self.e) + 9) * _U

    def end_mass_P(self, l, side: int):
        """``P``'s continuous mass between ``l`` and the end of ``[-e, e]`` on ``side`` (atoms excluded; see
        :meth:`fastpld.mechanisms.ContinuousLoss.end_mass`): ``e^-e expm1((e - l) / 2) / 2`` above,
        ``-expm1(-(l + e) / 2) / 2`` below."""
        c = np.clip(np.asarray(l, dtype=np.float64), -self.e, self.e)
        if side == 1:
            return 0.5 * math.exp(-self.e) * np.expm1((self.e - c) / 2)
        return -0.5 * np.expm1(-(c + self.e) / 2)

    def end_mass_Q(self, l, side: int):
        """``Q``'s (the Laplace loss's): :meth:`LaplaceLoss.end_mass`."""
        return self._q.end_mass(l, side)

    def log_moment_P(self, lam):
        # E_P[e^{lam L}] = E_Q[e^{(lam - 1) L}]
        return self._q.log_mgf(np.asarray(lam, dtype=np.float64) - 1.0)

    def from_end(self, z, lower: bool):
        """``(pdf_P, pdf_Q, end_mass_P, end_mass_Q)`` at ``l = -e + z`` (``lower``, ``z >= 0``) or ``l = e + z``
        (``z <= 0``), from the offset ``z`` itself: near an end ``l`` rounds to within ``u e`` of it, which is all of a
        small offset (a subsampled Laplace's loss near its end, :meth:`fastpld.mechanisms.SubsampledLoss.from_end`).
        The masses are the continuous ones between ``l`` and that end.  Each is a constant times ``exp(+-z / 2)`` or
        ``expm1(+-z / 2)``: within ``(|z| / 2) r + 17 u`` (densities) and ``(1 + |z| / 2) r + 17 u`` (masses) of
        itself relative, ``r`` the relative error of ``z``."""
        z = np.asarray(z, dtype=np.float64)
        ee = math.exp(-self.e)
        if lower:
            # (P: e^(-(l + e) / 2) / 4, mass below -expm1(-(l + e) / 2) / 2; Q: e^((l - e) / 2) / 4, mass below
            # e^-e expm1((l + e) / 2) / 2)
            return (0.25 * np.exp(-z / 2), 0.25 * ee * np.exp(z / 2), -0.5 * np.expm1(-z / 2),
                    0.5 * ee * np.expm1(z / 2))
        # (above: P's density e^-e e^(-z / 2) / 4, mass e^-e expm1(-z / 2) / 2; Q's e^(z / 2) / 4, mass
        # -expm1(z / 2) / 2)
        return (0.25 * ee * np.exp(-z / 2), 0.25 * np.exp(z / 2), 0.5 * ee * np.expm1(-z / 2), -0.5 * np.expm1(z / 2))

    def expect(self, f, under):
        # atoms at -e and +e, density e^{-/+(l + -/+ e)/2} / 4 on (-e, e) (sign by P/Q)
        e = self.e
        sgn = -1.0 if under == "P" else 1.0
        big, small = 0.5, 0.5 * math.exp(-e)
        at = f(np.array([-e, e]))
        atoms = (big * at[0] + small * at[1]) if under == "P" else (small * at[0] + big * at[1])
        if e <= 0:
            return float(atoms)
        if 2 * e <= _LAPLACE_FINE:
            n = int(math.ceil(2 * e))
            edges = np.linspace(-e, e, n + 1)
        else:
            # unit panels over the first _LAPLACE_FINE from the density's peak (at -e under P, +e
            # under Q), then geometric ones: beyond it the density is below e^-800 (0 in float64),
            # where ceil(2 e) unit panels would not fit in memory for large eps0
            d = np.concatenate([np.arange(0.0, _LAPLACE_FINE), np.geomspace(_LAPLACE_FINE, 2 * e, 65)])
            edges = -e + d if under == "P" else np.sort(e - d)
        dens = lambda l: f(l) * 0.25 * np.exp(sgn * (l - sgn * e) / 2)
        return float(atoms) + _gl_integrate(dens, edges[:-1], edges[1:], 16)


def _log_binomial_moment(pair: _BasePair, q: float, a: np.ndarray) -> np.ndarray:
    """``log E_P[(M/P)^a]`` for integer ``a >= 0``, ``M = (1-q) P + q Q`` (exact binomial sum).

    All requested orders are evaluated at once as one masked log-sum-exp (the native
    backend's planner uses the compiled kernel instead: ``SubsampledLoss._binomial_chord``).
    """
    a = np.asarray(a)
    flat = a.astype(np.int64).ravel()
    if flat.size == 0:
        return np.zeros(a.shape)
    # Chernoff grids repeat few distinct orders (most s < 1 give a = 1, 2): evaluate each once.
    flat, inverse = np.unique(flat, return_inverse=True)
    # orders in chunks by powers of two (class c: the orders in [c/2, c), the first class [0, 8)),
    # each over j < c: the masked upper triangle is mostly not computed (same terms, same sums),
    # and an order's sum does not depend on which other orders were requested with it (the
    # memo of SubsampledLoss._K_binom then holds the same values whatever the call history)
    cls = [max(8, 1 << v.bit_length()) for v in flat.tolist()]
    amax = cls[-1] - 1
    j = np.arange(amax + 1)
    lm = pair.log_moment_P(j.astype(np.float64))
    # log-factorials from one table (elementwise identical to gammaln on the full grids)
    lf = special.gammaln(np.arange(amax + 2, dtype=np.float64))
    lq1 = math.log1p(-q) if q < 1 else -np.inf
    out = np.empty(flat.size)
    start = 0
    while start < flat.size:
        cap = cls[start]
        stop = int(np.searchsorted(flat, cap, side="left"))
        A = flat[start:stop, None]
        J = j[None, :cap]
        valid = J <= A
        with np.errstate(divide="ignore", invalid="ignore"):
            logc = lf[A + 1] - lf[J + 1] - lf[np.maximum(A - J, 0) + 1]
            terms = logc + np.where(A - J > 0, (A - J) * lq1, 0.0) + J * math.log(q) + lm[None, : J.shape[1]]
        terms = np.where(valid, terms, -np.inf)
        mx = terms.max(axis=1)
        out[start:stop] = mx + np.log(np.exp(terms - mx[:, None]).sum(axis=1))
        start = stop
    return out[inverse].reshape(a.shape)


def _integer_chord(fn, x):
    """Upper bound of a convex ``fn`` at real ``x >= 0`` via the chord between integers."""
    x = np.asarray(x, dtype=np.float64)
    lo = np.floor(x)
    hi = lo + 1
    # one call for both ends (fn is elementwise; its set-up is shared)
    both = fn(np.concatenate([lo.ravel(), hi.ravel()]))
    flo, fhi = both[: lo.size].reshape(lo.shape), both[lo.size:].reshape(hi.shape)
    w = x - lo
    with np.errstate(invalid="ignore"):
        return np.where(w == 0, flo, (1 - w) * flo + w * fhi)


_BINOM_TABLES = resources.region("tables")  # (key, size) -> read-only table (see _binomial_tables)


def _binomial_tables(pair, size):
    """``(log E_P[e^(j L)] for j < size, log((i-1)!) for i <= size)``: the tables of the compiled binomial sums.

    They depend on the pair's law and the size only, not on ``q``: a heterogeneous schedule (one
    ``q`` and often one pair object per part) computes them once.  Keyed by value for Gaussian
    pairs (``v``), else by the pair object (which keeps its own); read-only, shared by every memo.
    """
    lf_key = ("lf", size)
    lf = _BINOM_TABLES.get(lf_key)
    if lf is None:
        lf = special.gammaln(np.arange(size + 1, dtype=np.float64))
        lf.setflags(write=False)
        _BINOM_TABLES.put(lf_key, lf, lf.nbytes)
    if isinstance(pair, _GaussPair):
        key = ("gauss", pair.v, size)
        lm = _BINOM_TABLES.get(key)
    else:
        store, key = pair.__dict__.setdefault("_binom_tables", {}), size
        lm = store.get(key)
    if lm is None:
        lm = np.ascontiguousarray(pair.log_moment_P(np.arange(size, dtype=np.float64)), dtype=np.float64)
        lm.setflags(write=False)
        if isinstance(pair, _GaussPair):
            _BINOM_TABLES.put(key, lm, lm.nbytes)
        else:  # (kept with the pair, counted with its loss)
            store[key] = lm
    return lm, lf
