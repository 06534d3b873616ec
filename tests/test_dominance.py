"""The dominance certificate (``method="dominance"``) against exact oracles and its own invariants.

Each step is checked for the property the certificate rests on: the connect-the-dots leaf and
split give curves at least the input's everywhere, the balanced split and the dominated leaf at
most; then whole compositions bracket exact curves (Gaussian, pure DP) and a peer at a fine grid.
"""
import math

import numpy as np
import pytest

import fastpld
from fastpld import _fft
from fastpld import dominance as D
from fastpld.mechanisms import GaussianLoss
from fastpld.discretize import GridPMF

from oracles import gaussian_delta, gaussian_epsilon, pure_dp_delta


def curve(values, probs, eps):
    """delta(eps) = sum_{v > eps} p (1 - e^(eps - v)) of a finite PMF (values sorted), for an array of eps
    (suffix sums: linear in the sizes; the values stay within a few units, so e^-v cannot overflow)."""
    v = np.asarray(values, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    e = np.asarray(eps, dtype=np.float64)
    s1 = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
    s2 = np.concatenate([np.cumsum((p * np.exp(-v))[::-1])[::-1], [0.0]])
    j = np.searchsorted(v, e, side="right")  # first value > eps
    return np.maximum(s1[j] - np.exp(e) * s2[j], 0.0)


def random_pmf(rng, n, h, offset):
    p = rng.random(n) ** 3
    p[rng.random(n) < 0.2] = 0.0  # gaps: a sparse support
    p /= p.sum()
    return GridPMF(p, offset, h)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ratio", [2, 4])
def test_splits_bracket_the_input_curve(seed, ratio):
    rng = np.random.default_rng(seed)
    pmf = random_pmf(rng, 200, 0.01, -0.37 + 0.01 * seed)
    eps = np.linspace(-2.5, 2.5, 4001)
    base = curve(pmf.values, pmf.probs, eps)
    up = D.ctd_split(pmf, ratio * 0.01)
    lo = D.dominated_split(pmf, ratio * 0.01)
    c_up = curve(up.values, up.probs, eps)
    c_lo = curve(lo.values, lo.probs * lo.mass, eps)
    tol = 1e-14
    assert np.all(c_up >= base - tol)
    assert np.all(c_lo <= base + lo.tv + tol)
    # both close: second order in the mesh (the gaps make the dominated one lose a little more)
    assert np.max(c_up - base) < 0.01
    assert np.max(base - c_lo) < 0.05
    # the connect-the-dots split keeps the mass and the curve at the coarse points
    assert abs(up.probs.sum() - 1.0) < 1e-14
    on = np.round(pmf.values / (ratio * 0.01)) * ratio * 0.01
    np.testing.assert_allclose(curve(up.values, up.probs, on), curve(pmf.values, pmf.probs, on), atol=1e-14)


def test_balanced_split_loses_nothing_on_a_dense_nested_lattice():
    x = np.arange(-1.0, 1.0, 1e-3)
    p = np.exp(-0.5 * ((x - 0.005) / 0.1) ** 2)
    p /= p.sum()
    for ratio in (2, 4, 8):
        out = D.dominated_split(GridPMF(p, float(x[0]), 1e-3), ratio * 1e-3)
        assert 1 - out.mass < 1e-12 + (ratio * 1e-3) ** 2  # only the ends of the support


def test_compiled_balanced_split_agrees_with_its_reference():
    if D._dom is None:
        pytest.skip("compiled kernel not built")
    rng = np.random.default_rng(3)
    for _ in range(5):
        n = 300
        j = np.sort(rng.integers(0, 60, n))
        s = np.where(rng.random(n) < 0.2, 0.0, rng.random(n) * 0.05)
        order = np.lexsort((s, j))
        j, s = j[order], s[order]
        a = rng.random(n)
        c = D._dom.balanced_split(j.astype(np.int64), s, a, 0.05, 62, D._MARGIN)
        r = D._balanced_split_py(j, s, a, 0.05, 62, D._MARGIN)
        # the same operations in the same order, with libm's expm1/exp against Python's (math
        # module: the same libm here; a few ulps allowed for another one)
        np.testing.assert_allclose(c, r, rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("H", [0.05, 1.0, 3.9])
def test_bounded_balanced_split_is_dominated_and_agrees_with_its_reference(H):
    """The bounded split (a point repays its debt from its own interval only): at most the atoms' curve everywhere,
    no mass lost, the compiled pass the reference's operations."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        n = 300
        j = np.sort(rng.integers(0, 60, n))
        s = np.where(rng.random(n) < 0.2, 0.0, rng.random(n) * H)
        order = np.lexsort((s, j))
        j, s = j[order], s[order]
        a = rng.random(n) * np.exp(-0.1 * j)  # (a decaying tail: where the unbounded split reaches up)
        r = D._balanced_split_py(j, s, a, H, 62, D._MARGIN, True)
        if D._dom is not None:
            c = D._dom.balanced_split(j.astype(np.int64), s, a, H, 62, D._MARGIN, True)
            np.testing.assert_allclose(c, r, rtol=1e-13, atol=1e-300)
        assert abs(r.sum() - a.sum()) <= 1e-12 * a.sum()
        eps = np.linspace(-1.0, 64 * H, 3001)
        y = j * H + s
        assert np.all(curve(np.arange(62) * H, r / a.sum(), eps) <= curve(y, a / a.sum(), eps) + 1e-14)



@pytest.mark.parametrize("H", [0.05, 1.0])
def test_balanced_split_without_the_first_half_is_dominated_and_agrees_with_its_reference(H):
    """``half_first=False`` (the dominated leaf's: its first cell takes no part of its interval, which the next point
    takes as debt): at most the atoms' curve everywhere, no mass lost, the compiled pass the reference's operations,
    and the first interval's atoms no longer on the first point."""
    rng = np.random.default_rng(11)
    for _ in range(5):
        n = 300
        j = np.concatenate(([3, 3], rng.integers(3, 60, n - 2)))
        s = np.concatenate(([0.0, 0.3 * H], np.where(rng.random(n - 2) < 0.2, 0.0, rng.random(n - 2) * H)))
        # (an atom on the first point, as a support end's, and one in the lower half of its interval)
        order = np.lexsort((s, j))
        j, s = j[order], s[order]
        a = rng.random(n)
        r = D._balanced_split_py(j, s, a, H, 62, D._MARGIN, False, False)
        if D._dom is not None:
            c = D._dom.balanced_split(j.astype(np.int64), s, a, H, 62, D._MARGIN, False, False)
            np.testing.assert_allclose(c, r, rtol=1e-13, atol=1e-300)
        assert abs(r.sum() - a.sum()) <= 1e-12 * a.sum()
        eps = np.linspace(-1.0, 64 * H, 3001)
        y = j * H + s
        assert np.all(curve(np.arange(62) * H, r / a.sum(), eps) <= curve(y, a / a.sum(), eps) + 1e-14)
        g0 = int(j[0])
        on_point = a[(j == g0) & (s == 0.0)].sum()
        assert r[g0] == pytest.approx(on_point, rel=1e-12)
        assert D._balanced_split_py(j, s, a, H, 62, D._MARGIN)[g0] > on_point * (1 + 1e-9)  # (the default takes more)

def test_dominated_leaf_of_one_wide_copy_keeps_its_tail():
    """One copy of a Gaussian at mu = 100 on a mesh of 3.9 (the planner's for rel_error 1e-3): the unbounded
    balanced split swept the tail above mu^2 / 2 + 2.8 mu down (its curve 0 at epsilon(1e-5)); the leaf keeps the
    higher-tailed of the two splits, within a factor 2 of the exact curve there and below it."""
    mu = 100.0
    loss = GaussianLoss(mu)
    lo = D.dominated_leaf(loss, 3.9, 1e-13, native=True, copies=1)
    eps = np.array([5276.0, 5400.0, 5425.5])
    exact = gaussian_delta(eps, mu)
    v = lo.values
    got = np.array([np.sum(lo.probs[v > x] * -np.expm1(x - v[v > x])) for x in eps]) * lo.mass
    assert np.all(got <= exact * (1 + 1e-9))
    assert np.all(got >= 0.5 * exact)
    b = fastpld.compose(fastpld.Gaussian(1 / mu), 1).epsilon(1e-5)
    want = gaussian_epsilon(1e-5, mu)
    assert b.lower <= want <= b.upper and b.upper - b.lower <= 1e-3 * want


@pytest.mark.parametrize("mech", [fastpld.Gaussian(2.0), fastpld.Laplace(1.5),
                                  fastpld.PoissonSubsampledGaussian(1.0, 0.05)])
def test_leaves_bracket_the_mechanism(mech):
    for loss in {id(v): v for v in mech.privacy_losses().values()}.values():
        h = 0.01
        up = D.ctd_leaf(loss, h, 1e-14)
        lo = D.dominated_leaf(loss, h, 1e-14)
        eps = np.linspace(-1.0, 3.0, 801)
        if isinstance(mech, fastpld.Gaussian):  # the exact curve of one copy
            t = gaussian_delta(eps, 1.0 / mech.sigma)
            c_up = curve(up.values, up.probs, eps)
            c_lo = curve(lo.values, lo.probs * lo.mass, eps)
            assert np.all(c_up >= t - up.truncated - up.tv - 1e-13)
            assert np.all(c_lo <= t + 1e-13)
        else:
            c_up, c_lo = _bracket_leaves(loss, h, up, lo, eps)
        assert np.max(c_up - c_lo) < 3e-3


def _bracket_leaves(loss, h, up, lo, eps):
    """The exact curve of one copy bracketed by the CDF's masses on a 5e-6 grid (rounded down and up),
    against the two leaves' curves."""
    ys = np.arange(up.offset - h, up.offset + h * up.probs.size, 5e-6)
    w = np.diff(np.asarray(loss.cdf(ys)))
    t_lo, t_hi = curve(ys[:-1], w, eps), curve(ys[1:], w, eps)
    c_up = curve(up.values, up.probs, eps)
    c_lo = curve(lo.values, lo.probs * lo.mass, eps)
    assert np.all(c_up >= t_lo - up.truncated - up.tv - 1e-13)
    assert np.all(c_lo <= t_hi + 1e-13)
    return c_up, c_lo


@pytest.mark.parametrize("sigma,q", [(0.8, 0.001), (1.0, 0.01)])
def test_leaves_with_thin_tail_cells_bracket_the_mechanism(sigma, q, monkeypatch):
    # a small sampling rate: most of the window is a thin tail, merged into cells of _BLOCKS intervals
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        h = 0.002
        e, _, _, _, _ = D._continuous_grid(loss, h, 1e-14, 1 << 24, False)
        starts, sizes = D._tail_blocks(loss, e, h)
        for M in D.leaves._BLOCKS:
            assert (sizes == M).sum() > 3  # the tails are merged (every size is used) ...
        cover = np.zeros(e.size - 1, dtype=int)
        for s0, m in zip(starts, sizes):
            cover[s0:s0 + m] += 1
            assert s0 % m == 0  # (aligned)
        assert (cover == 1).all()  # ... and every interval lies in exactly one cell
        # a merged cell of M intervals holds at most the thin-tail mass _BLOCK_SHARE / M^2 beyond its
        # nearer end, so all of them add at most 2 _BLOCK_SHARE h^2 per size (second order)
        merged = sizes > 1
        m = sizes[merged]
        beyond = np.minimum(np.asarray(loss.sf(e[starts[merged]])), np.asarray(loss.cdf(e[starts[merged] + m])))
        assert np.all(beyond <= D._BLOCK_SHARE / m.astype(float) ** 2)
        mass = np.asarray(loss.cdf(e[starts[merged] + m])) - np.asarray(loss.cdf(e[starts[merged]]))
        assert np.sum(mass * (m * h) ** 2) <= 2 * len(D.leaves._BLOCKS) * D._BLOCK_SHARE * h ** 2
        eps = np.linspace(-0.5, 3.0, 701)
        c_up, c_lo = _bracket_leaves(loss, h, D.ctd_leaf(loss, h, 1e-14), D.dominated_leaf(loss, h, 1e-14), eps)
        # the merged cells cost next to nothing in accuracy: the gap between the leaves as with fine cells only
        monkeypatch.setattr(D.leaves, "_BLOCKS", (1 << 40,))  # (the module that reads it)
        f_up, f_lo = _bracket_leaves(loss, h, D.ctd_leaf(loss, h, 1e-14), D.dominated_leaf(loss, h, 1e-14), eps)
        monkeypatch.undo()
        assert np.max(c_up - c_lo) <= np.max(f_up - f_lo) * 1.001 + 1e-9
        assert np.max(np.abs(c_up - f_up)) < 1e-3 * np.max(f_up - f_lo) + 1e-9
        # and in the composed curves' gap (second order: the chord's gap integrated over epsilon)
        wide = np.linspace(-0.5, 3.0, 14001)
        cu, cl = _bracket_leaves(loss, h, D.ctd_leaf(loss, h, 1e-14), D.dominated_leaf(loss, h, 1e-14), wide)
        monkeypatch.setattr(D.leaves, "_BLOCKS", (1 << 40,))
        fu, fl = _bracket_leaves(loss, h, D.ctd_leaf(loss, h, 1e-14), D.dominated_leaf(loss, h, 1e-14), wide)
        monkeypatch.undo()
        assert np.sum(cu - cl) <= np.sum(fu - fl) * 1.01


@pytest.mark.skipif(D._kernels._leaf is None, reason="compiled leaf kernels not built")
@pytest.mark.parametrize("sigma,q", [(1.0, 0.01), (0.5, 1e-4), (5.0, 0.1)])
def test_compiled_panels_agree_with_their_reference(sigma, q, monkeypatch):
    rng = np.random.default_rng(3)
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        lo = np.sort(rng.uniform(-3.0, 4.0, 400))
        c0 = np.where(rng.random(400) < 0.3, rng.uniform(0, 1e-3, 400), 0.0)
        c1 = c0 + rng.choice([3e-4, 3e-4, 1e-2], 400)
        got = D._panels(loss, lo, c0, c1)
        monkeypatch.setattr(D._kernels, "_core", None)  # the numpy rules
        ref = D._panels(loss, lo, c0, c1)
        monkeypatch.undo()
        for g, r in zip(got[:6:2], ref[:6:2]):  # the integrals: same terms, sums in another order (and
            # the density through another libm's exp/log: a few ulps, amplified by z^2 near z ~ 10)
            np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-300)
        for g, r, i5 in zip(got[1:6:2], ref[1:6:2], ref[:6:2]):  # the error bounds: the same to their rounding
            np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-12 * np.max(i5) + 1e-300)
        for g, r, i5 in zip(got[6:], ref[6:], ref[:6:2]):  # the density's rounding: the same formula, to its rounding
            # (charged where the cell holds mass, ~1e-13 of it)
            assert np.all((r > 0) | (i5 == 0)) and np.all(r <= 1e-11 * np.abs(i5) + 1e-300)
            np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-300)


