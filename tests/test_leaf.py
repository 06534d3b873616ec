"""Leaf kernels of the Poisson-subsampled Gaussian: compiled vs numpy reference, and the
L-space partial moments against the generic CDF quadrature and the pair's moments."""
import math

import numpy as np
import pytest

import fastpld
from fastpld import _kernels
from fastpld import mechanisms as M
from fastpld.discretize import truncation_window
from fastpld.mechanisms import tails

CASES = [(1.0, 0.01), (27.1, 0.2), (0.5, 0.05), (1.0, 0.005), (3.0, 0.9)]


def _ref(fn, *args, **kw):
    core, _kernels._leaf = _kernels._leaf, None
    try:
        return fn(*args, **kw)
    finally:
        _kernels._leaf = core


@pytest.mark.skipif(_kernels._leaf is None, reason="compiled leaf kernels unavailable")
@pytest.mark.parametrize("sigma,q", CASES)
@pytest.mark.parametrize("remove", [True, False])
def test_compiled_leaf_kernels_match_numpy(sigma, q, remove):
    v = 1 / sigma**2
    sd = math.sqrt(v)
    t = np.concatenate([np.linspace(-0.3, 3.0, 3001), [-1e9, 1e9, -50.0, 800.0, math.log1p(-q), -math.log1p(-q)]])
    # Two maths libraries (libm's erfc/expm1/log vs scipy's ndtr and numpy's expm1/log, SIMD or not), so
    # not bit for bit: each evaluation of F and S is charged a relative error of cdf_rel_error (1e-11,
    # docs/roundoff.md section 1), so two of them differ by at most twice that; the density comes from the
    # same l(t) and exp, with the same argument sensitivity.  (Measured: <= 2e-12, in the far tails where the
    # argument's rounding is amplified by |z|; a wrong term or index moves values by far more.)
    rtol = 2 * M.SubsampledLoss.cdf_rel_error
    for a, b in zip(_kernels.psg_eval(t, q, v, sd, remove), _ref(_kernels.psg_eval, t, q, v, sd, remove)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-290)
    for lo, hi in [(-math.inf, math.inf), (-3.0, 5.0), (2.0, 2.5), (1.0, 1.0)]:
        a = _kernels.psg_moments(lo, hi, q, v, sd, remove)
        b = _ref(_kernels.psg_moments, lo, hi, q, v, sd, remove)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("sigma,q", CASES)
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_partial_mean_and_moments(sigma, q, direction):
    M._LOSS_CACHE.clear()
    loss = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()[direction]
    a, b = truncation_window(loss, 1e-13)
    edges = np.linspace(a, b, 257)
    val, err = loss.partial_mean(edges)
    gen, gen_err = M.ContinuousLoss.partial_mean(loss, edges)  # quadrature of the CDF in Y
    assert abs(val - gen) <= err + gen_err
    assert err <= 1e-13
    # the window holds all but 2e-13 of the mass: its partial mean is the mean
    assert abs(val - loss.mean()) <= 1e-11
    # the same moments from the pair's generic expectations (the numpy quadrature of any pair)
    m_ref, s_ref = loss._pair_expectation_moments()
    assert loss.mean() == pytest.approx(m_ref, rel=1e-12, abs=1e-16)
    assert loss.std() == pytest.approx(s_ref, rel=1e-12, abs=0)


@pytest.mark.parametrize("sigma,q", CASES[:3])
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_ladder_finds_the_first_point(sigma, q, direction):
    M._LOSS_CACHE.clear()
    loss = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()[direction]
    for tail in (1e-3, 1e-13, 1e-40):
        a, b = truncation_window(loss, tail)  # (below 1e-3 from the normal quantile of L, _psg_window)
        assert loss.cdf(np.array([a]))[0] <= tail and loss.sf(np.array([b]))[0] <= tail
        a, b = tails._generic_window(loss, tail, loss.mean(), loss.std())  # the ladder
        assert loss.cdf(np.array([a]))[0] <= tail and loss.sf(np.array([b]))[0] <= tail
        # the full scan of the ladder (as before the strided search) finds the same points
        for fn, d, lim, x in ((loss.cdf, -1.0, loss.support[0], a), (loss.sf, 1.0, loss.support[1], b)):
            base = tails._LADDER_BASE
            steps = np.unique(np.concatenate([base * loss.std(), base[1:] * max(abs(loss.mean()), 1.0)]))
            xs = loss.mean() + d * steps
            if math.isfinite(lim):
                out = lim + d * max(1e-12 * abs(lim), 1e-300)
                xs = np.append(np.where(d * (xs - lim) >= 0, out, xs), out)
            i = int(np.nonzero(fn(xs) <= tail)[0][0])
            expect = float(xs[0]) if i == 0 else float(np.linspace(xs[i - 1], xs[i], 48)[
                np.nonzero(fn(np.linspace(xs[i - 1], xs[i], 48)) <= tail)[0][0]])
            assert x == expect


@pytest.mark.parametrize("scale", [0.3, 3.0, 1081.3])
def test_ladder_atom_at_support_end(scale):
    """Laplace: atoms heavier than the tail at both ends of the support; the early exit returns
    the points just outside it, as the full scan of the ladder does."""
    loss = fastpld.Laplace(scale).privacy_losses()["remove"]
    for tail in (1e-3, 1e-13, 1e-40):
        a, b = truncation_window(loss, tail)
        assert loss.cdf(np.array([a]))[0] <= tail and loss.sf(np.array([b]))[0] <= tail
        for fn, d, lim, x in ((loss.cdf, -1.0, loss.support[0], a), (loss.sf, 1.0, loss.support[1], b)):
            base = tails._LADDER_BASE
            steps = np.unique(np.concatenate([base * loss.std(), base[1:] * max(abs(loss.mean()), 1.0)]))
            out = lim + d * max(1e-12 * abs(lim), 1e-300)
            xs = loss.mean() + d * steps
            xs = np.append(np.where(d * (xs - lim) >= 0, out, xs), out)
            assert np.all(fn(xs[xs != out]) > tail)  # the scan's first point <= tail is out
            assert x == out
