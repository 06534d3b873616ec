"""PrivacyAccountant's bracketed answers (lookahead): certified, deterministic, from one-shot compositions."""
import math

import numpy as np
import pytest

import fastpld
from oracles import gaussian_delta, gaussian_epsilon

KW = dict(eps_error=0.1, delta_error=1e-9)


def _bracket(c, lookahead):
    g = 1 << (math.floor(lookahead * c).bit_length() - 1)
    return (c // g) * g, -(-c // g) * g


@pytest.mark.parametrize("k", [1000, 1234, 1279])
def test_bracket_is_certified_against_the_exact_gaussian_curve(k):
    sigma = 30.0
    acc = fastpld.PrivacyAccountant(lookahead=0.05, **KW).compose(fastpld.Gaussian(sigma), k)
    lo_k, hi_k = _bracket(k, 0.05)
    mu = math.sqrt(k) / sigma
    for delta in (1e-5, 1e-3):
        b = acc.get_epsilon(delta)
        truth = gaussian_epsilon(delta, mu)
        assert b.lower <= truth <= b.upper
        assert b.lower <= b.estimate <= b.upper
    for eps in (0.1, 0.5):
        b = acc.get_delta(eps)
        assert b.lower <= gaussian_delta(eps, mu) <= b.upper
    if lo_k != k:  # bracketed: each bound is that of a one-shot composition of a neighbouring count
        g = fastpld.Gaussian(sigma)
        up = fastpld.compose(g, hi_k, **KW).epsilon(1e-5)
        low = fastpld.compose(g, lo_k, **KW).epsilon(1e-5)
        b = acc.get_epsilon(1e-5)
        assert (b.lower, b.upper) == (low.lower, up.upper)
        exact = fastpld.compose(g, k, **KW).epsilon(1e-5)
        assert b.lower <= exact.upper and exact.lower <= b.upper  # both hold the truth
        # and the width is bounded by the neighbouring compositions, not open-ended
        assert b.upper - b.lower <= (up.upper - low.lower) + 1e-15


def test_lookahead_zero_is_exact_at_every_step():
    g = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    acc = fastpld.PrivacyAccountant(lookahead=0.0, **KW).compose(g, 3000)
    for _ in range(3):
        acc.compose(g)
        k = acc.num_compositions
        assert acc.get_epsilon(1e-5) == fastpld.compose(g, k, **KW).epsilon(1e-5)


def test_multiples_of_the_stride_are_answered_exactly():
    g = fastpld.Gaussian(10.0)
    acc = fastpld.PrivacyAccountant(lookahead=0.01, **KW).compose(g, 1024)  # stride 8 divides 1024
    assert acc.get_epsilon(1e-6) == fastpld.compose(g, 1024, **KW).epsilon(1e-6)
    assert acc.get_delta(0.3) == fastpld.compose(g, 1024, **KW).delta(0.3)


def test_answers_depend_on_the_history_only():
    g = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    lap = fastpld.Laplace(50.0)
    a = fastpld.PrivacyAccountant(lookahead=0.01, **KW).compose(lap, 3).compose(g, 700)
    seen = []
    for _ in range(25):
        a.compose(g)
        seen.append(a.get_epsilon(1e-5))
    b = fastpld.PrivacyAccountant(lookahead=0.01, **KW).compose(lap, 3).compose(g, 725)
    assert b.get_epsilon(1e-5) == seen[-1]
    # answers never decrease along the loop (each bound comes from a longer history or the same one)
    ups = [s.upper for s in seen]
    assert all(x <= y for x, y in zip(ups, ups[1:]))


def test_the_bracket_follows_the_mechanism_recorded_last():
    g = fastpld.Gaussian(20.0)
    lap = fastpld.Laplace(100.0)
    acc = fastpld.PrivacyAccountant(lookahead=0.1, **KW).compose(g, 45).compose(lap, 23)
    b = acc.get_epsilon(1e-5)  # lap count 23, stride 2: bracket 22..24 uses of lap, g fixed at 45
    up = fastpld.compose([(g, 45), (lap, 24)], **KW).epsilon(1e-5)
    low = fastpld.compose([(g, 45), (lap, 22)], **KW).epsilon(1e-5)
    assert (b.lower, b.upper) == (low.lower, up.upper)
    acc.compose(g)  # now g is the last: 46 uses, stride 4: 44..48 with lap fixed at 23
    b = acc.get_epsilon(1e-5)
    up = fastpld.compose([(g, 48), (lap, 23)], **KW).epsilon(1e-5)
    low = fastpld.compose([(g, 44), (lap, 23)], **KW).epsilon(1e-5)
    assert (b.lower, b.upper) == (low.lower, up.upper)


def test_a_delta_the_longer_history_cannot_certify_falls_back_to_the_exact_state():
    # ApproxDP's delta is mass at infinity: with 24 uses the bracket's top (p_inf(24)) exceeds
    # the query while the 23 recorded uses still certify it
    m = fastpld.ApproxDP(0.1, 1e-3)
    acc = fastpld.PrivacyAccountant(lookahead=0.1, **KW).compose(m, 23)
    p23 = -math.expm1(23 * math.log1p(-1e-3))
    p24 = -math.expm1(24 * math.log1p(-1e-3))
    delta = (p23 + p24) / 2
    assert acc.get_epsilon(delta) == fastpld.compose(m, 23, **KW).epsilon(delta)


def test_memoised_answers_are_the_compositions_answers():
    g = fastpld.Gaussian(5.0)
    acc = fastpld.PrivacyAccountant(**KW).compose(g, 40)
    first = acc.get_delta(0.7)
    assert acc.get_delta(0.7) == first == fastpld.compose(g, 40, **KW).delta(0.7)
    assert acc.get_delta(np.float64(0.7)) == first


@pytest.mark.parametrize("bad", [-0.1, 0.2, math.nan, math.inf, "0.01", None, True])
def test_bad_lookahead_refused(bad):
    with pytest.raises(ValueError, match="lookahead"):
        fastpld.PrivacyAccountant(lookahead=bad)


def test_a_bracket_wider_than_the_accuracy_asked_is_answered_exactly():
    # Gaussian(3.548) x 2,385 at the default accuracy: epsilon ~160 grows about linearly in the steps, and the
    # stride-2 bracket [2,384, 2,386] is 1.3 times the 0.1% asked; the accountant answers the state exactly instead
    g, k = fastpld.Gaussian(3.548), 2385
    acc = fastpld.PrivacyAccountant().compose(g, k)
    b = acc.get_epsilon(1e-5)
    assert b.lower <= gaussian_epsilon(1e-5, math.sqrt(k) / 3.548) <= b.upper
    assert b.upper - b.lower <= 1e-3 * b.lower
    low, up = fastpld.compose(g, k - 1).epsilon(1e-5), fastpld.compose(g, k + 1).epsilon(1e-5)
    assert up.upper - low.lower > 1e-3 * low.lower  # (the bracket it did not take)
    assert b == fastpld.compose(g, k).epsilon(1e-5)


def test_a_bracket_too_wide_is_halved():
    # PSG(1, 0.01) x 100,016: stride 64 ([99,968, 100,032]) is wider than the 0.1% asked, stride 32 ([100,000,
    # 100,032]) is not: its bounds are those two compositions'
    m, k = fastpld.PoissonSubsampledGaussian(1.0, 0.01), 100_016
    acc = fastpld.PrivacyAccountant().compose(m, k)
    b = acc.get_epsilon(1e-5)
    e = {c: fastpld.compose(m, c).epsilon(1e-5) for c in (99_968, 100_000, 100_032)}
    assert e[100_032].upper - e[99_968].lower > 1e-3 * e[99_968].lower
    assert (b.lower, b.upper) == (e[100_000].lower, e[100_032].upper)
    assert b.upper - b.lower <= 1e-3 * b.lower