@pytest.mark.skipif(D._kernels._leaf is None, reason="compiled leaf kernels not built")
@pytest.mark.parametrize("mu,mu_rel", [(0.03, 0.0), (1.0, 0.0), (25.0, 0.0), (11.7, 5 * 2.0 ** -53), (2.0, 1e-11)])
def test_compiled_gaussian_panels_agree_with_their_reference(mu, mu_rel, monkeypatch):
    # (fpld_gauss_panels against rules._panels's numpy code: the Gaussian's density and pdf_error, the merged
    # Gaussians' parameter charge included, and _gauss_truncation's proved bound)
    rng = np.random.default_rng(5)
    loss = GaussianLoss(mu, mu_rel=mu_rel)
    lo = np.sort(loss.m + loss.s * rng.uniform(-38.0, 38.0, 400))
    c0 = np.where(rng.random(400) < 0.3, rng.uniform(0, 1e-3, 400), 0.0) * loss.s
    c1 = c0 + rng.choice([3e-4, 3e-2, 0.3, 2.0], 400) * loss.s
    got = D._panels(loss, lo, c0, c1)
    monkeypatch.setattr(D._kernels, "_core", None)  # the numpy rules
    ref = D._panels(loss, lo, c0, c1)
    monkeypatch.undo()
    for g, r in zip(got[:6:2], ref[:6:2]):  # the integrals: libm's exp against numpy's, amplified by z^2 / 2
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-300)
    for g, r in zip(got[1:6:2], ref[1:6:2]):  # the proved bounds: the same operations
        assert np.array_equal(np.isinf(g), np.isinf(r))
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-300)
    for g, r in zip(got[6:], ref[6:]):  # the density's rounding: the same formula, to its rounding
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-300)


@pytest.mark.skipif(D._kernels._leaf is None, reason="compiled leaf kernels not built")
@pytest.mark.parametrize("scale,q", [(1.0, 0.05), (2.0, 0.01), (0.1, 0.3), (8.0, 1e-3)])
def test_compiled_subsampled_laplace_panels_agree_with_their_reference(scale, q, monkeypatch):
    # (fpld_psl_panels against rules._panels's numpy code: the subsampled Laplace's density and pdf_error and
    # _psl_truncation's proved bound, both directions, panels across the support and past its end)
    rng = np.random.default_rng(7)
    for loss in fastpld.PoissonSubsampledLaplace(scale, q).privacy_losses().values():
        s_lo, s_hi = loss.support
        span = s_hi - s_lo
        lo = np.sort(s_lo + span * rng.uniform(-0.05, 1.0, 400))
        w = span * 10 ** rng.uniform(-5, -0.5, 400)
        c0 = np.where(rng.random(400) < 0.3, rng.uniform(0, 1, 400) * w, 0.0)
        c1 = c0 + w * rng.uniform(0.01, 1.0, 400)
        got = D._panels(loss, lo, c0, c1)
        monkeypatch.setattr(D._kernels, "_core", None)  # the numpy rules
        ref = D._panels(loss, lo, c0, c1)
        monkeypatch.undo()
        for g, r in zip(got, ref):  # (libm's exp, expm1, log and pow against numpy's: a few ulps)
            assert np.array_equal(np.isinf(g), np.isinf(r)) and np.array_equal(g == 0, r == 0)
            np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("backend", [b for b in ("native", "numpy") if b in _fft.available_backends()])
@pytest.mark.parametrize("chain", [True, False])
@pytest.mark.parametrize("sigma,k", [(30.0, 10_000), (2.0, 16), (5.0, 1000)])
def test_gaussian_oracle(backend, sigma, k, chain, monkeypatch):
    # (chain: the Gaussian's k copies composed by the dominance chains, as any mechanism's; else as one copy at
    # mu sqrt(k), composition.api._single_gaussians)
    from fastpld.composition import api
    monkeypatch.setattr(api, "_MERGE_GAUSSIANS", not chain)
    fastpld.clear_caches()  # (the kept answers do not know the flag)
    mu = math.sqrt(k) / sigma
    pld = fastpld.compose(fastpld.Gaussian(sigma), k, eps_error=0.01, method="dominance", backend=backend)
    for delta in (1e-3, 1e-5, 1e-8):
        b = pld.epsilon(delta)
        exact = gaussian_epsilon(delta, mu)
        assert b.lower <= exact <= b.upper
        assert b.upper - b.lower < 0.1 * 0.01 * 2 + 0.05  # within the requested order of accuracy
    for eps in (0.0, 0.5, 2.0):
        b = pld.delta(eps)
        exact = float(gaussian_delta(eps, mu))
        assert b.lower <= exact <= b.upper
    assert pld.eps_spent == 0.0
    assert pld.method.startswith("dominance")


@pytest.mark.parametrize("eps_error", [0.03, 0.01])
def test_planned_mesh_meets_its_eps_error(eps_error):
    # the planner's model of the chains' shifts (leaf_mesh): each bound within about eps_error
    exact = gaussian_epsilon(1e-5, math.sqrt(10_000) / 30.0)
    b = fastpld.compose(fastpld.Gaussian(30.0), 10_000, eps_error=eps_error, method="dominance").epsilon(1e-5)
    assert 0 < b.upper - exact < 1.5 * eps_error
    assert 0 < exact - b.lower < 1.5 * eps_error


@pytest.mark.parametrize("eps0,k", [(0.5, 20), (0.1, 100), (0.9, 7)])
def test_pure_dp_binomial_oracle(eps0, k):
    pld = fastpld.compose(fastpld.PureDP(eps0), k, eps_error=0.01, method="dominance")
    for eps in (0.0, 0.3, 1.0, 2.0):
        b = pld.delta(eps)
        exact = pure_dp_delta(eps, eps0, k)
        assert b.lower <= exact <= b.upper
        # the atoms lie on the lattice: both chains are exact up to round-off
        assert b.upper - b.lower < 1e-9


def test_discrete_leaves_place_their_atoms_exactly():
    # the atoms' lattice points by exact rational arithmetic: on a dyadic mesh of their spacing (the planner's for a
    # discrete loss) every atom is on a point, nothing is split or charged; on a mesh off it by its rounding the
    # dominating leaf splits exactly and the dominated one moves an atom just below a point up onto it, charged the
    # exact distance (not a whole mesh down)
    from fractions import Fraction

    from fastpld.dominance import leaves

    m = fastpld.PureDP(0.1)
    loss = next(iter(m.privacy_losses().values()))
    for upper in (True, False):
        pmf = leaves._discrete_leaf(loss, 0.2 / 8, 1 << 20, upper)
        assert pmf.tv == 0.0 and np.count_nonzero(pmf.probs) == 2
        assert pmf.origin is not None and Fraction(pmf.origin[0], 2 ** pmf.origin[1]) == Fraction(-0.1)
        nz = np.flatnonzero(pmf.probs)
        assert [Fraction(-0.1) + int(j) * Fraction(0.2 / 8) for j in nz] == [Fraction(-0.1), Fraction(0.1)]
    eps = np.linspace(-0.2, 0.2, 41)
    exact = curve(np.array([-0.1, 0.1]), np.asarray(loss.probs, dtype=np.float64), eps)
    for n in (3, 7):  # (n meshes between the atoms, in floats not exactly: the lattice runs through the heavier
        # atom, 0.1, and its point n below lies within rounding above -0.1 for one of these, below it for the other)
        h = 0.2 / n
        bottom = Fraction(0.1) - n * Fraction(h)
        up = leaves._discrete_leaf(loss, h, 1 << 20, True)
        lo = leaves._discrete_leaf(loss, h, 1 << 20, False)
        assert Fraction(up.origin[0], 2 ** up.origin[1]) + (up.probs.size - 2) * Fraction(h) == Fraction(0.1)
        assert up.tv == 0.0
        assert np.all(curve(up.values, up.probs, eps) >= exact - 1e-16)
        nz = np.flatnonzero(lo.probs)
        assert nz.size == 2 and nz[1] - nz[0] == n  # (never a whole mesh down)
        if bottom > Fraction(-0.1):  # (the bottom atom just below its point: moved up, charged the exact distance)
            assert 0.0 < lo.tv <= float(bottom - Fraction(-0.1)) * (1 + 1e-12)
        else:  # (on it or just above it: moved down onto it, free)
            assert lo.tv == 0.0
        assert np.all(curve(lo.values, lo.probs * lo.mass, eps) <= exact + lo.tv + 1e-16)


