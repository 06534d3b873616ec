"""k-fold pure DP against the Kairouz-Oh-Viswanath binomial formula."""
import numpy as np
import pytest

import fastpld
from oracles import pure_dp_delta


@pytest.mark.parametrize("eps0,k", [(0.5, 20), (0.1, 100), (1.0, 7), (0.02, 5003), (0.005, 40000)])
@pytest.mark.parametrize("method", ["glw", "two_stage", "recursive", "auto"])
def test_pure_dp_bounds(eps0, k, method):
    pld = fastpld.compose(fastpld.PureDP(eps0), k, method=method)
    eps = np.array([0.0, 0.3, 1.0, 2.0, 3.0])
    exact = np.array([pure_dp_delta(e, eps0, k) for e in eps])
    b = pld.delta(eps)
    assert np.all(b.lower <= exact), (b.lower, exact)
    assert np.all(exact <= b.upper), (b.upper, exact)


def test_approx_dp_mass_at_infinity():
    k = 50
    pld = fastpld.compose(fastpld.ApproxDP(0.1, 1e-6), k)
    # delta(eps) = 1 - (1 - d)^k (1 - delta_pure(eps)) for the (eps, delta) worst case
    for e in (0.0, 0.5, 1.0):
        pure = pure_dp_delta(e, 0.1, k)
        exact = 1 - (1 - 1e-6) ** k * (1 - pure)
        b = pld.delta(e)
        assert b.lower <= exact <= b.upper
    with pytest.raises(ValueError, match="infinite privacy loss"):
        pld.epsilon(1e-5)


def test_randomized_response_two_categories_is_pure_dp():
    a = fastpld.compose(fastpld.RandomizedResponse(0.3, 2), 30).delta(0.5)
    exact = pure_dp_delta(0.5, 0.3, 30)
    assert a.lower <= exact <= a.upper


def test_custom_pmf_equals_pure_dp():
    import math
    e = 0.4
    p = math.exp(e) / (1 + math.exp(e))
    a = fastpld.compose(fastpld.CustomPMF([e, -e], [p, 1 - p]), 25).delta(1.0)
    exact = pure_dp_delta(1.0, e, 25)
    assert a.lower <= exact <= a.upper
