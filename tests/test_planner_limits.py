"""Planner and calibration at their limits (issue 17, section 3): every case answers against an exact
reference or refuses with the exact error, and a refusal comes from the limit that binds."""
import math
import warnings

import numpy as np
import pytest
from scipy import special

import fastpld
from fastpld import _fft
from fastpld._limits import BucketLimitError
from oracles import gaussian_epsilon, pure_dp_delta
from fastpld.composition import api, planner



def _contains(b, exact):
    return b.lower <= exact <= b.upper


# 1. glw over more than 256 distinct parts ------------------------------------------------------
def test_glw_with_many_distinct_parts_has_a_plan():
    # (257 parts: the planner's coordinate search, which used to leave glw without a candidate)
    sig = [1.0 + i / 100 for i in range(257)]
    pld = fastpld.compose([(fastpld.Gaussian(s), 1) for s in sig], method="glw", eps_error=0.1)
    mu = math.sqrt(sum(1 / s**2 for s in sig))  # Gaussians compose to mu = sqrt(sum mu_i^2)
    for d in (1e-3, 1e-8):
        assert _contains(pld.epsilon(d), gaussian_epsilon(d, mu))
    assert pld.method == "glw"


# 2. FFT lengths past the table ------------------------------------------------------------------
def _brute(n, mantissas):
    return min(c * 2**a for c in mantissas for a in range(80) if c * 2**a >= n and (c * 2**a) % 2 == 0)


@pytest.mark.parametrize("n", [33, 1000, 3 * 2**30 + 1, 30 * 2**27 + 1, 10**12 + 7, 2**61 + 3])
def test_fast_lengths_past_the_table(n):
    assert _fft.fast_length(n) == _brute(n, _fft._MANTISSAS)
    assert _fft.fast_length_23(n) == _brute(n, [3**b for b in range(40)])


def test_huge_pure_dp_is_refused_by_max_buckets(monkeypatch):
    def no_execution(*a, **k):
        raise AssertionError("a plan predicted far beyond max_buckets was executed")

    monkeypatch.setattr(api, "_execute", no_execution)
    with pytest.raises(BucketLimitError, match="max_buckets=8388608"):
        fastpld.compose(fastpld.PureDP(0.6895157771384961), 1336249, eps_error=1e-3, method="coupling")
    # (auto answers it by the dominance certificate: pure DP on its own lattices, exactly)
    b = fastpld.compose(fastpld.PureDP(0.6895157771384961), 1336249, eps_error=1e-3).epsilon(1e-5)
    assert b.upper - b.lower <= 2e-3


# 3. calibration targets past exp's overflow ---------------------------------------------------
def test_noise_multiplier_at_epsilon_700_against_closed_form():
    # q = 1: the Gaussian mechanism, exact sigma from mu = sqrt(steps) / sigma
    te, td, steps = 700.0, 1e-5, 10
    s = fastpld.find_noise_multiplier(te, td, 1.0, steps)
    exact = gaussian_epsilon(td, math.sqrt(steps) / s)
    assert te * 0.97 <= exact <= te  # the right side, and within rtol and the eps error of the optimum


def test_sampling_probability_at_epsilon_1000():
    # full batch meets the target exactly (Gaussian mu = sqrt(10) / 0.1 has epsilon 593 at 1e-5)
    assert gaussian_epsilon(1e-5, math.sqrt(10) / 0.1) < 1000
    assert fastpld.find_sampling_probability(1000.0, 1e-5, 0.1, 10) == 1.0


@pytest.mark.usefixtures("separate_gaussians")
# 4. a refusal from the prediction, not after minutes of execution ------------------------------
@pytest.mark.parametrize("method", ["recursive", "coupling", "two_stage", "glw"])
def test_many_gaussians_refused_from_the_prediction(monkeypatch, method):
    def no_execution(*a, **k):
        raise AssertionError("a plan predicted beyond max_buckets was executed")

    monkeypatch.setattr(api, "_execute", no_execution)
    events = [(fastpld.Gaussian(1 + i * 1e-4), 1) for i in range(268)]
    pattern = r"needs an FFT of \d+ buckets \(the planner's prediction.* more than max_buckets=8388608"
    with pytest.raises(BucketLimitError, match=pattern):
        fastpld.compose(events, eps_error=1e-3, method=method)


