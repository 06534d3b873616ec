"""Gaussian parts merged into one (``composition.api._merged_gaussians``): schedules of Gaussian mechanisms at many
noise levels and sensitivities against the exact mu-GDP curve, alone and with pure DP, and the merged loss's error
model (``GaussianLoss(mu, mu_rel)``) against its exact parameter's curve in mpmath."""
import math

import mpmath
import numpy as np
import pytest

import fastpld
from fastpld import mechanisms as M
from fastpld.composition import api
from oracles import assert_brackets_gaussian, epsilon_of, gauss_pure_delta, gaussian_epsilon

DELTAS = (1e-3, 1e-5, 1e-7)


def _mu(schedule):
    return math.sqrt(sum(c * (d / s) ** 2 for s, d, c in schedule))


def _events(schedule):
    return [(fastpld.Gaussian(s, sensitivity=d), c) for s, d, c in schedule]


def _parts(events):
    return api._direction_parts(api._normalise_events(events, None))


SCHEDULES = [
    [(s, 1.0, 100) for s in np.linspace(5.0, 15.0, 50)],
    [(0.8, 1.0, 1), (3.0, 2.0, 40), (50.0, 0.5, 10_000)],
    [(200.0, 1.0, 3), (300.0, 1.0, 7)],  # (mu 0.01: epsilon below 0.1)
    [(0.3, 1.0, 2), (1.0, 1.0, 5), (2.0, 3.0, 1)],  # (mu ~ 7.1)
]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("acc", [{}, {"rel_error": 1e-4}, {"eps_error": 0.01, "method": "coupling"}])
def test_a_merged_schedule_brackets_the_exact_curve(schedule, acc):
    events = _events(schedule)
    parts = _parts(events)
    assert list(parts) == ["remove"] and len(parts["remove"]) == 1  # (one part: the merged Gaussian)
    loss, c = parts["remove"][0]
    assert c == 1 and loss.mu_rel > 0 and loss.mu == pytest.approx(_mu(schedule), rel=1e-15)
    pld = fastpld.compose(events, **acc)
    mu = _mu(schedule)
    assert_brackets_gaussian(pld, mu, np.array([0.0, 0.01, 0.5, 2.0, mu * mu / 2 + 3 * mu]), DELTAS)
    if not acc:  # (the default accuracy: within 0.1% of epsilon, or 1e-5 absolute below epsilon 0.01)
        for d in DELTAS:
            b = pld.epsilon(d)
            assert b.upper - b.lower <= 1e-3 * max(gaussian_epsilon(d, mu), 0.01), (d, b)


@pytest.mark.parametrize("eps0,kp", [(0.1, 30), (0.5, 4)])
def test_merged_gaussians_with_pure_dp_bracket_the_exact_curve(eps0, kp):
    schedule = [(4.0, 1.0, 20), (9.0, 2.0, 300), (1.5, 0.5, 2)]
    events = _events(schedule) + [(fastpld.PureDP(eps0), kp)]
    assert len(_parts(events)["remove"]) == 2
    mu = _mu(schedule)
    pld = fastpld.compose(events)
    for eps in (0.0, 0.3, 1.0, 2.5):
        b, exact = pld.delta(eps), gauss_pure_delta(eps, mu, eps0, kp)
        assert b.lower <= exact <= b.upper, (eps, b, exact)
    for d in DELTAS:
        b, exact = pld.epsilon(d), epsilon_of(lambda e: gauss_pure_delta(e, mu, eps0, kp), d)
        assert b.lower <= exact <= b.upper and b.upper - b.lower <= 1e-3 * exact, (d, b, exact)


def test_the_accountant_merges_a_schedule_of_noise_levels():
    schedule = [(1.0 + 0.1 * i, 1.0, 50) for i in range(20)]
    acc = fastpld.PrivacyAccountant()
    for s, _, c in schedule:
        acc.compose(fastpld.Gaussian(s), c)
    mu = _mu(schedule)
    exact = gaussian_epsilon(1e-5, mu)
    b = acc.get_epsilon(1e-5)
    assert b.lower <= exact <= b.upper and b.upper - b.lower <= 1e-3 * exact, (b, exact)


