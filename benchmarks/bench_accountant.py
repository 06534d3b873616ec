"""PrivacyAccountant in a training loop, and the import time of fastpld.

For each history length ``k`` the accountant first records ``k`` steps of a
Poisson-subsampled Gaussian (sigma 1, q 0.01) and answers once; then it runs
``--steps`` more iterations of ``compose(m)`` + ``get_epsilon(1e-5)``, each
timed.  Printed: median, mean and max per iteration, for the default
``lookahead`` (bracketed answers) and ``lookahead=0`` (every state composed
exactly).  Import time is the median wall time of ``--import-runs`` fresh
``python -c "import fastpld"`` processes.  JSON goes to
``benchmarks/results/bench_accountant.json``.

    PYTHONPATH=src python benchmarks/bench_accountant.py
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import fastpld

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def loop(k, steps, lookahead):
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    acc = fastpld.PrivacyAccountant(lookahead=lookahead).compose(m, k)
    acc.get_epsilon(1e-5)
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        acc.compose(m)
        acc.get_epsilon(1e-5)
        ts.append(time.perf_counter() - t0)
    return {"k": k, "lookahead": lookahead, "steps": steps, "median_ms": statistics.median(ts) * 1e3,
            "mean_ms": statistics.fmean(ts) * 1e3, "max_ms": max(ts) * 1e3}


def _one_import(src):
    env = dict(os.environ, PYTHONPATH=src)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import fastpld"], check=True, env=env)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def import_time(runs, trees):
    """Wall and CPU time of ``import fastpld`` from each source tree, the trees interleaved run by run."""
    samples = {name: [] for name in trees}
    for _ in range(runs):
        for name, src in trees.items():
            samples[name].append(_one_import(src))
    out = {}
    for name, xs in samples.items():
        wall = [w for w, _ in xs]
        cpu = [c for _, c in xs]
        out[name] = {"src": trees[name], "runs": runs, "median_s": statistics.median(wall), "min_s": min(wall),
                     "max_s": max(wall), "cpu_median_s": statistics.median(cpu)}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ks", default="1000,10000,100000")
    ap.add_argument("--import-only", action="store_true")
    ap.add_argument("--steps", type=int, default=200, help="timed iterations with the default lookahead")
    ap.add_argument("--exact-steps", type=int, default=15, help="timed iterations with lookahead=0")
    ap.add_argument("--import-runs", type=int, default=15)
    ap.add_argument("--baseline-src", help="another source tree (e.g. an older checkout's src/) timed alongside")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "bench_accountant.json"))
    args = ap.parse_args(argv)
    ks = [int(float(x)) for x in args.ks.split(",")]
    trees = {"this": os.path.join(ROOT, "src")}
    if args.baseline_src:
        trees["baseline"] = os.path.abspath(args.baseline_src)
    imp = import_time(args.import_runs, trees)
    for name, r in imp.items():
        print(f"import fastpld ({name}, {r['src']}): wall median {r['median_s']:.3f} s (min {r['min_s']:.3f}, "
              f"max {r['max_s']:.3f}), CPU median {r['cpu_median_s']:.3f} s, {r['runs']} runs")
    rows = []
    ks = [] if args.import_only else ks
    print(f"{'k':>8} {'lookahead':>9} {'steps':>6} {'median ms':>10} {'mean ms':>9} {'max ms':>9}")
    for k in ks:
        for la, steps in ((1e-3, args.steps), (0.0, args.exact_steps)):
            r = loop(k, steps, la)
            rows.append(r)
            print(f"{k:>8} {la:>9g} {steps:>6} {r['median_ms']:>10.3f} {r['mean_ms']:>9.3f} {r['max_ms']:>9.1f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "import": imp, "accountant": rows},
                  f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
