"""Two versions of fastpld side by side: alternating processes, one per version and round, each timing the DP-SGD
question ``compose(PoissonSubsampledGaussian(sigma, q), k, rel_error=...).epsilon(1e-5)``.

Each process answers ``--answers`` times after two warm-ups, with ``clear_caches(keep_plans=True)`` before each
(FFT plans kept, as in ``bench_frontier.py``), and prints its median; the table gives the median of the rounds'
medians per version and their ratio.  The other version is a source tree (``--base``, e.g. a ``git worktree`` of an
earlier commit with the compiled modules copied in), imported through ``PYTHONPATH``; this checkout is the other.

    python benchmarks/ab_versions.py --base /work/wt/base/src --rows 5,0.1,1e3 1,0.01,1e4 --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import statistics, sys, time
import fastpld
s, q, k, n, rel = float(sys.argv[1]), float(sys.argv[2]), int(float(sys.argv[3])), int(sys.argv[4]), float(sys.argv[5])
m = fastpld.PoissonSubsampledGaussian(s, q)
ts = []
for _ in range(n + 2):
    fastpld.clear_caches(keep_plans=True)
    t = time.perf_counter()
    e = fastpld.compose(m, k, rel_error=rel).epsilon(1e-5)
    ts.append(time.perf_counter() - t)
print(statistics.median(ts[2:]) * 1e3, float(e.lower), float(e.upper))
"""


def _run(src: str | None, row, answers: int, rel: float):
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    out = subprocess.run([sys.executable, "-c", _CHILD, *row, str(answers), str(rel)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), (float(out[1]), float(out[2]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the other version's source directory (put on PYTHONPATH)")
    ap.add_argument("--rows", nargs="+", default=["5,0.1,1e3", "1,0.01,1e4", "0.8,0.001,1e5"],
                    help="sigma,q,k per workload")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--answers", type=int, default=11)
    ap.add_argument("--rel-error", type=float, default=1e-3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "ab_versions.json"))
    args = ap.parse_args(argv)
    results = []
    print("| sigma, q, k | base | this | ratio | bounds equal |")
    print("|---|---:|---:|---:|---|")
    for spec in args.rows:
        row = spec.split(",")
        base, this, same = [], [], True
        for _ in range(args.rounds):
            tb, bb = _run(args.base, row, args.answers, args.rel_error)
            tt, bt = _run(None, row, args.answers, args.rel_error)
            base.append(tb)
            this.append(tt)
            same &= bb == bt
        mb, mt = statistics.median(base), statistics.median(this)
        print(f"| {', '.join(row)} | {mb:.3f} ms | {mt:.3f} ms | {mt / mb:.3f}x | {'yes' if same else 'no'} |",
              flush=True)
        results.append({"row": spec, "base_ms": base, "this_ms": this, "ratio": mt / mb, "bounds_equal": same})
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"base": args.base, "rel_error": args.rel_error, "rows": results}, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
