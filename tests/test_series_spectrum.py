"""The accurate low-frequency series of FFT nodes (composition.series._series_spectrum) against exact powers.

A node raising a few-atom PMF ``p`` to a large power ``m`` is compared with the exact
``p^(*m)`` (normalised), computed in exact integer (fixed-point, 320-bit) arithmetic by repeated squaring.  The node's measured TV distance to it must stay below what the node
charges (round-off + wrap-around), in float64 and long double, on both backends; the series
must actually be in use, and its charge must be far below the plain FFT's ``m``-fold amplification.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fastpld import _fft, _lowdft
from fastpld.discretize import GridPMF
from oracles import exact_power, node_tv
from fastpld.composition import budget, node as node_mod, precision as precision_mod, roundoff, series



@pytest.fixture(autouse=True)
def _series_not_lattice(monkeypatch):
    # few-atom inputs would take direct DFTs and the lattice spectra (docs/roundoff.md 3e-3f, checked in
    # test_small_dft.py), and float64 nodes of narrow inputs their low frequencies summed directly (3i, checked in
    # test_lowdft.py); this module checks the low-frequency series, so they keep the FFT path and the series
    monkeypatch.setattr(precision_mod, "_DFT_MAX_N", 0)
    monkeypatch.setattr(_lowdft, "plan", lambda ins, N: None)


def _node(p, m, dtype_budget, backend):
    pmf = GridPMF(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    budgets = budget._Budgets(eps=0.1, delta=1.0, eta=0.0, trunc=0.0, wrap=1e-30, fp=dtype_budget)
    node = SimpleNamespace(label="test")
    return node_mod._run_node(node, [(pmf, m)], 1, budgets, 1, _fft.resolve(backend), 1 << 22)


CASES = [
    ([0.2, 0.5, 0.3], 4096),
    ([0.05, 0.3, 0.1, 0.4, 0.15], 4096),
    ([0.7, 0.2, 0.1], 30000),  # skewed; mean off the lattice
]


@pytest.fixture(scope="module")
def exact():
    return {i: exact_power(p, m) for i, (p, m) in enumerate(CASES)}


@pytest.mark.parametrize("backend", ["numpy", "native"])
@pytest.mark.parametrize("fp_budget,precision", [(1e-11, "float64"), (1e-16, "longdouble")])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_series_node_within_its_charge(exact, case, fp_budget, precision, backend):
    if backend not in _fft.available_backends():
        pytest.skip("native backend not built")
    p, m = CASES[case]
    out, info = _node(p, m, fp_budget, backend)
    assert info["series"] > 0
    assert np.dtype(info["dtype"]).name == ("float64" if precision == "float64" else np.dtype(np.longdouble).name)
    ref = exact[case]
    tv = node_tv(out, ref)  # (out.probs[i] sits at index offset + i of the exact coefficient vector)
    charged = info["fp"] + info["wrap"]
    assert tv <= charged, (tv, info)
    # the plain FFT bound would charge ~ m * 12 u log2 N per frequency near 0
    u = roundoff._U64 if precision == "float64" else roundoff._ULD
    plain = m * 12 * u * math.ceil(math.log2(info["N"]))
    assert info["fp"] < plain, (info["fp"], plain)


def test_series_matches_fft_spectrum():
    """The series values agree with a direct long double DFT of the same input at the low frequencies."""
    rng = np.random.default_rng(5)
    p = rng.random(300) ** 3
    p /= p.sum()
    cen = int(round(float(np.dot(np.arange(p.size), p))))
    N = 1 << 14
    m = 3
    ser = series._series_spectrum([(p, cen, m)], N, np.longdouble)
    K, L, P, dL, dP = ser[:5]
    buf = np.zeros(N, dtype=np.longdouble)
    buf[(np.arange(p.size) - cen) % N] = p
    # direct DFT in long double at the first K frequencies (no FFT: independent arithmetic)
    t = ((np.arange(p.size) - cen)).astype(np.longdouble)
    k = np.arange(K).astype(np.longdouble)
    ang = -2 * np.longdouble(np.pi) * np.outer(k, t) / N
    X = (np.cos(ang) * p).sum(axis=1) + 1j * (np.sin(ang) * p).sum(axis=1)
    Lref = m * np.log(np.abs(X)).astype(np.float64)
    Pref = m * np.angle(X).astype(np.float64)
    assert np.all(np.abs(L.astype(np.float64) - Lref) <= dL + 1e-15)
    dphase = np.angle(np.exp(1j * (P.astype(np.float64) - Pref)))
    assert np.all(np.abs(dphase) <= dP + 1e-15)


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 40, 97])
@pytest.mark.parametrize("native", [True, False])
def test_series_moments_within_their_bound_of_exact_sums(n, native):
    """The scaled power moments (compiled, blocks of terms summed two moments at a time, and the numpy
    reference) against exact rational sums: within the bound ``_kernels.series_moments`` states
    (``gamma_(r + ceil(log2 n) + SERIES_BLOCK + 1) sum_j p_j |s_j|^r``, long double ``u``; ``M_0``, ``M_1``
    compensated), for every moment of the series (odd and even counts of them)."""
    from fractions import Fraction

    from fastpld import _kernels

    if native and _kernels._core is None:
        pytest.skip("compiled core not built")
    rng = np.random.default_rng(n)
    p = rng.random(n) * np.exp(-rng.random(n) * 30)  # (masses over many orders, as a leaf's)
    cen = n // 3
    d = 2.0 ** math.ceil(math.log2(max(cen, n - 1 - cen, 1)))
    uld = float(np.finfo(np.longdouble).eps) / 2
    lev = math.ceil(math.log2(max(n, 2))) + _kernels.SERIES_BLOCK + 1
    for R1 in (1, 2, 51, series._SERIES_R + 3):
        got = _kernels.series_moments(p, cen, d, R1, native=native)
        for r in range(R1):
            terms = [Fraction(float(p[j])) * (Fraction(j - cen) / Fraction(d)) ** r for j in range(n)]
            exact = sum(terms)
            absum = float(sum(abs(t) for t in terms))
            k = r + lev
            bound = (k * uld / (1 - k * uld)) * absum * 1.01 + 1e-300
            if r < 2:
                bound = min(bound, 1.01 * (uld * abs(float(exact)) + ((2 * n + 2) * uld) ** 2 * absum) + 1e-300)
            assert abs(Fraction(*got[r].as_integer_ratio()) - exact) <= Fraction(bound), (n, R1, r)
