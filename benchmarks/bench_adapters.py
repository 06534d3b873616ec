"""The adapters against what they replace, side by side in one process: dp_accounting's PLDAccountant
and ``mechanism_calibration.calibrate_dp_mechanism`` with it, and Opacus's PRV accountant, each next to
fastpld's adapter at its default accuracy (the certified interval within 0.1% of epsilon).

Every fastpld run starts with ``fastpld.clear_caches()``; times are medians of ``--repeat`` runs,
alternating between the tools.  Writes ``benchmarks/results/adapters.json`` and prints a markdown table.

    python benchmarks/bench_adapters.py [--repeat 3] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

import fastpld

SIGMA, Q, STEPS, DELTA = 0.5, 0.01, 10_000, 1e-5  # the case (epsilon ~43)


def _dpa_event(sigma, steps=STEPS):
    import dp_accounting as dpa
    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(Q, dpa.GaussianDpEvent(sigma)), steps)


def _time(fn):
    fastpld.clear_caches()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def cases():
    from dp_accounting import mechanism_calibration as mc
    from dp_accounting.pld import PLDAccountant
    from fastpld.compat.dp_accounting import FastPLDAccountant

    def epsilon(make):
        acc = make()
        acc.compose(_dpa_event(SIGMA))
        return acc.get_epsilon(DELTA)

    def calibrate(make):
        return mc.calibrate_dp_mechanism(make, _dpa_event, target_epsilon=3.0, target_delta=DELTA,
                                         bracket_interval=mc.ExplicitBracketInterval(0.5, 5.0))

    out = [("dp_accounting: epsilon, sigma 0.5, q 0.01, 10,000 steps",
            lambda: epsilon(PLDAccountant), lambda: epsilon(FastPLDAccountant)),
           ("dp_accounting: calibrate_dp_mechanism to epsilon 3", lambda: calibrate(PLDAccountant),
            lambda: calibrate(FastPLDAccountant))]
    try:
        from opacus.accountants import PRVAccountant
        from fastpld.compat.opacus import FastPLDAccountant as OpacusFast

        def opacus(make):
            acc = make()
            acc.history = [(SIGMA, Q, STEPS)]
            return acc.get_epsilon(DELTA)

        out.append(("Opacus: get_epsilon, sigma 0.5, q 0.01, 10,000 steps", lambda: opacus(PRVAccountant),
                    lambda: opacus(OpacusFast)))
    except ImportError:  # (opacus needs torch: optional)
        pass
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args(argv)
    rows = []
    print("| case | peer | fastpld adapter | ratio |\n|---|---|---|---|")
    for name, peer, ours in cases():
        tp, to, vp, vo = [], [], None, None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the peers' own warnings about their domain sizing)
            for _ in range(a.repeat):
                t, vp = _time(peer)
                tp.append(t)
                t, vo = _time(ours)
                to.append(t)
        row = {"case": name, "peer_s": statistics.median(tp), "fastpld_s": statistics.median(to),
               "peer_value": float(vp), "fastpld_value": float(vo)}
        rows.append(row)
        print(f"| {name} | {row['peer_s'] * 1e3:.0f} ms ({vp:.5g}) | {row['fastpld_s'] * 1e3:.0f} ms ({vo:.5g}) | "
              f"{row['peer_s'] / row['fastpld_s']:.1f}x |", flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "adapters.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