def test_equal_schedules_share_one_merged_loss_and_one_part_stays_as_it_is():
    a = _parts(_events(SCHEDULES[1]))["remove"][0][0]
    b = _parts(list(reversed(_events(SCHEDULES[1]))))["remove"][0][0]
    assert a is b  # (the kept answers are keyed by the loss objects: a repeated question finds its answer)
    one = _parts([(fastpld.Gaussian(2.0), 10), (fastpld.Laplace(1.0), 3)])["remove"]
    assert [type(loss) for loss, _ in one] == [M.GaussianLoss, M.LaplaceLoss] and one[0][0].mu_rel == 0
    assert one[0][1] == 10


# --- the merged loss's error model, against its exact parameter ---------------------------------------------------

def _mp_curves(mu):
    """Exact cdf, pdf, log-MGF and partial mean of N(mu^2 / 2, mu^2) in mpmath (``mu`` an mpf)."""
    m, s = mu * mu / 2, mu

    def cdf(t):
        return mpmath.ncdf((t - m) / s)

    def pdf(t):
        return mpmath.npdf(t, m, s)

    def lmgf(x):
        return x * m + x * x * s * s / 2

    def pmean(a, b):
        za, zb = (a - m) / s, (b - m) / s
        return m * (mpmath.ncdf(zb) - mpmath.ncdf(za)) + s * (mpmath.npdf(za) - mpmath.npdf(zb))

    return cdf, pdf, lmgf, pmean


def _violations(loss, mu_exact):
    """How many of the error model's claims fail against the exact parameter ``mu_exact`` (an mpf): the density within
    ``pdf_error``, the CDF within ``cdf_rel_error`` (where ``|z| <= 37``), the log-MGF an upper bound, the partial
    means within their error."""
    cdf, pdf, lmgf, pmean = _mp_curves(mu_exact)
    bad = 0
    ts = loss.m + loss.s * np.linspace(-36.0, 36.0, 145)
    got_pdf = np.asarray(loss.pdf(ts))
    rel = np.asarray(loss.pdf_error(ts, np.zeros_like(ts)))
    got_cdf = np.asarray(loss.cdf(ts))
    for t, p, r, c in zip(ts, got_pdf, rel, got_cdf):
        ex = pdf(mpmath.mpf(t))
        bad += abs(p - ex) > r * ex
        ec = cdf(mpmath.mpf(t))
        bad += abs(c - ec) > loss.cdf_rel_error * ec
    for x in (-30.0, -3.0, -0.1, 0.2, 4.0, 25.0):
        x = x / loss.s
        bad += float(loss.log_mgf(x)) < lmgf(mpmath.mpf(x))
    for z0, z1 in ((-3.0, -1.0), (-0.5, 0.7), (2.0, 9.0), (-math.inf, 0.3), (1.0, math.inf)):
        a, b = loss.m + z0 * loss.s, loss.m + z1 * loss.s
        val, err = loss.partial_mean(np.array([a, b]))
        ex = pmean(mpmath.mpf(a) if math.isfinite(a) else -mpmath.inf,
                   mpmath.mpf(b) if math.isfinite(b) else mpmath.inf)
        bad += abs(val - ex) > err
    return bad


@pytest.mark.parametrize("mu", [0.05, 1.3, 17.0])
def test_the_merged_loss_charges_its_parameter_and_would_fail_without(mu):
    r = 1e-11  # (far above a merge's 4 u: the parameter's share dominates the arithmetic's)
    with mpmath.workdps(40):
        for sign in (-1, 1):
            exact = mpmath.mpf(mu) * (1 + sign * mpmath.mpf(r))
            assert _violations(M.GaussianLoss(mu, mu_rel=r), exact) == 0
            # (the same loss without the parameter's charge is caught: the check can fail)
            assert _violations(M.GaussianLoss(mu), exact) > 0
