"""Samplers (issue 21): Poisson subsampling of any mechanism, fixed-size batches, truncated Poisson.

References independent of the code under test: exact enumeration of small discrete compositions,
scipy quadrature of the dominating pair's curve, the closed-form Poisson-subsampled mechanisms, and
dp_accounting's RDP accountant (an upper bound on epsilon, so ours must not exceed it).
"""
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

import fastpld
from fastpld import (
    ApproxDP,
    CustomCDF,
    CustomPMF,
    Gaussian,
    Laplace,
    PoissonSubsampled,
    PoissonSubsampledGaussian,
    PoissonSubsampledLaplace,
    PureDP,
    RandomizedResponse,
    SubsampledWithoutReplacement,
    TruncatedPoissonSubsampled,
)
from fastpld.mechanisms import DiscreteLoss

from certified import dominance_epsilon, overlaps_coupling


# ---- exact references -----------------------------------------------------------------
def _rr(e, bit):
    """Binary randomized response with parameter e: the dominating pair of e-DP."""
    p = special.expit(e)
    return np.array([p, 1 - p]) if bit == 0 else np.array([1 - p, p])


def _delta_product(pairs, eps):
    """delta(eps) of the product pair (X_1 x ... x X_k, Y_1 x ... x Y_k), by enumeration."""
    x = np.array([1.0])
    y = np.array([1.0])
    for a, b in pairs:
        x = np.outer(x, a).ravel()
        y = np.outer(y, b).ravel()
    return float(np.maximum(x - math.exp(eps) * y, 0).sum())


def _gauss_delta(mu, eps):
    return special.ndtr(-eps / mu + mu / 2) - math.exp(eps) * special.ndtr(-eps / mu - mu / 2)


def _mixture_delta_quad(sigma, shift, g, eps, order):
    """delta(eps) of (M, P) (order "MP") or (P, M), M = (1-g) N(0, s^2) + g N(shift, s^2), by quadrature."""
    p = lambda w: stats.norm.pdf(w, 0, sigma)
    m = lambda w: (1 - g) * p(w) + g * stats.norm.pdf(w, shift, sigma)
    a, b = (m, p) if order == "MP" else (p, m)
    f = lambda w: max(a(w) - math.exp(eps) * b(w), 0.0)
    lo, hi = -40 * sigma, shift + 40 * sigma
    val, err = integrate.quad(f, lo, hi, points=[0.0, shift / 2, shift], limit=400, epsabs=1e-14, epsrel=1e-11)
    return val


# ---- PoissonSubsampled ----------------------------------------------------------------
def test_poisson_gaussian_and_laplace_are_the_closed_forms():
    for base, ref in ((Gaussian(1.3, 2.0), PoissonSubsampledGaussian(1.3, 0.05, 2.0)),
                      (Laplace(2.0), PoissonSubsampledLaplace(2.0, 0.05))):
        a = PoissonSubsampled(base, 0.05).privacy_losses()
        b = ref.privacy_losses()
        assert a["add"] is b["add"] and a["remove"] is b["remove"]
    pa = fastpld.compose(PoissonSubsampled(Gaussian(1.0), 0.02), 500)
    pb = fastpld.compose(PoissonSubsampledGaussian(1.0, 0.02), 500)
    assert pa.epsilon(1e-5) == pb.epsilon(1e-5)
    # nested Poisson subsampling is Poisson subsampling at the product of the rates
    nested = PoissonSubsampled(PoissonSubsampled(PureDP(1.0), 0.5), 0.2).privacy_losses()["remove"]
    flat = PoissonSubsampled(PureDP(1.0), 0.1).privacy_losses()["remove"]
    assert nested is flat


@pytest.mark.parametrize("base", [PureDP(0.7), RandomizedResponse(1.0, 3), ApproxDP(0.5, 1e-3),
                                  CustomPMF([1.0, -1.0], [special.expit(1.0), special.expit(-1.0)])])
def test_poisson_q_one_and_zero(base):
    full = PoissonSubsampled(base, 1.0).privacy_losses()
    assert full["remove"] is base.privacy_losses()["remove"]
    zero = PoissonSubsampled(base, 0.0).privacy_losses()["remove"]
    assert isinstance(zero, DiscreteLoss) and zero.values.tolist() == [0.0] and zero.p_inf == 0


