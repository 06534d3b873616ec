"""Mechanisms and their privacy loss random variables (PRVs).

A mechanism with output distributions ``P`` (on a dataset) and ``Q`` (on a
neighbour) has the privacy loss ``Y = log(Q(w) / P(w))`` with ``w ~ Q``; its
privacy curve is ``delta(eps) = E[(1 - e^(eps - Y))_+]`` (mass of ``Y`` at
``+inf`` counts fully).  Composition adds independent PRVs.

Each mechanism exposes its PRV per neighbouring direction through
:meth:`Mechanism.privacy_losses`, a mapping ``{"add": loss, "remove": loss}``.
Symmetric mechanisms (Gaussian, Laplace, pure DP) return the same object for
both directions, so it is composed once.

A :class:`PrivacyLoss` describes the *finite part* of ``Y`` (a probability
distribution) plus ``p_inf``, the mass at ``+inf``.  Continuous losses give a
CDF and a survival function that stay accurate deep in the tails (they are
evaluated separately, never as ``1 - cdf``), a density for the round-off
certificate, partial first moments for the mean correction of Algorithm 1, and
an upper bound on the cumulant generating function ``log E[e^(sY)]`` for
Chernoff tail bounds of any number of self-compositions.  Discrete losses give
their atoms exactly.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from . import _kernels
from . import _validation as V
from . import resources
from ._lazy import lazy_module

special = lazy_module("scipy.special")

__all__ = [
    "PrivacyLoss",
    "DiscreteLoss",
    "ContinuousLoss",
    "Mechanism",
    "Gaussian",
    "Laplace",
    "PoissonSubsampledGaussian",
    "PoissonSubsampledLaplace",
    "PureDP",
    "RandomizedResponse",
    "ApproxDP",
    "CustomCDF",
    "CustomPMF",
]

_U = np.finfo(np.float64).eps / 2  # unit round-off of float64
_LOG_HALF = math.log(0.5)


# --------------------------------------------------------------------------------------
# Privacy losses
# --------------------------------------------------------------------------------------
class PrivacyLoss:
    """Distribution of a privacy loss random variable (one direction).

    Attributes
    ----------
    p_inf : float
        Probability that the loss is ``+inf`` (e.g. the ``delta`` of an
        (eps, delta)-DP mechanism).  Every other method describes the finite
        part, conditioned on being finite.
    support : tuple of float
        Bounds ``(lo, hi)`` of the finite part (may be infinite).
    """

    p_inf: float = 0.0
    support: tuple = (-math.inf, math.inf)
    is_discrete: bool = False

    def log_mgf(self, s: np.ndarray) -> np.ndarray:
        """Upper bound on ``log E[exp(s Y)]`` of the finite part (``+inf`` if unknown)."""
        raise NotImplementedError

    def mean(self) -> float:
        raise NotImplementedError

    def std(self) -> float:
        raise NotImplementedError

    # Chernoff tail bounds ------------------------------------------------------------
    def tail_bound(self, count: int, x: float, *, upper: bool = True) -> float:
        """Rigorous bound on ``Pr[Y_1 + ... + Y_count >= x]`` (or ``<= x`` if ``upper=False``).

        Uses ``Pr[S >= x] <= exp(count * K(s) - s x)`` minimised over a grid of
        ``s`` (any ``s`` gives a valid bound), and the support of the loss.
        """
        lo, hi = self.support
        if upper and x > count * hi:
            return 0.0
        if not upper and x < count * lo:
            return 0.0
        s = _s_grid(self.std() * math.sqrt(count))
        if not upper:
            s = -s
        with np.errstate(over="ignore", invalid="ignore"):
            expo = count * self.log_mgf(s) - s * x
        expo = expo[np.isfinite(expo)]
        if expo.size == 0:
            return 1.0
        return float(min(1.0, math.exp(min(0.0, expo.min()))))

    def tail_quantile(self, count: int, tail: float, *, upper: bool = True) -> float:
        """Smallest ``x`` (largest if ``upper=False``) with ``tail_bound(count, x) <= tail``.

        Solved per grid point ``s``: ``x(s) = (count K(s) - log tail) / s``; the
        best grid point is returned, which is a valid (slightly loose) answer.
        """
        lo, hi = self.support
        s = _s_grid(self.std() * math.sqrt(count))
        if not upper:
            s = -s
        with np.errstate(over="ignore", invalid="ignore"):
            xs = (count * self.log_mgf(s) - math.log(tail)) / s
        xs = xs[np.isfinite(xs)]
        if upper:
            best = xs.min() if xs.size else math.inf
            return float(min(best, count * hi))
        best = xs.max() if xs.size else -math.inf
        return float(max(best, count * lo))


def _s_grid(scale: float) -> np.ndarray:
    """Grid of Chernoff parameters around the natural scale ``1/scale``."""
    scale = max(scale, 1e-300)
    return np.geomspace(1e-3, 1e4, 160) / scale


def _real_vector(name, value):
    """``value`` as a flat float64 array, or ``ValueError`` naming ``name``."""
    try:
        raw = np.asarray(value)
        if raw.dtype.kind not in "iufO":  # no bools, complex numbers or strings
            raise TypeError
        return np.asarray(raw, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of real numbers, got {value!r}") from None


class DiscreteLoss(PrivacyLoss):
    """A privacy loss with finitely many finite values (plus mass at ``+inf``)."""

    is_discrete = True

    def __init__(self, values, probabilities, p_inf: float = 0.0):
        v = _real_vector("values", values)
        p = _real_vector("probabilities", probabilities)
        if v.size == 0 or v.shape != p.shape:
            raise ValueError("values and probabilities must be non-empty arrays of the same length")
        if not np.all(np.isfinite(v)):
            raise ValueError("values must be finite (put mass at +infinity into p_inf)")
        if not np.all(np.isfinite(p)):
            raise ValueError("probabilities must be finite (not NaN or infinite)")
        if (p < 0).any():
            raise ValueError("probabilities must be >= 0")
        total = p.sum()
        if not (abs(total - 1.0) <= 1e-9 or (p_inf > 0 and abs(total + p_inf - 1.0) <= 1e-9)):
            raise ValueError(f"probabilities must sum to 1 (or to 1 - p_inf), got {V.show(total)}")
        keep = p > 0
        v, p = v[keep], p[keep]
        order = np.argsort(v, kind="stable")
        self.values = v[order]
        self.probs = p[order] / p.sum()
        self.p_inf = float(p_inf)
        self.support = (float(self.values[0]), float(self.values[-1]))

    def log_mgf(self, s):
        s = np.asarray(s, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):  # s v beyond the float range: +-inf, the right limit
            out = special.logsumexp(np.multiply.outer(s, self.values), b=self.probs, axis=-1)
        return np.where(np.isnan(out), np.inf, out)  # (inf - inf inside: unknown, so no bound)

    def mean(self) -> float:
        return float(np.dot(self.values, self.probs))

    def std(self) -> float:
        m = self.mean()
        return float(math.sqrt(max(np.dot((self.values - m) ** 2, self.probs), 0.0)))

    def __repr__(self):
        return f"DiscreteLoss(n={self.values.size}, p_inf={self.p_inf})"


class ContinuousLoss(PrivacyLoss):
    """A privacy loss given by its CDF (possibly with atoms).

    Subclasses implement :meth:`cdf`, :meth:`sf`, :meth:`pdf` (density of the
    continuous part, used only for the round-off certificate) and
    :meth:`log_mgf`; they may override :meth:`partial_mean` with a closed form.
    ``atoms`` lists the locations of point masses.
    """

    atoms: tuple = ()
    #: Relative accuracy of ``cdf``/``sf`` (in the tail region that matters),
    #: used by the round-off certificate of the discretisation.
    cdf_rel_error: float = 1e-12

    def cdf(self, t):
        raise NotImplementedError

    def sf(self, t):
        raise NotImplementedError

    def pdf(self, t):
        raise NotImplementedError

    def cdf_shift(self, tmax: float) -> float:
        """Bound on the *position* error of :meth:`cdf`/:meth:`sf` for ``|t| <= tmax`` (certificate).

        The computed values at ``t`` are within ``cdf_rel_error`` (relative) of the exact ones at
        some point within this distance of ``t``.  0 for losses whose argument is used as given;
        losses that transform ``t`` first (the subsampled ones) round it, and near a steep CDF (a
        near-atom) that rounding is not a small relative error of the value.
        """
        return 0.0

    def partial_mean(self, edges: np.ndarray) -> tuple[float, float]:
        """``E[Y; edges[0] < Y <= edges[-1]]`` and an error bound.

        Generic version: Stieltjes integration by parts
        ``int t dF = b F(b) - a F(a) - int_a^b F(t) dt`` with Gauss-Legendre on
        the panels given by ``edges`` (the discretisation's own buckets, so the
        panels are fine where the mass is).  Panels whose 8- and 16-point rules
        disagree are split adaptively; the remaining disagreement, inflated
        tenfold, is the error bound.
        """
        return self._partial_moments(edges)[:2]

    def _partial_moments(self, edges, second=False):
        """:meth:`partial_mean` and, if ``second``, ``int_a^b t F(t) dt`` on the panels ``edges``.

        The second integral reuses the 16-point CDF values of the first level
        (same nodes, same arithmetic as a separate Gauss-Legendre pass); it is
        ``None`` when atoms split the panels.
        """
        edges = np.asarray(edges, dtype=np.float64)
        a, b = float(edges[0]), float(edges[-1])
        # split panels at atoms and at finite support ends, so that F is analytic on each panel:
        # across a support end (e.g. log(1-q) of a subsampled loss) F is C-infinity but not
        # analytic, and the 8- and 16-point rules can agree on a wrong value (error under-estimated)
        breaks = [x for x in (*self.atoms, *self.support) if math.isfinite(x) and a < x < b]
        pts = np.unique(np.concatenate([edges, breaks]))
        lo, hi = pts[:-1], pts[1:]
        total = 0.0
        err = 0.0
        tol = 1e-15
        tf = None
        for level in range(8):
            if level == 0 and second and pts.size == edges.size:
                i16, nodes, vals = _gl_panels(self.cdf, lo, hi, 16, keep=True)
                half = 0.5 * (hi - lo)
                tf = float(np.sum(half * ((nodes * vals) @ _GL_CACHE[16][1])))
                i8 = _gl_panels(self.cdf, lo, hi, 8)
            else:
                i16, i8 = _gl_panels_16_8(self.cdf, lo, hi)
            d = np.abs(i16 - i8)
            # (absolute tolerance per unit length once b - a > 1: a fixed total would ask for accuracy
            # below the round-off of the sum, 16 u (|a| + |b| + (b - a)), and split every panel)
            bad = d > tol * np.maximum(hi - lo, 1e-300) / min(max(b - a, 1e-300), 1.0) * 1e3
            if level == 7 or not bad.any():
                total += float(i16.sum())
                err += float(d.sum())
                break
            total += float(i16[~bad].sum())
            err += float(d[~bad].sum())
            lo, hi = lo[bad], hi[bad]
            sub = np.linspace(0.0, 1.0, 5)
            pts2 = lo[:, None] + (hi - lo)[:, None] * sub[None, :]
            lo, hi = pts2[:, :-1].ravel(), pts2[:, 1:].ravel()
        fa, fb = float(self.cdf(np.array([a]))[0]), float(self.cdf(np.array([b]))[0])
        val = b * fb - a * fa - total
        err = 10.0 * err + 16 * _U * (abs(b) + abs(a) + abs(total) + (b - a))
        return float(val), float(err), tf

    def mean(self) -> float:
        raise NotImplementedError

    def std(self) -> float:
        raise NotImplementedError


_GL_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _gl_panels(f, lo, hi, n, keep=False):
    """Gauss-Legendre integral of ``f`` over each panel ``[lo_i, hi_i]`` (``keep``: also nodes, values)."""
    if n not in _GL_CACHE:
        _GL_CACHE[n] = np.polynomial.legendre.leggauss(n)
    x, w = _GL_CACHE[n]
    mid = 0.5 * (lo + hi)
    half = 0.5 * (hi - lo)
    pts = mid[:, None] + half[:, None] * x[None, :]
    vals = f(pts.ravel()).reshape(pts.shape)
    if keep:
        return half * (vals @ w), pts, vals
    return half * (vals @ w)


def _gl_panels_16_8(f, lo, hi):
    """:func:`_gl_panels` with 16 and with 8 points from one call of ``f`` (same values)."""
    for n in (16, 8):
        if n not in _GL_CACHE:
            _GL_CACHE[n] = np.polynomial.legendre.leggauss(n)
    (x16, w16), (x8, w8) = _GL_CACHE[16], _GL_CACHE[8]
    mid = 0.5 * (lo + hi)
    half = 0.5 * (hi - lo)
    p16 = mid[:, None] + half[:, None] * x16[None, :]
    p8 = mid[:, None] + half[:, None] * x8[None, :]
    vals = f(np.concatenate([p16.ravel(), p8.ravel()]))
    return half * (vals[: p16.size].reshape(p16.shape) @ w16), half * (vals[p16.size:].reshape(p8.shape) @ w8)


def _gl_integrate(f, lo, hi, n):
    return float(np.sum(_gl_panels(f, lo, hi, n)))


_NDTR_REL = 4096 * _U  # relative error assumed of scipy.special.ndtr at any z (GaussianLoss)


class GaussianLoss(ContinuousLoss):
    """Loss of the Gaussian mechanism: ``Y ~ N(mu^2/2, mu^2)``."""

    # scipy's ndtr (and the exp(-z^2 / 2) of the density and partial mean) round z^2 before the exponential:
    # relative error ~ (2 z^2 + 64) u in the tails, measured up to ~2100 u near z = -37 (ndtr underflows below
    # 1e-300 from z = -37.5), 35 u for |z| <= 5 (docs/roundoff.md section 7); was 64 u
    cdf_rel_error = _NDTR_REL

    def __init__(self, mu: float):
        self.mu = float(mu)
        self.m = 0.5 * self.mu**2
        self.s = self.mu
        self.support = (-math.inf, math.inf)

    def cdf_shift(self, tmax: float) -> float:
        """``(t - m) / s`` rounds twice, each time by at most ``u |t - m|`` in ``t``'s units."""
        return 2 * _U * (tmax + abs(self.m))

    # (a standardised argument beyond the float range is +-inf, where ndtr and the density are exact)
    def cdf(self, t):
        with np.errstate(over="ignore"):
            return special.ndtr((np.asarray(t, dtype=np.float64) - self.m) / self.s)

    def sf(self, t):
        with np.errstate(over="ignore"):
            return special.ndtr((self.m - np.asarray(t, dtype=np.float64)) / self.s)

    def pdf(self, t):
        with np.errstate(over="ignore"):
            z = (np.asarray(t, dtype=np.float64) - self.m) / self.s
            return np.exp(-0.5 * z * z) / (self.s * math.sqrt(2 * math.pi))

    def partial_mean(self, edges):
        a, b = float(edges[0]), float(edges[-1])
        al, be = (a - self.m) / self.s, (b - self.m) / self.s
        # mass via the tail that avoids cancellation
        if al > 0:
            mass = special.ndtr(-al) - special.ndtr(-be)
        else:
            mass = special.ndtr(be) - special.ndtr(al)
        phi = lambda z: math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) if math.isfinite(z) else 0.0
        val = self.m * mass + self.s * (phi(al) - phi(be))
        err = _NDTR_REL * (abs(self.m) * mass + self.s * (phi(al) + phi(be)) + abs(val))
        return float(val), float(err)

    def log_mgf(self, s):
        s = np.asarray(s, dtype=np.float64)
        return s * self.m + 0.5 * s * s * self.s**2

    def mean(self):
        return self.m

    def std(self):
        return self.s

    def __repr__(self):
        return f"GaussianLoss(mu={self.mu})"


