"""The fused compiled leaf of the Poisson-subsampled Gaussian (``_kernels.psg_window`` and
``_kernels.psg_leaf``, used by ``discretize_loss(..., native=True)``) against the path it
replaces (window, compiled kernels step by step): every field of the GridPMF bitwise equal (the same
compiled window and the same C library in both: one implementation against itself); the compiled window
against the numpy window, which evaluates ``exp``/``log1p``/``expm1`` through numpy (SIMD kernels on
AVX-512 machines, rounding differently from libm), within the bound stated there; and the fused leaf
against the numpy reference (``native=False`` without the compiled core) within round-off."""
import math

import numpy as np
import pytest

import fastpld
from fastpld import _kernels, _reference
from fastpld import discretize as D
from fastpld import mechanisms as M

pytestmark = pytest.mark.skipif(not _kernels.have_leaf(), reason="compiled leaf kernels unavailable")

# lam and per-copy budget of a 10,000-copy plan at eps_error 0.1 (as benchmarks/bench_heterogeneous.py)
_LAM = 2 * math.log(2 / 4e-9) / 0.097
COARSE = [None, (_LAM, 0.01 * 0.1 * _LAM / 10_000), (_LAM / 10, 1e-6)]


def _stepwise(*args, **kw):
    """discretize_loss through the per-step compiled kernels (the old native path), with the compiled
    window and libm's ``ginv``: numpy's may differ from them in the last bits (its SIMD exp/log/log1p/expm1
    vs libm; test_fused_window_matches_the_numpy_window), and this test is about the fused leaf."""
    loss = args[0]
    have, _kernels.have_leaf = _kernels.have_leaf, lambda: False
    window = D._psg_window
    D._psg_window = lambda loss, tail: _kernels.psg_window(*loss.psg_params, float(tail), D._PSG_STEPS)
    # (and the partial mean's limits L = ginv(Y) through libm, as the fused leaf's psg_ginv, not numpy)
    psg = getattr(loss, "psg_params", None) is not None
    if psg:
        q = loss.q
        lq, ylo = math.log(q), math.log1p(-q)

        def ginv(x):  # _kernels.subsampled_ginv's three forms, scalar, through libm
            if x > _kernels.PSG_BIG_T:
                return x - lq
            if x < 0:
                dn = math.expm1(x - ylo)
                return ylo + math.log(dn) - lq if dn > 0 else -math.inf
            return math.log(math.expm1(x) + q) - lq

        loss._ginv = lambda t: np.array([ginv(float(x)) for x in np.ravel(t)])
    try:
        return D.discretize_loss(*args, **kw)
    finally:
        _kernels.have_leaf = have
        D._psg_window = window
        if psg:
            del loss._ginv


def _numpy(*args, **kw):
    """The numpy reference: native=False and no compiled kernel anywhere."""
    core, _kernels._core = _kernels._core, None
    try:
        return D.discretize_loss(*args, native=False, **kw)
    finally:
        _kernels._core = core


def _assert_bitwise(a, b):
    assert a.probs.dtype == b.probs.dtype and a.probs.shape == b.probs.shape
    assert np.array_equal(a.probs, b.probs)
    for f in ("offset", "mesh", "coupling_range", "tv", "bias", "truncated"):
        assert getattr(a, f) == getattr(b, f), f
    assert a.mix == b.mix


