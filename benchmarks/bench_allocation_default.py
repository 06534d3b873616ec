"""Random allocation at the default accuracy: one question each, from scratch (every cache cleared).

1. ``compose(RandomAllocation(Gaussian(1), 100), 10).epsilon(1e-5)``: both certified bounds;
2. the same with ``num_selected=2`` (two steps of each epoch per record; upper bound only);
3. ``find_noise_multiplier(3.0, 1e-5, 1/100, 10, sampler=RandomAllocation)``: ten epochs of 100 steps;
4. with ``--heavy``: epsilon of 1 at sigma 0.6 and 0.5 (heavy-tailed likelihood ratios).

Next to ``PLD_accounting``'s ``gaussian_allocation_epsilon_range`` for 1 and 2 (skipped if missing).
Prints a markdown table and writes ``benchmarks/results/bench_allocation_default.json``.

    python benchmarks/bench_allocation_default.py [--heavy]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import fastpld

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_allocation_default.json")
SIGMA, T, EPOCHS, DELTA = 1.0, 100, 10, 1e-5


def timed(fn):
    fastpld.clear_caches()
    t0 = time.perf_counter()
    try:
        val = fn()
    except ValueError as exc:
        val = f"refused: {str(exc)[:80]}"
    return val, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heavy", action="store_true", help="also sigma 0.6 and 0.5 (minutes for PLD_accounting)")
    a = ap.parse_args(argv)
    rows = []

    def ra(s, k=1):
        return fastpld.RandomAllocation(fastpld.Gaussian(s), T, k) if k == 1 else \
            fastpld.RandomAllocation(fastpld.Gaussian(s), T, num_selected=k)

    cases = [(SIGMA, 1), (SIGMA, 2)] + ([(0.6, 1), (0.5, 1)] if a.heavy else [])
    for sigma, k in cases:
        task = f"epsilon, num_selected={k}" + (f", sigma {sigma}" if sigma != SIGMA else "")
        b, t = timed(lambda: fastpld.compose(ra(sigma, k), EPOCHS).epsilon(DELTA))
        rows.append({"task": task, "tool": "fastpld", "time_s": t,
                     "result": str(b) if isinstance(b, str) else [b.lower, b.upper]})
        try:
            import PLD_accounting as pa
            t0 = time.perf_counter()
            r = pa.gaussian_allocation_epsilon_range(delta=DELTA, sigma=sigma, num_steps=T, num_selected=k,
                                                     num_epochs=EPOCHS)
            rows.append({"task": task, "tool": "PLD_accounting", "time_s": time.perf_counter() - t0,
                         "result": [min(r), max(r)]})
        except ImportError:
            pass
    s, t = timed(lambda: fastpld.find_noise_multiplier(3.0, DELTA, 1.0 / T, EPOCHS,
                                                       sampler=lambda s, q: ra(s)))
    rows.append({"task": "sigma for epsilon 3", "tool": "fastpld", "time_s": t, "result": s})
    print(f"fastpld {getattr(fastpld, '__version__', '?')}; Gaussian({SIGMA}), {T} steps per epoch, {EPOCHS} epochs, "
          f"delta {DELTA}")
    print("| task | tool | time (s) | result |\n|---|---|---:|---|")
    for r in rows:
        res = r["result"]
        res = f"[{res[0]:.4f}, {res[1]:.4f}]" if isinstance(res, list) else (f"{res:.6f}" if isinstance(res, float)
                                                                                else res)
        print(f"| {r['task']} | {r['tool']} | {r['time_s']:.1f} | {res} |")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
