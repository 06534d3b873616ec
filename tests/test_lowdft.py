"""The directly summed low frequencies of float64 nodes (fastpld._lowdft, docs/roundoff.md section 3i).

The summed values against exact DFTs (mpmath, 40 digits) within their stated bound, on the kernel and its numpy
reference; the frequency count against its rule; the direct power's forward term at those frequencies; and whole
nodes against exact powers (integer arithmetic, ``oracles.exact_power``): the measured distance within the charge,
the charge far below the plain FFT's.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import mpmath
import numpy as np
import pytest

from fastpld import _fft, _kernels, _lowdft
from fastpld._dft_tables import dft_table
from fastpld.composition import budget, node as node_mod, precision as precision_mod, roundoff
from fastpld.discretize import GridPMF
from oracles import exact_power, node_tv

NATIVE = "native" in _fft.available_backends()
IMPLS = [True, False] if NATIVE else [False]


def _exact_dft(p, cen, N, K):
    mpmath.mp.dps = 40
    out = []
    for f in range(K):
        acc = mpmath.mpc(0)
        for j, x in enumerate(p):
            if x:
                acc += mpmath.mpf(float(x)) * mpmath.expj(-2 * mpmath.pi * f * ((j - cen) % N) / N)
        out.append(acc)
    return out


def _mpf_ld(x):
    """A long double as an mpmath number, exactly (two float64 parts)."""
    hi = float(x)
    return mpmath.mpf(hi) + mpmath.mpf(float(x - np.longdouble(hi)))


def _placed(p, cen, N):
    buf = np.zeros(N)
    np.add.at(buf, (np.arange(p.size) - cen) % N, p)
    return np.fft.rfft(buf)


# (n, N, cen, m): odd and composite lengths, a centre outside the input, an input longer than N (folded)
SPECTRA = [(461, 2560, 230, 50), (300, 1001, -7, 20), (90, 243, 95, 125), (700, 512, 350, 8), (37, 4096, 0, 400)]


def _spectrum_input(n, N, zeros):
    """A bump of ``n`` points, a share ``zeros`` of them 0 (0.7: a leaf's thin-tail cells, the compiled sums' sparse
    path; 0.1: its dense one)."""
    rng = np.random.default_rng(n + N)
    x = np.linspace(-3, 3, n)
    p = np.exp(-x * x / 2) * (1 + 0.5 * rng.random(n))
    p[rng.random(n) < zeros] = 0.0
    return p / p.sum()


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("zeros", [0.1, 0.7])
@pytest.mark.parametrize("n,N,cen,m", SPECTRA)
def test_low_dft_within_its_bound(native, n, N, cen, m, zeros):
    p = _spectrum_input(n, N, zeros)
    X = _placed(p, cen, N)
    g = 12 * roundoff._U64 * math.ceil(math.log2(N))
    c, s = dft_table(N, np.float64)
    tau = _lowdft._tau(m, n, m)
    XL = np.zeros(48, dtype=np.longdouble)
    K = _kernels.low_dft(p, cen, N, c, s, m, g, tau, 24, X, native, XL)
    assert 1 <= K <= min(24, N // 2 + 1)
    # K: the first frequency from 1 where the FFT's amplified error is at most tau (the FFT's values past it)
    r = np.abs(_placed(p, cen, N))
    amp = m * g * (r + g) ** (m - 1)
    expect = next((k for k in range(1, min(24, N // 2 + 1)) if amp[k] <= tau), min(24, N // 2 + 1))
    assert abs(K - expect) <= 1 and (K == expect or abs(amp[min(K, expect)] - tau) < 1e-3 * tau)
    bound = _lowdft.low_dft_error(n)
    exact = _exact_dft(p, cen, N, K)
    mpmath.mp.dps = 40
    # (the long double sums within the bound; their float64 roundings in X within u64 of them more)
    err = max(float(abs(mpmath.mpc(_mpf_ld(XL[2 * f]), _mpf_ld(XL[2 * f + 1])) - exact[f])) for f in range(K))
    assert err <= bound, (err, bound)
    err64 = max(abs(complex(X[f]) - complex(exact[f])) - roundoff._U64 * abs(X[f]) for f in range(K))
    assert err64 <= bound, (err64, bound)
    # the FFT's own values stand past K; the summed ones are far closer than the FFT's bound g
    assert bound < g / 3


@pytest.mark.skipif(not NATIVE, reason="native backend not built")
def test_low_dft_kernel_matches_reference():
    rng = np.random.default_rng(3)
    for n, N, cen, m in SPECTRA:
        p = rng.random(n) ** 4
        p /= p.sum()
        X0 = _placed(p, cen, N)
        g = 12 * roundoff._U64 * math.ceil(math.log2(N))
        c, s = dft_table(N, np.float64)
        a, b = X0.copy(), X0.copy()
        ka = _kernels.low_dft(p, cen, N, c, s, m, g, 0.0, 16, a, True)
        kb = _kernels.low_dft(p, cen, N, c, s, m, g, 0.0, 16, b, False)
        assert ka == kb == min(16, N // 2 + 1)  # (tau 0: every frequency up to kmax)
        assert np.max(np.abs(a[:ka] - b[:kb])) <= 2 * _lowdft.low_dft_error(n)
        assert np.array_equal(a[ka:], X0[ka:])  # (the FFT's values past K untouched)
    with pytest.raises(ValueError):
        _kernels._core.low_dft(np.ones(3), 0, 16, np.ones(16), np.ones(15), 8.0, 1e-15, 0.0, 4,
                               np.zeros(9, complex))


@pytest.mark.skipif(not NATIVE, reason="native backend not built")
def test_power_direct_low_frequencies_weighted():
    """Below ``klow`` the forward term's weight is ``rho m / (|X| + g)`` (the summed values' bound ``rho g``),
    on the first input (assigned) and on later ones (added); the power itself is unchanged."""
    rng = np.random.default_rng(7)
    F = 33
    X = rng.random(F) + 1j * rng.random(F)
    g, m = 1e-14, 9
    out = {}
    for klow, rho in ((0, 1.0), (5, 0.25)):
        P = np.empty(F, complex)
        B, D = np.empty(F), np.empty(F)
        _kernels.power_direct(X, m, P, B, D, g, True, klow=klow, rho=rho)
        _kernels.power_direct(X, 3, P, B, D, g, False, klow=klow, rho=rho)
        out[klow] = (P.copy(), B.copy(), D.copy())
    P0, B0, D0 = out[0]
    P1, B1, D1 = out[5]
    assert np.array_equal(P0, P1) and np.array_equal(B0, B1) and np.array_equal(D0[5:], D1[5:])
    want = 0.25 * (m + 3) / (np.abs(X[:5]) + g)
    np.testing.assert_allclose(D1[:5], want, rtol=1e-14)
    with pytest.raises(ValueError):
        _kernels.power_direct(X, m, P, B, D, g, True, klow=2, rho=1.5)
    # with the long double values XL: below klow the powers in long double, the product in long double, rounded
    # once per input (the reference's arithmetic); above it the float64 kernel's
    ld = np.clongdouble
    xl = X[:5].astype(ld) * (1 + np.longdouble(2.0) ** -60)
    XL = np.empty(10, dtype=np.longdouble)
    XL[0::2], XL[1::2] = xl.real, xl.imag
    P2 = np.empty(F, complex)
    _kernels.power_direct(X, m, P2, B, D, g, True, klow=5, rho=0.25, XL=XL)
    _kernels.power_direct(X, 3, P2, B, D, g, False, klow=5, rho=0.25, XL=XL)
    first = (xl ** m).astype(complex)  # (numpy's power of a complex long double: equal to long double accuracy)
    want = (first.astype(ld) * xl ** 3).astype(complex)
    np.testing.assert_allclose(P2[:5], want, rtol=1e-15)
    assert np.array_equal(P2[5:], P0[5:])
    # the bound: below klow the products' rounding is c1_low
    se_a, _ = _kernels.power_direct_bound(B, D, g, m + 3, roundoff._U64, 2 * (F - 1), -1, 0, 0.0)
    se_b, _ = _kernels.power_direct_bound(B, D, g, m + 3, roundoff._U64, 2 * (F - 1), -1, 5, 0.0)
    c1 = 4.01 * (m + 2) * roundoff._U64
    amp = lambda c: (g * D[:5] + c) * B[:5] * (1 + 1e-9) + (m + 3) * 1e-300
    w = np.array([1.0, 2, 2, 2, 2])
    assert se_a - se_b == pytest.approx(float(np.sum(w * (amp(c1) ** 2 - amp(0.0) ** 2))), rel=1e-9)


def _node(p, m, fp_budget, backend):
    pmf = GridPMF(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    budgets = budget._Budgets(eps=0.1, delta=1.0, eta=0.0, trunc=0.0, wrap=1e-30, fp=fp_budget)
    return node_mod._run_node(SimpleNamespace(label="test"), [(pmf, m)], 1, budgets, 1, _fft.resolve(backend),
                              1 << 22)


def _bump(n, skew):
    x = np.linspace(-4, 4, n)
    p = np.exp(-x * x / 2) * (1 + skew * np.tanh(x))
    return p / p.sum()


# (more than 32 buckets each: fewer take direct DFTs at every frequency, docs/roundoff.md 3e)
# (and a round-off budget the plain FFT's charge exceeds, the summed frequencies' does not; powers below ~100, where
# the direct power's own rounding, 4 M u, keeps the charge below twice the series')
NODES = [(_bump(40, 0.0), 64, 1e-12), (_bump(60, 0.6), 50, 1e-12), (_bump(45, -0.4), 90, 1e-12)]


@pytest.fixture(scope="module")
def exact_nodes():
    return {i: exact_power(p, m) for i, (p, m, _) in enumerate(NODES)}


@pytest.mark.parametrize("backend", ["numpy", "native"])
@pytest.mark.parametrize("case", range(len(NODES)))
def test_lowdft_node_within_its_charge(exact_nodes, case, backend, monkeypatch):
    if backend not in _fft.available_backends():
        pytest.skip("native backend not built")
    p, m, fp_budget = NODES[case]
    out, info = _node(p, m, fp_budget, backend)
    # (the plain FFT's charge would not fit the budget: the node sums its low frequencies, in float64)
    assert info["lowdft"] and info["series"] == 0 and np.dtype(info["dtype"]) == np.float64
    tv = node_tv(out, exact_nodes[case])
    assert tv <= info["fp"] + info["wrap"], (tv, info)
    plain = precision_mod._predicted_fp_plain(1, m, math.ceil(math.log2(info["N"])))
    assert info["fp"] < plain / 4, (info["fp"], plain)
    # ... where the same node on the FFT's values alone is charged its m-fold amplification
    monkeypatch.setattr(_lowdft, "plan", lambda *a, **k: None)
    monkeypatch.setattr(node_mod, "_series_spectrum", lambda *a, **k: None)
    out2, info2 = _node(p, m, 1.0, backend)  # (a budget every charge fits: float64, plain)
    assert not info2["lowdft"] and np.dtype(info2["dtype"]) == np.float64
    assert node_tv(out2, exact_nodes[case]) <= info2["fp"] + info2["wrap"]
    assert info["fp"] < info2["fp"] / 3, (info["fp"], info2["fp"])



def _blocked_sums(p, cen, N, c, s, K):
    """The compiled sums' arithmetic, emulated in long double scalars: per frequency, blocks of 64 indices summed in
    index order (every term, zeros too), then the blocks' sums in order."""
    ld = np.longdouble
    out = []
    for f in range(K):
        re = im = ld(0)
        for a in range(0, p.size, 64):
            br = bi = ld(0)
            for j in range(a, min(a + 64, p.size)):
                r = ((j - cen) * f) % N
                br += ld(p[j]) * ld(c[r])
                bi -= ld(p[j]) * ld(s[r])
            re += br
            im += bi
        out.append((re, im))
    return out


