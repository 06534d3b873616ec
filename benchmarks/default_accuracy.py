"""What the default accuracy gives, mechanism by mechanism: ``fastpld.compose(m, k)`` with no accuracy
argument (``rel_error=1e-3`` by the dominance certificate, the coupling certificate where that refuses),
for every kind of mechanism and k = 1 .. 1e5: the plan that answered, the certified width of
epsilon(1e-5) relative to epsilon, and the time (caches cleared before each run, median of ``--repeat``).

    python benchmarks/default_accuracy.py [--repeat 3] [--kmax 1e5] [--out benchmarks/results]

``--random N``: instead, N random configurations per family (noise -- for randomized response its epsilon --, sampling
rate and k log-uniform; ``--seed``; the last family: heterogeneous schedules of 2-5 parts of the others),
each composed once at the default accuracy: per family, how many the dominance certificate answered (the rest fell
back to the coupling certificate or were refused), their total and median time and median width.  Run it with
``PYTHONPATH`` on an older checkout's ``src`` for the same draws before a change.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import fastpld as F

DELTA = 1e-5


def mechanisms():
    from scipy.stats import norm
    mu = 0.5  # the privacy loss of the Gaussian mechanism with sigma 2, as a CustomCDF
    cdf = F.CustomCDF(lambda t: norm.cdf(t, mu * mu / 2, mu), lambda s: s * mu * mu / 2 + s * s * mu * mu / 2,
                      mu * mu / 2, mu, sf=lambda t: norm.sf(t, mu * mu / 2, mu))
    return [("Gaussian(3)", F.Gaussian(3.0)), ("Laplace(2)", F.Laplace(2.0)),
            ("PoissonSubsampledGaussian(1, 0.01)", F.PoissonSubsampledGaussian(1.0, 0.01)),
            ("PoissonSubsampledLaplace(1, 0.05)", F.PoissonSubsampledLaplace(1.0, 0.05)),
            ("PureDP(0.1)", F.PureDP(0.1)), ("RandomizedResponse(0.5, 4)", F.RandomizedResponse(0.5, 4)),
            ("ApproxDP(0.1, 1e-8)", F.ApproxDP(0.1, 1e-8)),
            ("CustomPMF (two atoms)", F.CustomPMF([0.2, -0.2], [0.549833997312478, 0.45016600268752216])),
            ("CustomCDF (a Gaussian's loss)", cdf),
            ("SubsampledWithoutReplacement(Gaussian(1), 10, 1000)",
             F.SubsampledWithoutReplacement(F.Gaussian(1.0), 10, 1000)),
            ("PoissonSubsampled(Laplace(1), 0.1)", F.PoissonSubsampled(F.Laplace(1.0), 0.1))]


def run(repeat, kmax):
    rows = []
    for name, m in mechanisms():
        for k in (1, 10, 1000, 100_000):
            if k > kmax:
                continue
            times, out = [], None
            for _ in range(repeat):
                F.clear_caches()
                t0 = time.perf_counter()
                try:
                    pld = F.compose(m, k)
                    b = pld.epsilon(DELTA)
                    out = {"method": pld.method, "lower": b.lower, "upper": b.upper,
                           "width": (b.upper - b.lower) / b.upper if b.upper > 0 else 0.0}
                except ValueError as exc:
                    out = {"refused": str(exc)[:160]}
                times.append(time.perf_counter() - t0)
            row = {"mechanism": name, "k": k, "time": statistics.median(times), **out}
            rows.append(row)
            what = (f"refused: {row['refused'][:80]}" if "refused" in row else
                    f"{row['method']} | [{row['lower']:.6g}, {row['upper']:.6g}] | {row['width'] * 100:.3f}%")
            print(f"| {name} | {k:g} | {what} | {row['time'] * 1e3:.0f} ms |", flush=True)
    return rows


_FAMILIES = {  # name: (noise range, sampling-rate range or None, mechanism)
    "Laplace": ((0.5, 500.0), None, lambda b, q: F.Laplace(b)),
    "PoissonSubsampledLaplace": ((0.3, 5.0), (1e-3, 0.5), lambda b, q: F.PoissonSubsampledLaplace(b, q)),
    "PoissonSubsampled(Laplace)": ((0.5, 500.0), (1e-3, 0.5), lambda b, q: F.PoissonSubsampled(F.Laplace(b), q)),
    "PoissonSubsampledGaussian": ((0.5, 5.0), (1e-4, 0.5), lambda s, q: F.PoissonSubsampledGaussian(s, q)),
    # (fixed-size batches of a dataset of 10,000 records: batch size q n)
    "SubsampledWithoutReplacement(Gaussian)": ((0.5, 5.0), (1e-4, 0.1), lambda s, q: F.SubsampledWithoutReplacement(
        F.Gaussian(s), max(1, round(q * 10_000)), 10_000)),
    "PoissonSubsampled(RandomizedResponse)": ((0.1, 3.0), (1e-3, 0.5), lambda e, q: F.PoissonSubsampled(
        F.RandomizedResponse(e, 2), q)),
    # heterogeneous schedules: 2-5 parts drawn from the families with atoms and the subsampled Gaussian, each
    # with its own k (log-uniform up to kmax / 10): their atoms share no lattice (dominance/alignment.py)
    "Heterogeneous (2-5 parts)": None,
}
_MIX_PARTS = ("Laplace", "PoissonSubsampledLaplace", "PoissonSubsampled(Laplace)", "PoissonSubsampledGaussian",
              "PoissonSubsampled(RandomizedResponse)")


def _draw(rng, fam, kmax):
    """One random configuration of family ``fam``: ``(what compose takes, noise, q, k)``."""
    import numpy as np
    if _FAMILIES[fam] is None:
        parts = [_draw(rng, _MIX_PARTS[int(rng.integers(len(_MIX_PARTS)))], max(kmax / 10, 1.0))[0]
                 for _ in range(int(rng.integers(2, 6)))]
        return parts, None, None, sum(k for _, k in parts)
    noise, rate, make = _FAMILIES[fam]
    x = float(np.exp(rng.uniform(*np.log(noise))))
    q = float(np.exp(rng.uniform(*np.log(rate)))) if rate else None
    k = int(np.exp(rng.uniform(0.0, np.log(kmax))))
    return (make(x, q), k), x, q, k


def run_random(n, seed, kmax):
    import numpy as np
    rng = np.random.default_rng(seed)
    rows = []
    for fam in _FAMILIES:
        for _ in range(n):
            what, x, q, k = _draw(rng, fam, kmax)
            F.clear_caches()
            t0 = time.perf_counter()
            try:
                pld = F.compose(what) if isinstance(what, list) else F.compose(*what)
                b = pld.epsilon(DELTA)
                out = {"method": pld.method, "lower": b.lower, "upper": b.upper,
                       "width": (b.upper - b.lower) / max(b.upper, 1e-300)}
            except ValueError as exc:
                out = {"method": "refused", "refused": str(exc)[:160]}
            row = {"family": fam, "noise": x, "q": q, "k": k, "time": time.perf_counter() - t0, **out}
            if isinstance(what, list):
                row["parts"] = [(repr(m), c) for m, c in what]
            rows.append(row)
        mine = [r for r in rows if r["family"] == fam]
        dom = [r for r in mine if r["method"].startswith("dominance")]
        ts = [r["time"] for r in mine]
        widths = [r["width"] for r in mine if "width" in r]
        print(f"| {fam} | {len(dom)} of {len(mine)} | {sum(ts):.2f} s | {statistics.median(ts) * 1e3:.0f} ms | "
              f"{max(ts) * 1e3:.0f} ms | {statistics.median(widths) * 100 if widths else float('nan'):.3f}% |",
              flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kmax", type=float, default=1e5)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--random", type=int, default=0, help="N random configurations per family instead")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    if a.random:
        print("| family | by dominance | total | median | slowest | median width |\n|---|---|---|---|---|---|", flush=True)
        rows = run_random(a.random, a.seed, a.kmax)
        with open(os.path.join(a.out, "default_accuracy_random.json"), "w") as f:
            json.dump({"delta": DELTA, "seed": a.seed, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "rows": rows}, f, indent=1)
        return 0
    print("| mechanism | k | plan | epsilon(1e-5) certified | width | time |\n|---|---|---|---|---|---|", flush=True)
    rows = run(a.repeat, a.kmax)
    with open(os.path.join(a.out, "default_accuracy.json"), "w") as f:
        json.dump({"delta": DELTA, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
