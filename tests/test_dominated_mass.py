"""The mass a dominated PMF claims (``GridPMF.mass``): rigorous, and not lowered once per entry in every copy.

The dominated chain multiplies its leaves' and splits' claimed masses over every copy (``log_mass``), so a
charge per copy that grows with the PMF's length -- a running sum's ``(n - 1) u`` -- becomes the width's
floor at huge k.  numpy's pairwise sums are checked against exact ones (``fractions``, ``math.fsum``), the claims
against the exact sums of the stored entries, and whole compositions at k = 1e8 and 1e9 against the exact
Gaussian curve.
"""
import math
from fractions import Fraction

import numpy as np
import pytest

import fastpld
from fastpld import dominance as D
from fastpld.composition.roundoff import _U64, _pairwise_gamma
from fastpld.discretize import GridPMF
from fastpld.dominance import splits

from oracles import gaussian_epsilon


def _arrays(rng):
    yield np.array([0.3])
    yield np.array([1.0] + [2.0**-53] * 4000)  # (a running sum stays at 1.0: off by n u; pairwise it is exact)
    yield rng.random(7)
    yield rng.lognormal(0.0, 8.0, 1000)  # (twenty orders of magnitude)
    yield np.sort(rng.random(5000) ** 6)[::-1]
    yield rng.random(200_000)


@pytest.mark.parametrize("seed", range(3))
def test_numpy_sums_are_within_the_pairwise_bound(seed):
    """The claimed masses (and the nodes' normalisations) take numpy's float64 sum to be pairwise: within
    gamma_(ceil(log2 n) + 19) of the exact sum.  A running sum would fail the second array by 4000 u."""
    rng = np.random.default_rng(seed)
    for p in _arrays(rng):
        s = float(np.sum(p))
        if p.size <= 5000:
            exact = sum((Fraction(float(x)) for x in p), Fraction(0))
            assert abs(Fraction(s) - exact) <= Fraction(_pairwise_gamma(p.size)) * exact
        else:
            f = math.fsum(p)  # (correctly rounded)
            assert abs(s - f) <= _pairwise_gamma(p.size) * f - 0.5 * math.ulp(f)


def test_claimed_mass_is_lowered_by_log_n_not_n():
    ratio = 0.999
    for n in (1, 100, 10**6):
        m = splits._claimed_mass(ratio, n)
        assert ratio * (1 - 16 * _U64 - 2 * _pairwise_gamma(n)) * (1 - 2 * _U64) <= m < ratio
        assert 1 - m / ratio < 100 * _U64  # (a running sum's bound at 1e6 entries: 2e6 u)
    assert splits._claimed_mass(ratio, 10, rel=1e-6) <= ratio * (1 - 1e-6)
    assert splits._claimed_mass(1.5, 10) == 1.0  # (never above 1)


def _exact_claim(pmf):
    """mass * (the stored entries' exact sum): what the chain's normalising nodes take a copy to hold."""
    return Fraction(pmf.mass) * sum((Fraction(float(x)) for x in pmf.probs), Fraction(0))


def test_dominated_leaf_mass_does_not_grow_with_its_length():
    loss = fastpld.PoissonSubsampledGaussian(0.8, 1e-3).privacy_losses()["remove"]
    small = D.dominated_leaf(loss, 2e-3, 1e-14)
    big = D.dominated_leaf(loss, 2e-5, 1e-14)
    assert big.probs.size > 50 * small.probs.size and big.probs.size > 100_000
    for pmf in (small, big):
        assert _exact_claim(pmf) <= 1
    # what the big leaf does not claim is its cells' error bounds, not a charge per entry: a sequential sum's bound
    # was 2 (n + 8) u, 2.2e-11 at 100,000 entries
    assert 1 - big.mass < 0.05 * 2 * (big.probs.size + 8) * _U64


def test_dominated_split_mass_does_not_grow_with_its_length():
    x = np.arange(-2.0, 2.0, 1e-5)
    p = np.exp(-0.5 * ((x - 0.00005) / 0.3) ** 2)
    p /= p.sum()
    out = D.dominated_split(GridPMF(p, float(x[0]), 1e-5), 4e-5)
    assert _exact_claim(out) <= Fraction(1)
    # (what the split's points lose at the support's ends, not 2 (n_in + n_out) u = 1.1e-10)
    assert 1 - out.mass < 1e-12


