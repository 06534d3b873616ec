"""Where one answer's time goes: the phases of ``compose(...).epsilon(delta)`` and the functions inside them.

Run::

    python benchmarks/profile_answer.py                       # PSG(5, 0.1) x 1e3 and PSG(1, 0.01) x 1e4
    python benchmarks/profile_answer.py --workload 1.0,0.01,1e5 --threads 2 --runs 50

For each workload (a Poisson-subsampled Gaussian ``sigma, q, k`` at ``rel_error``), answers, losses and tables
are cleared before every run and the FFT plans kept (as ``bench_frontier.py`` times it).  Two passes:

* **phases** (no instrumentation but two wrappers): before the chains (planning, the losses and their moments),
  the chains, after them (the answer's tables, its width check, keeping it) and the ``epsilon(delta)`` query;
  medians over ``--runs``;
* **functions**: the leaves, splits, nodes, convolutions and compiled kernels wrapped with timers (a few
  microseconds of overhead each), their summed time per answer and calls per answer, medians over the runs.
  Wrapped functions nest (a node contains its convolution, which contains kernels): the table shows each
  function's own total, not a partition.  ``--threads 2`` sums both threads' time.

* **nodes**: the time inside the nodes (``composition.node._run_node``) and, of it, the time inside compiled
  kernels and FFTs (each counted once, outermost): the rest is the nodes' Python -- what compiling a node's glue
  would save (one thread).

Prints tables and writes ``benchmarks/results/profile_answer.json`` (``--out`` to change).  The compiled work of an
answer is the sum of the kernel rows (the ``_core`` / ``_leaf`` / ``_dominance`` calls and the FFTs inside the
convolutions); what the chains take beyond it is Python between the kernels.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import statistics
import threading
import time
from pathlib import Path

import fastpld
from fastpld import _kernels, _native
from fastpld.composition import execute, node, series
from fastpld.dominance import chains, leaves, planner

HERE = Path(__file__).resolve().parent
DELTA = 1e-5

# (module, function names) timed in the functions pass
_FUNCTIONS = [
    (chains, ["_run_chain", "ctd_leaf", "dominated_leaf", "ctd_split", "dominated_split"]),
    (leaves, ["_integrals", "_tail_blocks", "_continuous_grid", "_ctd_masses"]),
    (node, ["_chernoff_window", "_series_spectrum", "_series_amp", "_common_stride", "_dyadic_sum"]),
    (series, ["_series_input"]),
    (_native.NativeBackend, ["convolve", "finish_node"]),
    (_native, ["_forward", "_plan"]),
    (_kernels, ["series_moments", "series_input", "chernoff_window", "fold", "spectrum_terms", "power_fp",
                "power_direct", "power_direct_ld", "power_direct_bound", "query_tables", "psg_eval",
                "psg_window", "mean_index"]),
]


# the compiled entry points a node calls (the nodes pass; FFTs: the plans' execute)
_NODE_KERNELS = ["series_moments", "series_input", "series_eval", "chernoff_window", "pmf_moments", "log_mgf_grid",
                 "fold", "spectrum_terms", "power_fp", "power_direct", "power_direct_ld", "power_direct_bound",
                 "mean_index", "finish_node", "dft_order", "small_dft"]


@contextlib.contextmanager
def _patched(replacements):
    """``setattr(owner, name, g)`` for each ``(owner, name, g)`` of ``replacements`` while the block runs, the
    originals put back after it (in reverse order)."""
    saved = []
    try:
        for owner, name, g in replacements:
            saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, g)
        yield
    finally:
        for owner, name, f in reversed(saved):
            setattr(owner, name, f)


def _answer(mech, k, rel, threads):
    pld = fastpld.compose(mech, k, rel_error=rel, threads=threads)
    return pld, pld.epsilon(DELTA)


def phases(mech, k, rel, threads, runs):
    """Medians (ms) of the four phases of an answer."""
    marks = {}
    originals = {n: getattr(planner, n) for n in ("_run_shared", "_run_jobs")}

    def timed(name):
        f = originals[name]

        def g(*a, **kw):
            marks.setdefault("c0", time.perf_counter())
            try:
                return f(*a, **kw)
            finally:
                marks["c1"] = time.perf_counter()
        return g

    rows = []
    with _patched([(planner, n, timed(n)) for n in originals]):
        for i in range(runs + 3):
            marks.clear()
            fastpld.clear_caches(keep_plans=True)
            t0 = time.perf_counter()
            pld = fastpld.compose(mech, k, rel_error=rel, threads=threads)
            t1 = time.perf_counter()
            pld.epsilon(DELTA)
            t2 = time.perf_counter()
            if i >= 3 and "c0" in marks:  # (the first runs build the FFT plans)
                rows.append((marks["c0"] - t0, marks["c1"] - marks["c0"], t1 - marks["c1"], t2 - t1, t2 - t0))
    names = ("before the chains", "the chains", "after the chains", "the query", "total")
    return {n: 1e3 * statistics.median(c) for n, c in zip(names, zip(*rows))}


def functions(mech, k, rel, threads, runs):
    """Per wrapped function: the median over runs of its summed time (ms) per answer, and its calls per answer."""
    acc = collections.Counter()
    calls = collections.Counter()
    lock = threading.Lock()

    def wrapped(owner, name):
        f = getattr(owner, name)
        label = f"{getattr(owner, '__name__', owner.__class__.__name__)}.{name}"

        @functools.wraps(f)
        def g(*a, **kw):
            t = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                d = time.perf_counter() - t
                with lock:
                    acc[label] += d
                    calls[label] += 1
        return owner, name, g

    per_run = collections.defaultdict(list)
    ncalls = collections.Counter()
    with _patched([wrapped(owner, n) for owner, names in _FUNCTIONS for n in names if hasattr(owner, n)]):
        for i in range(runs + 3):
            fastpld.clear_caches(keep_plans=True)
            acc.clear()
            calls.clear()
            _answer(mech, k, rel, threads)
            if i >= 3:
                for label in acc:
                    per_run[label].append(acc[label])
                    ncalls[label] += calls[label]
    out = {label: {"ms": 1e3 * statistics.median(v + [0.0] * (runs - len(v))), "calls": ncalls[label] / runs}
           for label, v in per_run.items()}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["ms"]))


class _TimedPlan:
    """A pyFFTW plan whose ``execute`` is timed (its other attributes forwarded)."""

    __slots__ = ("_fft", "_tick")

    def __init__(self, fft, tick):
        self._fft, self._tick = fft, tick

    def __getattr__(self, name):
        return getattr(self._fft, name)

    def execute(self):
        return self._tick(self._fft.execute)


def nodes(mech, k, rel, runs):
    """Medians (ms) of an answer, of its nodes and of the compiled kernels and FFTs inside them (one thread)."""
    acc = {"kernel": 0.0, "node": 0.0}
    depth = threading.local()

    def tick(f, *a, **kw):
        # (outermost only: a kernel called from a timed wrapper is not counted twice)
        if getattr(depth, "n", 0) or not getattr(depth, "node", False):
            return f(*a, **kw)
        depth.n = 1
        t = time.perf_counter()
        try:
            return f(*a, **kw)
        finally:
            acc["kernel"] += time.perf_counter() - t
            depth.n = 0

    kernels = [(owner, n, functools.wraps(f)(functools.partial(tick, f)))
               for owner, names in ((_native, ["_forward"]), (_kernels, _NODE_KERNELS))
               for n in names for f in [getattr(owner, n, None)] if callable(f)]
    plan = _native._plan
    run_node = execute._run_node

    def timed_node(*a, **kw):
        depth.node = True
        t = time.perf_counter()
        try:
            return run_node(*a, **kw)
        finally:
            acc["node"] += time.perf_counter() - t
            depth.node = False

    rows = []
    with _patched(kernels + [(_native, "_plan", lambda n, dt, fw: _TimedPlan(plan(n, dt, fw), tick)),
                             (execute, "_run_node", timed_node)]):
        for i in range(runs + 3):
            fastpld.clear_caches(keep_plans=True)
            acc["kernel"] = acc["node"] = 0.0
            t = time.perf_counter()
            _answer(mech, k, rel, 1)
            if i >= 3:
                rows.append((time.perf_counter() - t, acc["node"], acc["kernel"]))
    T, N, K = (1e3 * statistics.median(c) for c in zip(*rows))
    return {"answer": T, "nodes": N, "nodes' kernels and FFTs": K, "nodes' Python": N - K}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", action="append",
                    help="sigma,q,k (repeatable; default: 5,0.1,1e3 and 1,0.01,1e4)")
    ap.add_argument("--rel-error", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=1, help="compose's threads (default 1: one thread's time)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default=str(HERE / "results" / "profile_answer.json"))
    args = ap.parse_args()
    workloads = args.workload or ["5,0.1,1e3", "1,0.01,1e4"]
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rel_error": args.rel_error,
              "threads": args.threads, "runs": args.runs, "workloads": {}}
    for w in workloads:
        sigma, q, k = (float(x) for x in w.split(","))
        mech = fastpld.PoissonSubsampledGaussian(sigma, q)
        k = int(k)
        ph = phases(mech, k, args.rel_error, args.threads, args.runs)
        fn = functions(mech, k, args.rel_error, args.threads, args.runs)
        nd = nodes(mech, k, args.rel_error, args.runs)
        result["workloads"][w] = {"phases_ms": ph, "functions": fn, "nodes_ms": nd}
        print(f"\n== PSG(sigma={sigma:g}, q={q:g}) x {k:g}, rel_error={args.rel_error:g}, threads={args.threads}, "
              f"median of {args.runs}")
        print("| phase | ms |\n|---|---:|")
        for n, v in ph.items():
            print(f"| {n} | {v:.3f} |")
        print("\n| function (nested: each its own total) | ms an answer | calls an answer |\n|---|---:|---:|")
        for label, v in fn.items():
            print(f"| {label} | {v['ms']:.3f} | {v['calls']:.1f} |")
        print("\n| nodes (one thread) | ms an answer |\n|---|---:|")
        for n, v in nd.items():
            print(f"| {n} | {v:.3f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