@pytest.mark.parametrize("e0,q,k", [(1.0, 0.2, 6), (2.0, 0.05, 8)])
def test_poisson_pure_dp_by_enumeration(e0, q, k):
    p, qq = _rr(e0, 0), _rr(e0, 1)
    m = (1 - q) * p + q * qq
    pld = fastpld.compose(PoissonSubsampled(PureDP(e0), q), k, eps_error=1e-3, delta_error=1e-12)
    for eps in (0.0, 0.3, 0.8, 1.5):
        exact = max(_delta_product([(m, p)] * k, eps), _delta_product([(p, m)] * k, eps))
        b = pld.delta(eps)
        assert b.lower <= exact <= b.upper, (eps, b, exact)


def test_poisson_approx_dp_by_enumeration():
    # (eps, delta)-DP pair on 4 points; Poisson-subsampled, both orderings, k = 4
    e0, d0, q, k = 0.8, 1e-3, 0.3, 4
    a = (1 - d0) * special.expit(e0)
    b = (1 - d0) * special.expit(-e0)
    p = np.array([d0, a, b, 0.0])
    qq = np.array([0.0, b, a, d0])
    m = (1 - q) * p + q * qq
    pld = fastpld.compose(PoissonSubsampled(ApproxDP(e0, d0), q), k, eps_error=1e-3, delta_error=1e-12)
    for eps in (0.0, 0.5, 1.0):
        exact = max(_delta_product([(m, p)] * k, eps), _delta_product([(p, m)] * k, eps))
        bd = pld.delta(eps)
        assert bd.lower <= exact <= bd.upper, (eps, bd, exact)


def test_poisson_custom_cdf_dominates_and_is_close():
    mu = 1.0  # the Gaussian loss N(mu^2/2, mu^2) given as a CustomCDF
    m = CustomCDF(cdf=lambda t: special.ndtr((t - mu**2 / 2) / mu), sf=lambda t: special.ndtr((mu**2 / 2 - t) / mu),
                  log_mgf=lambda s: s * mu**2 / 2 + s * s * mu**2 / 2, mean=mu**2 / 2, std=mu, cdf_rel_error=1e-12)
    k = 200
    a = fastpld.compose(PoissonSubsampled(m, 0.05), k).epsilon(1e-6)
    b = fastpld.compose(PoissonSubsampledGaussian(1.0, 0.05), k).epsilon(1e-6)
    assert a.upper >= b.lower
    assert a.upper <= b.upper + 0.05
    # the discretised base dominates: only upper bounds are certified, the lower is the trivial 0
    assert a.lower == 0.0 and a.estimate > 0


def test_poisson_invalid_inputs():
    with pytest.raises(ValueError, match="mechanism"):
        PoissonSubsampled("gauss", 0.1)
    with pytest.raises(ValueError, match="sampling_probability"):
        PoissonSubsampled(Gaussian(1.0), 1.5)
    with pytest.raises(ValueError, match="neighboring"):
        PoissonSubsampled(Gaussian(1.0), 0.1, neighboring="replace")
    with pytest.raises(ValueError, match="no pair's privacy loss"):  # E[e^-L] = (e^3 + 1)/2 > 1
        CustomPMF([-3.0, 0.0], [0.5, 0.5])

    class Bad(fastpld.Mechanism):  # a user's mechanism whose loss is no pair's: the sampler checks too
        def privacy_losses(self):
            loss = DiscreteLoss([-3.0, 0.0], [0.5, 0.5], 0.0)
            return {"add": loss, "remove": loss}

    with pytest.raises(ValueError, match="not the loss of any pair"):
        PoissonSubsampled(Bad(), 0.1).privacy_losses()


def test_poisson_vs_rdp():
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import RdpAccountant
    sigma, q, k = 1.0, 0.01, 1000
    acc = RdpAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), k)
    rdp = acc.get_epsilon(1e-5)
    ours = fastpld.compose(PoissonSubsampled(Gaussian(sigma), q), k).epsilon(1e-5)
    assert ours.upper <= rdp