def test_discrete_leaves_of_many_atoms_place_them_in_floating_point():
    # (past _EXACT_ATOMS the exact placement's Python loop would cost ~10 us an atom: the float placement, charged)
    from fastpld.dominance import atoms, leaves

    rng = np.random.default_rng(2)
    pq, pp = rng.random(300), rng.random(300)  # a random pair's loss log(Q/P) under Q
    pq, pp = pq / pq.sum(), pp / pp.sum()
    m = fastpld.CustomPMF(np.log(pq / pp), pq)
    loss = next(iter(m.privacy_losses().values()))
    v = np.asarray(loss.values, dtype=np.float64)
    assert v.size > atoms._EXACT_ATOMS
    eps = np.linspace(-1.0, 3.0, 81)
    exact = curve(v, np.asarray(loss.probs, dtype=np.float64), eps)
    up = leaves._discrete_leaf(loss, 0.01, 1 << 20, True)
    lo = leaves._discrete_leaf(loss, 0.01, 1 << 20, False)
    assert up.tv > 0.0 and lo.tv > 0.0
    assert np.all(curve(up.values, up.probs, eps) + up.tv >= exact - 1e-15)
    assert np.all(curve(lo.values, lo.probs * lo.mass, eps) <= exact + lo.tv + 1e-15)


@pytest.mark.parametrize("mech,k", [(fastpld.PureDP(0.01), 10_000_000), (fastpld.RandomizedResponse(0.5, 4), 10_000_000),
                                    (fastpld.PureDP(0.1), 10_000_000), (fastpld.PureDP(1.0), 100_000)])
def test_discrete_mechanisms_at_large_k_by_dominance(mech, k):
    # once refused at k = 1e7 (the leaf charged 8 u (|v| + |lat| + h) per copy for its float positions,
    # the dominated splits ~16 u |v| of the mass on lattice points), answered by the coupling certificate at 1e5
    # (PureDP(1): width 0.05%); now exact positions and dyadic meshes: within 1e-6 relative
    pld = fastpld.compose(mech, k)
    assert pld.method.startswith("dominance") and pld.delta_spent <= pld.delta_error
    b = pld.epsilon(1e-5)
    assert b.upper - b.lower <= 1e-6 * b.upper
    if isinstance(mech, fastpld.PureDP) and k <= 100_000:
        for eps in (0.5 * b.lower, b.lower, b.upper):
            d, exact = pld.delta(eps), pure_dp_delta(eps, 1.0, k)
            assert d.lower <= exact * (1 + 1e-9) and exact <= d.upper * (1 + 1e-9)


def test_subsampled_gaussian_brackets_a_peer_at_a_fine_grid():
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pldlib
    q, sigma, k = 0.02, 1.0, 300
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(sigma, q), k, eps_error=0.003, method="dominance")
    b = pld.epsilon(1e-5)
    peer = {}
    for pess in (True, False):
        one = pldlib.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=1e-4,
                                             pessimistic_estimate=pess)
        peer[pess] = one.self_compose(k).get_epsilon_for_delta(1e-5)
    # dp_accounting's pessimistic PLD is an upper bound and its optimistic one a lower bound
    assert b.lower <= peer[True] + 1e-9
    assert b.upper >= peer[False] - 1e-9
    assert b.upper - b.lower < 0.01 * b.upper


def test_heterogeneous_gaussians_oracle():
    events = [(fastpld.Gaussian(3.0), 50), (fastpld.Gaussian(5.0), 200), (fastpld.Gaussian(9.0), 7)]
    mu = math.sqrt(sum(c / s**2 for (g, c), s in zip(events, (3.0, 5.0, 9.0))))
    pld = fastpld.compose(events, eps_error=0.01, method="dominance")
    for delta in (1e-4, 1e-7):
        b = pld.epsilon(delta)
        assert b.lower <= gaussian_epsilon(delta, mu) <= b.upper


def test_asymmetric_mechanism_takes_both_directions():
    pld = fastpld.compose(fastpld.PoissonSubsampledLaplace(1.0, 0.1), 200, eps_error=0.01, method="dominance")
    assert set(pld.directions) == {"remove", "add"}
    b = pld.epsilon(1e-6)
    assert 0 < b.lower <= b.upper
    ref = fastpld.compose(fastpld.PoissonSubsampledLaplace(1.0, 0.1), 200, eps_error=0.01).epsilon(1e-6)
    # two independent certificates: their intervals must overlap
    assert b.lower <= ref.upper and ref.lower <= b.upper


def test_bad_queries_are_refused():
    pld = fastpld.compose(fastpld.Gaussian(2.0), 10, eps_error=0.05, method="dominance")
    with pytest.raises(ValueError, match="delta"):
        pld.epsilon(0.0)
    with pytest.raises(ValueError, match="epsilon"):
        pld.delta(-1.0)
    with pytest.raises(ValueError, match="too small"):
        pld.epsilon(1e-300)


@pytest.mark.parametrize("chain", [True, False])
@pytest.mark.parametrize("sigma,k", [(2.0, 100), (30.0, 10_000)])
def test_relative_accuracy_against_the_gaussian_oracle(sigma, k, chain, monkeypatch):
    from fastpld.composition import api
    monkeypatch.setattr(api, "_MERGE_GAUSSIANS", not chain)
    fastpld.clear_caches()  # (the kept answers do not know the flag)
    mu = math.sqrt(k) / sigma
    pld = fastpld.compose(fastpld.Gaussian(sigma), k, rel_error=1e-3)
    assert pld.method.startswith("dominance") and pld.rel_error == 1e-3
    assert pld.directions["remove"].stages[0].instances == (k if chain else 1)
    for delta, slack in ((1e-3, 1.0), (1e-5, 1.0), (1e-7, 1.5)):  # (at 1e-7 the delta charges widen it too)
        b = pld.epsilon(delta)
        exact = gaussian_epsilon(delta, mu)
        assert b.lower <= exact <= b.upper
        assert b.upper - b.lower <= slack * 1e-3 * exact


def test_relative_accuracy_arguments_are_checked():
    g = fastpld.Gaussian(1.0)
    for bad in (0.0, -1e-3, 1.0, float("nan"), "x"):
        with pytest.raises(ValueError, match="rel_error"):
            fastpld.compose(g, 10, rel_error=bad)
    with pytest.raises(ValueError, match="not both"):
        fastpld.compose(g, 10, rel_error=1e-3, eps_error=0.1)
    with pytest.raises(ValueError, match="rel_error"):
        fastpld.compose(g, 10, rel_error=1e-3, method="glw")


def test_hypothesis_testing_views_are_certified():
    # (the views of a dominance composition come from a coupling composition of the same events:
    # before, they read the dominating chain alone as if it were a coupled PMF, and collapsed)
    mu = math.sqrt(10) / 2.0
    pld = fastpld.compose(fastpld.Gaussian(2.0), 10, eps_error=0.01, delta_error=1e-12, method="dominance")
    r = pld.renyi(np.array([2.0, 4.0]))
    ex = np.array([2.0, 4.0]) * mu ** 2 / 2
    assert np.all(r.lower <= ex) and np.all(ex <= r.upper)
    from fastpld.fdp import gaussian_tradeoff
    alpha = np.array([1e-4, 0.01, 0.3])
    t = pld.tradeoff(alpha)
    assert np.all(t.lower <= gaussian_tradeoff(mu, alpha)) and np.all(gaussian_tradeoff(mu, alpha) <= t.upper)
    g = pld.gdp_mu()
    assert g.mu.lower <= mu * (1 + 1e-9) and mu <= g.mu.upper * (1 + 1e-9)


