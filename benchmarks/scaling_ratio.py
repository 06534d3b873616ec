"""The 2^30-over-2^10 time ratio of paper_figures.py alone, in seconds instead of minutes.

Runs the fastpld part of ``paper_figures.beyond_section`` (the same jobs, order, cold and warm runs and
medians) without the peers and the memory probes, and prints the ratio of median times at k = 2^30 and
k = 2^10 per delta_error (issue 6's target: at most 3x).  The full benchmark remains the reference: its
numbers go into docs/performance.md.

    python benchmarks/scaling_ratio.py [--runs 10] [--repeat 1] [--mechanisms laplace,psg] [--top 30] [--out FILE.json]

``--repeat R`` runs the whole measurement R times in a row and adds, per row, the median, lowest and
highest of the R ratios: this machine's speed drifts over minutes, and the ratio with it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _common as C  # noqa: E402
import paper_figures as PF  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs per point (default 10, as the run in docs/performance.md)")
    ap.add_argument("--mechanisms", default=",".join(C.MECHANISMS), help="comma-separated: laplace,psg")
    ap.add_argument("--top", type=int, default=30, choices=(16, 20, 24, 30),
                    help="largest k as a power of two (default 30; the ratio is t(2^top) / t(2^10))")
    ap.add_argument("--repeat", type=int, default=1, help="repeat the whole measurement (default 1)")
    ap.add_argument("--out", default=None, help="write the ratios as JSON here")
    a = ap.parse_args(argv)
    mechs = tuple(m for m in a.mechanisms.split(",") if m)
    bad = [m for m in mechs if m not in C.MECHANISMS]
    if bad or not mechs:
        ap.error(f"--mechanisms: expected some of {','.join(C.MECHANISMS)}, got {a.mechanisms!r}")
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    C.MECHANISMS = mechs  # beyond_section loops over these
    cfg = {"runs": a.runs, "beyond_exps": [e for e in (10, 16, 20, 24, 30) if e <= a.top], "peer_beyond_exps": [], "cap": 0.0,
           "memory_methods": (), "memory_exps": []}
    noise = PF.load_noise()
    repeats = []
    for rep in range(a.repeat):
        t0 = time.perf_counter()
        out = PF.beyond_section(cfg, noise)
        rows = {}
        if a.repeat > 1:
            print(f"repeat {rep + 1} of {a.repeat}:")
        print(f"| mechanism | method | delta_error | t(2^{a.top}) ms | t(2^10) ms | ratio | plans |")
        print("|---|---|---|---|---|---|---|")
        for mech in mechs:
            for m, r in out["ratio"][mech].items():
                for v in r["by_delta_error"].values():
                    rows.setdefault(mech, {}).setdefault(m, []).append(v)
                    print(f"| {mech} | {m} | {v['delta_error']:g} | {v['time_top'] * 1e3:.2f} | {v['time_10'] * 1e3:.2f} "
                          f"| {v['ratio']:.2f}x | {v['plan_top']} / {v['plan_10']} |")
        print(f"({time.perf_counter() - t0:.0f} s, {a.runs} runs per point)")
        repeats.append(rows)
    spread = {}
    if a.repeat > 1:
        print(f"over the {a.repeat} repeats:")
        print("| mechanism | method | delta_error | median ratio | lowest | highest |")
        print("|---|---|---|---|---|---|")
        for mech, by_m in repeats[0].items():
            for m, vs in by_m.items():
                for i, v in enumerate(vs):
                    rs = sorted(rp[mech][m][i]["ratio"] for rp in repeats)
                    med = rs[len(rs) // 2] if len(rs) % 2 else 0.5 * (rs[len(rs) // 2 - 1] + rs[len(rs) // 2])
                    spread.setdefault(mech, {}).setdefault(m, []).append(
                        {"delta_error": v["delta_error"], "median": med, "lowest": rs[0], "highest": rs[-1]})
                    print(f"| {mech} | {m} | {v['delta_error']:g} | {med:.2f}x | {rs[0]:.2f}x | {rs[-1]:.2f}x |")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"command": "python benchmarks/scaling_ratio.py " + " ".join(argv or sys.argv[1:]),
                       "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "top": a.top, "runs": a.runs,
                       "repeat": a.repeat, "ratios": repeats[-1], "repeats": repeats, "spread": spread}, fh, indent=1)


if __name__ == "__main__":
    main()
