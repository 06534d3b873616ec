"""Reproduce the paper's Figures 1 and 2 (time, buckets, delta bounds against k) and go past them.

    python benchmarks/paper_figures.py            # full mode: 20 runs, k = 2^4, 2^6, ..., 2^16, cap 120 s
    python benchmarks/paper_figures.py --quick    # smoke test (< 60 s): few k, 2 runs, small caps
    python benchmarks/paper_figures.py --all-powers --runs 20 --out DIR

Settings (the paper's): Laplace mechanism and Poisson-subsampled Gaussian (q = 0.2); for every k the
noise is calibrated so that delta(1.0) = 1e-6 (benchmarks/data/noise_params.json, made by
calibrate_noise.py); eps_error 0.1, delta_error 1e-10; dp_accounting at value_discretization_interval
1e-4.  Every run builds the accountant from scratch and queries delta(1.0); the series are timed side
by side in one process, alternating, in a rotating order.

Sections (all written to --out, default benchmarks/results/):
1. paper figures: fig_laplace.png, fig_psg.png -- (a) time (mean, 20th-80th percentile band),
   (b) buckets (fastpld: pld.num_buckets, all stages and directions; prv_accountant: its domain size,
   the FFT length; dp_accounting: the composed PMF length(s)), (c) delta(1.0) with lower/upper bounds.
2. past the paper: fastpld at k up to 2^30 and the peers until one run exceeds --cap seconds, with
   time and peak extra memory (each memory point in its own subprocess, _memprobe.py): fig_scaling.png.
   Where delta_error = 1e-10 is infeasible for fastpld (it charges floating-point round-off, which grows
   with k) the error message is recorded and the smallest feasible power of ten is used, labelled.
3. accuracy: the plain Gaussian (exact delta) -- error of each estimate and width of each bracket;
   the Laplace estimates against a fine certified reference (fastpld at eps_error 0.001):
   fig_accuracy.png.
Plus results.json (all raw numbers) and results.md (tables).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402

NOISE_FILE = os.path.join(HERE, "data", "noise_params.json")
FASTPLD_METHODS = ("two_stage", "recursive", "auto")
DELTA_LADDER = (1e-10, 3e-10, 1e-9, 3e-9, 1e-8, 3e-8, 1e-7, 3e-7, 1e-6)
# the time ratio t(2^30) / t(2^10) is also reported at these delta_errors (those certified at 2^30): the
# smallest certified one moves as the certificate tightens, and plans are dearest at that edge
RATIO_DELTAS = (1e-10, 1e-9, 1e-8, 3e-8, 1e-7, 3e-7)


# ------------------------------------------------------------------------------------------
# configuration
# ------------------------------------------------------------------------------------------
def config(a):
    if a.quick:
        return {"paper_exps": [4, 8], "runs": a.runs or 2, "beyond_exps": [10, 16],
                "peer_beyond_exps": [10], "cap": a.cap or 5.0, "accuracy_exps": [4, 8],
                "memory_methods": ("auto",), "memory_exps": [16]}
    exps = list(range(4, 17)) if a.all_powers else list(range(4, 17, 2))
    return {"paper_exps": exps, "runs": a.runs or 20, "beyond_exps": [10, 16, 20, 24, 30],
            "peer_beyond_exps": [16, 20, 24, 30], "cap": a.cap or 120.0,
            "accuracy_exps": list(range(4, 17, 2)) + [20, 24, 30], "memory_methods": FASTPLD_METHODS,
            "memory_exps": [10, 16, 20, 24, 30]}


def load_noise(path=NOISE_FILE):
    with open(path) as fh:
        d = json.load(fh)
    return d


def noise_for(noise, mech, e):
    if mech == "gaussian":
        return math.sqrt(2.0**e) / noise["gaussian"]["mu"]
    try:
        return noise[mech][str(e)]["noise"]
    except KeyError:
        raise SystemExit(f"no calibrated noise for {mech} at k = 2^{e}: run benchmarks/calibrate_noise.py")


def series_list(backends):
    out = [("prv_accountant (GLW)", "prv", None, None), ("dp_accounting PLD", "dpa", None, None)]
    for be in backends:
        for m in FASTPLD_METHODS:
            out.append((f"fastpld {m} [{be}]", "fastpld", m, be))
    return out


def run_series(s, mech, noise, k, delta_error=C.DELTA_ERROR):
    _, lib, method, be = s
    if lib == "prv":
        return C.run_prv(mech, noise, k, delta_error=delta_error)
    if lib == "dpa":
        return C.run_dpa(mech, noise, k)
    return C.run_fastpld(mech, noise, k, method=method, backend=be, delta_error=delta_error)


def _log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------------------------------
# 1. the paper's figures
# ------------------------------------------------------------------------------------------
def paper_section(cfg, noise, backends):
    out = {}
    series = series_list(backends)
    for mech in C.MECHANISMS:
        out[mech] = {}
        for s in series:  # warm-up (imports, FFT set-up), untimed
            run_series(s, mech, noise_for(noise, mech, cfg["paper_exps"][0]), 2 ** cfg["paper_exps"][0])
        for e in cfg["paper_exps"]:
            k, nz = 2**e, noise_for(noise, mech, e)
            times = {s[0]: [] for s in series}
            last = {}
            for r in range(cfg["runs"]):
                order = series[r % len(series):] + series[: r % len(series)]
                for s in order:
                    res = run_series(s, mech, nz, k)
                    times[s[0]].append(res["time"])
                    last[s[0]] = res
            for s in series:
                rec = dict(last[s[0]])
                rec.pop("time")
                rec["times"] = times[s[0]]
                rec.update({"time_" + x: v for x, v in C.percentiles(times[s[0]]).items()})
                out[mech].setdefault(s[0], {})[str(e)] = rec
            _log(f"[paper] {mech} k=2^{e} noise={nz:.6g}: " + ", ".join(
                f"{s[0]} {np.median(times[s[0]]) * 1e3:.0f} ms" for s in series))
    return out


# ------------------------------------------------------------------------------------------
# 2. past the paper
# ------------------------------------------------------------------------------------------
def _refusal(mech, nz, k, method, de):
    """fastpld's refusal message at this delta_error, or None when it certifies."""
    try:
        C.run_fastpld(mech, nz, k, method=method, delta_error=de)
        return None
    except ValueError as e:
        return str(e)