class LaplaceLoss(ContinuousLoss):
    """Loss of the Laplace mechanism with ``eps0 = sensitivity / scale``.

    Atom ``1/2`` at ``+eps0``, atom ``e^(-eps0)/2`` at ``-eps0``, and on
    ``(-eps0, eps0)`` the density ``e^((t - eps0)/2) / 4``.
    """

    cdf_rel_error = 64 * _U

    def __init__(self, eps0: float):
        self.e = float(eps0)
        self.atoms = (-self.e, self.e)
        self.support = (-self.e, self.e)

    def cdf_shift(self, tmax: float) -> float:
        """``t - eps0`` rounds by at most ``u |t - eps0|``; far from ``eps0`` that is no small relative
        error of ``exp((t - eps0) / 2)`` (``|t - eps0| / 2`` times it), but it is a small move of ``t``."""
        return 2 * _U * (tmax + self.e)

    def cdf(self, t):
        t = np.asarray(t, dtype=np.float64)
        inside = 0.5 * np.exp((np.clip(t, -self.e, self.e) - self.e) / 2)
        return np.where(t < -self.e, 0.0, np.where(t >= self.e, 1.0, inside))

    def sf(self, t):
        t = np.asarray(t, dtype=np.float64)
        inside = 1.0 - 0.5 * np.exp((np.clip(t, -self.e, self.e) - self.e) / 2)
        return np.where(t < -self.e, 1.0, np.where(t >= self.e, 0.0, inside))

    def pdf(self, t):
        t = np.asarray(t, dtype=np.float64)
        inside = 0.25 * np.exp((np.clip(t, -self.e, self.e) - self.e) / 2)
        return np.where((t > -self.e) & (t < self.e), inside, 0.0)

    def _cont_moment(self, x1, x2):
        # int_{x1}^{x2} t e^((t-e)/2)/4 dt = [e^((t-e)/2) (t - 2) / 2]
        g = lambda x: 0.5 * math.exp((x - self.e) / 2) * (x - 2)
        return g(x2) - g(x1)

    def partial_mean(self, edges):
        a, b = float(edges[0]), float(edges[-1])
        val = 0.0
        if a < -self.e <= b:
            val += -self.e * 0.5 * math.exp(-self.e)
        if a < self.e <= b:
            val += self.e * 0.5
        x1, x2 = max(a, -self.e), min(b, self.e)
        if x2 > x1:
            val += self._cont_moment(x1, x2)
        return val, 64 * _U * (1 + abs(val) + self.e)

    def log_mgf(self, s):
        s = np.asarray(s, dtype=np.float64)
        e = self.e
        t1 = _LOG_HALF + s * e
        t2 = _LOG_HALF - e * (1 + s)
        a = (s + 0.5) * e
        absa = np.abs(a)
        with np.errstate(divide="ignore", invalid="ignore"):
            # log(2 sinh(a)/a) computed stably
            log_sinhc = np.where(
                absa > 1e-6, absa + np.log1p(-np.exp(-2 * absa)) - np.log(np.maximum(absa, 1e-300)), a * a / 6 + math.log(2.0)
            )
            log_sinhc = np.where(absa > 1e-6, log_sinhc, math.log(2.0) + a * a / 6)
        # continuous part: (1/4) e^{-e/2} * 2 sinh(a)/(s + 1/2) = (e/4) e^{-e/2} * 2 sinh(a)/a
        t3 = math.log(0.25 * e) - e / 2 + log_sinhc if e > 0 else np.full_like(s, -np.inf)
        return np.logaddexp(np.logaddexp(t1, t2), t3)

    def mean(self):
        return self.partial_mean(np.array([-math.inf, math.inf]))[0]

    def std(self):
        k1 = self.mean()
        # second moment: atoms + continuous part  int t^2 e^{(t-e)/2}/4 = [e^{(t-e)/2}(t^2 - 4t + 8)/2]
        e = self.e
        g = lambda x: 0.5 * math.exp((x - e) / 2) * (x * x - 4 * x + 8)
        m2 = 0.5 * e * e + 0.5 * math.exp(-e) * e * e + g(e) - g(-e)
        return math.sqrt(max(m2 - k1 * k1, 0.0))

    def __repr__(self):
        return f"LaplaceLoss(eps0={self.e})"


