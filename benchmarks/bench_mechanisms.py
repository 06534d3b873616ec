"""Mechanisms other than the subsampled Gaussian against dp_accounting, at the same certified accuracy.

The frontier benchmark (``bench_frontier.py``) measures DP-SGD; analytics pipelines compose Laplace and Gaussian
mechanisms, subsampled or not, and pure DP, and schedules of Gaussian mechanisms at many noise levels (fastpld merges
them into one Gaussian, exactly; dp_accounting composes one PLD per level).  Per row: fastpld's default
(``compose(events).epsilon(1e-5)``, the dominance certificate within 0.1% of epsilon) and dp_accounting's PLD
accountant (connect-the-dots, pessimistic)
at the coarsest grid of the frontier's ladder whose answer is within 0.1% of the truth (the reference: fastpld at
``rel_error=1e-4``); the two timed alternating after warm-up runs of each, medians of ``--repeat``, fastpld's
caches cleared before each run (its FFT plans kept, as numpy's are), as in ``bench_frontier.py``.  Writes
``mechanisms.json`` to ``--out``.

    python benchmarks/bench_mechanisms.py [--repeat 5] [--quick] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import fastpld

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_frontier import DELTA, LADDER, TIMEOUT, _alternate  # noqa: E402


def _rows():
    """``(label, fastpld mechanism, k, dp_accounting PLD of one use at a grid)`` per row."""
    from dp_accounting.pld import common, privacy_loss_distribution as pld

    def laplace(b, q=1.0):
        return lambda g: pld.from_laplace_mechanism(b, value_discretization_interval=g, sampling_prob=q)

    def gaussian(s):
        return lambda g: pld.from_gaussian_mechanism(s, value_discretization_interval=g)

    def pure(e):
        return lambda g: pld.from_privacy_parameters(common.DifferentialPrivacyParameters(e, 0.0),
                                                     value_discretization_interval=g)

    def schedule(one, parts):
        # (one PLD per part, self-composed, then composed together, as dp_accounting's accountant does)
        def build(g):
            out = None
            for arg, c in parts:
                p = one(arg)(g).self_compose(c)
                out = p if out is None else out.compose(p)
            return out
        return build

    rows = [
        ("Laplace(1) x 1e3", fastpld.Laplace(1.0), 1_000, laplace(1.0)),
        ("Laplace(10) x 1e4", fastpld.Laplace(10.0), 10_000, laplace(10.0)),
        ("PoissonSubsampledLaplace(1, 0.05) x 1e3", fastpld.PoissonSubsampledLaplace(1.0, 0.05), 1_000,
         laplace(1.0, 0.05)),
        ("PoissonSubsampledLaplace(2, 0.01) x 1e4", fastpld.PoissonSubsampledLaplace(2.0, 0.01), 10_000,
         laplace(2.0, 0.01)),
        ("Gaussian(1) x 1e2", fastpld.Gaussian(1.0), 100, gaussian(1.0)),
        ("Gaussian(10) x 1e4", fastpld.Gaussian(10.0), 10_000, gaussian(10.0)),
        ("PureDP(0.1) x 1e3", fastpld.PureDP(0.1), 1_000, pure(0.1)),
    ]
    rows = [(label, [(m, k)], (lambda one, k: lambda g: one(g).self_compose(k))(one, k)) for label, m, k, one in rows]
    sigmas = [round(5.0 + 0.2 * i, 1) for i in range(50)]
    rows.append(("50 Gaussians (sigma 5-14.8) x 100", [(fastpld.Gaussian(s), 100) for s in sigmas],
                 schedule(gaussian, [(s, 100) for s in sigmas])))
    return rows


QUICK = ("Laplace(1) x 1e3", "Gaussian(1) x 1e2", "PureDP(0.1) x 1e3")


def _fastpld(events):
    fastpld.clear_caches(keep_plans=True)  # (every run composes from scratch; the FFT plans are kept)
    t0 = time.perf_counter()
    b = fastpld.compose(events).epsilon(DELTA)
    return time.perf_counter() - t0, b


def _dpa(build, grid):
    t0 = time.perf_counter()
    eps = build(grid).get_epsilon_for_delta(DELTA)
    return time.perf_counter() - t0, eps


def run(repeat: int, quick: bool = False) -> list:
    rows = []
    print("| mechanism x k | fastpld | dp_accounting | dp_accounting / fastpld |\n|---|---|---|---|", flush=True)
    for label, events, build in _rows():
        if quick and label not in QUICK:
            continue
        ref = fastpld.compose(events, rel_error=1e-4).epsilon(DELTA)
        row = {"mechanism": label, "k": sum(c for _, c in events), "ref": [ref.lower, ref.upper]}
        _, b = _fastpld(events)
        row["fastpld"] = {"lower": b.lower, "upper": b.upper, "width": (b.upper - b.lower) / ref.lower}
        row["dp_accounting"] = {"refused": "no grid of the ladder reached the accuracy"}
        for grid in LADDER:
            t, eps = _dpa(build, grid)
            if t > TIMEOUT:
                row["dp_accounting"] = {"refused": f"grid {grid}: {t:.0f} s"}
                break
            if eps <= ref.upper * (1 + 1e-3):  # (within 0.1% of the truth, which is at most ref.upper)
                ta, tb = _alternate(lambda: _fastpld(events), lambda: _dpa(build, grid), repeat)
                row["fastpld"]["time"] = ta
                row["dp_accounting"] = {"time": tb, "grid": grid, "upper": eps}
                break
        rows.append(row)
        f, d = row["fastpld"], row["dp_accounting"]
        if "time" in d:
            print(f"| {label} | {f['time'] * 1e3:.2f} ms, width {f['width'] * 100:.3f}% | {d['time'] * 1e3:.1f} ms "
                  f"(grid {d['grid']:g}) | {d['time'] / f['time']:.1f}x |", flush=True)
        else:
            print(f"| {label} | width {f['width'] * 100:.3f}% | {d['refused']} | |", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="three small rows only")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args(argv)
    rows = run(a.repeat, a.quick)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "mechanisms.json"), "w") as fh:
        json.dump({"delta": DELTA, "repeat": a.repeat, "rows": rows}, fh, indent=1)
    print(f"wrote {os.path.join(a.out, 'mechanisms.json')}")


if __name__ == "__main__":
    main()
