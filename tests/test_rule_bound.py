"""The subsampled Gaussian leaf's 5-point rule: its truncation error, proved (docs/dominance.md, "The rules' truncation
error"), against exact integrals at 60 digits.

``rules._psg_truncation`` (numpy) and ``_leaf.psg_rule_bound`` (C) bound the error of the 5-point Gauss-Legendre rule
on a panel of the density by Cauchy's estimate on a stadium about the panel.  Checked here:

* against the rule's exact error (60-digit integrals, the rule with exact nodes and weights) on panels across the
  window -- the bulk, the far tails, the panels a few meshes from the support's end -- for both directions and the
  three integrands (``f``, ``(1 - e^-t) f``, ``e^-t f``);
* the compiled bound against its numpy reference;
* infinite where a panel reaches the support's end, 0 on an empty panel, finite and far below the rules' 1e-13 in
  the bulk (a useful bound);
* charged: the panels' error sums (``ea, en, eb``, added to the errors once the rules are chosen) hold it.
"""
import math

import numpy as np
import pytest

import fastpld
from fastpld import _kernels
from fastpld.dominance import rules

mpmath = pytest.importorskip("mpmath")

CASES = [(5.0, 0.1), (1.0, 0.01), (0.5, 0.001), (2.0, 0.05), (0.8, 0.3)]
needs_leaf = pytest.mark.skipif(not _kernels.have_leaf(), reason="compiled leaf not built")


def _exact_density(sigma, q, remove):
    s, qq = mpmath.mpf(sigma), mpmath.mpf(q)

    def f(y):
        t = y if remove else -y
        arg = mpmath.exp(t) - 1 + qq
        if arg <= 0:
            return mpmath.mpf(0)
        x = s ** 2 * mpmath.log(arg / qq) + mpmath.mpf(1) / 2
        dxdt = s ** 2 * mpmath.exp(t) / arg
        phi = lambda z: mpmath.exp(-z * z / 2) / mpmath.sqrt(2 * mpmath.pi)  # noqa: E731
        if remove:
            return ((1 - qq) * phi(x / s) + qq * phi((x - 1) / s)) / s * dxdt
        return phi(x / s) / s * dxdt
    return f


def _gl5():
    r1 = mpmath.sqrt(5 - 2 * mpmath.sqrt(mpmath.mpf(10) / 7)) / 3
    r2 = mpmath.sqrt(5 + 2 * mpmath.sqrt(mpmath.mpf(10) / 7)) / 3
    wa, wb = (322 + 13 * mpmath.sqrt(70)) / 900, (322 - 13 * mpmath.sqrt(70)) / 900
    return [-r2, -r1, mpmath.mpf(0), r1, r2], [wb, wa, mpmath.mpf(128) / 225, wa, wb]


def _exact_psl_density(loss):
    """The Poisson-subsampled Laplace loss's density at 60 digits from the closed forms (``L`` Laplace-distributed
    between its atoms, through ``Y = +-log(1 - q + q e^L)``), continued past the support's ends: the floating-point
    cell ends may cross them, a position error that is the leaf's own charge (``f(end) 4 u (|y| + w)``), not the
    rule's."""
    remove = loss.direction == "remove"
    qq, C = mpmath.mpf(loss.q), mpmath.exp(-mpmath.mpf(loss.pair.e) / 2) / 4

    def f(y):
        tau = y if remove else -y
        w = (mpmath.exp(tau) - 1 + qq) / qq
        if w <= 0:
            return mpmath.mpf(0)
        dens = (1 - qq) * w ** mpmath.mpf(-1.5) + qq * w ** mpmath.mpf(-0.5) if remove else w ** mpmath.mpf(-1.5)
        return C / qq * mpmath.exp(tau) * dens
    return f


_WEIGHTS = (lambda t: 1, lambda t: -mpmath.expm1(-t), lambda t: mpmath.exp(-t))  # (of int f, int (1 - e^-t) f, ..)


def _rule_errors(g, a, b, t_of=lambda x: x):
    """``|rule - exact|`` of the 5-point rule on ``[a, b]`` for ``g(x) w(t_of(x))``, each weight ``w`` of
    :data:`_WEIGHTS` (``t_of``: the offset ``t`` at the variable ``x``, the identity on the lattice's panels)."""
    x5, w5 = _gl5()
    half = (b - a) / 2
    out = []
    for wt in _WEIGHTS:
        gw = lambda x: g(x) * wt(t_of(x))  # noqa: E731
        exact = mpmath.quad(gw, [a, b])
        out.append(abs(half * sum(w * gw(a + half * (1 + x)) for x, w in zip(x5, w5)) - exact))
    return out