# ---- Poisson subsampling -------------------------------------------------------------
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

    def log_moment_P(self, lam):
        # E_P[e^{lam L}] = E_Q[e^{(lam - 1) L}]
        return self._q.log_mgf(np.asarray(lam, dtype=np.float64) - 1.0)

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


def _cdf_moments(loss: "ContinuousLoss", lo: float, hi: float) -> tuple[float, float]:
    """Mean and standard deviation of a loss on ``[lo, hi]`` by quadrature of its CDF on 2048 panels.

    Second moment by parts, ``int t^2 dF = b^2 F(b) - a^2 F(a) - 2 int t F(t) dt``; the CDF values at the
    16-point nodes serve both integrals.
    """
    edges = np.linspace(lo, hi, 2049)
    m, _, i16 = loss._partial_moments(edges, second=True)
    if i16 is None:
        i16 = _gl_integrate(lambda x: x * loss.cdf(x), edges[:-1], edges[1:], 16)
    fa, fb = float(loss.cdf(np.array([lo]))[0]), float(loss.cdf(np.array([hi]))[0])
    m2 = hi * hi * fb - lo * lo * fa - 2 * i16
    return float(m), float(math.sqrt(max(m2 - m * m, 0.0)))


class SubsampledLoss(ContinuousLoss):
    """Loss of a Poisson-subsampled mechanism in one direction.

    ``remove``: ``Y = log(1 - q + q e^L)`` with ``w ~ M = (1-q) P + q Q``
    (bounded below by ``log(1-q)``); ``add``: ``Y = -log(1 - q + q e^L)`` with
    ``w ~ P`` (bounded above by ``-log(1-q)``).
    """

    cdf_rel_error = 1e-11

    def __init__(self, pair: _BasePair, q: float, direction: str):
        self.pair = pair
        self.q = float(q)
        self.direction = direction
        self._ylo = math.log1p(-self.q)
        def g(l):
            if not math.isfinite(l):
                return math.inf if l > 0 else self._ylo
            if l > 700:  # e^l overflows: log(1 - q + q e^l) = l + log(q) + log1p((1 - q) e^-l / q)
                return l + math.log(self.q) + math.log1p((1 - self.q) * math.exp(-l) / self.q)
            return math.log1p(-self.q + self.q * math.exp(l))
        lo, hi = pair.support
        if direction == "remove":
            self.support = (max(self._ylo, g(lo)), g(hi))
            self.atoms = tuple(g(x) for x in pair.atoms)
        else:
            self.support = (-g(hi), min(-self._ylo, -g(lo)))
            self.atoms = tuple(-g(x) for x in pair.atoms)
        self._mean = None
        self._std = None
        # the Gaussian pair has compiled kernels (CDF/SF/density, partial moments in L-space)
        self._psg = (self.q, pair.v, pair.sd, direction == "remove") if isinstance(pair, _GaussPair) else None

    def cdf_shift(self, tmax: float) -> float:
        """Position error of the CDF for ``|t| <= tmax``: ``8 u (tmax + |log q| + |log(1-q)| + c + 2)``.

        ``l = g^-1(t)`` (:func:`fastpld._kernels.subsampled_ginv`) is exact at ``t`` moved by at most
        twice the error of the rounded ``log1p(-q)``, and its own rounding, like that of the pair's
        offsets (``c``: ``v / 2`` or ``eps0``) and of the normal arguments, is an absolute error of a
        few ``u (|l| + |log q| + |log(1-q)| + c)`` in ``L``, hence at most that in ``t`` (``dt/dl =
        1 - (1-q) e^-t`` lies in ``[0, 1]``, and ``|l| dt/dl <= |t| + |log q| + |log(1-q)| + 1``).
        Each mixture term is monotone in its argument, so a sum of such terms is again the exact
        CDF at one point in that range.  (_leaf.psg_leaf_full repeats this formula.)
        """
        q = self.q
        return 8 * _U * (tmax + abs(math.log(q)) + abs(math.log1p(-q)) + self.pair.lscale + 2)

    # l(t) = g^{-1}(t) = log((e^t - 1 + q)/q), defined for t > log(1-q)
    def _ginv(self, t):
        # (without overflow above t = 709.78 or cancellation near log(1 - q): see subsampled_ginv)
        return _kernels.subsampled_ginv(t, self.q)

    def _cdf_sf_pdf(self, t):
        """``(cdf(t), sf(t), pdf(t))`` with one evaluation of ``g^-1`` (same values as the three calls)."""
        t = np.asarray(t, dtype=np.float64)
        if self._psg is not None:
            return _kernels.psg_eval(t, *self._psg)
        q = self.q
        if self.direction == "remove":
            l = self._ginv(t)
            F = (1 - q) * self.pair.cdf_P(l) + q * self.pair.cdf_Q(l)
            S = (1 - q) * self.pair.sf_P(l) + q * self.pair.sf_Q(l)
        else:
            l = self._ginv(-t)
            F = np.where(t >= -self._ylo, 1.0, self.pair.sf_P(l, strict=True))
            S = np.where(t >= -self._ylo, 0.0, self.pair.cdf_P(l, strict=True))
        return F, S, self.pdf(t)

    def cdf(self, t):
        t = np.asarray(t, dtype=np.float64)
        if self._psg is not None:
            return _kernels.psg_eval(t, *self._psg, want_pdf=False)[0]
        q = self.q
        if self.direction == "remove":
            l = self._ginv(t)
            return (1 - q) * self.pair.cdf_P(l) + q * self.pair.cdf_Q(l)
        # Y <= t  <=>  L >= ginv(-t)
        l = self._ginv(-t)
        return np.where(t >= -self._ylo, 1.0, self.pair.sf_P(l, strict=True))

    def sf(self, t):
        t = np.asarray(t, dtype=np.float64)
        if self._psg is not None:
            return _kernels.psg_eval(t, *self._psg, want_pdf=False)[1]
        q = self.q
        if self.direction == "remove":
            l = self._ginv(t)
            return (1 - q) * self.pair.sf_P(l) + q * self.pair.sf_Q(l)
        l = self._ginv(-t)
        return np.where(t >= -self._ylo, 0.0, self.pair.cdf_P(l, strict=True))

    def pdf(self, t):
        t = np.asarray(t, dtype=np.float64)
        if self._psg is not None:
            return _kernels.psg_eval(t, *self._psg, want_cdf=False)[2]
        q = self.q
        sgn = 1.0 if self.direction == "remove" else -1.0
        tt = sgn * t
        l, dl = _kernels.subsampled_ginv(tt, q, want_dl=True)  # dl/dt = e^t / (e^t - 1 + q)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.direction == "remove":
                dens = ((1 - q) * self.pair.pdf_P(l) + q * self.pair.pdf_Q(l)) * dl
            else:
                dens = self.pair.pdf_P(l) * dl
        return np.where(np.isfinite(dens), dens, 0.0)

    def partial_mean(self, edges):
        """``E[Y; edges[0] < Y <= edges[-1]]`` and an error bound.

        Gaussian pair: ``Y = +-g(L)`` with ``g(l) = log(1 - q + q e^l)`` analytic in
        ``|Im l| < pi``, so the expectation is integrated over ``L`` between the images of
        the two ends (Gauss-Legendre on panels of width ``<= min(sd, 1)``, see
        :func:`fastpld._kernels.psg_moments`), a few hundred points where the quadrature in
        ``Y`` needs thousands.  Error bound: ten times the 8- vs 16-point disagreement (as in
        :meth:`ContinuousLoss.partial_mean`) plus a bound on the round-off of the sums.
        """
        if self._psg is None:
            return super().partial_mean(edges)
        edges = np.asarray(edges, dtype=np.float64)
        a, b = float(edges[0]), float(edges[-1])
        q, v, sd, remove = self._psg
        if remove:  # a < Y <= b  <=>  ginv(a) < L <= ginv(b)
            la, lb = self._ginv(np.array([a, b]))
            i1, d1, r1 = _kernels.psg_moments(float(la), float(lb), q, v, sd, True)[:3]
        else:  # a < -g(L) <= b  <=>  ginv(-b) <= L < ginv(-a)
            la, lb = self._ginv(np.array([-b, -a]))
            i1, d1, r1 = _kernels.psg_moments(float(la), float(lb), q, v, sd, False)[:3]
            i1 = -i1
        return float(i1), float(10.0 * d1 + r1)

    def _K_binom(self, a):
        # memo per (pair, q): both directions need nearly the same integer orders
        a = np.asarray(a)
        memo = self.pair.__dict__.setdefault("_binom_memo", {}).setdefault(self.q, {})
        flat = a.astype(np.int64).ravel()
        need = [v for v in set(flat.tolist()) if v not in memo]
        if need:
            vals = _log_binomial_moment(self.pair, self.q, np.array(need, dtype=np.int64))
            memo.update(zip(need, vals.tolist()))
        return np.array([memo[v] for v in flat.tolist()], dtype=np.float64).reshape(a.shape)

    def _binomial_chord(self, x, shift, need=None):
        """``_integer_chord(lambda a: self._K_binom(a + shift), x)`` by the compiled kernel (same terms).

        Its memo (one per (pair, q), apart from the numpy one: the compiled sums may differ in the
        last bit, and a backend's results must not depend on which backend filled a memo first)
        holds each order's sum, which does not depend on the other orders requested.
        """
        if need is None:  # (the caller may know it: many losses on one grid)
            need = int(np.max(x)) + shift + 2 if x.size else 2
        tabs = self.pair.__dict__.setdefault("_binom_native", {})
        t = tabs.get(self.q)
        if t is None or t[2].size < need:
            size = max(need, 1024)
            lm, lf = _binomial_tables(self.pair, size)
            memo = np.full(size, np.nan)
            if t is not None:
                memo[: t[2].size] = t[2]
            t = tabs[self.q] = (np.ascontiguousarray(lm, dtype=np.float64), lf, memo)
        lq1 = math.log1p(-self.q) if self.q < 1 else -np.inf
        return _kernels.binomial_chord(x, shift, t[0], t[1], lq1, math.log(self.q), t[2])

    def log_mgf(self, s, *, native=False):
        # native: the binomial chords come from the compiled kernel (same terms; the planner uses it)
        s = np.asarray(s, dtype=np.float64)
        out = np.full(s.shape, np.inf)
        q = self.q
        if self.direction == "remove":
            # s >= 0: E_M[(M/P)^s] = E_P[(M/P)^(s+1)], convex in s: chord between integers.
            pos = s >= 0
            if pos.any():
                x = np.minimum(s[pos], 4096)
                k = self._binomial_chord(x, 1) if native else _integer_chord(lambda a: self._K_binom(a + 1), x)
                # beyond the largest tabulated order the MGF is unknown (+inf), not K(4096): K grows
                out[pos] = np.where(s[pos] <= 4096, k, np.inf)
            mid = (s < 0) & (s >= -1)
            out[mid] = 0.0  # Jensen: E_P[(M/P)^(1+s)] <= 1
            neg = s < -1
            if neg.any():
                a = -1 - s[neg]
                # x -> x^(-a) convex: (1-q + q Q/P)^(-a) <= (1-q) + q (P/Q)^a
                out[neg] = np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + self.pair.log_moment_P(-a))
        else:
            pos = s > 0
            if pos.any():
                a = s[pos]
                out[pos] = np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + self.pair.log_moment_P(-a))
            mid = (s <= 0) & (s >= -1)
            out[mid] = 0.0
            neg = s < -1
            if neg.any():
                x = np.minimum(-s[neg], 4096)
                k = self._binomial_chord(x, 0) if native else _integer_chord(self._K_binom, x)
                out[neg] = np.where(-s[neg] <= 4096, k, np.inf)  # unknown beyond order 4096 (see above)
        return out

    def _moments(self):
        if self._mean is None and self._pair_moments():
            pass
        elif self._mean is None:
            # KL-type moments by quadrature on a quantile-adapted panel grid.
            m, sd = _cdf_moments(self, *_generic_window(self, 1e-18))
            # _std before _mean: another thread that sees _mean set must also see _std
            self._std = sd
            self._mean = m
        return self._mean, self._std

    def _pair_moments(self):
        """Mean and std from expectations over the pair's own loss ``L`` (cheap, accurate); False if unavailable.

        ``Y = +/- g(L)`` with ``g(l) = log(1 - q + q e^l)`` analytic in ``|Im l| < pi``,
        so the pair's quadrature is accurate to round-off (the CDF-based
        quadrature in ``Y`` converges slowly where ``g^-1`` is singular).
        """
        if self._psg is not None:
            q, v, sd, remove = self._psg
            m1, m2 = _kernels.psg_mean_sq(q, v, sd, remove)  # (psg_moments' I1 and I2, bitwise)
            if not remove:
                m1 = -m1
            self._std = float(math.sqrt(max(m2 - m1 * m1, 0.0)))
            self._mean = float(m1)
            return True
        lq1, lq = math.log1p(-self.q), math.log(self.q)
        g = lambda l: np.logaddexp(lq1, lq + l)
        g2 = lambda l: g(l) ** 2
        parts = []
        for f in (g, g2):
            if self.direction == "remove":  # w ~ M = (1-q) P + q Q
                eP, eQ = self.pair.expect(f, "P"), self.pair.expect(f, "Q")
                if eP is None or eQ is None:
                    return False
                parts.append((1 - self.q) * eP + self.q * eQ)
            else:  # w ~ P, Y = -g(L)
                eP = self.pair.expect(f, "P")
                if eP is None:
                    return False
                parts.append(eP)
        m1, m2 = parts
        if self.direction == "add":
            m1 = -m1
        self._mean = float(m1)
        self._std = float(math.sqrt(max(m2 - m1 * m1, 0.0)))
        return True

    def _native_moments(self):
        """``(mean, std)`` by the compiled quadrature of :meth:`_pair_moments` (Gaussian pair), else ``None``.

        For the native leaf's truncation ladder (any centre and scale give a valid window);
        cached apart from :meth:`mean`/:meth:`std`, so that the numpy backend's values never
        depend on which backend ran first.
        """
        r = getattr(self, "_fastpld_moments_native", None)
        if r is None:
            if not (isinstance(self.pair, _GaussPair) and _kernels.HAVE_CORE and _kernels._core is not None
                    and 0 < self.q < 1):
                return None
            if 16 not in _GL_CACHE:
                _GL_CACHE[16] = np.polynomial.legendre.leggauss(16)
            x, w = _GL_CACHE[16]
            r = self._fastpld_moments_native = _kernels._core.gauss_pair_moments(
                self.pair.v, self.pair.sd, self.q, self.direction == "remove", x, w)
        return r

    def mean(self):
        return self._moments()[0]

    def std(self):
        return self._moments()[1]

    def __repr__(self):
        return f"SubsampledLoss({type(self.pair).__name__}, q={self.q}, {self.direction})"