# ---- without replacement --------------------------------------------------------------
def test_wor_add_remove_is_poisson_of_the_replace_one_base():
    a = SubsampledWithoutReplacement(Gaussian(1.0), 256, 60_000, "add_remove").privacy_losses()
    b = PoissonSubsampledGaussian(1.0, 256 / 60_000, sensitivity=2.0).privacy_losses()
    assert a["add"] is b["add"] and a["remove"] is b["remove"]


def test_wor_full_batch_is_the_replace_one_base():
    full = fastpld.compose(SubsampledWithoutReplacement(Gaussian(2.0), 100, 100), 10)
    for eps in (0.5, 1.0, 2.0):
        exact = _gauss_delta(math.sqrt(10) * 2.0 / 2.0, eps)
        b = full.delta(eps)
        assert b.lower <= exact <= b.upper


@pytest.mark.parametrize("sigma,g", [(1.0, 0.1), (0.7, 0.02)])
def test_wor_replace_one_one_step_against_quadrature(sigma, g):
    n = 1000
    b = int(round(g * n))
    pld = fastpld.compose(SubsampledWithoutReplacement(Gaussian(sigma), b, n), 1, eps_error=1e-3, delta_error=1e-13)
    for eps in (0.0, 0.2, 0.5, 1.0, 2.0):
        rem = _mixture_delta_quad(sigma, 2.0, g, eps, "MP")
        add = _mixture_delta_quad(sigma, 2.0, g, eps, "PM")
        bd = pld.delta(eps)
        # for eps >= 0 the symmetric pair's curve is the remove curve, which dominates the add curve
        assert add <= rem + 1e-12
        assert bd.lower <= rem + 1e-11 and rem <= bd.upper + 1e-11, (eps, bd, rem)


def test_wor_replace_one_mixed_orderings_by_enumeration():
    # records in {0, 1, 2}; batch of 1 from 3; the step releases binary randomized response of
    # f(record) with parameter e, so the base is e-DP under replace-one (PureDP(e / 2) under
    # add/remove).  D = (1, 0, 0), D' = (2, 0, 0).  Step A (f = [r == 1]) gives the pair (M, P),
    # step B (f = [r == 2]) gives (P, M): an adaptive analyst mixes them.
    e, k = 2.0, 10
    g = 1 / 3
    p, qq = _rr(e, 0), _rr(e, 1)
    m = (1 - g) * p + g * qq
    pld = fastpld.compose(SubsampledWithoutReplacement(PureDP(e / 2), 1, 3), k, eps_error=1e-3, delta_error=1e-12)
    worst_mixed = 0.0
    for eps in (0.5, 1.0, 2.0, 3.0):
        vals = [_delta_product([(m, p)] * a + [(p, m)] * (k - a), eps) for a in range(k + 1)]
        assert max(vals) <= pld.delta(eps).upper, (eps, max(vals), pld.delta(eps))
        worst_mixed = max(worst_mixed, max(vals[1:-1]) - max(vals[0], vals[-1]))
    # the pitfall: a mixed composition exceeds both single-ordering compositions
    assert worst_mixed > 0.01


def test_wor_replace_one_vs_rdp():
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import RdpAccountant
    # dp_accounting's RDP bound for this event (Wang, Balle, Kasiviswanathan 2019) takes the noise
    # relative to the replace-one sensitivity: our replace-one base with shift 1 is Gaussian(sigma, 0.5)
    sigma, b, n, k = 1.5, 50, 1000, 300
    acc = RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.SampledWithoutReplacementDpEvent(n, b, dpa.GaussianDpEvent(sigma)), k)
    rdp = acc.get_epsilon(1e-5)
    ours = fastpld.compose(SubsampledWithoutReplacement(Gaussian(sigma, 0.5), b, n), k).epsilon(1e-5)
    assert ours.upper <= rdp, (ours, rdp)