def _panels(sigma, q, remove, n=400, stride=7):
    """Panels of a lattice of ``n`` intervals over the window (every ``stride``-th), and some a few meshes from the
    support's end: ``(loss, lo, c0, c1)``."""
    loss = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()["remove" if remove else "add"]
    a, b = fastpld.discretize.truncation_window(loss, 1e-16)
    h = (b - a) / n
    lo = a + h * np.arange(0, n, stride, dtype=np.float64)
    end = math.log1p(-q) if remove else -math.log1p(-q)
    near = end + (1 if remove else -1) * h * np.array([2.0, 3.0, 5.0, 9.0, 17.0, 40.0])
    lo = np.concatenate([lo, near if remove else near - h])
    s_lo, s_hi = loss.support
    c0 = np.clip(lo, s_lo, s_hi) - lo
    c1 = np.maximum(np.clip(lo + h, s_lo, s_hi) - lo, c0)
    return loss, lo, c0, c1


@pytest.mark.parametrize("remove", [True, False])
@pytest.mark.parametrize("sigma,q", CASES)
def test_rule_bound_holds_against_exact_errors(sigma, q, remove):
    mpmath.mp.dps = 60
    loss, lo, c0, c1 = _panels(sigma, q, remove)
    R = rules._psg_truncation(loss.psg_params, lo, c0, c1)
    f = _exact_density(sigma, q, remove)
    x5, w5 = _gl5()
    checked = 0
    for i in range(lo.size):
        if not (c1[i] > c0[i]) or not np.isfinite(R[0][i]):
            continue
        base, a, b = mpmath.mpf(float(lo[i])), mpmath.mpf(float(c0[i])), mpmath.mpf(float(c1[i]))
        half = (b - a) / 2
        weights = (lambda t: 1, lambda t: -mpmath.expm1(-t), lambda t: mpmath.exp(-t))
        for k, wt in enumerate(weights):
            g = lambda t: f(base + t) * wt(t)  # noqa: E731
            exact = mpmath.quad(g, [a, b])
            rule = half * sum(w * g(a + half * (1 + x)) for x, w in zip(x5, w5))
            err = abs(rule - exact)
            # (1e-290: where the normal factors underflow no relative bound holds; the leaf charges 1e-280 a copy)
            assert err <= mpmath.mpf(float(R[k][i])) + mpmath.mpf(1e-290), (i, k, float(err), float(R[k][i]))
        checked += 1
    assert checked >= 40


@needs_leaf
@pytest.mark.parametrize("remove", [True, False])
@pytest.mark.parametrize("sigma,q", CASES)
def test_rule_bound_compiled_against_reference(sigma, q, remove):
    loss, lo, c0, c1 = _panels(sigma, q, remove)
    Rn = rules._psg_truncation(loss.psg_params, lo, c0, c1)
    Rc = _kernels._leaf.psg_rule_bound(lo, c0, c1, *loss.psg_params)
    for a, b in zip(Rc, Rn):
        assert np.array_equal(np.isfinite(a), np.isfinite(b))
        fin = np.isfinite(a) & (b > 0)
        assert np.all(np.abs(a[fin] - b[fin]) <= 1e-12 * b[fin])
        assert np.array_equal(a == 0, b == 0)


@pytest.mark.parametrize("sigma,q", CASES)
def test_rule_bound_where_it_is_claimed(sigma, q):
    """Infinite on a panel holding the support's end, 0 on an empty one, and on the panels with mass at least 100
    meshes from the end far below the rules' own refinement threshold (1e-13 of the panel's mass).  (Nearer the end
    the bound loosens: the stadium's radius is at most half the distance to the end; the leaves take the rules in
    log-distance there.)"""
    loss, lo, c0, c1 = _panels(sigma, q, True, n=4000, stride=13)
    end = math.log1p(-q)
    h = float(np.max(c1 - c0))
    R = rules._psg_truncation(loss.psg_params, np.array([end - h / 2, end + 10 * h]), np.array([h / 2, 0.0]),
                              np.array([h, 0.0]))
    assert all(math.isinf(r[0]) for r in R)  # (the panel [end, end + h / 2]: its rule is no bound's)
    assert all(r[1] == 0.0 for r in R)
    a = rules._panels(loss, lo, c0, c1)[0]
    Ra = rules._psg_truncation(loss.psg_params, lo, c0, c1)[0]
    far = (a > 1e-9 * a.max()) & (lo + c0 - end >= 100 * h)
    assert far.sum() >= 5
    assert np.all(Ra[far] <= 1e-15 * a[far])