def subsampled_log_mgf_rows(losses, s, *, native=False):
    """``np.stack([loss.log_mgf(s, native=native) for loss in losses])`` for many :class:`SubsampledLoss`.

    The same values bitwise (tested), for the planner's grids of heterogeneous schedules (one loss
    per part): the sign masks of ``s`` are computed once, the convexity bounds of all Gaussian-pair
    losses (closed-form moments ``lam (lam - 1) v / 2``) in one array pass, and only the binomial
    chords row by row (their memo is per pair and ``q``).
    """
    s = np.asarray(s, dtype=np.float64)
    out = np.full((len(losses), s.size), np.inf)
    for direction in ("remove", "add"):
        rows = [i for i, loss in enumerate(losses) if loss.direction == direction]
        if not rows:
            continue
        if direction == "remove":  # as log_mgf: chords at s >= 0 (shift 1), convexity bound below -1
            chord, conv, zero, shift = s >= 0, s < -1, (s < 0) & (s >= -1), 1
            x_raw = s[chord]
            lam = -(-1 - s[conv])
        else:  # convexity bound at s > 0, chords below -1 (shift 0)
            chord, conv, zero, shift = s < -1, s > 0, (s <= 0) & (s >= -1), 0
            x_raw = -s[chord]
            lam = -s[conv]
        x = np.minimum(x_raw, 4096)
        known = x_raw <= 4096
        if zero.any():
            out[np.ix_(rows, np.nonzero(zero)[0])] = 0.0
        gauss = [i for i in rows if isinstance(losses[i].pair, _GaussPair)]
        if conv.any():
            qs = [losses[i].q for i in rows]
            lq1 = np.array([math.log1p(-q) if q < 1 else -np.inf for q in qs])[:, None]
            lq = np.array([math.log(q) for q in qs])[:, None]
            vals = np.empty((len(rows), lam.size))
            pos = {i: r for r, i in enumerate(rows)}
            if gauss:
                gr = [pos[i] for i in gauss]
                v = np.array([losses[i].pair.v for i in gauss])[:, None]
                # _GaussPair.log_moment_P, ((lam (lam - 1)) v) / 2, for every row at once
                vals[gr] = np.logaddexp(lq1[gr], lq[gr] + (lam * (lam - 1))[None, :] * v / 2)
            gset = set(gauss)
            for i in rows:
                if i not in gset:
                    r = pos[i]
                    vals[r] = np.logaddexp(lq1[r, 0], lq[r, 0] + losses[i].pair.log_moment_P(lam))
            out[np.ix_(rows, np.nonzero(conv)[0])] = vals
        if chord.any():
            ks = np.empty((len(rows), x.size))
            need = int(np.max(x)) + shift + 2 if x.size else 2
            for r, i in enumerate(rows):
                loss = losses[i]
                if native:
                    ks[r] = loss._binomial_chord(x, shift, need)
                elif shift:
                    ks[r] = _integer_chord(lambda a, loss=loss: loss._K_binom(a + 1), x)
                else:
                    ks[r] = _integer_chord(loss._K_binom, x)
            out[np.ix_(rows, np.nonzero(chord)[0])] = np.where(known, ks, np.inf)
    return out


