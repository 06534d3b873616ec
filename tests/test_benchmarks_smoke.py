"""Smoke test of the paper-figure benchmark: ``--quick`` runs end to end and writes finite numbers.

Nothing about speed is asserted (timings live in benchmarks/).  Skipped when the peers or
matplotlib are not installed.
"""
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "paper_figures.py")


def _finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_paper_figures_quick(tmp_path):
    for mod in ("matplotlib", "prv_accountant", "dp_accounting"):
        pytest.importorskip(mod)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONWARNINGS="ignore")
    p = subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=600, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    for name in ("fig_laplace.png", "fig_psg.png", "fig_scaling.png", "fig_accuracy.png"):
        f = tmp_path / name
        assert f.is_file() and f.stat().st_size > 10_000, name
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    md = (tmp_path / "results.md").read_text()
    assert "Calibrated noise" in md and "prv_accountant" in md
    res = json.loads((tmp_path / "results.json").read_text())
    for mech in ("laplace", "psg"):
        series = res["paper"][mech]
        assert any(s.startswith("prv_accountant") for s in series)
        assert any(s.startswith("fastpld recursive") for s in series)
        for name, per_k in series.items():
            assert per_k, name
            for e, r in per_k.items():
                assert all(_finite(t) and t > 0 for t in r["times"]), (name, e)
                assert _finite(r["time_median"]) and _finite(r["estimate"]), (name, e)
                assert isinstance(r["buckets"], int) and r["buckets"] > 0, (name, e)
                if r.get("lower") is not None:
                    assert r["lower"] <= r["estimate"] <= r["upper"], (name, e)
        for m, ratio in res["beyond"]["ratio"][mech].items():
            assert _finite(ratio["ratio_same_delta_error"]) and ratio["ratio_same_delta_error"] > 0, m
        for m, recs in res["beyond"]["fastpld"][mech].items():
            assert any(r.get("delta_error") is not None for r in recs.values()), m
    mem = [r["memory"]["tracemalloc_peak"] for recs in res["beyond"]["fastpld"]["psg"].values()
           for r in recs.values() if r.get("memory")]
    assert mem and all(_finite(x) and x > 0 for x in mem)
    g = res["accuracy"]["gaussian"]
    assert g and all(_finite(r["rel_error"]) for row in g.values() for r in row.values() if "rel_error" in r)


def test_scaling_ratio_small(tmp_path):
    # the ratio script alone (no peers): end to end at k up to 2^16, one run per point, finite positive ratios
    out = tmp_path / "ratio.json"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "scaling_ratio.py"), "--runs", "1", "--top", "16",
                        "--mechanisms", "laplace", "--repeat", "2", "--out", str(out)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert "| laplace | auto |" in p.stdout and "over the 2 repeats" in p.stdout
    res = json.loads(out.read_text())
    assert res["top"] == 16 and set(res["ratios"]) == {"laplace"} and len(res["repeats"]) == 2
    rows = [v for m in res["ratios"]["laplace"].values() for v in m]
    assert rows and all(_finite(v["ratio"]) and v["ratio"] > 0 for v in rows)
    # the spread brackets each repeat's ratio
    for m, vs in res["spread"]["laplace"].items():
        for i, sp in enumerate(vs):
            rs = [rp["laplace"][m][i]["ratio"] for rp in res["repeats"]]
            assert sp["lowest"] == min(rs) and sp["highest"] == max(rs) and min(rs) <= sp["median"] <= max(rs)
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "scaling_ratio.py"), "--mechanisms", "gauss"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode != 0 and "--mechanisms" in bad.stderr