def _fastpld_feasible(mech, nz, k, method):
    """Smallest delta_error in DELTA_LADDER that fastpld accepts; the first refusal's message."""
    refusal = None
    for de in DELTA_LADDER:
        msg = _refusal(mech, nz, k, method, de)
        if msg is None:
            return de, refusal
        refusal = refusal or msg
    return None, refusal


def memprobe(lib, mech, nz, k, method="auto", de=C.DELTA_ERROR, timeout=None, trace_max=float("inf")):
    cmd = [sys.executable, os.path.join(HERE, "_memprobe.py"), lib, mech, repr(nz), str(k), method, repr(de),
           repr(trace_max)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        text, timed_out = p.stdout, False
    except subprocess.TimeoutExpired as ex:  # subprocess.run kills the child it started
        text = ex.stdout.decode() if isinstance(ex.stdout, bytes) else (ex.stdout or "")
        timed_out = True
    lines = [ln for ln in text.splitlines() if ln.startswith("MEMPROBE ")]
    rec = json.loads(lines[-1][9:]) if lines else {}
    rec["subprocess_wall"] = time.perf_counter() - t0
    if timed_out and "result" not in rec:
        rec["error"] = f"timed out after {timeout:.0f} s"
    return rec


def beyond_section(cfg, noise):
    out = {"fastpld": {}, "peers": {}, "ratio": {}}
    be = None  # default backend
    for mech in C.MECHANISMS:
        out["fastpld"][mech] = {}
        for m in FASTPLD_METHODS:
            recs = {}
            for e in cfg["beyond_exps"]:
                k, nz = 2**e, noise_for(noise, mech, e)
                de, refusal = _fastpld_feasible(mech, nz, k, m)
                recs[str(e)] = {"noise": nz, "delta_error": de, "refusal_at_1e-10": refusal}
            out["fastpld"][mech][m] = recs
        # timing: every (method, k) at its feasible delta_error, plus 2^10 at the 2^30 delta_error for the ratio
        jobs = []
        for m in FASTPLD_METHODS:
            for e, rec in out["fastpld"][mech][m].items():
                if rec["delta_error"] is not None:
                    jobs.append((m, int(e), rec["delta_error"]))
            top = str(max(cfg["beyond_exps"]))
            de_top = out["fastpld"][mech][m][top]["delta_error"]
            if de_top is not None and de_top != out["fastpld"][mech][m]["10"]["delta_error"]:
                jobs.append((m, 10, de_top))
            for de in RATIO_DELTAS:  # both ends at each further delta_error certified at the top k
                if de_top is None or de <= de_top or _refusal(mech, noise_for(noise, mech, int(top)),
                                                               2 ** int(top), m, de) is not None:
                    continue
                for e in (int(top), 10):
                    if (m, e, de) not in jobs:
                        jobs.append((m, e, de))
        # each run from scratch (as the peers), then once more with fastpld's per-mechanism cache kept
        times = {j: [] for j in jobs}
        warm = {j: [] for j in jobs}
        last = {}
        for r in range(cfg["runs"]):
            order = jobs[r % len(jobs):] + jobs[: r % len(jobs)]
            for j in order:
                m, e, de = j
                res = C.run_fastpld(mech, noise_for(noise, mech, e), 2**e, method=m, backend=be, delta_error=de)
                times[j].append(res["time"])
                last[j] = res
                warm[j].append(C.run_fastpld(mech, noise_for(noise, mech, e), 2**e, method=m, backend=be,
                                             delta_error=de, warm=True)["time"])
        for j in jobs:
            m, e, de = j
            rec = dict(last[j])
            rec.pop("time")
            rec.update({"times": times[j], "times_warm": warm[j], "delta_error": de})
            rec.update({"time_" + x: v for x, v in C.percentiles(times[j]).items()})
            rec["time_warm_median"] = float(np.median(warm[j]))
            out["fastpld"][mech][m].setdefault(str(e), {}).setdefault("runs", {})[repr(de)] = rec
        # memory, one subprocess per point
        for m in cfg["memory_methods"]:
            for e, rec in out["fastpld"][mech][m].items():
                if rec.get("delta_error") is None or int(e) not in cfg["memory_exps"]:
                    continue
                mp = memprobe("fastpld", mech, rec["noise"], 2 ** int(e), m, rec["delta_error"], timeout=600)
                rec["memory"] = {x: mp.get(x) for x in ("rss_peak_extra", "tracemalloc_peak", "error")}
        # ratio 2^30 (or the largest k) over 2^10 at the same delta_error
        top = str(max(cfg["beyond_exps"]))
        out["ratio"][mech] = {}
        for m in FASTPLD_METHODS:
            r = out["fastpld"][mech][m]
            de_top = r[top]["delta_error"]
            if de_top is None:
                continue
            t_top = r[top]["runs"][repr(de_top)]["time_median"]
            t10_same = r["10"]["runs"][repr(de_top)]["time_median"]
            t10_default = r["10"]["runs"][repr(r["10"]["delta_error"])]["time_median"]
            w_top = r[top]["runs"][repr(de_top)]["time_warm_median"]
            w10_same = r["10"]["runs"][repr(de_top)]["time_warm_median"]
            by_de = {}
            for de in sorted({de_top, *RATIO_DELTAS}):
                a, b = r[top].get("runs", {}).get(repr(de)), r["10"].get("runs", {}).get(repr(de))
                if a and b:
                    by_de[repr(de)] = {"delta_error": de, "ratio": a["time_median"] / b["time_median"],
                                       "ratio_warm": a["time_warm_median"] / b["time_warm_median"],
                                       "time_top": a["time_median"], "time_10": b["time_median"],
                                       "plan_top": a.get("plan"), "plan_10": b.get("plan")}
            out["ratio"][mech][m] = {"k_top": 2 ** int(top), "delta_error_top": de_top,
                                     "ratio_same_delta_error": t_top / t10_same,
                                     "ratio_vs_1e-10": t_top / t10_default,
                                     "ratio_same_delta_error_warm": w_top / w10_same,
                                     "by_delta_error": by_de}
            _log(f"[beyond] {mech} {m}: t(2^{top})/t(2^10) = {t_top / t10_same:.2f} at delta_error {de_top:g} "
                 f"(from scratch; {w_top / w10_same:.2f} with fastpld's per-mechanism cache kept)")
        # peers: growing k until one run exceeds the cap
        out["peers"][mech] = {}
        for lib, name in (("prv", "prv_accountant (GLW)"), ("dpa", "dp_accounting PLD")):
            recs = {}
            for e in cfg["peer_beyond_exps"]:
                k, nz = 2**e, noise_for(noise, mech, e)
                mp = memprobe(lib, mech, nz, k, timeout=cfg["cap"] + 30, trace_max=cfg["cap"] / 5)
                recs[str(e)] = mp
                wall = mp.get("wall")
                _log(f"[beyond] {mech} {name} k=2^{e}: " + (f"{wall:.2f} s, rss +{(mp.get('rss_peak_extra') or 0) / 2**20:.1f} MB"
                                                           if wall is not None else mp.get("error", "?")))
                if wall is None or wall > cfg["cap"]:
                    break
            out["peers"][mech][name] = recs
    return out


# ------------------------------------------------------------------------------------------
# 3. accuracy
# ------------------------------------------------------------------------------------------
def accuracy_section(cfg, noise, paper):
    out = {"gaussian": {}, "laplace": {}}
    mu = noise["gaussian"]["mu"]
    exact = C.gaussian_delta(mu)
    out["gaussian_exact_delta"] = exact
    for e in cfg["accuracy_exps"]:
        k, sig = 2**e, noise_for(noise, "gaussian", e)
        row = {}
        for m in ("two_stage", "recursive"):
            done = False
            for de in DELTA_LADDER:
                try:
                    r = C.run_fastpld("gaussian", sig, k, method=m, delta_error=de)
                    r["delta_error"] = de
                    row[f"fastpld {m}"] = r
                    done = True
                    break
                except ValueError:
                    continue
            if not done:
                row[f"fastpld {m}"] = {"error": "no feasible delta_error"}
        if k <= 2**16:
            row["prv_accountant (GLW)"] = C.run_prv("gaussian", sig, k)
            row["dp_accounting PLD"] = C.run_dpa("gaussian", sig, k)
        for name, r in row.items():
            if "estimate" in r:
                r["rel_error"] = abs(r["estimate"] - exact) / exact
                if C.finite(r.get("upper")) and C.finite(r.get("lower")):
                    r["rel_width"] = (r["upper"] - r["lower"]) / exact
                    r["bounds_hold"] = bool(r["lower"] <= exact <= r["upper"])
        out["gaussian"][str(e)] = row
        _log(f"[accuracy] gaussian k=2^{e}: " + ", ".join(
            f"{n} err {r.get('rel_error', float('nan')):.2%}" for n, r in row.items()))
    # Laplace (and PSG) estimates from section 1 against the fine certified reference of the calibration
    for mech in C.MECHANISMS:
        out[mech] = {}
        for name, per_k in paper[mech].items():
            rows = {}
            for e, r in per_k.items():
                ref = noise[mech][e]["fastpld"]
                est = r["estimate"]
                rows[e] = {"estimate": est, "reference": ref["estimate"], "reference_lower": ref["lower"],
                           "reference_upper": ref["upper"], "rel_error": est / ref["estimate"] - 1,
                           # the error is certainly within this range (reference is a certified bracket)
                           "rel_error_range": [est / ref["upper"] - 1, est / ref["lower"] - 1]}
                if C.finite(r.get("lower")) and C.finite(r.get("upper")):
                    # bounds certainly hold if they contain the whole reference bracket
                    rows[e]["bounds_contain_reference"] = bool(r["lower"] <= ref["lower"] and ref["upper"] <= r["upper"])
            errs = [v["rel_error"] for v in rows.values()]
            out[mech][name] = {"per_k": rows, "min_rel_error": min(errs), "max_rel_error": max(errs)}
    return out


# ------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------
STYLE = {"prv": dict(color="tab:red", marker="s"), "dpa": dict(color="tab:green", marker="^"),
         "two_stage": dict(color="tab:blue", marker="o"), "recursive": dict(color="tab:purple", marker="D"),
         "auto": dict(color="black", marker="x")}


def _style(name):
    if name.startswith("prv"):
        st = dict(STYLE["prv"])
    elif name.startswith("dp_acc"):
        st = dict(STYLE["dpa"])
    else:
        st = dict(STYLE[name.split()[1]])
        if "[numpy]" in name and "native" in name:  # pragma: no cover
            pass
        st["linestyle"] = "--" if "[numpy]" in name else "-"
    return st


def _ks(d):
    es = sorted(d, key=int)
    return es, np.array([2.0 ** int(e) for e in es])


YMIN = 2e-8  # bottom of the delta axis; lower bounds below it (or 0) run off the axis


def _log2_axis(ax):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("number of compositions k")


def fig_paper(mech, res, noise, path, plt):
    fig, axs = plt.subplots(1, 3, figsize=(17, 5.2))
    names = list(res)
    ns = len(names)
    for i, name in enumerate(names):
        es, ks = _ks(res[name])
        st = _style(name)
        rec = [res[name][e] for e in es]
        mean = np.array([r["time_mean"] for r in rec])
        lo = np.array([r["time_p20"] for r in rec])
        hi = np.array([r["time_p80"] for r in rec])
        axs[0].plot(ks, mean, label=name, **st)
        axs[0].fill_between(ks, lo, hi, color=st["color"], alpha=0.15)
        axs[1].plot(ks, [r["buckets"] for r in rec], label=name, **st)
        # (c): shift the x positions a little per series so the brackets do not hide each other
        shift = 2.0 ** ((i - (ns - 1) / 2) * 0.16)
        est = np.array([r["estimate"] for r in rec])
        if C.finite(rec[0].get("lower")):
            low = np.array([r["lower"] for r in rec])
            up = np.array([r["upper"] for r in rec])
            # a lower bound of 0 (or below the axis) is drawn down to the bottom of the axis
            axs[2].errorbar(ks * shift, est, yerr=[est - np.maximum(low, YMIN), up - est], fmt=st["marker"],
                            color=st["color"], capsize=3, label=name, ms=5,
                            mfc="none" if st.get("linestyle") == "--" else st["color"])
        else:
            axs[2].plot(ks * shift, est, st["marker"], color=st["color"], label=name + " (estimate only)", ms=6)
    axs[2].axhline(C.TARGET_DELTA, color="gray", lw=1, ls=":", label="calibrated truth 1e-6")
    axs[2].set_ylim(YMIN, 2e-4)
    axs[0].set_ylabel("time per accountant (s), mean and 20-80th pct.")
    axs[0].set_yscale("log")
    axs[1].set_ylabel("discretisation buckets")
    axs[1].set_yscale("log")
    axs[2].set_ylabel("delta(1.0): estimate, lower and upper bound")
    axs[2].set_yscale("log")
    axs[0].set_title("(a) running time")
    axs[1].set_title("(b) buckets (fastpld: all stages and directions)")
    axs[2].set_title("(c) delta(1.0) estimates and bounds")
    for ax in axs:
        _log2_axis(ax)
        ax.grid(True, which="major", alpha=0.3)
    axs[0].legend(fontsize=8, loc="upper left")
    axs[2].legend(fontsize=7, loc="upper center", ncol=2)
    fig.suptitle(f"{C.LABEL[mech]}: noise calibrated to delta(1.0) = 1e-6 at each k; eps_error 0.1, "
                 f"delta_error 1e-10, dp_accounting interval 1e-4", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_scaling(beyond, path, plt):
    fig, axs = plt.subplots(1, 2, figsize=(14, 5.2))
    failed = []
    for mech, mk in (("laplace", "-"), ("psg", "--")):
        short = "Lap" if mech == "laplace" else "PSG"
        for m, recs in beyond["fastpld"][mech].items():
            es = sorted((e for e, r in recs.items() if r.get("delta_error") is not None), key=int)
            ks = [2.0 ** int(e) for e in es]
            t = [recs[e]["runs"][repr(recs[e]["delta_error"])]["time_median"] for e in es]
            mem = [(recs[e].get("memory") or {}).get("rss_peak_extra") for e in es]
            st = dict(STYLE[m])
            axs[0].plot(ks, t, mk, label=f"fastpld {m} ({short})", color=st["color"], marker=st["marker"])
            axs[1].plot(ks, [x / 2**20 if x is not None else np.nan for x in mem], mk, color=st["color"],
                        marker=st["marker"], label=f"fastpld {m} ({short})")
            # white-filled marker: delta_error 1e-10 was refused, run at the smallest feasible one
            loose = [i for i, e in enumerate(es) if recs[e]["delta_error"] != C.DELTA_ERROR]
            axs[0].plot([ks[i] for i in loose], [t[i] for i in loose], st["marker"], color=st["color"], mfc="white",
                        ms=7)
        for name, recs in beyond["peers"][mech].items():
            es = sorted((e for e, r in recs.items() if r.get("wall") is not None), key=int)
            st = _style(name)
            for e, r in recs.items():
                if r.get("wall") is None:
                    failed.append(f"{name.split()[0]} ({short}) at k = 2^{e}: {r.get('error', 'failed')}")
            axs[0].plot([2.0 ** int(e) for e in es], [recs[e]["wall"] for e in es], mk, color=st["color"],
                        marker=st["marker"], label=f"{name} ({short})")
            axs[1].plot([2.0 ** int(e) for e in es], [(recs[e].get("rss_peak_extra") or np.nan) / 2**20 for e in es],
                        mk, color=st["color"], marker=st["marker"], label=f"{name} ({short})")
    axs[1].axhline(50, color="gray", ls=":", lw=1, label="target 50 MB")
    if failed:
        axs[0].text(0.98, 0.03, "\n".join(failed), transform=axs[0].transAxes, ha="right", va="bottom", fontsize=7,
                    bbox=dict(fc="white", ec="0.7", alpha=0.9))
    axs[0].set_ylabel("time (s; fastpld median, peers one run)")
    axs[1].set_ylabel("peak extra resident memory (MB)")
    axs[0].set_title("time up to k = 2^30 (white markers: delta_error 1e-10 refused, run at\n"
                     "the smallest feasible one, <= 3e-7; solid: Laplace, dashed: subsampled Gaussian)", fontsize=10)
    axs[1].set_title("peak extra resident memory (VmHWM - VmRSS before, one subprocess per point)", fontsize=10)
    for ax in axs:
        _log2_axis(ax)
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axs[0].legend(fontsize=7, ncol=2)
    axs[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_accuracy(acc, path, plt):
    fig, axs = plt.subplots(1, 3, figsize=(18, 5.2))
    g = acc["gaussian"]
    names = sorted({n for row in g.values() for n in row})
    for name in names:
        es = sorted((e for e in g if "rel_error" in g[e].get(name, {})), key=int)
        ks = [2.0 ** int(e) for e in es]
        st = _style(name if not name.startswith("fastpld") else name + " [x]")
        st.pop("linestyle", None)
        axs[0].plot(ks, [max(g[e][name]["rel_error"], 1e-9) for e in es], label=name, **st)
        wes = [e for e in es if "rel_width" in g[e][name]]
        if wes:
            axs[1].plot([2.0 ** int(e) for e in wes], [g[e][name]["rel_width"] for e in wes], label=name, **st)
    axs[0].set_title("Gaussian (exact delta known): |estimate - exact| / exact")
    axs[1].set_title("Gaussian: certified bracket (upper - lower) / exact")
    axs[0].set_ylabel("relative error of the delta(1.0) estimate")
    axs[1].set_ylabel("relative width of the certified bracket")
    lap = acc["laplace"]
    for name, d in lap.items():
        es = sorted(d["per_k"], key=int)
        ks = np.array([2.0 ** int(e) for e in es])
        st = _style(name)
        y = np.array([d["per_k"][e]["rel_error"] for e in es]) * 100
        axs[2].plot(ks, y, label=f"{name}: {d['min_rel_error']:+.0%} .. {d['max_rel_error']:+.0%}", **st)
    axs[2].axhline(0, color="gray", lw=1)
    axs[2].set_title("Laplace: estimate vs certified reference (fastpld, eps_error 0.001, +-2%)")
    axs[2].set_ylabel("relative error of the delta(1.0) estimate (%)")
    axs[0].set_yscale("log")
    for ax in axs:
        _log2_axis(ax)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axs[2].set_ylim(-100, 300)
    axs[2].legend(fontsize=7, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------
# tables
# ------------------------------------------------------------------------------------------
def _fmt_t(x):
    return f"{x * 1e3:.0f} ms" if x < 10 else f"{x:.1f} s"


def markdown(res, noise, cfg):
    L = []
    top = str(max(cfg["paper_exps"]))
    L.append(f"# Paper figures: results\n\n{res['meta']['command']}  \n{res['meta']['when']}, "
             f"{res['meta']['machine']}, {cfg['runs']} runs per point, backends {res['meta']['backends']}\n")
    L.append("## Calibrated noise (delta(1.0) = 1e-6)\n")
    L.append("| k | Laplace b | certified delta(1.0) | PSG sigma | certified delta(1.0) |\n|---|---|---|---|---|")
    for e in sorted(set(noise["laplace"]) & set(noise["psg"]), key=int):
        a, b = noise["laplace"][e], noise["psg"][e]
        L.append(f"| 2^{e} | {a['noise']:.6g} | [{a['fastpld']['lower']:.4g}, {a['fastpld']['upper']:.4g}] | "
                 f"{b['noise']:.6g} | [{b['fastpld']['lower']:.4g}, {b['fastpld']['upper']:.4g}] |")
    pc = noise.get("paper_check")
    if pc:
        L.append("\nThe paper's quoted values at k = 2^16:\n")
        L.append("| mechanism | noise | fastpld certified delta(1.0) (eps_error 0.003) | dp_accounting 1e-4 | 1e-5 |")
        L.append("|---|---|---|---|---|")
        for m, r in pc.items():
            f = r["fastpld_eps_error_0.003"]
            L.append(f"| {m} | {r['noise']} | {f['estimate']:.4g} in [{f['lower']:.4g}, {f['upper']:.4g}] | "
                     f"{r['dp_accounting_1e-4']:.4g} | {r['dp_accounting_1e-5']:.4g} |")
    for mech in C.MECHANISMS:
        L.append(f"\n## {C.LABEL[mech]} at k = 2^{top}\n")
        L.append("| series | median time | 20-80th pct | buckets | largest stage | delta(1.0) lower | estimate | upper |")
        L.append("|---|---|---|---|---|---|---|---|")
        for name, per_k in res["paper"][mech].items():
            r = per_k[top]
            lo = f"{r['lower']:.3g}" if C.finite(r.get("lower")) else "-"
            up = f"{r['upper']:.3g}" if C.finite(r.get("upper")) else "-"
            L.append(f"| {name} | {_fmt_t(r['time_median'])} | {_fmt_t(r['time_p20'])}-{_fmt_t(r['time_p80'])} | "
                     f"{r['buckets']} | {r['max_stage_buckets']} | {lo} | {r['estimate']:.3g} | {up} |")
    b = res.get("beyond")
    if b:
        L.append("\n## Past the paper: fastpld up to k = 2^30\n")
        L.append("| mechanism | method | k | delta_error used | median time | buckets | peak extra RSS | tracemalloc peak |")
        L.append("|---|---|---|---|---|---|---|---|")
        for mech in C.MECHANISMS:
            for m, recs in b["fastpld"][mech].items():
                for e in sorted(recs, key=int):
                    r = recs[e]
                    if r.get("delta_error") is None:
                        L.append(f"| {mech} | {m} | 2^{e} | infeasible | - | - | - | - |")
                        continue
                    run = r["runs"][repr(r["delta_error"])]
                    mem = r.get("memory") or {}
                    rss = f"{mem['rss_peak_extra'] / 2**20:.1f} MB" if mem.get("rss_peak_extra") is not None else "-"
                    tm = f"{mem['tracemalloc_peak'] / 2**20:.1f} MB" if mem.get("tracemalloc_peak") is not None else "-"
                    L.append(f"| {mech} | {m} | 2^{e} | {r['delta_error']:g} | {_fmt_t(run['time_median'])} | "
                             f"{run['buckets']} | {rss} | {tm} |")
        L.append("\nRefusals at delta_error = 1e-10 (fastpld charges floating-point round-off honestly):\n")
        for mech in C.MECHANISMS:
            for m, recs in b["fastpld"][mech].items():
                for e in sorted(recs, key=int):
                    if recs[e].get("refusal_at_1e-10"):
                        L.append(f"- {mech} {m} 2^{e}: `{recs[e]['refusal_at_1e-10']}`")
        L.append("\nTime ratio t(largest k) / t(2^10), medians, same process; every run from scratch (as the "
                 "peers'), and in the last column with fastpld's per-mechanism cache kept (a repeated composition "
                 "of an equal mechanism):\n")
        L.append("| mechanism | method | k | delta_error | ratio (same delta_error) | ratio vs 2^10 at 1e-10 "
                 "| ratio, cache kept |")
        L.append("|---|---|---|---|---|---|---|")
        for mech, d in b["ratio"].items():
            for m, r in d.items():
                L.append(f"| {mech} | {m} | {r['k_top']} | {r['delta_error_top']:g} | "
                         f"{r['ratio_same_delta_error']:.2f} | {r['ratio_vs_1e-10']:.2f} | "
                         f"{r['ratio_same_delta_error_warm']:.2f} |")
        L.append("\nThe same ratio at each delta_error certified at the largest k (the smallest certified one moves "
                 "as the certificate tightens; plans are dearest at that edge):\n")
        L.append("| mechanism | method | delta_error | t(largest k) | t(2^10) | ratio | ratio, cache kept | plans |")
        L.append("|---|---|---|---|---|---|---|---|")
        for mech, d in b["ratio"].items():
            for m, r in d.items():
                for x in r.get("by_delta_error", {}).values():
                    L.append(f"| {mech} | {m} | {x['delta_error']:g} | {_fmt_t(x['time_top'])} | "
                             f"{_fmt_t(x['time_10'])} | {x['ratio']:.2f} | {x['ratio_warm']:.2f} | "
                             f"{x['plan_top']} / {x['plan_10']} |")
        L.append("\nPeers at growing k (one run each in a subprocess; stop after the first run over the cap "
                 f"of {cfg['cap']:.0f} s):\n")
        L.append("| mechanism | peer | k | time | buckets | peak extra RSS | note |\n|---|---|---|---|---|---|---|")
        for mech, d in b["peers"].items():
            for name, recs in d.items():
                for e in sorted(recs, key=int):
                    r = recs[e]
                    if r.get("wall") is None:
                        L.append(f"| {mech} | {name} | 2^{e} | - | - | - | {r.get('error', '')} |")
                        continue
                    rss = f"{r['rss_peak_extra'] / 2**20:.1f} MB" if r.get("rss_peak_extra") is not None else "-"
                    L.append(f"| {mech} | {name} | 2^{e} | {_fmt_t(r['wall'])} | {r['result']['buckets']} | {rss} | "
                             f"{r.get('error', '')} |")
    a = res.get("accuracy")
    if a:
        L.append("\n## Accuracy\n")
        L.append(f"Plain Gaussian, sigma = sqrt(k)/mu with mu = {noise['gaussian']['mu']:.6f} (exact delta(1.0) = "
                 f"{a['gaussian_exact_delta']:.6g}):\n")
        L.append("| k | method | estimate rel. error | bracket width / exact | bounds hold |\n|---|---|---|---|---|")
        for e in sorted(a["gaussian"], key=int):
            for n, r in a["gaussian"][e].items():
                if "rel_error" not in r:
                    continue
                w = f"{r['rel_width']:.3g}" if "rel_width" in r else "-"
                L.append(f"| 2^{e} | {n} | {r['rel_error']:.3%} | {w} | {r.get('bounds_hold', '-')} |")
        for mech in C.MECHANISMS:
            L.append(f"\n{C.LABEL[mech]}: estimate of delta(1.0) against the calibration's certified reference "
                     "(fastpld at small eps_error), over the k of section 1:\n")
            L.append("| series | min rel. error | max rel. error | bounds contain the reference bracket at all k |")
            L.append("|---|---|---|---|")
            for n, d in a[mech].items():
                hold = [v.get("bounds_contain_reference") for v in d["per_k"].values()]
                hs = "-" if hold[0] is None else str(all(hold))
                L.append(f"| {n} | {d['min_rel_error']:+.1%} | {d['max_rel_error']:+.1%} | {hs} |")
    return "\n".join(L) + "\n"


# ------------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: few k, 2 runs, small caps (< 60 s)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--runs", type=int, default=None, help="runs per point (default 20; 2 in --quick)")
    ap.add_argument("--cap", type=float, default=None, help="stop a peer after a run longer than this (s)")
    ap.add_argument("--all-powers", action="store_true", help="every power of two 2^4..2^16 (default: even)")
    ap.add_argument("--noise-file", default=NOISE_FILE)
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: beyond,accuracy")
    ap.add_argument("--replot", action="store_true", help="redraw figures and tables from OUT/results.json")
    a = ap.parse_args(argv)
    cfg = config(a)
    skip = {s for s in a.skip.split(",") if s}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import fastpld

    os.makedirs(a.out, exist_ok=True)
    noise = load_noise(a.noise_file)
    if a.replot:
        with open(os.path.join(a.out, "results.json")) as fh:
            res = json.load(fh)
        _draw(res, noise, res["meta"]["config"], a.out, plt)
        return
    backends = list(fastpld.available_backends())
    t0 = time.perf_counter()
    res = {"meta": {"command": "python benchmarks/paper_figures.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                    "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "machine": f"{platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}",
                    "backends": backends, "config": cfg, "versions": _versions()}}
    res["paper"] = paper_section(cfg, noise, backends)
    if "beyond" not in skip:
        res["beyond"] = beyond_section(cfg, noise)
    if "accuracy" not in skip:
        res["accuracy"] = accuracy_section(cfg, noise, res["paper"])
    res["meta"]["seconds"] = time.perf_counter() - t0
    with open(os.path.join(a.out, "results.json"), "w") as fh:
        json.dump(res, fh, indent=1, default=_json_default)
    _draw(res, noise, cfg, a.out, plt)
    _log(f"wrote {a.out}/results.json, results.md and figures in {res['meta']['seconds']:.0f} s")


def _draw(res, noise, cfg, out, plt):
    for mech in C.MECHANISMS:
        fig_paper(mech, res["paper"][mech], noise, os.path.join(out, f"fig_{mech}.png"), plt)
    if "beyond" in res:
        fig_scaling(res["beyond"], os.path.join(out, "fig_scaling.png"), plt)
    if "accuracy" in res:
        fig_accuracy(res["accuracy"], os.path.join(out, "fig_accuracy.png"), plt)
    with open(os.path.join(out, "results.md"), "w") as fh:
        fh.write(markdown(res, noise, cfg))


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.bool_):
        return bool(o)
    raise TypeError(type(o))


def _versions():
    from importlib.metadata import version

    out = {}
    for p in ("fastpld", "prv-accountant", "dp-accounting", "numpy", "scipy"):
        try:
            out[p] = version(p)
        except Exception:  # pragma: no cover
            out[p] = None
    return out


if __name__ == "__main__":
    main()
