"""Accuracy of the maths functions the round-off analysis assumes (docs/roundoff.md, section 7).

* numpy's float64 ``exp``, ``log``, ``expm1``, ``log1p``, ``sin``, ``cos``, ``arcsin``, ``arctan2``,
  ``hypot`` at the dispatch level numpy runs at (``NPY_DISABLE_CPU_FEATURES`` selects another), in ulps
  against the same function in long double (libm, 11 more bits);
* ``scipy.special.ndtr``'s relative error by range of ``z``, against 40-digit mpmath.

Prints a table and writes ``benchmarks/results/maths_accuracy.json``.  The figures are lower bounds on
the worst case (random arguments), not proofs::

    python benchmarks/maths_accuracy.py [--n 400000] [--ndtr 1500]
"""
import argparse
import json
import os

import numpy as np


def _dispatch():
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]


def _ulps(f, *args):
    y = f(*args)
    yl = f(*(a.astype(np.longdouble) for a in args))
    ok = np.isfinite(y) & np.isfinite(yl) & (yl != 0)
    y, yl = y[ok], yl[ok]
    return float(np.max(np.abs((y.astype(np.longdouble) - yl) / np.spacing(np.abs(yl.astype(np.float64))))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--ndtr", type=int, default=1500)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    n = a.n
    cases = {
        "exp": (np.exp, rng.uniform(-700, 700, n)),
        "log": (np.log, np.exp(rng.uniform(-700, 700, n))),
        "expm1": (np.expm1, rng.uniform(-40, 40, n)),
        "log1p": (np.log1p, np.concatenate([rng.uniform(-0.999, 3, n // 2), np.exp(rng.uniform(-40, 40, n // 2))])),
        "sin": (np.sin, rng.uniform(-7, 7, n)),
        "cos": (np.cos, rng.uniform(-7, 7, n)),
        "arcsin": (np.arcsin, rng.uniform(-1, 1, n)),
    }
    out = {"numpy": np.__version__, "dispatch": _dispatch(),
           "disabled": os.environ.get("NPY_DISABLE_CPU_FEATURES", ""), "ulp": {}, "ndtr_rel_u": {}}
    for name, (f, x) in cases.items():
        out["ulp"][name] = _ulps(f, x)
    y, x = rng.normal(size=n), rng.normal(size=n)
    out["ulp"]["arctan2"] = _ulps(np.arctan2, y, x)
    out["ulp"]["hypot"] = _ulps(np.hypot, y, x)
    print(f"numpy {np.__version__}, dispatching {' '.join(out['dispatch']) or '(baseline only)'}")
    for k, v in out["ulp"].items():
        print(f"  {k:8s} max {v:.3f} ulp over {n} arguments")

    import mpmath
    from scipy import special
    mpmath.mp.dps = 40
    print("scipy.special.ndtr, relative error against mpmath (units of u = 2^-53):")
    for lo, hi in [(-1, 8), (-5, -1), (-10, -5), (-20, -10), (-30, -20), (-37.5, -30)]:
        z = rng.uniform(lo, hi, a.ndtr)
        worst = 0.0
        for zi, g in zip(z, special.ndtr(z)):
            ex = mpmath.ncdf(mpmath.mpf(float(zi)))
            if ex >= 1e-300:  # (below: subnormal results, outside every window)
                worst = max(worst, float(abs((mpmath.mpf(float(g)) - ex) / ex)))
        out["ndtr_rel_u"][f"[{lo}, {hi}]"] = worst / 2.0**-53
        print(f"  z in [{lo}, {hi}]: {worst / 2.0**-53:.0f} u")
    path = os.path.join(os.path.dirname(__file__), "results", "maths_accuracy.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
