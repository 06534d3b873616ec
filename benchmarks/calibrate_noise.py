"""Calibrate the noise so that delta(1.0) = 1e-6 after k compositions; write benchmarks/data/noise_params.json.

Method: Brent's method on ``log(noise)`` for ``log(delta_est(1.0)) = log(1e-6)``, where ``delta_est`` is
fastpld's point estimate at a small eps_error (k <= 2^16: 0.001 for Laplace, 0.003 for the
subsampled Gaussian; 0.01 above), i.e. far finer than the
benchmark's eps_error = 0.1.  At the calibrated noise we store fastpld's *certified* bracket
``[lower, upper]`` on the true delta(1.0) (so the calibration error is itself certified) and, for
k <= 2^16, dp_accounting's pessimistic estimate at value_discretization_interval 1e-4 as a cross-check.
Where delta_error = 1e-10 is infeasible (fastpld charges floating-point round-off, which grows with k),
the smallest feasible power of ten is used and recorded; it widens the bracket, not the estimate.

The plain Gaussian needs no search: k Gaussians of std sigma compose exactly to mu = sqrt(k)/sigma.

Also re-measures the paper's quoted sigma = 226.86 and b = 1133.84 at k = 2^16.

    python benchmarks/calibrate_noise.py            # ~8 min on 2 shared cores
    python benchmarks/calibrate_noise.py --quick    # k = 2^4, 2^10 only (for testing the script)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from scipy.optimize import brentq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "noise_params.json")
EXPONENTS = list(range(4, 17)) + [18, 20, 22, 24, 26, 28, 30]
DELTA_ERRORS = (1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5)
PAPER = {"psg": 226.86, "laplace": 1133.84}
# a sqrt(k) start for the search: noise ~ c sqrt(k)
SCALE = {"psg": 216.3 / 256.0, "laplace": 1081.5 / 256.0}


def _fine_eps_error(mech, k):
    # Laplace's atoms make the point estimate jump by ~1% with the grid's alignment at 0.003
    if k > 2**16:
        return 0.01
    return 0.001 if mech == "laplace" else 0.003


def _estimate(mech, noise, k, ee, state):
    """fastpld point estimate of delta(1.0); steps delta_error up when round-off makes it infeasible."""
    while True:
        try:
            r = C.run_fastpld(mech, noise, k, method="auto", eps_error=ee, delta_error=state["delta_error"])
            return r
        except ValueError as e:
            if "increase delta_error" not in str(e) and "or delta_error" not in str(e):
                raise
            i = DELTA_ERRORS.index(state["delta_error"])
            if i + 1 == len(DELTA_ERRORS):
                raise
            state.setdefault("infeasible", []).append({"delta_error": state["delta_error"], "message": str(e)})
            state["delta_error"] = DELTA_ERRORS[i + 1]


def calibrate(mech, k, guess):
    ee = _fine_eps_error(mech, k)
    state = {"delta_error": C.DELTA_ERROR}
    evals = [0]

    def f(logn):
        evals[0] += 1
        r = _estimate(mech, math.exp(logn), k, ee, state)
        return math.log(max(r["estimate"], 1e-300)) - math.log(C.TARGET_DELTA)

    lo, hi = math.log(guess / 1.3), math.log(guess * 1.3)
    flo, fhi = f(lo), f(hi)
    while flo < 0:  # delta decreases with noise: need f(lo) > 0 > f(hi)
        lo -= 0.3
        flo = f(lo)
    while fhi > 0:
        hi += 0.3
        fhi = f(hi)
    t0 = time.perf_counter()
    logn = brentq(f, lo, hi, xtol=1e-7, rtol=1e-9)
    noise = math.exp(logn)
    r = _estimate(mech, noise, k, ee, state)
    out = {"noise": noise, "k": k, "eps_error": ee, "delta_error": state["delta_error"],
           "fastpld": {"lower": r["lower"], "estimate": r["estimate"], "upper": r["upper"], "plan": r["plan"]},
           "evaluations": evals[0], "seconds": round(time.perf_counter() - t0, 2)}
    if "infeasible" in state:
        out["infeasible"] = state["infeasible"][:1]
    if k <= 2**16:
        out["dp_accounting_1e-4"] = C.run_dpa(mech, noise, k)["estimate"]
    return out


def paper_check():
    k = 2**16
    res = {}
    for mech, noise in PAPER.items():
        r = C.run_fastpld(mech, noise, k, method="auto", eps_error=0.003, delta_error=1e-10)
        res[mech] = {"noise": noise, "k": k,
                     "fastpld_eps_error_0.003": {x: r[x] for x in ("lower", "estimate", "upper")},
                     "dp_accounting_1e-4": C.run_dpa(mech, noise, k, interval=1e-4)["estimate"],
                     "dp_accounting_1e-5": C.run_dpa(mech, noise, k, interval=1e-5)["estimate"]}
        print(mech, res[mech], flush=True)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="k = 2^4 and 2^10 only; no paper check")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    exps = [4, 10] if a.quick else EXPONENTS
    t0 = time.perf_counter()
    data = {"description": "noise so that delta(1.0) = 1e-6 after k = 2^e compositions (see calibrate_noise.py)",
            "target_delta": C.TARGET_DELTA, "eps": C.EPS, "q": C.Q,
            "method": "brentq on log(noise) of fastpld's delta(1.0) point estimate at eps_error 0.001 (Laplace) / "
                      "0.003 (PSG) for k <= 2^16, 0.01 above; certified bracket stored",
            "fastpld_version": C.fastpld.__version__}
    for mech in C.MECHANISMS:
        data[mech] = {}
        for e in exps:
            k = 2**e
            res = calibrate(mech, k, SCALE[mech] * math.sqrt(k))
            data[mech][str(e)] = res
            print(f"{mech} 2^{e}: {C.PARAM[mech]} = {res['noise']:.6g}  delta in "
                  f"[{res['fastpld']['lower']:.4g}, {res['fastpld']['upper']:.4g}] "
                  f"(de {res['delta_error']:g}, {res['evaluations']} evals, {res['seconds']} s)", flush=True)
    mu = C.gaussian_mu_for()
    data["gaussian"] = {"mu": mu, "exact_delta_at_mu": C.gaussian_delta(mu),
                        "note": "sigma(k) = sqrt(k) / mu gives exactly delta(1.0) = 1e-6"}
    if not a.quick:
        data["paper_check"] = paper_check()
    data["seconds"] = round(time.perf_counter() - t0, 1)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(data, fh, indent=1)
    print("wrote", a.out, f"({data['seconds']} s)")


if __name__ == "__main__":
    main()
