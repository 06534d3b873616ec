"""Heterogeneous composition, the incremental accountant and calibration, side by side with peers.

Run (one process, alternating fastpld and peer runs, medians reported):

    python benchmarks/bench_heterogeneous.py            # everything (several minutes)
    python benchmarks/bench_heterogeneous.py --quick    # fewer repeats, shorter accountant loop
    python benchmarks/bench_heterogeneous.py --rel-error 1e-3 --repeats 5   # only the certified
        # relative-accuracy rows (dominance certificate) next to dp_accounting's PLD accountant

fastpld runs are cold: the per-mechanism caches (privacy-loss objects, moments, MGF
grids) are cleared before every repetition.  Every runner is called once before the timed
repetitions (imports; FFTW sets up a plan for each new FFT length, ~3-4 ms each): that first
call's wall time is printed apart.  Errors: fastpld eps_error=0.1 and
delta_error = delta/1000 (prv_accountant's and Opacus's convention); epsilon is
queried at delta=1e-5 and fastpld's certified *upper* bound is reported.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

import fastpld

DELTA = 1e-5
EE, DE = 0.1, DELTA * 1e-3


def cold():
    importlib.import_module("fastpld.mechanisms")._LOSS_CACHE.clear()


def timed(fn):
    """``(wall seconds, process CPU seconds, result)``: CPU time is the column to trust on a
    machine shared with other jobs (it does not count time spent waiting for a core)."""
    c = time.process_time()
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


def schedule(k, steps):
    qs = np.linspace(0.005, 0.02, k)
    return [(float(q), steps) for q in qs]


def fastpld_schedule(sched, threads=None):
    cold()
    events = [(fastpld.PoissonSubsampledGaussian(1.0, q), n) for q, n in sched]
    pld = fastpld.compose(events, eps_error=EE, delta_error=DE, threads=threads)
    return pld.epsilon(DELTA).upper, pld.method


def fastpld_schedule_rel(sched, rel_error):
    """fastpld at a relative accuracy (the dominance certificate: both bounds within ``rel_error``)."""
    fastpld.clear_caches()
    events = [(fastpld.PoissonSubsampledGaussian(1.0, q), n) for q, n in sched]
    b = fastpld.compose(events, rel_error=rel_error, delta_error=DE).epsilon(DELTA)
    return round(b.lower, 5), round(b.upper, 5)


def dpa_pld_schedule(sched, grid):
    """dp_accounting's PLD accountant (connect-the-dots, pessimistic: an upper bound) at ``grid``."""
    import dp_accounting as dpa
    acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=grid)
    for q, n in sched:
        acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(1.0)), n)
    return round(acc.get_epsilon(DELTA), 5)


def rel_error_rows(rel_error, reps):
    """50 distinct x 100 steps and the homogeneous DP-SGD row at ``rel_error`` (fastpld, certified both
    ways) against dp_accounting's PLD accountant (an upper bound only) at grid 1e-3 (and 1e-4 for the
    homogeneous row; the heterogeneous one takes tens of seconds there)."""
    rows = [("50 distinct Poisson-subsampled Gaussians x 100 steps (sigma 1, q in [0.005, 0.02])", schedule(50, 100),
             (1e-3,)),
            ("Poisson-subsampled Gaussian x 10,000 (sigma 1, q 0.01)", [(0.01, 10_000)], (1e-3, 1e-4))]
    for name, sched, grids in rows:
        runs = [(f"fastpld.compose(rel_error={rel_error:g})", lambda s=sched: fastpld_schedule_rel(s, rel_error))]
        try:
            importlib.import_module("dp_accounting")
            for grid in grids:
                runs.append((f"dp_accounting PLDAccountant, grid {grid:g}", lambda s=sched, g=grid: dpa_pld_schedule(s, g)))
        except ImportError:
            print("(dp_accounting not importable: no peer column)")
        med, outs = side_by_side(f"{name}, epsilon at delta {DELTA:g}, delta_error {DE:g}", runs, reps)
        lo, up = outs[runs[0][0]]
        print(f"  fastpld certified [{lo}, {up}], width {100 * (up - lo) / up:.3f}%")
        for label, _ in runs[1:]:
            print(f"  {label}: {outs[label]} ({100 * (outs[label] - lo) / lo:+.3f}% above fastpld's lower bound), "
                  f"{med[label] / med[runs[0][0]]:.1f}x fastpld's time")


def rdp_schedule(sched):
    import dp_accounting as dpa
    acc = dpa.rdp.RdpAccountant()
    for q, n in sched:
        acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(1.0)), n)
    return acc.get_epsilon(DELTA)