def _generic_window(loss: ContinuousLoss, tail: float, centre: float = 0.0, scale: float = 1.0) -> tuple[float, float]:
    """Points ``a <= b`` with ``cdf(a) <= tail`` and ``sf(b) <= tail``.

    Searched on a vectorised geometric ladder around ``centre``; any such pair is
    valid where it is used, because callers charge the mass actually left out.
    """
    lo, hi = loss.support
    steps = _ladder_steps(centre, scale)  # shared by both sides
    a = ladder(loss.cdf, tail, centre, scale, -1.0, lo, _steps=steps)
    b = ladder(loss.sf, tail, centre, scale, +1.0, hi, _steps=steps)
    return a, b


_LADDER_BASE = np.concatenate([[0.0], np.geomspace(1e-9, 1e7, 400)])


def _ladder_steps(centre, scale):
    """Sorted distinct distances of :func:`ladder`: the base ladder on the scale and on ``|centre|``."""
    base = _LADDER_BASE
    # a second ladder on the scale of |centre|: a standard deviation that underflowed (all the
    # mass numerically at one point) must not hide the tail; any point found is valid
    a = base * max(scale, 1e-300)
    b = base[1:] * max(abs(centre), 1.0)
    # np.unique of the concatenation (a merge sort of two sorted runs is one linear pass)
    merged = np.concatenate([a, b])
    merged.sort(kind="mergesort")
    keep = np.empty(merged.size, dtype=bool)
    keep[0] = True
    np.not_equal(merged[1:], merged[:-1], out=keep[1:])
    return merged[keep]