def test_wor_discrete_bases():
    for base in (PureDP(0.5), RandomizedResponse(0.5, 3), ApproxDP(0.5, 1e-8)):
        pld = fastpld.compose(SubsampledWithoutReplacement(base, 10, 100), 50)
        b = pld.epsilon(1e-5)
        assert 0 < b.lower <= b.upper < 50 * 1.0
    sym = CustomPMF([2.0, -2.0], [special.expit(2.0), special.expit(-2.0)])
    a = SubsampledWithoutReplacement(CustomPMF([1.0, -1.0], [0.75, 0.25]), 10, 100, replace_one_mechanism=sym)
    b = SubsampledWithoutReplacement(PureDP(1.0), 10, 100)
    ea, eb = fastpld.compose(a, 20).epsilon(1e-5), fastpld.compose(b, 20).epsilon(1e-5)
    assert abs(ea.estimate - eb.estimate) < 1e-9


def test_wor_invalid_inputs():
    with pytest.raises(ValueError, match="batch_size"):
        SubsampledWithoutReplacement(Gaussian(1.0), 11, 10)
    with pytest.raises(ValueError, match="batch_size"):
        SubsampledWithoutReplacement(Gaussian(1.0), 10, 10, "add_or_remove")
    with pytest.raises(ValueError, match="neighboring"):
        SubsampledWithoutReplacement(Gaussian(1.0), 1, 10, "remove")
    with pytest.raises(ValueError, match="dataset_size"):
        SubsampledWithoutReplacement(Gaussian(1.0), 1, 0)
    with pytest.raises(ValueError, match="replace_one_mechanism"):
        SubsampledWithoutReplacement(CustomPMF([1.0, -1.0], [0.75, 0.25]), 1, 10)
    with pytest.raises(ValueError, match="symmetric"):
        SubsampledWithoutReplacement(Gaussian(1.0), 1, 10,
                                     replace_one_mechanism=CustomPMF([1.0, -1.0], [0.9, 0.1]))


# ---- truncated Poisson ----------------------------------------------------------------
def test_truncated_without_truncation_is_poisson():
    a = TruncatedPoissonSubsampled(Gaussian(1.0), 0.01, 1000, 1000).privacy_losses()
    b = PoissonSubsampledGaussian(1.0, 0.01).privacy_losses()
    assert a["add"] is b["add"] and a["remove"] is b["remove"]


def test_truncated_without_replace_one_pair_charges_the_truncation_probability():
    # a CustomPMF base has no known replace-one pair: the truncation event is an infinite loss
    e0, q, n, cap, k = 1.0, 0.01, 1000, 18, 100
    base = CustomPMF([e0, -e0], [special.expit(e0), special.expit(-e0)])
    mech = TruncatedPoissonSubsampled(base, q, n, cap)
    assert mech.replace_one_mechanism is None
    t = mech.truncation_probability
    assert t == pytest.approx(float(stats.binom.sf(cap - 1, n, q)), rel=1e-8) and t > 0
    tr = fastpld.compose(mech, k)
    po = fastpld.compose(PoissonSubsampled(PureDP(e0), q), k)
    for eps in (0.5, 1.0, 2.0):
        # the mixture (1-t) Poisson + t (+inf), composed: 1 - (1-t)^k (1 - delta_Poisson)
        lo = 1 - (1 - t) ** k * (1 - po.delta(eps).lower)
        hi = 1 - (1 - t) ** k * (1 - po.delta(eps).upper)
        b = tr.delta(eps)
        assert b.upper >= lo * (1 - 1e-9) and b.lower <= hi * (1 + 1e-9)
        assert b.upper >= 1 - (1 - t) ** k


