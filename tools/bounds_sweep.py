"""Random compositions at the default accuracy, their bounds saved, to compare two versions.

Usage (from the repository root)::

    python tools/bounds_sweep.py --save /tmp/before.json --seed 11 --n 80     # one version
    python tools/bounds_sweep.py --check /tmp/before.json                     # the other: the same draws

Draws subsampled Gaussians and Laplaces, Gaussians, Laplaces, pure DP, randomized response and fixed-size batches,
k from 2 to 1e5, and asks ``epsilon`` at 1e-3, 1e-5, 1e-7 and ``delta`` at 0, 0.5, 2 in a random order (a deferred
direction's answers must not depend on it).  ``--check`` reports refusals, intervals that do not overlap the saved
ones, and the largest certified width of ``epsilon`` relative to it (0.1% asked).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

import numpy as np

import fastpld as F


def _draw(rng):
    kind = rng.choice(["psg", "psg", "psg", "psl", "gauss", "lap", "pure", "rr", "wor"])
    k = int(10 ** rng.uniform(0.3, 5))
    if kind == "psg":
        m = F.PoissonSubsampledGaussian(10 ** rng.uniform(-0.3, 0.7), 10 ** rng.uniform(-3, -0.5))
    elif kind == "psl":
        m = F.PoissonSubsampledLaplace(10 ** rng.uniform(-0.3, 0.7), 10 ** rng.uniform(-3, -0.5))
    elif kind == "gauss":
        m = F.Gaussian(10 ** rng.uniform(0, 2))
    elif kind == "lap":
        m = F.Laplace(10 ** rng.uniform(0, 2.5))
    elif kind == "pure":
        m = F.PureDP(10 ** rng.uniform(-2, 0))
    elif kind == "rr":
        m = F.RandomizedResponse(rng.uniform(0.1, 1.0), rng.choice([2, 3, 4]))
    else:
        m = F.SubsampledWithoutReplacement(F.Gaussian(10 ** rng.uniform(0, 0.7)), rng.choice([10, 64, 256]), 10000,
                                           neighboring="add_or_remove")
    return m, k, rng.random() < 0.5


def sweep(seed: int, n: int) -> dict:
    rng = random.Random(seed)
    ds, es = np.array([1e-3, 1e-5, 1e-7]), np.array([0.0, 0.5, 2.0])
    out = []
    t0 = time.perf_counter()
    for _ in range(n):
        m, k, delta_first = _draw(rng)
        rec = {"case": f"{m!r} x {k}"}
        try:
            F.clear_caches()
            p = F.compose(m, k)
            if delta_first:
                b = p.delta(es)
                a = p.epsilon(ds)
            else:
                a = p.epsilon(ds)
                b = p.delta(es)
            rec["bounds"] = [[float(x) for x in v] for v in (a.lower, a.upper, b.lower, b.upper)]
        except ValueError as exc:
            rec["error"] = str(exc)[:120]
        out.append(rec)
    return {"seed": seed, "n": n, "seconds": time.perf_counter() - t0, "cases": out}


def compare(old: dict, new: dict) -> int:
    bad = refused = changed = 0
    widest = 0.0
    for x, y in zip(old["cases"], new["cases"]):
        if x["case"] != y["case"]:
            print("the draws differ: another seed or n?")
            return 2
        if "error" in x or "error" in y:
            refused += 1
            print(f"REFUSED {x['case']}: {x.get('error')} | {y.get('error')}")
            continue
        changed += x["bounds"] != y["bounds"]
        for lo0, up0, lo1, up1 in ((0, 1, 0, 1), (2, 3, 2, 3)):
            for a, b, c, d in zip(x["bounds"][lo0], x["bounds"][up0], y["bounds"][lo1], y["bounds"][up1]):
                if not (a <= d * (1 + 1e-12) and c <= b * (1 + 1e-12)):
                    bad += 1
                    print(f"NO OVERLAP {x['case']}")
        widest = max([widest] + [(u - l) / max(l, 0.01) for l, u in zip(y["bounds"][0], y["bounds"][1])])
    print(f"{len(new['cases'])} cases, {changed} changed, {refused} refused, {bad} intervals not overlapping; widest "
          f"epsilon interval {widest:.3g} of epsilon; {old['seconds']:.2f} s -> {new['seconds']:.2f} s")
    return 1 if bad or refused else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save")
    ap.add_argument("--check")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--n", type=int, default=80)
    a = ap.parse_args(argv)
    if a.check:
        with open(a.check) as f:
            old = json.load(f)
        return compare(old, sweep(old["seed"], old["n"]))
    res = sweep(a.seed, a.n)
    if a.save:
        with open(a.save, "w") as f:
            json.dump(res, f)
    else:
        print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
