"""Fingerprints of a fixed set of compositions, to show a refactoring leaves results bitwise unchanged.

Usage (from the repository root)::

    python tools/fingerprint.py --save /tmp/before.json     # before the change
    python tools/fingerprint.py --check /tmp/before.json    # after it: lists every case that differs,
                                                            # and how its bounds moved

Each case composes one question (mechanisms, methods, backends, heterogeneous schedules, samplers,
both certificates) and hashes every grid PMF of the result (masses, offset, mesh, charges) and the
bounds it answers at fixed queries.  Bitwise comparisons are meaningful on one machine only (numpy
and libm dispatch different kernels elsewhere).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys

import numpy as np

import fastpld as F

_DELTAS = np.array([0.5, 1e-2, 1e-3, 1e-5, 1e-7, 1e-9])
_EPS = np.array([0.0, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0])


def _cases():
    g1 = F.Gaussian(1.0)
    psg = F.PoissonSubsampledGaussian(1.0, 0.01)
    psl = F.PoissonSubsampledLaplace(1.0, 0.05)
    cases = []
    for method in ("auto", "glw", "two_stage", "recursive", "dominance"):
        cases.append((f"gaussian-{method}", g1, 100, dict(method=method, eps_error=0.1)))
        cases.append((f"psg-{method}", psg, 1000, dict(method=method, eps_error=0.1, delta_error=1e-9)))
    for backend in ("numpy", "native"):
        cases.append((f"psg-1e4-{backend}", psg, 10_000, dict(backend=backend, eps_error=0.05)))
        cases.append((f"laplace-{backend}", F.Laplace(2.0), 2**16, dict(backend=backend)))
        cases.append((f"psl-{backend}", psl, 2000, dict(backend=backend, eps_error=0.1, delta_error=1e-9)))
    cases += [
        ("laplace-2^30", F.Laplace(20_000.0), 2**30, dict(eps_error=0.1, delta_error=1e-6)),
        ("psg-1e6", F.PoissonSubsampledGaussian(1.0, 0.001), 10**6, dict(eps_error=0.1)),
        ("psg-q0.1-s5", F.PoissonSubsampledGaussian(5.0, 0.1), 1000, dict(eps_error=0.05)),
        ("psg-q1e-4-s0.5", F.PoissonSubsampledGaussian(0.5, 1e-4), 10**5, dict(eps_error=0.1, delta_error=1e-8)),
        ("recursive-arity4", psg, 4096, dict(method="recursive", arity=4)),
        ("puredp", F.PureDP(0.1), 500, dict()),
        ("randomized-response", F.RandomizedResponse(0.3, 4),
         200, dict()),
        ("approxdp", F.ApproxDP(0.2, 1e-7), 50, dict(delta_error=1e-9)),
        ("puredp-dominance", F.PureDP(0.1), 500, dict(method="dominance", eps_error=0.01)),
        ("psg-dominance-1e4", psg, 10_000, dict(method="dominance", eps_error=1e-3)),
        ("psg-dominance-1e5", F.PoissonSubsampledGaussian(0.8, 0.001), 10**5, dict(method="dominance",
                                                                                   eps_error=1e-3)),
        ("psl-dominance", psl, 1000, dict(method="dominance", eps_error=1e-2)),
        ("gauss-dominance-arity64", g1, 4096, dict(method="dominance", arity=64, eps_error=1e-2)),
        ("hetero-3", [(g1, 10), (psg, 500), (F.Laplace(5.0), 20)], None, dict(eps_error=0.1)),
        ("hetero-24", [(F.PoissonSubsampledGaussian(1.0, float(q)), 10) for q in np.linspace(0.005, 0.02, 24)],
         None, dict(delta_error=1e-8)),
        ("hetero-dominance", [(F.PoissonSubsampledGaussian(1.0, float(q)), 100)
                              for q in np.linspace(0.005, 0.02, 10)], None, dict(method="dominance",
                                                                                 eps_error=1e-2)),
        ("poisson-any-laplace", F.PoissonSubsampled(F.Laplace(1.0), 0.02), 500, dict(delta_error=1e-9)),
        ("poisson-any-puredp", F.PoissonSubsampled(F.PureDP(1.0), 0.05), 300, dict()),
        ("wor-replace", F.SubsampledWithoutReplacement(F.Gaussian(1.0), 100, 10_000), 1000, dict()),
        ("wor-add-remove", F.SubsampledWithoutReplacement(F.Gaussian(1.0), 100, 10_000,
                                                          neighboring="add_remove"), 1000, dict()),
        ("truncated-poisson", F.TruncatedPoissonSubsampled(F.Gaussian(1.0), 0.01, 10_000, 130), 1000, dict()),
        ("custom-pmf", F.CustomPMF([-0.5, 0.0, 0.7], [0.2, 0.3, 0.5]),
         100, dict()),
        ("threads-1", psg, 3000, dict(threads=1)),
        ("threads-2", psg, 3000, dict(threads=2)),
        ("delta-error-1e-12", g1, 1000, dict(delta_error=1e-12, eps_error=0.05)),
        ("eps-error-0.01", psg, 1000, dict(eps_error=0.01)),
    ]
    return cases


def _hash_pld(pld) -> dict:
    h = hashlib.sha256()
    groups = [pld.directions] + ([pld.lower_directions] if hasattr(pld, "lower_directions") else [])
    for group in groups:
        for name in sorted(group):
            d = group[name]
            pmf = d.pmf
            h.update(name.encode())
            h.update(np.ascontiguousarray(np.asarray(pmf.probs, dtype=np.float64)).tobytes())
            for v in (pmf.offset, pmf.mesh, d.p_inf, d.eps_spent, d.delta_spent):
                h.update(float(v).hex().encode())
    out = {"pmf": h.hexdigest()[:16], "method": pld.method, "buckets": int(pld.num_buckets)}
    q = hashlib.sha256()
    bounds = []  # (the values too: --check compares the bounds of the cases that differ)
    for d in _DELTAS:
        try:
            b = pld.epsilon(float(d))
            q.update(repr([float(x).hex() for x in b]).encode())
            bounds.append([float(b.lower), float(b.upper)])
        except ValueError as exc:
            q.update(str(exc).encode())
            bounds.append(None)
    b = pld.delta(_EPS)
    for arr in b:
        q.update(np.ascontiguousarray(np.asarray(arr, dtype=np.float64)).tobytes())
    bounds += [[float(lo), float(up)] for lo, up in zip(b.lower, b.upper)]
    out["queries"] = q.hexdigest()[:16]
    out["bounds"] = bounds
    return out


def _compare_bounds(old, new) -> str:
    """How the bounds of a case that differs moved: whether every interval overlaps the old one, and the largest
    relative moves of the lower and upper bounds and of the widths."""
    a, b = old.get("bounds"), new.get("bounds")
    if not a or not b or len(a) != len(b):
        return "bounds not comparable"
    overlap, lo, up, w = True, 0.0, 0.0, 1.0
    for x, y in zip(a, b):
        if x is None or y is None:
            if (x is None) != (y is None):
                return "a query answered by one version and refused by the other"
            continue
        overlap &= x[0] <= y[1] and y[0] <= x[1]
        lo = max(lo, abs(y[0] - x[0]) / max(abs(x[0]), 1e-300))
        up = max(up, abs(y[1] - x[1]) / max(abs(x[1]), 1e-300))
        if x[1] > x[0]:
            w = max(w, (y[1] - y[0]) / (x[1] - x[0]))
    return (f"{'every interval overlaps' if overlap else 'AN INTERVAL DOES NOT OVERLAP'}; largest relative move "
            f"of a lower bound {lo:.2g}, an upper bound {up:.2g}; widths at most {w:.3g}x")


def fingerprints(only=None) -> dict:
    F.clear_caches()
    res = {}
    for name, mech, count, kw in _cases():
        if only and only not in name:
            continue
        try:
            pld = F.compose(mech, count, **kw) if count is not None else F.compose(mech, **kw)
            res[name] = _hash_pld(pld)
        except ValueError as exc:
            res[name] = {"error": str(exc)}
        F.clear_caches()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", help="write the fingerprints to this JSON file")
    ap.add_argument("--check", help="compare with fingerprints saved earlier")
    ap.add_argument("--only", help="only cases whose name contains this")
    a = ap.parse_args(argv)
    res = fingerprints(a.only)
    if a.save:
        with open(a.save, "w") as f:
            json.dump(res, f, indent=1, sort_keys=True)
    if a.check:
        with open(a.check) as f:
            old = json.load(f)
        bad = [k for k in res if old.get(k) != res[k]]
        for k in bad:
            o, n = dict(old.get(k) or {}), dict(res[k])
            moved = _compare_bounds(o, n) if "bounds" in o and "bounds" in n else ""
            o.pop("bounds", None)
            n.pop("bounds", None)
            print(f"DIFFERS {k}: {o} -> {n}" + (f"\n    {moved}" if moved else ""))
        print(f"{len(res) - len(bad)} of {len(res)} cases bitwise unchanged")
        return 1 if bad else 0
    if not a.save:
        print(json.dumps(res, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
