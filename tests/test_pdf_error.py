"""The densities' error bounds (``ContinuousLoss.pdf_error``) against exact densities at 40 digits.

The dominance leaf's rules charge each node the relative error of its computed density against the exact density at
the exact node (docs/dominance.md, "The density's rounding"): the points here are shifted by the allowance ``dt`` both
ways, and near a support end the computed point's own rounding is most of the error.  Where a normal factor underflows
the relative bound is not claimed: an absolute ``1e-290`` (the leaf's ``_UNDERFLOW_TV`` argument) is allowed.
"""
import math

import numpy as np
import pytest

import fastpld
from fastpld.mechanisms import GaussianLoss, LaplaceLoss

mpmath = pytest.importorskip("mpmath")

U = 2.0 ** -53


def _psg_exact(y, sigma, q, remove):
    s, qq = mpmath.mpf(sigma), mpmath.mpf(q)
    t = y if remove else -y
    arg = mpmath.exp(t) - 1 + qq
    if arg <= 0:
        return mpmath.mpf(0)
    x = s ** 2 * mpmath.log(arg / qq) + mpmath.mpf(1) / 2  # the threshold on the mechanism's output
    dxdt = s ** 2 * mpmath.exp(t) / arg
    phi = lambda z: mpmath.exp(-z * z / 2) / mpmath.sqrt(2 * mpmath.pi)  # noqa: E731
    if remove:
        return ((1 - qq) * phi(x / s) + qq * phi((x - 1) / s)) / s * dxdt
    return phi(x / s) / s * dxdt


def _check(loss, exact, ys, dts):
    """The computed densities at ``ys`` within their bounds of the exact ones at ``ys`` and ``ys +- dts``; returns the
    largest error found as a share of its allowance, and the largest relative error at the points themselves."""
    mpmath.mp.dps = 40
    f = np.asarray(loss.pdf(ys), dtype=np.float64)
    bound = np.asarray(loss.pdf_error(ys, dts), dtype=np.float64)
    worst = largest = 0.0
    for y, fv, e, dt in zip(ys, f, bound, dts):
        for shift in (-dt, 0.0, dt):
            ex = exact(mpmath.mpf(float(y)) + mpmath.mpf(float(shift)))
            err = abs(mpmath.mpf(float(fv)) - ex)
            if not math.isfinite(e):
                continue  # (no bound claimed: the point within its rounding of the end)
            allowed = mpmath.mpf(float(e)) * ex + mpmath.mpf(1e-290)
            assert err <= allowed, (y, shift, float(fv), float(ex), float(e))
            if ex > 1e-280:
                worst = max(worst, float(err / allowed))
                if shift == 0.0:
                    largest = max(largest, float(err / ex))
    return worst, largest


@pytest.mark.parametrize("sigma,q", [(5.0, 0.1), (1.0, 0.01), (0.5, 0.001), (0.2, 0.01), (20.0, 0.5)])
def test_subsampled_gaussian_density_errors_are_bounded(sigma, q):
    rng = np.random.default_rng(1)
    worst = largest = 0.0
    for name, loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().items():
        remove = name == "remove"
        end = math.log1p(-q) if remove else -math.log1p(-q)
        side = 1.0 if remove else -1.0
        # across the bulk and tails, and at distances 1e-17 .. 0.1 from the end (where the point's own rounding and
        # that of log(1 - q) are most of the density's error)
        ys = np.concatenate([end + side * rng.uniform(0, 12 / sigma + 2, 120),
                             end + side * 10.0 ** rng.uniform(-17, -1, 120)])
        dts = U * (np.abs(ys) + 4 * 10.0 ** rng.uniform(-6, -1, ys.size))
        w, r = _check(loss, lambda y: _psg_exact(y, sigma, q, remove), ys, dts)
        worst, largest = max(worst, w), max(largest, r)
    assert worst > 1e-3  # (the bound is not vacuous: some error comes within a thousandth of it)
    # (and it is needed: the rules' 16 u rounding term, all they charged before, is exceeded many times near the end)
    assert largest > 100 * 16 * U


