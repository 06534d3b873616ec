"""Relative accuracy 1e-3 at huge k (issue 18: "no refusal up to k = 1e7 at the default delta_error").

For DP-SGD workloads with k = 1e6 .. 1e7, ``fastpld.compose(PoissonSubsampledGaussian(sigma, q), k,
rel_error=1e-3)`` at the default ``delta_error`` (1e-10): the certified interval of epsilon(1e-5) and the
time, or the refusal; then the two timing rows of k <= 1e6 (median of ``--repeat`` runs, caches cleared
between runs).  Run once per code version (``PYTHONPATH`` chooses it) with a ``--label``; writes
``benchmarks/results/huge_k-<label>.json`` and prints a markdown table.

    PYTHONPATH=src python benchmarks/bench_huge_k.py --label after [--repeat 5] [--timed-only]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import fastpld

ROWS = [(1e-4, 0.5, 10_000_000), (0.001, 1.0, 1_000_000), (0.001, 1.0, 10_000_000), (0.01, 1.0, 1_000_000),
        (0.01, 1.0, 10_000_000), (0.1, 5.0, 10_000_000)]
TIMED = [(0.01, 1.0, 10_000), (0.001, 1.0, 1_000_000)]


def _one(q, sigma, k):
    fastpld.clear_caches()
    t = time.perf_counter()
    try:
        pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(sigma, q), k, rel_error=1e-3)
        b = pld.epsilon(1e-5)
        method = next(iter(pld.directions.values())).method
        return {"time": time.perf_counter() - t, "lower": b.lower, "upper": b.upper, "method": method}
    except ValueError as exc:
        return {"time": time.perf_counter() - t, "refused": str(exc)[:160]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--timed-only", action="store_true", help="only the timing rows (k <= 1e6)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    res = {"label": args.label, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": [], "timed": []}
    print("| q | sigma | k | time (s) | epsilon(1e-5) certified | plan |")
    print("|---|---|---|---|---|---|")
    for q, s, k in ([] if args.timed_only else ROWS):
        r = _one(q, s, k)
        res["rows"].append({"q": q, "sigma": s, "k": k, **r})
        cert = (f"[{r['lower']:.5f}, {r['upper']:.5f}] (width {(r['upper'] - r['lower']) / r['lower']:.2%})"
                if "lower" in r else "refused: " + r["refused"][:70])
        print(f"| {q:g} | {s:g} | {k:.0e} | {r['time']:.2f} | {cert} | {r.get('method', '')} |", flush=True)
    print()
    print("| q | sigma | k | median time (ms) | runs |")
    print("|---|---|---|---|---|")
    for q, s, k in TIMED:
        ts = [_one(q, s, k)["time"] for _ in range(args.repeat)]
        res["timed"].append({"q": q, "sigma": s, "k": k, "times": ts, "median": statistics.median(ts)})
        print(f"| {q:g} | {s:g} | {k:.0e} | {1e3 * statistics.median(ts):.1f} | {len(ts)} |", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"huge_k-{args.label}.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
