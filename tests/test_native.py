"""Native backend (pyFFTW plans + compiled kernels) against the numpy reference.

* every compiled kernel against its numpy fallback (``_kernels._core = None``), in float64
  and long double;
* the backend switch (``set_backend``, ``backend=``, ``FASTPLD_BACKEND``, ``FASTPLD_PURE_PYTHON``);
* both backends on several workloads: the PMFs and estimates agree to 1e-9, the bounds to
  1e-6 (see ``test_backends_agree`` for why not closer), and the exact oracles hold on both;
* compose from many threads at once (per-thread plans) gives the serial answers.
"""
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import fastpld
from fastpld import _fft, _kernels
from oracles import gaussian_delta, pure_dp_delta
from fastpld.composition import api, budget, grids, lattice, node, planner, series

NATIVE = "native" in fastpld.available_backends()
needs_native = pytest.mark.skipif(not NATIVE, reason="compiled core or pyFFTW unavailable")
DTYPES = [np.float64, np.longdouble]


@pytest.fixture
def pure(monkeypatch):
    """Run a block with the numpy fallbacks of the kernels."""
    def run(fn, *args, **kw):
        with monkeypatch.context() as m:
            m.setattr(_kernels, "_core", None)
            return fn(*args, **kw)
    return run


def _close(a, b, rtol, atol=0.0):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------
# kernels: compiled vs numpy fallback
# ---------------------------------------------------------------------------------------
@needs_native
@pytest.mark.parametrize("dt_in", DTYPES)
@pytest.mark.parametrize("dt_out", DTYPES)
@pytest.mark.parametrize("cen,N", [(0, 16), (7, 16), (40, 32), (-3, 10), (3, 5)])
def test_fold_matches(pure, dt_in, dt_out, cen, N):
    rng = np.random.default_rng(cen + N)
    p = rng.random(23).astype(dt_in)
    a = np.full(N, 9.0, dtype=dt_out)
    b = np.full(N, 9.0, dtype=dt_out)
    _kernels.fold(p, cen, a)
    pure(_kernels.fold, p, cen, b)
    assert np.array_equal(a, b)  # same additions in the same order


@needs_native
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset,mesh_in,mesh_out", [(-3.217, 0.01, 0.07), (0.5, 0.013, 0.013 * 5.5), (2.0, 0.1, 0.1)])
def test_split_matches(pure, dtype, offset, mesh_in, mesh_out):
    p = np.random.default_rng(1).random(301).astype(dtype)
    p /= p.sum()
    a, j0a, ta = _kernels.split(p, offset, mesh_in, mesh_out, dtype)
    b, j0b, tb = pure(_kernels.split, p, offset, mesh_in, mesh_out, dtype)
    assert (j0a, ta) == (j0b, tb) and a.dtype == b.dtype == dtype
    assert np.array_equal(a, b)  # the same products, summed per bucket in index order
    # mean preserved: sum_k (j0 + k) h out_k = sum_i v_i p_i
    v = offset + mesh_in * np.arange(p.size)
    mean_out = float(np.dot((j0a + np.arange(a.size)) * mesh_out, a.astype(np.float64)))
    assert mean_out == pytest.approx(float(np.dot(v, p.astype(np.float64))), abs=1e-12)
    # the kernel sums each bucket's atoms in registers: it needs increasing positions (positive meshes)
    with pytest.raises(ValueError, match="split"):
        _kernels._core.split(p, offset, -mesh_in, mesh_out, j0a, np.empty(a.size, dtype), np.empty(a.size, dtype))


@needs_native
@pytest.mark.parametrize("dtype", DTYPES)
def test_dead_frequencies_charged(dtype):
    """Frequencies skipped below e^-T are charged enough: the output moves by less than the extra charge."""
    be = _fft.resolve("native")
    p = np.zeros(25, dtype=dtype)
    p[0], p[-1] = 0.49, 0.5  # Laplace-like: heavy end atoms, spectral peaks away from 0
    p[1:-1] = 0.01 / 23
    ins = [(p, 12, 256)]
    N = 8192
    u = float(np.finfo(dtype).eps) / 2
    out_ref, l1_ref, _ = be.convolve(ins, N, dtype, u)  # T = 800: nothing measurable skipped
    for T in (40.0, 64.0):
        out, l1, _ = be.convolve(ins, N, dtype, u, dead_log=T)
        F = N // 2 + 1
        assert l1 >= l1_ref and l1 - l1_ref <= 1.1 * (1 + 1e-3) * 2 * math.exp(10 - T) * F
        moved = float(np.abs(np.asarray(out, np.float64) - np.asarray(out_ref, np.float64)).sum())
        if T == 40.0:
            assert moved > 0  # skipped values up to e^-40 show in the output
        assert moved <= l1 + l1_ref


