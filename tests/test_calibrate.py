"""Calibration: the certified upper bound at the answer meets the target; 0.1% smaller (the default
relative accuracy) does not."""
import math

import pytest

import fastpld

TARGET = (2.0, 1e-5)


def _eps(mech, k, de, delta):
    """The certified upper epsilon at the accuracy calibration uses by default (compose's default)."""
    return fastpld.compose(mech, k, delta_error=de).epsilon(delta).upper


def test_noise_multiplier_never_overshoots_and_is_tight():
    te, td = TARGET
    q, steps = 0.02, 300
    s = fastpld.find_noise_multiplier(te, td, q, steps)
    de = td * 1e-3
    assert _eps(fastpld.PoissonSubsampledGaussian(s, q), steps, de, td) <= te
    assert _eps(fastpld.PoissonSubsampledGaussian(s / 1.001, q), steps, de, td) > te


def test_generic_calibrate_gaussian_against_closed_form():
    # k Gaussians with sigma: mu = sqrt(k)/sigma; the certified answer sits just above the exact sigma
    from oracles import gaussian_epsilon
    te, td, k = 1.5, 1e-6, 16
    s = fastpld.calibrate(lambda p: fastpld.Gaussian(p), k, te, td)
    assert gaussian_epsilon(td, math.sqrt(k) / s) <= te
    assert _eps(fastpld.Gaussian(s), k, td * 1e-3, td) <= te
    assert _eps(fastpld.Gaussian(s / 1.001), k, td * 1e-3, td) > te
    assert gaussian_epsilon(td, math.sqrt(k) / (s / 1.002)) > te  # within 0.2% of the exact optimum


def test_sampling_probability_and_steps():
    te, td = TARGET
    q = fastpld.find_sampling_probability(te, td, 1.0, 200)
    de = td * 1e-3
    assert _eps(fastpld.PoissonSubsampledGaussian(1.0, q), 200, de, td) <= te
    assert _eps(fastpld.PoissonSubsampledGaussian(1.0, min(1.0, q * 1.001)), 200, de, td) > te
    mech = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    k = fastpld.find_steps(te, td, mech)
    assert _eps(mech, k, de, td) <= te
    k_more = max(k + 1, math.floor(k * 1.001))
    assert _eps(mech, k_more, de, td) > te


def test_full_batch_feasible_returns_one():
    assert fastpld.find_sampling_probability(50.0, 1e-5, 5.0, 10) == 1.0


def test_impossible_targets_raise():
    with pytest.raises(ValueError, match="not attainable"):
        fastpld.find_steps(0.05, 1e-5, fastpld.Gaussian(1.0))
    # delta at or below the mass at infinity: no parameter certifies it
    with pytest.raises(ValueError, match="not attainable"):
        fastpld.calibrate(lambda e: fastpld.ApproxDP(e, 1e-3), 1, 1.0, 1e-4, bracket=(0.01, 10.0), decreasing=False)
    with pytest.raises(ValueError):
        fastpld.find_noise_multiplier(-1.0, 1e-5, 0.01, 100)
    with pytest.raises(ValueError):
        fastpld.find_noise_multiplier(1.0, 0.0, 0.01, 100)
    with pytest.raises(ValueError):
        fastpld.find_noise_multiplier(1.0, 1e-5, 1.5, 100)
    with pytest.raises(ValueError):
        fastpld.find_noise_multiplier(1.0, 1e-5, 0.01, 0)
    with pytest.raises(ValueError):
        fastpld.calibrate(lambda p: fastpld.Gaussian(p), 1, 1.0, 1e-5, bracket=(5.0, 1.0))


def test_tiny_target_is_bounded():
    # target epsilon 0.01: the default relative accuracy, the grid stays within max_buckets
    s = fastpld.find_noise_multiplier(0.01, 1e-5, 0.01, 10)
    assert _eps(fastpld.PoissonSubsampledGaussian(s, 0.01), 10, 1e-8, 1e-5) <= 0.01


def test_noise_multiplier_to_a_relative_accuracy():
    # within ~0.1% of the smallest feasible sigma, never below it (checked by finer compositions)
    import fastpld
    s = fastpld.find_noise_multiplier(2.0, 1e-5, 0.02, 1000, rel_error=1e-3)
    fine = lambda sig: fastpld.compose(fastpld.PoissonSubsampledGaussian(sig, 0.02), 1000,
                                       rel_error=1e-4).epsilon(1e-5)
    assert fine(s).upper <= 2.0
    assert fine(s / (1 + 2.5e-3)).lower > 2.0
    with pytest.raises(ValueError, match="not both"):
        fastpld.find_noise_multiplier(2.0, 1e-5, 0.02, 1000, rel_error=1e-3, eps_error=0.01)
    with pytest.raises(ValueError, match="rel_error"):
        fastpld.find_noise_multiplier(2.0, 1e-5, 0.02, 1000, rel_error=-1.0)
    q = fastpld.find_sampling_probability(2.0, 1e-5, 1.0, 1000, rel_error=1e-3)
    assert fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, q), 1000, rel_error=1e-4).epsilon(1e-5).upper <= 2.0
    p = fastpld.calibrate(lambda x: fastpld.Gaussian(x), 50, 1.0, 1e-6, rel_error=1e-3)
    assert fastpld.compose(fastpld.Gaussian(p), 50, rel_error=1e-4).epsilon(1e-6).upper <= 1.0


def test_starting_points_without_scipy_special():
    """The searches' Gaussian starting point (``_gaussian_mu``, from ``math.erfc``) against scipy's ``ndtr`` and
    ``log_ndtr`` and the analytic Gaussian curve (``oracles.gaussian_delta``)."""
    import importlib

    from scipy import special

    from oracles import gaussian_delta
    C = importlib.import_module("fastpld.calibrate")  # (the module: fastpld.calibrate is also the function)
    import mpmath
    mpmath.mp.dps = 40
    for x in [-1e3, -200.0, -40.0, -30.5, -30.0, -29.9, -10.0, -1.0, 0.0, 0.7, 5.0, 40.0]:
        # (far in the tail both lose ~x^2 u to the rounding of the argument)
        assert C._ndtr(x) == pytest.approx(float(mpmath.ncdf(x)), rel=1e-12, abs=1e-300)
        assert C._log_ndtr(x) == pytest.approx(float(mpmath.log(mpmath.ncdf(x))), rel=1e-11, abs=1e-16)
        assert C._log_ndtr(x) == pytest.approx(float(special.log_ndtr(x)), rel=1e-11, abs=1e-16)
    for eps, delta in [(0.5, 1e-5), (3.0, 1e-5), (8.0, 1e-10), (1.0, 0.1), (50.0, 1e-12)]:
        mu = C._gaussian_mu(eps, delta)
        assert gaussian_delta(eps, mu) == pytest.approx(delta, rel=1e-8)
