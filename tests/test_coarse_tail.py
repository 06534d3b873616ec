"""Coarse leaf tails (fastpld.discretize, "Coarse tails"): the per-copy MGF bound against exact
MGFs, the coarse cells against the all-fine leaf, and compositions against exact oracles."""
import math

import numpy as np
import pytest

import fastpld
from fastpld import mechanisms as M
from fastpld.discretize import _coarse_cells, discretize_loss, tail_mix_log_mgf, truncation_window
from fastpld.mechanisms.tails import _generic_window
from oracles import assert_brackets_gaussian
from fastpld.composition import budget, execute


def test_mix_bound_without_coarse_regions_is_hoeffding():
    lam = np.geomspace(1.0, 1e4, 9)
    np.testing.assert_allclose(tail_mix_log_mgf(lam, [3e-4], [()])[0], lam**2 * 9e-8 / 8, rtol=1e-11)


@pytest.mark.parametrize("seed", range(6))
def test_mix_bound_dominates_the_exact_mgf(seed):
    # D = (centre + mu) - Y: within the fine region in an interval of length h around mu, within
    # coarse region R of length c_R h; D' = D - E[D].  Exact E[e^(lam D')] of random such laws
    # (worst cases put the tail mass at one end of its interval) against the bound.
    rng = np.random.default_rng(seed)
    h = 10 ** rng.uniform(-4, -2)
    mu = rng.uniform(-0.5, 0.5) * h
    regions = [(1, 1.0 - 1e-3)] + [(c, p) for c, p in ((3, 8e-4), (9, 1.5e-4), (27, 4e-5), (81, 1e-5))
                                   if rng.random() < 0.8]
    pf = 1.0 - sum(p for c, p in regions[1:])
    regions[0] = (1, pf)
    vals, probs, reg = [], [], []
    for j, (c, p) in enumerate(regions):
        r = c * h
        k = 5
        x = mu + r * (rng.random(k) - 0.5) if rng.random() < 0.5 else mu + r * np.array([0.5, 0.5, 0.5, -0.5, 0.49])
        w = rng.random(k)
        vals.append(x)
        probs.append(p * w / w.sum())
        reg.append(np.full(k, j))
    d, p, reg = np.concatenate(vals), np.concatenate(probs), np.concatenate(reg)
    bias = abs(float(np.dot(p, d)))
    dprime = d - np.dot(p, d)
    mix = tuple((float(p[reg == j].sum()), c * h, abs(mu) + c * h / 2 + bias) for j, (c, _) in enumerate(regions) if c > 1)
    lam = np.concatenate([-np.geomspace(1e-1, 4.0, 40), np.geomspace(1e-1, 4.0, 40)]) / h
    exact = np.log(np.exp(np.outer(lam, dprime)) @ p)
    bound = tail_mix_log_mgf(lam, [h], [mix])[0]
    assert np.all(exact <= bound), (exact - bound).max()


def _leaf_pair(sigma, q, direction, h, coarse):
    M._LOSS_CACHE.clear()
    loss = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()[direction]
    fine = discretize_loss(loss, h, 1e-14, native=True)
    co = discretize_loss(loss, h, 1e-14, native=True, coarse=coarse)
    return loss, fine, co