@needs_native
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N", [64, 63])
def test_spectrum_power_and_roundoff_match(pure, dtype, N):
    from fastpld.composition.roundoff import _fp_fft_bound
    rng = np.random.default_rng(N)
    cdt = np.clongdouble if dtype is np.longdouble else np.complex128
    specs = []
    for m in (3, 1):
        x = rng.random(N).astype(dtype)
        specs.append((np.fft.rfft(x / x.sum()).astype(cdt), m))
    F = N // 2 + 1
    u = float(np.finfo(dtype).eps) / 2
    g = 12.0 * u * math.ceil(math.log2(N))
    out = {}
    for mode in ("core", "pure"):
        lm, ph, qt = np.empty(F, dtype), np.empty(F, dtype), np.empty(F, np.uint8)
        LR, LRG, PH = np.empty((2, F)), np.empty((2, F)), np.empty((2, F))
        Pc = np.empty(F, cdt)

        def go():
            for c, (X, m) in enumerate(specs):
                _kernels.spectrum_terms(X, m, lm, ph, qt, LR[c], LRG[c], PH[c], g, c == 0)
            return _kernels.power_fp(lm, ph, qt, LR, LRG, PH, [3, 1], g, u, N, Pc)

        sums = go() if mode == "core" else pure(go)
        out[mode] = (Pc.copy(), sums)
    (Pa, sa), (Pb, sb) = out["core"], out["pure"]
    exact = specs[0][0] ** 3 * specs[1][0]
    tol = 64 * float(np.finfo(dtype).eps)
    assert np.max(np.abs(Pa - exact)) <= tol and np.max(np.abs(Pb - exact)) <= tol
    # (libm vs numpy's exp/log, which may be SIMD kernels: each term of the two sums passes <= 3 calls within
    # 4 ulp and ~10 roundings, < 100 u; 1e-12 leaves room, and a dropped or wrong term moves them by percents)
    _close(sa, sb, rtol=1e-12)
    # and the same bound as the reference of compose
    l1, _ = _fp_fft_bound(specs, N, u)
    assert math.sqrt(sa[0]) + g * math.sqrt(sa[1]) == pytest.approx(l1, rel=1e-12, abs=0)


@needs_native
def test_double_kernels_match(pure):
    rng = np.random.default_rng(3)
    p = rng.random(500) ** 8
    p /= p.sum()
    s = np.concatenate([np.geomspace(0.02, 80, 56), -np.geomspace(0.02, 80, 56)]) / 40.0
    Ka, Kb = np.zeros(s.size), np.zeros(s.size)
    _kernels.log_mgf_grid(p, 211.0, s, 7.0, Ka)
    pure(_kernels.log_mgf_grid, p, 211.0, s, 7.0, Kb)
    _close(Ka, Kb, rtol=1e-12, atol=1e-12)  # blocked geometric sums in C: ~1e-14
    _close(_kernels.pmf_moments(p, 211.0), pure(_kernels.pmf_moments, p, 211.0), rtol=1e-12, atol=1e-12)
    for fn, args in [(_kernels.query_tables, (p, math.exp(-0.01))),
                     (_kernels.discounted_rcumsum, (p, 0.97))]:
        for x, y in zip(np.atleast_1d(fn(*args)) if fn is _kernels.discounted_rcumsum else fn(*args),
                        np.atleast_1d(pure(fn, *args)) if fn is _kernels.discounted_rcumsum else pure(fn, *args)):
            _close(x, y, rtol=1e-13, atol=1e-17)
    from scipy import special
    edges = np.linspace(-4, 4, 101)
    F, S = special.ndtr(edges), special.ndtr(-edges)
    split = int(np.searchsorted(F, 0.5))
    qa, ta = _kernels.bucket_masses(F, S, split)
    qb, tb = pure(_kernels.bucket_masses, F, S, split)
    assert np.array_equal(qa, qb) and ta == pytest.approx(tb, rel=1e-14, abs=0)
    na, ma = _kernels.normalise_mean(qa, ta)
    nb, mb = pure(_kernels.normalise_mean, qb, tb)
    _close(na, nb, rtol=1e-14)
    assert ma == pytest.approx(mb, rel=1e-13, abs=0)
    dens = np.exp(-edges**2 / 2) / math.sqrt(2 * math.pi)
    dens[:3] = 0.0
    wa = _kernels.leaf_roundoff(F, S, dens, 1e-14, 1e-17, 1e-5)
    wb = pure(_kernels.leaf_roundoff, F, S, dens, 1e-14, 1e-17, 1e-5)
    _close(wa, wb, rtol=1e-13)


@needs_native
@pytest.mark.parametrize("q", [0.01, 0.2, 1.0])
def test_planning_kernels_match(pure, q):
    from scipy import special
    orders = np.array([0, 1, 2, 3, 7, 8, 9, 40, 255, 256, 513, 1500], dtype=np.int64)
    lm = 0.37 * np.arange(1501.0) ** 1.5  # any finite log-moment table
    lf = special.gammaln(np.arange(1502.0))
    lq1 = math.log1p(-q) if q < 1 else -math.inf
    a = _kernels.log_binomial_moments(lm, lf, lq1, math.log(q), orders)
    b = pure(_kernels.log_binomial_moments, lm, lf, lq1, math.log(q), orders)
    # libm vs numpy's exp/log/log1p (SIMD kernels on AVX-512), not bit for bit: a log-sum-exp of at most
    # 1501 terms <= 1 (after the largest) errs by <= (n + 16) u absolute with 4-ulp exp and log, <= 1.7e-13
    # each, so atol 4e-13 (and rtol for the terms' own arithmetic); a wrong binomial term moves them by >= 1e-3
    _close(a, b, rtol=1e-13, atol=4e-13)
    a_all = _kernels.log_binomial_moments(lm, lf, lq1, math.log(q), np.arange(1501, dtype=np.int64))
    rng = np.random.default_rng(5)
    s = np.geomspace(1e-7, 1e5, 361)
    kp, kn = rng.normal(size=361) * 50, rng.normal(size=361) * 50
    kp[::7] = np.inf
    for c, lt in [(1.0, -23.0), (65536.0, -40.5)]:
        assert _kernels.chernoff_quantiles(kp, kn, s, c, lt) == pure(_kernels.chernoff_quantiles, kp, kn, s, c, lt)
    inf = np.full(361, np.inf)
    assert _kernels.chernoff_quantiles(inf, inf, s, 1.0, -3.0) == (-math.inf, math.inf)
    nan = np.where(np.arange(361) == 3, np.nan, 1.0)
    assert _kernels.chernoff_quantiles(nan, nan, s, 1.0, -3.0) == (-math.inf, math.inf)
    with pytest.raises(ValueError, match="invalid"):
        _kernels.log_binomial_moments(lm, lf, lq1, math.log(q), np.array([-1], dtype=np.int64))
    # chords between integer orders, memoised per order (the memo's history does not matter)
    x = np.concatenate([np.geomspace(1e-3, 900.0, 97), [0.0, 1.0, 2.0, 255.0]])
    for shift in (0, 1):
        ma, mb = np.full(1501, np.nan), np.full(1501, np.nan)
        ca = _kernels.binomial_chord(x, shift, lm, lf, lq1, math.log(q), ma)
        cb = pure(_kernels.binomial_chord, x, shift, lm, lf, lq1, math.log(q), mb)
        _close(ca, cb, rtol=1e-13, atol=4e-13)  # (chords of those log-sum-exps: the same bound)
        again = _kernels.binomial_chord(x[::-1].copy(), shift, lm, lf, lq1, math.log(q), np.full(1501, np.nan))
        assert np.array_equal(again[::-1], ca)
        known = ~np.isnan(ma)
        _close(ma[known], a_all[known], rtol=1e-13)
    with pytest.raises(ValueError, match="invalid"):
        _kernels.binomial_chord(np.array([1500.5]), 1, lm, lf, lq1, math.log(q), np.full(1501, np.nan))