@pytest.mark.skipif(not NATIVE, reason="native backend not built")
@pytest.mark.parametrize("n,N,cen,m", SPECTRA)
def test_sparse_low_dft_is_the_dense_sums(n, N, cen, m):
    """The kernel's sparse path (at most three quarters of the entries non-zero) sums only the non-zero terms, in the
    dense loop's blocks and order: bitwise its sums (a zero term adds nothing), whichever path runs."""
    c, s = dft_table(N, np.float64)
    g = 12 * roundoff._U64 * math.ceil(math.log2(N))
    for zeros in (0.7, 0.1):
        p = _spectrum_input(n, N, zeros)
        X = _placed(p, cen, N)
        XL = np.zeros(16, dtype=np.longdouble)
        K = _kernels.low_dft(p, cen, N, c, s, m, g, 0.0, 8, X, True, XL)  # (tau 0: all 8 frequencies)
        assert K == min(8, N // 2 + 1)
        want = _blocked_sums(p, cen, N, c, s, K)
        for f, (re, im) in enumerate(want):
            assert XL[2 * f] == re and XL[2 * f + 1] == im, (zeros, f, XL[2 * f], re, XL[2 * f + 1], im)
            assert X[f] == complex(float(re), float(im))

def test_lowdft_plan_defers_to_the_series_for_wide_inputs():
    """An input whose low frequencies would cost more than half a forward FFT is left to the series: a wide input
    with a narrow peak (a slowly decaying spectrum: many frequencies matter), not a wide bump (few do)."""
    x = np.arange(3000) - 1500.0
    p = np.exp(-x * x / 8) + 1e-9
    p /= p.sum()
    assert _lowdft.plan([(p, 1500, 50)], 4096) is None
    k = _lowdft.plan([(_bump(3000, 0.0), 1500, 50)], 4096)
    assert k is not None and 2 <= k[0] <= 0.5 * 4096 * 12 / 3000
    assert _lowdft.plan([(_bump(3000, 0.0), 1500, 4)], 4096) is None  # (a small power: nothing to sum)


@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_large_powers_keep_the_series(backend):
    """A single large power (x1000): the direct power's rounding, 4 u per copy, would charge ~15 times the series'
    prediction, so the node keeps the series (the GLW plans' single nodes)."""
    if backend not in _fft.available_backends():
        pytest.skip("native backend not built")
    out, info = _node(_bump(40, 0.0), 1000, 1e-11, backend)
    assert not info["lowdft"] and info["series"] > 0


@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_composition_with_low_frequencies_brackets_the_gaussian(backend, monkeypatch, separate_gaussians):
    """A whole composition whose nodes sum their low frequencies (Gaussian(20) x 1000, dominance at the default
    accuracy): its certified intervals contain the analytic Gaussian's delta(eps) and epsilon(delta)."""
    if backend not in _fft.available_backends():
        pytest.skip("native backend not built")
    import fastpld
    from oracles import assert_brackets_gaussian
    calls = []
    orig = _lowdft.spectrum
    monkeypatch.setattr(_lowdft, "spectrum", lambda *a, **k: calls.append(1) or orig(*a, **k))
    fastpld.clear_caches()
    pld = fastpld.compose(fastpld.Gaussian(20.0), 1000, backend=backend)
    assert calls  # (the path under test ran)
    assert_brackets_gaussian(pld, math.sqrt(1000) / 20.0, [0.25, 1.0, 3.0, 6.0], (1e-3, 1e-6, 1e-9))


@pytest.mark.parametrize("native", IMPLS)
def test_dft_at_is_the_spectrum(native):
    """One value of the placed input's spectrum in float64 (the plan's check), against numpy's FFT."""
    p = _spectrum_input(700, 2048, 0.7)
    c, s = dft_table(2048, np.float64)
    X = _placed(p, 350, 2048)
    for k in (0, 1, 17, 300, 1024):
        assert abs(_kernels.dft_at(p, 350, 2048, c, s, k, native) - X[k]) <= 1e-14


def _thin_tails(n, bulk_sd, every):
    """A narrow bulk (``bulk_sd`` points) in wide tails holding mass only every ``every`` points: a leaf's thin-tail
    cells, whose variance the tails inflate while the spectrum decays as slowly as the bulk's."""
    x = np.arange(n) - n // 2
    p = np.exp(-0.5 * (x / bulk_sd) ** 2)
    tail = (np.abs(x) > 6 * bulk_sd) & (x % every == 0)
    p[tail] = 2e-3 * np.exp(-np.abs(x[tail]) / (n / 6))
    p[(np.abs(x) > 6 * bulk_sd) & ~tail] = 0.0
    return p / p.sum()


def test_lowdft_plan_checks_the_spectrum_past_its_count(monkeypatch):
    """The count estimated from the variance is checked at the first frequency past it: an input whose bulk is
    narrower than its variance says (its spectrum still near 1 there) gets none, where the cost cap -- counted in
    non-zero entries -- alone would have let it sum too few frequencies."""
    p = _thin_tails(4001, 3.0, 32)
    assert np.count_nonzero(p) < p.size / 4
    N = 8192
    assert _lowdft.plan([(p, 2000, 50)], N) is None
    monkeypatch.setattr(_lowdft, "_CHECK_SLACK", math.inf)
    k = _lowdft.plan([(p, 2000, 50)], N)
    assert k is not None and k[0] < 0.5 * N * 13 / np.count_nonzero(p)


def _psg_leaf_node(sigma, q, m, inst):
    """A dominating leaf of PSG(sigma, q)'s remove loss at the mesh the dominance planner takes at the default
    accuracy for m x inst copies, and the budgets of its chain (delta_error 1e-10)."""
    import fastpld
    from fastpld.dominance import leaves
    fastpld.clear_caches()
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(sigma, q), m * inst, rel_error=1e-3)
    h = pld.directions["remove"].stages[0].mesh
    loss = fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses()["remove"]
    leaf = leaves.ctd_leaf(loss, h, 1e-15, native=NATIVE, copies=m * inst)
    budgets = budget._Budgets(eps=0.1, delta=1e-10, eta=1e-10, trunc=3e-11, wrap=3e-11, fp=4e-11)
    return leaf, budgets


