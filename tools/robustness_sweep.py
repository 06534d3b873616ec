"""Random compositions of the mechanisms without a closed-form curve: every answer must be consistent, every refusal
a clear ``ValueError``.

Usage (from the repository root)::

    python tools/robustness_sweep.py --seconds 300 --seed 1

Draws, until ``--seconds`` have passed, one of: Poisson-subsampled Laplace, Poisson-subsampled randomized response,
sampling without replacement and truncated Poisson batches of a Gaussian, Laplace, and heterogeneous mixes
(subsampled Gaussians; pure DP of several epsilons; approximate DP with a Gaussian; a subsampled Laplace with a
subsampled Gaussian), composed a random number of times at a random accuracy (the default, ``rel_error`` 1e-2 or
1e-3, ``eps_error`` 0.01).  It asks ``epsilon`` at deltas 1e-2, 1e-5 and 1e-8 and checks:

* each interval is finite and ordered, ``lower <= estimate <= upper``;
* ``epsilon(delta)`` does not increase with ``delta``: a smaller delta's upper bound is at least a larger one's lower;
* the two queries agree: ``delta`` at the upper bound of ``epsilon(delta)`` has its lower bound at most ``delta``,
  and ``delta`` just below its lower bound has its upper bound at least ``delta`` (``delta(eps)`` is non-increasing);
* a composition or query that fails raises ``ValueError``, and never blames its input (a ``CustomCDF``, none of
  which is drawn, or degenerate parameters: every draw's are valid).

Prints every inconsistency and a tally of the refusals; the exit status is 1 if there was an inconsistency or an
exception other than ``ValueError``.  ``tools/oracle_sweep.py`` checks the mechanisms whose exact curves are known.
"""
from __future__ import annotations

import math
import sys
import time
import traceback
import warnings

import fastpld as F
from _sweep import start

DELTAS = (1e-2, 1e-5, 1e-8)
_REL = 1e-9  # (the queries' own rounding, relative, in the cross-checks)


def _draw(rng):
    """``(description, events, accuracy)`` of one random question."""
    kind = rng.choice(["psl", "ps_rr", "swor", "tps", "lap", "psg_mix", "pure_mix", "approx_gauss", "psl_psg"])
    k = int(10 ** rng.uniform(0, 4))
    if kind == "psl":
        events = [(F.PoissonSubsampledLaplace(10 ** rng.uniform(-1, 1.5), 10 ** rng.uniform(-3.5, -0.3)), k)]
    elif kind == "ps_rr":
        rr = F.RandomizedResponse(10 ** rng.uniform(-1.5, 0.7), rng.randint(2, 6))
        events = [(F.PoissonSubsampled(rr, 10 ** rng.uniform(-3, -0.3)), k)]
    elif kind == "swor":
        n = int(10 ** rng.uniform(3, 6))
        b = max(1, int(n * 10 ** rng.uniform(-3, -1)))
        events = [(F.SubsampledWithoutReplacement(F.Gaussian(10 ** rng.uniform(-0.2, 1)), b, n), min(k, 3000))]
    elif kind == "tps":
        n = int(10 ** rng.uniform(3, 5))
        q = 10 ** rng.uniform(-3, -1)
        cap = max(2, int(q * n * rng.uniform(1.2, 3)))
        events = [(F.TruncatedPoissonSubsampled(F.Gaussian(10 ** rng.uniform(0, 1)), q, n, cap), min(k, 1000))]
    elif kind == "lap":
        events = [(F.Laplace(10 ** rng.uniform(-0.5, 2)), k)]
    elif kind == "psg_mix":
        events = [(F.PoissonSubsampledGaussian(10 ** rng.uniform(-0.3, 1), 10 ** rng.uniform(-4, -0.5)),
                   int(10 ** rng.uniform(0, 4))) for _ in range(rng.randint(2, 4))]
    elif kind == "pure_mix":
        events = [(F.PureDP(10 ** rng.uniform(-2.5, 0)), int(10 ** rng.uniform(0, 3))) for _ in range(rng.randint(2, 3))]
    elif kind == "approx_gauss":
        events = [(F.ApproxDP(10 ** rng.uniform(-2.5, 0), 10 ** rng.uniform(-12, -7)), int(10 ** rng.uniform(0, 3))),
                  (F.Gaussian(10 ** rng.uniform(0, 2)), int(10 ** rng.uniform(0, 3)))]
    else:
        events = [(F.PoissonSubsampledLaplace(10 ** rng.uniform(-0.5, 1.5), 10 ** rng.uniform(-3, -1)),
                   int(10 ** rng.uniform(0, 3))),
                  (F.PoissonSubsampledGaussian(10 ** rng.uniform(0, 1), 10 ** rng.uniform(-3, -1)),
                   int(10 ** rng.uniform(0, 3)))]
    acc = rng.choice([{}, {"rel_error": 1e-2}, {"rel_error": 1e-3}, {"eps_error": 0.01}])
    return f"{kind}: {events} {acc}", events, acc


def _check(pld):
    """The inconsistencies of one composition's answers (strings), and the refusals of its queries."""
    out, refused, prev = [], [], None
    for d in DELTAS:
        try:
            b = pld.epsilon(d)
        except ValueError as exc:  # (a delta the composition's charges cannot certify: a clear refusal)
            refused.append(str(exc))
            continue
        if not (math.isfinite(b.lower) and math.isfinite(b.upper) and b.lower <= b.estimate <= b.upper):
            out.append(f"epsilon({d:g}) = {b}: not finite and ordered")
            continue
        if prev is not None and b.upper < prev[1].lower * (1 - _REL) - 1e-12:
            out.append(f"epsilon({d:g}) = {b} below epsilon({prev[0]:g}) = {prev[1]}")
        prev = (d, b)
        try:
            up = pld.delta(b.upper)
            if up.lower > d * (1 + _REL) + 1e-15:
                out.append(f"delta({b.upper!r}) = {up} for epsilon({d:g}) = {b}: its lower bound above {d:g}")
            if b.lower > 0:
                x = b.lower * (1 - _REL) - 1e-12
                lo = pld.delta(max(x, 0.0))
                if lo.upper < d * (1 - _REL) - 1e-15:
                    out.append(f"delta({x!r}) = {lo} for epsilon({d:g}) = {b}: its upper bound below {d:g}")
        except ValueError as exc:
            refused.append(str(exc))
    return out, refused


def main(argv=None) -> int:
    a, rng, t0 = start(__doc__, argv)
    n = bad = 0
    refusals: dict = {}
    while time.perf_counter() - t0 < a.seconds:
        desc, events, acc = _draw(rng)
        problems, refused = [], []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (calibration-style warnings are not what this checks)
                pld = F.compose(events if len(events) > 1 else events[0][0],
                                None if len(events) > 1 else events[0][1], **acc)
                problems, refused = _check(pld)
            n += 1
        except ValueError as exc:
            refused.append(str(exc))
        except Exception as exc:  # (anything but a ValueError is a defect)
            problems.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")
        for msg in refused:
            if "CustomCDF" in msg or "parameters are degenerate" in msg:
                problems.append(f"a refusal that blames the input: {msg[:300]}")
            key = msg[:70]
            refusals[key] = refusals.get(key, 0) + 1
        for p in problems:
            bad += 1
            print(f"INCONSISTENT {desc}: {p}", flush=True)
    print(f"{n} compositions answered, {sum(refusals.values())} refusals, {bad} inconsistencies "
          f"({time.perf_counter() - t0:.0f} s, seed {a.seed})")
    for msg, count in sorted(refusals.items(), key=lambda x: -x[1])[:10]:
        print(f"  {count} x {msg}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