@needs_native
@pytest.mark.parametrize("make", [lambda: fastpld.PoissonSubsampledGaussian(1.0, 0.01),
                                  lambda: fastpld.PoissonSubsampledGaussian(216.31, 0.2),
                                  lambda: fastpld.PoissonSubsampledLaplace(2.0, 0.05)])
def test_native_planning_matches_numpy(make):
    """The compiled planning grids give the numpy planner's plans (same choice, meshes to round-off)."""
    from fastpld import mechanisms
    budgets = budget._Budgets(eps=0.1, delta=1e-10, eta=4e-11, trunc=2e-11, wrap=2e-11, fp=1.5e-11)

    def plans(native):
        mechanisms._LOSS_CACHE.clear()  # cold: each backend fills its own grids
        out = []
        for parts in api._direction_parts([(make(), 4096)]).values():
            g = grids._cumulant_grid(parts[0][0], native)
            ranked = planner._choose_plan(parts, "auto", None, 0.097, math.log(2 / budgets.eta), budgets, native)
            out.append((g, [(cost, p.method, p.params, meshes) for cost, p, meshes in ranked]))
        return out

    for (ga, ra), (gb, rb) in zip(plans(True), plans(False)):
        for x, y in zip(ga, gb):
            assert np.array_equal(np.isfinite(x), np.isfinite(y))
            # (log-MGF grids through libm vs numpy's exp/log: few-ulp terms of log-sum-exps, as above)
            _close(x[np.isfinite(x)], y[np.isfinite(y)], rtol=1e-13, atol=4e-13)
        assert [r[1:3] for r in ra] == [r[1:3] for r in rb]
        for a, b in zip(ra, rb):
            assert a[0] == pytest.approx(b[0], rel=1e-12, abs=0)
            assert a[3].keys() == b[3].keys()
            assert all(a[3][g] == pytest.approx(b[3][g], rel=1e-12, abs=0) for g in a[3])