@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_lowdft_takes_a_node_headed_for_long_double(backend, monkeypatch):
    """The x50 node of PSG(0.7, 0.01) x 1e3's leaf (thin-tail cells: a fifth of its points hold mass) is too wide
    for the series, and its plain float64 charge does not fit: long double, unless its low frequencies are summed.
    Summed over the non-zero entries they are cheap, and the node runs in float64, charged near its prediction; its
    output within both charges of the long double node's.  Where the charge would exceed twice its prediction, the
    node runs in long double after all."""
    if backend not in _fft.available_backends():
        pytest.skip("native backend not built")
    leaf, budgets = _psg_leaf_node(0.7, 0.01, 50, 20)
    assert np.count_nonzero(leaf.probs) < leaf.probs.size / 3
    run = lambda: node_mod._run_node(SimpleNamespace(label="x50", children=()), [(leaf, 50)], 20, budgets, 2,  # noqa
                                     _fft.resolve(backend), 1 << 22, n_nodes=2)
    out, info = run()
    assert info["lowdft"] and np.dtype(info["dtype"]) == np.float64, info
    p = np.asarray(leaf.probs)
    pred = _lowdft.predicted_charge(20, [(p, int(round(_kernels.mean_index(p, False))), 50)], info["N"])
    assert 20 * info["fp"] <= node_mod._LOWDFT_HOLD * pred
    # the long double node, as without the summed frequencies
    monkeypatch.setattr(_lowdft, "plan", lambda *a, **k: None)
    ref, info_ld = run()
    assert np.dtype(info_ld["dtype"]) == np.longdouble, info_ld
    a, b = np.asarray(out.probs, dtype=np.float64), np.asarray(ref.probs, dtype=np.float64)
    shift = int(round((out.offset - ref.offset) / out.mesh))
    lo, hi = min(0, shift), max(a.size + shift, b.size)
    A, B = np.zeros(hi - lo), np.zeros(hi - lo)
    A[shift - lo: shift - lo + a.size], B[-lo: -lo + b.size] = a, b
    assert np.abs(A - B).sum() <= 2 * (info["fp"] + info["wrap"] + info_ld["fp"] + info_ld["wrap"])
    # a prediction the measured charge exceeds twice: long double after all
    monkeypatch.undo()
    monkeypatch.setattr(_lowdft, "predicted_charge", lambda inst, ins, N: 20 * info["fp"] / 4)
    _, info_held = run()
    assert np.dtype(info_held["dtype"]) == np.longdouble, info_held