@pytest.mark.parametrize("direction", ["remove", "add"])
@pytest.mark.parametrize("q", [0.005, 0.02])
def test_coarse_cells_aggregate_the_fine_leaf(direction, q):
    h, coarse = 3e-4, (413.0, 4.13e-5)
    loss, fine, co = _leaf_pair(1.0, q, direction, h, coarse)
    assert co.mix and fine.mix == ()
    assert co.probs.size == fine.probs.size and co.mesh == fine.mesh
    a, b = truncation_window(loss, 1e-14, True)
    i_lo, i_hi = math.floor(a / h + 0.5), math.ceil(b / h - 0.5)
    starts, sizes = _coarse_cells(loss, 0.0, h, i_lo, i_hi, coarse)
    assert starts.size < 0.35 * fine.probs.size  # the point: far fewer CDF evaluations
    assert np.all(np.diff(starts) == sizes[:-1]) and starts[0] == i_lo and starts[-1] + sizes[-1] == i_hi + 1
    # every cell holds the fine buckets' mass, at its centre
    csum = np.concatenate([[0.0], np.cumsum(fine.probs)])
    cell_mass = csum[starts + sizes - i_lo] - csum[starts - i_lo]
    np.testing.assert_allclose(co.probs[starts + (sizes - 1) // 2 - i_lo], cell_mass, rtol=1e-9, atol=1e-14)
    assert np.count_nonzero(co.probs) <= starts.size
    # same conditional mean (Algorithm 1's correction) and regions holding only tail mass
    assert abs(co.mean() - fine.mean()) <= 1e-12
    for p, r, a_r in co.mix:
        assert p <= 2e-4 and r > h and a_r >= r / 2


@pytest.mark.usefixtures("separate_gaussians")
def test_heterogeneous_gaussians_with_coarse_tails_against_gdp(monkeypatch):
    # (Gaussian tails are light: coarse cells are ~2/3 of the buckets, below the speed threshold;
    # forced here for the exact oracle)
    from fastpld import discretize as D
    monkeypatch.setattr(D, "_COARSE_MAX_FRACTION", 1.0)
    monkeypatch.setattr(D, "_COARSE_MIN_BUCKETS", 256)
    sig = np.linspace(3.0, 12.0, 40)
    events = [(fastpld.Gaussian(float(s)), 25) for s in sig]
    pld = fastpld.compose(events, eps_error=0.05, delta_error=1e-9, method="coupling")
    cert = pld.directions["remove"].certificate
    assert cert["coarse_leaves"] > 0 and 0 < cert["coarse_tail_eps"] <= 0.011 * 0.05
    mu = math.sqrt(float(np.sum(25 / sig**2)))
    assert_brackets_gaussian(pld, mu, [0.0, 0.5, 1.0, 2.0, 3.0], (1e-3, 1e-6, 1e-9))
    assert pld.eps_spent <= pld.eps_error


def test_schedule_with_coarse_tails_agrees_with_all_fine_leaves():
    # the same plan with and without coarse tails: overlapping certified intervals, close estimates
    events = [(fastpld.PoissonSubsampledGaussian(1.0, float(q)), 30) for q in np.linspace(0.005, 0.02, 16)]
    M._LOSS_CACHE.clear()
    co = fastpld.compose(events, eps_error=0.1, delta_error=1e-8, method="coupling")
    assert co.directions["remove"].certificate["coarse_leaves"] > 0
    orig = budget._coarse_spec
    try:
        execute._coarse_spec = lambda plan, budgets: None
        M._LOSS_CACHE.clear()
        fine = fastpld.compose(events, eps_error=0.1, delta_error=1e-8, method="coupling")
    finally:
        execute._coarse_spec = orig
    assert fine.directions["remove"].certificate["coarse_leaves"] == 0
    a, b = co.epsilon(1e-5), fine.epsilon(1e-5)
    assert a.lower <= b.upper and b.lower <= a.upper
    assert abs(a.estimate - b.estimate) <= 1e-3
    assert co.eps_spent <= co.eps_error


@pytest.mark.skipif(fastpld._kernels._core is None, reason="compiled core unavailable")
@pytest.mark.parametrize("stride", [3, 27])
def test_sparse_log_mgf_matches_logsumexp(stride):
    # the compiled log-MGF sums only the positive entries of a sparse PMF (coarse leaf tails)
    rng = np.random.default_rng(stride)
    n = 5000
    p = rng.random(n) * np.exp(-np.abs(np.arange(n) - 2000) / 300.0)
    keep = np.zeros(n, dtype=bool)
    keep[1500:2600] = True
    keep[::stride] = True
    p[~keep] = 0
    p /= p.sum()
    cen = 2100.0
    s = np.concatenate([-np.geomspace(1e-4, 2.0, 30), np.geomspace(1e-4, 2.0, 30)])
    K = np.zeros(s.size)
    fastpld._kernels.log_mgf_grid(p, cen, s, 3.0, K)
    idx = np.flatnonzero(p)
    M = s[:, None] * (idx[None, :] - cen) + np.log(p[idx])[None, :]
    mx = M.max(axis=1)
    ref = 3.0 * (mx + np.log(np.exp(M - mx[:, None]).sum(axis=1)))
    np.testing.assert_allclose(K, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sigma,q", [(1.0, 0.005), (1.0, 0.02), (0.5, 0.05), (27.1, 0.2), (3.0, 0.9), (1.0, 0.5)])
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_psg_window_is_valid_and_close_to_the_ladder(sigma, q, direction):
    from fastpld.discretize import _psg_window
    M._LOSS_CACHE.clear()
    loss = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()[direction]
    for tail in (1e-6, 1e-14, 1e-40):
        a, b = _psg_window(loss, tail)
        assert loss.cdf(np.array([a]))[0] <= tail and loss.sf(np.array([b]))[0] <= tail
        la, lb = _generic_window(loss, tail, loss.mean(), loss.std())
        assert (b - a) <= 1.05 * (lb - la)  # about as narrow as the ladder's first points


def test_schedule_with_coarse_tails_brackets_dp_accounting_pld():
    # a peer at a fine grid: dp_accounting's pessimistic PLD (value_discretization_interval 3e-4)
    # upper-bounds the true epsilon, which our certified lower bound must not exceed; and it is
    # close to our estimate
    dpa = pytest.importorskip("dp_accounting")
    qs = np.linspace(0.01, 0.03, 6)
    M._LOSS_CACHE.clear()
    pld = fastpld.compose([(fastpld.PoissonSubsampledGaussian(1.0, float(q)), 40) for q in qs],
                          eps_error=0.05, delta_error=1e-9, method="coupling")
    assert pld.directions["remove"].certificate["coarse_leaves"] > 0
    acc = dpa.pld.PLDAccountant(value_discretization_interval=3e-4)
    for q in qs:
        acc.compose(dpa.PoissonSampledDpEvent(float(q), dpa.GaussianDpEvent(1.0)), 40)
    peer = acc.get_epsilon(1e-5)
    ours = pld.epsilon(1e-5)
    assert ours.lower <= peer <= ours.upper + 0.01
    assert abs(ours.estimate - peer) <= 0.005
