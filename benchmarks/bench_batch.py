"""Many accounting questions at once (fastpld.batch): serial, local processes, a Dask LocalCluster.

Two workloads, each answered by every runner:

* ``histories``: per-user accounting.  Each user's history is a few hundred DP-SGD steps drawn
  from a handful of sampling rates and noise multipliers (a user takes part under 1-4 of the 16
  configurations), so each user is its own heterogeneous composition; the question is the
  certified epsilon at delta = 1e-6.
* ``sweep``: a calibration sweep, the smallest noise multiplier for a grid of (target epsilon,
  sampling rate, steps), ``ask = "noise_multiplier"``.

Runners: ``serial`` (this process, fastpld's default threads), ``serial-1t`` (this process,
``FASTPLD_NUM_THREADS=1``), ``processes`` (``workers`` local spawn processes, one thread each;
the time includes starting them) and ``dask`` (a ``LocalCluster`` of ``workers`` processes, one
thread each, started and warmed before the clock starts, as a long-lived cluster would be).
fastpld's per-mechanism caches are emptied before every repetition, in every process.  The records
of every runner are checked bitwise equal to the serial ones.  Memory: the peak resident set
(VmHWM) of each process that answered questions, sampled from /proc while the batch runs.

    python benchmarks/bench_batch.py                       # 10,000 histories, 1,000-point sweep
    python benchmarks/bench_batch.py --users 2000 --sweep 200 --repeat 3
    python benchmarks/bench_batch.py --quick               # a few seconds per runner

Writes benchmarks/results/bench_batch.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from fastpld import batch
from fastpld import mechanisms as _mechanisms

RATES = (0.001, 0.004, 0.01, 0.02)
SIGMAS = (0.8, 1.0, 1.3, 2.0)
VOLATILE = ("time", "worker")


def histories(n: int, seed: int = 0) -> list[dict]:
    """``n`` per-user questions: 200-400 steps over 1-4 of the 16 (rate, sigma) configurations."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        steps = int(rng.integers(200, 401))
        k = int(rng.integers(1, 5))
        cfg = rng.choice(len(RATES) * len(SIGMAS), size=k, replace=False)
        counts = rng.multinomial(steps, rng.dirichlet(np.ones(k)))
        sched = [{"mechanism": {"name": "poisson_subsampled_gaussian", "sigma": SIGMAS[c % 4],
                                "sampling_probability": RATES[c // 4]}, "count": int(m)}
                 for c, m in zip(cfg, counts) if m > 0]
        out.append({"id": f"user-{i}", "ask": "epsilon", "delta": 1e-6, "schedule": sched})
    return out


def sweep(n: int) -> list[dict]:
    """About ``n`` calibrations on a (target epsilon x rate x steps) grid, in grid order."""
    side = max(1, math.ceil(n ** (1 / 3) - 1e-9))
    te = np.geomspace(0.5, 8.0, side)
    qs = np.geomspace(0.001, 0.05, side)
    steps = np.unique(np.geomspace(100, 20_000, side).round().astype(int))
    grid = [(float(a), float(b), int(c)) for a in te for b in qs for c in steps]
    return [{"id": f"cal-{i}", "ask": "noise_multiplier", "target_epsilon": a, "target_delta": 1e-5,
             "sampling_probability": b, "steps": c} for i, (a, b, c) in enumerate(grid[:n])]


# ------------------------------------------------------------------------------------------
# memory: peak RSS of this process's descendants, sampled from /proc
# ------------------------------------------------------------------------------------------
def _status(pid, field):
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _descendants(root):
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid):
    """CPU seconds (user + system, all threads) of ``pid`` so far, or None."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / _TICK
    except (OSError, ValueError, IndexError):
        return None


class Probe:
    """Peak VmHWM and CPU seconds per process (this one and its descendants) while the ``with``
    block runs.  CPU seconds are what each process consumed since the block began (a process
    that ends between samples loses at most ``period`` of it; workers started from a fork server
    live a fraction of a second in a small batch: sampled every 50 ms)."""

    def __init__(self, period=0.05):
        self.period = period
        self.peak = {}
        self.cpu0 = {}
        self.cpu = {}
        self.own_cpu = 0.0
        self._stop = threading.Event()

    def _sample(self, first=False):
        for pid in [os.getpid()] + _descendants(os.getpid()):
            v = _status(pid, "VmHWM")
            if v is not None:
                self.peak[pid] = max(v, self.peak.get(pid, 0))
            c = _cpu(pid)
            if c is not None:
                if first or pid not in self.cpu0:
                    self.cpu0.setdefault(pid, c if first else 0.0)  # a process born during the block: from 0
                self.cpu[pid] = c - self.cpu0[pid]

    def _loop(self):
        while not self._stop.wait(self.period):
            self._sample()
        self.own_cpu = time.thread_time()  # this sampler's CPU: not the batch's, subtracted below

    def __enter__(self):
        try:  # reset this process's high-water mark so that its peak is this run's
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            pass
        self._sample(first=True)
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._sample()
        self._stop.set()
        self._t.join()


# ------------------------------------------------------------------------------------------
def _strip(recs):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in recs]


def run_one(name, questions, workers, client):
    """``(seconds, records, peak RSS of the answering processes)`` of one batch."""
    kw = {"serial": True} if name.startswith("serial") else {"workers": workers} if name == "processes" else \
        {"client": client}
    _mechanisms._LOSS_CACHE.clear()
    if client is not None and name == "dask":
        client.run(_mechanisms._LOSS_CACHE.clear)
    old = os.environ.get("FASTPLD_NUM_THREADS")
    if name == "serial-1t":
        os.environ["FASTPLD_NUM_THREADS"] = "1"
    try:
        with Probe() as mem:
            t = time.perf_counter()
            recs = batch.answer_many(questions, **kw)
            dt = time.perf_counter() - t
    finally:
        if name == "serial-1t":
            if old is None:
                del os.environ["FASTPLD_NUM_THREADS"]
            else:
                os.environ["FASTPLD_NUM_THREADS"] = old
    pids = {int(r["worker"].rsplit(":", 1)[1]) for r in recs if r["worker"]}
    workers_cpu = [mem.cpu.get(pid, 0.0) for pid in pids if pid != os.getpid()]
    cpu = {"this_process": mem.cpu.get(os.getpid(), 0.0) - mem.own_cpu, "sampler": mem.own_cpu,
           "workers": sorted(workers_cpu, reverse=True)}
    return dt, recs, {pid: mem.peak.get(pid) for pid in pids}, cpu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=10_000, help="per-user histories (default 10000)")
    ap.add_argument("--sweep", type=int, default=1_000, help="calibration points (default 1000)")
    ap.add_argument("--workers", type=int, default=2, help="local processes / Dask workers (default 2)")
    ap.add_argument("--repeat", type=int, default=1, help="repetitions per runner; medians reported")
    ap.add_argument("--runners", default="serial,serial-1t,processes,dask",
                    help="comma-separated subset of serial, serial-1t, processes, dask")
    ap.add_argument("--quick", action="store_true", help="120 histories, 16 calibrations, one repetition")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "bench_batch.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.users, args.sweep, args.repeat = 120, 16, 1
    runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    bad = [r for r in runners if r not in ("serial", "serial-1t", "processes", "dask")]
    if bad or not runners:
        ap.error(f"--runners: unknown runner(s) {bad}")
    for name in ("users", "sweep", "workers", "repeat"):
        if getattr(args, name) < (0 if name in ("users", "sweep") else 1):
            ap.error(f"--{name} must be positive")

    workloads = {"histories": histories(args.users), "sweep": sweep(args.sweep)}
    cluster = client = None
    if "dask" in runners:
        try:
            import distributed
        except ImportError:
            print("dask.distributed is not installed: the dask runner is skipped (pip install 'fastpld[dask]')")
            runners.remove("dask")

    def start_cluster():
        # only around the dask runs: its scheduler and nannies live in this process and take ~5% of a
        # core even when idle, which would count as this process's CPU in the other runners
        cl = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                      env={"FASTPLD_NUM_THREADS": "1"})
        c = distributed.Client(cl)
        c.run(lambda: __import__("fastpld.batch"))  # a long-lived cluster has fastpld imported
        return cl, c

    # warm this process too (imports, FFTW plans for the common lengths), as the workers warm up in their run
    batch.answer_many(workloads["histories"][:5] + workloads["sweep"][:1], serial=True)
    results = {"settings": {"users": args.users, "sweep": len(workloads["sweep"]), "workers": args.workers,
                            "repeat": args.repeat, "cpus": len(os.sched_getaffinity(0)),
                            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, "rows": []}
    try:
        for wname, qs in workloads.items():
            if not qs:
                continue
            reference = None
            for name in runners:
                times, mem, cpus = [], {}, []
                if name == "dask":
                    cluster, client = start_cluster()
                for _ in range(args.repeat):
                    dt, recs, m, cpu = run_one(name, qs, args.workers, client)
                    times.append(dt)
                    cpus.append(cpu)
                    for pid, v in m.items():
                        if v is not None:
                            mem[pid] = max(v, mem.get(pid, 0))
                    stripped = _strip(recs)
                    if reference is None:
                        reference = stripped
                    identical = stripped == reference
                    if not identical:
                        raise SystemExit(f"{wname}/{name}: records differ from the first runner's")
                if client is not None:
                    client.close()
                    cluster.close()
                    cluster = client = None
                failed = sum(not r["ok"] for r in recs)
                t = statistics.median(times)
                # the busiest process's CPU seconds: the wall time on otherwise idle cores
                busiest = statistics.median(max(c["workers"] or [c["this_process"]]) for c in cpus)
                row = {"workload": wname, "runner": name, "questions": len(qs), "seconds": t,
                       "seconds_all": times, "throughput": len(qs) / t, "failed": failed,
                       "cpu": cpus, "busiest_cpu_seconds": busiest,
                       "cpu_seconds_total": statistics.median(c["this_process"] + sum(c["workers"]) for c in cpus),
                       "identical_to_first": True,
                       "peak_rss_mb_per_process": sorted(round(v / 2**20, 1) for v in mem.values()),
                       "processes": len(mem)}
                results["rows"].append(row)
                print(f"{wname:9s} {name:10s} {t:8.2f} s  {row['throughput']:8.1f} q/s  busiest CPU {busiest:7.2f} s  "
                      f"peak RSS MB {row['peak_rss_mb_per_process']}  failed {failed}", flush=True)
    finally:
        if client is not None:
            client.close()
            cluster.close()
    base = {(r["workload"], r["runner"]): r for r in results["rows"]}
    for r in results["rows"]:
        for ref in ("serial", "serial-1t"):
            if (r["workload"], ref) in base:
                r[f"speedup_vs_{ref}"] = base[(r["workload"], ref)]["seconds"] / r["seconds"]
        if (r["workload"], "serial-1t") in base:
            # serial-1t's CPU seconds over this runner's busiest process: the speed-up on idle cores
            r["cpu_speedup_vs_serial-1t"] = base[(r["workload"], "serial-1t")]["busiest_cpu_seconds"] / \
                r["busiest_cpu_seconds"]
    print()
    print(markdown(results))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"\nresults: {args.out}")
    return 0


def markdown(results) -> str:
    s = results["settings"]
    lines = [f"{s['users']} histories, {s['sweep']} calibrations, {s['workers']} workers on {s['cpus']} CPUs, "
             f"median of {s['repeat']} ({s['date']})", "",
             "| workload | runner | questions | wall s | questions/s | wall speed-up vs serial | vs serial-1t | "
             "CPU s (all) | busiest process CPU s | CPU speed-up vs serial-1t | peak RSS per process (MB) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

    def x(v):
        return "" if v is None else f"{v:.2f}x"

    for r in results["rows"]:
        lines.append(f"| {r['workload']} | {r['runner']} | {r['questions']} | {r['seconds']:.2f} | "
                     f"{r['throughput']:.1f} | {x(r.get('speedup_vs_serial'))} | {x(r.get('speedup_vs_serial-1t'))} | "
                     f"{r['cpu_seconds_total']:.2f} | {r['busiest_cpu_seconds']:.2f} | "
                     f"{x(r.get('cpu_speedup_vs_serial-1t'))} | "
                     f"{', '.join(f'{v:.0f}' for v in r['peak_rss_mb_per_process'])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