def _psg_masses(sigma, q, direction, edges):
    """Exact masses of the subsampled Gaussian's loss between consecutive ``edges`` under both
    distributions of its pair (mpmath at 40 digits, from the mechanism's definition: P = N(0, sigma),
    Q = N(1, sigma), L = (2X - 1) / (2 sigma^2); remove: A = (1-q) P + q Q, B = P; add: A = P, B = the
    mixture), independent of the library's CDFs and densities."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    s = mpmath.mpf(sigma)
    qq = mpmath.mpf(q)

    def cdfs(y):  # (A[Y <= y], B[Y <= y])
        y = mpmath.mpf(y)
        arg = mpmath.exp(y if direction == "remove" else -y) - 1 + qq
        if arg <= 0:
            return (mpmath.mpf(0), mpmath.mpf(0)) if direction == "remove" else (mpmath.mpf(1), mpmath.mpf(1))
        x = s ** 2 * mpmath.log(arg / qq) + mpmath.mpf(1) / 2  # the threshold on X
        p, pq = mpmath.ncdf(x / s), mpmath.ncdf((x - 1) / s)
        if direction == "remove":  # Y <= y  <=>  X <= x
            return (1 - qq) * p + qq * pq, p
        return 1 - p, (1 - qq) * (1 - p) + qq * (1 - pq)  # Y <= y  <=>  X >= x

    c = [cdfs(y) for y in edges]
    return ([c[j + 1][0] - c[j][0] for j in range(len(edges) - 1)],
            [c[j + 1][1] - c[j][1] for j in range(len(edges) - 1)])


@pytest.mark.parametrize("sigma,q,h", [(1.0, 0.01, 8e-4), (0.8, 0.001, 2e-3), (2.0, 0.05, 4e-3)])
def test_leaf_integrals_match_closed_forms(sigma, q, h):
    # every cell's masses int f, int e^(lo - y) f and int (1 - e^(lo - y)) f within their error bounds
    # of the exact ones, near the support end (the log-distance rules, their depth chosen from the CDF)
    # and everywhere else (cells of 1, 4 and 32 intervals; errors below _negligible charged as TV)
    tail = 1e-13
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        e, _, _, _, _ = D._continuous_grid(loss, h, tail, 1 << 24, True)
        starts, sizes = D._tail_blocks(loss, e, h)
        lo = e[starts]
        a, a_err, n, n_err, b, b_err = D._integrals(loss, lo, h * sizes, D.leaves._negligible(tail, lo.size))
        A, B = _psg_masses(sigma, q, loss.direction, list(e[starts]) + [e[starts[-1] + sizes[-1]]])
        for j in range(lo.size):
            eb = B[j] * mpmath_exp(lo[j])
            assert abs(a[j] - float(A[j])) <= a_err[j] + 1e-300, (loss.direction, j)
            assert abs(b[j] - float(eb)) <= b_err[j] + 1e-300, (loss.direction, j)
            assert abs(n[j] - float(A[j] - eb)) <= n_err[j] + 1e-300, (loss.direction, j)
        # the rules' bounds are tight where the mass is: relative 1e-10 at most in the cells that hold it
        big = a > 1e-6
        assert np.all(a_err[big] <= 1e-10 * a[big])


def mpmath_exp(x):
    import mpmath
    return mpmath.exp(mpmath.mpf(float(x)))


def test_grouped_plan_takes_small_parts_as_leaves_of_their_blocks():
    from fastpld.composition.plan import _Leaf, _Node, _build_plan, _leaf_parts
    from fastpld.dominance import planner as P
    parts = [(fastpld.Gaussian(1.0 + 0.1 * i).privacy_losses()["remove"], c)
             for i, c in enumerate([3, 100, 100, 5000, 20_000, 7, 100, 64, 1, 900, 30, 100])]
    order = P._merge_order(parts)
    assert sorted(order) == list(range(len(parts)))
    plan = _build_plan(parts, "recursive", 64, merge=4, order=order, direct_max=4096)
    # every part's copies are composed, once
    got = {id(loss): c for loss, c in _leaf_parts(plan.root)}
    assert got == {id(loss): c for loss, c in parts}
    # parts of at most direct_max copies are leaves of a first-level block (multiplicity = their count);
    # the larger one (20,000) has a chain of its own
    blocks = [o for o in plan.order if isinstance(o, _Node) and o.label == "block1"]
    direct = {id(c.loss): m for b in blocks for c, m in b.children if isinstance(c, _Leaf)}
    for loss, c in parts:
        assert (id(loss) in direct) == (c <= 4096)
        if c <= 4096:
            assert direct[id(loss)] == c
    # the pilot's proxy: the same plan shape (groups, instances), each part its block's middle loss
    rep = P._proxy_parts(parts, order, 4)
    assert [c for _, c in rep] == [c for _, c in parts]
    proxy = _build_plan(rep, "recursive", 64, merge=4, order=order, direct_max=4096)
    assert proxy.copies_per_group() == plan.copies_per_group()
    assert sorted(plan.instances.values()) == sorted(proxy.instances.values())
    assert len({id(loss) for loss, _ in rep}) == 3  # one loss per block
    # a block of two kinds of mechanism: one representative of each kind
    mixed = [((fastpld.Gaussian if i % 2 else fastpld.Laplace)(1.0 + i).privacy_losses()["remove"], 10)
             for i in range(8)]
    rep = P._proxy_parts(mixed, list(range(8)), 8)
    assert len({id(loss) for loss, _ in rep}) == 2
    assert all(type(r) is type(m) for (r, _), (m, _) in zip(rep, mixed))


def test_grouped_heterogeneous_gaussians_at_relative_accuracy():
    # many distinct parts (a grouped plan: leaves in blocks, the pilot on a proxy) against the exact
    # curve: a composition of Gaussians is the Gaussian of mu^2 = sum k_i / sigma_i^2
    sigmas = np.linspace(2.0, 12.0, 20)
    counts = [1, 3, 10, 40, 100, 250, 7, 500, 20_000, 2] * 2
    events = [(fastpld.Gaussian(float(s)), c) for s, c in zip(sigmas, counts)]
    mu = math.sqrt(sum(c / s**2 for s, c in zip(sigmas, counts)))
    pld = fastpld.compose(events, rel_error=1e-3)
    assert pld.method.startswith("dominance")
    for delta, slack in ((1e-3, 1.1), (1e-5, 1.1), (1e-7, 1.6)):  # (at 1e-7 the delta charges widen it too)
        b = pld.epsilon(delta)
        exact = gaussian_epsilon(delta, mu)
        assert b.lower <= exact <= b.upper
        assert b.upper - b.lower <= slack * 1e-3 * exact
    for eps in (0.5, 2.0):
        b = pld.delta(eps)
        assert b.lower <= float(gaussian_delta(eps, mu)) <= b.upper


def test_grouped_heterogeneous_subsampled_gaussians_bracket_a_peer(monkeypatch):
    # the schedule, smaller: distinct sampling rates, bracketing dp_accounting's pessimistic
    # (an upper bound) and optimistic (a lower bound) PLDs at a fine grid
    pytest.importorskip("dp_accounting")
    monkeypatch.setattr(D.planner, "_MERGE", 4)  # (a grouped plan of 3 blocks: leaves in blocks, a proxy pilot)
    from dp_accounting.pld import privacy_loss_distribution as pldlib
    qs = np.linspace(0.005, 0.02, 9)
    events = [(fastpld.PoissonSubsampledGaussian(1.0, float(q)), 10) for q in qs]
    b = fastpld.compose(events, rel_error=1e-3, delta_error=1e-9).epsilon(1e-5)
    peer = {}
    for pess in (True, False):
        acc = None
        for q in qs:
            one = pldlib.from_gaussian_mechanism(1.0, sampling_prob=float(q), value_discretization_interval=5e-4,
                                                 pessimistic_estimate=pess).self_compose(10)
            acc = one if acc is None else acc.compose(one)
        peer[pess] = acc.get_epsilon_for_delta(1e-5)
    assert b.lower <= peer[True] + 1e-9
    assert b.upper >= peer[False] - 1e-9
    assert b.upper - b.lower <= 1.1e-3 * b.upper


@pytest.mark.skipif(D._kernels._leaf is None, reason="compiled leaf kernels not built")
@pytest.mark.parametrize("sigma,q", [(1.0, 0.01), (0.5, 1e-4), (5.0, 0.1)])
def test_compiled_log_panels_agree_with_their_reference(sigma, q, monkeypatch):
    # the rules in log-distance at a support end: the compiled kernel against the numpy reference
    rng = np.random.default_rng(5)
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        side = 0 if loss.direction == "remove" else 1
        s_end = loss.support[side]
        h = 10.0 ** rng.uniform(-4, -2, 60)
        off = h * rng.uniform(0.3, 40.0, 60)  # the interval's far edge from the end (it holds it below 1)
        lo = s_end + off - h if side == 0 else s_end - off
        end = s_end - lo
        d_far = off
        ulo = np.where(rng.random(60) < 0.5, -rng.choice([5.0, 10.0, 45.0], 60), -rng.uniform(0.0, 3.0, 60))
        step = rng.choice([0.125, 0.125 / 4], 60)
        got = D.quadrature._log_panels(loss, lo, end, d_far, ulo, side, step)
        monkeypatch.setattr(D._kernels, "_core", None)  # the numpy rules
        ref = D.quadrature._log_panels(loss, lo, end, d_far, ulo, side, step)
        monkeypatch.undo()
        for g3, r3 in zip(got, ref):
            for g, r in zip(g3, r3):
                if r is None:  # (no 4-point rule: the 5-point one's truncation error is proved)
                    assert g is None
                    continue
                np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-300)


def test_leaf_end_charge_without_a_finite_density(monkeypatch):
    # where the density is not finite at a cell's end, the mass its position error moves comes from the CDF
    sigma, q, h, tail = 1.0, 0.01, 8e-4, 1e-13
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        e, _, _, _, _ = D._continuous_grid(loss, h, tail, 1 << 24, True)
        starts, sizes = D._tail_blocks(loss, e, h)
        lo = e[starts]
        tiny = D.leaves._negligible(tail, lo.size)
        # (the numpy code around the compiled rules, which asks loss.pdf at the ends: the fused kernel of the
        # subsampled Gaussian evaluates its density itself, finite everywhere)
        monkeypatch.delattr(D._kernels._leaf, "psg_integrals", raising=False)
        ref = D._integrals(loss, lo, h * sizes, tiny)
        # (infinite at the cells' ends alone: without the compiled core the numpy rules ask the density inside too)
        edges, pdf = np.concatenate([lo, lo + h * sizes]), loss.pdf
        monkeypatch.setattr(loss, "pdf", lambda t: np.where(np.isin(t, edges), np.inf, pdf(t)))
        got = D._integrals(loss, lo, h * sizes, tiny)
        monkeypatch.undo()
        for g, r in zip(got, ref):
            assert np.all(np.isfinite(g))
        np.testing.assert_array_equal(got[0], ref[0])  # the integrals themselves are unchanged
        # the CDF's bound is looser (its rounding, relative cdf_rel_error), still small
        assert np.all(got[1] <= ref[1] + 64 * loss.cdf_rel_error + 1e-300)
        A, _ = _psg_masses(sigma, q, loss.direction, list(lo) + [e[starts[-1] + sizes[-1]]])
        assert all(abs(got[0][j] - float(A[j])) <= got[1][j] for j in range(lo.size))


@pytest.mark.usefixtures("separate_gaussians")
def test_a_misleading_proxy_pilot_is_corrected_by_the_answers_own_width(monkeypatch):
    # the proxy only measures: a misleading proxy (every part replaced by a Gaussian of sigma 0.7, whose
    # epsilon is far larger: a small width relative to it) sends the answer to coarse meshes, whose own
    # width is then measured and rescaled
    sigmas = np.linspace(2.0, 12.0, 20)
    counts = [30] * 20
    events = [(fastpld.Gaussian(float(s)), c) for s, c in zip(sigmas, counts)]
    mu = math.sqrt(sum(c / s**2 for s, c in zip(sigmas, counts)))
    wide = fastpld.Gaussian(0.7).privacy_losses()["remove"]
    monkeypatch.setattr(D.planner, "_proxy_parts", lambda parts, order, merge: [(wide, c) for _, c in parts])
    monkeypatch.setattr(D.planner, "_model_scale", lambda dir_parts: None)  # (smooth losses skip the pilot)
    widths = []
    real = D.planner.DominancePLD._reference_excess
    monkeypatch.setattr(D.planner.DominancePLD, "_reference_excess",
                        lambda self, *a: widths.append(real(self, *a)) or widths[-1])
    pld = fastpld.compose(events, rel_error=1e-3)
    assert len(widths) >= 3 and widths[1] > 1.1  # (the pilot misled the first answer ...)
    assert widths[-1] <= 1.1  # (... which was measured and rescaled)
    for delta in (1e-3, 1e-5):
        b = pld.epsilon(delta)
        exact = gaussian_epsilon(delta, mu)
        assert b.lower <= exact <= b.upper
        assert b.upper - b.lower <= 1.1e-3 * exact


@pytest.mark.parametrize("mech, k", [(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 1000),
                                     (fastpld.PoissonSubsampledGaussian(0.8, 0.001), 20_000),
                                     (fastpld.PoissonSubsampledGaussian(5.0, 0.1), 300),
                                     (fastpld.Gaussian(10.0), 1000)])
def test_smooth_losses_take_the_width_model_without_a_pilot(monkeypatch, mech, k):
    # smooth losses: meshes from the width's model (lambda + 1), one composition that lands at 0.4-0.9 of the
    # width asked (a pilot would show as a second measured width)
    widths = []
    real = D.planner.DominancePLD._reference_excess
    monkeypatch.setattr(D.planner.DominancePLD, "_reference_excess",
                        lambda self, *a: widths.append(real(self, *a)) or widths[-1])
    b = fastpld.compose(mech, k, rel_error=1e-3).epsilon(1e-5)
    assert len(widths) == 1 and 0.3 <= widths[0] <= 0.9
    assert b.upper - b.lower <= 1e-3 * b.lower


def test_a_misleading_width_model_is_corrected_by_the_answers_own_width(monkeypatch):
    # a model 20x optimistic (its first answer far too wide) is measured and rescaled like a pilot
    monkeypatch.setattr(D.planner, "_MODEL_C", D.planner._MODEL_C / 20)
    widths = []
    real = D.planner.DominancePLD._reference_excess
    monkeypatch.setattr(D.planner.DominancePLD, "_reference_excess",
                        lambda self, *a: widths.append(real(self, *a)) or widths[-1])
    mu = math.sqrt(300) / 10.0
    pld = fastpld.compose(fastpld.Gaussian(10.0), 300, rel_error=1e-3)
    assert len(widths) >= 2 and widths[0] > 5 and widths[-1] <= 1.0
    for delta in (1e-3, 1e-5):
        b = pld.epsilon(delta)
        exact = gaussian_epsilon(delta, mu)
        assert b.lower <= exact <= b.upper
        assert b.upper - b.lower <= 1e-3 * exact


def test_the_width_model_leaves_losses_with_atoms_to_the_pilot():
    from fastpld.dominance.planner import _model_scale
    lap = fastpld.Laplace(1.0).privacy_losses()
    gau = fastpld.Gaussian(2.0).privacy_losses()
    assert _model_scale([(n, [(l, 10)]) for n, l in lap.items()]) is None
    assert _model_scale([(n, [(fastpld.PureDP(1.0).privacy_losses()[n], 3)]) for n in ("remove", "add")]) is None
    s = _model_scale([(n, [(l, 10)]) for n, l in gau.items()])
    assert s is not None and 0 < s < 1


@pytest.mark.skipif(D.splits._dom is None, reason="the compiled core is not built")
@pytest.mark.parametrize("ratio", [2, 8, 64])
def test_compiled_splits_agree_with_their_references(ratio):
    # connect-the-dots: the same masses up to the rounding each result claims (res.rel, every entry a
    # sum of at most ratio + 2 products, summed in another order); the dominated split's cells: the same
    rng = np.random.default_rng(ratio)
    h = 3.7e-4
    for offset in (-0.1234567, 0.0, 2.5 * h, 7 * h * ratio):
        p = rng.random(5000) ** 6
        p[rng.random(p.size) < 0.2] = 0.0
        p /= p.sum()
        pmf = GridPMF(p, offset, h)
        a, b = D.ctd_split(pmf, ratio * h, True), D.ctd_split(pmf, ratio * h, False)
        assert a.offset == b.offset and a.probs.size == b.probs.size and a.rel == b.rel
        assert np.all(np.abs(a.probs - b.probs) <= 2 * a.rel * b.probs + 1e-300)
        c, d = D.dominated_split(pmf, ratio * h, True), D.dominated_split(pmf, ratio * h, False)
        # (the charge tv summed in another order: within its rounding)
        assert c.offset == d.offset and abs(c.tv - d.tv) <= 1e-12 * d.tv and c.mass == d.mass
        np.testing.assert_array_equal(c.probs, d.probs)


@pytest.mark.parametrize("native", [True, False])
def test_exact_connect_the_dots_shares(native):
    # atoms on a lattice nested in the target (exact origins: every split of a chain of a loss without atoms) take
    # their shares from their exact offsets r hin: each at least the exact connect-the-dots share (so the result
    # dominates the input) and at most 12 u above it (mpmath at 50 digits), and the result sends no more mass up
    # than the float path, which covers the positions' rounding; the compiled kernel and its numpy reference within
    # the rounding the result claims
    import mpmath
    from fastpld.composition.roundoff import _dyadic_sum, _rounded
    if native and D.splits._dom is None:
        pytest.skip("the compiled core is not built")
    rng = np.random.default_rng(17)
    u = np.finfo(np.float64).eps / 2
    mpmath.mp.dps = 50
    for hin, R, n0, n in [(2.0 ** -11, 4, -1143, 2560), (3 * 2.0 ** -12, 7, 4081, 900), (2.0 ** -9, 1, -5, 40),
                          (5 * 2.0 ** -14, 64, 0, 3000), (2.0 ** -8, 3, -700001, 500)]:
        p = rng.random(n) ** 4
        p[rng.random(n) < 0.1] = 0.0
        p /= p.sum()
        origin = _dyadic_sum([(n0, hin)])
        pmf = GridPMF(p, _rounded(origin, 1), hin, origin=origin)
        mesh = R * hin
        got = D.splits._ctd_split(pmf, mesh, native)
        assert got.offset == _rounded(_dyadic_sum([(n0 // R, mesh)]), 1)
        ref = D.splits._ctd_split_exact_py(p, n0, R, hin, mesh)[0]
        np.testing.assert_allclose(got.probs, ref, rtol=2 * got.rel, atol=1e-300)
        # the shares sent up: at least the exact ones, at most 12 u more
        r_idx = (n0 + np.arange(n)) % R
        w_got = np.minimum(-np.expm1(-(np.arange(R) * hin)) / -math.expm1(-mesh) + 10 * u, 1.0)
        w_got[0] = 0.0
        den = -mpmath.expm1(-mpmath.mpf(mesh))
        for r in sorted(set(r_idx.tolist())):
            w = float(-mpmath.expm1(-r * mpmath.mpf(hin)) / den)
            assert w <= w_got[r] <= w + 12 * u
        # atoms on lattice points stay there, whole (their points' masses are theirs plus the shares from below)
        on = (r_idx == 0) & (p > 0)
        assert on.any() or R == 1 or n0 % R
        # against the float path (no exact origin): at most as much mass at or above every point (its lattice may
        # start a point lower)
        flt = D.splits._ctd_split(GridPMF(p, pmf.offset, hin), mesh, native)
        k = int(round((got.offset - flt.offset) / mesh))
        a, b = np.cumsum(got.probs[::-1])[::-1], np.cumsum(flt.probs[::-1])[::-1]
        for j in range(got.probs.size):
            if 0 <= j + k < b.size:
                assert a[j] <= b[j + k] * (1 + 1e-12) + 1e-300


def test_the_dominated_chain_keeps_its_mass_at_a_support_end():
    # the subsampled Gaussian's add loss piles its mass at its top end -log(1 - q), where the balanced split's
    # last cells cannot balance: moved down keeping their A-mass (fact 4) they lose none (keeping the B-mass they
    # lost 6e-4 per copy here, 45% over the 1000 copies); the bounds stay on their sides of the exact curve
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 1000, eps_error=0.02, method="dominance")
    for d in pld.lower_directions.values():
        assert -1e-5 < d.certificate["log_mass"] <= 0.0
    # the balanced split of atoms whose top cell cannot balance: the output holds all the mass but rounding
    rng = np.random.default_rng(5)
    s = np.sort(rng.random(200)) * 0.01
    j = np.zeros(200, dtype=np.int64)
    a = rng.random(200)
    out = D._balanced_split(j, s, a, 0.01, 2, cell=200)
    assert abs(out.sum() - a.sum()) <= 1e-12 * a.sum()
    assert out[1] == 0.0  # (nothing above the atoms: everything stays at the lower point)


def test_plan_work_counts_the_plans_chain_builds():
    # _plan_work mirrors composition.plan._chain without building plans (89 candidate arities per k): its
    # count of convolving nodes and re-discretisations must stay that of the plan actually built
    from fastpld.composition.plan import _Node, _build_plan
    loss = fastpld.Gaussian(1.0).privacy_losses()["remove"]

    def built(k, a):
        plan = _build_plan([(loss, k)], "recursive", a)
        conv = red = 0
        for o in plan.order:
            if isinstance(o, _Node):
                conv += not (len(o.children) == 1 and o.children[0][1] == 1)
                red += sum(1 for c, _ in o.children if c.group != o.group)
        return conv + 0.5 * red

    for k in (40, 41, 99, 128, 1600, 1601, 4096, 7919, 10_000, 123_457, 10**6, 2**20 + 3):
        for a in (40, 50, 64, 100, 107, 125, 128):
            if a <= k:  # (the arities it is asked about)
                assert D.planner._plan_work(k, a) == built(k, a), (k, a)


def _eager_and_deferred(monkeypatch, mech, k, **kw):
    """The same composition with every dominated chain run at once, and with the add direction's deferred."""
    from fastpld.dominance import planner

    with monkeypatch.context() as m:
        # (the dominated chain alone deferred: the reversed direction's dominating chain too is tested below)
        m.setattr(planner, "_DEFER_REVERSED", False)
        deferred = fastpld.compose(mech, k, method="dominance", **kw)
    eager_of, coarse_of = planner._eager_direction, planner._coarse_factors
    with monkeypatch.context() as m:
        m.setattr(planner, "_DEFER_REVERSED", False)
        m.setattr(planner, "_eager_direction", lambda *a: None)
        # (the same meshes: the other direction's coarser ones, as the deferred composition chose them)
        m.setattr(planner, "_coarse_factors", lambda dp, _, ee, re: coarse_of(dp, eager_of(dp, ee, re), ee, re))
        eager = fastpld.compose(mech, k, method="dominance", **kw)
    return eager, deferred