def test_truncated_gaussian_is_the_mixture_with_the_replace_one_step():
    q, n, cap = 0.01, 1000, 12  # mean batch 10: truncation is frequent (t ~ 0.3)
    mech = TruncatedPoissonSubsampled(Gaussian(1.0), q, n, cap)
    t = mech.truncation_probability
    assert 0.1 < t < 0.5
    one = fastpld.compose(mech, 1, eps_error=1e-3, delta_error=1e-12)
    p1 = fastpld.compose(PoissonSubsampledGaussian(1.0, q), 1, eps_error=1e-3, delta_error=1e-12)
    p2 = fastpld.compose(PoissonSubsampledGaussian(1.0, q, sensitivity=2.0), 1, eps_error=1e-3, delta_error=1e-12)
    for eps in (0.0, 0.02, 0.05, 0.1):
        b = one.delta(eps)
        assert b.upper >= (1 - t) * p1.delta(eps).lower + t * p2.delta(eps).lower
        assert b.lower <= (1 - t) * p1.delta(eps).upper + t * p2.delta(eps).upper
    k = 300
    tr = fastpld.compose(mech, k).epsilon(1e-5)
    assert fastpld.compose(PoissonSubsampledGaussian(1.0, q), k).epsilon(1e-5).lower <= tr.upper
    assert tr.lower <= fastpld.compose(PoissonSubsampledGaussian(1.0, q, sensitivity=2.0), k).epsilon(1e-5).upper
    dpa = pytest.importorskip("dp_accounting")
    # dp_accounting's PLD (arXiv 2508.15089) bounds the truncation branch differently (a smaller
    # sampling probability, but a replace-one Poisson pair with both records differing); neither
    # bound dominates the other, they agree closely
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dpa.TruncatedSubsampledGaussianDpEvent(n, q, cap, 1.0), k)
    assert abs(acc.get_epsilon(1e-5) - tr.upper) <= 0.1 * tr.upper


def test_truncated_invalid_inputs():
    with pytest.raises(ValueError, match="max_batch_size"):
        TruncatedPoissonSubsampled(Gaussian(1.0), 0.1, 100, 0)
    with pytest.raises(ValueError, match="dataset_size"):
        TruncatedPoissonSubsampled(Gaussian(1.0), 0.1, -1, 10)


def test_many_atom_log_mgf_is_an_upper_bound():
    from fastpld.samplers import _ManyAtomLoss
    rng = np.random.default_rng(0)
    v = np.sort(rng.normal(size=9000))
    p = rng.random(9000)
    p /= p.sum()
    s = np.linspace(-50, 50, 201)
    fine, exact = _ManyAtomLoss(v, p).log_mgf(s), DiscreteLoss(v, p).log_mgf(s)
    assert (fine >= exact).all() and (fine - exact).max() < 0.5


# ---- adapters -------------------------------------------------------------------------
def _adapter_default(mech, count, delta_error):
    """What the adapters compose by default: within 0.1% (dominance), else eps_error 0.01 (coupling)."""
    try:
        return fastpld.compose(mech, count, rel_error=1e-3, delta_error=delta_error)
    except ValueError:
        return fastpld.compose(mech, count, eps_error=0.01, delta_error=delta_error)


def test_dp_accounting_adapter_maps_the_sampler_events():
    dpa = pytest.importorskip("dp_accounting")
    from fastpld.compat.dp_accounting import FastPLDAccountant
    R = dpa.NeighboringRelation
    g = dpa.GaussianDpEvent(1.0)
    for rel, nb in ((R.REPLACE_ONE, "replace_one"), (R.ADD_OR_REMOVE_ONE, "add_or_remove")):
        acc = FastPLDAccountant(rel)
        acc.compose(dpa.SampledWithoutReplacementDpEvent(1000, 10, g), 100)
        ref = _adapter_default(SubsampledWithoutReplacement(Gaussian(1.0), 10, 1000, nb), 100, 1e-10)
        assert acc.get_epsilon_bounds(1e-5) == ref.epsilon(1e-5)
    acc = FastPLDAccountant()
    ev = dpa.TruncatedSubsampledGaussianDpEvent(1000, 0.01, 35, 1.0)
    acc.compose(ev, 100)
    ref = _adapter_default(TruncatedPoissonSubsampled(Gaussian(1.0), 0.01, 1000, 35), 100, 1e-10)
    assert acc.get_epsilon_bounds(1e-5) == ref.epsilon(1e-5)
    assert not FastPLDAccountant(R.REPLACE_ONE).supports(ev)
    assert not FastPLDAccountant().supports(dpa.SampledWithoutReplacementDpEvent(10, 10, g))
    # dp_accounting's own PLD value for the truncated event lies below our certified upper bound
    pld = dpa.pld.PLDAccountant(value_discretization_interval=1e-3)
    pld.compose(ev, 100)
    assert pld.get_epsilon(1e-5) <= acc.get_epsilon(1e-5) + 1e-3