# 5. auto falls through to every candidate ----------------------------------------------------
def test_auto_answers_what_a_candidate_certifies():
    # the case scaled down 10x in eps_error and max_buckets (the cheapest plans need more)
    k, mb = 48765, 838860
    mu = math.sqrt(k) / 2.44
    pld = fastpld.compose(fastpld.Gaussian(2.44), k, eps_error=0.1, max_buckets=mb)
    assert _contains(pld.epsilon(1e-6), gaussian_epsilon(1e-6, mu))
    assert max(s.buckets for s in pld.stages) <= mb


def test_auto_falls_through_refusals_at_execution(monkeypatch):
    # without refusals from the prediction the too-large plans run until their first step too large
    monkeypatch.setattr(planner, "_PEAK_SLACK", math.inf)
    k, mb = 48765, 838860
    pld = fastpld.compose(fastpld.Gaussian(2.44), k, eps_error=0.1, max_buckets=mb)
    assert _contains(pld.epsilon(1e-6), gaussian_epsilon(1e-6, math.sqrt(k) / 2.44))


def test_refusal_names_the_binding_limit():
    # every plan too large: the smallest requirement is reported
    with pytest.raises(BucketLimitError, match="max_buckets=1000"):
        fastpld.compose(fastpld.Gaussian(1.0), 1000, eps_error=0.01, max_buckets=1000)


# 6. calibration against refused compositions ------------------------------------------------
def _pure_delta(eps, eps0, k):
    """:func:`oracles.pure_dp_delta` summed over the binomial's central 2 x 80 standard deviations only
    (the terms left out are below e^-3000 of the sum): the same exact formula, fast at k = 10^6."""
    q = 1 / (1 + math.exp(eps0))
    sd = math.sqrt(k * q * (1 - q))
    i = np.arange(max(0, int(k * q - 80 * sd)), min(k, int(k * q + 80 * sd)) + 1)
    lc = special.gammaln(k + 1) - special.gammaln(i + 1) - special.gammaln(k - i + 1)
    lp, lq = -np.logaddexp(0.0, -eps0), -np.logaddexp(0.0, eps0)
    a = lc + (k - i) * lp + i * lq
    b = lc + eps + i * lp + (k - i) * lq
    with np.errstate(divide="ignore"):
        terms = np.where(a > b, a + np.log(-np.expm1(np.minimum(b - a, 0.0))), -np.inf)
    return float(np.exp(special.logsumexp(terms)))


def test_pure_delta_is_the_oracle():
    assert _pure_delta(4.0, 2e-3, 10**5) == pytest.approx(pure_dp_delta(4.0, 2e-3, 10**5), rel=1e-12)


def test_calibration_widens_a_default_delta_error():
    # 1e6 steps: delta_error = target_delta / 1000 = 1e-13 is below the round-off of the composition;
    # the parameter returned used to have a true epsilon of 2.73 against the target 5
    k, te, td = 10**6, 5.0, 1e-10
    p = fastpld.calibrate(lambda e: fastpld.PureDP(e), k, te, td, bracket=(1e-6, 1.0), decreasing=False)
    assert _pure_delta(te, p, k) <= td  # the right side
    assert _pure_delta(te * 0.95, p, k) > td  # and within 5% of the optimum