def test_a_deferred_dominated_chain_runs_only_where_it_matters_and_changes_no_answer(monkeypatch):
    # the subsampled Gaussian's epsilon comes from the remove direction: the add direction's dominated chain is
    # deferred, and epsilon(delta) at the usual deltas never reads it (its upper bound lies below the remove
    # direction's lower one); delta near epsilon 0 does (both directions' curves meet at epsilon 0: the total
    # variation), and runs it once.  Every answer is bitwise the eager composition's, before and after.
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    eager, pld = _eager_and_deferred(monkeypatch, m, 300, rel_error=1e-3)
    lower = pld.lower_directions
    assert lower.deferred == {"add"} and not lower.ready("add") and eager.lower_directions.deferred == set()
    assert lower._todo["add"].memo is None  # (the composition's leaves are not kept alive by the answer)
    # where the width asked is wide against the directions' gap, the reference widths would read both lower
    # chains: both run at once (measured: deferred and then needed, the chain ran after the others, 1.2x the time)
    wide = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.001), 10 ** 6, eps_error=0.1, method="dominance")
    assert wide.lower_directions.deferred == set()
    deltas = np.array([1e-3, 1e-5, 1e-7, 1e-9, 1.0])
    for q in (lambda p: p.epsilon(deltas), lambda p: p.epsilon(1e-5), lambda p: p.delta(np.array([1.5, 2.0]))):
        a, b = q(pld), q(eager)
        assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)
    assert not lower.ready("add")
    eps = np.linspace(0.0, 3.0, 31)
    a, b = pld.delta(eps), eager.delta(eps)
    assert lower.ready("add")
    assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)
    # the chain that ran late is the eager one, bitwise
    for name in ("remove", "add"):
        assert np.array_equal(pld.lower_directions[name].pmf.probs, eager.lower_directions[name].pmf.probs)
        assert pld.lower_directions[name].delta_spent == eager.lower_directions[name].delta_spent
    # and the hypothesis-testing views read both chains
    alpha = np.array([1e-6, 1e-3, 0.1, 0.5])
    a, b = pld.tradeoff(alpha), eager.tradeoff(alpha)
    assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)