def _run(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except ValueError as e:
        return str(e)


@pytest.mark.parametrize("sigma,q", [(0.5, 0.005), (1.0, 0.001), (1.0, 0.0123), (1.0, 0.02), (2.0, 0.1),
                                     (5.0, 0.5), (0.8, 0.9)])
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_fused_leaf_is_bitwise_the_stepwise_native_leaf(sigma, q, direction):
    M._LOSS_CACHE.clear()
    loss = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()[direction]
    coarse_seen = 0
    for h in (3e-2, 3e-4, 1e-4):
        for tail in (1e-14, 1e-8, 2e-3):  # (2e-3: above _psg_window's range, the ladder's window)
            for coarse in COARSE:
                for lattice in (0.0, 0.37 * h, -1.5 * h):
                    kw = dict(lattice=lattice, native=True, coarse=coarse, max_buckets=1 << 22)
                    a = _run(D.discretize_loss, loss, h, tail, **kw)
                    b = _run(_stepwise, loss, h, tail, **kw)
                    if isinstance(a, str) or isinstance(b, str):
                        assert a == b
                        continue
                    _assert_bitwise(a, b)
                    coarse_seen += bool(a.mix)
    assert coarse_seen > 0 or q > 0.1 or sigma > 1  # the sweep reaches the coarse cells


def _libm_candidates(loss, tail):
    """The candidate ends of discretize._psg_window, ``g`` evaluated by Python's ``math`` (the C library
    that the compiled window calls, in the same order of operations), or ``None``; the quantiles are the
    window's own (``_kernels.ndtri``: the standard library's)."""
    q, v, sd, remove = loss.psg_params
    logq = math.log(q)

    def g(l):
        if l > 30:
            return (l + logq) + math.log1p(((1 - q) * math.exp(-min(l, 700.0))) / q)
        return math.log1p(q * math.expm1(l))

    steps = [float(s) for s in D._PSG_STEPS]
    if remove:
        if not tail < q:
            return None
        c_lo = -v / 2 + sd * _kernels.ndtri(tail / (1 - q))
        c_hi = v / 2 - sd * _kernels.ndtri(tail / q)
        return [g(c_lo - sd * s) for s in steps], [g(c_hi + sd * s) for s in steps]
    z = -_kernels.ndtri(tail)
    return [-g(-v / 2 + sd * z + sd * s) for s in steps], [-g(-v / 2 - sd * z - sd * s) for s in steps]


def _first(values, ok):
    return next((i for i, x in enumerate(values) if ok(x)), None)


@pytest.mark.parametrize("sigma", [0.3, 1.0, 4.0, 50.0])
@pytest.mark.parametrize("q", [1e-4, 0.01, 0.3, 0.999])
def test_fused_window_matches_the_numpy_window(sigma, q):
    """The compiled window is bitwise the same algorithm on the same C library (a scalar replica through
    ``math``), and agrees with the numpy window (``_psg_window``) up to the rounding of numpy's maths.

    Why not bitwise with numpy: its exp/expm1/log1p may be SIMD kernels (within 4 ulp, docs/roundoff.md
    section 7), so a candidate end ``y = +-g(l)`` differs by a few ulps, amplified by ``log1p``'s condition
    number (at most ``1 / (1 - q)``): within ``64 u (|y| + 1 / (1 - q) + |log q|)``.  And the first
    candidate lies at the tail quantile, where the computed CDF is the tail up to its rounding, and near
    the support's end ``log(1 - q)`` the CDF is so steep in ``y`` that an ulp of ``y`` moves it by percents:
    there the two may accept neighbouring candidates.  Either window is valid (the computed CDF and survival
    function at most ``tail`` at its ends), which is all the certificate uses (it charges the computed
    masses outside the window, not ``tail``)."""
    u = 2.0**-53
    losses = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()
    for direction in ("remove", "add"):
        loss = losses[direction]
        for tail in 10.0 ** np.arange(-300, -3, 1.75):
            tail = float(tail)
            a = _kernels.psg_window(*loss.psg_params, tail, D._PSG_STEPS)
            b = D._psg_window(loss, tail)
            assert (a is None) == (b is None)
            cand = _libm_candidates(loss, tail)
            if a is None:
                continue
            # the compiled window: the libm replica's first candidates whose computed CDF / SF are <= tail
            lo, hi = (np.array(c) for c in cand)
            F, _, _ = _kernels.psg_eval(lo, *loss.psg_params, want_pdf=False)
            _, S, _ = _kernels.psg_eval(hi, *loss.psg_params, want_pdf=False)
            i, j = _first(F, lambda x: x <= tail), _first(S, lambda x: x <= tail)
            assert a == (lo[i], hi[j])
            # valid ends (by psg_eval, the evaluation both windows use to accept a candidate)
            for ends in (a, b):
                F, S, _ = _kernels.psg_eval(np.array(ends), *loss.psg_params, want_pdf=False)
                assert F[0] <= tail and S[1] <= tail
            # the numpy ends are the same candidates to a few ulps, or the neighbouring ones
            for y, ys, k in ((b[0], lo, i), (b[1], hi, j)):
                tol = 64 * u * (abs(y) + 1 / (1 - q) + abs(math.log(q)))
                near = np.flatnonzero(np.abs(ys - y) <= tol)  # (several where they round to one value)
                assert np.any(np.abs(near - k) <= 1), (direction, tail, y, ys[k])


@pytest.mark.parametrize("q", [0.005, 0.02])
@pytest.mark.parametrize("direction", ["remove", "add"])
@pytest.mark.parametrize("coarse", COARSE[:2])
def test_fused_leaf_within_round_off_of_the_numpy_reference(q, direction, coarse):
    M._LOSS_CACHE.clear()
    loss = fastpld.PoissonSubsampledGaussian(1.0, q).privacy_losses()[direction]
    h, tail = 3e-4, 1e-13
    a = D.discretize_loss(loss, h, tail, native=True, coarse=coarse)
    b = _numpy(loss, h, tail, coarse=coarse)
    assert a.probs.shape == b.probs.shape and a.mesh == b.mesh
    assert np.count_nonzero(a.probs) == np.count_nonzero(b.probs)
    # (CDFs by libm's erfc vs scipy's ndtr, sums in another order: the masses agree to ~1e-13
    # relative where they matter, far inside the round-off the certificate charges)
    np.testing.assert_allclose(a.probs, b.probs, rtol=1e-9, atol=1e-18)
    assert abs(a.offset - b.offset) <= a.bias + b.bias
    assert a.coupling_range == pytest.approx(b.coupling_range, rel=1e-9, abs=0)
    assert a.tv == pytest.approx(b.tv, rel=1e-6, abs=1e-30)
    assert a.truncated == pytest.approx(b.truncated, rel=1e-9, abs=1e-300)
    # (the bias bound measures the mean correction's actual rounding: the two orders of summation give
    # ~4e-4 relative apart)
    assert a.bias == pytest.approx(b.bias, rel=1e-2, abs=0)
    assert len(a.mix) == len(b.mix)
    for ra, rb in zip(a.mix, b.mix):
        np.testing.assert_allclose(ra, rb, rtol=1e-9)


def test_generic_losses_keep_their_path():
    # no compiled leaf for a Gaussian loss or a subsampled Laplace: the native and stepwise paths agree
    for loss in (fastpld.Gaussian(2.0).privacy_losses()["remove"],
                 fastpld.PoissonSubsampledLaplace(1.0, 0.1).privacy_losses()["add"]):
        _assert_bitwise(D.discretize_loss(loss, 1e-3, 1e-12, native=True),
                        _stepwise(loss, 1e-3, 1e-12, native=True))


@pytest.mark.parametrize("kw,name", [
    (dict(mesh=0.0), "mesh"), (dict(mesh=-1e-3), "mesh"), (dict(mesh=math.nan), "mesh"), (dict(mesh=math.inf), "mesh"),
    (dict(tail=-1.0), "tail"), (dict(tail=math.nan), "tail"), (dict(lattice=math.nan), "lattice"),
    (dict(coarse=(math.nan, 1e-3)), "coarse"), (dict(coarse=(1.0, -1e-3)), "coarse"),
    (dict(max_buckets=100), "max_buckets"),
])
@pytest.mark.parametrize("native", [True, False])
def test_bad_input_names_the_parameter(kw, name, native):
    loss = fastpld.PoissonSubsampledGaussian(1.0, 0.01).privacy_losses()["remove"]
    args = dict(mesh=1e-3, tail=1e-10) | kw
    with pytest.raises(ValueError, match=name):
        D.discretize_loss(loss, args.pop("mesh"), args.pop("tail"), native=native, **args)


def test_kernel_refuses_bad_arguments():
    x16, w16 = _kernels._GL16
    x8, w8 = _kernels._GL8
    ok = dict(q=0.01, v=1.0, sd=1.0, remove=True, cre=1e-11, lat=0.0, h=1e-3, i_lo=-10, i_hi=10, levels=())
    for bad in (dict(q=0.0), dict(q=1.0), dict(v=-1.0), dict(sd=0.0), dict(h=0.0), dict(i_hi=-11),
                dict(levels=((2, 1e-5),)), dict(levels=((9, 1e-5), (27, 1e-5))), dict(levels=((15, 1e-5), (9, 1e-5))),
                dict(levels=((243 * 3, 1e-5), (3, 1e-5))), dict(levels=((81, 1e-5),) * 5)):
        with pytest.raises(ValueError):
            _kernels._leaf.psg_leaf(*(ok | bad).values(), x16, w16, x8, w8)
    with pytest.raises(ValueError):
        _kernels.psg_window(0.01, 1.0, 1.0, True, 1e-10, np.zeros(0))


def test_fused_leaf_in_threads_matches_serial():
    from concurrent.futures import ThreadPoolExecutor
    losses = [fastpld.PoissonSubsampledGaussian(1.0, float(q)).privacy_losses()[d]
              for q in np.linspace(0.005, 0.02, 4) for d in ("remove", "add")]
    run = lambda loss: D.discretize_loss(loss, 3e-4, 1e-13, native=True, coarse=COARSE[1])  # noqa: E731
    serial = [run(loss) for loss in losses]
    with ThreadPoolExecutor(4) as pool:
        for a, b in zip(pool.map(run, losses * 2), serial * 2):
            _assert_bitwise(a, b)


@pytest.mark.parametrize("sigma", [0.1, 1.0, 10.0])
@pytest.mark.parametrize("remove", [True, False])
def test_moments_16_point_part_is_bitwise_the_moments(sigma, remove):
    # The fused leaf's partial mean and the mechanisms' moments are one kernel (fpld_psg_moments,
    # which replaced a one-node-at-a-time copy of itself); the planner's 16-point variant
    # (fpld_psg_moments16) must give its I1, I2 to the last bit.
    (x16, w16), (x8, w8) = _kernels._GL16, _kernels._GL8
    v = 1 / sigma**2
    sd = math.sqrt(v)
    rng = np.random.default_rng(7)
    for q in (1e-4, 0.01, 0.5, 0.99):
        for a, b in [sorted(rng.normal(0, 20 * sd + 3, 2)) for _ in range(30)] + [(-math.inf, math.inf), (2.0, 2.0)]:
            for lo, hi in ((a, b), (-math.inf, b), (a, math.inf)):
                full = _kernels._leaf.psg_moments(float(lo), float(hi), q, v, sd, remove, x16, w16, x8, w8)
                i16 = _kernels._leaf.psg_moments16(float(lo), float(hi), q, v, sd, remove, x16, w16)
                assert i16 == (full[0], full[3])
    with pytest.raises(ValueError):
        _kernels._leaf.psg_moments(math.nan, 1.0, 0.01, v, sd, remove, x16, w16, x8, w8)


@pytest.mark.parametrize("remove", [True, False])
def test_whole_line_moments_skip_no_bit(remove):
    # Over the whole line (the mean and variance the planner asks for) the compiled kernels evaluate only the panels
    # within a panel of 16 sd of the components' centres: the integrals and their bounds are bitwise those of every
    # panel (the same grid of panels, clipped to +-40 sd, as a finite interval at its ends evaluates them); the
    # numpy reference evaluates every panel, within test_leaf's tolerance of the kernel
    (x16, w16), (x8, w8) = _kernels._GL16, _kernels._GL8
    for sigma in (0.2, 0.5, 1.0, 3.0, 5.0, 30.0, 1000.0):
        v = 1 / sigma**2
        sd, h = math.sqrt(v), v / 2
        for q in (1e-6, 1e-3, 0.1, 0.5, 0.999):
            ends = (-h - 40 * sd, h + 40 * sd)
            whole = _kernels._leaf.psg_moments(-math.inf, math.inf, q, v, sd, remove, x16, w16, x8, w8)
            every = _kernels._leaf.psg_moments(*ends, q, v, sd, remove, x16, w16, x8, w8)
            assert whole == every
            assert _kernels._leaf.psg_moments16(-math.inf, math.inf, q, v, sd, remove, x16, w16) == (every[0], every[3])
            ref = _reference.psg_moments(-math.inf, math.inf, q, v, sd, remove, x16, w16, x8, w8)
            assert ref == _reference.psg_moments(*ends, q, v, sd, remove, x16, w16, x8, w8)


def test_ndtri_matches_scipy():
    """The windows' normal quantile (standard library) against scipy's: within 1e-15 relative from 1e-300 to
    1 - 1e-16, and scipy's values outside (0, 1)."""
    from scipy import special
    ps = np.concatenate([10.0 ** np.arange(-300, 0, 0.37), [0.3, 0.5, 0.7, 0.999999, 1 - 1e-16]])
    for p in ps:
        a, b = _kernels.ndtri(float(p)), float(special.ndtri(p))
        assert abs(a - b) <= 1e-15 * abs(b) + 1e-300, (p, a, b)
    assert _kernels.ndtri(0.0) == -math.inf and _kernels.ndtri(1.0) == math.inf
    assert math.isnan(_kernels.ndtri(-0.5)) and math.isnan(_kernels.ndtri(1.5)) and math.isnan(_kernels.ndtri(math.nan))