RESULTS: dict = {}  # section -> label -> medians, written to benchmarks/results/bench_heterogeneous.json


def side_by_side(name, runs, repeats):
    """runs: list of (label, fn); alternates them ``repeats`` times; prints medians."""
    times = {label: [] for label, _ in runs}
    cpus = {label: [] for label, _ in runs}
    outs = {}
    first = {}
    for label, fn in runs:  # warm-up, untimed in the medians: imports, FFTW plans of new lengths
        first[label] = timed(fn)[0]
    for _ in range(repeats):
        for label, fn in runs:
            t, c, out = timed(fn)
            times[label].append(t)
            cpus[label].append(c)
            outs[label] = out
    med = {label: statistics.median(v) for label, v in times.items()}
    cmed = {label: statistics.median(v) for label, v in cpus.items()}
    print(f"\n== {name} (median of {repeats}; wall, then process CPU time)")
    base, cbase = med[runs[0][0]], cmed[runs[0][0]]
    for label, _ in runs:
        print(f"  {label:38s} {med[label]:9.3f} s x{med[label] / base:6.1f} | cpu {cmed[label]:8.3f} s "
              f"x{cmed[label] / cbase:6.1f} | first call {first[label]:7.3f} s  -> {outs[label]}")
    RESULTS[name] = {label: {"wall_median_s": med[label], "cpu_median_s": cmed[label], "first_call_s": first[label],
                             "walls_s": times[label], "result": repr(outs[label])} for label, _ in runs}
    return med, outs


def accountant_loop(steps):
    cold()
    acc = fastpld.PrivacyAccountant(eps_error=EE, delta_error=DE)
    mech = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    per = []
    for _ in range(steps):
        t = time.perf_counter()
        acc.compose(mech)
        e = acc.get_epsilon(DELTA).upper
        per.append(time.perf_counter() - t)
    t = time.perf_counter()
    again = acc.get_epsilon(DELTA).upper  # same state: cached
    repeat = time.perf_counter() - t
    assert again == e
    return per, repeat, e


def leaf_costs():
    """CPU time per leaf (Algorithm 1 on one direction of a PSG) against its number of buckets,
    all fine and with coarse tails (lambda and per-copy budget of a 10,000-copy plan at eps_error 0.1)."""
    from fastpld.discretize import discretize_loss
    print("\n== leaf cost: discretize_loss over 100 leaves (PSG sigma 1, q in [0.005, 0.02], both directions)")
    lam = 2 * math.log(2 / 4e-9) / 0.097
    coarse = (lam, 0.01 * 0.1 * lam / 10_000)
    for h in (3e-2, 3e-3, 3e-4, 1e-4):
        for co in (None, coarse):
            cold()
            losses = [fastpld.PoissonSubsampledGaussian(1.0, float(q)).privacy_losses()[d]
                      for q in np.linspace(0.005, 0.02, 50) for d in ("remove", "add")]
            for loss in losses:
                loss.mean()  # planning computes the moments before any leaf
            c = time.process_time()
            pmfs = [discretize_loss(loss, h, 1e-13, native=True, coarse=co) for loss in losses]
            dt = (time.process_time() - c) / len(losses)
            n = sum(p.probs.size for p in pmfs)
            nz = sum(int(np.count_nonzero(p.probs)) for p in pmfs)
            print(f"  mesh {h:7.0e} {'coarse tails' if co else 'all fine    '}: {n / len(losses):8.0f} buckets/leaf "
                  f"({nz / len(losses):7.0f} non-zero), {dt * 1e6:7.0f} us/leaf (cpu)")


