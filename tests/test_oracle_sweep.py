"""The randomised oracle sweep (``tools/oracle_sweep.py``): a few seconds of random compositions whose certified
intervals must hold the exact curves, and the closed forms it uses against independent high-precision ones: the
subsampled Gaussian step's against the 50-digit one of ``test_overflow_sweep``; randomized response's and approximate
DP's against multinomial enumeration; the Gaussian composed with pure DP and the (subsampled) Laplace mechanism
against quadrature."""
import os
import subprocess
import sys

import mpmath
import pytest

from oracles import approx_dp_delta, epsilon_of, gauss_pure_delta, laplace_delta, psg_delta, psl_delta, rr_delta
from test_overflow_sweep import _psg_delta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("sigma,q", [(0.6, 0.3), (1.0, 0.01), (4.0, 0.001)])
def test_psg_delta_is_the_exact_curve(sigma, q):
    with mpmath.workdps(50):
        for eps in (0.0, 0.05, 0.5, 2.0):
            exact = float(_psg_delta(eps, sigma, q))
            assert psg_delta(eps, sigma, q) == pytest.approx(exact, rel=1e-9, abs=1e-15), eps
    e = epsilon_of(lambda x: psg_delta(x, sigma, q), 1e-6)
    assert psg_delta(e, sigma, q) <= 1e-6 < psg_delta(e * (1 - 1e-9) - 1e-15, sigma, q)


def _mp_discrete_delta(eps, atoms, k):
    """k-fold composition of a loss with finitely many ``(loss, probability)`` atoms (``loss`` may be ``inf``), by
    enumerating the multinomial counts in 40-digit arithmetic."""
    with mpmath.workdps(40):
        out = {mpmath.mpf(0): mpmath.mpf(1)}
        for _ in range(k):
            nxt = {}
            for y, w in out.items():
                for a, p in atoms:
                    key = y + a
                    nxt[key] = nxt.get(key, 0) + w * p
            out = nxt
        return float(sum(w * (1 - mpmath.e ** (eps - y)) if y != mpmath.inf else w for y, w in out.items() if y > eps))


