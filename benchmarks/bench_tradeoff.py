"""Attack-view answers on one DP-SGD question: fastpld next to riskcal and gdpnum (issue 22).

Run: python benchmarks/bench_tradeoff.py [--repeat R] [--steps K] [--sigma S] [--q Q]
(needs riskcal and gdpnum, which need dp-accounting; a missing peer is reported, not fatal)

DP-SGD: Poisson-subsampled Gaussian, sigma 1, q 0.01, 1,000 steps (add-or-remove).  Three tasks, each
timed from scratch (fastpld's per-mechanism cache cleared, a new dp_accounting PLD built), median of R
(calibrations: --calibration-repeat, default 1; rows are printed as they are measured):

1. the trade-off curve beta(alpha) at 1,000 alphas (log-spaced 1e-6 .. 0.5 and 1 - that),
2. the Gaussian-DP mu of the curve,
3. calibration of the noise multiplier to an attack TPR of 5% at FPR 1% (riskcal:
   ``find_noise_multiplier_for_err_rates(alpha=0.01, beta=0.95)``; fastpld:
   ``calibrate(..., target_tpr=0.05, at_fpr=0.01)``).

fastpld runs with eps_error 0.02, delta_error 1e-12 (certified bands); the peers with
dp_accounting's connect-the-dots PLD at grid step 1e-4 (their default), point estimates.
Prints a markdown table and writes benchmarks/results/bench_tradeoff.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import numpy as np

import fastpld
from fastpld import mechanisms as _mechanisms

warnings.filterwarnings("ignore")
EPS_ERROR, DELTA_ERROR = 0.02, 1e-12
GRID = 1e-4
ALPHAS = np.sort(np.concatenate([np.geomspace(1e-6, 0.5, 500), 1 - np.geomspace(1e-6, 0.5, 500)[:-1], [0.5]]))[:1000]


def _timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        _mechanisms._LOSS_CACHE.clear()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), out


class _Rows(list):
    """Rows printed as soon as they are measured (a long peer run should not hide the others)."""

    def append(self, r):
        super().append(r)
        tt = "n/a" if r["time"] is None else f"{r['time']:.3f}" + (
            f" (query alone {r['query_only']:.3f})" if "query_only" in r else "")
        print(f"| {r['task']} | {r['tool']} | {tt} | {r['result']} |", flush=True)


def _dpa_pld(sigma, q, k):
    from dp_accounting.pld import privacy_loss_distribution as pm
    return pm.from_gaussian_mechanism(standard_deviation=sigma, sampling_prob=q, use_connect_dots=True,
                                      value_discretization_interval=GRID).self_compose(k)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--q", type=float, default=0.01)
    ap.add_argument("--skip-calibration", action="store_true")
    ap.add_argument("--calibration-repeat", type=int, default=1, help="runs of each calibration (default 1)")
    args = ap.parse_args(argv)
    s, q, k, R = args.sigma, args.q, args.steps, args.repeat
    mech = fastpld.PoissonSubsampledGaussian(s, q)
    rows = _Rows()
    print(f"DP-SGD: sigma={s}, q={q}, {k} steps; fastpld eps_error={EPS_ERROR}, delta_error={DELTA_ERROR}; "
          f"peers: dp_accounting connect-the-dots PLD, grid {GRID}; median of {R} (calibration: "
          f"{max(1, min(R, args.calibration_repeat))}) runs from scratch")
    print("| task | tool | time (s) | result |\n|---|---|---|---|", flush=True)

    def compose():
        return fastpld.compose(mech, k, eps_error=EPS_ERROR, delta_error=DELTA_ERROR)

    # 1. trade-off curve
    t, lo, hi, b = _timed(lambda: compose().tradeoff(ALPHAS), R)
    pld = compose()
    tq, _, _, _ = _timed(lambda: pld.tradeoff(ALPHAS), R)
    i1 = int(np.searchsorted(ALPHAS, 0.01))
    rows.append({"task": "trade-off curve, 1,000 alphas", "tool": "fastpld (compose + tradeoff)", "time": t,
                 "min": lo, "max": hi, "query_only": tq,
                 "result": f"beta({ALPHAS[i1]:.4g})={float(b.estimate[i1]):.6f} in [{float(b.lower[i1]):.6f}, "
                           f"{float(b.upper[i1]):.6f}]"})
    try:
        from riskcal.analysis import get_beta_from_pld
        t, lo, hi, rb = _timed(lambda: np.asarray(get_beta_from_pld(_dpa_pld(s, q, k), alpha=ALPHAS)), R)
        inside = int(np.sum((b.lower <= rb) & (rb <= b.upper)))
        rows.append({"task": "trade-off curve, 1,000 alphas", "tool": "riskcal get_beta_from_pld", "time": t,
                     "min": lo, "max": hi,
                     "result": f"beta({ALPHAS[i1]:.4g})={rb[i1]:.6f}; {inside}/1000 inside fastpld's band"})
    except ImportError as exc:
        rows.append({"task": "trade-off curve, 1,000 alphas", "tool": "riskcal", "time": None, "result": str(exc)})
    try:
        from gdpnum import PLDConverter
        t, lo, hi, gb = _timed(lambda: np.asarray(PLDConverter(_dpa_pld(s, q, k)).get_beta(ALPHAS)), R)
        inside = int(np.sum((b.lower <= gb) & (gb <= b.upper)))
        rows.append({"task": "trade-off curve, 1,000 alphas", "tool": "gdpnum PLDConverter.get_beta", "time": t,
                     "min": lo, "max": hi,
                     "result": f"beta({ALPHAS[i1]:.4g})={gb[i1]:.6f}; {inside}/1000 inside fastpld's band"})
    except ImportError as exc:
        rows.append({"task": "trade-off curve, 1,000 alphas", "tool": "gdpnum", "time": None, "result": str(exc)})

    # 2. Gaussian-DP mu
    for rng, name in [(None, "default range"), ((1e-10, 1 - 1e-10), "alpha in [1e-10, 1 - 1e-10]")]:
        t, lo, hi, g = _timed(lambda: compose().gdp_mu(rng), R)
        tq, _, _, _ = _timed(lambda: pld.gdp_mu(rng), R)
        rows.append({"task": "Gaussian-DP mu", "tool": f"fastpld gdp_mu ({name})", "time": t, "min": lo, "max": hi,
                     "query_only": tq,
                     "result": f"mu in [{g.mu.lower:.4f}, {g.mu.upper:.4f}] over [{g.alpha_range[0]:.2g}, "
                               f"1 - {1 - g.alpha_range[1]:.2g}], binding at alpha={g.binding_alpha:.10g}"})
    try:
        from gdpnum import PLDConverter
        t, lo, hi, m = _timed(lambda: PLDConverter(_dpa_pld(s, q, k)).get_mu(), R)
        rows.append({"task": "Gaussian-DP mu", "tool": "gdpnum PLDConverter.get_mu", "time": t, "min": lo, "max": hi,
                     "result": f"mu={m:.4f} (over its breakpoints with alpha, beta in (1e-10, 1 - 1e-10))"})
    except ImportError as exc:
        rows.append({"task": "Gaussian-DP mu", "tool": "gdpnum", "time": None, "result": str(exc)})

    # 3. calibration to TPR 5% at FPR 1%
    if not args.skip_calibration:
        def certified_tpr(sig):
            return fastpld.compose(fastpld.PoissonSubsampledGaussian(sig, q), k, eps_error=EPS_ERROR,
                                   delta_error=1e-10).tpr(0.01)

        cal_r = max(1, min(R, args.calibration_repeat))
        t, lo, hi, sig = _timed(lambda: fastpld.calibrate(lambda x: fastpld.PoissonSubsampledGaussian(x, q), k,
                                                          target_tpr=0.05, at_fpr=0.01), cal_r)
        c = certified_tpr(sig)
        rows.append({"task": "calibrate sigma: TPR <= 5% at FPR 1%", "tool": "fastpld calibrate(target_tpr=...)",
                     "time": t, "min": lo, "max": hi,
                     "result": f"sigma={sig:.4f}; certified TPR <= {c.upper:.5f}"})
        try:
            from riskcal.calibration.dpsgd import find_noise_multiplier_for_err_rates
            t, lo, hi, rs = _timed(lambda: find_noise_multiplier_for_err_rates(
                alpha=0.01, beta=0.95, sample_rate=q, num_steps=k), cal_r)
            c = certified_tpr(rs)
            rows.append({"task": "calibrate sigma: TPR <= 5% at FPR 1%",
                         "tool": "riskcal find_noise_multiplier_for_err_rates", "time": t, "min": lo, "max": hi,
                         "result": f"sigma={rs:.4f}; fastpld's certified TPR there: [{c.lower:.5f}, {c.upper:.5f}]"})
        except ImportError as exc:
            rows.append({"task": "calibrate sigma", "tool": "riskcal", "time": None, "result": str(exc)})

    out = os.path.join(os.path.dirname(__file__), "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "bench_tradeoff.json"), "w") as f:
        json.dump({"sigma": s, "q": q, "steps": k, "repeat": R, "rows": list(rows)}, f, indent=1)


if __name__ == "__main__":
    main()