def test_opacus_accountant_takes_the_sampler():
    pytest.importorskip("torch")
    pytest.importorskip("opacus")
    from fastpld.compat.opacus import FastPLDAccountant
    acc = FastPLDAccountant(sampler=lambda s, q: SubsampledWithoutReplacement(Gaussian(s), round(q * 1000), 1000))
    for _ in range(50):
        acc.step(noise_multiplier=1.0, sample_rate=0.01)
    ref = _adapter_default(SubsampledWithoutReplacement(Gaussian(1.0), 10, 1000), 50, 1e-8)
    assert acc.get_epsilon_bounds(1e-5) == ref.epsilon(1e-5)
    with pytest.raises(ValueError, match="sampler"):
        FastPLDAccountant(sampler=3)


def test_find_noise_multiplier_takes_the_sampler():
    n, b, steps = 1000, 10, 100
    sampler = lambda s, q: SubsampledWithoutReplacement(Gaussian(s), b, n)  # noqa: E731
    s = fastpld.find_noise_multiplier(3.0, 1e-5, b / n, steps, sampler=sampler)
    # (at the accuracy the calibration used: compose's default)
    assert fastpld.compose(sampler(s, b / n), steps, delta_error=1e-8).epsilon(1e-5).upper <= 3.0
    assert fastpld.compose(sampler(s / 1.002, b / n), steps, delta_error=1e-8).epsilon(1e-5).upper > 3.0
    poisson = fastpld.find_noise_multiplier(3.0, 1e-5, b / n, steps)
    assert s > poisson  # fixed-size batches under replace-one cost noise
    with pytest.raises(ValueError, match="sampler"):
        fastpld.find_noise_multiplier(3.0, 1e-5, b / n, steps, sampler=5)


@pytest.mark.parametrize("base", [Gaussian(1.0), Laplace(1.5)])
def test_symmetric_loss_is_a_symmetric_privacy_loss(base):
    # the negative side is the mirror image of the positive side weighted by e^-y:
    # Pr[Z <= -y] = int_(y, inf) e^-u dF(u), and E[e^-Z] = 1
    loss = SubsampledWithoutReplacement(base, 10, 100).privacy_losses()["remove"]
    for y in (0.05, 0.3, 1.0):
        grid = np.linspace(y, 12.0, 200_001)
        f = loss.cdf(grid)
        # e^-u is decreasing: the right and left Riemann-Stieltjes sums bracket the integral
        lo = float(np.sum(np.exp(-grid[1:]) * np.diff(f)))
        hi = float(np.sum(np.exp(-grid[:-1]) * np.diff(f))) + math.exp(-12.0) * (1 - f[-1])
        assert lo * (1 - 1e-9) <= loss.cdf(np.array([-y]))[0] <= hi * (1 + 1e-9)
        assert loss.cdf(np.array([-y]))[0] + loss.sf(np.array([-y]))[0] == pytest.approx(1.0, abs=1e-14)
    # E[e^-Z] = 1 (no mass at -inf), via the CDF on a fine grid plus the atom at 0
    grid = np.linspace(-12.0, 12.0, 400_001)
    f = loss.cdf(grid)
    total = float(np.sum(np.exp(-0.5 * (grid[1:] + grid[:-1])) * np.diff(f)))
    assert total == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("direction", ["remove", "add"])
def test_poisson_single_direction_by_enumeration(direction):
    e0, q, k = 1.5, 0.1, 6
    p, qq = _rr(e0, 0), _rr(e0, 1)
    m = (1 - q) * p + q * qq
    pair = (m, p) if direction == "remove" else (p, m)
    pld = fastpld.compose(PoissonSubsampled(PureDP(e0), q, neighboring=direction), k, eps_error=1e-3,
                          delta_error=1e-12)
    assert set(pld.directions) == {"remove"}
    for eps in (0.0, 0.4, 1.0):
        exact = _delta_product([pair] * k, eps)
        b = pld.delta(eps)
        assert b.lower <= exact <= b.upper, (eps, b, exact)


def test_truncated_mixed_kinds_refused():
    base = CustomPMF([1.0, -1.0], [special.expit(1.0), special.expit(-1.0)])
    mech = TruncatedPoissonSubsampled(base, 0.01, 1000, 12, replace_one_mechanism=Gaussian(1.0))
    with pytest.raises(ValueError, match="same kind"):
        mech.privacy_losses()


