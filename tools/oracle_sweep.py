"""Random compositions against exact privacy curves: every certified interval must hold the truth.

Usage (from the repository root)::

    python tools/oracle_sweep.py --seconds 300 --seed 1

Draws, until ``--seconds`` have passed: a Gaussian composed ``k`` times and a heterogeneous list of Gaussians (the
analytic mu-GDP curve), pure DP composed ``k`` times (the binomial formula), c-ary randomized response (the trinomial
one), approximate DP (the binomial formula past the infinite losses), Gaussians composed with pure DP (the mu-GDP curve
averaged over the binomial loss: the composed curve is linear in each factor's), one Laplace mechanism, one
Poisson-subsampled Laplace step and one Poisson-subsampled Gaussian step (their closed forms), each at a random accuracy (``rel_error`` 1e-2 .. 1e-4 or the
default), and asks ``epsilon`` at
three random deltas in 1e-10 .. 1e-2 and ``delta`` at 0.7, 1 and 1.3 times the exact epsilon.  An interval that
misses the oracle by more than its own rounding (1e-12 relative, and 2e-12 absolute for delta: the binomial sum's
own rounding near 1) is printed; the exit status is 1 if any did.  The oracles are the tests' (``tests/oracles.py``).
"""
from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import fastpld as F  # noqa: E402
import oracles as O  # noqa: E402
from _sweep import start  # noqa: E402


def _draw(rng):
    """``(description, composed answer, exact delta(eps), exact epsilon(delta))`` of one random question, or
    ``None`` for a draw outside the oracles' range."""
    kind = rng.choice(["gauss", "hetero", "pure", "psg1", "rr", "approx", "gauss_pure", "laplace1", "psl1"])
    rel = rng.choice([1e-2, 1e-3, 1e-4, None])
    acc = {"rel_error": rel} if rel else {}
    if kind == "gauss":
        k = int(10 ** rng.uniform(0, 6))
        # (up to mu 300: one copy at mu sqrt(k), composition.api._single_gaussians, on meshes of 1 and more where the
        # dominated leaf's split is bounded)
        mu = 10 ** rng.uniform(-1, 2.5)
        sigma = math.sqrt(k) / mu
        pld, desc = F.compose(F.Gaussian(sigma), k, **acc), f"Gaussian({sigma:.6g}) x {k}"
    elif kind == "hetero":
        # (merged into one Gaussian by compose: composition.api._merged_gaussians)
        parts = [(10 ** rng.uniform(-0.3, 1.5), 10 ** rng.uniform(-0.5, 0.5), int(10 ** rng.uniform(0, 3.5)))
                 for _ in range(rng.randint(2, 5))]
        mu = math.sqrt(sum(c * (d / s) ** 2 for s, d, c in parts))
        if not 0.05 < mu < 300:
            return None
        pld, desc = F.compose([(F.Gaussian(s, d), c) for s, d, c in parts], **acc), f"Gaussians {parts}"
    if kind in ("gauss", "hetero"):
        return (f"{desc}, rel_error={rel}", pld, lambda e: float(O.gaussian_delta(e, mu)),
                lambda d: O.gaussian_epsilon(d, mu))
    if kind == "pure":
        k = int(10 ** rng.uniform(0, 3.3))
        e0 = 10 ** rng.uniform(-2.5, 0.5)
        pld = F.compose(F.PureDP(e0), k, **acc)
        fd = lambda e: O.pure_dp_delta(e, e0, k)  # noqa: E731
        return f"PureDP({e0:.6g}) x {k}, rel_error={rel}", pld, fd, lambda d: O.epsilon_of(fd, d)
    if kind == "rr":
        # (k up to 500: the trinomial sum's log-gamma terms keep ~1e-13 of relative accuracy there)
        k, c = int(10 ** rng.uniform(0, 2.7)), rng.randint(3, 10)
        e0 = 10 ** rng.uniform(-2, 0.5)
        pld = F.compose(F.RandomizedResponse(e0, c), k, **acc)
        fd = lambda e: O.rr_delta(e, e0, c, k)  # noqa: E731
        return f"RandomizedResponse({e0:.6g}, {c}) x {k}, rel_error={rel}", pld, fd, lambda d: O.epsilon_of(fd, d)
    if kind == "approx":
        k = int(10 ** rng.uniform(0, 3))
        e0, d0 = 10 ** rng.uniform(-2.5, 0.5), 10 ** rng.uniform(-12, -6)
        pld = F.compose(F.ApproxDP(e0, d0), k, **acc)
        fd = lambda e: O.approx_dp_delta(e, e0, d0, k)  # noqa: E731
        return f"ApproxDP({e0:.6g}, {d0:.3g}) x {k}, rel_error={rel}", pld, fd, lambda d: O.epsilon_of(fd, d)
    if kind == "gauss_pure":
        kp = int(10 ** rng.uniform(0, 3))
        mu, e0 = 10 ** rng.uniform(-1, 0.7), 10 ** rng.uniform(-2.5, 0)
        # (one to three Gaussian parts sharing mu^2 at random: several are merged into one by compose)
        shares = [rng.uniform(0.1, 1.0) for _ in range(rng.randint(1, 3))]
        gauss = [(math.sqrt(kg / (mu * mu * w / sum(shares))), kg)
                 for w, kg in zip(shares, (int(10 ** rng.uniform(0, 4)) for _ in shares))]
        mu = math.sqrt(sum(kg / sigma ** 2 for sigma, kg in gauss))
        pld = F.compose([(F.Gaussian(sigma), kg) for sigma, kg in gauss] + [(F.PureDP(e0), kp)], **acc)
        fd = lambda e: O.gauss_pure_delta(e, mu, e0, kp)  # noqa: E731
        return (f"Gaussians {gauss} with PureDP({e0:.6g}) x {kp}, rel_error={rel}", pld, fd,
                lambda d: O.epsilon_of(fd, d))
    if kind == "psl1":
        b, q = 10 ** rng.uniform(-1, 1), 10 ** rng.uniform(-3, -0.3)
        pld = F.compose(F.PoissonSubsampledLaplace(b, q), 1, **acc)
        fd = lambda e: O.psl_delta(e, b, q)  # noqa: E731
        return f"PoissonSubsampledLaplace({b:.6g}, {q:.6g}) x 1, rel_error={rel}", pld, fd, lambda d: O.epsilon_of(fd, d)
    if kind == "laplace1":
        b = 10 ** rng.uniform(-1, 1.5)
        pld = F.compose(F.Laplace(b), 1, **acc)
        fd = lambda e: O.laplace_delta(e, 1.0 / b)  # noqa: E731
        return f"Laplace({b:.6g}) x 1, rel_error={rel}", pld, fd, lambda d: O.epsilon_of(fd, d)
    sigma, q = 10 ** rng.uniform(-0.3, 1), 10 ** rng.uniform(-3, -0.3)
    pld = F.compose(F.PoissonSubsampledGaussian(sigma, q), 1, **acc)
    fd = lambda e: O.psg_delta(e, sigma, q)  # noqa: E731
    return f"PoissonSubsampledGaussian({sigma:.6g}, {q:.6g}) x 1, rel_error={rel}", pld, fd, lambda d: O.epsilon_of(fd, d)


