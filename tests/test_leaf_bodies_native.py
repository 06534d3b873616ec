"""The dominance leaves' masses from their cells' integrals in compiled calls without the GIL
(``_dominance.ctd_cells``; ``_dominance.dominated_ratio`` and ``dominated_cells`` around numpy's log) against
the numpy code of ``fastpld.dominance.leaves._ctd_masses`` and ``_dominated_masses`` they replace for losses
without atoms.

The kernels take the same operations in the same order as the numpy code -- numpy's comparisons and NaN rules,
its pairwise summation repeated, and the transcendental functions from numpy itself (the chords' expm1 by size,
the offsets' log: numpy's SIMD versions round differently from libm's) -- so with this numpy every result agrees
bit for bit: the masses, their sums and the charges.  The tests hold them to a stated bound instead (``_TOL``),
which a numpy summing in another order meets and a lost or misplaced term does not.
"""
import math

import numpy as np
import pytest

import fastpld
from fastpld.dominance import leaves as L
from fastpld.dominance import splits as S
from concurrency import each_on_its_own_thread

pytestmark = pytest.mark.skipif(not L._native_masses(), reason="compiled dominance kernels unavailable")


def _reference(monkeypatch, f, *args):
    """``f(*args)`` by the numpy reference (no compiled dominance kernel: the balanced split's numpy too)."""
    with monkeypatch.context() as m:
        m.setattr(S, "_dom", None)
        assert not L._native_masses()
        return f(*args)


_TOL = 1e-13  # relative: sums of up to ~1e5 terms in another order (n u at most); numpy 2.4's order gives 0


def _same(got, ref, what):
    """The kernel's results against the reference's: the same NaNs, infinities and signs, the finite values within
    ``_TOL`` relative (the kernels repeat numpy's pairwise summation and agree with this numpy bit for bit; the bound
    lets a numpy that sums in another order pass, while a missing or misplaced term is far outside it)."""
    assert len(got) == len(ref), what
    for k, (g, r) in enumerate(zip(got, ref)):
        g, r = np.asarray(g), np.asarray(r)
        assert g.shape == r.shape and g.dtype == r.dtype, (what, k)
        if g.dtype.kind != "f":
            assert np.array_equal(g, r), (what, k)
            continue
        assert np.array_equal(np.isnan(g), np.isnan(r)) and np.array_equal(np.isinf(g), np.isinf(r)), (what, k)
        fin = np.isfinite(r)
        assert np.array_equal(g[~fin & ~np.isnan(r)], r[~fin & ~np.isnan(r)]), (what, k)
        assert np.all(np.abs(g[fin] - r[fin]) <= _TOL * np.abs(r[fin])), (what, k)


def _bits(got, ref, what):
    """Bit for bit (the same code on the same machine: threads against serial)."""
    assert len(got) == len(ref), what
    for k, (g, r) in enumerate(zip(got, ref)):
        g, r = np.asarray(g), np.asarray(r)
        assert g.shape == r.shape, (what, k)
        assert np.array_equal(g.view(np.uint64) if g.dtype == np.float64 else g,
                              r.view(np.uint64) if r.dtype == np.float64 else r), (what, k)


def _leaf_inputs(loss, h, tail, cells):
    e, atoms, _, (starts, sizes), integrals, _, _ = L._leaf_data(loss, h, tail, 1 << 22, True, None, cells)
    assert not atoms
    return e, starts, sizes, integrals


_LOSSES = [(s, q) for s in (0.5, 1.0, 5.0) for q in (1e-3, 0.01, 0.1, 0.5)]


@pytest.mark.parametrize("sigma,q", _LOSSES)
def test_leaf_masses_match_the_numpy_reference(sigma, q, monkeypatch):
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        for h, tail in ((2e-3, 1e-12), (3e-4, 1e-14)):
            for cells in (True, False):
                try:
                    e, starts, sizes, (a, a_err, nu, nu_err, b5, b_err) = _leaf_inputs(loss, h, tail, cells)
                except ValueError:
                    continue
                what = (sigma, q, loss.direction, h, cells)
                ctd = (loss, e, [], starts, sizes, a, a_err, nu, nu_err, h, tail)
                _same(L._ctd_masses(*ctd), _reference(monkeypatch, L._ctd_masses, *ctd), what)
                dom = (loss, e, [], starts, sizes, a, a_err, b5, b_err, h)
                _same(L._dominated_masses(*dom), _reference(monkeypatch, L._dominated_masses, *dom), what)


@pytest.mark.parametrize("mech", [fastpld.PoissonSubsampledGaussian(1.0, 0.01),
                                  fastpld.PoissonSubsampledGaussian(5.0, 0.1), fastpld.Gaussian(2.0)])
