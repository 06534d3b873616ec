"""Random allocation's lattice powers (``fastpld._lattice``) against exact laws: a binomial's convolution power is
a binomial, so the truncated (``"drop"``) and capped (``"clamp"``) powers have closed forms, and each computed
power must lie within its own l1 error bound of them, whichever path computed it (one transform, or repeated
squaring where the cyclic length would have to be too long to hold the tail)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fastpld import _lattice


def _exact(n1, r, m, n_out, mode):
    """``Binomial(n1, r)^(*m) = Binomial(m n1, r)`` on ``0..n_out``: truncated, or capped at ``n_out``."""
    j = np.arange(n_out + 1)
    pmf = stats.binom.pmf(j, m * n1, r)
    if mode == "clamp":
        pmf[-1] = stats.binom.sf(n_out - 1, m * n1, r)
    return pmf


def _squared(p, m, n_out, mode, err0, monkeypatch):
    with monkeypatch.context() as mp:
        mp.setattr(_lattice, "_power_fft", lambda *a: None)
        return _lattice._power(p, m, n_out, mode, err0)


@pytest.mark.parametrize("n1,r,m,n_out,mode", [
    (3000, 0.3, 40, 40000, "drop"),    # the bulk of the sum inside the lattice, its upper tail cut
    (3000, 0.3, 40, 36500, "drop"),    # the cut near the mean: much of the mass dropped
    (2500, 0.5, 7, 9000, "clamp"),     # capped near the mean: a large atom at the end
    (4000, 0.05, 99, 30000, "drop"),   # many copies
])
def test_one_transform_power_is_within_its_bound_of_the_exact_law(n1, r, m, n_out, mode, monkeypatch):
    p = stats.binom.pmf(np.arange(n1 + 1), n1, r)
    err0 = 1e-15
    got, err = _lattice._power(p, m, n_out, mode, err0)
    assert _lattice._power_fft(p, m, n_out, mode, err0) is not None  # (the path under test)
    exact = _exact(n1, r, m, n_out, mode)
    assert got.size == exact.size
    dist = float(np.abs(got - exact).sum())
    # the oracle's own error (scipy's pmf, ~1e-15 relative per entry) is far below the bounds
    assert dist <= err, (dist, err)
    assert err < 1e-11  # (and the bound is not vacuous)
    # the same law as repeated squaring, each within its bound
    sq, err_sq = _squared(p, m, n_out, mode, err0, monkeypatch)
    assert float(np.abs(sq - exact).sum()) <= err_sq
    assert float(np.abs(sq - got).sum()) <= err + err_sq


def test_tail_bound_is_a_bound():
    # Pr[S >= N] for a sum of m binomials is a binomial tail: the Chernoff bound lies above it
    n1, r, m = 3000, 0.3, 40
    p = stats.binom.pmf(np.arange(n1 + 1), n1, r)
    for N in (36500, 37000, 38000, 40000):
        exact = stats.binom.sf(N - 1, m * n1, r)
        bound = _lattice._tail_log_bound(p, m, N)
        assert bound <= 0.0
        assert np.log(exact) <= bound + 1e-12 * abs(bound), (N, exact, bound)


def test_power_falls_back_to_squaring_where_the_tail_does_not_fit(monkeypatch):
    # a law with a heavy atom at the lattice's end (capped copies): sums of several capped copies reach far beyond
    # any cyclic length of a few lattices, so the one-transform power declines and repeated squaring answers
    n = 3000
    p = np.full(n, 0.5 / (n - 1))
    p[-1] = 0.5
    m, n_out = 30, 4000
    assert _lattice._power_fft(p, m, n_out, "clamp", 0.0) is None
    got, err = _lattice._power(p, m, n_out, "clamp", 0.0)
    assert got.size == n_out + 1 and abs(float(got.sum()) - 1.0) <= 1e-12 + err


def test_a_capped_law_takes_one_transform_without_its_cap():
    # a copy capped at the lattice's end (an atom there: the mass of its heavy tail) only makes sums at the cap:
    # the transform leaves the atom out, and the capped entry is |p|_1^m less the rest -- exact law: the sum has
    # no capped copy with probability 0.8^m, and is then a binomial
    n_out, m = 4000, 10
    p = np.zeros(n_out + 1)
    p[:601] = 0.8 * stats.binom.pmf(np.arange(601), 600, 0.3)
    p[-1] = 0.2
    exact = np.zeros(n_out + 1)
    exact[:-1] = 0.8 ** m * stats.binom.pmf(np.arange(n_out), 600 * m, 0.3)
    exact[-1] = 1.0 - 0.8 ** m * stats.binom.cdf(n_out - 1, 600 * m, 0.3)
    assert _lattice._power_fft(p, m, n_out, "clamp", 0.0) is not None
    got, err = _lattice._power(p, m, n_out, "clamp", 0.0)
    assert got.size == n_out + 1
    assert float(np.abs(got - exact).sum()) <= err < 1e-11