def test_bench_server_quick(tmp_path):
    # the server benchmark end to end on small keys: every workload row, the warm question, import time and the
    # accountant section (Opacus beside it when installed) with finite positive numbers
    out = tmp_path / "server.json"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_server.py"), "--quick", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert "| 8 | on |" in p.stdout and "| 2 | off |" in p.stdout and "warm repeated question" in p.stdout
    res = json.loads(out.read_text())
    assert res["quick"] is True and len(res["workload"]) == 4
    for r in res["workload"]:
        assert r["queries"] == 40 and _finite(r["queries_per_s"]) and r["queries_per_s"] > 0
        assert r["cold"]["n"] >= 8 and _finite(r["cold"]["p50_ms"]) and _finite(r["rss_growth_mb"])
        assert r["kept_mb"] <= r["limit_mb"]
        if r["answers"]:
            st = r["answer_stats"]
            # (plus the warm-up question asked before the timed queries)
            assert st["misses"] + st["hits"] + st["joined"] == 41 and 2 <= st["misses"] <= 9
    assert _finite(res["warm_question"]["median_us"]) and res["warm_question"]["median_us"] > 0
    assert _finite(res["import"]["median_s"])
    row = res["accountant"]["1000"]
    assert _finite(row["fastpld_median_ms"])
    if row["opacus_prv_median_ms"] is not None:
        assert _finite(row["opacus_prv_median_ms"])


def test_bench_accountant_small(tmp_path):
    out = tmp_path / "acc.json"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_accountant.py"), "--ks", "300",
                        "--steps", "3", "--exact-steps", "2", "--import-runs", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    res = json.loads(out.read_text())
    assert _finite(res["import"]["this"]["median_s"]) and res["import"]["this"]["median_s"] > 0
    rows = res["accountant"]
    assert [(r["k"], r["lookahead"]) for r in rows] == [(300, 1e-3), (300, 0.0)]
    assert all(_finite(r["median_ms"]) and r["median_ms"] > 0 for r in rows)


def test_bench_batch_quick(tmp_path):
    # the batch benchmark end to end at small sizes (serial and local processes; Dask if installed):
    # every runner's records equal the serial ones (the script exits non-zero otherwise)
    out = tmp_path / "batch.json"
    runners = "serial,processes" + (",dask" if importlib.util.find_spec("distributed") else "")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_batch.py"), "--users", "12",
                        "--sweep", "3", "--runners", runners, "--out", str(out)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert "| histories | processes | 12 |" in p.stdout and "| sweep | serial | 3 |" in p.stdout
    res = json.loads(out.read_text())
    rows = {(r["workload"], r["runner"]): r for r in res["rows"]}
    assert set(rows) == {(w, r) for w in ("histories", "sweep") for r in runners.split(",")}
    for r in rows.values():
        assert r["identical_to_first"] and r["failed"] == 0
        assert _finite(r["seconds"]) and r["seconds"] > 0 and _finite(r["throughput"])
        assert r["processes"] >= 1 and all(_finite(v) and v > 0 for v in r["peak_rss_mb_per_process"])
    assert rows[("histories", "processes")]["processes"] <= 2


def test_default_accuracy_small(tmp_path):
    # the default-accuracy table end to end at k <= 10: every mechanism answers, certified and within 0.1%
    # where the dominance certificate answered
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "default_accuracy.py"), "--repeat", "1",
                        "--kmax", "10", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                       cwd=ROOT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    rows = json.loads((tmp_path / "default_accuracy.json").read_text())["rows"]
    assert len(rows) == 2 * 11 and not any("refused" in r for r in rows)
    for r in rows:
        assert 0 <= r["lower"] <= r["upper"] and _finite(r["time"])
        if r["method"].startswith("dominance"):
            assert r["width"] <= 1e-3


def test_default_accuracy_random_small(tmp_path):
    # the random sweep: every family's draws composed at the default accuracy, each row a plan and a time
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "default_accuracy.py"), "--random", "2",
                        "--kmax", "100", "--seed", "3", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    rows = json.loads((tmp_path / "default_accuracy_random.json").read_text())["rows"]
    assert len(rows) == 2 * 7 and {r["family"] for r in rows} == {
        "Laplace", "PoissonSubsampledLaplace", "PoissonSubsampled(Laplace)", "PoissonSubsampledGaussian",
        "SubsampledWithoutReplacement(Gaussian)", "PoissonSubsampled(RandomizedResponse)", "Heterogeneous (2-5 parts)"}
    assert all(2 <= len(r["parts"]) <= 5 for r in rows if r["family"].startswith("Heterogeneous"))
    for r in rows:
        assert 1 <= r["k"] <= 100 and _finite(r["time"]) and r["method"] != "refused"
        assert 0 <= r["lower"] <= r["upper"]
        if r["method"].startswith("dominance"):  # (within 0.1% of epsilon; below epsilon 0.01, of 0.01)
            assert r["upper"] - r["lower"] <= 1e-3 * max(r["lower"], 0.01) * (1 + 1e-9)


