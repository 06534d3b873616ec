"""Long double nodes with float64 forward FFTs (docs/roundoff.md, section 3c) and the node TV charge.

* Against exact powers (fixed point, 320 bits, compared in long double): a long double node that
  takes float64 forward FFTs stays within its charge, on both backends, and the float64
  forward error is visible in neither the charge nor the result.
* Where the float64 forward error is not negligible (moderate powers) the node falls back to
  long double forward FFTs: same output and charge as a node without the float64 forward pass.
* A whole composition with the float64 forward pass against the same plan without it: the
  results differ by less than the sum of their charges, and the backends agree.
* The charge of one node instance (``_node_tv``) and the forward error of float64 FFTs that
  read long double inputs (``_fwd_error``).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

import fastpld
from fastpld import _fft, _fft_error
from fastpld.composition import budget, node as node_mod, powers, precision, roundoff
from fastpld.discretize import GridPMF
from oracles import exact_power, node_tv

ULD = float(np.finfo(np.longdouble).eps) / 2
U64 = float(np.finfo(np.float64).eps) / 2
BACKENDS = [b for b in ("numpy", "native") if b in _fft.available_backends()]


@pytest.fixture(autouse=True)
def _no_direct_dft(monkeypatch):
    # the few-atom inputs here would take direct DFTs (section 3e), which run in the node's precision:
    # this module checks the float64 forward FFT path, so it keeps the FFTs
    monkeypatch.setattr(precision, "_DFT_MAX_N", 0)


def _node(p, m, backend, spy):
    pmf = GridPMF(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    budgets = budget._Budgets(eps=0.1, delta=1.0, eta=0.0, trunc=0.0, wrap=1e-30, fp=1e-16)
    node = SimpleNamespace(label="test")
    return node_mod._run_node(node, [(pmf, m)], 1, budgets, 1, _fft.resolve(backend), 1 << 22)


@pytest.fixture
def forward_spy(monkeypatch):
    """Records the forward precision of every node (both backends)."""
    seen = []
    orig = powers._numpy_power

    def numpy_spy(backend, ins, N, dtype, fdt, *a):
        out = orig(backend, ins, N, dtype, fdt, *a)
        seen.append(np.dtype(fdt).name)
        return out

    monkeypatch.setattr(powers, "_numpy_power", numpy_spy)  # (numpy_convolve's call and its own fallback)
    if "native" in _fft.available_backends():
        be = _fft.resolve("native")
        conv = type(be).convolve

        def native_spy(self, ins, N, dtype, u, ser=None, low=None, dead_log=800.0, fwd_dtype=None, **kw):
            out = conv(self, ins, N, dtype, u, ser, low, dead_log, fwd_dtype, **kw)
            seen.append(np.dtype(fwd_dtype if fwd_dtype is not None else dtype).name)
            return out

        monkeypatch.setattr(type(be), "convolve", native_spy)
    return seen


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p,m", [([0.2, 0.5, 0.3], 4096), ([0.7, 0.2, 0.1], 30000)])
def test_mixed_node_within_its_charge(forward_spy, backend, p, m):
    out, info = _node(p, m, backend, forward_spy)
    assert np.dtype(info["dtype"]) == np.dtype(np.longdouble) and info["series"] > 0
    assert forward_spy[-1] == "float64"  # the float64 forward pass was kept
    ref = exact_power(p, m, dtype=np.longdouble)
    tv = node_tv(out, ref)
    assert tv <= info["fp"] + info["wrap"], (tv, info)
    # a long double floor: far below any float64 forward error (12 u64 log2 N ~ 2e-14)
    assert info["fp"] < 1e-15, info


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_node_falls_back_where_the_forward_error_counts(forward_spy, monkeypatch, backend):
    # a lattice-like input: |X| ~ 1 again at spectral peaks past the series' range
    p, m = [0.5, 0.0, 0.0, 0.0, 0.5], 400
    out, info = _node(p, m, backend, forward_spy)
    assert forward_spy[-2:] == [np.dtype(np.longdouble).name, "float64"]  # tried, then redone in long double
    monkeypatch.setattr(node_mod, "_MIXED_FORWARD", False)
    out2, info2 = _node(p, m, backend, forward_spy)
    assert info["fp"] == info2["fp"]
    np.testing.assert_array_equal(np.asarray(out.probs), np.asarray(out2.probs))


WORKLOAD = (fastpld.Gaussian(30.0), 2000, dict(method="glw", eps_error=0.2, delta_error=1e-13))


def test_mixed_composition_against_long_double(forward_spy, monkeypatch):
    mech, count, kw = WORKLOAD
    a = fastpld.compose(mech, count, backend="numpy", **kw)
    assert "float64" in forward_spy and all(s.precision == "longdouble" for s in a.stages if s.kind != "leaf")
    monkeypatch.setattr(node_mod, "_MIXED_FORWARD", False)
    b = fastpld.compose(mech, count, backend="numpy", **kw)
    for d in a.directions:
        x, y = a.directions[d], b.directions[d]
        assert x.pmf.mesh == y.pmf.mesh
        shift = int(round((y.pmf.offset - x.pmf.offset) / x.pmf.mesh))
        lo, hi = min(0, shift), max(x.pmf.probs.size, shift + y.pmf.probs.size)
        X, Y = np.zeros(hi - lo), np.zeros(hi - lo)
        X[-lo:-lo + x.pmf.probs.size] = x.pmf.probs
        Y[shift - lo: shift - lo + y.pmf.probs.size] = y.pmf.probs
        tv = 0.5 * float(np.abs(X - Y).sum())
        cx, cy = x.certificate, y.certificate
        assert tv <= cx["roundoff"] + cy["roundoff"] + cx["wrap"] + cy["wrap"], (tv, cx, cy)


@pytest.mark.skipif("native" not in _fft.available_backends(), reason="native backend not built")
def test_mixed_backends_agree(forward_spy):
    mech, count, kw = WORKLOAD
    a = fastpld.compose(mech, count, backend="native", **kw)
    b = fastpld.compose(mech, count, backend="numpy", **kw)
    assert forward_spy.count("float64") >= 2
    for d in a.directions:
        sa, sb = a.directions[d].stages, b.directions[d].stages
        assert [s.buckets for s in sa] == [s.buckets for s in sb]
        for x, y in zip(sa, sb):
            # (charges from each backend's own spectra: ~1e-4 relative apart)
            assert x.delta_roundoff == pytest.approx(y.delta_roundoff, rel=1e-3, abs=0)


def test_node_tv_charge():
    # at least the l1 bound (TV of the normalised output: E / S with S >= 0.99 - E) plus the
    # normalisation's roundings; monotone; everything once the error is not small
    for u in (U64, ULD):
        for N in (64, 10**5):
            lg = math.ceil(math.log2(N))
            for e in (0.0, 1e-17, 1e-13, 1e-6):
                t = roundoff._node_tv(e, N, u)
                assert t >= e / 0.99 + (lg + 24) * u
                assert t <= 1.02 * e + (lg + 25) * u
    assert roundoff._node_tv(0.6, 100, U64) == 1.0 + roundoff._rounding_gamma(31, U64)


def test_forward_error_terms():
    p64 = np.full(10, 0.1)
    pld = p64.astype(np.longdouble)
    N = 1024
    g0 = 12 * U64 * 10
    # same precision, float64 inputs: the unchanged model
    assert _fft_error._fwd_error([(p64, 5, 3)], N, np.float64, U64) == (g0, U64)
    assert _fft_error._fwd_error([(pld, 5, 3)], N, np.longdouble, ULD) == (12 * ULD * 10, ULD)
    # long double inputs rounded into a float64 buffer (one cast per entry, no folding here)
    g, up = _fft_error._fwd_error([(pld, 5, 3)], N, np.float64, U64)
    assert up == U64 and g >= g0 + U64 and g <= g0 + 1.02 * U64
    # float64 forward in a long double node: float64 forward error and polar rounding
    g, up = _fft_error._fwd_error([(pld, 5, 3)], N, np.float64, ULD)
    assert up == U64 and g >= g0 + U64
    # folding a long input: one addition per extra wrap
    g, _ = _fft_error._fwd_error([(np.full(3000, 1 / 3000, dtype=np.longdouble), 5, 3)], N, np.float64, ULD)
    assert g >= g0 + 3 * U64