@pytest.mark.parametrize("sigma, k", [(10_000.0, 10**8), (31_623.0, 10**9)])
def test_gaussian_at_huge_k_keeps_its_lower_bound(sigma, k):
    """Gaussian(sigma) x k is the Gaussian mechanism at mu = sqrt(k) / sigma: both bounds around the exact epsilon,
    within the width asked, and the dominated chain's claimed mass lost to rounding far below the width's share
    (a sequential sum's bound, charged once per copy, took 7.4e-3 of it at k = 1e9)."""
    pld = fastpld.compose(fastpld.Gaussian(sigma), k, rel_error=1e-3)
    mu = math.sqrt(k) / sigma
    for delta in (1e-3, 1e-5, 1e-7, 1e-9):
        b = pld.epsilon(delta)
        true = gaussian_epsilon(delta, mu)
        assert b.lower <= true <= b.upper
        if delta >= 1e-7:  # (nearer delta_error its charges widen the interval too)
            assert b.upper - b.lower <= 1e-3 * true
    log_mass = pld.lower_directions["remove"].certificate["log_mass"]
    assert -2e-4 < log_mass <= 0.0


def test_subsampled_gaussian_at_k_1e8():
    """Refused at rel_error 1e-3 while the dominated chain lost 2-3% of its mass to per-entry charges (the width
    stayed 2.8x the width asked at every mesh); certified now, each direction's lower chain keeping all but 1e-4."""
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(0.8, 1e-4), 10**8, rel_error=1e-3)
    b = pld.epsilon(1e-5)
    assert 0 < b.upper - b.lower <= 1e-3 * b.lower
    lower = pld.lower_directions
    for name in pld.directions:
        if name not in lower.deferred:
            assert -1e-4 < lower[name].certificate["log_mass"] <= 0.0


def _psg_direction_delta(eps, sigma, q, direction):
    """One Poisson-subsampled Gaussian step's curve in one direction (oracles.psg_delta takes the larger)."""
    from scipy.stats import norm
    s2, ee = sigma * sigma, math.exp(eps)
    if direction == "remove":
        if ee <= 1 - q:
            return 1 - ee
        w = s2 * math.log((ee - 1 + q) / q) + 0.5
        return (1 - q) * norm.sf(w / sigma) + q * norm.sf((w - 1) / sigma) - ee * norm.sf(w / sigma)
    em = math.exp(-eps)
    if em <= 1 - q:
        return 0.0
    w = s2 * math.log((em - 1 + q) / q) + 0.5
    return norm.cdf(w / sigma) - ee * ((1 - q) * norm.cdf(w / sigma) + q * norm.cdf((w - 1) / sigma))


@pytest.mark.parametrize("sigma,q,direction,h", [(0.52, 0.008, "remove", 0.0168), (0.52, 0.008, "add", 0.004),
                                                 (1.0, 0.01, "add", 0.004), (0.8, 0.001, "add", 0.002)])
def test_dominated_leaf_at_a_crowded_end(sigma, q, direction, h):
    """A subsampled Gaussian whose mass crowds a support end (a small noise multiplier): its dominated leaf, on the
    lattice through the point where that mass balances (dominance.balance), lies within 0.05 meshes of the
    loss's mean -- on the default lattice 0.87, 0.48, 0.16 and 0.17 meshes below, in every copy --, keeps the
    default leaf's variance, and its curve stays below the exact one (a dominated leaf on any lattice)."""
    from fastpld.dominance import leaves as L
    loss = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()[direction]
    pmf = L.dominated_leaf(loss, h, 1e-15, copies=1000)
    p = np.asarray(pmf.probs, dtype=np.float64)
    y = pmf.offset + pmf.mesh * np.arange(p.size)
    mean = float(np.dot(p, y))
    assert 0 <= float(loss.mean()) - mean < 0.05 * h, (float(loss.mean()) - mean) / h
    var = float(np.dot(p, (y - mean) ** 2))
    assert pmf.anchor is not None  # (the default lattice is 0's here: the balance anchor was taken)
    for eps in np.linspace(y[p > 0][0] - 0.01, y[p > 0][-1], 60):
        leaf = pmf.mass * float(np.sum(p * -np.expm1(np.minimum(eps - y, 0.0))))
        assert leaf <= _psg_direction_delta(eps, sigma, q, direction) + 1e-12, eps
    # ... and off, the default lattice's leaf, which the anchored one's mean beats
    from fastpld.dominance import balance as B
    saved = B._ANCHOR_DEFICIT
    try:
        B._ANCHOR_DEFICIT = math.inf
        d = L.dominated_leaf(loss, h, 1e-15, copies=1000)
    finally:
        B._ANCHOR_DEFICIT = saved
    pd = np.asarray(d.probs, dtype=np.float64)
    yd = d.offset + d.mesh * np.arange(pd.size)
    md = float(np.dot(pd, yd))
    assert md < mean - 0.1 * h
    assert var >= 0.9 * float(np.dot(pd, (yd - md) ** 2))