def ladder(fn, tail, centre, scale, direction, limit, *, _steps=None):
    """First point ``centre + direction * d`` (``d`` on a refined ladder) with ``fn <= tail``.

    Points beyond a finite support ``limit`` are replaced by a point just outside
    it, where ``fn`` (a CDF below the support, a survival function above) is 0.
    """
    if math.isfinite(limit):
        out = limit + direction * max(1e-12 * abs(limit), 1e-300)
        # an atom at the support's end heavier than tail (Laplace): fn exceeds tail at every
        # point inside, so the ladder would end just outside; one evaluation instead of a search
        inside = math.nextafter(limit, -direction * math.inf)
        if float(fn(np.array([inside]))[0]) > tail:
            return float(out)
    steps = _ladder_steps(centre, scale) if _steps is None else _steps
    xs = centre + direction * steps
    if math.isfinite(limit):
        xs = np.where(direction * (xs - limit) >= 0, out, xs)
        # a scale that underflowed (tiny losses) must not hide the support's end, where fn = 0
        xs = np.append(xs, out)
    # fn is non-increasing along the ladder: find its first point <= tail on every 16th point,
    # then inside that stride (the same point as a full scan, at a tenth of the evaluations;
    # should round-off break the monotonicity, the point found still satisfies fn <= tail)
    coarse = np.nonzero(fn(xs[15::16]) <= tail)[0]
    if coarse.size:
        j = 16 * int(coarse[0])
        ok = np.nonzero(fn(xs[j:j + 15]) <= tail)[0]
        ok = ok + j if ok.size else np.array([j + 15])
    else:
        j = 16 * (xs.size // 16)
        ok = np.nonzero(fn(xs[j:]) <= tail)[0] + j
    if ok.size == 0:
        raise ValueError(
            f"the privacy loss distribution has tail mass above {tail:.3g} beyond 1e7 standard "
            "deviations; its parameters are outside the supported range (too little noise for the "
            "sensitivity, or too large an epsilon: the loss cannot be evaluated in float64 there)"
        )
    i = ok[0]
    if i == 0:
        return float(xs[0])
    fine = np.linspace(xs[i - 1], xs[i], 48)
    # (strided as above: every 8th point, then inside the stride)
    cf = np.nonzero(fn(fine[7::8]) <= tail)[0]
    j = 8 * int(cf[0]) if cf.size else 40  # fine[-1] = xs[i] is <= tail
    okf = np.nonzero(fn(fine[j:j + 7]) <= tail)[0]
    return float(fine[j + okf[0]] if okf.size else fine[j + 7])


# --------------------------------------------------------------------------------------
# Mechanisms
# --------------------------------------------------------------------------------------
class Mechanism:
    """Base class: a mechanism knows its privacy losses per neighbouring direction."""

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        raise NotImplementedError

    # frozen dataclass subclasses provide __eq__/__hash__ for merging identical events


@dataclass(frozen=True)
class Gaussian(Mechanism):
    """Gaussian mechanism ``f(x) + N(0, sigma^2)`` with L2 sensitivity ``sensitivity``.

    Parameters
    ----------
    sigma : float
        Standard deviation of the noise (> 0).
    sensitivity : float, default 1.0
        L2 sensitivity of ``f`` (> 0).
    """

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "sigma", V.positive_float("sigma", self.sigma))
        object.__setattr__(self, "sensitivity", V.positive_float("sensitivity", self.sensitivity))
        _check_noise_ratio("sigma", self.sigma, self.sensitivity)

    def privacy_losses(self):
        loss = _cached(self, lambda: GaussianLoss(self.sensitivity / self.sigma))
        return {"add": loss, "remove": loss}


