"""Per-stage plan of the paper's workloads: buckets, mesh, window and charges per stage.

    python benchmarks/stages_report.py [--k 16] [--method two_stage]

Noise from benchmarks/data/noise_params.json (delta(1.0) = 1e-6 after k compositions);
eps_error 0.1, delta_error 1e-10.  Prints one table per mechanism and direction.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import fastpld

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=16, help="log2 of the number of compositions")
    ap.add_argument("--method", default="auto")
    args = ap.parse_args(argv)
    noise = json.load(open(os.path.join(HERE, "data", "noise_params.json")))
    e = str(args.k)
    cases = [("Poisson-subsampled Gaussian q=0.2", fastpld.PoissonSubsampledGaussian(noise["psg"][e]["noise"], 0.2)),
             ("Laplace", fastpld.Laplace(noise["laplace"][e]["noise"]))]
    for name, mech in cases:
        t = time.perf_counter()
        try:
            pld = fastpld.compose(mech, 2 ** args.k, eps_error=0.1, delta_error=1e-10, method=args.method)
        except ValueError as exc:  # e.g. Laplace at k >= 2^20: round-off alone exceeds delta_error 1e-10
            print(f"\n## {name}, k = 2^{args.k}: refused: {exc}")
            continue
        b = pld.delta(1.0)
        dt = time.perf_counter() - t
        print(f"\n## {name}, k = 2^{args.k}, noise {mech!r}")
        print(f"method {pld.method}, {dt * 1e3:.1f} ms (compose + query), total buckets {pld.num_buckets}, "
              f"delta(1.0) in [{b.lower:.3e}, {b.upper:.3e}] (estimate {b.estimate:.3e})")
        for d, res in pld.directions.items():
            c = res.certificate
            print(f"\ndirection {d}: eps spent {res.eps_spent:.4f}, delta spent {res.delta_spent:.3g} "
                  f"(eta {c['eta']:.2g}, truncation {c['truncation']:.2g}, wrap {c['wrap']:.2g}, "
                  f"round-off {c['roundoff']:.2g})")
            print("| stage | compositions | mesh h | window | buckets | instances | precision |")
            print("|---|---|---|---|---|---|---|")
            for s in res.stages:
                print(f"| {s.kind} | {s.compositions} | {s.mesh:.3g} | [{s.window[0]:.3g}, {s.window[1]:.3g}] "
                      f"| {s.buckets} | {s.instances} | {s.precision} |")


if __name__ == "__main__":
    main()