@pytest.mark.parametrize("sigma,b,n", [(1.845125125237461, 25, 24549), (3.90766893643956, 72, 13994),
                                       (300.0, 5, 1000), (0.7, 500, 1000)])
def test_symmetric_loss_atom_at_zero_from_closed_forms(sigma, b, n):
    """The atom at 0 of fixed-size batches' symmetric loss, ``1 - (2 - g) P[L > 0] - g Q[L > 0]``, against mpmath
    (the replace-one Gaussian pair, sensitivity 2: ``P[L > 0] = Phi(-1 / sigma)``), within its stated bound; the
    leaves take it (its error
    was 8 tau_F of the tails through the CDF, 1.2e-10 of the mass at g = 0.5%: every composition of these refused
    by dominance, the first even at one step)."""
    import mpmath as mp
    from fastpld.dominance.leaves import _atom_masses
    mp.mp.dps = 40
    loss = SubsampledWithoutReplacement(Gaussian(sigma), b, n).privacy_losses()["add"]
    g, sd = mp.mpf(loss.gamma), 2 / mp.mpf(sigma)
    assert loss.pair.sg == sigma / 2
    ref = 1 - (2 - g) * mp.ncdf(-sd / 2) - g * mp.ncdf(sd / 2)
    m, err = loss.atom_mass(0.0)
    assert abs(mp.mpf(m) - ref) <= err and err <= 1e-13
    assert loss.atom_mass(0.5) is None
    lm, lerr = _atom_masses(loss, [0.0])
    assert lm[0] == m and lerr[0] == err


def test_fixed_size_batches_certified_by_dominance():
    """One step of SubsampledWithoutReplacement(Gaussian(3.9), 72, 13994) and 895 of (Gaussian(1.85), 25, 24549)
    were refused by dominance (the atom's charge) and answered by the coupling certificate, 0.3-30% wide; now
    certified within 0.1%, overlapping the coupling certificate's interval (an independent certificate)."""
    for sigma, b, n, k in [(3.90766893643956, 72, 13994, 1), (1.845125125237461, 25, 24549, 895)]:
        m = SubsampledWithoutReplacement(Gaussian(sigma), b, n)
        assert overlaps_coupling(m, k, dominance_epsilon(m, k), 0.002)


def test_subsampled_discrete_mass_at_minus_infinity_without_cancellation():
    """A base PMF whose pair has 1e-12 of P's mass at L = -inf: in float64 ``1 - sum p e^-v`` cancels to 3e-6
    relative (an exact-oracle audit found the upper bound of delta 3.25e-6 relative low where that atom, at
    ``-log(1 - q)`` in the add direction, is the only one above epsilon); now at 60 digits, rounded once.  Bases
    that know theirs (pure DP, randomized response: 0; approximate DP: delta) give it exactly."""
    import mpmath as mp
    mp.mp.dps = 60
    v = [-0.12471024820319697, -0.020845967142188032, 0.10481278094461978]
    p = [0.17717655207167804, 0.4838947335232095, 0.33892871440511246]
    q = 0.0008607789257007625
    m = PoissonSubsampled(CustomPMF(v, p), q)
    add = m.privacy_losses()["add"]
    p_minf = 1 - sum(mp.mpf(pi) * mp.exp(-mp.mpf(vi)) for vi, pi in zip(v, p))
    assert float(add.values[-1]) == pytest.approx(-math.log1p(-q), rel=1e-15)
    assert abs(add.probs[-1] / p_minf - 1) < 1e-14
    eps = 0.00011934558561784377  # (above every other atom: delta is that atom's)
    exact = p_minf * (1 - (1 - mp.mpf(q)) * mp.exp(mp.mpf(eps)))
    b = fastpld.compose(m, 1, rel_error=1e-4).delta(eps)
    assert b.lower <= exact <= b.upper
    for base, pm in ((PureDP(0.3), 0.0), (RandomizedResponse(0.5, 4), 0.0), (ApproxDP(0.2, 1e-7), 1e-7)):
        assert next(iter(base.privacy_losses().values())).p_minf == pm
