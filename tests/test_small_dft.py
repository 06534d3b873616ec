"""Direct DFTs of few-bucket inputs, quarter-turn phases and lattice spectra (docs/roundoff.md, 3e-3f).

* The cos/sin table and the direct DFT against exact values (mpmath, 40 digits): every error
  within the bound the node charges (:func:`fastpld._kernels.dft_order`), in float64 and long
  double, compiled and numpy kernels bitwise equal (sums and products only, no maths library).
* ``quarter_angle`` / ``turn_quarters``: ``arg X = psi + q pi/2`` with ``|psi| <= pi/4``, and the
  turns exact.
* Nodes raising lattice-like PMFs (the Laplace loss at huge ``k``: two large atoms, a little mass
  between) to large powers, against exact powers (320-bit fixed point): within their charge on both
  backends, with the direct DFT in use, and charged several times less than with FFTs.
* End to end: Laplace at ``k = 2^30`` is certified at ``delta_error = 1e-7`` (direct DFTs) and ``1e-9``
  (lattice spectra) with the cheap plans, and pure DP at ``k = 2^20`` (two atoms) through direct-DFT
  nodes matches the binomial formula.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import mpmath
import numpy as np
import pytest

import fastpld
from fastpld import _fft, _kernels, resources
from fastpld.discretize import GridPMF
from oracles import exact_power, node_tv, pure_dp_delta
from fastpld.composition import budget, execute, powers
from fastpld.composition import lattice as lattice_mod, node as node_mod, precision as precision_mod

DTYPES = [np.float64, np.longdouble]
BACKENDS = [b for b in ("numpy", "native") if b in _fft.available_backends()]


def _u(dt):
    return float(np.finfo(dt).eps) / 2


def _mp(x):
    return mpmath.mpf(str(x)) if isinstance(x, np.longdouble) else mpmath.mpf(float(x))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("N", [2688, 97, 64, 1000])
def test_table_within_bound(dt, N):
    mpmath.mp.dps = 40
    c, s = _kernels.dft_table(N, dt)
    u = _u(dt)
    worst = 0.0
    for r in list(range(0, N, max(1, N // 97))) + [N // 8, N // 4, N // 2, 3 * N // 4, N - 1]:
        a = 2 * mpmath.pi * r / N
        worst = max(worst, float(abs(_mp(c[r]) - mpmath.cos(a))), float(abs(_mp(s[r]) - mpmath.sin(a))))
    assert worst <= _kernels.DFT_TABLE_ERR * u, worst / u
    assert worst > 0  # the comparison sees the table's rounding (it is not a float64 copy of an exact value)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("N", [2688, 97, 64])
def test_tables_relatively_accurate(dt, N):
    # the lattice spectra need relative accuracy near the zeros of sin and cos
    mpmath.mp.dps = 40
    c, s = _kernels.dft_table(N, dt)
    s2 = _kernels.sin2_table(N, dt)
    u = _u(dt)
    worst = 0.0
    for r in list(range(0, N, max(1, N // 61))) + [1, N // 4 - 1, N // 4 + 1, N // 2 - 1, N - 1]:
        a = 2 * mpmath.pi * r / N
        for got, ex in ((c[r], mpmath.cos(a)), (s[r], mpmath.sin(a))):
            if abs(ex) > 1e-30:  # (exact zeros at quarter turns: mpmath's pi leaves ~1e-41)
                worst = max(worst, float(abs((_mp(got) - ex) / ex)) / _kernels.DFT_TABLE_REL)
            else:
                assert got == 0
        ex2 = mpmath.sin(mpmath.pi * r / N) ** 2
        if abs(ex2) > 1e-30:
            worst = max(worst, float(abs((_mp(s2[r]) - ex2) / ex2)) / (2 * _kernels.DFT_TABLE_REL + 1))
        else:
            assert s2[r] == 0
    assert worst <= u, worst / u


def _inputs():
    rng = np.random.default_rng(7)
    lap = np.array([0.5, 1e-6, 2e-6, 1e-6, 0.49])  # two atoms, a little mass between
    skew = rng.random(21) ** 8
    flat = rng.random(32)
    return [lap / lap.sum(), skew / skew.sum(), flat / flat.sum(), np.array([1.0])]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("N", [2688, 97])
def test_small_dft_within_its_bound(dt, case, N):
    mpmath.mp.dps = 40
    p = _inputs()[case]
    cen = p.size // 2
    q, steps, err = _kernels.dft_order(p, cen, N, dt)
    assert np.all(np.diff(q.astype(np.float64)) >= 0)  # ascending
    cdt = np.clongdouble if dt is np.longdouble else np.complex128
    X = _kernels.small_dft(q, steps, N, np.empty(N // 2 + 1, dtype=cdt))
    if _kernels._core is not None:  # the numpy kernel: the same sums in the same order
        core, _kernels._core = _kernels._core, None
        try:
            Xp = _kernels.small_dft(q, steps, N, np.empty(N // 2 + 1, dtype=cdt))
        finally:
            _kernels._core = core
        assert np.array_equal(X, Xp)
    u = _u(dt)
    worst = 0.0
    for k in list(range(0, N // 2 + 1, max(1, N // 40))) + [N // 4, N // 2]:
        ex = mpmath.mpc(0)
        for j in range(p.size):
            ex += mpmath.mpf(float(p[j])) * mpmath.expjpi(-2 * mpmath.mpf(k * (j - cen)) / N)
        got = mpmath.mpc(_mp(X[k].real), _mp(X[k].imag))
        worst = max(worst, float(abs(got - ex)))
    assert worst <= err * u, (worst / u, err)
    # and the bound beats the FFT's 12 u log2 N for these inputs
    assert err < 6 * math.ceil(math.log2(N)) or case == 2


def test_quarter_angle_and_turns():
    rng = np.random.default_rng(3)
    X = rng.normal(size=4000) + 1j * rng.normal(size=4000)
    X = np.concatenate([X, [1, -1, 1j, -1j, 0, 1 + 1j, -1 - 1j, 1 - 1j, -1 + 1j]]).astype(np.complex128)
    psi, q = _kernels.quarter_angle(X)
    assert np.all(np.abs(psi) <= np.pi / 4 * (1 + 1e-15))
    d = np.angle(np.exp(1j * (psi + q * np.pi / 2 - np.angle(X))))
    assert np.max(np.abs(d)) < 1e-15
    for Q in range(4):
        P = X.copy()
        _kernels.turn_quarters(P, np.full(X.size, Q, dtype=np.uint8))
        assert np.array_equal(P, X * 1j**Q)  # swaps and negations: exact


def _assert_lattice_close(a, b, u):
    """Two evaluations of composition.lattice._lattice_spectrum's ``(F, L, Phi, dL, dPhi, Q, up)``: one with libm's
    log1p/log/asin/atan2/hypot (the compiled kernel), one with numpy's (SIMD kernels on AVX-512 machines),
    so not bit for bit.

    * ``L``, ``Phi``: each is within its charge ``dL``, ``dPhi`` of the exact value (docs/roundoff.md 3f),
      so the two differ by at most the sum of their charges; a wrong lag, table index or dropped input
      moves them by orders of magnitude more (the charges are ~1e-13 of them).
    * ``dL``, ``dPhi``, ``up`` (the bounds themselves, float64): per frequency a sum over the inputs of terms
      each with at most two maths-library calls (4 ulp = 8 u64 each, docs/roundoff.md section 7) and a few
      roundings of products and sums of non-negative terms (``up``'s terms are <= 0 up to ``(2 n + 3) u``):
      within ``64 u64`` of each other relatively, a few ulps, where a dropped term of ``eta`` or of the error
      sums changes them by percents.
    * ``Q``: quadrants from comparisons of the same DFT components (sums and products only): equal.
    """
    u64 = 2.0**-53
    F, L, P, dL, dP, Q, up = a
    assert F == b[0] and np.array_equal(np.asarray(Q), np.asarray(b[5]))
    for x, y, dx, dy in ((L, b[1], dL, b[3]), (P, b[2], dP, b[4])):
        x, y = np.asarray(x, np.longdouble), np.asarray(y, np.longdouble)
        fin = np.isfinite(x)
        assert np.array_equal(fin, np.isfinite(y)) and np.array_equal(x[~fin], y[~fin])
        assert np.all(np.abs(x[fin] - y[fin]) <= (np.asarray(dx) + np.asarray(dy))[fin])
    for x, y in ((dL, b[3]), (dP, b[4]), (up, b[6])):
        x, y = np.asarray(x), np.asarray(y)
        fin = np.isfinite(x)
        assert np.array_equal(fin, np.isfinite(y)) and np.array_equal(x[~fin], y[~fin])
        assert np.all(np.abs(x[fin] - y[fin]) <= 64 * u64 * np.maximum(np.abs(x[fin]), np.abs(y[fin])) + 1e-300)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("skip", [None, 40.0])
def test_lattice_spectrum_kernel_equals_reference(dt, skip):
    # the compiled pass (_core.lattice_terms) against composition.lattice._lattice_spectrum's numpy code, within the
    # bounds
    # of _assert_lattice_close, on inputs whose sum is not a float64 (a long double scalar argument would
    # silently become one); the compiled pass with scratch arrays bitwise equal to the compiled pass
    if _kernels._core is None:
        pytest.skip("compiled core not built")
    rng = np.random.default_rng(11)
    ins, dft = [], []
    N = 2000
    for n, m in ((21, 255), (9, 1024)):
        p = rng.random(n) ** 4
        p[0] = p[-1] = 1.0
        p /= p.sum()
        cen = n // 2
        ins.append((p, cen, m))
        dft.append(_kernels.dft_order(p, cen, N, dt))
    for k in (1, 2):
        a = lattice_mod._lattice_spectrum(ins[:k], dft[:k], N, dt, native=True, skip_log=skip)
        a = (a[0],) + tuple(np.array(x, copy=True) for x in a[1:])
        b = lattice_mod._lattice_spectrum(ins[:k], dft[:k], N, dt, native=False, skip_log=skip)
        _assert_lattice_close(a, b, _u(dt))
        # the thread's scratch arrays (garbage before the call: every entry is assigned) give the same
        for name in ("L", "Phi", "Q", "dL", "dP", "up", "absL", "absP", "pre"):
            w = lattice_mod._scratch("lat." + name, N // 2 + 1, np.uint8 if name == "Q" else dt if name in ("L", "Phi") else np.float64)
            w[:] = 7
        c = lattice_mod._lattice_spectrum(ins[:k], dft[:k], N, dt, native=True, skip_log=skip, scratch=True)
        for x, y in zip(c[1:], a[1:]):  # the same kernel: bitwise
            assert np.array_equal(np.asarray(x), np.asarray(y))
        assert np.shares_memory(c[1], lattice_mod._scratch("lat.L", N // 2 + 1, dt))


def test_scratch_reuse_and_bounds():
    a = lattice_mod._scratch("test.x", 5000, np.float64)
    b = lattice_mod._scratch("test.x", 3000, np.float64)
    assert a.size == 5000 and b.size == 3000 and np.shares_memory(a, b)
    c = lattice_mod._scratch("test.x", 3000, np.longdouble)  # another dtype: a new array
    assert c.dtype == np.longdouble and not np.shares_memory(c, a)
    big = lattice_mod._scratch("test.big", lattice_mod._SCRATCH_MAX + 1, np.float64)  # too large to keep
    assert big.size == lattice_mod._SCRATCH_MAX + 1 and ("scratch", "test.big") not in resources.workspace()
    import threading
    other = []
    t = threading.Thread(target=lambda: other.append(lattice_mod._scratch("test.x", 5000, np.float64)))
    t.start()
    t.join()
    assert not np.shares_memory(other[0], lattice_mod._scratch("test.x", 5000, np.longdouble))
    assert not np.shares_memory(other[0], a)


@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_abs_rfft_is_the_modulus_of_the_folded_rfft(backend):
    if backend not in _fft.available_backends():
        pytest.skip("native backend not built")
    be = _fft.resolve(backend)
    rng = np.random.default_rng(12)
    p = rng.random(37)
    for N, cen in ((64, 5), (3000, 36)):
        buf = np.zeros(N)
        np.add.at(buf, (np.arange(p.size) - cen) % N, p)
        ref = np.abs(np.fft.rfft(buf))
        out = np.full(N // 2 + 1, np.nan)
        assert be.abs_rfft(p, cen, N, out) is out
        # (any FFT within the error model: 12 u log2 N of ||x||_2 per entry at most)
        assert np.max(np.abs(out - ref)) <= 12 * 2.0**-53 * np.log2(N) * np.sqrt(N) * np.linalg.norm(p)


@pytest.mark.parametrize("dt", DTYPES)
def test_lattice_power_kernel_equals_reference(dt):
    # _core.lattice_power (the power and its bound in one pass) against composition.lattice._lattice_amp and the numpy
    # power of composition.powers._lattice_power_numpy: the same powers bitwise, the bound's sums up to exp's last bits
    if _kernels._core is None:
        pytest.skip("compiled core not built")
    N = 3000
    p = np.array(_lattice(1e-4) + [1e-6] * 3)
    p /= p.sum()
    ins = [(p, 2, 1021)]
    dft = [_kernels.dft_order(p, 2, N, dt)]
    lat = lattice_mod._lattice_spectrum(ins, dft, N, dt, native=True, skip_log=40.0)
    assert np.isinf(np.asarray(lat[1], dtype=np.float64)).any() and np.isfinite(np.asarray(lat[1], np.float64)).any()
    u = _u(dt)
    cdt = np.clongdouble if np.dtype(dt) == np.longdouble else np.complex128
    Pc = np.full(N // 2 + 1, np.nan, dtype=cdt)
    # as computed (the live frequencies dominate the bound), and with every frequency skipped (the crude
    # bound e^up alone)
    skipped = (lat[0], np.full_like(lat[1], -np.inf)) + tuple(lat[2:])
    for lt in (skipped, lat):
        e2sq, p2sq = _kernels._core.lattice_power(lt[1], lt[2], lt[5], lt[3], lt[4], lt[6], u, N, Pc)
        lp, amp = lattice_mod._lattice_amp(lt, u)
        w = np.full(amp.size, 2.0)
        w[0] = w[-1] = 1.0  # (N even)
        assert e2sq == pytest.approx(float(np.sum(w * amp**2)), rel=1e-12, abs=0)
        assert p2sq == pytest.approx(float(np.sum(w * np.exp(2 * lp))), rel=1e-12, abs=0)
        l1 = math.sqrt(e2sq) + 12.0 * u * math.ceil(math.log2(N)) * math.sqrt(p2sq)
        ref_l1, _, _ = powers._lattice_power_numpy(_fft.resolve("numpy"), lt, N, dt, u)
        assert l1 == pytest.approx(ref_l1, rel=1e-12, abs=0)
    # the reference's power (composition.powers._lattice_power_numpy's), before its inverse FFT: numpy's exp/cos/sin
    # (SIMD on AVX-512 machines) against libm's, so not bit for bit; each is within the polar evaluation's
    # charge 8 u (5 + |Phi| + |L|) e^L of exp(L) cis(Phi) i^Q (docs/roundoff.md 3f and 7), so the two within
    # twice that (a wrong quarter turn or phase moves them by ~|P|)
    ref = _kernels.polar_power(lat[1], lat[2], lat[5])
    Lf, Pf = np.asarray(lat[1], np.float64), np.asarray(lat[2], np.float64)
    live = np.isfinite(Lf)
    assert np.array_equal(Pc[~live], ref[~live]) and np.all(Pc[~live] == 0)
    pol = 8 * u * (5 + np.abs(Pf[live]) + np.abs(Lf[live])) * np.exp(Lf[live])
    assert np.all(np.abs((Pc[live] - ref[live]).astype(np.clongdouble)) <= 2 * pol)
    # bad sizes are refused, not read out of bounds
    with pytest.raises(ValueError, match="lattice_power"):
        _kernels._core.lattice_power(lat[1], lat[2], lat[5], lat[3], lat[4], lat[6], u, N + 2, Pc)


@pytest.mark.parametrize("dt", DTYPES)
def test_skipped_frequencies_within_their_bound(dt):
    # every frequency the crude float64 pass skips has |X / S|^m <= e^up (up = -skip_log, shared) against
    # the exact DFT (mpmath, 30 digits), and so has every live frequency's crude bound; the frequencies
    # just past the threshold are live (the threshold is not loose by orders of magnitude)
    N, m, skip_log = 2048, 1021, 40.0
    p = np.array(_lattice(1e-4) + [1e-6] * 3)
    p /= p.sum()
    dft = [_kernels.dft_order(p, 2, N, dt)]
    for native in ([True, False] if _kernels._core is not None else [False]):
        F, L, Phi, dL, dP, Q, up = lattice_mod._lattice_spectrum([(p, 2, m)], dft, N, dt, native=native, skip_log=skip_log)
        dead = ~np.isfinite(np.asarray(L, dtype=np.float64))
        assert dead.any() and (~dead).any()
        assert np.all(up[dead] == -skip_log)
        mpmath.mp.dps = 30
        S = mpmath.fsum(_mp(x) for x in p)
        worst_dead, best_live = -math.inf, math.inf
        for k in range(0, F, 7):
            th = 2 * mpmath.pi * k / N
            X = mpmath.fsum(_mp(x) * mpmath.expj(-th * ((j - 2) % N)) for j, x in enumerate(p))
            lx = float(m * mpmath.log(abs(X) / S)) if abs(X) > 0 else -math.inf
            assert lx <= up[k] + 1e-9 * abs(up[k])
            if dead[k]:
                worst_dead = max(worst_dead, lx)
            else:
                best_live = min(best_live, lx)
        assert worst_dead < -skip_log and best_live > -skip_log - 1.0


def _lattice(eps_mid=1e-5):
    # Laplace-like: atoms 2 buckets either side of the centre, a little continuous mass between
    return [0.5 - eps_mid, eps_mid / 3, eps_mid / 3, eps_mid / 3, 0.5 - eps_mid]


def _run(p, m, fp_budget, backend):
    pmf = GridPMF(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    budgets = budget._Budgets(eps=0.1, delta=fp_budget, eta=0.0, trunc=0.0, wrap=1e-30, fp=fp_budget)
    node = SimpleNamespace(label="test")
    return node_mod._run_node(node, [(pmf, m)], 1, budgets, 1, _fft.resolve(backend), 1 << 22)


# (powers not multiples of 4: the quarter turns of the phase matter)
LATTICE_CASES = [(_lattice(), 255), (_lattice(1e-3), 1023), ([0.3, 0.0, 0.7], 4097), (_lattice(), 258)]


@pytest.fixture(scope="module")
def exact_ld():
    return {i: exact_power(p, m, dtype=np.longdouble) for i, (p, m) in enumerate(LATTICE_CASES)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("precision", ["float64", "longdouble"])
@pytest.mark.parametrize("case", range(len(LATTICE_CASES)))
def test_lattice_node_within_its_charge(exact_ld, monkeypatch, case, precision, backend):
    p, m = LATTICE_CASES[case]
    # float64: a budget above the plain FFT estimate (float64 is tried, the round-off matters)
    fp_budget = 2 * precision_mod._predicted_fp_plain(1, m, 13) if precision == "float64" else 1e-16
    out, info = _run(p, m, fp_budget, backend)
    assert info["dft"] and info["lattice"]
    assert np.dtype(info["dtype"]).name == ("float64" if precision == "float64" else np.dtype(np.longdouble).name)
    ref = exact_ld[case]
    tv = node_tv(out, ref)
    assert tv <= info["fp"] + info["wrap"], (tv, info)
    # the same node with FFTs (and the low-frequency series) charges more: in long double many times
    # more; in float64 both are near the inverse FFT's floor (or the FFT node no longer fits float64)
    monkeypatch.setattr(precision_mod, "_DFT_MAX_N", 0)
    _, info_fft = _run(p, m, fp_budget, backend)
    assert not info_fft["dft"] and not info_fft["lattice"]
    if info_fft["dtype"] == info["dtype"]:
        # (float64: 1.19x less since the polar evaluation is charged for 4-ulp maths libraries, 1.2x before)
        assert info["fp"] * (1.1 if precision == "float64" else 20) < info_fft["fp"], (info["fp"], info_fft["fp"])
    else:
        assert precision == "float64" and np.dtype(info_fft["dtype"]) == np.dtype(np.longdouble)


@pytest.mark.parametrize("case", range(len(LATTICE_CASES)))
def test_lattice_node_backends_agree(case):
    if "native" not in BACKENDS:
        pytest.skip("native backend not built")
    p, m = LATTICE_CASES[case]
    a, ia = _run(p, m, 1e-16, "numpy")
    b, ib = _run(p, m, 1e-16, "native")
    assert ia["fp"] == pytest.approx(ib["fp"], rel=1e-6, abs=0)
    # (round-off-level end entries may be trimmed on one side only: compare on the common support)
    lo = int(round(min(a.offset, b.offset)))
    hi = int(round(max(a.offset + a.probs.size, b.offset + b.probs.size)))
    fa = np.zeros(hi - lo, dtype=np.longdouble)
    fb = np.zeros(hi - lo, dtype=np.longdouble)
    fa[int(round(a.offset)) - lo:][:a.probs.size] = a.probs
    fb[int(round(b.offset)) - lo:][:b.probs.size] = b.probs
    assert 0.5 * float(np.abs(fa - fb).sum()) <= ia["fp"] + ib["fp"]


@pytest.mark.parametrize("delta_error,arity,lattice,limit", [(1e-7, 256, False, 1.5e-8), (1e-9, 1024, True, 1e-9)])
def test_laplace_2_30_first_node_charges(delta_error, arity, lattice, limit):
    # the first node's lattice powers (2^30 copies in all) used to charge ~9e-8 of round-off, which
    # refused every plan but two_stage at delta_error 1e-7; with direct DFTs they charge ~1.3e-8 (~9e-9 before
    # the polar evaluation was charged for maths libraries within 4 ulp, docs/roundoff.md section 7), and
    # with the lattice spectra (taken where that would be more than a tenth of delta_error) ~3e-10,
    # so that the cheap recursive plans are certified at delta_error 1e-9
    seen = []
    run_node = node_mod._run_node

    def spy(node, inputs, inst, *a, **kw):
        out, info = run_node(node, inputs, inst, *a, **kw)
        seen.append((inst, info["dft"], info["lattice"], inst * info["fp"]))
        return out, info

    mp = pytest.MonkeyPatch()
    mp.setattr(execute, "_run_node", spy)
    try:
        pld = fastpld.compose(fastpld.Laplace(138694.82633119353), 2**30, eps_error=0.1, delta_error=delta_error,
                              method="recursive", arity=arity, threads=1)
    finally:
        mp.undo()
    first = [s for s in seen if s[0] == 2**30 // arity]
    assert first and all(d and lat == lattice for _, d, lat, _ in first)
    assert max(fp for *_, fp in first) < limit
    for d in pld.directions.values():
        assert d.eps_spent <= 0.1 and d.delta_spent <= delta_error
    b = pld.delta(1.0)
    assert b.lower <= 1e-6 <= b.upper  # the noise was calibrated to delta(1.0) = 1e-6


@pytest.mark.parametrize("delta_error,lattice", [(1e-9, False), (1e-11, True)])
def test_pure_dp_2_20_through_direct_dfts(delta_error, lattice):
    seen = []
    run_node = node_mod._run_node

    def spy(node, inputs, inst, *a, **kw):
        out, info = run_node(node, inputs, inst, *a, **kw)
        seen.append((info["dft"], info["lattice"]))
        return out, info

    eps0, k = 0.002, 2**20
    mp = pytest.MonkeyPatch()
    mp.setattr(execute, "_run_node", spy)
    try:
        pld = fastpld.compose(fastpld.PureDP(eps0), k, eps_error=0.05, delta_error=delta_error, method="recursive",
                              arity=1024, threads=1)
    finally:
        mp.undo()
    assert (True, lattice) in seen
    eps = np.array([0.5, 1.0, 2.0, 3.0, 4.0])
    exact = np.array([pure_dp_delta(e, eps0, k) for e in eps])
    b = pld.delta(eps)
    assert np.all(b.lower <= exact) and np.all(exact <= b.upper), (b, exact)
