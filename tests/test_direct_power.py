"""Direct powers of float64 and long double nodes without the low-frequency series
(composition.powers._direct_power).

* Against exact powers (fixed point, 320 bits, convolved in long double): the output of a node
  of several inputs with small powers stays within its round-off bound, on both backends.
* The compiled kernel's dead frequencies (a suffix of the spectrum set to 0 and charged) keep
  the output within its bound.
* The compiled kernel and the numpy reference agree (same arithmetic; the bounds to 1e-12).
* The bound is of the size of the polar form's (both are dominated by the forward error).
* The binary powering itself: every exponent up to 70 against repeated multiplication in
  long double (float64), against exact rational powers (long double).
* Long double nodes: the same within-bound and agreement checks at long double's unit round-off.
"""
from __future__ import annotations


import numpy as np
import pytest

from fastpld import _fft, _kernels
from oracles import exact_power
from fastpld.composition import powers

U64 = float(np.finfo(np.float64).eps) / 2
ULD = float(np.finfo(np.longdouble).eps) / 2
LD_DISTINCT = np.finfo(np.longdouble).nmant > np.finfo(np.float64).nmant
needs_ld = pytest.mark.skipif(not LD_DISTINCT, reason="long double is float64 on this platform")
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


def _run(backend, ins, N, dead_log=800.0, dtype=np.float64):
    be = _fft.resolve(backend)
    u = U64 if dtype is np.float64 else ULD
    if be.native:
        out, l1, _ = be.convolve(ins, N, dtype, u, dead_log=dead_log, direct=True)
    else:
        l1, _, out = powers._direct_power(be, ins, N, u, dtype=dtype)
    assert np.asarray(out).dtype == np.dtype(dtype)
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


def _dyadic(ins):
    """The inputs with masses on 2^-40 summing to 1 exactly (the oracle normalises its input: float64 masses
    whose sum is not exactly 1 would move it by ~m u64, above a long double node's bound)."""
    out = []
    for p, cen, m in ins:
        q = np.floor(p * 2.0 ** 40)
        j = int(np.argmax(q))
        q[j] += 2.0 ** 40 - q.sum()
        out.append((q / 2.0 ** 40, cen, m))
    return out


@needs_ld
@pytest.mark.parametrize("backend,dead_log", [(b, 800.0) for b in BACKENDS] + [("native", 40.0)] * ("native" in BACKENDS))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_direct_power_long_double_within_its_bound(backend, dead_log, case):
    """A long double node's direct powers against the exact convolution (320-bit powers, ~1e-19): within the
    bound at long double's ``u``, and that bound ~2^11 times below the float64 node's (a bound computed with
    float64's ``u`` by mistake, or float64 arithmetic, would fail one or the other)."""
    ins = _dyadic(CASES[case])
    assert all(p.sum() == 1.0 for p, _, _ in ins)
    ref = _exact(ins)
    N = _fft.fast_length(ref.size)
    out, l1 = _run(backend, ins, N, dead_log, np.longdouble)
    shift = sum(m * cen for _, cen, m in ins)
    pos = (np.arange(ref.size) - shift) % N
    err = float(np.abs(out[pos] - ref).sum())
    err += float(np.abs(np.delete(out, pos)).sum())
    assert err <= l1, (err, l1)
    if dead_log == 800.0:
        _, l64 = _run(backend, ins, N, dead_log)
        assert l1 < l64 / 500


@needs_ld
@needs_native
@pytest.mark.parametrize("case", range(len(CASES)))
def test_direct_power_long_double_backends_agree(case):
    ins = CASES[case]
    N = _fft.fast_length(sum((p.size - 1) * m for p, _, m in ins) + 1)
    a, la = _run("native", ins, N, dtype=np.longdouble)
    b, lb = _run("numpy", ins, N, dtype=np.longdouble)
    assert la == pytest.approx(lb, rel=1e-12, abs=0)
    assert float(np.abs(a - b).sum()) <= 1e-2 * la