def test_a_deferred_dominated_chain_whose_charges_do_not_fit_retries_at_larger_arities(monkeypatch):
    # a deferred chain runs after the composition has answered: where its charges do not fit delta_error (a lattice
    # alignment the eager chains did not have: PSG(0.5, 1e-4) x 1e7 at arity 250), the larger arities of the list
    # in turn (fewer instances of each node); its curve is a lower bound all the same
    from fastpld.composition.budget import _BudgetError
    from fastpld.dominance import chains, planner

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    eager, _ = _eager_and_deferred(monkeypatch, m, 300, rel_error=1e-3)
    run = chains._run_chain
    refused = []

    def refuse(*args):
        # (the chains run after the composition returned: the deferred one and its retries, without the memo)
        upper, arity, memo = args[6], args[7], args[8]
        if not upper and memo is None and arity in refused_arities:
            refused.append(arity)
            raise _BudgetError("refused (test)")
        return run(*args)

    monkeypatch.setattr(chains, "_run_chain", refuse)
    refused_arities = set()
    pld = fastpld.compose(m, 300, method="dominance", rel_error=1e-3)
    a0 = int(pld.method.split("=")[1].rstrip(")"))
    assert pld.lower_directions.deferred == {"add"} and not pld.lower_directions.ready("add")
    refused_arities.add(a0)
    eps = np.linspace(0.0, 2.0, 21)
    b, e = pld.delta(eps), eager.delta(eps)
    assert refused == [a0]
    lower = pld.lower_directions["add"]
    assert lower.method == f"dominance(arity={[a for a in planner._ARITIES if a > a0][0]})"
    assert lower.delta_spent <= pld.delta_error
    # certified both ways: the intervals overlap, and are about as wide
    assert np.all(b.lower <= e.upper) and np.all(e.lower <= b.upper)
    assert np.all(b.upper - b.lower <= 2 * (e.upper - e.lower) + 1e-12)
    # every retry refused too: the first refusal is the answer's
    refused.clear()
    refused_arities.update(planner._ARITIES)
    pld = fastpld.compose(m, 300, method="dominance", rel_error=1e-3)
    with pytest.raises(ValueError, match="refused"):
        pld.delta(eps)
    assert refused == [a0] + [a for a in planner._ARITIES if a > a0]


def test_a_deferred_dominated_chain_runs_once_under_threads_and_pickles():
    import pickle
    import threading

    from fastpld.dominance import result

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.05)
    fastpld.clear_caches()
    pld = fastpld.compose(m, 200, method="dominance", rel_error=1e-3)
    lower = pld.lower_directions
    assert not lower.ready("add")
    calls = []
    run = lower._todo["add"]
    lower._todo["add"] = lambda: calls.append(1) or run()
    out = [None] * 4
    go = threading.Barrier(4)

    def ask(i):
        go.wait()
        out[i] = pld.delta(np.array([0.0, 0.1]))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1]
    assert all(np.array_equal(o.lower, out[0].lower) and np.array_equal(o.upper, out[0].upper) for o in out)
    # an answer kept by the cache (conftest keeps none) has read-only arrays, a chain run later too, and is
    # counted with its deferred chain's size (as its dominating chain's)
    from fastpld import _answers
    kept = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.04), 200, method="dominance", rel_error=1e-3)
    n = _answers._freeze(kept)
    assert not kept.lower_directions.ready("add") and n > 2 * kept.directions["add"].pmf.probs.nbytes
    assert not kept.lower_directions["add"].pmf.probs.flags.writeable
    # pickling runs every deferred chain first: the copy answers the same
    pld2 = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.06), 200, method="dominance", rel_error=1e-3)
    assert not pld2.lower_directions.ready("add")
    copy = pickle.loads(pickle.dumps(pld2))
    assert isinstance(copy.lower_directions, result._LazyChains) and copy.lower_directions.ready("add")
    assert copy.lower_directions.deferred == {"add"}  # (the same rule for the bounds)
    eps = np.array([0.0, 0.05, 1.0])
    a, b = copy.delta(eps), pld2.delta(eps)
    assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)


def _dominance_at_the_default(m, k, delta, coupling_eps_error):
    """``compose(m, k)`` at the default accuracy is a dominance answer within 0.1%, whose interval overlaps an
    independent certificate's (a coupling plan at ``coupling_eps_error``)."""
    pld = fastpld.compose(m, k)
    assert pld.method.startswith("dominance")
    b = pld.epsilon(delta)
    assert b.upper - b.lower <= 1e-3 * b.lower
    c = fastpld.compose(m, k, method="coupling", eps_error=coupling_eps_error).epsilon(delta)
    assert c.lower <= b.upper and b.lower <= c.upper


def test_the_cell_at_a_support_end_is_integrated_to_its_rules_agreement():
    # a subsampled Gaussian at sigma 2 is a Gaussian of width ~1/2 in u = log(distance to its support end): on the
    # log panels' first width the rules of the cell holding the end disagreed by 2.7e-9 of its mass, charged as
    # total variation per copy (2.3e-8 at q = 1e-4 x 1e6: refused, the default fell back to a coupling plan of
    # width 0.114%); on finer log panels the charge is negligible and the leaf still brackets the mechanism
    from fastpld.dominance import leaves
    m = fastpld.PoissonSubsampledGaussian(2.0, 1e-4)
    loss = m.privacy_losses()["remove"]
    for native in (False, True):
        up = leaves.ctd_leaf(loss, 2.5849e-6, 1e-18, native=native)
        lo = leaves.dominated_leaf(loss, 2.5849e-6, 1e-18, native=native)
        assert up.tv < 1e-20 and lo.tv < 1e-20, (up.tv, lo.tv)
    _dominance_at_the_default(m, 1_000_000, 1e-5, 0.002)


def test_fixed_size_batches_at_the_default_accuracy():
    # the symmetric subsampled loss of fixed-size batches (replace-one) holds most of its mass in an atom at 0:
    # its mass from the CDF's jump was charged 8 tau_F of it as total variation in every copy (5e-11 with the
    # tails' form), refusing 1,000 steps; the default then answered by a coupling plan 0.22% wide.  The atom's
    # mass is exact to its bound (40 digits from the pair's closed forms) and enters as a relative factor.
    mpmath = pytest.importorskip("mpmath")
    from fastpld.dominance import leaves
    m = fastpld.SubsampledWithoutReplacement(fastpld.Gaussian(1.0), 256, 60000)
    loss = m.privacy_losses()["remove"]
    mpmath.mp.dps = 40
    g, v = mpmath.mpf(loss.gamma), mpmath.mpf(loss.pair.v)
    p_pos = 1 - mpmath.ncdf(v / 2 / mpmath.sqrt(v))  # P[L > 0] (L ~ N(-v/2, v) under P, N(v/2, v) under Q)
    q_pos = 1 - mpmath.ncdf(-v / 2 / mpmath.sqrt(v))
    exact = 1 - ((1 - g) * p_pos + g * q_pos) - p_pos  # Z = 0 where the record is not in the batch, or L <= 0
    mass, err = leaves._atom_masses(loss, loss.atoms)
    assert abs(float(exact) - mass[0]) <= err[0] and err[0] <= 1e-10 * mass[0]
    _dominance_at_the_default(m, 1000, 1e-6, 0.01)


def test_three_atoms_on_their_common_quantum_trinomial_oracle():
    # randomized response over 4 categories: losses -eps, 0, eps.  On lattices off their quantum eps the width fell
    # first order in the mesh (x1e4: five compositions, 2.4M-bucket FFTs, 3.8 s); on meshes dividing it the atoms
    # and all their sums lie on lattice points, and both chains are exact up to round-off
    m = fastpld.RandomizedResponse(0.5, 4)
    loss = m.privacy_losses()["remove"]
    v, p = np.asarray(loss.values), np.asarray(loss.probs)
    assert np.allclose(v, [-0.5, 0.0, 0.5])
    k = 200
    pmf = np.array([1.0])
    for _ in range(k):  # (exact k-fold law on the lattice 0.5 Z, float64 sums)
        pmf = np.convolve(pmf, p)
    vals = 0.5 * np.arange(-k, k + 1)
    pld = fastpld.compose(m, k)
    assert pld.method.startswith("dominance")
    for eps in (0.0, 5.0, 20.0, 40.0):
        exact = float(np.sum(pmf * np.maximum(0.0, -np.expm1(eps - vals))))
        b = pld.delta(eps)
        assert b.lower <= exact * (1 + 1e-12) and exact * (1 - 1e-12) <= b.upper
        assert b.upper - b.lower <= 1e-9
    from fastpld.dominance import alignment
    assert alignment._atom_quantum([-0.5, 0.0, 0.5]) == 0.5
    assert alignment._atom_quantum([-0.5, 0.0, 0.7]) == 0.1 or abs(alignment._atom_quantum([-0.5, 0.0, 0.7]) - 0.1) < 1e-15
    assert alignment._atom_quantum([1.0, math.sqrt(2)]) == 0.0


@pytest.mark.parametrize("mech", [fastpld.PoissonSubsampledGaussian(0.8, 1e-3), fastpld.PoissonSubsampledGaussian(1.0, 0.01),
                                  fastpld.PoissonSubsampledGaussian(0.5, 1e-4), fastpld.PoissonSubsampledGaussian(5.0, 0.1),
                                  fastpld.Gaussian(2.0), fastpld.PoissonSubsampledLaplace(1.0, 0.05)])
def test_tail_cells_match_a_full_scan(mech):
    """The leaf's thin-tail cells (the subsampled Gaussian's from the compiled pass) are those of the numpy scan
    of every block edge, and they tile the lattice with cells aligned on multiples of their size (the definition
    the scan's run-by-run starts implement), on leaves of several sizes and losses."""
    from fastpld.dominance import leaves as L
    for loss in mech.privacy_losses().values():
        for h, tail in ((1e-3, 1e-14), (1e-4, 1e-14), (3e-5, 1e-16)):
            try:
                e, _, _, _, _ = L._continuous_grid(loss, h, tail, 1 << 22, True)
            except ValueError:
                continue
            a, b = L._tail_blocks(loss, e, h), L._scan_cells(loss, e)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
            size = np.repeat(b[1], b[1])
            assert size.size == e.size - 1
            np.testing.assert_array_equal(b[0], np.flatnonzero(np.arange(size.size) % size == 0))


def test_dyadic_ratio_against_fractions():
    from fractions import Fraction

    from fastpld.composition.roundoff import _dyadic, _dyadic_ratio, _dyadic_sum

    rng = np.random.default_rng(11)
    for _ in range(3000):
        b = float(rng.random() * 10.0 ** rng.integers(-9, 2)) or 1.0
        k = int(rng.integers(-10 ** 9, 10 ** 9))
        exact_multiple = _dyadic_sum([(k, b)])
        assert _dyadic_ratio(exact_multiple, b) == k
        a = float(rng.standard_normal())
        fa, fb = Fraction(a), Fraction(b)
        r = _dyadic_ratio(a, b)
        assert (r == fa / fb) if (fa / fb).denominator == 1 else r is None
        n, e = _dyadic(a)
        assert Fraction(n, 2 ** e) == fa
    assert _dyadic_ratio(1.0, 0.0) is None


