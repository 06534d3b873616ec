"""Subsampled mechanisms: agreement with dp_accounting's PLD at a fine grid, within our budget.

dp_accounting is a test dependency (CI installs it); its pessimistic PLD upper-bounds the
true curve closely, so it must lie between our certified lower and upper bounds.
"""
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

import fastpld

K = 300


@pytest.fixture(scope="module")
def dpa_gauss():
    p = pld_lib.from_gaussian_mechanism(1.2, sampling_prob=0.05, value_discretization_interval=2e-4)
    return p.self_compose(K)


@pytest.fixture(scope="module")
def dpa_laplace():
    p = pld_lib.from_laplace_mechanism(2.0, sampling_prob=0.05, value_discretization_interval=2e-4)
    return p.self_compose(K)


@pytest.mark.parametrize("method", ["glw", "two_stage", "recursive"])
def test_subsampled_gaussian_vs_dp_accounting(dpa_gauss, method):
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.2, 0.05), K, method=method)
    for eps in (0.25, 0.5, 1.0, 2.0):
        ref = dpa_gauss.get_delta_for_epsilon(eps)
        b = pld.delta(eps)
        assert b.lower <= ref <= b.upper, (eps, b, ref)
    for delta in (1e-4, 1e-7):
        ref = dpa_gauss.get_epsilon_for_delta(delta)
        b = pld.epsilon(delta)
        assert b.lower <= ref <= b.upper + 1e-3, (delta, b, ref)


@pytest.mark.parametrize("method", ["glw", "two_stage", "recursive"])
def test_subsampled_laplace_vs_dp_accounting(dpa_laplace, method):
    pld = fastpld.compose(fastpld.PoissonSubsampledLaplace(2.0, 0.05), K, method=method)
    for eps in (0.25, 0.5, 1.0, 2.0):
        ref = dpa_laplace.get_delta_for_epsilon(eps)
        b = pld.delta(eps)
        assert b.lower <= ref <= b.upper, (eps, b, ref)


def test_both_directions_dominate_each_single_direction():
    both = fastpld.compose(fastpld.PoissonSubsampledGaussian(0.8, 0.1), 50)
    assert set(both.directions) == {"add", "remove"}
    for d in ("add", "remove"):
        one = fastpld.compose(fastpld.PoissonSubsampledGaussian(0.8, 0.1, neighboring=d), 50)
        assert set(one.directions) == {"remove"}
        assert both.delta(0.5).upper >= one.delta(0.5).upper - 1e-15


def test_q_one_is_gaussian_and_q_zero_is_free():
    from oracles import gaussian_delta
    b = fastpld.compose(fastpld.PoissonSubsampledGaussian(2.0, 1.0), 16).delta(1.0)
    exact = gaussian_delta(1.0, 2.0)
    assert b.lower <= exact <= b.upper
    z = fastpld.compose(fastpld.PoissonSubsampledGaussian(2.0, 0.0), 16)
    # Y = 0 exactly: delta(eps) = 0; the certified upper bound is d(eps - eps_error) + delta_error
    assert z.delta(2 * z.eps_error).upper <= 1e-9


def test_laplace_closed_form():
    # single Laplace: delta(eps) = 1 - exp((eps - eps0)/2) for 0 <= eps <= eps0
    e0 = 1.5
    pld = fastpld.compose(fastpld.Laplace(1 / e0), 1)
    for eps in (0.0, 0.5, 1.0, 1.4):
        exact = 1 - math.exp((eps - e0) / 2)
        b = pld.delta(eps)
        assert b.lower <= exact <= b.upper


def test_tail_bounds_are_valid_for_gaussian():
    # Chernoff bound from the MGF must dominate the exact normal tail of the sum
    from scipy.stats import norm
    loss = fastpld.Gaussian(3.0).privacy_losses()["remove"]
    k = 50
    mu2 = k / 9.0
    for x in (2.0, 5.0, 10.0):
        exact = norm.sf((x - mu2 / 2) / math.sqrt(mu2))
        assert loss.tail_bound(k, x) >= exact


@pytest.mark.parametrize("sigma", [5.0, 200.0])
def test_public_tail_bound_dominates_single_copy_tail(sigma):
    """``tail_bound(1, x)`` >= the exact tail of one copy: the binomial MGF is unknown (+inf)
    beyond its largest tabulated order, never the value at that order (which is too small)."""
    from fastpld import mechanisms as M
    from fastpld.mechanisms.tails import _generic_window
    M._LOSS_CACHE.clear()
    for d, loss in fastpld.PoissonSubsampledGaussian(sigma, 0.2).privacy_losses().items():
        assert np.isinf(loss.log_mgf(np.array([5000.0 if d == "remove" else -5000.0]))).all()
        lo, hi = _generic_window(loss, 1e-250)
        for upper in (True, False):
            for x in np.linspace(lo, hi, 41)[1:-1]:
                exact = float((loss.sf if upper else loss.cdf)(np.array([x]))[0])
                assert loss.tail_bound(1, x, upper=upper) >= exact * (1 - 1e-6)


@pytest.mark.parametrize("sigma,q,k", [(0.1, 0.01, 100), (0.05, 0.01, 100), (0.2, 0.01, 300)])
def test_small_sigma_by_dominance_against_dp_accounting(sigma, q, k):
    # noise multipliers of 0.2 and below (epsilons in the hundreds) put most of each step's mass within ~1e-18
    # of the loss's end log(1 - q): refused (or left to the coupling certificate) until the leaf's rules near it
    # ran at exact distances.  Certified now by dominance, its delta curve between dp_accounting's pessimistic
    # (connect-the-dots: an upper bound) and optimistic (a lower bound) curves at a fine grid, and its epsilon's
    # delta there between them too (dp_accounting's own epsilon inversion is coarse at these epsilons)
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(sigma, q), k)
    assert pld.method.startswith("dominance"), pld.method
    e = pld.epsilon(1e-5)
    assert e.upper - e.lower <= 1e-3 * e.upper
    eps = np.array([0.8 * e.lower, e.lower, e.upper, 1.1 * e.upper])
    ours = pld.delta(eps)
    peer = {}
    for pess in (True, False):
        many = pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=2e-3,
                                               pessimistic_estimate=pess, use_connect_dots=pess).self_compose(k)
        peer[pess] = np.array([many.get_delta_for_epsilon(float(x)) for x in eps])
    assert np.all(ours.lower <= peer[True] * (1 + 1e-9)), (ours.lower, peer[True])
    assert np.all(peer[False] <= ours.upper * (1 + 1e-9)), (peer[False], ours.upper)
