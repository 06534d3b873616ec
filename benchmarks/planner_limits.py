"""Issue 17.3: how fast compose and calibrate answer or refuse at their limits.

Each case from scratch (the per-mechanism cache cleared), median of ``--repeat`` runs; prints a
table and writes ``benchmarks/results/planner_limits.json``.  Run:
``PYTHONPATH=src python benchmarks/planner_limits.py [--repeat 3]``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import fastpld
from fastpld import mechanisms as _mechanisms
from scipy import optimize
from scipy.stats import norm


def _gauss_eps(delta, mu):
    def d(e):
        return norm.cdf(-e / mu + mu / 2) - math.exp(e + norm.logcdf(-e / mu - mu / 2))
    return optimize.brentq(lambda e: d(e) - delta, 0.0, 10 * mu * mu + 100)


def _cases():
    def many_gaussians():
        fastpld.compose([(fastpld.Gaussian(1 + i * 1e-4), 1) for i in range(268)], eps_error=1e-3,
                        method="recursive")

    def huge_pure():
        fastpld.compose(fastpld.PureDP(0.6895157771384961), 1336249, eps_error=1e-3)

    def floor_rr():
        fastpld.compose(fastpld.RandomizedResponse(0.22), 10**6, eps_error=2.0, delta_error=1e-88)

    def auto_gauss():
        b = fastpld.compose(fastpld.Gaussian(2.44), 48765, eps_error=0.01).epsilon(1e-6)
        return {"lower": b.lower, "upper": b.upper, "exact": _gauss_eps(1e-6, math.sqrt(48765) / 2.44)}

    def calib_pure():
        p = fastpld.calibrate(lambda e: fastpld.PureDP(e), 10**6, 5.0, 1e-10, bracket=(1e-6, 1.0), decreasing=False)
        return {"eps0": p}

    return [("268 Gaussians, eps_error 1e-3, recursive (refused)", many_gaussians, 3),
            ("PureDP(0.69) x 1336249, eps_error 1e-3 (refused)", huge_pure, 3),
            ("RR(0.22) x 1e6, delta_error 1e-88 (refused)", floor_rr, 3),
            ("Gaussian(2.44) x 48765, eps_error 0.01, auto", auto_gauss, 1),
            ("calibrate PureDP x 1e6 to (5, 1e-10)", calib_pure, 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for name, fn, rep in _cases():
        times, outcome, extra = [], None, None
        for _ in range(rep if args.repeat > 1 else 1):
            _mechanisms._LOSS_CACHE.clear()
            t0 = time.perf_counter()
            try:
                extra = fn()
                outcome = "answered"
            except ValueError as e:
                outcome = f"{type(e).__name__}: {str(e)[:90]}"
            times.append(time.perf_counter() - t0)
        rows.append({"case": name, "median_s": statistics.median(times), "runs": len(times), "outcome": outcome,
                     "result": extra})
        print(f"{name:55s} {statistics.median(times):9.3f} s  {outcome}  {extra or ''}", flush=True)
    out = os.path.join(os.path.dirname(__file__), "results", "planner_limits.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