@pytest.mark.parametrize("n0", [-1_000_003, -17, 0, 5, 123_457])
@pytest.mark.parametrize("R", [1, 2, 8, 3])
def test_exact_dominated_prep_agrees_with_its_reference_and_is_exact(n0, R):
    from fractions import Fraction

    from fastpld.dominance import splits

    h = 3.0401e-05
    ref = splits._dominated_prep_exact_py(1000, n0, R, h)
    if D._dom is not None:
        got = D._dom.dominated_prep_exact(1000, n0, R, h)
        for x, y in zip(got, ref):
            np.testing.assert_array_equal(x, y)
    j, s, tv, j0, m = ref
    assert tv == 0.0 and m == int(j[-1]) + 2
    for i in (0, 1, 2, 7, 500, 999):
        # atom (n0 + i) h: on lattice point (j0 + j_i) R h, at most s_i above it, s_i no more than the exact offset
        pos = (n0 + i) * Fraction(h)
        point = (j0 + int(j[i])) * R * Fraction(h)
        assert 0 <= Fraction(float(s[i])) <= pos - point < R * Fraction(h)
        assert (s[i] == 0.0) == (pos == point)


def test_dominated_splits_on_nested_lattices_are_exact_and_charge_nothing():
    # a node's positions, known exactly (its origin), on a lattice nested in the target: atoms on the target's
    # points are known to be there, where the float positions' rounding had them charged (16 u |v| each, per copy)
    from fastpld.composition.roundoff import _dyadic_sum

    rng = np.random.default_rng(5)
    h = 3.0401e-05
    n0 = -233_127  # (-7.087 of a subsampled Gaussian's node, in meshes)
    p = rng.random(4000) ** 4
    p /= p.sum()
    origin = _dyadic_sum([(n0, h)])
    exact = GridPMF(p, float(n0 * h), h, origin=origin)
    floating = GridPMF(p, float(n0 * h), h)
    for ratio in (2, 8):
        a, b = D.dominated_split(exact, ratio * h, True), D.dominated_split(floating, ratio * h, True)
        assert a.tv == 0.0 and b.tv > 0.0
        assert a.origin is not None and a.offset <= float(a.origin[0]) / 2 ** a.origin[1]
        # both dominated by the input, and as tight as each other up to the rounding
        eps = np.linspace(-7.2, -6.9, 301)
        base = curve(exact.values, exact.probs, eps)
        ca, cb = curve(a.values, a.probs * a.mass, eps), curve(b.values, b.probs * b.mass, eps)
        assert np.all(ca <= base + 1e-15) and np.all(cb <= base + b.tv + 1e-15)
        assert np.max(np.abs(ca - cb)) < 1e-9


def test_nodes_on_a_sublattice_run_on_it():
    # a node whose inputs' non-zero entries lie g apart runs on the lattice of mesh g h: the same convolution (its
    # result spread back), a g times shorter transform and none of the sublattice's spectral peaks, whose
    # amplified round-off kept PureDP(0.1) x 1e7 from certifying (2.4e-10 over the first node's 40,000 instances)
    from fastpld.composition import node
    from fastpld.composition.budget import _Budgets
    from fastpld.composition.roundoff import _dyadic_sum

    assert node._common_stride([(GridPMF(np.array([0.5, 0, 0, 0.5]), 0.0, 1.0), 3)]) == 3
    assert node._common_stride([(GridPMF(np.array([0.5, 0, 0.25, 0, 0.25]), 0.0, 1.0), 3),
                                (GridPMF(np.array([1.0]), 0.0, 1.0), 2)]) == 2
    assert node._common_stride([(GridPMF(np.array([0.5, 0.5, 0, 0]), 0.0, 1.0), 3)]) == 1
    h = 0.2 / 64
    p = np.zeros(65)
    p[0], p[64] = 1 / (1 + math.exp(0.1)), 1 - 1 / (1 + math.exp(0.1))
    leaf = GridPMF(p, -0.1, h, origin=_dyadic_sum([(1, -0.1)]))
    budgets = _Budgets(eps=0.01, delta=1e-10, eta=1e-10, trunc=3e-11, wrap=3e-11, fp=4e-11)
    be = fastpld._fft.resolve(None)
    import types
    a, ia = node._run_node(types.SimpleNamespace(children=(), label="x"), [(leaf, 250)], 40_000, budgets, 4, be,
                           1 << 24, 3, 1)
    b, ib = node._run_node(types.SimpleNamespace(children=(), label="x"), [(leaf, 250)], 40_000, budgets, 4, be,
                           1 << 24, 3, 1, stride=False)
    assert ia["stride"] == 64 and ib["N"] >= 64 * ia["N"] // 2 and ia["fp"] < ib["fp"]
    assert a.mesh == b.mesh
    # (their windows differ: align the entries by their exact positions)
    from fastpld.composition.roundoff import _dyadic_ratio
    shift = _dyadic_ratio(_dyadic_sum([(1, a.origin), (-1, b.origin)]), h)
    assert shift is not None
    pa, pb = np.asarray(a.probs, dtype=np.float64), np.asarray(b.probs, dtype=np.float64)
    pa, pb = (pa, pb[shift:]) if shift >= 0 else (pa[-shift:], pb)
    n = min(pa.size, pb.size)
    assert np.all(np.abs(pa[:n] - pb[:n]) <= 4 * (ia["fp"] + ib["fp"]) + 1e-300)
    # the binomial: the entry at -25 + 0.2 j is C(250, j) p1^j p0^(250 - j) (within the node's window)
    from scipy import stats
    j0 = _dyadic_ratio(_dyadic_sum([(1, a.origin), (250, 0.1)]), 64 * h)
    got = np.asarray(a.probs[::64], dtype=np.float64)
    want = stats.binom.pmf(j0 + np.arange(got.size), 250, p[64])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-16)  # (the FFT's round-off is absolute)
    assert np.all(np.asarray(a.probs)[np.arange(a.probs.size) % 64 != 0] == 0)


def test_the_other_direction_takes_coarser_meshes_and_the_answer_does_not_change(monkeypatch):
    # the subsampled Gaussian's add direction lies well below the remove one: its chains run on meshes up to
    # _COARSE_MAX coarser (a cheaper chain), its upper bound stays under the remove direction's lower one, and
    # epsilon(delta) at the usual deltas is bitwise the answer of a composition with every mesh the model's
    from fastpld.dominance import planner

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    pld = fastpld.compose(m, 10_000, rel_error=1e-3)
    with monkeypatch.context() as mp:
        mp.setattr(planner, "_coarse_factors", lambda *a: {})
        plain = fastpld.compose(m, 10_000, rel_error=1e-3)
    events = fastpld.composition.api._normalise_events(m, 10_000)
    dp = list(fastpld.composition.api._direction_parts(events).items())
    eager = planner._eager_direction(dp, 0.003, 1e-3)
    f = planner._coarse_factors(dp, eager, 0.003, 1e-3)
    assert eager == "remove" and set(f) == {"add"} and 1.0 < f["add"] <= planner._COARSE_MAX
    for name, ratio in (("remove", 1.0), ("add", f["add"])):
        got, ref = pld.directions[name].stages[0].mesh, plain.directions[name].stages[0].mesh
        assert got == pytest.approx(ratio * ref, rel=1e-12), name
    deltas = np.array([1e-3, 1e-5, 1e-7, 1e-9])
    a, b = pld.epsilon(deltas), plain.epsilon(deltas)
    assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)
    # the coarser direction's bounds are certified all the same (wider: read where it is the larger one)
    up_add = pld._q["add"].epsilon(deltas)
    assert np.all(up_add < a.lower)
    # nothing coarser without an eager direction, nor where the gap is small against the width asked
    assert planner._coarse_factors(dp, None, 0.003, 1e-3) == {}
    assert planner._coarse_factors(dp, eager, 0.003, 0.1) == {}


def test_coarser_meshes_that_miss_the_width_are_dropped(monkeypatch):
    # a factor far too coarse for the other direction (its upper bound above the eager one's lower bound): the
    # width misses, and the composition is made again with every mesh the model's before any rescaling
    from fastpld.dominance import planner

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    # (the reversed direction's chains composed at once: deferred, they are checked when they run -- below)
    monkeypatch.setattr(planner, "_DEFER_REVERSED", False)
    # (and no group refined to its loss's spread: 40 times the model's mesh, the add leaf's would be, 8x finer, and
    # the width would not miss -- planner.resolved_meshes)
    monkeypatch.setattr(planner, "_RESOLVE_SHARE", math.inf)
    with monkeypatch.context() as mp:
        mp.setattr(planner, "_coarse_factors", lambda *a: {})
        plain = fastpld.compose(m, 300, rel_error=1e-3)
    with monkeypatch.context() as mp:
        mp.setattr(planner, "_coarse_factors", lambda *a: {"add": 40.0})
        pld = fastpld.compose(m, 300, rel_error=1e-3)
    assert pld._reference_excess(pld.eps_error, 1e-3) <= 1.0
    # (kept, the add direction's meshes would be 40 times the model's)
    for name in ("remove", "add"):
        assert pld.directions[name].stages[0].mesh == plain.directions[name].stages[0].mesh, name
    a, b = pld.epsilon(np.array([1e-3, 1e-5, 1e-9])), plain.epsilon(np.array([1e-3, 1e-5, 1e-9]))
    assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)


def test_two_chains_asking_for_one_leaf_at_once_compute_it_once(monkeypatch):
    # a direction's dominating and dominated chains read the same leaf data (grid, cells, integrals) from the
    # composition's memo; on two threads the second asks while the first computes it: it waits for that result
    import threading
    import time

    from fastpld.dominance import leaves as L

    calls = []
    real = L._compute_leaf_data

    def slow(*a, **k):
        calls.append(threading.get_ident())
        time.sleep(0.2)  # (the other thread asks meanwhile)
        return real(*a, **k)

    monkeypatch.setattr(L, "_compute_leaf_data", slow)
    loss = fastpld.PoissonSubsampledGaussian(1.0, 0.01).privacy_losses()["remove"]
    memo, out = {}, [None, None]

    def run(i):
        out[i] = L._leaf_data(loss, 1e-3, 1e-12, 1 << 22, True, memo)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and out[0] is out[1]
    # without a memo (no composition to share it with): computed each time
    L._leaf_data(loss, 1e-3, 1e-12, 1 << 22, True, None)
    assert len(calls) == 2


