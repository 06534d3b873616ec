"""Exact privacy curves used as independent truth (not computed by fastpld)."""
import math

import numpy as np
from scipy import optimize, special
from scipy.stats import norm


def gaussian_delta(eps, mu):
    """mu-GDP curve (Balle & Wang 2018): Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)."""
    eps = np.asarray(eps, dtype=np.float64)
    a = norm.logcdf(-eps / mu + mu / 2)
    b = eps + norm.logcdf(-eps / mu - mu / 2)
    return np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))


def gaussian_epsilon(delta, mu):
    f = lambda e: gaussian_delta(e, mu) - delta
    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2
    return optimize.brentq(f, 0.0, hi, xtol=1e-13, rtol=1e-13)


def pure_dp_delta(eps, eps0, k):
    """k-fold eps0-DP (binary randomized response), Kairouz-Oh-Viswanath, summed in log space."""
    i = np.arange(k + 1)
    lc = special.gammaln(k + 1) - special.gammaln(i + 1) - special.gammaln(k - i + 1)
    lp = -np.logaddexp(0.0, -eps0)
    lq = -np.logaddexp(0.0, eps0)
    a = lc + (k - i) * lp + i * lq
    b = lc + eps + i * lp + (k - i) * lq
    with np.errstate(divide="ignore"):
        terms = np.where(a > b, a + np.log(-np.expm1(np.minimum(b - a, 0.0))), -np.inf)
    return float(np.exp(special.logsumexp(terms)))