def test_crowded_end_answers_at_its_first_meshes(monkeypatch):
    """PSG(0.52, 0.008) x 4,337 at eps_error 0.01 (the heavy part of a mix whose dominance answer fell back to the
    coupling certificate): with the balance anchor its dominated leaf is placed at the pilot's meshes, so the answer
    after the pilot reaches the width (three chains: the pilot's upper one, the answer's two; nine before), and its
    interval meets the coupling certificate's."""
    from fastpld.dominance import chains
    from certified import overlaps_coupling
    runs = []
    orig = chains._run_chain
    monkeypatch.setattr(chains, "_run_chain", lambda *a: runs.append(a[6]) or orig(*a))
    mech = fastpld.PoissonSubsampledGaussian(0.52, 0.008)
    b = fastpld.compose(mech, 4337, eps_error=0.01, method="dominance").epsilon(1e-5)
    assert len(runs) <= 3, runs
    assert b.upper - b.lower <= 0.02 + 1e-12
    assert overlaps_coupling(mech, 4337, b, 0.05)


def test_a_part_narrower_than_its_mesh_is_resolved(monkeypatch):
    """A mix with a part of small q (PSG(5.99, 1.46e-4) x 565, sd 2.5e-5) that the width model gives a leaf mesh of
    3.2e-5: its dominated leaf is first order on any lattice there, and the rescalings took four compositions and
    every mesh 6x finer (14 chains, 2.2-3.3 s).  With its group refined to half its spread (planner.resolved_meshes)
    the first answer reaches the width (two chains), and its interval meets the coupling certificate's."""
    from fastpld.dominance import chains, planner
    runs = []
    orig = chains._run_chain
    monkeypatch.setattr(chains, "_run_chain", lambda *a: runs.append(a[1]) or orig(*a))
    parts = [(fastpld.PoissonSubsampledGaussian(5.992993480024983, 1.4644628782697092e-4), 565),
             (fastpld.PoissonSubsampledGaussian(0.5847049849103985, 1.1450916686016755e-4), 1696),
             (fastpld.PoissonSubsampledGaussian(0.6891388100738853, 1.6325577734373523e-4), 1029)]
    pld = fastpld.compose(parts)
    b = pld.epsilon(1e-5)
    assert pld.method.startswith("dominance") and len(runs) == 2, (pld.method, len(runs))
    assert b.upper - b.lower <= 1e-3 * b.lower
    assert min(min(m.values()) for m in runs) < 2.5e-5 / 2  # (the narrow part's group, refined)
    ref = fastpld.compose(parts, eps_error=1e-4, method="coupling").epsilon(1e-5)
    assert b.lower <= ref.upper and ref.lower <= b.upper
    # a narrow part of a few copies, in its parent's group: refined at most 8x there, so not at all (planner.
    # _RESOLVE_MAX; every mesh of the mix 1.5e-5 otherwise): the mix's meshes are the model's
    runs.clear()
    few = [(fastpld.PoissonSubsampledGaussian(5.77, 2.16e-4), 5),
           (fastpld.PoissonSubsampledGaussian(0.6, 0.0308), 3642)]
    fastpld.compose(few).epsilon(1e-5)
    assert min(min(m.values()) for m in runs) > 1e-3