def test_gaussian_and_laplace_density_errors_are_bounded():
    rng = np.random.default_rng(2)
    g = GaussianLoss(0.7)
    ys = g.m + g.s * rng.uniform(-37, 37, 200)
    s, m = mpmath.mpf(g.s), mpmath.mpf(0.7) ** 2 / 2
    _check(g, lambda y: mpmath.exp(-((y - m) / s) ** 2 / 2) / (s * mpmath.sqrt(2 * mpmath.pi)), ys,
           U * (np.abs(ys) + 1.0))
    lap = LaplaceLoss(1.3)
    ys = rng.uniform(-1.3, 1.3, 200)
    e = mpmath.mpf(1.3)
    _check(lap, lambda y: mpmath.exp((y - e) / 2) / 4, ys, U * (np.abs(ys) + 1.0))


def test_subsampled_laplace_density_errors_are_bounded():
    rng = np.random.default_rng(3)
    eps0, q = 0.8, 0.05
    for name, loss in fastpld.PoissonSubsampledLaplace(1.0 / eps0, q).privacy_losses().items():
        remove = name == "remove"
        lo, hi = loss.support
        ys = rng.uniform(lo, hi, 150)
        ee, qq = mpmath.mpf(eps0), mpmath.mpf(q)

        def exact(y, remove=remove):
            # Y = +-log(1 - q + q e^L): L's density under the mixture (remove) or P (add), times dl/dt
            t = y if remove else -y
            arg = mpmath.exp(t) - 1 + qq
            if arg <= 0:
                return mpmath.mpf(0)
            l = mpmath.log(arg / qq)
            if not -ee < l < ee:
                return mpmath.mpf(0)
            dldt = mpmath.exp(t) / arg
            fq = mpmath.exp((l - ee) / 2) / 4  # (Q: the Laplace loss's density)
            fp = mpmath.exp(-(l + ee) / 2) / 4
            return ((1 - qq) * fp + qq * fq) * dldt if remove else fp * dldt

        _check(loss, exact, ys, U * (np.abs(ys) + 1.0))


def test_a_custom_cdf_without_density_is_left_to_the_coupling_certificate():
    # (its numerical derivative has no error bound: the dominance certificate refuses it, naming pdf, and the default
    # accuracy falls back to the coupling certificate, which reads the CDF only; with a pdf, dominance takes it)
    from scipy.stats import norm
    mu = 0.5
    kw = dict(mean=mu * mu / 2, std=mu)
    cdf = lambda t: norm.cdf(t, mu * mu / 2, mu)  # noqa: E731
    lm = lambda s: s * mu * mu / 2 + s * s * mu * mu / 2  # noqa: E731
    bare = fastpld.CustomCDF(cdf, lm, **kw)
    with pytest.raises(ValueError, match="pdf"):
        fastpld.compose(bare, 100, method="dominance", rel_error=1e-3)
    exact = fastpld.compose(fastpld.Gaussian(1 / mu), 100, method="dominance", rel_error=1e-4).epsilon(1e-5)
    b = fastpld.compose(bare, 100).epsilon(1e-5)
    assert b.lower <= exact.upper and exact.lower <= b.upper
    # (the density is charged its declared accuracy at every point the leaf integrates: at the default 1e-10 over 100
    # copies, as a factor on the curve -- leaves._rel_cap: as total variation it was more than delta_error, refused
    # --; declared as accurate as scipy's normal density is, too)
    pdf = lambda t: norm.pdf(t, mu * mu / 2, mu)  # noqa: E731
    for dense in (fastpld.CustomCDF(cdf, lm, pdf=pdf, **kw),
                  fastpld.CustomCDF(cdf, lm, pdf=pdf, cdf_rel_error=1e-13, **kw)):
        d = fastpld.compose(dense, 100, method="dominance", rel_error=1e-3).epsilon(1e-5)
        assert d.lower <= exact.upper and exact.lower <= d.upper
    # (and declared 1e-6 accurate, a factor past the cap, it is refused: its mass error bounds as total variation)
    with pytest.raises(ValueError, match="mass error bounds"):
        fastpld.compose(fastpld.CustomCDF(cdf, lm, pdf=pdf, cdf_rel_error=1e-6, **kw), 100, method="dominance",
                        rel_error=1e-3)