@needs_native
def test_compiled_chernoff_window_matches_search(monkeypatch):
    """The compiled node window search returns exactly the Python search's window and tail bounds."""
    rng = np.random.default_rng(11)
    cases = []
    for _ in range(25):
        ins = []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.integers(1, 3000))
            p = rng.random(n) ** int(rng.integers(1, 30))
            if rng.random() < 0.3:
                p[: n // 3] = 0
            if rng.random() < 0.4:  # sparse tails (a leaf with coarse cells): the compacted sums
                c = int(rng.choice([3, 9, 27]))
                keep = np.zeros(n, dtype=bool)
                keep[n // 4: 3 * n // 4] = True
                keep[::c] = True
                p[~keep] = 0
            p[n // 2] += 1e-3
            p /= p.sum()
            ins.append((p, int(round(float(np.dot(np.arange(n), p)))), int(rng.integers(1, 100))))
        cases.append((ins, 10.0 ** -rng.uniform(3, 25)))
    compiled = [node._chernoff_window(ins, w, True) for ins, w in cases]
    monkeypatch.setattr(_kernels, "chernoff_window", lambda *a: None)  # the Python search, compiled kernels
    for (ins, w), a in zip(cases, compiled):
        b = node._chernoff_window(ins, w, True)
        assert a[:2] == b[:2]
        for x in (0, a[0] - 3, a[1] + 3, 10**6, -10**6):
            assert a[2](x, True) == b[2](x, True) and a[2](x, False) == b[2](x, False)


@needs_native
def test_chernoff_tail_matches_numpy():
    """The compiled tail bound is the numpy expression's, bit for bit, with infinite and NaN log-MGF values too."""
    rng = np.random.default_rng(4)
    for K in (rng.normal(size=9) * 30, np.array([np.inf, -3.0, 2.0]), np.array([1.0, np.nan, -50.0]),
              np.array([-np.inf, 4.0]), np.array([700.0, 800.0])):
        s = rng.random(K.size) + 0.1
        for x in (-1e6, -3.0, 0.0, 2.5, 40.0, 1e6):
            with np.errstate(invalid="ignore"):
                want = float(min(1.0, math.exp(min(0.0, float((K - s * x).min())))))
            assert _kernels._core.chernoff_tail(K, s, x) == want


@needs_native
@pytest.mark.parametrize("sigma,q", [(216.31, 0.2), (1.0, 0.01), (0.5, 0.5)])
def test_native_moments_match(sigma, q):
    """The native leaf ladder's compiled moments equal the numpy quadrature (and are cached apart)."""
    from fastpld import resources
    # (every cache, the live losses' shadow too: an earlier test's loss still alive -- in a reference cycle the
    # collector has not reached -- came back with its numpy moments filled)
    resources.clear_caches(keep_plans=True)
    losses = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()
    for d in ("remove", "add"):
        loss = losses[d]
        m, s = loss._native_moments()
        assert getattr(loss, "_mean", None) is None  # the numpy moments are not filled by the native ones
        assert m == pytest.approx(loss.mean(), rel=1e-12, abs=1e-12 * loss.std())
        assert s == pytest.approx(loss.std(), rel=1e-12, abs=0)
    assert fastpld.PoissonSubsampledLaplace(2.0, 0.05).privacy_losses()["remove"]._native_moments() is None


@needs_native
def test_query_kernels_match(pure):
    """The compiled delta bounds equal the numpy query path (curve._Query) on a composed PMF."""
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(5.0, 0.1), 200, backend="native")
    eps = np.array([0.0, 0.05, 0.3, 1.0, 2.5, 40.0, 1e20])
    for name, d in pld.directions.items():
        q = pld._q[name]
        args = (q.p, q.v0, q.h, q.S1, q.T, q.pad, d.eps_spent, d.delta_spent, d.p_inf, eps)
        a = _kernels.delta_bounds(*args)
        b = pure(_kernels.delta_bounds, *args)
        # (each bound is a table entry minus exp(eps - v_J) times another, the exp by libm vs numpy, whose SIMD
        # kernel may differ by up to 8 ulp from it: 1e-13 = 450 u; a wrong bracket J moves them by percents)
        for x, y in zip(a, b):
            _close(x, y, rtol=1e-13)
        # the numpy reference tables agree with the compiled ones
        ref = fastpld.curve._Query(d.pmf, native=False)
        for x, y in zip((q.S1, q.T, q.dgrid), (ref.S1, ref.T, ref.dgrid)):
            _close(x, y, rtol=1e-13, atol=1e-17)
    native = pld.delta(eps)
    for q in pld._q.values():
        q.native = False  # the numpy reference query on the same PMFs
    ref = pld.delta(eps)
    for x, y in zip(native, ref):
        _close(x, y, rtol=1e-13)  # (as above)


@needs_native
def test_delta_query_kernel_matches(pure):
    """The compiled ``_Query.delta`` against its numpy code: the same bracket at every eps -- grid values, between
    them, beyond the ends, huge ones --, the curve within a small share of the pad (libm's exp against numpy's), the
    pad within its own rounding; NaN refused; shapes as the numpy code returns them."""
    plds = [fastpld.compose(fastpld.PoissonSubsampledGaussian(5.0, 0.1), 1000, rel_error=1e-3),
            fastpld.compose(fastpld.PureDP(0.5), 40, backend="native")]
    for pld in plds:
        queries = list(pld._q.values()) + ([pld._ql[n] for n in pld._ql] if hasattr(pld, "_ql") else [])
        for q in queries:
            v = q.v0 + q.h * np.arange(q.n)
            eps = np.concatenate([v[::5], v[::7] + 0.5 * q.h, v[::11] + 1e-15, v[::11] - 1e-15, -v[::9],
                                  [v[0] - 1.0, v[-1] + 1.0, 0.0, -0.0, 1e300, -1e300, 5e-324]])
            d, pad = q.delta(eps)
            rd, rpad = pure(q.delta, eps)
            np.testing.assert_array_less(np.abs(d - rd), 0.01 * rpad + 1e-300)
            np.testing.assert_allclose(pad, rpad, rtol=1e-12, atol=1e-300)
            assert np.shape(q.delta(np.float64(0.5))[0]) == () and q.delta(eps[:6].reshape(2, 3))[1].shape == (2, 3)
    with pytest.raises(ValueError, match="NaN"):
        _kernels._core.query_delta(q.p, q.S1, q.T, q.v0, q.h, q.pad, np.array([np.nan]), np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="query_delta"):
        _kernels._core.query_delta(q.p, q.S1[:-1], q.T, q.v0, q.h, q.pad, np.zeros(1), np.zeros(1), np.zeros(1))


@needs_native
def test_epsilon_query_kernels_match(pure):
    """The compiled epsilon query and bracket pad against the numpy code of curve._Query on composed PMFs: the
    same bracket (grid index) for every x -- exact ones, between them, the ends, beyond them, NaN -- and the
    solution within the log's last bits."""
    plds = [fastpld.compose(fastpld.PoissonSubsampledGaussian(5.0, 0.1), 200, backend="native"),
            fastpld.compose(fastpld.PureDP(0.5), 40, backend="native")]
    for pld in plds:
        for q in pld._q.values():
            dg = q.dgrid
            x = np.concatenate([dg[::7], 0.5 * (dg[1:] + dg[:-1])[::5], [q.S1[0], q.S1[0] * (1 + 1e-12), 2.0, 1.0,
                                0.0, -1.0, 1e-300, 5e-324, np.nan, np.inf], np.geomspace(1e-14, 0.9, 40)])
            got = q.epsilon(x)
            ref = pure(q.epsilon, x)
            assert np.array_equal(np.isfinite(got), np.isfinite(ref)) and np.array_equal(np.isnan(got), np.isnan(ref))
            fin = np.isfinite(ref)
            # (the same operations but the log: libm's against numpy's SIMD kernel, a few ulp of a value at most
            # |v0| + h n in magnitude; a wrong bracket would move the solution by up to a mesh)
            scale = abs(q.v0) + q.h * q.n + 1.0
            np.testing.assert_array_less(np.abs(got[fin] - ref[fin]), 1e-14 * scale)
            np.testing.assert_array_equal(got[~fin], ref[~fin])
            np.testing.assert_array_equal(q.bracket_pad(x), pure(q.bracket_pad, x))  # (a table entry times pad)
            # scalars and shapes as the numpy code returns them
            y = x[: 2 * (x.size // 2)].reshape(2, -1)
            assert np.shape(q.epsilon(np.float64(1e-5))) == () and q.epsilon(y).shape == y.shape
            np.testing.assert_array_equal(q.epsilon(y), q.epsilon(y.ravel()).reshape(y.shape))
    with pytest.raises(ValueError, match="query_epsilon"):
        _kernels._core.query_epsilon(np.zeros(0), np.zeros(1), np.zeros(1), 0.0, 1.0, np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="query_bracket_pad"):
        _kernels._core.query_bracket_pad(np.zeros(3), np.zeros(3), 1.0, np.zeros(2), np.zeros(1))


@needs_native
def test_epsilon_solution_kernels_match(pure):
    """The compiled upper and lower solutions of an epsilon query (``_Query.upper_solution``, ``lower_solution``:
    one call each) against the same methods composed -- the compiled epsilon and bracket pad with numpy's
    arithmetic between them, the answers' previous path: bit for bit (the same operations, the same libm log) --
    and against the numpy code throughout within the log's last bits, at exact grid values, between them, the
    ends, beyond them, NaN and infinities."""
    plds = [fastpld.compose(fastpld.PoissonSubsampledGaussian(5.0, 0.1), 1000, rel_error=1e-3),
            fastpld.compose(fastpld.PoissonSubsampledGaussian(5.0, 0.1), 200, backend="native"),
            fastpld.compose(fastpld.PureDP(0.5), 40, backend="native")]
    for pld in plds:
        queries = list(pld._q.values()) + ([pld._ql[n] for n in pld._ql] if hasattr(pld, "_ql") else [])
        for q in queries:
            dg = q.dgrid
            x = np.concatenate([dg[::3], dg[::7] * (1 + 1e-15), dg[::7] * (1 - 1e-15), (dg + q.pad * q.S1[:-1])[::5],
                                0.5 * (dg[1:] + dg[:-1])[::5], [q.S1[0], np.nextafter(q.S1[0], 0), q.S1[0] * (1 + 1e-12),
                                2.0, 1.0, 0.0, -0.0, -1.0, 1e-300, 5e-324, np.nan, np.inf, -np.inf],
                                np.geomspace(1e-300, 0.9, 60)])
            with np.errstate(all="ignore"):
                x2, u = q.upper_solution(x)
                lo = q.lower_solution(x)
                r2 = x - q.bracket_pad(np.maximum(x, 0.0))
                ru = q.epsilon(r2)
                ru = ru + q.eps_pad(ru)
                rl = q.epsilon(np.minimum(x + q.lower_pad(x), 2.0))
                rl = rl - q.eps_pad(rl)
                p2, pu = pure(q.upper_solution, x)
                pl = pure(q.lower_solution, x)
            for got, ref in ((x2, r2), (u, ru), (lo, rl)):
                np.testing.assert_array_equal(got.view(np.int64), ref.view(np.int64))
            scale = abs(q.v0) + q.h * q.n + 1.0  # (as in test_epsilon_query_kernels_match: libm's log against numpy's)
            np.testing.assert_array_equal(x2, p2)
            for got, ref in ((u, pu), (lo, pl)):
                assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(np.isinf(got), np.isinf(ref))
                fin = np.isfinite(ref)
                np.testing.assert_array_less(np.abs(got[fin] - ref[fin]), 1e-14 * scale)
                np.testing.assert_array_equal(got[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)])
            y = x[: 2 * (x.size // 2)].reshape(2, -1)
            with np.errstate(all="ignore"):
                assert q.upper_solution(y)[1].shape == y.shape and np.shape(q.lower_solution(np.float64(1e-5))) == ()
    with pytest.raises(ValueError, match="query_upper"):
        _kernels._core.query_upper(np.zeros(3), np.zeros(3), np.zeros(3), 0.0, 1.0, 1e-16, np.zeros(2), np.zeros(1),
                                   np.zeros(2))
    with pytest.raises(ValueError, match="query_lower"):
        _kernels._core.query_lower(np.zeros(0), np.zeros(1), np.zeros(1), 0.0, 1.0, 1e-16, np.zeros(1), np.zeros(1))


@pytest.mark.parametrize("backend", ["native", "numpy"])
def test_delta_at_huge_eps(backend):
    """eps far beyond the grid: nothing lies above it (the grid index is clipped before its int cast)."""
    if backend == "native" and not NATIVE:
        pytest.skip("native backend unavailable")
    pld = fastpld.compose(fastpld.Laplace(10.0), 100, backend=backend, eps_error=0.1, method="coupling")
    b = pld.delta(np.array([1e16, 1e20, 1e300]))
    assert np.all(b.lower == 0) and np.all(b.estimate == 0)
    assert np.all(b.upper <= pld.delta_spent * (1 + 1e-12))
    # the dominance certificate (the default accuracy): its charges only (times its masses' relative
    # rounding, e^log_rel, ~1e-11)
    pld = fastpld.compose(fastpld.Laplace(10.0), 100, backend=backend)
    b = pld.delta(np.array([1e16, 1e20, 1e300]))
    assert np.all(b.lower == 0) and np.all(b.upper <= pld.delta_spent * (1 + 1e-9))


@needs_native
def test_kernel_errors_are_value_errors():
    with pytest.raises(ValueError, match="factor"):
        _kernels.discounted_rcumsum(np.ones(3), 1.5)
    with pytest.raises(ValueError, match="mass"):
        _kernels.log_mgf_grid(np.zeros(4), 0.0, np.ones(2), 1.0, np.zeros(2))
    with pytest.raises(ValueError, match="mass"):
        _kernels.normalise_mean(np.zeros(3), 0.0)


# ---------------------------------------------------------------------------------------
# the switch
# ---------------------------------------------------------------------------------------
def test_backend_switch():
    prev = fastpld.get_backend()
    try:
        assert prev == ("native" if NATIVE else "numpy")
        fastpld.set_backend("numpy")
        assert fastpld.get_backend() == "numpy"
        assert fastpld.compose(fastpld.PureDP(0.5), 20).backend == "numpy"
        if NATIVE:
            assert fastpld.compose(fastpld.PureDP(0.5), 20, backend="native").backend == "native"
        with pytest.raises(ValueError, match="backend"):
            fastpld.set_backend("cuda")
        with pytest.raises(ValueError, match="backend"):
            fastpld.compose(fastpld.PureDP(0.5), 20, backend="fftw3")
    finally:
        fastpld.set_backend(prev)


def _probe(env_extra):
    env = dict(os.environ, **env_extra)
    code = ("import warnings, fastpld\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    b = fastpld.get_backend()\n"
            "    r = fastpld.compose(fastpld.PureDP(0.5), 10).delta(0.5).upper\n"
            "print(b, len([x for x in w if issubclass(x.category, RuntimeWarning)]), r)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    b, nwarn, r = out.stdout.split()
    return b, int(nwarn), float(r)


def test_pure_python_env_falls_back():
    # implicit default: numpy without a warning; explicit FASTPLD_BACKEND=native: numpy with a warning
    b, nwarn, r1 = _probe({"FASTPLD_PURE_PYTHON": "1", "FASTPLD_BACKEND": ""})
    assert (b, nwarn) == ("numpy", 0)
    b, nwarn, r2 = _probe({"FASTPLD_PURE_PYTHON": "1", "FASTPLD_BACKEND": "native"})
    assert (b, nwarn) == ("numpy", 1)
    assert r1 == r2
    if NATIVE:
        b, nwarn, r3 = _probe({"FASTPLD_PURE_PYTHON": "", "FASTPLD_BACKEND": "native"})
        assert (b, nwarn) == ("native", 0)
        assert r3 == pytest.approx(r1, rel=1e-6, abs=0)


def test_explicit_native_without_core_warns(monkeypatch):
    monkeypatch.delitem(_fft._BACKENDS, "native", raising=False)
    monkeypatch.setattr(_fft, "_native_error", [ImportError("not built")])
    with pytest.warns(RuntimeWarning, match="native backend is unavailable"):
        pld = fastpld.compose(fastpld.PureDP(0.5), 10, backend="native")
    assert pld.backend == "numpy"


# ---------------------------------------------------------------------------------------
# both backends on whole compositions
# ---------------------------------------------------------------------------------------
WORKLOADS = [
    ("psg", lambda: fastpld.PoissonSubsampledGaussian(27.1, 0.2), 2**10, "auto"),
    ("psg-small-sigma", lambda: fastpld.PoissonSubsampledGaussian(1.2, 0.05), 300, "recursive"),
    ("laplace", lambda: fastpld.Laplace(134.8), 2**10, "two_stage"),
    ("sub-laplace", lambda: fastpld.PoissonSubsampledLaplace(2.0, 0.05), 300, "auto"),
    ("rr", lambda: fastpld.RandomizedResponse(0.5, 3), 500, "recursive"),
    ("gauss-glw", lambda: fastpld.Gaussian(8.0), 97, "glw"),
    ("hetero", lambda: [(fastpld.Gaussian(3.0), 5), (fastpld.Laplace(2.0), 40)], None, "recursive"),
]


@needs_native
@pytest.mark.parametrize("name,make,k,method", WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_backends_agree(name, make, k, method):
    """PMFs, estimates and certified bounds agree to 1e-9 relative across backends.

    Round-off-level entries (below the certified error floor) are trimmed differently by
    different FFT implementations, so the PMFs are compared on their common value grid; the
    trimming charge does not depend on the noise, so the bounds agree.  Far in the tails (delta ~1e-7) the
    float64 nodes' round-off, which differs between FFT implementations, can exceed 1e-9 of the value: there the
    two agree within the round-off both charge (each PMF lies within its charge, in total variation, of the exact
    composition), an epsilon within that charge over the curve's slope.
    """
    a = fastpld.compose(make(), k, method=method, backend="native")
    b = fastpld.compose(make(), k, method=method, backend="numpy")
    assert (a.backend, b.backend) == ("native", "numpy")
    assert [s.buckets for s in a.stages] == [s.buckets for s in b.stages]
    for d in a.directions:
        pa, pb = a.directions[d].pmf, b.directions[d].pmf
        # the planners' MGF grids agree to round-off (compiled vs numpy sums), so the meshes may differ in the last bits
        assert pa.mesh == pytest.approx(pb.mesh, rel=1e-12, abs=0)
        shift = (pb.offset - pa.offset) / pa.mesh
        assert abs(shift - round(shift)) < 1e-6
        shift = round(shift)
        lo = min(0, shift)
        n = max(pa.probs.size, shift + pb.probs.size) - lo
        xa = np.zeros(n)
        xb = np.zeros(n)
        xa[-lo:-lo + pa.probs.size] = pa.probs
        xb[shift - lo:shift - lo + pb.probs.size] = pb.probs
        assert np.abs(xa - xb).sum() <= 1e-9
        assert a.directions[d].eps_spent == pytest.approx(b.directions[d].eps_spent, rel=1e-9, abs=0)
    fp = sum(x.directions[d].certificate.get("roundoff", 0.0) for x in (a, b) for d in x.directions)
    assert fp < 1e-9

    def close(x, y, atol, tail, tail_tol):  # (the tails' entries -- delta below 1e-6 -- within tail_tol)
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        assert np.all(np.abs(x - y) <= np.where(tail, np.maximum(atol, tail_tol), atol) + 1e-9 * np.abs(y)), (x, y)

    eps = np.array([0.25, 0.5, 1.0, 2.0])
    da, db = a.delta(eps), b.delta(eps)
    for x, y in ((da.estimate, db.estimate), (da.lower, db.lower), (da.upper, db.upper)):
        close(x, y, 1e-15, np.asarray(y) < 1e-6, fp)
    ea, eb = a.epsilon([1e-5, 1e-7]), b.epsilon([1e-5, 1e-7])
    for x, y in ((ea.estimate, eb.estimate), (ea.lower, eb.lower), (ea.upper, eb.upper)):
        # (the curve's slope there, at least half its secant's over +-1e-3 at these epsilons)
        sl = np.abs(np.diff(a.delta(np.stack([np.asarray(x) + 1e-3, np.asarray(x) - 1e-3])).estimate, axis=0))[0]
        close(x, y, 1e-12, np.array([False, True]), fp / (0.5 * sl / 2e-3))


@needs_native
def test_native_with_numpy_kernels(pure):
    """The native pipeline with every kernel replaced by its numpy fallback."""
    a = fastpld.compose(fastpld.PoissonSubsampledGaussian(27.1, 0.2), 2**10, backend="native")
    b = pure(fastpld.compose, fastpld.PoissonSubsampledGaussian(27.1, 0.2), 2**10, backend="native")
    da, db = a.delta([0.5, 1.0]), b.delta([0.5, 1.0])
    _close(da.estimate, db.estimate, rtol=1e-9)
    _close(da.upper, db.upper, rtol=1e-6)


@pytest.mark.parametrize("backend", ["native", "numpy"])
@pytest.mark.parametrize("method", ["two_stage", "recursive"])
def test_oracles_hold_on_each_backend(backend, method):
    if backend == "native" and not NATIVE:
        pytest.skip("native backend unavailable")
    eps = np.array([0.0, 0.5, 1.0, 2.0])
    b = fastpld.compose(fastpld.Gaussian(300.0), 2**16 + 3, method=method, backend=backend).delta(eps)
    exact = gaussian_delta(eps, math.sqrt(2**16 + 3) / 300.0)
    assert np.all(b.lower <= exact) and np.all(exact <= b.upper)
    b = fastpld.compose(fastpld.PureDP(0.02), 5003, method=method, backend=backend).delta(eps)
    exact = np.array([pure_dp_delta(e, 0.02, 5003) for e in eps])
    assert np.all(b.lower <= exact) and np.all(exact <= b.upper)


# ---------------------------------------------------------------------------------------
# threads
# ---------------------------------------------------------------------------------------
@needs_native
def test_compose_from_many_threads():
    jobs = [(fastpld.PoissonSubsampledGaussian(27.1, 0.2), 2**10), (fastpld.Laplace(134.8), 2**10),
            (fastpld.Gaussian(8.0), 97), (fastpld.PureDP(0.1), 100)] * 2
    serial = [fastpld.compose(m, k, backend="native").delta(1.0) for m, k in jobs]
    results = [None] * len(jobs)
    errors = []
    barrier = threading.Barrier(len(jobs))

    def work(i):
        try:
            barrier.wait()
            m, k = jobs[i]
            results[i] = fastpld.compose(m, k, backend="native").delta(1.0)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r, s in zip(results, serial):
        assert r == s  # per-thread plans: bit-identical to the serial run


@needs_native
@pytest.mark.parametrize("dtype", [np.float64, np.longdouble])
def test_series_kernels_match(pure, dtype):
    """Compiled moments and series evaluation against their numpy references, in the node's precision
    (a long double scalar must reach the kernel without passing through double)."""
    rng = np.random.default_rng(11)
    p = (rng.random(700) ** 4).astype(dtype)
    p /= p.sum()
    cen = int(round(float(np.dot(np.arange(p.size), p.astype(np.float64)))))
    ins = [(p, cen, 4096), (p[::-1].copy(), p.size - 1 - cen, 3)]
    a = series._series_spectrum(ins, 1 << 16, dtype)
    b = series._series_spectrum(ins, 1 << 16, dtype, native=False)
    assert pure(lambda: series._series_spectrum(ins, 1 << 16, dtype))[0] == b[0]
    assert a[0] == b[0]
    u = float(np.finfo(dtype).eps)
    for x, y in zip(a[1:3], b[1:3]):
        assert x.dtype == np.dtype(dtype)
        assert np.max(np.abs((x - y).astype(np.float64))) <= 64 * u * (1 + np.max(np.abs(y.astype(np.float64))))
    for x, y in zip(a[3:5], b[3:5]):
        _close(x, y, rtol=1e-9)


@needs_native
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trim", [False, True])
def test_finish_node_matches_numpy(dtype, trim):
    """The compiled node finishing (roll, clip, trim, drop < 1e-300, cut, normalise) equals the numpy steps."""
    from fastpld import _core
    rng = np.random.default_rng(7)
    N = 1000
    out = (rng.random(N) * 1e-3).astype(dtype)
    out[:40] = -1e-18  # negative round-off
    out[100:140] = 1e-25  # below the floor
    out[500:505] = 1e-310 if dtype is np.float64 else np.longdouble("1e-320")  # below float64's range
    out[-30:] = 0
    floor = 1e-22
    for shift in (0, 7, 993):
        lin, a, tiny, n_tiny = _core.finish_node(out, shift, floor, trim)
        ref = np.maximum(np.roll(out, -shift), 0)
        if trim:
            ref = np.where(ref < floor, 0, ref)
        t = (ref > 0) & (ref < 1e-300)
        assert n_tiny == int(t.sum())
        assert tiny == pytest.approx(float(np.sum(ref[t].astype(np.float64))), rel=1e-12, abs=1e-320)
        ref = np.where(t, 0, ref)
        nz = np.flatnonzero(ref)
        assert a == nz[0] and lin.size == nz[-1] - nz[0] + 1 and lin.dtype == dtype
        ref = ref[nz[0]:nz[-1] + 1]
        ref = ref / ref.sum()
        _close(lin, ref, rtol=4 * float(np.finfo(dtype).eps), atol=0)
    with pytest.raises(ValueError, match="lost all probability mass"):
        _core.finish_node(np.zeros(8, dtype=dtype), 0, 0.0, False)


@needs_native
@pytest.mark.parametrize("dtype", DTYPES)
def test_finish_node_scale_is_numpys_product(dtype):
    """``scale`` (the inverse FFT's 1/N, applied in the pass) gives the bits of finishing ``out * scale``,
    with a length whose 1/N is inexact, and leaves ``out`` as it was."""
    from fastpld import _core
    rng = np.random.default_rng(8)
    N = 3 * 1024
    raw = (rng.random(N) * N).astype(dtype)
    raw[:30] = -1e-14
    raw[200:260] = 1e-20  # below the floor once scaled
    keep = raw.copy()
    sc = 1.0 / N
    for trim in (False, True):
        for shift in (0, 5, N - 1):
            a = _core.finish_node(raw, shift, 1e-22, trim, sc)
            b = _core.finish_node(raw * np.dtype(dtype).type(sc), shift, 1e-22, trim)
            assert np.array_equal(a[0], b[0]) and a[1:] == b[1:]
    assert np.array_equal(raw, keep)


@needs_native
@pytest.mark.parametrize("dtype", DTYPES)
def test_convolve_raw_is_the_unscaled_plan_output(dtype):
    """``convolve(raw=True)`` returns the inverse plan's buffer before the 1/N: times 1/N it is the scaled
    output bitwise, with the same bounds (polar, direct-power and lattice paths)."""
    be = _fft.resolve("native")
    u = float(np.finfo(dtype).eps) / 2
    rng = np.random.default_rng(9)
    p = rng.random(300) + 0.1
    p /= p.sum()
    N = 3000
    q = np.array([0.3, 0.1, 0.2, 0.4])
    cases = [dict(ins=[(p, 150, 7)]), dict(ins=[(q, 1, 64)], direct=True)]
    lat_ins = [(q, 1, 512)]
    dft = [_kernels.dft_order(q, 1, N, dtype)]
    cases.append(dict(ins=lat_ins, dft=dft, lat=lattice._lattice_spectrum(lat_ins, dft, N, dtype, True, 40.0)))
    for kw in cases:
        ins = kw.pop("ins")
        out, l1, linf = be.convolve(ins, N, dtype, u, **kw)
        out = out.copy()
        raw, l1r, linfr = be.convolve(ins, N, dtype, u, raw=True, **kw)
        assert (l1r, linfr) == (l1, linf)
        assert np.array_equal(raw * (np.dtype(dtype).type(1) / np.dtype(dtype).type(N)), out)


@needs_native
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_log_mgf_blocks_against_long_double(kind):
    """The compiled log-MGF sums (negligible blocks bounded instead of summed, the overflow shift
    from block maxima, four interleaved chains in full blocks and in sparse blocks of equal
    gaps) against a long double logsumexp, over s where most blocks of a wide PMF are negligible."""
    rng = np.random.default_rng(17)
    n = 20000
    i = np.arange(n, dtype=np.float64)
    p = np.exp(-0.5 * ((i - 3000.0) / 300.0) ** 2) + 1e-12 * np.exp(-i / 4000.0)
    p *= 1 + 0.1 * rng.random(n)
    if kind == "sparse":  # a fine core and runs of equal cells, like a leaf with coarse tails
        keep = np.zeros(n, dtype=bool)
        keep[2200:3900] = True
        keep[:2200:9] = True
        keep[3900:12000:27] = True
        keep[12000::81] = True
        p[~keep] = 0
    p /= p.sum()
    cen = 3000.0
    s = np.concatenate([-np.geomspace(1e-4, 0.5, 25), np.geomspace(1e-4, 0.5, 25)])
    K = np.zeros(s.size)
    _kernels.log_mgf_grid(p, cen, s, 5.0, K)
    idx = np.flatnonzero(p)
    sl = s.astype(np.longdouble)[:, None]
    M = sl * (idx.astype(np.longdouble)[None, :] - cen) + np.log(p[idx].astype(np.longdouble))[None, :]
    mx = M.max(axis=1)
    ref = 5.0 * (mx + np.log(np.exp(M - mx[:, None]).sum(axis=1)))
    np.testing.assert_allclose(K, ref.astype(np.float64), rtol=1e-12, atol=1e-11)


@needs_native
def test_mean_index_kernel():
    rng = np.random.default_rng(2)
    p = rng.random(3001) ** 4
    assert _kernels.mean_index(p) == pytest.approx(float(np.dot(np.arange(p.size), p) / p.sum()), rel=1e-13)


def test_numpy_backend_refuses_float64_ffts_for_long_double_nodes():
    """numpy before 2.0 computes the FFT of a long double array in float64: the numpy backend's long double
    nodes would then be charged long double's round-off for float64 arithmetic.  The backend checks the
    precision of what numpy returns (here numpy 2's, whose FFTs of long double arrays are long double)."""
    from fastpld import _backend
    be = _backend.NumpyBackend()
    x = np.linspace(0, 1, 16).astype(np.longdouble)
    assert be.rfft(x, 16).dtype == np.clongdouble
    assert be.irfft(be.rfft(x, 16), 16).dtype == np.longdouble
    with pytest.raises(RuntimeError, match="numpy >= 2.0"):
        _backend._same_precision(x, np.zeros(9, dtype=np.complex128))
    assert _backend._same_precision(x.astype(np.float64), np.zeros(9, dtype=np.complex128)).dtype == np.complex128
