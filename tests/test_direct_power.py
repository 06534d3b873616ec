"""Direct powers of float64 nodes without the low-frequency series (composition.powers._direct_power).

* Against exact powers (fixed point, 320 bits, convolved in long double): the output of a node
  of several inputs with small powers stays within its round-off bound, on both backends.
* The compiled kernel's dead frequencies (a suffix of the spectrum set to 0 and charged) keep
  the output within its bound.
* The compiled kernel and the numpy reference agree (same arithmetic; the bounds to 1e-12).
* The bound is of the size of the polar form's (both are dominated by the forward error).
* The binary powering itself: every exponent up to 70 against repeated multiplication in
  long double.
"""
from __future__ import annotations


import numpy as np
import pytest

from fastpld import _fft, _kernels
from oracles import exact_power
from fastpld.composition import powers

U64 = float(np.finfo(np.float64).eps) / 2
BACKENDS = [b for b in ("numpy", "native") if b in _fft.available_backends()]
needs_native = pytest.mark.skipif("native" not in BACKENDS, reason="native backend not built")


def _cases():
    rng = np.random.default_rng(5)
    out = []
    for k in range(6):
        ins = []
        for _ in range(int(rng.integers(1, 5))):
            n = int(rng.integers(2, 60))
            p = rng.random(n) ** int(rng.integers(1, 6))
            if k % 2:  # sparse, like a leaf with coarse tail cells
                p[1:-1:3] = 0
            p /= p.sum()
            m = int(rng.choice([1, 2, 3, 7, 10, 33]))
            ins.append((p, int(rng.integers(0, n)), m))
        out.append(ins)
    return out


CASES = _cases()


def _exact(ins):
    """Exact (to ~1e-19) linear convolution of the inputs' powers, in long double."""
    res = np.ones(1, dtype=np.longdouble)
    for p, _, m in ins:
        res = np.convolve(res, exact_power(p, m, dtype=np.longdouble))
    return res


def _run(backend, ins, N, dead_log=800.0):
    be = _fft.resolve(backend)
    if be.native:
        out, l1, _ = be.convolve(ins, N, np.float64, U64, dead_log=dead_log, direct=True)
    else:
        l1, _, out = powers._direct_power(be, ins, N, U64)
    return np.asarray(out), l1


@pytest.mark.parametrize("backend,dead_log", [(b, 800.0) for b in BACKENDS] + [("native", 40.0)] * ("native" in BACKENDS))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_direct_power_within_its_bound(backend, dead_log, case):
    """(``dead_log = 40``: the compiled kernel cuts the spectrum after each input's last frequency
    with ``|X|^m >= e^-40`` and charges the rest)"""
    ins = CASES[case]
    ref = _exact(ins)
    N = _fft.fast_length(ref.size)
    out, l1 = _run(backend, ins, N, dead_log)
    shift = sum(m * cen for _, cen, m in ins)
    pos = (np.arange(ref.size) - shift) % N
    err = float(np.abs(out[pos].astype(np.longdouble) - ref).sum())
    err += float(np.abs(np.delete(out, pos)).sum())  # outside the support the exact value is 0
    assert err <= l1, (err, l1)
    # a useful bound (float64 FFTs of a few hundred points; with T = 40 the skipped frequencies'
    # charges 2 e^-30 each dominate)
    assert l1 < (1e-10 if dead_log == 800.0 else 1e-10 + 4 * N * np.exp(-30.0))


@needs_native
@pytest.mark.parametrize("case", range(len(CASES)))
def test_direct_power_backends_agree(case):
    ins = CASES[case]
    N = _fft.fast_length(sum((p.size - 1) * m for p, _, m in ins) + 1)
    a, la = _run("native", ins, N)
    b, lb = _run("numpy", ins, N)
    assert la == pytest.approx(lb, rel=1e-12, abs=0)
    assert float(np.abs(a - b).sum()) <= 1e-2 * la


@pytest.mark.parametrize("case", range(len(CASES)))
def test_direct_bound_against_polar_bound(case):
    ins = CASES[case]
    be = _fft.resolve("numpy")
    N = _fft.fast_length(sum((p.size - 1) * m for p, _, m in ins) + 1)
    _, l1 = _run("numpy", ins, N)
    polar, _, _ = powers._numpy_power(be, ins, N, np.float64, np.float64, U64, None, None, 0.0)
    assert 0.5 * polar <= l1 <= 1.5 * polar


@needs_native
def test_binary_powering_kernel():
    rng = np.random.default_rng(9)
    X = (rng.standard_normal(64) + 1j * rng.standard_normal(64)) * 0.6
    g = 1e-14
    for m in range(1, 71):
        P = np.empty(64, dtype=np.complex128)
        B = np.empty(64)
        D = np.empty(64)
        _kernels._core.power_direct(X, m, P, B, D, g, True)
        ref = np.ones(64, dtype=np.clongdouble)
        for _ in range(m):
            ref = ref * X.astype(np.clongdouble)
        r = np.abs(X)
        bound = 4.01 * max(m - 1, 0) * U64 * r.astype(np.longdouble) ** m
        assert np.all(np.abs(P - ref) <= bound + 1e-300), m
        # (|X| by the kernel's libm hypot and by numpy's abs, each within 4 ulp, may differ by 16 u: B by
        # m (16 u + u) + pow's 8 u <= 1.4e-13 at m = 70, D by 18 u < 1e-14; not bit for bit; a wrong power
        # or a missed g moves them by far more)
        np.testing.assert_allclose(B, (r + g) ** m, rtol=2e-13)
        np.testing.assert_allclose(D, m / (r + g), rtol=1e-14)
