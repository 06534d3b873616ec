"""fastpld inside a server: many threads, repeated questions, bounded memory, import time, accountant steps.

Run (each workload in a fresh process, so that its RSS growth is its own):

    python benchmarks/bench_server.py            # the issue-20 workload (a few minutes on 2 cores)
    python benchmarks/bench_server.py --quick    # smoke test: small keys, few queries

Sections:

* mixed workload: 2,000 ``compose(PoissonSubsampledGaussian(s, q), k).epsilon(1e-5)`` over 200
  distinct keys (10 sigmas x 4 sampling rates x 5 step counts, each asked 10 times in a fixed
  shuffled order) from 8 and from 2 client threads; with the answer cache (the default) and
  without it (``set_cache_limit(results=0)``: every query composes).  Queries/s, p50/p99 latency
  of *cold* queries (the key had no answer yet when the query started) and *warm* ones, RSS
  growth (VmRSS after minus before, and the peak VmHWM minus before) and what the store keeps.
* warm repeated question: one question asked again and again (compose + epsilon), median and p99.
* import time: ``python -c "import fastpld"`` in a fresh process, median of 7.
* accountant: one step (``compose(PSG(1.0, 0.01), 1)``) plus ``get_epsilon(1e-5)`` at a history of
  1e3, 1e4 and 1e5 steps, median of repeats, next to Opacus's ``PRVAccountant`` (``step`` +
  ``get_epsilon``) at the same history (3 repeats; one at 1e5 steps, where a call takes a minute).

Writes ``benchmarks/results/bench_server.json`` (``--out`` to change).  Works against older fastpld
versions too (the cache settings are skipped where they do not exist), for before/after runs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DELTA = 1e-5


def _status(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def keys(quick: bool):
    if quick:
        return [(s, q, k) for s in (0.9, 1.1) for q in (0.005, 0.01) for k in (100, 200)]
    sig = [round(0.7 + 0.1 * i, 3) for i in range(10)]
    return [(s, q, k) for s in sig for q in (0.002, 0.005, 0.01, 0.02) for k in (250, 500, 1000, 2000, 4000)]


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    i = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[i]


# ------------------------------------------------------------------------------------------
# one workload, in its own process
# ------------------------------------------------------------------------------------------
def workload(clients: int, answers: bool, quick: bool, cache_mb=None) -> dict:
    import fastpld

    if hasattr(fastpld, "set_cache_limit"):
        if cache_mb is not None:
            fastpld.set_cache_limit(int(cache_mb * 2 ** 20))
        if not answers:
            fastpld.set_cache_limit(results=0)
    fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.5), 3).epsilon(DELTA)  # imports, first plans
    ks = keys(quick)
    reps = 5 if quick else 10
    order = [key for key in ks for _ in range(reps)]
    random.Random(20).shuffle(order)
    done = set()
    lock = threading.Lock()
    nxt = [0]
    lat = []  # (seconds, cold)

    def client():
        while True:
            with lock:
                i = nxt[0]
                if i >= len(order):
                    return
                nxt[0] += 1
                key = order[i]
                cold = key not in done
            s, q, k = key
            t = time.perf_counter()
            fastpld.compose(fastpld.PoissonSubsampledGaussian(s, q), k).epsilon(DELTA)
            dt = time.perf_counter() - t
            with lock:
                lat.append((dt, cold))
                done.add(key)

    rss0 = _status("VmRSS")
    _reset_hwm()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    rss1 = _status("VmRSS")
    hwm = _status("VmHWM")
    cold = [d for d, c in lat if c]
    warm = [d for d, c in lat if not c]
    out = {"clients": clients, "answers": answers, "queries": len(lat), "keys": len(ks), "wall_s": wall,
           "queries_per_s": len(lat) / wall,
           "cold": {"n": len(cold), "p50_ms": 1e3 * pct(cold, 50), "p99_ms": 1e3 * pct(cold, 99)},
           "warm": {"n": len(warm), "p50_ms": 1e3 * pct(warm, 50) if warm else None,
                    "p99_ms": 1e3 * pct(warm, 99) if warm else None},
           "rss_growth_mb": (rss1 - rss0) / 2 ** 20, "rss_peak_growth_mb": (max(hwm, rss1) - rss0) / 2 ** 20}
    if hasattr(fastpld, "cache_info"):
        info = fastpld.cache_info()
        out["kept_mb"] = info["bytes"] / 2 ** 20
        out["limit_mb"] = info["limit"] / 2 ** 20
        out["thread_limit"] = fastpld.thread_limit()
        from fastpld import _answers
        out["answer_stats"] = _answers.stats()
    return out


def run_workload(clients, answers, quick, cache_mb=None):
    p = subprocess.run([sys.executable, __file__, "--worker", json.dumps([clients, answers, quick, cache_mb])],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------
# the other sections
# ------------------------------------------------------------------------------------------
def warm_question(n: int) -> dict:
    import fastpld

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    fastpld.compose(m, 1000).epsilon(DELTA)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fastpld.compose(m, 1000).epsilon(DELTA)
        ts.append(time.perf_counter() - t)
    return {"n": n, "median_us": 1e6 * statistics.median(ts), "p99_us": 1e6 * pct(ts, 99)}


def import_time(n: int) -> dict:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import fastpld"], check=True)
        ts.append(time.perf_counter() - t)
    base = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        base.append(time.perf_counter() - t)
    return {"n": n, "median_s": statistics.median(ts), "python_alone_median_s": statistics.median(base)}


def accountant(steps_list, reps: int, opacus_reps: int) -> dict:
    import fastpld

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    out = {}
    for n in steps_list:
        acc = fastpld.PrivacyAccountant()
        acc.compose(m, n)
        acc.get_epsilon(DELTA)
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            acc.compose(m, 1)
            acc.get_epsilon(DELTA)
            ts.append(time.perf_counter() - t)
        row = {"fastpld_median_ms": 1e3 * statistics.median(ts), "fastpld_reps": reps}
        try:
            import warnings

            from opacus.accountants import PRVAccountant
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                oa = PRVAccountant()
                oa.history = [(1.0, 0.01, n)]
                ts = []
                # (no warm-up call: Opacus keeps nothing between calls, and one call at 1e5 steps takes ~1 min)
                for _ in range(opacus_reps if n < 100_000 else 1):
                    t = time.perf_counter()
                    oa.step(noise_multiplier=1.0, sample_rate=0.01)
                    oa.get_epsilon(DELTA)
                    ts.append(time.perf_counter() - t)
            row.update(opacus_prv_median_ms=1e3 * statistics.median(ts), opacus_reps=opacus_reps)
        except ImportError:
            row["opacus_prv_median_ms"] = None
        out[str(n)] = row
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: small keys, few queries and repeats")
    ap.add_argument("--out", default=str(HERE / "results" / "bench_server.json"))
    ap.add_argument("--rows", default="8:on,2:on,8:off,2:off",
                    help="workload rows CLIENTS:on|off (answer cache), comma-separated")
    ap.add_argument("--cache-mb", type=float, default=None, help="set_cache_limit for the workload rows (default: the default)")
    ap.add_argument("--sections", default="workload,warm,import,accountant")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        clients, answers, quick, cache_mb = json.loads(args.worker)
        print(json.dumps(workload(clients, answers, quick, cache_mb)))
        return
    sections = set(args.sections.split(","))
    rows_spec = [(int(c), a == "on") for c, a in (r.split(":") for r in args.rows.split(","))]
    quick = args.quick
    res = {"quick": quick, "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "cpus": len(os.sched_getaffinity(0))}
    if "workload" in sections:
        print(f"== mixed workload: compose(PSG(s, q), k).epsilon({DELTA}), {len(keys(quick))} keys, "
              f"{'quick' if quick else '2,000 queries'}; each row a fresh process"
              + (f"; cache limit {args.cache_mb:g} MB" if args.cache_mb is not None else ""))
        print("| clients | answer cache | queries/s | cold p50 / p99 ms | warm p50 / p99 ms | RSS growth MB (peak) | kept MB |")
        print("|---|---|---|---|---|---|---|")
        rows = []
        for clients, answers in rows_spec:
            r = run_workload(clients, answers, quick, args.cache_mb)
            rows.append(r)
            w = r["warm"]
            warm = f"{w['p50_ms']:.3g} / {w['p99_ms']:.3g}" if w["p50_ms"] is not None else "-"
            print(f"| {clients} | {'on' if answers else 'off'} | {r['queries_per_s']:.1f} | {r['cold']['p50_ms']:.3g} / "
                  f"{r['cold']['p99_ms']:.3g} | {warm} | {r['rss_growth_mb']:.0f} ({r['rss_peak_growth_mb']:.0f}) | "
                  f"{r.get('kept_mb', float('nan')):.1f} |", flush=True)
        res["workload"] = rows
        res["cache_mb"] = args.cache_mb
    if "warm" in sections:
        res["warm_question"] = wq = warm_question(200 if quick else 2000)
        print(f"\n== warm repeated question compose(PSG(1.0, 0.01), 1000).epsilon({DELTA}): median {wq['median_us']:.1f} us, "
              f"p99 {wq['p99_us']:.1f} us ({wq['n']} repeats)")
    if "import" in sections:
        res["import"] = it = import_time(3 if quick else 7)
        print(f"\n== import fastpld (fresh process): median {it['median_s']:.3f} s "
              f"(python alone {it['python_alone_median_s']:.3f} s)")
    if "accountant" in sections:
        steps = (1000,) if quick else (1000, 10_000, 100_000)
        res["accountant"] = ac = accountant(steps, 5 if quick else 21, 2 if quick else 3)
        print(f"\n== accountant: one step (compose(PSG(1.0, 0.01), 1)) + get_epsilon({DELTA}), median ms")
        print("| history steps | fastpld PrivacyAccountant | Opacus PRVAccountant |")
        print("|---|---|---|")
        for n, row in ac.items():
            o = row.get("opacus_prv_median_ms")
            print(f"| {int(n):,} | {row['fastpld_median_ms']:.2f} | {'-' if o is None else f'{o:.1f}'} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
