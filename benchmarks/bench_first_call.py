"""A fresh process's first answer: the DP-SGD question (Poisson-subsampled Gaussian, sigma 1, q 0.01, 10,000
steps, epsilon at delta 1e-5) in a new Python process, as a script or the command line asks it once.

For each contender, ``--repeat`` fresh processes (interleaved across contenders); each reports the time of its
imports and of its first answer, and the wall time of the whole process (interpreter start included) is
measured from outside.  Medians.  Contenders: fastpld's ``compose(...).epsilon`` at its default accuracy, its
command line, and dp_accounting's PLD accountant at grid 1e-3 (its coarsest grid within 0.1% of the truth on
this question, see bench_frontier.py) where installed.  Writes ``benchmarks/results/first_call.json``.

    python benchmarks/bench_first_call.py [--repeat 7] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

FASTPLD = """
import time
t0 = time.perf_counter()
import fastpld
t1 = time.perf_counter()
b = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 10_000).epsilon(1e-5)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, b.upper)
"""

DPA = """
import time
t0 = time.perf_counter()
from dp_accounting.pld import privacy_loss_distribution as pldlib
t1 = time.perf_counter()
one = pldlib.from_gaussian_mechanism(1.0, sampling_prob=0.01, value_discretization_interval=1e-3,
                                     pessimistic_estimate=True, use_connect_dots=True)
eps = one.self_compose(10_000).get_epsilon_for_delta(1e-5)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, eps)
"""

CLI = ["-m", "fastpld.cli", "epsilon", "--sigma", "1.0", "--sampling-probability", "0.01", "--steps", "10000",
       "--delta", "1e-5", "--json"]


def _run(args):
    t = time.perf_counter()
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=dict(os.environ))
    wall = time.perf_counter() - t
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return wall, out.stdout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    a = ap.parse_args(argv)
    contenders = {"fastpld compose": ["-c", FASTPLD], "fastpld CLI": CLI}
    try:
        import dp_accounting  # noqa: F401
        contenders["dp_accounting (grid 1e-3)"] = ["-c", DPA]
    except ImportError:
        pass
    rows = {name: {"wall": [], "import": [], "first": [], "answer": None} for name in contenders}
    for _ in range(a.repeat):
        for name, args in contenders.items():
            wall, out = _run(args)
            rows[name]["wall"].append(wall)
            if args is CLI:
                rows[name]["answer"] = float(json.loads(out)["epsilon"]["upper"])
            else:
                imp, first, ans = out.split()
                rows[name]["import"].append(float(imp))
                rows[name]["first"].append(float(first))
                rows[name]["answer"] = float(ans)
    print("| contender | process wall (median) | imports | first answer | epsilon |")
    print("|---|---:|---:|---:|---:|")
    summary = {}
    for name, r in rows.items():
        med = {k: statistics.median(v) if v else None for k, v in r.items() if k != "answer"}
        summary[name] = dict(med, answer=r["answer"], repeat=a.repeat)
        fmt = lambda x: "-" if x is None else f"{1e3 * x:.0f} ms"  # noqa: E731
        ans = r["answer"] if isinstance(r["answer"], str) else f"{r['answer']:.5f}"
        print(f"| {name} | {fmt(med['wall'])} | {fmt(med['import'])} | {fmt(med['first'])} | {ans} |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "first_call.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
