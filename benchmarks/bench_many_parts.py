"""Compositions of many distinct mechanisms: how the time grows with the number of parts.

A training run with a noise or batch-size schedule, or an analytics ledger of queries at many budgets, composes
hundreds to thousands of distinct mechanisms.  Per family and size ``n``: ``compose(events).epsilon(1e-5)`` at the
default accuracy (caches cleared, FFT plans kept, the best of ``--repeat``), the time per part and the interval:

* ``Gaussian levels``: ``Gaussian(20 + 1e-3 i)``, one step each (merged into one Gaussian, exactly);
* ``subsampled Gaussian levels``: ``PoissonSubsampledGaussian(1 + 1e-4 i, 0.01)``, five steps each;
* ``pure-DP ledger``: ``PureDP(eps_i)``, ``eps_i`` drawn from 0.01-0.5 in steps of 0.001.

Writes ``many_parts.json`` to ``--out``.

    python benchmarks/bench_many_parts.py [--sizes 100,1000,3000] [--repeat 2] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time

import fastpld


def _families(n: int):
    rng = random.Random(1)
    return [
        ("Gaussian levels", [(fastpld.Gaussian(20.0 + 1e-3 * i), 1) for i in range(n)]),
        ("subsampled Gaussian levels", [(fastpld.PoissonSubsampledGaussian(1.0 + 1e-4 * i, 0.01), 5)
                                        for i in range(n)]),
        ("pure-DP ledger", [(fastpld.PureDP(round(rng.uniform(0.01, 0.5), 3)), 1) for _ in range(n)]),
    ]


def run(sizes, repeat: int) -> list:
    rows = []
    print("| family | parts | time | per part | epsilon(1e-5) |\n|---|---:|---:|---:|---|", flush=True)
    for n in sizes:
        for name, events in _families(n):
            best, b = float("inf"), None
            for _ in range(repeat):
                fastpld.clear_caches(keep_plans=True)
                t0 = time.perf_counter()
                b = fastpld.compose(events).epsilon(1e-5)
                best = min(best, time.perf_counter() - t0)
            rows.append({"family": name, "parts": n, "time": best, "lower": b.lower, "upper": b.upper})
            print(f"| {name} | {n} | {best * 1e3:.1f} ms | {best / n * 1e6:.1f} us | [{b.lower:.6f}, {b.upper:.6f}] |",
                  flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,1000,3000", help="numbers of distinct parts, comma-separated")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args(argv)
    rows = run([int(x) for x in a.sizes.split(",")], a.repeat)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "many_parts.json"), "w") as fh:
        json.dump({"delta": 1e-5, "repeat": a.repeat, "rows": rows}, fh, indent=1)
    print(f"wrote {os.path.join(a.out, 'many_parts.json')}")


if __name__ == "__main__":
    main()