@dataclass(frozen=True)
class Laplace(Mechanism):
    """Laplace mechanism ``f(x) + Lap(0, scale)`` with L1 sensitivity ``sensitivity``."""

    scale: float
    sensitivity: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "scale", V.positive_float("scale", self.scale))
        object.__setattr__(self, "sensitivity", V.positive_float("sensitivity", self.sensitivity))
        _check_noise_ratio("scale", self.scale, self.sensitivity)

    def privacy_losses(self):
        loss = _cached(self, lambda: LaplaceLoss(self.sensitivity / self.scale))
        return {"add": loss, "remove": loss}


_NEIGHBOURING = ("add_or_remove", "remove", "add")
_NOISE_RANGE = (1e-100, 1e100)


def _check_noise_ratio(name, noise, sensitivity):
    """Refuse noise/sensitivity ratios whose privacy losses overflow or underflow float64."""
    r = noise / sensitivity
    if not (_NOISE_RANGE[0] <= r <= _NOISE_RANGE[1]):
        raise ValueError(
            f"{name} / sensitivity must be in [{_NOISE_RANGE[0]:g}, {_NOISE_RANGE[1]:g}] (its privacy loss is not "
            f"representable in float64 otherwise), got {name}={noise!r}, sensitivity={sensitivity!r}"
        )


def _validate_subsampled(mech, noise_name):
    """Shared checks of the Poisson-subsampled mechanisms (frozen dataclasses)."""
    object.__setattr__(mech, noise_name, V.positive_float(noise_name, getattr(mech, noise_name)))
    object.__setattr__(mech, "sampling_probability", V.probability("sampling_probability", mech.sampling_probability))
    object.__setattr__(mech, "sensitivity", V.positive_float("sensitivity", mech.sensitivity))
    _check_noise_ratio(noise_name, getattr(mech, noise_name), mech.sensitivity)
    if mech.neighboring not in _NEIGHBOURING:
        raise ValueError(f"neighboring must be one of {_NEIGHBOURING}, got {mech.neighboring!r}")


def _subsampled_losses(mech, pair_factory, full_loss_factory):
    q = mech.sampling_probability
    if q == 0.0:
        loss = _cached(mech, lambda: DiscreteLoss([0.0], [1.0]))
        return {"add": loss, "remove": loss}
    if q == 1.0:
        loss = _cached(mech, full_loss_factory)
        return {"add": loss, "remove": loss}

    def build():
        pair = pair_factory()
        return {"remove": SubsampledLoss(pair, q, "remove"), "add": SubsampledLoss(pair, q, "add")}

    losses = _cached(mech, build)
    if mech.neighboring == "add_or_remove":
        return losses
    one = losses[mech.neighboring]
    return {"add": one, "remove": one}


@dataclass(frozen=True)
class PoissonSubsampledGaussian(Mechanism):
    """Gaussian mechanism on a Poisson subsample (the DP-SGD step).

    Parameters
    ----------
    sigma : float
        Noise standard deviation in units of the sensitivity is ``sigma / sensitivity``.
    sampling_probability : float
        Probability ``q`` in ``[0, 1]`` that each record is in the subsample.
    sensitivity : float, default 1.0
    neighboring : {"add_or_remove", "remove", "add"}, default "add_or_remove"
        ``"add_or_remove"`` gives the maximum over both directions (as
        ``dp_accounting``); ``"remove"`` selects the single direction that
        ``prv_accountant`` uses.
    """

    sigma: float
    sampling_probability: float
    sensitivity: float = 1.0
    neighboring: str = "add_or_remove"

    def __post_init__(self):
        _validate_subsampled(self, "sigma")

    def privacy_losses(self):
        s = self.sigma / self.sensitivity
        return _subsampled_losses(self, lambda: _GaussPair(s), lambda: GaussianLoss(1.0 / s))


@dataclass(frozen=True)
class PoissonSubsampledLaplace(Mechanism):
    """Laplace mechanism on a Poisson subsample; see :class:`PoissonSubsampledGaussian`."""

    scale: float
    sampling_probability: float
    sensitivity: float = 1.0
    neighboring: str = "add_or_remove"

    def __post_init__(self):
        _validate_subsampled(self, "scale")

    def privacy_losses(self):
        e0 = self.sensitivity / self.scale
        return _subsampled_losses(self, lambda: _LaplacePair(e0), lambda: LaplaceLoss(e0))


@dataclass(frozen=True)
class PureDP(Mechanism):
    """An ``epsilon``-DP mechanism (binary randomized response is the worst case)."""

    epsilon: float

    def __post_init__(self):
        object.__setattr__(self, "epsilon", V.nonnegative_float("epsilon", self.epsilon))

    def privacy_losses(self):
        e = self.epsilon
        loss = _cached(self, lambda: DiscreteLoss([e, -e], [special.expit(e), special.expit(-e)]))
        return {"add": loss, "remove": loss}


@dataclass(frozen=True)
class RandomizedResponse(Mechanism):
    """k-ary randomized response: the true category w.p. ``e^eps / (e^eps + c - 1)``."""

    epsilon: float
    num_categories: int = 2

    def __post_init__(self):
        object.__setattr__(self, "epsilon", V.nonnegative_float("epsilon", self.epsilon))
        c = V.positive_int("num_categories", self.num_categories)
        if c < 2:
            raise ValueError(f"num_categories must be >= 2, got {self.num_categories!r}")
        object.__setattr__(self, "num_categories", c)

    def privacy_losses(self):
        e, c = self.epsilon, self.num_categories

        def build():
            # probabilities via logs: p = e^e/(e^e + c - 1), r = 1/(e^e + c - 1)
            logden = np.logaddexp(e, math.log(c - 1))
            p, r = math.exp(e - logden), math.exp(-logden)
            return DiscreteLoss([e, -e, 0.0], [p, r, (c - 2) * r])

        loss = _cached(self, build)
        return {"add": loss, "remove": loss}


@dataclass(frozen=True)
class ApproxDP(Mechanism):
    """An ``(epsilon, delta)``-DP mechanism: pure ``epsilon`` loss plus mass ``delta`` at infinity."""

    epsilon: float
    delta: float

    def __post_init__(self):
        object.__setattr__(self, "epsilon", V.nonnegative_float("epsilon", self.epsilon))
        object.__setattr__(self, "delta", V.probability("delta", self.delta, open_high=True))

    def privacy_losses(self):
        e, d = self.epsilon, self.delta
        loss = _cached(self, lambda: DiscreteLoss([e, -e], [special.expit(e), special.expit(-e)], p_inf=d))
        return {"add": loss, "remove": loss}