def test_leaves_match_the_numpy_reference(mech, monkeypatch):
    # the whole leaves (probabilities, offset and every charge) of losses without atoms, as the planner calls them
    for direction, loss in mech.privacy_losses().items():
        for copies in (10, 1000):
            for leaf in (L.ctd_leaf, L.dominated_leaf):
                args = (loss, 1e-3, 1e-13, 1 << 22, True)
                got = leaf(*args, memo={}, copies=copies)
                ref = _reference(monkeypatch, lambda: leaf(*args, memo={}, copies=copies))
                what = (direction, copies, leaf.__name__)
                _same((got.probs,), (ref.probs,), what)
                for name in ("offset", "mesh", "tv", "truncated", "origin", "rel", "mass"):
                    assert getattr(got, name, None) == getattr(ref, name, None), (what, name)


def _random_cells(rng, n, sizes=(1, 4, 32)):
    """A partition of part of the ``n - 1`` lattice intervals into cells of the given sizes, in order."""
    starts, out = [], []
    j = int(rng.integers(0, 3))
    while True:
        z = int(rng.choice(sizes, p=[0.6, 0.25, 0.15]))
        if j + z > n - 1:
            break
        starts.append(j)
        out.append(z)
        j += z + int(rng.random() < 0.1)  # (a gap now and then: the kernels need not cover the lattice)
    return np.array(starts, dtype=np.int64), np.array(out, dtype=np.int64)