def test_calibration_warns_when_refusals_limit_it():
    # (at delta_error 1e-13 these compositions were refused for their round-off until pure DP's positions became exact
    # and its nodes ran on their sublattices: the calibration now reaches the optimum there; at 3e-14
    # the refusals stop it early, as they did at 1e-13)
    k, te, td = 10**6, 5.0, 1e-10
    with pytest.warns(fastpld.CalibrationWarning, match="delta_error"):
        p = fastpld.calibrate(lambda e: fastpld.PureDP(e), k, te, td, bracket=(1e-6, 1.0), decreasing=False,
                              delta_error=3e-14)
    assert _pure_delta(te, p, k) <= td  # never the wrong side


def test_calibration_without_refusals_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fastpld.calibrate(lambda s: fastpld.Gaussian(s), 16, 1.5, 1e-6)


# 7. epsilon lower bounds at tiny delta ------------------------------------------------------
# (the case, Gaussian(1) x 1000 at eps_error 0.01 and delta_error 1e-12, epsilon(1e-10): the
# lower bound was 683.20 against the exact 700.25, now 700.217; here the same at a tenth of the grid)
@pytest.fixture(scope="module", params=["native", "numpy"])
def tiny_delta_pld(request):
    if request.param not in fastpld.available_backends():
        pytest.skip("native backend not built")
    return fastpld.compose(fastpld.Gaussian(1.0), 1000, eps_error=0.1, delta_error=1e-14, backend=request.param)


def test_epsilon_lower_bound_is_tight_at_tiny_delta(tiny_delta_pld):
    pld = tiny_delta_pld
    mu = math.sqrt(1000)
    deltas = np.array([1e-12, 1e-10, 1e-6, 0.2])
    b = pld.epsilon(deltas)
    exact = np.array([gaussian_epsilon(d, mu) for d in deltas])
    assert np.all(b.lower <= exact) and np.all(exact <= b.upper)
    # (the absolute pad 4 (n + 4) u ~ 3e-10 of a 746496-point grid gave 694.23 at 1e-12, exact 721.55)
    assert np.all(exact - b.lower <= 0.15)
    assert exact[0] - pld.epsilon(1e-12).lower <= 0.15


def test_lower_pad_is_a_fixed_point(tiny_delta_pld):
    q = next(iter(tiny_delta_pld._q.values()))
    x = np.array([1e-12, 1e-6, 0.5])
    P = q.lower_pad(x)
    assert np.all(q.bracket_pad(x + P) <= P)
    assert np.all(P <= q.pad + 2.3e-16 * x)  # never looser than the absolute pad it replaced


def test_delta_error_below_the_round_off_floor_refused_without_execution(monkeypatch):
    # every convolving node instance charges its normalisation (gamma_25 of long double's u at least):
    # 1e6 randomized responses at delta_error 1e-88 used to run every candidate for seconds first
    def no_execution(*a, **k):
        raise AssertionError("a plan below its round-off floor was executed")

    monkeypatch.setattr(api, "_execute", no_execution)
    with pytest.raises(ValueError, match="delta_error=1e-88 is too small"):
        fastpld.compose(fastpld.RandomizedResponse(0.22), 10**6, eps_error=2.0, delta_error=1e-88)


def test_a_refusal_names_the_leaves_error_bounds_where_they_are_the_charge():
    """A charge that is the leaves' mass error bounds is named so, not called round-off (which grows with k)."""
    from fastpld.composition.budget import _BudgetError, _Budgets, _check_tv
    b = _Budgets(eps=0.1, delta=1e-10, eta=1e-10, trunc=3e-11, wrap=3e-11, fp=4e-11)
    with pytest.raises(_BudgetError, match="leaves' mass error bounds alone cost 6"):
        _check_tv(b, 0.0, 0.0, 6.0, 6.0)
    with pytest.raises(_BudgetError, match="round-off alone costs 2e-10"):
        _check_tv(b, 0.0, 0.0, 2e-10, 1e-12)
    _check_tv(b, 1e-11, 1e-11, 1e-11, 1e-11)  # (fits: no error)
    # (the composition that was refused so -- PSL(0.851, 0.0036) x 6, its add direction's leaf charged the atom at the
    # top of its support -- is certified now: tests/test_laplace_atoms.py)
