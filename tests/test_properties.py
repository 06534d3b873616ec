"""Property tests over random mechanism parameters and counts (hypothesis).

Bounds are ordered and finite, monotone in their argument, contain the exact curve where it
is known (Gaussian, pure DP), and different methods' certified intervals overlap.
"""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastpld
from oracles import gaussian_delta, gaussian_epsilon, pure_dp_delta

EPS = np.array([0.0, 0.1, 0.3, 0.7, 1.0, 1.5, 2.5, 4.0, 8.0])
DELTAS = np.array([0.5, 1e-2, 1e-4, 1e-6, 1e-8])
# round-off pads grow (slightly) with eps, so "monotone" is checked to this relative slack
MONO = 1e-12

mechanism = st.one_of(
    st.builds(fastpld.Gaussian, st.floats(0.5, 30.0)),
    st.builds(fastpld.Laplace, st.floats(0.5, 30.0)),
    st.builds(fastpld.PoissonSubsampledGaussian, st.floats(0.6, 5.0), st.floats(1e-4, 0.3)),
    st.builds(fastpld.PoissonSubsampledLaplace, st.floats(0.5, 5.0), st.floats(1e-4, 0.3)),
    st.builds(fastpld.PureDP, st.floats(0.0, 1.0)),
    st.builds(fastpld.RandomizedResponse, st.floats(0.0, 2.0), st.integers(2, 6)),
    st.builds(fastpld.ApproxDP, st.floats(0.0, 1.0), st.floats(0.0, 1e-6)),
)
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _nonincreasing(a):
    a = np.asarray(a)
    return bool(np.all(a[1:] <= a[:-1] * (1 + MONO) + 1e-300))


@SETTINGS
@given(mech=mechanism, k=st.integers(1, 3000))
def test_bounds_ordered_finite_monotone(mech, k):
    pld = fastpld.compose(mech, k, eps_error=0.2)
    d = pld.delta(EPS)
    for arr in d:
        assert np.all(np.isfinite(arr)) and np.all(arr >= 0) and np.all(arr <= 1)
    assert np.all(d.lower <= d.estimate) and np.all(d.estimate <= d.upper)
    for arr in d:
        assert _nonincreasing(arr), (mech, k, arr)
    pinf = max(x.p_inf for x in pld.directions.values())
    ds = DELTAS[DELTAS > pinf + 2 * pld.delta_error]
    if ds.size:
        e = pld.epsilon(ds)
        for arr in e:
            assert np.all(np.isfinite(arr)) and np.all(arr >= 0)
            assert np.all(arr[1:] >= arr[:-1] - MONO * np.abs(arr[:-1])), (mech, k, arr)
        assert np.all(e.lower <= e.estimate) and np.all(e.estimate <= e.upper)


@SETTINGS
@given(sigma=st.floats(0.5, 50.0), k=st.integers(1, 5000), method=st.sampled_from(["auto", "two_stage", "recursive"]))
def test_gaussian_contains_exact(sigma, k, method):
    pld = fastpld.compose(fastpld.Gaussian(sigma), k, method=method, eps_error=0.2)
    mu = math.sqrt(k) / sigma
    exact = gaussian_delta(EPS, mu)
    d = pld.delta(EPS)
    assert np.all(d.lower <= exact) and np.all(exact <= d.upper)
    for delta in (1e-3, 1e-6):
        e = pld.epsilon(delta)
        assert e.lower <= gaussian_epsilon(delta, mu) <= e.upper


@SETTINGS
@given(eps0=st.floats(0.0, 1.0), k=st.integers(1, 1500))
def test_pure_dp_contains_exact(eps0, k):
    pld = fastpld.compose(fastpld.PureDP(eps0), k, eps_error=0.2)
    d = pld.delta(EPS)
    # delta <= 1 always; the log-space oracle can round above 1 where delta ~ 1
    exact = np.minimum(np.array([pure_dp_delta(e, eps0, k) for e in EPS]), 1.0)
    # the oracle is a log-space sum: allow its own rounding
    assert np.all(d.lower <= exact * (1 + 1e-12) + 1e-300)
    assert np.all(exact * (1 - 1e-12) <= d.upper)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sigma=st.floats(0.7, 4.0), q=st.floats(1e-3, 0.2), k=st.integers(4, 1500))
def test_methods_agree_within_budgets(sigma, q, k):
    mech = fastpld.PoissonSubsampledGaussian(sigma, q)
    plds = [fastpld.compose(mech, k, method=m, eps_error=0.2) for m in ("glw", "two_stage", "recursive")]
    ds = [p.delta(EPS) for p in plds]
    assert np.all(np.max([d.lower for d in ds], axis=0) <= np.min([d.upper for d in ds], axis=0))
    es = [p.epsilon(DELTAS[1:]) for p in plds]
    assert np.all(np.max([e.lower for e in es], axis=0) <= np.min([e.upper for e in es], axis=0))