@pytest.mark.parametrize("native", [False, True])
def test_rule_bound_is_charged(native, monkeypatch):
    """The panels' error bounds (``a_err``, ``n_err``, ``b_err``, which the leaf's choices and charges read) are at
    least the proved bound, on both the numpy reference and the compiled panels."""
    if native and not _kernels.have_leaf():
        pytest.skip("compiled leaf not built")
    loss, lo, c0, c1 = _panels(1.0, 0.01, True)
    if not native:
        monkeypatch.setattr(_kernels, "_leaf", None)
    out = rules._panels(loss, lo, c0, c1)
    R = rules._psg_truncation(loss.psg_params, lo, c0, c1)
    for e, r in zip((out[1], out[3], out[5]), R):
        fin = np.isfinite(r)
        assert np.all(e[fin] >= r[fin] * (1 - 1e-12))
        assert np.all(np.isinf(e[~fin]))
    # (panels near the end where the proved bound exceeds the 4-point estimate many times: there it is what is charged)
    half = 0.5 * (c1 - c0)
    est = []
    for x, w in (np.polynomial.legendre.leggauss(5), np.polynomial.legendre.leggauss(4)):
        y = lo[:, None] + c0[:, None] + half[:, None] * (1 + x[None, :])
        est.append((np.asarray(loss.pdf(y.ravel())).reshape(y.shape) * w[None, :]).sum(axis=1) * half)
    heuristic = 10 * np.abs(est[0] - est[1]) + 16 * 2.0 ** -53 * est[0]
    assert np.any(np.isfinite(R[0]) & (R[0] > 100 * heuristic))


def _log_cells(sigma, q, remove):
    """Cells next to the support's end, as the leaf takes its log-distance rules on them: ``(loss, lo, end, d_far)``
    (the end at offset ``end`` from ``lo``, the far edge at distance ``d_far``)."""
    loss = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()["remove" if remove else "add"]
    side = 0 if remove else 1
    s_end = loss.support[side]
    h = np.array([1e-4, 1e-3, 3e-3])
    off = np.array([0.5, 3.0, 17.0, 60.0])  # (the far edge's distance in meshes: the first cell holds the end)
    h, off = np.repeat(h, off.size), np.tile(off, h.size) * np.repeat(h, off.size)
    lo = s_end + off - h if side == 0 else s_end - off
    return loss, lo, s_end - lo, off


@pytest.mark.parametrize("remove", [True, False])
@pytest.mark.parametrize("sigma,q", CASES)
def test_log_rule_bound_holds_against_exact_errors(sigma, q, remove):
    """The log-distance panels' bound against the 5-point rule's exact error in ``u`` (40 digits): the integrand
    ``f(y) d`` times the weights, ``y = lo + end +- d``, ``d = d_far e^u``."""
    # (60 digits: at 40 the N integrand's exact integral next to the end was off by 1e-12 of it -- e^t - 1 + q cancels)
    mpmath.mp.dps = 60
    loss, lo, end, d_far = _log_cells(sigma, q, remove)
    f = _exact_density(sigma, q, remove)
    x5, w5 = _gl5()
    sgn = 1 if remove else -1
    checked = 0
    for i in range(lo.size):
        for bot, top in ((-0.125, 0.0), (-1.0, -0.875), (-10.125, -10.0), (-3.03125, -3.0)):
            R = rules._psg_log_truncation(loss.psg_params, [d_far[i]], [bot], [top], [end[i]])
            if not np.isfinite(R[0][0]):
                continue
            base, e0, df = mpmath.mpf(float(lo[i])), mpmath.mpf(float(end[i])), mpmath.mpf(float(d_far[i]))
            weights = (lambda t: 1, lambda t: -mpmath.expm1(-t), lambda t: mpmath.exp(-t))
            for k, wt in enumerate(weights):
                def g(uu):
                    d = df * mpmath.exp(uu)
                    t = e0 + sgn * d
                    return f(base + t) * d * wt(t)
                a, b = mpmath.mpf(bot), mpmath.mpf(top)
                exact = mpmath.quad(g, [a, b])
                half = (b - a) / 2
                rule = half * sum(w * g(a + half * (1 + x)) for x, w in zip(x5, w5))
                err = abs(rule - exact)
                assert err <= mpmath.mpf(float(R[k][0])) + mpmath.mpf(1e-290), (i, bot, k, float(err), float(R[k][0]))
            checked += 1
    assert checked >= 40


