"""Cost of the overflow-safe subsampled-loss evaluation (issue 17, section 2).

Times the subsampled Gaussian's CDF/SF/density kernel (compiled, and its numpy reference) on 2^17
points spread over the loss's range, and a one-step and a 1000-step composition, medians of
repeats.  Run it on two checkouts to compare (same machine, one after the other):

    PYTHONPATH=src python benchmarks/overflow_eval.py [--reps 15] [--label NAME]

Writes benchmarks/results/overflow_eval_<label>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

import fastpld
from fastpld import _kernels
from fastpld import mechanisms as _mech


def _median_time(fn, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--label", default="branch")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args()
    q, sigma = 0.01, 1.0
    v = 1 / sigma**2
    t = np.linspace(-0.5, 30.0, 1 << 17)
    core = _kernels._core
    rows = {}
    rows["psg_eval compiled (ms)"] = 1e3 * _median_time(lambda: _kernels.psg_eval(t, q, v, 1.0, True), a.reps)
    _kernels._core = None  # the numpy reference
    try:
        rows["psg_eval numpy (ms)"] = 1e3 * _median_time(lambda: _kernels.psg_eval(t, q, v, 1.0, True), a.reps)
    finally:
        _kernels._core = core

    def comp(k):
        _mech._LOSS_CACHE.clear()
        fastpld.compose(fastpld.PoissonSubsampledGaussian(sigma, q), k, eps_error=0.1, delta_error=1e-10).delta(1.0)

    rows["compose k=1 (ms)"] = 1e3 * _median_time(lambda: comp(1), a.reps)
    rows["compose k=1000 (ms)"] = 1e3 * _median_time(lambda: comp(1000), a.reps)
    print(f"{'quantity':28s} {a.label:>10s}")
    for k, val in rows.items():
        print(f"{k:28s} {val:10.3f}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"overflow_eval_{a.label}.json"), "w") as f:
        json.dump({"label": a.label, "reps": a.reps, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "medians_ms": rows}, f, indent=1)


if __name__ == "__main__":
    main()
