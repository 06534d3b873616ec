"""DiscretizeRV (Algorithm 1) and the split re-discretisation: invariants under random inputs."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastpld
from fastpld.discretize import GridPMF, discretize_loss, rediscretize


def _mean(pmf):
    return pmf.offset + pmf.mesh * float(np.dot(np.arange(pmf.probs.size), np.asarray(pmf.probs, dtype=float)))


@settings(max_examples=40, deadline=None)
@given(sigma=st.floats(0.3, 50.0), h=st.floats(1e-4, 0.2), lattice=st.floats(-1, 1))
def test_gaussian_discretisation_invariants(sigma, h, lattice):
    loss = fastpld.Gaussian(sigma).privacy_losses()["remove"]
    pmf = discretize_loss(loss, h, 1e-14, lattice=lattice)
    assert abs(pmf.probs.sum() - 1) < 1e-12
    assert np.all(pmf.probs >= 0)
    # mean of the window-conditioned loss is preserved (truncation at 1e-14 moves it negligibly)
    assert abs(_mean(pmf) - loss.mean()) < 1e-9 * (1 + abs(loss.mean())) + 1e-10
    # support on the shifted grid lattice + mu + i h, |mu| <= h/2
    centres = pmf.offset - lattice
    frac = centres / h - round(centres / h)
    assert abs(frac) <= 0.5 + 1e-6


@settings(max_examples=40, deadline=None)
@given(sigma=st.floats(0.5, 20.0), q=st.floats(0.001, 0.9), h=st.floats(1e-4, 0.05))
def test_subsampled_discretisation_invariants(sigma, q, h):
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        pmf = discretize_loss(loss, h, 1e-14)
        assert abs(pmf.probs.sum() - 1) < 1e-12
        assert abs(_mean(pmf) - loss.mean()) < 1e-7 * (1 + abs(loss.mean())) + 1e-9
        # the certificate's own claim: the mean-correction error is within the charged bias
        # (plus the truncated tail's effect on the conditional mean and loss.mean()'s quadrature)
        assert abs(_mean(pmf) - loss.mean()) <= pmf.bias + 1e-11 * (1 + abs(loss.mean()))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 60), mesh=st.floats(1e-3, 1.0), ratio=st.floats(0.3, 40.0),
    offset=st.floats(-50, 50), seed=st.integers(0, 2**31 - 1),
)
def test_split_rediscretisation_preserves_mass_and_mean(n, mesh, ratio, offset, seed):
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    p /= p.sum()
    src = GridPMF(p, offset, mesh)
    out = rediscretize(src, mesh * ratio)
    assert abs(out.probs.sum() - 1) < 1e-12
    assert abs(_mean(out) - _mean(src)) < 1e-9 * (1 + abs(offset))
    # support on the target lattice
    assert abs(out.offset / out.mesh - round(out.offset / out.mesh)) < 1e-6


@settings(max_examples=40, deadline=None)
@given(e0=st.floats(0.0, 3.0), h=st.floats(1e-3, 1.0))
def test_discrete_leaf_exact(e0, h):
    loss = fastpld.PureDP(e0).privacy_losses()["remove"]
    pmf = discretize_loss(loss, h, 0.0)
    assert abs(pmf.probs.sum() - 1) < 1e-12
    assert abs(_mean(pmf) - loss.mean()) < 1e-12


def test_inconsistent_custom_mechanism_is_refused():
    import pytest
    from scipy.stats import norm
    # CDF of N(0.5, 1) but a partial mean of another distribution -> mean correction > h/2
    m = fastpld.CustomCDF(lambda t: norm.cdf(t - 0.5), lambda s: 0.5 * s + s * s / 2, mean=0.5, std=1.0,
                          sf=lambda t: norm.sf(t - 0.5), pdf=lambda t: norm.pdf(t - 0.5))
    loss = m.privacy_losses()["remove"]
    loss.partial_mean = lambda edges: (3.0, 0.0)
    with pytest.raises(ValueError, match="mean correction"):
        discretize_loss(loss, 0.01, 1e-12)


@pytest.mark.parametrize("mu", [1e-3, 0.3, 1.0, 10.0, 300.0])
@pytest.mark.parametrize("tail", [1e-4, 1e-12, 1e-20, 1e-300])
def test_gaussian_window_from_the_quantile_is_valid_and_tight(mu, tail):
    """The Gaussian loss's window from the normal quantile (``discretize._gauss_window``): its ends' computed tails at
    most ``tail`` (as the ladder's), within 0.01 standard deviations outward of the exact quantile."""
    from scipy.stats import norm

    from fastpld import discretize
    from fastpld.mechanisms import GaussianLoss
    for loss in (GaussianLoss(mu), GaussianLoss(mu, mu_rel=1e-15)):
        a, b = discretize._gauss_window(loss, tail)
        assert float(loss.cdf(np.array([a]))[0]) <= tail and float(loss.sf(np.array([b]))[0]) <= tail
        z = norm.isf(tail)
        assert loss.m - (z + 0.011) * loss.s <= a <= loss.m - (z - 1e-9) * loss.s
        assert loss.m + (z - 1e-9) * loss.s <= b <= loss.m + (z + 0.011) * loss.s
        assert discretize.truncation_window(loss, tail) == (a, b)