@needs_leaf
@pytest.mark.parametrize("sigma,q", CASES)
def test_log_rule_bound_is_charged(sigma, q, monkeypatch):
    """``_log_panels`` returns the panels' summed bounds (compiled and numpy alike), and the leaf's errors on the
    cells it takes the log-distance rules for hold them."""
    for remove in (True, False):
        loss, lo, end, d_far = _log_cells(sigma, q, remove)
        side = 0 if remove else 1
        ulo = np.full(lo.size, -10.0)
        step = np.full(lo.size, 0.125)
        got = rules._log_panels(loss, lo, end, d_far, ulo, side, step)
        monkeypatch.setattr(_kernels, "_core", None)
        ref = rules._log_panels(loss, lo, end, d_far, ulo, side, step)
        monkeypatch.undo()
        assert len(got) == len(ref) == 4
        for g, r in zip(got[3], ref[3]):
            assert np.array_equal(np.isfinite(g), np.isfinite(r))
            fin = np.isfinite(r) & (r > 0)
            assert fin.any()
            assert np.all(np.abs(g[fin] - r[fin]) <= 1e-12 * r[fin])


@pytest.mark.parametrize("mu,cells", [(0.05, 600), (0.5, 600), (2.0, 600), (8.0, 600), (30.0, 600), (10.0, 160)])
def test_gaussian_rule_bound_holds_against_exact_errors(mu, cells):
    """The Gaussian loss's (``N(mu^2/2, mu^2)``) lattice panels: the bound against the rule's exact error, and charged
    (its panels' errors at least the bound; on some panels many times the 4-point estimate).  Wide ones (``mu``
    10 and 30, panels of 0.04-0.15 ``mu``) take radii past 1, the bound far below the one at radius 1."""
    from fastpld.mechanisms.losses import GaussianLoss
    mpmath.mp.dps = 60
    loss = GaussianLoss(mu)
    m, s = mpmath.mpf(loss.m), mpmath.mpf(loss.s)
    a, b = loss.m - 12 * loss.s, loss.m + 12 * loss.s
    h = (b - a) / cells
    lo = a + h * np.arange(0, 600, 11, dtype=np.float64)
    c0, c1 = np.zeros(lo.size), np.full(lo.size, h)
    R = rules._gauss_truncation(loss.m, loss.s, lo, c0, c1)
    f = lambda y: mpmath.exp(-(y - m) ** 2 / (2 * s * s)) / (s * mpmath.sqrt(2 * mpmath.pi))  # noqa: E731
    x5, w5 = _gl5()
    for i in range(lo.size):
        base, hh = mpmath.mpf(float(lo[i])), mpmath.mpf(float(h))
        for k, wt in enumerate((lambda t: 1, lambda t: -mpmath.expm1(-t), lambda t: mpmath.exp(-t))):
            g = lambda t: f(base + t) * wt(t)  # noqa: E731
            exact = mpmath.quad(g, [0, hh])
            rule = hh / 2 * sum(w * g(hh / 2 * (1 + x)) for x, w in zip(x5, w5))
            assert abs(rule - exact) <= mpmath.mpf(float(R[k][i])) + mpmath.mpf(1e-290), (i, k)
    out = rules._panels(loss, lo, c0, c1)
    for e, r in zip((out[1], out[3], out[5]), R):
        assert np.all(e >= r * (1 - 1e-12))
    assert np.any(R[0] > 1e-300) and np.all(np.isfinite(R[0]))
    if mu >= 10:
        # (the bound at radius 1, where the radius was capped until the thirty-ninth session)
        la, lb = lo - loss.m, lo + h - loss.m
        at1 = rules._cauchy(c1 - c0, 1.0, rules._normal_sup(la, lb, 1.0, loss.s ** 2) / (loss.s * 2.5066282746310002))
        live = R[0] > 1e-300
        ratio = R[0][live] / at1[live]
        assert np.median(ratio) <= 1e-4 and np.all(ratio <= 0.1)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("sigma,q", CASES)