def test_bench_auto_quick(tmp_path):
    out = tmp_path / "auto.json"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_auto.py"), "--quick", "--repeat", "1",
                        "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 3 and all(r["eps_error"] == 0.1 for r in rows)
    for r in rows:
        # each method's certified interval, and auto's is one of the two others'
        got = [(r[m]["lower"], r[m]["upper"]) for m in ("auto", "coupling", "dominance")]
        assert all(_finite(lo) and lo <= up for lo, up in got)
        assert got[0] in got[1:]


def test_first_call_benchmark(tmp_path):
    """bench_first_call.py: fresh processes end to end; the library and its command line give the same answer."""
    script = os.path.join(ROOT, "benchmarks", "bench_first_call.py")
    p = subprocess.run([sys.executable, script, "--repeat", "1", "--out", str(tmp_path)], capture_output=True,
                       text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    res = json.loads((tmp_path / "first_call.json").read_text())
    a, b = res["fastpld compose"], res["fastpld CLI"]
    assert a["answer"] == b["answer"] and 6.18 < a["answer"] < 6.20  # (epsilon ~6.187 at delta 1e-5)
    assert all(_finite(r["wall"]) and r["wall"] > 0 for r in res.values())
    assert _finite(a["import"]) and _finite(a["first"])


def test_ab_versions_small(tmp_path):
    # the same tree on both sides: the bounds agree bitwise, and the table and JSON are written
    out = tmp_path / "ab.json"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "ab_versions.py"), "--base",
                        os.path.join(ROOT, "src"), "--rows", "2,0.05,30", "--rounds", "1", "--answers", "1",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "| 2, 0.05, 30 |" in p.stdout and "| yes |" in p.stdout
    rows = json.loads(out.read_text())["rows"]
    assert rows[0]["bounds_equal"] and len(rows[0]["base_ms"]) == 1


def test_bench_mechanisms_quick(tmp_path):
    pytest.importorskip("dp_accounting")
    script = os.path.join(ROOT, "benchmarks", "bench_mechanisms.py")
    p = subprocess.run([sys.executable, script, "--quick", "--repeat", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    rows = json.loads((tmp_path / "mechanisms.json").read_text())["rows"]
    assert len(rows) == 3
    for r in rows:
        lo, hi = r["ref"]
        f = r["fastpld"]
        # fastpld's certified interval and the reference's overlap, within the 0.1% asked
        assert f["lower"] <= hi and lo <= f["upper"] and f["width"] <= 1e-3 * (1 + 1e-9), r
        if "time" in r["dp_accounting"]:
            assert _finite(f["time"]) and _finite(r["dp_accounting"]["time"]), r
            assert r["dp_accounting"]["upper"] >= lo * (1 - 1e-9), r  # (its pessimistic answer: an upper bound)


def test_bench_many_parts_quick(tmp_path):
    script = os.path.join(ROOT, "benchmarks", "bench_many_parts.py")
    p = subprocess.run([sys.executable, script, "--sizes", "20", "--repeat", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    rows = json.loads((tmp_path / "many_parts.json").read_text())["rows"]
    assert [r["family"] for r in rows] == ["Gaussian levels", "subsampled Gaussian levels", "pure-DP ledger"]
    for r in rows:
        assert r["parts"] == 20 and _finite(r["time"]) and 0 < r["lower"] <= r["upper"] <= r["lower"] * (1 + 1e-3), r