def test_query_tables_built_with_the_chains_are_the_answers_tables(monkeypatch):
    """The chains run at once build their results' query tables where they ran (on a worker thread when the
    directions are shared out); the answer's tables are those, equal to tables built afresh from its PMFs, and a
    deferred chain's are built when it runs."""
    import threading

    from fastpld.curve import _Query
    from fastpld.dominance import chains, planner

    built = []

    class Recording(_Query):
        def __init__(self, pmf, native=False):
            built.append((id(pmf), threading.get_ident()))
            super().__init__(pmf, native)

    monkeypatch.setattr(chains, "_Query", Recording)
    monkeypatch.setattr(planner, "_PARALLEL_LEAF_BUCKETS", 0)  # (the directions on two threads)
    monkeypatch.setattr(planner, "_PARALLEL_ONE_DIRECTION", 0)  # (... and one direction's two chains)
    for _ in range(10):
        # (a worker runs a direction only where a compute slot is free at that moment -- by design, under load a
        # composition runs on its own thread --, and once, in a CI run's baseline-dispatch step, this composition
        # ran on one thread: composed again until a worker took part)
        built.clear()
        fastpld.clear_caches()
        pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 1000, rel_error=1e-3, threads=2)
        if fastpld.thread_limit() < 2 or len({t for _, t in built}) == 2:
            break
    chains = {**{("up", n): d for n, d in pld.directions.items()},
              **{("lo", n): pld.lower_directions[n] for n in pld.lower_directions if pld.lower_directions.ready(n)}}
    ids = {i for i, _ in built}
    for (side, name), d in chains.items():
        q = (pld._q if side == "up" else pld._ql)[name]
        if name not in pld.directions.deferred and (side == "up" or name not in pld.lower_directions.deferred):
            assert isinstance(q, Recording) and id(d.pmf) in ids  # (the chain's own, not rebuilt after it)
        fresh = _Query(d.pmf, native=q.native)
        for a in ("p", "S1", "T", "dgrid", "neg_dgrid"):
            np.testing.assert_array_equal(getattr(q, a), getattr(fresh, a))
        assert (q.v0, q.h, q.n, q.pad) == (fresh.v0, fresh.h, fresh.n, fresh.pad)
    if fastpld.thread_limit() > 1:
        assert len({t for _, t in built}) == 2  # (the worker built its chains' tables)
    # the answers read them: the same bounds as tables built afresh
    ask = D.DominancePLD.epsilon  # (not the kept answer's memo)
    eps = ask(pld, np.array([1e-3, 1e-6, 1e-9]))
    pld._q = {name: _Query(pld.directions[name].pmf, native=pld._q[name].native) for name in pld.directions}
    np.testing.assert_array_equal(np.array(eps), np.array(ask(pld, np.array([1e-3, 1e-6, 1e-9]))))


@pytest.mark.parametrize("sigma,q", [(1.0, 0.01), (0.7, 0.2), (5.0, 0.1)])
def test_subsampled_directions_are_exact_reverses(sigma, q):
    """The add and remove losses of a Poisson-subsampled Gaussian are one pair with its distributions swapped
    (``SubsampledLoss.reverses``): their curves, integrated from the losses' survival functions, satisfy
    ``delta_add(eps) = 1 - e^eps (1 - delta_remove(-eps))`` and the other way round; a loss does not reverse
    itself, another pair's loss or another sampling rate's."""
    from scipy import integrate

    losses = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()
    rem, add = losses["remove"], losses["add"]
    assert rem.reverses(add) and add.reverses(rem)
    assert not rem.reverses(rem)
    assert not rem.reverses(fastpld.PoissonSubsampledGaussian(sigma, q / 2).privacy_losses()["add"])
    assert not rem.reverses(fastpld.PoissonSubsampledGaussian(1.1 * sigma, q).privacy_losses()["add"])

    def delta(loss, eps):
        # E[(1 - e^(eps - Y))_+], by parts from a = max(eps, the support's low end):
        # (1 - e^(eps - a)) sf(a) + int_a^inf e^(eps - y) sf(y) dy
        lo, hi = loss.support
        a = max(eps, lo)
        sf = lambda y: float(loss.sf(np.array([y]))[0])  # noqa: E731
        f = lambda y: math.exp(eps - y) * sf(y)  # noqa: E731
        body = integrate.quad(f, a, min(hi, a + 60.0), limit=400, epsabs=1e-13, epsrel=1e-11)[0]
        return -math.expm1(eps - a) * sf(a) + body

    for eps in (0.0, 0.05, 0.3, 1.0):
        for x, y in ((rem, add), (add, rem)):
            want = 1 - math.exp(eps) * (1 - delta(x, -eps))
            assert delta(y, eps) == pytest.approx(want, abs=1e-9), (eps, x.direction)


def test_reversed_directions_tighten_delta_near_zero():
    """PSG(1, 0.01) x 1e4: the add direction ran on coarser meshes; near eps = 0 its curve is bounded by the remove
    direction's at -eps, reversed (the total variation is the same for both): delta(0) takes the remove direction's
    upper bound, not the coarser one.  Each reversed upper bound lies above the add direction's own certified lower
    bound (its dominated chain) and the intervals overlap, and the bounds bracket dp_accounting's optimistic and
    pessimistic curves at a fine grid."""
    from fastpld.dominance.result import _rel_factor, _reversal_upper

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    pld = fastpld.compose(m, 10_000, rel_error=1e-3)
    assert pld._reversed()
    eps = np.array([0.0, 0.01, 0.05, 0.2, 1.0, 3.0])
    ask = D.DominancePLD.delta
    b = ask(pld, eps)

    def own(name, x):
        d = pld.directions[name]
        du, pu = pld._q[name].delta(x)
        return np.minimum(1.0, (d.p_inf + (1 - d.p_inf) * np.minimum(1.0, _rel_factor(d) * (du + pu + d.delta_spent)))
                          * (1 + 8 * np.finfo(float).eps / 2))

    up_r, up_a = own("remove", eps), own("add", eps)
    assert up_a[0] > up_r[0] * (1 + 1e-4)  # (the coarser direction's own bound at 0 is the looser one here)
    assert b.upper[0] <= up_r[0] * (1 + 1e-14)  # (... and the answer takes the remove direction's, reversed)
    np.testing.assert_array_less(b.upper, np.maximum(up_r, up_a) * (1 + 1e-15))
    rev = _reversal_upper(own("remove", -eps), eps)
    dl = pld.lower_directions["add"]  # (the add direction's dominated chain: a certified lower bound of its own)
    m_ = math.exp(dl.certificate["log_mass"])
    dd, pl = pld._ql["add"].delta(eps)
    lo_a = m_ * (dd - pl) - dl.delta_spent
    np.testing.assert_array_less(lo_a, rev)
    np.testing.assert_array_less(lo_a, up_a)
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pldlib
    peer = {}
    for pess in (True, False):
        one = pldlib.from_gaussian_mechanism(1.0, sampling_prob=0.01, value_discretization_interval=1e-3,
                                             pessimistic_estimate=pess)
        peer[pess] = np.array([one.self_compose(10_000).get_delta_for_epsilon(float(e)) for e in eps])
    assert np.all(b.lower <= peer[True] + 1e-12) and np.all(b.upper >= peer[False] - 1e-12)


def test_reversed_directions_only_where_every_part_is_a_reversed_pair():
    """The reversal is used only where every event's add pair is its remove pair reversed: Poisson-subsampled
    mechanisms in both orders (alone or in a schedule), not a symmetric mechanism (one loss for both), a sampler
    whose two directions are separate dominating pairs, or a subsampled mechanism restricted to one order."""
    from fastpld.dominance.result import _reversed_directions

    g = fastpld.Gaussian(1.0)
    psg = [(fastpld.PoissonSubsampledGaussian(1.0, q), 10) for q in (0.01, 0.02)]
    assert _reversed_directions(psg)
    assert _reversed_directions([(fastpld.PoissonSubsampled(fastpld.Laplace(1.0), 0.05), 3)])
    assert not _reversed_directions(psg + [(g, 5)])
    assert not _reversed_directions([(fastpld.PoissonSubsampledGaussian(1.0, 0.01, neighboring="remove"), 10)])
    assert not _reversed_directions([(fastpld.TruncatedPoissonSubsampled(g, 0.01, 10_000, 130), 10)])
    assert not _reversed_directions([])


@pytest.mark.parametrize("backend", [b for b in ("native", "numpy") if b in _fft.available_backends()])
@pytest.mark.parametrize("sigma,k,arity", [(4.0, 300, None), (12.0, 4096, 64), (6.0, 500, None)])
def test_a_pass_through_root_is_its_child(backend, sigma, k, arity, separate_gaussians):
    # k = arity^t copies (one node up to _SINGLE_NODE_MAX copies, arity 64 twice at 4096): the root would pass its
    # one child through, re-discretised onto its own coarser lattice for nothing; the plan ends at that child, its
    # leaf mesh and other lattices those of the full plan, and the answer still brackets the Gaussian's
    from fastpld.composition.plan import _Node
    from fastpld.dominance import planner

    loss = fastpld.Gaussian(sigma).privacy_losses()["remove"]
    a = arity or planner._least_work_arity(k)
    plan = planner._plan_at([(loss, k)], None, None, a)
    full = plan.mesh_plan
    assert full.root.label == "root" and full.root.children == [(plan.root, 1)]
    assert isinstance(plan.root, _Node) and plan.n_nodes == full.n_nodes - 1
    h1 = planner.leaf_mesh([(loss, k)], plan, 0.01)
    assert h1 == planner.leaf_mesh([(loss, k)], full, 0.01)
    mp, mf = planner.dominance_meshes(plan, h1), planner.dominance_meshes(full, h1)
    assert set(mp) < set(mf) and all(mp[g] == mf[g] for g in mp)
    kw = {} if arity is None else {"arity": arity}
    pld = fastpld.compose(fastpld.Gaussian(sigma), k, method="dominance", rel_error=1e-3, backend=backend, **kw)
    assert pld.method == f"dominance(arity={a})"
    kinds = [s.kind for s in pld.directions["remove"].stages]
    assert kinds[-1] == f"x{a}" and "root" not in kinds
    mu = math.sqrt(k) / sigma
    for delta in (1e-3, 1e-5, 1e-7, 1e-9):
        b = pld.epsilon(delta)
        exact = gaussian_epsilon(delta, mu)
        assert b.lower <= exact <= b.upper
        if delta >= 1e-7:  # (the widths the planner checks: down to 100 delta_error)
            assert b.upper - b.lower <= 1e-3 * exact
    for eps in (0.0, 1.0, 3.0):
        b = pld.delta(eps)
        assert b.lower <= float(gaussian_delta(eps, mu)) <= b.upper


def test_a_float64_node_whose_charge_exceeds_its_share_is_redone_in_long_double():
    # one x100 node of PSG(0.1, 0.01) (a PLD ~700 wide): its plain float64 charge is predicted at ~4e-12, a quarter
    # of its share of the round-off budget, and measures 1.6e-10, past delta_error; it is composed again in long
    # double (before, float64 only: the composition was refused)
    from fastpld.composition import node as node_mod

    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(0.1, 0.01), 100, method="dominance", rel_error=1e-3)
    st = pld.directions["remove"].stages[-1]
    assert st.kind == "x100" and st.precision == "longdouble"
    assert pld.directions["remove"].delta_spent <= 1e-10
    plain = node_mod._predicted_fp_plain(1, 100, math.ceil(math.log2(st.buckets)))
    assert plain < 1e-11  # (the prediction the float64-only choice rests on)