def test_proved_rules_charge_their_bound_alone(sigma, q, native, monkeypatch):
    """Where the truncation error is proved (the subsampled Gaussian's panels, compiled and numpy), a panel's error is
    that bound plus the sum's rounding, ``R + 16 u I5``: no 4-point rule, whose ten-fold disagreement exceeds it on
    panels of the bulk (up to ~40x; so the leaf refines and charges less)."""
    if native and not _kernels.have_leaf():
        pytest.skip("compiled leaf not built")
    if not native:
        monkeypatch.setattr(_kernels, "_leaf", None)
    for remove in (True, False):
        loss, lo, c0, c1 = _panels(sigma, q, remove)
        out = rules._panels(loss, lo, c0, c1)
        R = rules._psg_truncation(loss.psg_params, lo, c0, c1)
        for i5, e, r in zip(out[0:6:2], out[1:6:2], R):
            want = r + 16 * 2.0 ** -53 * i5
            fin = np.isfinite(want)
            np.testing.assert_allclose(e[fin], want[fin], rtol=1e-9, atol=1e-300)
            assert np.all(np.isinf(e[~fin]))
        # (the estimate the 4-point rule would give: larger than the bound on the bulk's panels)
        half = 0.5 * (c1 - c0)
        i4 = sum(w * np.asarray(loss.pdf(lo + c0 + half * (1 + x))) for x, w in zip(*rules._GL4)) * half
        est = 10 * np.abs(out[0] - i4)
        bulk = np.isfinite(R[0]) & (out[0] > 1e-6 * out[0].max())
        assert np.any(est[bulk] > 4 * out[1][bulk])