@pytest.mark.parametrize("n", [2, 3, 9, 17, 130, 131, 1000, 8193, 20011])
def test_random_cells_match_the_numpy_reference(n, monkeypatch):
    # synthetic integrals: cells without mass, errors above their masses, relative errors either side of
    # _REL_CAP, negligible ones; lattices across numpy's pairwise blocks (8, 128, its 8192-element buffer)
    rng = np.random.default_rng(n)
    h, tail = 1e-3, 1e-12
    e = h * np.arange(-(n // 2), n - n // 2, dtype=np.float64)
    for trial in range(4):
        starts, sizes = _random_cells(rng, n)
        m = starts.size
        a = rng.exponential(size=m) * np.exp(rng.uniform(-40, 0, m)) * (rng.random(m) > 0.05)
        a_err = a * np.exp(rng.uniform(-40, 2, m)) + (rng.random(m) < 0.05) * 1e-30
        nu = a * rng.random(m) * -np.expm1(-h * sizes)
        nu_err = nu * np.exp(rng.uniform(-40, 0, m))
        b5 = a * np.exp(-h * sizes * rng.random(m))
        b_err = b5 * np.exp(rng.uniform(-40, -1, m))
        if trial == 3:
            a_err = np.zeros(m)  # (no total variation at all: an empty sum)
        what = (n, trial)
        ctd = (None, e, [], starts, sizes, a, a_err, nu, nu_err, h, tail)
        got = L._ctd_masses(*ctd)
        _same(got, _reference(monkeypatch, L._ctd_masses, *ctd), what)
        dom = (None, e, [], starts, sizes, a, a_err, b5, b_err, h)
        _same(L._dominated_masses(*dom), _reference(monkeypatch, L._dominated_masses, *dom), what)


def test_the_totals_are_numpys_sums():
    # the kernels' totals are np.sum's (its pairwise blocking repeated), across the block sizes
    rng = np.random.default_rng(7)
    for n in list(range(2, 300)) + [1000, 8191, 8192, 8193, 16400, 70001]:
        p = rng.exponential(size=n) * np.exp(rng.uniform(-30, 0, n))
        starts = np.arange(n - 1, dtype=np.int64)
        sizes = np.ones(n - 1, dtype=np.int64)
        a = p[:-1].copy()
        zero = np.zeros(n - 1)
        probs, total, rel, err = S._dom.ctd_cells(a, a, zero, zero, starts, sizes, n, np.array([0.0, 1.0]),
                                                  L._U, L._REL_CAP, 0.0)
        # every mass stays on its lower point (no upper share); every error is total variation (r = 1).  Equal to
        # numpy's sums bit for bit with this numpy; held to the pairwise bound, (log2 n + 8) u of the sum, so that
        # a numpy summing in another order passes and a lost term of e^-30 relative does not
        tol = (math.log2(n) + 8) * L._U
        assert abs(total - float(np.sum(np.append(a, 0.0)))) <= tol * total, n
        assert abs(err - float(np.sum(a))) <= tol * err and rel == 0.0, n
        np.testing.assert_allclose(probs, np.append(a, 0.0) / total, rtol=2 * tol, atol=0)


def test_negative_zeros_sum_as_numpy_sums_them():
    z = np.array([-0.0, -0.0, -0.0])
    one = np.ones(1, dtype=np.int64)
    _, total, _, err = S._dom.ctd_cells(z[:1], z[:1], z[:1], z[:1], np.zeros(1, dtype=np.int64), one, 2,
                                        np.array([0.0, 1.0]), L._U, L._REL_CAP, 0.0)
    assert np.signbit(err) == np.signbit(np.sum(z[:1])) and np.signbit(total) == np.signbit(np.sum(np.zeros(2)))


@pytest.mark.parametrize("starts,sizes,n,match", [
    ([0, 2], [3, 1], 10, "out of order"),  # overlapping
    ([3, 1], [1, 1], 10, "out of order"),  # not in order
    ([0, 8], [1, 2], 10, "outside"),  # past the last point
    ([-1], [1], 10, "out of order"),
    ([0], [0], 10, "out of order"),  # an empty cell
    ([0], [5], 10, "size without den"),  # no chord denominator for it
])
def test_kernels_refuse_bad_cells(starts, sizes, n, match):
    starts, sizes = np.array(starts, dtype=np.int64), np.array(sizes, dtype=np.int64)
    m = starts.size
    x = np.full(m, 0.1)
    dens = -np.expm1(-1e-3 * np.arange(5))
    with pytest.raises(ValueError, match=match):
        S._dom.ctd_cells(x, x, x, x, starts, sizes, n, dens, L._U, L._REL_CAP, 0.0)
    if "den" not in match:
        with pytest.raises(ValueError, match="out of order|outside"):
            S._dom.dominated_cells(x, x, np.zeros(m), starts, sizes, n, 1e-3, L._U, S._MARGIN, 1.0)
    with pytest.raises(ValueError):
        S._dom.ctd_cells(x, x[:0], x, x, starts, sizes, n, dens, L._U, L._REL_CAP, 0.0)
    with pytest.raises(ValueError):
        S._dom.dominated_ratio(x, x, x[:0], x)


def test_losses_with_atoms_take_the_reference(monkeypatch):
    # (the kernels know no atoms: a loss with them runs the numpy code, whatever is built)
    calls = []
    monkeypatch.setattr(S._dom, "ctd_cells", lambda *a: calls.append(a))
    monkeypatch.setattr(S._dom, "dominated_cells", lambda *a: calls.append(a))
    loss = fastpld.Laplace(1.0).privacy_losses()["remove"]
    assert loss.atoms
    L.ctd_leaf(loss, 1e-2, 1e-12, memo={}, copies=100)
    L.dominated_leaf(loss, 1e-2, 1e-12, memo={}, copies=100)
    assert not calls


def test_leaf_masses_in_threads_match_serial():
    # no state of their own: the two directions' leaves on two threads give the serial results bitwise
    args = []
    for loss in fastpld.PoissonSubsampledGaussian(1.0, 0.01).privacy_losses().values():
        e, starts, sizes, (a, a_err, nu, nu_err, b5, b_err) = _leaf_inputs(loss, 1e-4, 1e-14, True)
        args.append(((loss, e, [], starts, sizes, a, a_err, nu, nu_err, 1e-4, 1e-14),
                     (loss, e, [], starts, sizes, a, a_err, b5, b_err, 1e-4)))
    both = lambda cd: (L._ctd_masses(*cd[0]), L._dominated_masses(*cd[1]))  # noqa: E731
    serial = [both(cd) for cd in args]
    out = each_on_its_own_thread(both, args)
    for s, o in zip(serial, out):
        for x, y in zip(s, o):
            _bits(x, y, "threads")


@pytest.mark.parametrize("sigma,q", [(0.5, 1e-3), (1.0, 0.01), (5.0, 0.1), (2.0, 0.5)])
def test_the_grids_truncation_from_one_evaluation_is_the_three_calls(sigma, q):
    # _continuous_grid evaluates the subsampled Gaussian's CDF, survival function and density at the window's
    # ends in one call: the charge is the one of loss.cdf, loss.sf and loss.pdf called apart, bit for bit
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        for h, tail in ((2e-3, 1e-12), (3e-4, 1e-14)):
            e, _, truncated, _, _ = L._continuous_grid(loss, h, tail, 1 << 22, True)
            out = np.asarray(loss.cdf(e[:1]))[0] + np.asarray(loss.sf(e[-1:]))[0]
            shift = loss.cdf_shift(max(abs(float(e[0])), abs(float(e[-1]))))
            dens = float(np.max(np.asarray(loss.pdf(np.array([e[0], e[-1]])))))
            assert truncated == float(out) * (1 + 8 * loss.cdf_rel_error) + 4 * shift * dens
