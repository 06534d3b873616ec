"""``method="auto"`` with an absolute ``eps_error``: what it picks, against the coupling plans alone
(``method="coupling"``) and the dominance certificate alone, side by side in one process.

For each workload and eps_error: the median time of ``compose`` (caches cleared before every run,
the three methods alternating), the certified interval of ``epsilon(1e-6)``, and the method auto ran.
Prints a markdown table and writes ``benchmarks/results/bench_auto.json``.

    python benchmarks/bench_auto.py [--repeat 3] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import fastpld

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = ("auto", "coupling", "dominance")
DELTA = 1e-6


def workloads(quick: bool):
    w = [
        ("PSG(q=0.01, sigma=1) x 1e4", fastpld.PoissonSubsampledGaussian(1.0, 0.01), 10**4),
        ("PSG(q=0.001, sigma=0.8) x 1e5", fastpld.PoissonSubsampledGaussian(0.8, 0.001), 10**5),
        ("PSG(q=0.1, sigma=5) x 1e3", fastpld.PoissonSubsampledGaussian(5.0, 0.1), 10**3),
        ("PSG(q=0.2, sigma=216.3) x 2^16 (paper)", fastpld.PoissonSubsampledGaussian(216.3, 0.2), 2**16),
        ("Laplace(1081.19) x 2^16 (paper)", fastpld.Laplace(1081.19), 2**16),
        ("Gaussian(1) x 1", fastpld.Gaussian(1.0), 1),
        ("Gaussian(10) x 100", fastpld.Gaussian(10.0), 100),
        ("PureDP(0.1) x 1e3", fastpld.PureDP(0.1), 1000),
        ("Laplace(1) x 100", fastpld.Laplace(1.0), 100),
        ("RandomizedResponse(1) x 1e4", fastpld.RandomizedResponse(1.0), 10**4),
        ("PS-Laplace(q=0.01, b=1) x 1e4", fastpld.PoissonSubsampledLaplace(1.0, 0.01), 10**4),
        ("50 distinct PSG(q=0.005..0.02, sigma=1) x 100", [(fastpld.PoissonSubsampledGaussian(1.0, 0.005 + 0.015 * i / 49),
                                                            100) for i in range(50)], None),
    ]
    return w[:3] if quick else w


def run(mech, k, ee, method):
    fastpld.clear_caches()
    t0 = time.perf_counter()
    try:
        pld = fastpld.compose(mech, k, eps_error=ee, method=method)  # (k None: a list of events)
    except ValueError as exc:
        return {"time_s": time.perf_counter() - t0, "refused": str(exc)[:200]}
    t = time.perf_counter() - t0
    b = pld.epsilon(DELTA)
    return {"time_s": t, "lower": float(b.lower), "upper": float(b.upper), "method": pld.method}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_auto.json"))
    a = ap.parse_args(argv)
    eps_errors = (0.1,) if a.quick else (0.1, 0.01)
    rows = []
    print("| workload | eps_error | auto (method) | coupling | dominance | auto / fastest |")
    print("|---|---:|---|---:|---:|---:|")
    for name, mech, k in workloads(a.quick):
        for ee in eps_errors:
            runs = {m: [] for m in METHODS}
            for _ in range(a.repeat):
                for m in METHODS:
                    runs[m].append(run(mech, k, ee, m))
            row = {"workload": name, "eps_error": ee}
            cells = {}
            for m in METHODS:
                ok = [r for r in runs[m] if "refused" not in r]
                if not ok:
                    row[m] = {"refused": runs[m][0]["refused"]}
                    cells[m] = "refused"
                    continue
                med = statistics.median(r["time_s"] for r in ok)
                last = ok[-1]
                row[m] = {"median_s": med, "lower": last["lower"], "upper": last["upper"], "method": last["method"]}
                cells[m] = f"{1e3 * med:.1f} ms [{last['lower']:.4f}, {last['upper']:.4f}]"
            times = [row[m]["median_s"] for m in ("coupling", "dominance") if "median_s" in row[m]]
            ratio = row["auto"]["median_s"] / min(times) if times and "median_s" in row["auto"] else float("nan")
            row["auto_over_fastest"] = ratio
            rows.append(row)
            picked = row["auto"].get("method", "refused")
            print(f"| {name} | {ee:g} | {cells['auto']} ({picked}) | {cells['coupling']} | {cells['dominance']} "
                  f"| {ratio:.2f} |", flush=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump({"delta": DELTA, "repeat": a.repeat, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
