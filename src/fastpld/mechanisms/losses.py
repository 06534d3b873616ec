"""The privacy losses of the Gaussian and Laplace mechanisms (closed forms)."""
from __future__ import annotations

import math

import numpy as np

from .._lazy import lazy_module
from .base import ContinuousLoss, _U, _rel_of_log

special = lazy_module("scipy.special")

__all__ = ["GaussianLoss", "LaplaceLoss"]

_LOG_HALF = math.log(0.5)
_NDTR_REL = 4096 * _U  # relative error assumed of scipy.special.ndtr at any z (GaussianLoss)


class GaussianLoss(ContinuousLoss):
    """Loss of the Gaussian mechanism: ``Y ~ N(mu^2/2, mu^2)``."""

    # scipy's ndtr (and the exp(-z^2 / 2) of the density and partial mean) round z^2 before the exponential:
    # relative error ~ (2 z^2 + 64) u in the tails, measured up to ~2100 u near z = -37 (ndtr underflows below
    # 1e-300 from z = -37.5), 35 u for |z| <= 5 (docs/roundoff.md section 7)
    cdf_rel_error = _NDTR_REL

    def __init__(self, mu: float, mu_rel: float = 0.0):
        self.mu = float(mu)
        # (the exact loss's parameter within mu_rel of mu, relative: Gaussians merged into one, whose mu is the
        # rounded square root of a rounded sum; its moves of the CDF's argument and of the density are charged
        # with the arithmetic's, below)
        self.mu_rel = float(mu_rel)
        self.m = 0.5 * self.mu**2
        self.s = self.mu
        self.support = (-math.inf, math.inf)
        if self.mu_rel:
            # (the standardised argument z moves by D / s <= 1.02 r (|z| + mu) (_param_shift); the normal tails'
            # relative change by at most max(|z|, 1) times that, |z| <= 37.6 where ndtr does not underflow)
            self.cdf_rel_error = _NDTR_REL + 38.6 * 1.02 * self.mu_rel * (37.6 + self.mu)

    def _param_shift(self, t):
        """Where ``mu`` is within ``mu_rel`` of the exact parameter: the exact CDF at ``t`` is the computed one's
        (``N(m, s^2)``) at a point within this distance, ``|m* - m| + |t - m| |s / s* - 1|`` with ``|m* - m| <=
        2.01 r m`` and ``|s / s* - 1| <= 1.01 r`` (``r = mu_rel <= 1e-10``)."""
        r = self.mu_rel
        return 1.02 * r * (np.abs(np.asarray(t, dtype=np.float64) - self.m) + 2 * abs(self.m))

    def cdf_shift(self, tmax: float) -> float:
        """``(t - m) / s`` rounds twice, each time by at most ``u |t - m|`` in ``t``'s units (and the parameter's
        uncertainty, :meth:`_param_shift`, where ``mu_rel > 0``)."""
        base = 2 * _U * (tmax + abs(self.m))
        return base + 1.02 * self.mu_rel * (tmax + 3 * abs(self.m)) if self.mu_rel else base  # (|t - m| <= tmax + |m|)

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

    def pdf_error(self, t, dt):
        """:meth:`ContinuousLoss.pdf_error`: ``z = (t - m) / s`` rounds twice (``2 u |z|``; its square ``u z^2 / 2``
        more in the exponent, ``exp`` and the constant ``12 u``), and the exact point within ``dt + u |m|`` of ``t``
        (``m = mu^2 / 2`` rounded) moves the exponent by ``|z| a + a^2 / 2``, ``a = (dt + u |m|) / s``."""
        with np.errstate(over="ignore", invalid="ignore"):
            z = np.abs((np.asarray(t, dtype=np.float64) - self.m) / self.s)
            a = (np.asarray(dt, dtype=np.float64) + _U * abs(self.m)) / self.s
            if not self.mu_rel:
                return _rel_of_log((2.5 * z * z + 16) * _U + z * a + 0.5 * a * a)
            # (the parameter's uncertainty: a point within _param_shift more, and the scale 1 / s within 1.01 r)
            a = a + self._param_shift(t) / self.s
            return _rel_of_log((2.5 * z * z + 16) * _U + z * a + 0.5 * a * a + 1.01 * self.mu_rel)

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
        if self.mu_rel:
            # (the exact loss is this one with t moved by at most D(t) = 1.02 r (|t - m| + 2 |m|), _param_shift: the
            # integrand by the integral of D over the cell -- |t - m| there at most its ends' or, over an infinite
            # cell, the whole law's E|t - m| = s sqrt(2 / pi) -- and each finite end's mass by D(end) times the
            # density's peak 1 / (s sqrt(2 pi)), at |end|)
            ends = [x for x in (a, b) if math.isfinite(x)]
            spread = max(abs(x - self.m) for x in ends) * mass if len(ends) == 2 else 0.8 * self.s
            peak = 1.0 / (self.s * math.sqrt(2 * math.pi))
            moved = 1.02 * self.mu_rel * (spread + 2 * abs(self.m) * mass)
            err += 1.01 * (moved + sum(abs(x) * float(self._param_shift(x)) * peak for x in ends))
        return float(val), float(err)

    def log_mgf(self, s):
        s = np.asarray(s, dtype=np.float64)
        k = s * self.m + 0.5 * s * s * self.s**2
        if self.mu_rel:  # (an upper bound for every mu within mu_rel: |K* - K| <= 2.02 r (|s m| + s^2 mu^2 / 2))
            k = k + 2.03 * self.mu_rel * (np.abs(s * self.m) + 0.5 * s * s * self.s**2)
        return k

    def mean(self):
        return self.m

    def std(self):
        return self.s

    def __repr__(self):
        return f"GaussianLoss(mu={self.mu})" if not self.mu_rel else f"GaussianLoss(mu={self.mu}, mu_rel={self.mu_rel})"


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

    def pdf_error(self, t, dt):
        """:meth:`ContinuousLoss.pdf_error`: ``t - eps0`` rounds by ``u |t - eps0|``, ``exp`` adds ``8 u``; the log
        density has slope 1/2, so a point within ``dt`` moves it by ``dt / 2``."""
        t = np.asarray(t, dtype=np.float64)
        return _rel_of_log((0.5 * np.abs(t - self.e) + 10) * _U + 0.5 * np.asarray(dt, dtype=np.float64))

    def end_mass(self, t, side: int):
        # (the density's integrals from t to the end: -expm1((t - e) / 2) / 2 above, e^-e expm1((t + e) / 2) / 2
        # below; relative error a few u plus |t -+ e| u / 2 from the argument's rounding, as the CDF's)
        c = np.clip(np.asarray(t, dtype=np.float64), -self.e, self.e)
        if side == 1:
            return -0.5 * np.expm1((c - self.e) / 2)
        return 0.5 * math.exp(-self.e) * np.expm1((c + self.e) / 2)

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