def opacus_prv_query(steps):
    from opacus.accountants import PRVAccountant
    acc = PRVAccountant()
    acc.history = [(1.0, 0.01, steps)]
    t = time.perf_counter()
    e = acc.get_epsilon(DELTA, eps_error=EE)
    return time.perf_counter() - t, e


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--loop-steps", type=int, default=None)
    ap.add_argument("--leaf-costs", action="store_true", help="only time the leaves (discretize_loss)")
    ap.add_argument("--rel-error", type=float, default=None,
                    help="only the relative-accuracy rows (fastpld's dominance certificate against dp_accounting)")
    args = ap.parse_args()
    if args.leaf_costs:
        leaf_costs()
        return
    if args.rel_error is not None:
        warnings.simplefilter("ignore")
        print(f"fastpld {fastpld.__version__}, backend {fastpld.get_backend()}, rel_error={args.rel_error:g}, "
              f"delta_error={DE}")
        rel_error_rows(args.rel_error, args.repeats or 5)
        out = Path(__file__).resolve().parent / "results" / "bench_heterogeneous_rel.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"fastpld": fastpld.__version__, "rel_error": args.rel_error,
                                   "repeats": args.repeats or 5, "sections": RESULTS}, indent=1, default=float))
        print(f"\nresults: {out}")
        return
    reps = args.repeats or (1 if args.quick else 3)
    loop_steps = args.loop_steps or (200 if args.quick else 1000)
    warnings.simplefilter("ignore")
    print(f"fastpld {fastpld.__version__}, backend {fastpld.get_backend()}, eps_error={EE}, delta_error={DE}")

    # 1. 50 distinct x 100 steps vs dp_accounting's RDP accountant
    s50 = schedule(50, 100)
    # (fastpld's default runs the add and remove directions on two threads; threads=1 shown too)
    side_by_side("50 distinct Poisson-subsampled Gaussians x 100 steps (sigma 1, q in [0.005, 0.02])",
                 [("fastpld.compose (grouped plan)", lambda: fastpld_schedule(s50)),
                  ("fastpld.compose, threads=1", lambda: fastpld_schedule(s50, threads=1)),
                  ("dp_accounting RdpAccountant", lambda: rdp_schedule(s50))], reps)

    # 2. 1000 distinct x 10 steps (fastpld alone; RDP takes ~100 s here)
    s1000 = schedule(1000, 10)
    side_by_side("1000 distinct x 10 steps", [("fastpld.compose (grouped plan)", lambda: fastpld_schedule(s1000)),
                                               ("fastpld.compose, threads=1", lambda: fastpld_schedule(s1000, threads=1))],
                 max(3, reps))

    # 3. incremental accountant: per-query cost in a training loop
    per, repeat, e = accountant_loop(loop_steps)
    per_ms = np.array(per) * 1e3
    print(f"\n== PrivacyAccountant, {loop_steps}-step loop, compose(PSG(1.0, 0.01)) + get_epsilon({DELTA}) per step")
    print(f"  per query: median {np.median(per_ms):.1f} ms, mean {per_ms.mean():.1f} ms, p90 "
          f"{np.percentile(per_ms, 90):.1f} ms, total {per_ms.sum() / 1e3:.1f} s; repeated query at the same "
          f"state {repeat * 1e6:.0f} us; final epsilon {e:.4f}")
    try:
        t_op, e_op = opacus_prv_query(loop_steps)
        print(f"  Opacus PRVAccountant.get_epsilon at step {loop_steps} (rebuilds every call): {t_op * 1e3:.0f} ms "
              f"-> {e_op:.4f}")
    except ImportError:
        print("  (opacus not importable: no Opacus column)")

    # 4. calibration
    runs = [("fastpld.find_noise_multiplier", lambda: (cold(), fastpld.find_noise_multiplier(8.0, DELTA, 0.04, 2000))[1])]
    try:
        from prv_accountant.dpsgd import find_noise_multiplier as prv_fnm
        runs.append(("prv_accountant find_noise_multiplier", lambda: prv_fnm(0.04, 2000, 8.0, DELTA)))
    except ImportError:
        print("(prv_accountant.dpsgd.find_noise_multiplier not available)")
    try:
        from opacus.accountants.utils import get_noise_multiplier
        runs.append(("opacus get_noise_multiplier(prv)", lambda: get_noise_multiplier(
            target_epsilon=8.0, target_delta=DELTA, sample_rate=0.04, steps=2000, accountant="prv")))
    except ImportError:
        print("(opacus not importable: no Opacus column)")
    med, outs = side_by_side("calibration: epsilon 8, delta 1e-5, q 0.04, 2000 steps", runs, reps)
    s = outs[runs[0][0]]
    for label, _ in runs[1:]:
        print(f"  sigma fastpld / {label.split()[0]}: {s / outs[label]:.4f}")
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(s, 0.04), 2000, eps_error=EE, delta_error=DE)
    print(f"  certified epsilon at fastpld's sigma {s:.4f}: {pld.epsilon(DELTA)}")
    RESULTS["accountant"] = {"steps": loop_steps, "per_query_median_ms": float(np.median(per_ms)),
                             "per_query_p90_ms": float(np.percentile(per_ms, 90)), "repeat_query_us": repeat * 1e6}
    RESULTS["calibration_sigma"] = {"fastpld": s, "certified_epsilon_upper": pld.epsilon(DELTA).upper}
    out = Path(__file__).resolve().parent / "results" / "bench_heterogeneous.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"fastpld": fastpld.__version__, "quick": args.quick, "repeats": reps,
                               "sections": RESULTS}, indent=1, default=float))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
