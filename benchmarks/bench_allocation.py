"""Random allocation (balls-in-bins): time and epsilon for t steps per epoch, 10 epochs.

fastpld: ``compose(RandomAllocation(Gaussian(sigma), t), epochs)`` -- the certified upper bound with
the default (coupling) method, both certified bounds with ``method="dominance"``, and the certified
lower bound of the dominated losses (``bound="lower"``, default method); times from
scratch (loss and answer caches cleared), median of ``--repeat`` runs.  Peer, side by side: the
``PLD_accounting`` package (Feldman and Shenfeld's PLD accountant for random allocation), its
``gaussian_allocation_epsilon_range`` (one run: it is the slowest; by default only at t = 100: at
t = 1000 it had not finished after 10 minutes on this machine).

    PYTHONPATH=src python benchmarks/bench_allocation.py [--quick] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import fastpld

SIGMA, DELTA, EPOCHS = 1.0, 1e-5, 10
EPS_ERROR, DELTA_ERROR = 0.01, 1e-9
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_allocation.json")


def _timed(fn, repeat):
    times, val = [], None
    for _ in range(repeat):
        fastpld.clear_caches()
        t0 = time.perf_counter()
        val = fn()
        times.append(time.perf_counter() - t0)
    return val, statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--peer-max-steps", type=int, default=100,
                    help="run PLD_accounting up to this many steps per epoch (at 1000 it ran over 10 minutes)")
    args = ap.parse_args()
    steps = [100] if args.quick else [100, 1000]
    repeat = 1 if args.quick else args.repeat
    rows = []
    fastpld.compose(fastpld.Gaussian(2.0), 10).epsilon(DELTA)  # warm-up
    for t in steps:
        mech = fastpld.RandomAllocation(fastpld.Gaussian(SIGMA), t)
        cases = {
            "fastpld upper (auto)": lambda: fastpld.compose(mech, EPOCHS, eps_error=EPS_ERROR,
                                                            delta_error=DELTA_ERROR).epsilon(DELTA),
            "fastpld both (dominance)": lambda: fastpld.compose(mech, EPOCHS, method="dominance", eps_error=EPS_ERROR,
                                                                delta_error=DELTA_ERROR).epsilon(DELTA),
            "fastpld lower (bound='lower')": lambda: fastpld.compose(
                fastpld.RandomAllocation(fastpld.Gaussian(SIGMA), t, bound="lower"), EPOCHS, eps_error=EPS_ERROR,
                delta_error=DELTA_ERROR).epsilon(DELTA),
            "Poisson q = 1/t, fastpld upper": lambda: fastpld.compose(
                fastpld.PoissonSubsampledGaussian(SIGMA, 1.0 / t), EPOCHS * t, eps_error=EPS_ERROR,
                delta_error=DELTA_ERROR).epsilon(DELTA),
        }
        for name, fn in cases.items():
            b, sec = _timed(fn, repeat)
            rows.append({"steps_per_epoch": t, "epochs": EPOCHS, "accountant": name, "lower": b.lower,
                         "upper": b.upper, "time": sec})
            print(f"t={t:5d}  {name:32s} eps in [{b.lower:.4f}, {b.upper:.4f}]  {sec:7.2f} s", flush=True)
        try:
            import PLD_accounting as pa
        except ImportError:  # pragma: no cover
            continue
        if t > args.peer_max_steps:
            continue
        t0 = time.perf_counter()
        up, lo = pa.gaussian_allocation_epsilon_range(delta=DELTA, sigma=SIGMA, num_steps=t, num_selected=1,
                                                      num_epochs=EPOCHS)
        sec = time.perf_counter() - t0
        rows.append({"steps_per_epoch": t, "epochs": EPOCHS, "accountant": "PLD_accounting", "lower": lo,
                     "upper": up, "time": sec})
        print(f"t={t:5d}  {'PLD_accounting':32s} eps in [{lo:.4f}, {up:.4f}]  {sec:7.2f} s", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"setting": {"sigma": SIGMA, "delta": DELTA, "epochs": EPOCHS, "eps_error": EPS_ERROR,
                               "delta_error": DELTA_ERROR}, "rows": rows,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