@needs_ld
@needs_native
def test_binary_powering_kernel_long_double():
    """Every exponent up to 70 against the exact power of the long double input (rational arithmetic): within
    ``4.01 (m - 1) u r^m`` at long double's ``u``; ``B`` and ``D`` as the float64 kernel's."""
    from fractions import Fraction
    rng = np.random.default_rng(19)
    n = 24
    X = ((rng.standard_normal(n) + 1j * rng.standard_normal(n)) * 0.6).astype(np.clongdouble)
    X = X * np.longdouble(1 + 1e-17)  # (digits past float64's)
    xs = [(Fraction(*x.real.as_integer_ratio()), Fraction(*x.imag.as_integer_ratio())) for x in X]
    g = 1e-17
    r64 = np.hypot(X.real.astype(np.float64), X.imag.astype(np.float64))
    for m in (1, 2, 3, 5, 8, 13, 31, 50, 64, 70):
        P = np.empty(n, dtype=np.clongdouble)
        B = np.empty(n)
        D = np.empty(n)
        k = _kernels._core.power_direct_ld(X.view(np.longdouble), m, P.view(np.longdouble), B, D, g, True)
        assert k == n
        for j, (a, b) in enumerate(xs):
            er, ei = Fraction(1), Fraction(0)
            for _ in range(m):
                er, ei = er * a - ei * b, er * b + ei * a
            diff = abs(complex(float(Fraction(*P[j].real.as_integer_ratio()) - er),
                               float(Fraction(*P[j].imag.as_integer_ratio()) - ei)))
            bound = 4.01 * max(m - 1, 0) * ULD * float(r64[j]) ** m * (1 + 1e-9) + 1e-300
            assert diff <= bound, (m, j, diff, bound)
        np.testing.assert_allclose(B, (r64 + g) ** m, rtol=2e-13)
        np.testing.assert_allclose(D, m / (r64 + g), rtol=1e-14)
    # accumulating a second input: P *= X^m, B *= .., D += ..
    P2, B2, D2 = P.copy(), B.copy(), D.copy()
    _kernels._core.power_direct_ld(X.view(np.longdouble), 3, P2.view(np.longdouble), B2, D2, g, False)
    np.testing.assert_allclose(B2, B * (r64 + g) ** 3, rtol=1e-13)
    np.testing.assert_allclose(D2, D + 3 / (r64 + g), rtol=1e-14)
    ref = P.astype(np.clongdouble) * X ** 3
    assert np.all(np.abs(P2 - ref) <= 1e-15 * np.abs(ref) + 1e-300)


@needs_ld
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_long_double_power_float64_inverse(backend, case):
    """A long double node's direct power with a float64 inverse FFT (``inv64``, docs/roundoff.md 3h): float64
    output within the bound ``_inverse64_l1`` gives, that bound between the long double node's and the float64
    node's, and the test ``inv64`` decides (refused: the long double inverse, bitwise the node without it)."""
    ins = _dyadic(CASES[case])
    ref = _exact(ins)
    N = _fft.fast_length(ref.size)
    be = _fft.resolve(backend)
    seen = []

    def run(accept):
        def inv64(l1):
            seen.append(l1)
            return accept
        if be.native:
            out, l1, _ = be.convolve(ins, N, np.longdouble, ULD, direct=True, inv64=inv64)
        else:
            l1, _, out = powers._direct_power(be, ins, N, ULD, dtype=np.longdouble, inv64=inv64)
        return np.asarray(out), l1

    out, l1 = run(True)
    assert out.dtype == np.float64 and l1 == seen[-1]
    shift = sum(m * cen for _, cen, m in ins)
    pos = (np.arange(ref.size) - shift) % N
    err = float(np.abs(out[pos].astype(np.longdouble) - ref).sum())
    err += float(np.abs(np.delete(out, pos)).sum())
    assert err <= l1, (err, l1)
    ld, l_ld = _run(backend, ins, N, dtype=np.longdouble)
    _, l64 = _run(backend, ins, N)
    assert l_ld < l1 < l64  # (the float64 inverse's 12 u64 log2 N ||P|| only: below the float64 node's m g)
    # a float64 inverse that merely rounds the long double output would be within u64 of it
    assert float(np.abs(out - ld.astype(np.float64)).sum()) <= l1 + l_ld
    out2, l2 = run(False)
    assert out2.dtype == np.longdouble and l2 == l_ld and np.array_equal(out2, ld)


@needs_ld
@needs_native
@pytest.mark.parametrize("case", range(len(CASES)))
def test_long_double_power_float64_inverse_backends_agree(case):
    ins = _dyadic(CASES[case])
    N = _fft.fast_length(sum((p.size - 1) * m for p, _, m in ins) + 1)
    a, la, _ = _fft.resolve("native").convolve(ins, N, np.longdouble, ULD, direct=True, inv64=lambda l1: True)
    lb, _, b = powers._direct_power(_fft.resolve("numpy"), ins, N, ULD, dtype=np.longdouble, inv64=lambda l1: True)
    assert la == pytest.approx(lb, rel=1e-12, abs=0)
    # (two float64 inverse FFTs, FFTW and numpy's pocketfft: each within its bound, their differences a few percent of it)
    assert float(np.abs(np.asarray(a) - b).sum()) <= 0.25 * la
