"""Every method against the exact Gaussian (GDP) curve: lower <= exact <= upper."""
import math

import numpy as np
import pytest

import fastpld
from oracles import gaussian_delta, gaussian_epsilon

METHODS = ["glw", "two_stage", "recursive", "auto"]
# (sigma, k): k = 1, a prime, 2^16 + 3, 10^6; sigma keeps mu = sqrt(k)/sigma in a realistic range
CASES = [(1.0, 1), (0.5, 1), (8.0, 97), (300.0, 2**16 + 3), (1000.0, 10**6)]
EPS = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0])


# GLW at k = 10^6 has its own test below (one large FFT)
COMBOS = [(s, k, m) for s, k in CASES for m in METHODS if not (m == "glw" and k == 10**6)]


@pytest.fixture(scope="module")
def plds():
    return {(s, k, m): fastpld.compose(fastpld.Gaussian(s), k, method=m, eps_error=0.1) for s, k, m in COMBOS}


@pytest.mark.parametrize("sigma,k,method", COMBOS)
def test_delta_bounds_hold(plds, sigma, k, method):
    pld = plds[(sigma, k, method)]
    mu = math.sqrt(k) / sigma
    exact = gaussian_delta(EPS, mu)
    b = pld.delta(EPS)
    assert np.all(b.lower <= exact), (b.lower, exact)
    assert np.all(exact <= b.upper), (b.upper, exact)
    assert np.all(b.lower <= b.estimate) and np.all(b.estimate <= b.upper)


@pytest.mark.parametrize("sigma,k,method", COMBOS)
def test_epsilon_bounds_hold_and_are_tight(plds, sigma, k, method):
    pld = plds[(sigma, k, method)]
    mu = math.sqrt(k) / sigma
    for delta in (1e-3, 1e-5, 1e-8):
        exact = gaussian_epsilon(delta, mu)
        b = pld.epsilon(delta)
        assert b.lower <= exact <= b.upper, (delta, b, exact)
        # tightness: the width is 2 eps_error plus the (tiny) effect of delta_error
        if b.lower > 0:
            assert b.upper - b.lower <= 2 * pld.eps_error + 1e-3, b


def test_glw_million():
    pld = fastpld.compose(fastpld.Gaussian(1000.0), 10**6, method="glw")
    exact = gaussian_delta(EPS, 1.0)
    b = pld.delta(EPS)
    assert np.all(b.lower <= exact) and np.all(exact <= b.upper)
    e = pld.epsilon(1e-6)
    assert e.lower <= gaussian_epsilon(1e-6, 1.0) <= e.upper


def test_spent_errors_within_budget(plds):
    for pld in plds.values():
        assert pld.eps_spent <= pld.eps_error
        assert pld.delta_spent <= pld.delta_error


def test_heterogeneous_gaussians():
    parts = [(fastpld.Gaussian(3.0), 5), (fastpld.Gaussian(7.0), 40), (fastpld.Gaussian(20.0), 300)]
    mu = math.sqrt(sum(k / s**2 for (m, k) in parts for s in [m.sigma]))
    for method in METHODS:
        pld = fastpld.compose(parts, method=method)
        exact = gaussian_delta(EPS, mu)
        b = pld.delta(EPS)
        assert np.all(b.lower <= exact) and np.all(exact <= b.upper), method
        e = pld.epsilon(1e-6)
        assert e.lower <= gaussian_epsilon(1e-6, mu) <= e.upper


def test_sensitivity_scales_noise():
    a = fastpld.compose(fastpld.Gaussian(2.0, sensitivity=2.0), 10)
    b = fastpld.compose(fastpld.Gaussian(1.0), 10)
    assert a.delta(1.0).estimate == pytest.approx(b.delta(1.0).estimate, rel=1e-9, abs=0)