def main(argv=None) -> int:
    a, rng, t0 = start(__doc__, argv)
    n = misses = refused = 0
    while time.perf_counter() - t0 < a.seconds:
        deltas = [10 ** rng.uniform(-10, -2) for _ in range(3)]
        try:
            drawn = _draw(rng)
        except ValueError as exc:  # (a composition refused: reported, not a miss)
            refused += 1
            print(f"REFUSED: {str(exc)[:150]}", flush=True)
            continue
        if drawn is None:
            continue
        desc, pld, exact_delta, exact_eps = drawn
        n += 1
        for d in deltas:
            try:
                b = pld.epsilon(d)
            except ValueError:  # (a delta the composition's charges cannot certify: the caller's error)
                continue
            x = exact_eps(d)
            tol = 1e-12 * max(1.0, abs(x))
            if not b.lower - tol <= x <= b.upper + tol:
                misses += 1
                print(f"MISS epsilon({d:.3g}): {desc}: {b} against {x!r}", flush=True)
            for e in (0.7 * x, x, 1.3 * x) if x > 0 else (0.5,):
                try:
                    bd = pld.delta(e)
                except ValueError:
                    continue
                y = exact_delta(e)
                tol = 1e-12 * y + 2e-12
                if not bd.lower - tol <= y <= bd.upper + tol:
                    misses += 1
                    print(f"MISS delta({e:.6g}): {desc}: {bd} against {y!r}", flush=True)
    print(f"{n} compositions, {misses} intervals missing the oracle, {refused} refused "
          f"({time.perf_counter() - t0:.0f} s, seed {a.seed})")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