class _CustomContinuous(ContinuousLoss):
    def __init__(self, cdf, sf, pdf, log_mgf, mean, std, support, p_inf, atoms, rel_err):
        self._cdf, self._sf, self._pdf, self._lm = cdf, sf, pdf, log_mgf
        self._mean, self._std = mean, std
        self.support = support
        self.p_inf = p_inf
        self.atoms = atoms
        self.cdf_rel_error = rel_err

    def cdf(self, t):
        return np.asarray(self._cdf(np.asarray(t, dtype=np.float64)), dtype=np.float64)

    def sf(self, t):
        if self._sf is None:
            return 1.0 - self.cdf(t)
        return np.asarray(self._sf(np.asarray(t, dtype=np.float64)), dtype=np.float64)

    def pdf(self, t):
        if self._pdf is None:
            t = np.asarray(t, dtype=np.float64)
            h = 1e-6 * np.maximum(1.0, np.abs(t))
            return np.maximum((self.cdf(t + h) - self.cdf(t - h)) / (2 * h), 0.0)
        return np.asarray(self._pdf(np.asarray(t, dtype=np.float64)), dtype=np.float64)

    def log_mgf(self, s):
        s = np.asarray(s, dtype=np.float64)
        if self._lm is None:
            return np.full(s.shape, np.inf)
        return np.asarray(self._lm(s), dtype=np.float64)

    def mean(self):
        return self._mean

    def std(self):
        return self._std


class CustomCDF(Mechanism):
    """A mechanism given by the CDF of its privacy loss and an MGF tail bound.

    Parameters
    ----------
    cdf : callable
        Vectorised CDF of the finite part of the privacy loss.
    log_mgf : callable
        Vectorised *upper bound* on ``log E[exp(s Y)]`` for real ``s`` (``inf``
        where unknown); it is the tail bound used to size grids.
    mean, std : float
        Mean and standard deviation of the finite part (used for planning; the
        mean correction uses the CDF).
    sf : callable, optional
        Survival function, accurate in the upper tail (default ``1 - cdf``).
    pdf : callable, optional
        Density of the continuous part (default: numerical derivative).
    support : (float, float), optional
    p_inf : float, default 0
    atoms : tuple of float, optional
        Locations of point masses of the CDF.
    cdf_rel_error : float, default 1e-10
        Relative accuracy of ``cdf``/``sf``, charged in the certificate.
    """

    def __init__(self, cdf: Callable, log_mgf: Callable, mean: float, std: float, *, sf: Callable | None = None,
                 pdf: Callable | None = None, support=(-math.inf, math.inf), p_inf: float = 0.0, atoms=(),
                 cdf_rel_error: float = 1e-10):
        if not callable(cdf):
            raise ValueError("cdf must be callable")
        if not callable(log_mgf):
            raise ValueError("log_mgf must be callable (an upper bound on the log MGF, used as tail bound)")
        if sf is not None and not callable(sf):
            raise ValueError("sf must be callable or None")
        if pdf is not None and not callable(pdf):
            raise ValueError("pdf must be callable or None")
        mean = V.real_float("mean", mean)
        std = V.nonnegative_float("std", std)
        p_inf = V.probability("p_inf", p_inf, open_high=True)
        if isinstance(support, (str, bytes)) or not hasattr(support, "__len__") or len(support) != 2:
            raise ValueError(f"support must be a pair (lo, hi), got {support!r}")
        lo = V.real_float("support[0]", support[0], allow_inf=True)
        hi = V.real_float("support[1]", support[1], allow_inf=True)
        if not lo < hi:
            raise ValueError(f"support must satisfy lo < hi, got {support!r}")
        if isinstance(atoms, (str, bytes)) or not hasattr(atoms, "__iter__"):
            raise ValueError(f"atoms must be a sequence of real numbers, got {atoms!r}")
        atoms = tuple(V.real_float(f"atoms[{i}]", a) for i, a in enumerate(atoms))
        rel = V.positive_float("cdf_rel_error", cdf_rel_error)
        if rel > 1e-3:
            raise ValueError(f"cdf_rel_error must be in (0, 1e-3], got {V.show(cdf_rel_error)}")
        self._loss = _CustomContinuous(cdf, sf, pdf, log_mgf, mean, std, (lo, hi), p_inf, atoms, rel)

    def privacy_losses(self):
        return {"add": self._loss, "remove": self._loss}


class CustomPMF(Mechanism):
    """A mechanism whose privacy loss takes finitely many values.

    Parameters
    ----------
    values : array_like
        Finite privacy-loss values.
    probabilities : array_like
        Their probabilities; they sum to ``1 - p_inf``.
    p_inf : float, default 0
        Probability of an infinite privacy loss.
    """

    def __init__(self, values, probabilities, p_inf: float = 0.0):
        p_inf = V.probability("p_inf", p_inf, open_high=True)
        self._loss = DiscreteLoss(values, probabilities, p_inf)
        total = float(_real_vector("probabilities", probabilities).sum())
        # as documented: the finite masses and p_inf together make one distribution
        if not abs(total + p_inf - 1.0) <= 1e-9:
            raise ValueError(f"probabilities must sum to 1 - p_inf = {1 - p_inf!r}, got {total!r}")
        self._key = (tuple(self._loss.values.tolist()), tuple(self._loss.probs.tolist()), p_inf)

    def privacy_losses(self):
        return {"add": self._loss, "remove": self._loss}

    def __eq__(self, other):
        return isinstance(other, CustomPMF) and other._key == self._key

    def __hash__(self):
        return hash(self._key)


# Loss objects are cached per mechanism value: building a subsampled loss computes moments.  They live in
# the process-wide store (fastpld.resources), bounded with everything else; compose records the size
# they grow to (MGF grids, moment tables) through _refresh_sizes.
_LOSS_CACHE = resources.region("losses")
_CACHE_LOCK = threading.RLock()


def _loss_key(mech):
    return (type(mech), mech)


def _cached(mech, factory):
    # under a lock: concurrent compose calls then share one loss object per mechanism value
    # (identical events are merged by the loss object's identity)
    key = _loss_key(mech)
    val = _LOSS_CACHE.get(key)
    if val is not None:
        return val
    with _CACHE_LOCK:
        val = _LOSS_CACHE.get(key)
        if val is None:
            val = factory()
            _LOSS_CACHE.put(key, val, resources.nbytes_of(val))
        return val


def _refresh_sizes(mechs) -> None:
    """Record the current size of these mechanisms' cached loss objects (they grow MGF grids and tables)."""
    seen = set()
    for m in mechs:
        try:
            key = _loss_key(m)
            if key in seen:
                continue
            seen.add(key)
        except TypeError:  # an unhashable user mechanism: not cached here
            continue
        val = _LOSS_CACHE.get(key)
        if val is not None:
            _LOSS_CACHE.resize(key, resources.nbytes_of(val))