def test_gaussian_rules_charge_their_bound_alone():
    from fastpld.mechanisms.losses import GaussianLoss
    loss = GaussianLoss(0.5)
    h = 12 * loss.s / 300
    lo = loss.m - 6 * loss.s + h * np.arange(300, dtype=np.float64)
    c0, c1 = np.zeros(lo.size), np.full(lo.size, h)
    out = rules._panels(loss, lo, c0, c1)
    R = rules._gauss_truncation(loss.m, loss.s, lo, c0, c1)
    for i5, e, r in zip(out[0:6:2], out[1:6:2], R):
        np.testing.assert_allclose(e, r + 16 * 2.0 ** -53 * i5, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("native", [False, True])
def test_log_panels_of_a_proved_density_take_no_four_point_rule(native, monkeypatch):
    """The log-distance rules of the subsampled Gaussian return no 4-point sums (``None``: the 5-point rule's bound is
    proved), and the error :func:`rules._rule_error` forms is the bound; a loss without a proof keeps the estimate."""
    if native and not _kernels.have_leaf():
        pytest.skip("compiled leaf not built")
    if not native:
        monkeypatch.setattr(_kernels, "_core", None)
    loss, lo, end, d_far = _log_cells(1.0, 0.01, True)
    ulo, step = np.full(lo.size, -10.0), np.full(lo.size, 0.125)
    five, four, _, R = rules._log_panels(loss, lo, end, d_far, ulo, 0, step)
    assert four == (None, None, None)
    for x5, r in zip(five, R):
        assert np.array_equal(rules._rule_error(x5, None, r), r)
    x5, x4, r = np.array([1.0, 2.0]), np.array([1.0 + 1e-12, 2.0]), np.array([1e-15, 1e-9])
    np.testing.assert_array_equal(rules._rule_error(x5, x4, r), np.maximum(10 * np.abs(x5 - x4), r))


@pytest.mark.parametrize("e0", [0.01, 0.3, 1.0, 4.0])
def test_laplace_rule_bound_holds_against_exact_errors(e0):
    """The Laplace loss's panels (its density ``e^((y - e0) / 2) / 4`` on ``(-e0, e0)``): the bound against the rule's
    exact error at 60 digits for the three integrands, on lattice panels and wide ones across the support, and charged
    alone (``R + 16 u I5``)."""
    from fastpld.mechanisms.losses import LaplaceLoss
    mpmath.mp.dps = 60
    loss = LaplaceLoss(e0)
    checked = 0
    for n in (7, 40):
        h = 2 * e0 / n
        lo = -e0 + h * np.arange(n, dtype=np.float64)
        c0 = np.clip(lo, -e0, e0) - lo
        c1 = np.maximum(np.clip(lo + h, -e0, e0) - lo, c0)
        R = rules._laplace_truncation(e0, lo, c0, c1)
        E = mpmath.mpf(e0)
        f = lambda y: mpmath.exp((y - E) / 2) / 4  # noqa: E731
        for i in range(lo.size):
            base, a, b = mpmath.mpf(float(lo[i])), mpmath.mpf(float(c0[i])), mpmath.mpf(float(c1[i]))
            for k, err in enumerate(_rule_errors(lambda t: f(base + t), a, b)):
                assert err <= mpmath.mpf(float(R[k][i])), (n, i, k, float(err), float(R[k][i]))
                # (and not loose: within a few times the error where the error is above the rounding's scale)
                if err > mpmath.mpf(1e-40):
                    assert mpmath.mpf(float(R[k][i])) <= 4 * err, (n, i, k, float(err), float(R[k][i]))
            checked += 1
        out = rules._panels(loss, lo, c0, c1)
        for i5, e, r in zip(out[0:6:2], out[1:6:2], R):
            np.testing.assert_allclose(e, r + 16 * 2.0 ** -53 * i5, rtol=1e-12, atol=1e-300)
    assert checked == 47


@pytest.mark.parametrize("remove", [True, False])
@pytest.mark.parametrize("scale,q", [(1.0, 0.01), (0.5, 0.1), (3.0, 0.3), (0.2, 0.001)])
def test_subsampled_laplace_rule_bound_holds_against_exact_errors(scale, q, remove):
    """The Poisson-subsampled Laplace loss's panels: the bound against the rule's exact error at 60 digits (its density
    from the closed forms: ``L`` Laplace-distributed between its atoms, through ``Y = +-log(1 - q + q e^L)``), from
    the support's ends to the bulk, and charged alone (``R + 16 u I5``)."""
    mpmath.mp.dps = 60
    loss = fastpld.PoissonSubsampledLaplace(scale, q).privacy_losses()["remove" if remove else "add"]
    f = _exact_psl_density(loss)
    s_lo, s_hi = loss.support
    checked = 0
    for n in (9, 60):
        h = (s_hi - s_lo) / n
        lo = s_lo + h * np.arange(n, dtype=np.float64)
        c0 = np.clip(lo, s_lo, s_hi) - lo
        c1 = np.maximum(np.clip(lo + h, s_lo, s_hi) - lo, c0)
        R = rules._psl_truncation(loss.pair.e, q, remove, lo, c0, c1)
        assert np.all(np.isfinite(R[0]))
        for i in range(0, n, max(1, n // 15)):
            base, a, b = mpmath.mpf(float(lo[i])), mpmath.mpf(float(c0[i])), mpmath.mpf(float(c1[i]))
            for k, err in enumerate(_rule_errors(lambda t: f(base + t), a, b)):
                assert err <= mpmath.mpf(float(R[k][i])) + mpmath.mpf(1e-290), (n, i, k, float(err), float(R[k][i]))
            checked += 1
        out = rules._panels(loss, lo, c0, c1)
        for i5, e, r in zip(out[0:6:2], out[1:6:2], R):
            np.testing.assert_allclose(e, r + 16 * 2.0 ** -53 * i5, rtol=1e-12, atol=1e-300)
    assert checked >= 20


@pytest.mark.parametrize("remove", [True, False])
@pytest.mark.parametrize("scale,q", [(1.0, 0.01), (0.5, 0.1), (0.2, 0.001)])
def test_subsampled_laplace_log_rule_bound_holds_against_exact_errors(scale, q, remove):
    """The Poisson-subsampled Laplace's log-distance panels at both support ends (``u = log(d / d_far)``, ``d`` the
    distance to the end): the bound against the 5-point rule's exact error at 60 digits, and returned by
    ``_log_panels`` with no 4-point sums."""
    mpmath.mp.dps = 60
    loss = fastpld.PoissonSubsampledLaplace(scale, q).privacy_losses()["remove" if remove else "add"]
    f = _exact_psl_density(loss)
    width = loss.support[1] - loss.support[0]
    checked = 0
    for side in (0, 1):
        s_end = loss.support[side]
        for h in (width / 200, width / 20):
            for off in (0.5 * h, 3.0 * h, 40.0 * h):
                lo = s_end + off - h if side == 0 else s_end - off
                end, d_far = s_end - lo, off
                if not (loss.support[0] <= lo + (h if side == 1 else 0) and lo <= loss.support[1]):
                    continue
                for bot, top in ((-0.125, 0.0), (-1.0, -0.875), (-10.125, -10.0)):
                    R = rules._psl_log_truncation(loss.pair.e, q, remove, [d_far], [bot], [top], [end], [lo], side)
                    assert np.isfinite(R[0][0])
                    base, e0_, df = mpmath.mpf(lo), mpmath.mpf(end), mpmath.mpf(d_far)
                    t_of = lambda uu: e0_ + (1 if side == 0 else -1) * df * mpmath.exp(uu)  # noqa: E731
                    g = lambda uu: f(base + t_of(uu)) * df * mpmath.exp(uu)  # noqa: E731
                    for k, err in enumerate(_rule_errors(g, mpmath.mpf(bot), mpmath.mpf(top), t_of)):
                        assert err <= mpmath.mpf(float(R[k][0])) + mpmath.mpf(1e-290), (side, h, off, bot, k,
                                                                                          float(err), float(R[k][0]))
                    checked += 1
        lo = np.array([s_end + 0.5 * width / 200 - width / 200 if side == 0 else s_end - 0.5 * width / 200])
        five, four, _, Rs = rules._log_panels(loss, lo, s_end - lo, np.array([0.5 * width / 200]),
                                              np.array([-10.0]), side, np.array([0.125]))
        assert four == (None, None, None) and all(np.isfinite(r[0]) and r[0] > 0 for r in Rs)
    assert checked >= 12


@pytest.mark.parametrize("base,scale,gamma", [("gauss", 1.0, 0.01), ("gauss", 5.0, 0.1), ("laplace", 0.5, 0.05)])
def test_symmetric_subsampled_rule_bound_holds_against_exact_errors(base, scale, gamma):
    """The samplers' symmetric subsampled loss (the remove loss's density above 0, ``e^y f(-y)`` below): the bound
    against the rule's exact error at 60 digits on both sides, charged alone there; a panel holding the kink at 0 is
    charged the 4-point estimate (no bound: NaN)."""
    from fastpld.mechanisms.subsampled import SymmetricSubsampledLoss
    mpmath.mp.dps = 60
    mech = (fastpld.PoissonSubsampledGaussian(scale, gamma) if base == "gauss"
            else fastpld.PoissonSubsampledLaplace(scale, gamma))
    rem = mech.privacy_losses()["remove"]
    loss = SymmetricSubsampledLoss(rem.pair, gamma)
    f_rem = _exact_density(scale, gamma, True) if base == "gauss" else _exact_psl_density(rem)
    f = lambda y: f_rem(y) if y > 0 else mpmath.exp(y) * f_rem(-y)  # noqa: E731
    hi = min(loss.support[1], 8.0 / scale if base == "gauss" else loss.support[1])
    h = hi / 40
    lo = h * np.arange(-40, 40, 3, dtype=np.float64)
    c0, c1 = np.zeros(lo.size), np.full(lo.size, h)
    R = rules._sym_truncation(rem, lo, c0, c1)
    assert np.all(np.isfinite(R[0]))
    for i in range(lo.size):
        base_, hh = mpmath.mpf(float(lo[i])), mpmath.mpf(float(h))
        for k, err in enumerate(_rule_errors(lambda t: f(base_ + t), mpmath.mpf(0), hh)):
            assert err <= mpmath.mpf(float(R[k][i])) + mpmath.mpf(1e-290), (i, k, float(err), float(R[k][i]))
    out = rules._panels(loss, lo, c0, c1)
    for i5, e, r in zip(out[0:6:2], out[1:6:2], R):
        np.testing.assert_allclose(e, r + 16 * 2.0 ** -53 * i5, rtol=1e-9, atol=1e-300)
    # (a panel holding 0: no bound, and the 4-point estimate charged)
    lo2, c02, c12 = np.array([-h / 2]), np.zeros(1), np.full(1, h)
    assert np.isnan(rules._sym_truncation(rem, lo2, c02, c12)[0][0])
    out2 = rules._panels(loss, lo2, c02, c12)
    half = h / 2
    i4 = sum(w * float(loss.pdf(np.array([lo2[0] + half * (1 + x)]))[0]) for x, w in zip(*rules._GL4)) * half
    assert out2[1][0] >= 10 * abs(out2[0][0] - i4) * (1 - 1e-9) > 0  # (i4 summed here in another order)
