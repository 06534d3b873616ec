"""What a sampler costs: DP-SGD epsilon under each batch sampler, with the peers that can answer.

Setting: noise multiplier 1, batches of 256 from 60,000 records (q = 256/60000, 234 steps per
epoch), delta = 1e-5, 1 to 100 epochs.  Samplers (fastpld):

* Poisson (add/remove): ``PoissonSubsampled(Gaussian(1), q)``;
* fixed-size batches, replace-one: ``SubsampledWithoutReplacement(Gaussian(1), 256, 60000)``;
* fixed-size batches, add/remove: ``..., neighboring="add_or_remove"``;
* truncated Poisson, cap 384 (mean 256 + 8 standard deviations) and cap 290 (+2.1 sd, truncated in
  2% of the steps): ``TruncatedPoissonSubsampled``;
* random allocation (balls-in-bins: each record in one of the 234 steps of an epoch):
  ``RandomAllocation(Gaussian(1), 234)``, one mechanism per epoch.

Peers, side by side in one run: dp_accounting's PLD accountant (Poisson; truncated Poisson, its
own bound of arXiv 2508.15089) and RDP accountant (Poisson; without replacement, replace-one:
Wang, Balle, Kasiviswanathan 2019, which takes the noise relative to the replace-one sensitivity,
so it is run at noise 0.5 to describe the same mechanism as fastpld's shift-2 base at noise 1), and
the ``PLD_accounting`` package (Feldman and Shenfeld; random allocation, its upper bound, up to 10
epochs: one run each).
fastpld reports its certified upper bound (eps_error 0.01, delta_error 1e-10); times are medians
of ``--repeat`` runs from scratch (fastpld's loss cache cleared).  Then the noise multiplier each
sampler needs for epsilon 3 at delta 1e-5 after 10 epochs (``find_noise_multiplier(sampler=)``).

    python benchmarks/bench_samplers.py            # a few minutes on 2 shared cores
    python benchmarks/bench_samplers.py --quick    # 1 and 10 epochs, one repeat, no calibration
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import fastpld
from fastpld import mechanisms as _mechanisms

SIGMA, B, N, DELTA = 1.0, 256, 60_000, 1e-5
Q = B / N
STEPS_PER_EPOCH = N // B
CAP, CAP_TIGHT = 384, 290
EPS_ERROR, DELTA_ERROR = 0.01, 1e-10
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_samplers.json")

SAMPLERS = {
    "Poisson (add/remove)": lambda s: fastpld.PoissonSubsampled(fastpld.Gaussian(s), Q),
    "fixed-size, replace-one": lambda s: fastpld.SubsampledWithoutReplacement(fastpld.Gaussian(s), B, N),
    "fixed-size, add/remove": lambda s: fastpld.SubsampledWithoutReplacement(fastpld.Gaussian(s), B, N,
                                                                              "add_or_remove"),
    f"truncated Poisson (cap {CAP})": lambda s: fastpld.TruncatedPoissonSubsampled(fastpld.Gaussian(s), Q, N, CAP),
    f"truncated Poisson (cap {CAP_TIGHT})": lambda s: fastpld.TruncatedPoissonSubsampled(fastpld.Gaussian(s), Q, N,
                                                                                         CAP_TIGHT),
}
# one mechanism per epoch: composed `epochs` times
EPOCH_SAMPLERS = {
    "random allocation (balls-in-bins)": lambda s: fastpld.RandomAllocation(fastpld.Gaussian(s), STEPS_PER_EPOCH),
}


def _timed(fn, repeat):
    times, val = [], None
    for _ in range(repeat):
        _mechanisms._LOSS_CACHE.clear()
        t0 = time.perf_counter()
        val = fn()
        times.append(time.perf_counter() - t0)
    return val, statistics.median(times)


def _fastpld(name, steps):
    mech = SAMPLERS[name](SIGMA)
    return fastpld.compose(mech, steps, eps_error=EPS_ERROR, delta_error=DELTA_ERROR).epsilon(DELTA).upper


def _fastpld_epochs(name, epochs):
    mech = EPOCH_SAMPLERS[name](SIGMA)
    return fastpld.compose(mech, epochs, eps_error=EPS_ERROR, delta_error=DELTA_ERROR).epsilon(DELTA).upper


def _peers(steps):
    """``{(sampler, peer): callable}`` for the peers installed."""
    out = {}
    try:
        import dp_accounting as dpa
        from dp_accounting.pld import PLDAccountant
        from dp_accounting.rdp import RdpAccountant
    except ImportError:  # pragma: no cover
        return out
    R = dpa.NeighboringRelation

    def rdp(event, rel):
        acc = RdpAccountant(neighboring_relation=rel)
        acc.compose(event, steps)
        return acc.get_epsilon(DELTA)

    def pld(event):
        acc = PLDAccountant()
        acc.compose(event, steps)
        return acc.get_epsilon(DELTA)

    g = dpa.GaussianDpEvent(SIGMA)
    out[("Poisson (add/remove)", "dp_accounting PLD")] = lambda: pld(dpa.PoissonSampledDpEvent(Q, g))
    out[("Poisson (add/remove)", "dp_accounting RDP")] = lambda: rdp(dpa.PoissonSampledDpEvent(Q, g),
                                                                      R.ADD_OR_REMOVE_ONE)
    out[("fixed-size, replace-one", "dp_accounting RDP (noise 0.5)")] = lambda: rdp(
        dpa.SampledWithoutReplacementDpEvent(N, B, dpa.GaussianDpEvent(SIGMA / 2)), R.REPLACE_ONE)
    for cap in (CAP, CAP_TIGHT):
        out[(f"truncated Poisson (cap {cap})", "dp_accounting PLD")] = lambda cap=cap: pld(
            dpa.TruncatedSubsampledGaussianDpEvent(N, Q, cap, SIGMA))
    try:  # Feldman and Shenfeld's PLD accountant for random allocation (its certified upper bound)
        import PLD_accounting as pa
    except ImportError:  # pragma: no cover
        return out
    epochs = steps // STEPS_PER_EPOCH
    if epochs <= 10:  # (minutes per run beyond)
        out[("random allocation (balls-in-bins)", "PLD_accounting")] = lambda: pa.gaussian_allocation_epsilon_range(
            delta=DELTA, sigma=SIGMA, num_steps=STEPS_PER_EPOCH, num_selected=1, num_epochs=epochs)[0]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    epochs = [1, 10] if args.quick else [1, 10, 50, 100]
    repeat = 1 if args.quick else args.repeat
    rows = []
    # warm-up (imports, FFT plans, thread pool): not charged to the first sampler measured
    fastpld.compose(fastpld.PoissonSubsampledGaussian(2.0, 0.01), 100).epsilon(DELTA)
    for e in epochs:
        steps = e * STEPS_PER_EPOCH
        for name in SAMPLERS:
            eps, t = _timed(lambda: _fastpld(name, steps), repeat)
            rows.append({"epochs": e, "steps": steps, "sampler": name, "accountant": "fastpld (certified upper)",
                         "epsilon": eps, "time": t})
            print(f"{e:4d} epochs  {name:30s} fastpld  eps={eps:9.4f}  {t * 1e3:9.1f} ms", flush=True)
        for name in EPOCH_SAMPLERS:
            eps, t = _timed(lambda: _fastpld_epochs(name, e), repeat)
            rows.append({"epochs": e, "steps": steps, "sampler": name, "accountant": "fastpld (certified upper)",
                         "epsilon": eps, "time": t})
            print(f"{e:4d} epochs  {name:30s} fastpld  eps={eps:9.4f}  {t * 1e3:9.1f} ms", flush=True)
        for (name, peer), fn in _peers(steps).items():
            # dp_accounting's PLD at 100 epochs takes minutes per run: one run each
            eps, t = _timed(fn, 1 if "PLD" in peer else repeat)  # (PLD_accounting too: one run)
            rows.append({"epochs": e, "steps": steps, "sampler": name, "accountant": peer, "epsilon": eps,
                         "time": t})
            print(f"{e:4d} epochs  {name:30s} {peer:32s} eps={eps:9.4f}  {t * 1e3:9.1f} ms", flush=True)
    noise = []
    if not args.quick:
        steps = 10 * STEPS_PER_EPOCH
        for name, make in SAMPLERS.items():
            t0 = time.perf_counter()
            s = fastpld.find_noise_multiplier(3.0, DELTA, Q, steps, sampler=lambda s, q, make=make: make(s))
            t = time.perf_counter() - t0
            noise.append({"sampler": name, "epochs": 10, "sigma": s, "time": t})
            print(f"noise for eps 3 after 10 epochs  {name:30s} sigma={s:.4f}  ({t:.1f} s)", flush=True)
        for name, make in EPOCH_SAMPLERS.items():  # one mechanism per epoch: 10 of them
            t0 = time.perf_counter()
            s = fastpld.find_noise_multiplier(3.0, DELTA, Q, 10, sampler=lambda s, q, make=make: make(s))
            t = time.perf_counter() - t0
            noise.append({"sampler": name, "epochs": 10, "sigma": s, "time": t})
            print(f"noise for eps 3 after 10 epochs  {name:30s} sigma={s:.4f}  ({t:.1f} s)", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"setting": {"sigma": SIGMA, "batch": B, "n": N, "delta": DELTA, "caps": [CAP, CAP_TIGHT],
                               "eps_error": EPS_ERROR, "delta_error": DELTA_ERROR,
                               "truncation_probability": {
                                   str(c): SAMPLERS[f"truncated Poisson (cap {c})"](SIGMA).truncation_probability
                                   for c in (CAP, CAP_TIGHT)}},
                   "epsilon": rows, "noise": noise, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
                  f, indent=1)
    print("wrote", args.out)
    assert all(math.isfinite(r["epsilon"]) for r in rows)


if __name__ == "__main__":
    main()