@pytest.mark.parametrize("eps,eps0,c,k", [(0.5, 0.3, 3, 12), (2.0, 0.5, 5, 25), (0.0, 1.0, 4, 8), (1.0, 0.2, 2, 30)])
def test_rr_delta_is_the_exact_curve(eps, eps0, c, k):
    with mpmath.workdps(40):
        z = mpmath.e ** eps0 + c - 1
        atoms = [(mpmath.mpf(eps0), mpmath.e ** eps0 / z), (-mpmath.mpf(eps0), 1 / z), (mpmath.mpf(0), (c - 2) / z)]
    assert rr_delta(eps, eps0, c, k) == pytest.approx(_mp_discrete_delta(eps, atoms, k), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("eps,eps0,d0,k", [(0.5, 0.3, 1e-6, 10), (1.5, 0.1, 1e-3, 20), (0.0, 1.0, 0.01, 5)])
def test_approx_dp_delta_is_the_exact_curve(eps, eps0, d0, k):
    with mpmath.workdps(40):
        p = mpmath.e ** eps0 / (1 + mpmath.e ** eps0)
        atoms = [(mpmath.inf, mpmath.mpf(d0)), (mpmath.mpf(eps0), (1 - mpmath.mpf(d0)) * p),
                 (-mpmath.mpf(eps0), (1 - mpmath.mpf(d0)) * (1 - p))]
    assert approx_dp_delta(eps, eps0, d0, k) == pytest.approx(_mp_discrete_delta(eps, atoms, k), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("eps,mu,eps0,k", [(1.0, 0.8, 0.3, 5), (0.5, 2.0, 0.1, 12), (3.0, 1.0, 1.0, 3), (0.0, 0.3, 0.5, 4)])
def test_gauss_pure_delta_is_the_exact_curve(eps, mu, eps0, k):
    """Against the joint expectation of ``(1 - e^(eps - Y_G - Y_P))_+``: the Gaussian loss ``N(mu^2/2, mu^2)``
    integrated by quadrature for every count of the pure part."""
    with mpmath.workdps(30):
        p = mpmath.e ** eps0 / (1 + mpmath.e ** eps0)
        tot = mpmath.mpf(0)
        for i in range(k + 1):
            y = (k - 2 * i) * eps0
            f = lambda z, y=y: (1 - mpmath.e ** (eps - y - z)) * mpmath.npdf(z, mu ** 2 / 2, mu)  # noqa: E731
            tot += mpmath.binomial(k, i) * p ** (k - i) * (1 - p) ** i * mpmath.quad(f, [eps - y, eps - y + 10 * mu,
                                                                                         mpmath.inf])
    assert gauss_pure_delta(eps, mu, eps0, k) == pytest.approx(float(tot), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("eps,scale", [(0.0, 1.0), (0.3, 1.0), (0.05, 10.0), (1.5, 0.5), (2.5, 0.5)])
def test_laplace_delta_is_the_exact_curve(eps, scale):
    """Against ``P[L > eps] - e^eps Q[L > eps]`` integrated from the two Laplace densities (sensitivity 1), split
    where the loss ``(|y - 1| - |y|) / b`` crosses ``eps``."""
    with mpmath.workdps(30):
        b = mpmath.mpf(scale)
        fp = lambda y: mpmath.e ** (-abs(y) / b) / (2 * b)  # noqa: E731
        fq = lambda y: mpmath.e ** (-abs(y - 1) / b) / (2 * b)  # noqa: E731
        loss = lambda y: (abs(y - 1) - abs(y)) / b  # noqa: E731
        f = lambda y: (fp(y) - mpmath.e ** eps * fq(y)) if loss(y) > eps else 0  # noqa: E731
        cut = min(max((1 - eps * b) / 2, 0), 1)  # (where the loss crosses eps: the integrand jumps there)
        exact = mpmath.quad(f, [-mpmath.inf, 0, cut, 1])
    assert laplace_delta(eps, 1.0 / scale) == pytest.approx(float(exact), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("eps,scale,q", [(0.01, 1.0, 0.1), (0.1, 0.5, 0.3), (0.5, 0.3, 0.5), (0.05, 2.0, 0.2),
                                         (0.0, 1.0, 0.05), (1.0, 0.2, 0.4)])
def test_psl_delta_is_the_exact_curve(eps, scale, q):
    """Against both directions' hockey-stick integrals of the Laplace densities (sensitivity 1), split at 0, 1 and
    where the loss crosses ``eps``."""
    with mpmath.workdps(30):
        b, qq = mpmath.mpf(scale), mpmath.mpf(q)
        f0 = lambda y: mpmath.e ** (-abs(y) / b) / (2 * b)  # noqa: E731
        f1 = lambda y: mpmath.e ** (-abs(y - 1) / b) / (2 * b)  # noqa: E731
        mix = lambda y: (1 - qq) * f0(y) + qq * f1(y)  # noqa: E731

        def hockey(P, Q):
            loss = lambda y: mpmath.log(P(y) / Q(y))  # noqa: E731
            cuts = [-mpmath.inf, 0]
            lo, hi = mpmath.mpf(0), mpmath.mpf(1)  # (the loss is monotone on [0, 1]: bisect for its crossing)
            if (loss(lo) - eps) * (loss(hi) - eps) < 0:
                for _ in range(200):
                    mid = (lo + hi) / 2
                    lo, hi = (lo, mid) if (loss(mid) - eps) * (loss(hi) - eps) > 0 else (mid, hi)
                cuts.append(lo)
            f = lambda y: (P(y) - mpmath.e ** eps * Q(y)) if loss(y) > eps else 0  # noqa: E731
            return mpmath.quad(f, cuts + [1, mpmath.inf])

        exact = max(hockey(mix, f0), hockey(f0, mix), 0)
    assert psl_delta(eps, scale, q) == pytest.approx(float(exact), rel=1e-9, abs=1e-15)


def test_oracle_sweep_short_run():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "oracle_sweep.py"), "--seconds", "4", "--seed", "7"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert " 0 intervals missing the oracle" in p.stdout, p.stdout[-1000:]
    assert int(p.stdout.split(" compositions")[0].split()[-1]) > 10, p.stdout[-500:]
