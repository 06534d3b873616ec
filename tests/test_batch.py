"""fastpld.batch: many questions serially, on local processes and on a Dask LocalCluster.

The reference answer of every question is :func:`fastpld.batch.answer` on it alone, in this
process, with fastpld's per-mechanism cache emptied first; every way of running a batch must give
bitwise the same records (apart from the time and the worker's name).
"""
import json
import math
import os
import signal
import sys
import warnings

import pytest

import fastpld
from fastpld import batch, questions
from fastpld import mechanisms as M
from fastpld.cli import main

VOLATILE = ("time", "worker")


def _psg(sigma, q):
    return {"name": "poisson_subsampled_gaussian", "sigma": sigma, "sampling_probability": q}


def _questions():
    """Cheap, varied questions: heterogeneous histories (some shared), calibrations, failures."""
    qs = []
    for i in range(18):
        sched = [{"mechanism": _psg(1.0 + 0.25 * (i % 3), 0.01 * (1 + i % 2)), "count": 40 + 10 * (i % 4)},
                 {"mechanism": {"name": "gaussian", "sigma": 6.0}, "count": 1 + i % 2}]
        if i % 3 == 0:
            sched.append({"mechanism": {"name": "laplace", "scale": 30.0}, "count": 5})
        q = {"id": f"user-{i}", "schedule": sched}
        q.update({"ask": "epsilon", "delta": 1e-6} if i % 2 else {"ask": "delta", "epsilon": 0.5})
        qs.append(q)
    # questions that share user-1's composition (answered from one PrivacyLossDistribution)
    qs.append(dict(qs[1], id="user-1-again", delta=1e-5))
    qs.append(dict(qs[1], id="user-1-third", delta=1e-7))
    qs += [
        {"id": "rr", "ask": "epsilon", "delta": 1e-6,
         "schedule": [{"mechanism": {"name": "randomized_response", "epsilon": 0.3, "num_categories": 3}, "count": 20},
                      {"mechanism": {"name": "approx_dp", "epsilon": 0.1, "delta": 1e-9}, "count": 3},
                      {"mechanism": {"name": "pure_dp", "epsilon": 0.05}, "count": 4},
                      {"mechanism": {"name": "custom_pmf", "values": [0.2, -0.1], "probabilities": [0.4, 0.6]},
                       "count": 2}]},
        {"id": "cal-sigma", "ask": "noise_multiplier", "target_epsilon": 2.0, "target_delta": 1e-5,
         "sampling_probability": 0.02, "steps": 200},
        {"id": "cal-q", "ask": "sampling_probability", "target_epsilon": 1.0, "target_delta": 1e-5,
         "noise_multiplier": 1.5, "steps": 100},
        {"id": "cal-steps", "ask": "steps", "target_epsilon": 1.0, "target_delta": 1e-6,
         "mechanism": {"name": "laplace", "scale": 20.0}},
        # failures: bad value, bad schema, unattainable target, too small a delta to certify
        {"id": "bad-sigma", "ask": "epsilon", "delta": 1e-5,
         "schedule": [{"mechanism": {"name": "gaussian", "sigma": -1.0}, "count": 3}]},
        {"id": "bad-field", "ask": "delta", "epsilon": 1.0, "schedule": [], "eps_err": 0.1},
        {"id": "unattainable", "ask": "steps", "target_epsilon": 0.01, "target_delta": 1e-6,
         "mechanism": {"name": "pure_dp", "epsilon": 1.0}},
        {"id": "tiny-delta", "ask": "epsilon", "delta": 1e-12,
         "schedule": [{"mechanism": {"name": "gaussian", "sigma": 2.0}, "count": 3}], "delta_error": 1e-10},
        "not a question",
    ]
    return qs


QUESTIONS = _questions()


def _strip(rec):
    return {k: v for k, v in rec.items() if k not in VOLATILE}


@pytest.fixture(scope="module")
def alone():
    """Each question answered alone in this process, from cold caches."""
    out = []
    for i, q in enumerate(QUESTIONS):
        M._LOSS_CACHE.clear()
        out.append(_strip(batch.answer(q, i)))
    return out


def _check(records, alone):
    assert [r["index"] for r in records] == list(range(len(QUESTIONS)))
    assert [_strip(r) for r in records] == alone  # bitwise: floats compare exactly
    for r in records:
        assert list(r) == list(batch.RECORD_FIELDS)
        json.dumps(r, allow_nan=False)


def test_reference_answers_are_sane(alone):
    by_id = {r["id"]: r for r in alone}
    ok = [r for r in alone if r["ok"]]
    assert len(ok) == len(QUESTIONS) - 5
    for r in ok:
        assert r["error"] is None and 0 <= r["lower"] <= r["estimate"] <= r["upper"], r
    assert by_id["user-1-again"]["upper"] < by_id["user-1"]["upper"] < by_id["user-1-third"]["upper"]
    # calibrations: the returned parameter meets the target, certified
    for cid, target in (("cal-sigma", 2.0), ("cal-q", 1.0), ("cal-steps", 1.0)):
        assert by_id[cid]["upper"] <= target
    assert by_id["cal-sigma"]["value"] == fastpld.find_noise_multiplier(2.0, 1e-5, 0.02, 200)
    assert by_id["cal-steps"]["value"] == fastpld.find_steps(1.0, 1e-6, fastpld.Laplace(20.0))
    assert isinstance(by_id["cal-steps"]["value"], int)
    # the same numbers as the library called directly
    pld = fastpld.compose([(fastpld.PoissonSubsampledGaussian(1.25, 0.02), 50), (fastpld.Gaussian(6.0), 2)])
    b = pld.epsilon(1e-6)
    assert (by_id["user-1"]["lower"], by_id["user-1"]["estimate"], by_id["user-1"]["upper"]) == tuple(b)


def test_failures_are_per_question_records(alone):
    by_id = {r["id"]: r for r in alone}
    assert by_id["bad-sigma"]["error"] == "schedule[0].mechanism.sigma must be > 0, got -1.0"
    assert by_id["bad-sigma"]["error_type"] == "ValueError" and by_id["bad-sigma"]["upper"] is None
    assert "unknown field 'eps_err'" in by_id["bad-field"]["error"]
    assert "not attainable" in by_id["unattainable"]["error"]
    assert "too small to certify" in by_id["tiny-delta"]["error"]
    last = alone[-1]
    assert last["id"] == len(QUESTIONS) - 1 and last["ask"] is None and "JSON object" in last["error"]
    assert all(not r["ok"] for r in (by_id["bad-sigma"], by_id["bad-field"], by_id["unattainable"], last))


@pytest.mark.parametrize("question,field", [
    ({"ask": "epsilon", "delta": 1e-5}, "'schedule'"),
    ({"ask": "epsilon", "schedule": [{"mechanism": {"name": "gaussian", "sigma": 1}, "count": 1}]}, "'delta'"),
    ({"ask": "eps", "delta": 1e-5}, "ask must be one of"),
    ({"ask": "delta", "epsilon": 1, "schedule": {"mechanism": {}}}, "schedule must be a non-empty list"),
    ({"ask": "delta", "epsilon": 1, "schedule": [{"mechanism": {"name": "gauss", "sigma": 1}, "count": 1}]},
     "schedule[0].mechanism.name must be one of"),
    ({"ask": "delta", "epsilon": 1, "schedule": [{"mechanism": {"name": "gaussian", "sigma": 1}, "count": 1},
                                                 {"mechanism": {"name": "laplace", "sigma": 1}, "count": 1}]},
     "schedule[1].mechanism: unknown parameter 'sigma' for 'laplace'"),
    ({"ask": "delta", "epsilon": 1, "schedule": [{"mechanism": {"name": "laplace"}, "count": 1}]},
     "schedule[0].mechanism: 'laplace' needs the parameter 'scale'"),
    ({"ask": "delta", "epsilon": 1, "schedule": [{"mechanism": {"name": "gaussian", "sigma": 1}, "count": 0}]},
     "schedule[0].count must be a positive integer"),
    ({"ask": "delta", "epsilon": 1, "schedule": [{"mechanism": {"name": "gaussian", "sigma": 1}}]},
     "schedule[0] needs the field 'count'"),
    ({"ask": "delta", "epsilon": 1, "schedule": [{"mechanism": {"name": "gaussian", "sigma": "1"}, "count": 1}]},
     "schedule[0].mechanism.sigma must be a real number"),
    ({"ask": "delta", "epsilon": 1, "schedule": [{"mechanism": {"name": "poisson_subsampled_gaussian", "sigma": 1,
                                                                "sampling_probability": 2}, "count": 1}]},
     "schedule[0].mechanism.sampling_probability must be in [0, 1]"),
    ({"ask": "delta", "epsilon": -1, "schedule": [{"mechanism": {"name": "gaussian", "sigma": 1}, "count": 1}]},
     "epsilon must be >= 0"),
    ({"ask": "epsilon", "delta": 1e-5, "eps_error": 0, "schedule": [{"mechanism": {"name": "gaussian", "sigma": 1},
                                                                     "count": 1}]}, "eps_error must be > 0"),
    ({"ask": "epsilon", "delta": 1e-5, "rel_error": 1e-3, "eps_error": 0.1,
      "schedule": [{"mechanism": {"name": "gaussian", "sigma": 1}, "count": 1}]}, "not both"),
    ({"ask": "epsilon", "delta": 1e-5, "rel_error": 2, "schedule": [{"mechanism": {"name": "gaussian", "sigma": 1},
                                                                    "count": 1}]}, "rel_error must be in (0, 1)"),
    ({"ask": "noise_multiplier", "target_epsilon": 1, "target_delta": 1e-5, "steps": 10, "sampling_probability": 0.1,
      "rel_error": 0}, "rel_error must be > 0"),
    ({"ask": "epsilon", "delta": 1e-5, "method": "fast", "schedule": [{"mechanism": {"name": "gaussian", "sigma": 1},
                                                                       "count": 1}]}, "method must be one of"),
    ({"ask": "noise_multiplier", "target_epsilon": 1, "target_delta": 1e-5, "steps": 10}, "'sampling_probability'"),
    ({"ask": "noise_multiplier", "target_epsilon": 1, "target_delta": 1e-5, "steps": 10, "sampling_probability": 0.1,
      "neighboring": "both"}, "neighboring must be one of"),
    ({"ask": "steps", "target_epsilon": 1, "target_delta": 0, "mechanism": {"name": "laplace", "scale": 1}},
     "target_delta must be in (0, 1)"),
    ({"id": [1], "ask": "steps"}, "id must be a string or an integer"),
])
def test_schema_errors_name_the_field(question, field):
    with pytest.raises(ValueError) as err:
        batch.parse_question(question)
    assert field in str(err.value)
    rec = batch.answer(question)
    assert not rec["ok"] and rec["error"] == str(err.value) and rec["error_type"] == "ValueError"


def test_identical_schedules_share_one_composition(monkeypatch):
    calls = []
    real = questions.compose

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(questions, "compose", counting)
    qs = [QUESTIONS[1], QUESTIONS[0], QUESTIONS[18], QUESTIONS[19]]  # 18, 19 repeat 1's schedule
    recs = batch.answer_many(qs, serial=True, chunk_size=8)
    assert len(calls) == 2 and [r["index"] for r in recs] == [0, 1, 2, 3]
    assert [r["id"] for r in recs] == ["user-1", "user-0", "user-1-again", "user-1-third"]


def test_serial_equals_alone(alone):
    _check(batch.answer_many(QUESTIONS, serial=True, chunk_size=3), alone)


def test_serial_from_a_generator_with_small_chunks(alone):
    _check(list(batch.run(iter(QUESTIONS), serial=True, chunk_size=1)), alone)


def test_processes_equal_alone(alone):
    _check(batch.answer_many(QUESTIONS, workers=2, chunk_size=2), alone)


def test_processes_as_completed_cover_every_question_once(alone):
    recs = list(batch.run(iter(QUESTIONS), workers=2, chunk_size=1, ordered=False, mp_context="forkserver"))
    assert sorted(r["index"] for r in recs) == list(range(len(QUESTIONS)))
    _check(sorted(recs, key=lambda r: r["index"]), alone)
    assert len({r["worker"] for r in recs if r["ok"]}) >= 1


def _kill_first_worker(it):
    """Consume ``it``; after the first record, kill the process that answered it (SIGKILL)."""
    recs = [next(it)]
    pid = int(recs[0]["worker"].rsplit(":", 1)[1])
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    recs += list(it)
    return recs, pid


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_local_worker_killed_mid_batch(alone):
    qs = QUESTIONS * 2
    recs, pid = _kill_first_worker(batch.run(qs, workers=2, chunk_size=1))
    assert [r["index"] for r in recs] == list(range(len(qs)))  # nothing lost, nothing twice
    ref = alone + [dict(r, index=r["index"] + len(QUESTIONS), id=r["id"] + len(QUESTIONS)
                        if isinstance(r["id"], int) else r["id"]) for r in alone]
    assert [_strip(r) for r in recs] == ref
    assert any(r["worker"] and int(r["worker"].rsplit(":", 1)[1]) != pid for r in recs[1:])


def _kill_on_killer(p, memo):
    if p.id == "killer":
        os._exit(3)  # as a segfault or the kernel's OOM killer would end the worker
    return _REAL_COMPUTE(p, memo)


_REAL_COMPUTE = questions._compute


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_a_question_that_kills_its_worker_is_isolated(alone, monkeypatch):
    # forked workers inherit the patched _compute: the "killer" question ends its process every time
    monkeypatch.setattr(questions, "_compute", _kill_on_killer)
    killer = dict(QUESTIONS[0], id="killer")
    qs = QUESTIONS[:7] + [killer] + QUESTIONS[7:12]
    recs = batch.answer_many(qs, workers=2, chunk_size=3, mp_context="fork")
    assert [r["index"] for r in recs] == list(range(len(qs)))
    k = recs[7]
    assert k["id"] == "killer" and not k["ok"] and k["error_type"] == "BrokenProcessPool"
    assert k["error"].startswith("the worker died answering this question alone")
    rest = recs[:7] + [dict(r, index=r["index"] - 1) for r in recs[8:]]
    assert [_strip(r) for r in rest] == alone[:12]


def test_bad_arguments():
    with pytest.raises(ValueError, match="workers"):
        batch.run(QUESTIONS, workers=0)
    with pytest.raises(ValueError, match="chunk_size"):
        batch.run(QUESTIONS, chunk_size=-1)
    with pytest.raises(ValueError, match="questions must be an iterable"):
        batch.run({"ask": "epsilon"})
    with pytest.raises(ValueError, match="mp_context"):
        batch.run(QUESTIONS, mp_context="thread")
    with pytest.raises(ValueError, match="mp_context"):
        batch.run(QUESTIONS, mp_context=3)
    with pytest.raises(ValueError, match="not both"):
        batch.run(QUESTIONS, serial=True, client="tcp://127.0.0.1:1")
    assert batch.answer_many([], serial=True) == [] and batch.answer_many([], workers=1) == []


def test_dask_missing_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r"fastpld\[dask\]"):
        batch.run(QUESTIONS, client="tcp://127.0.0.1:1")
    assert batch.answer_many(QUESTIONS[:2], serial=True)  # the local path does not need it


def test_progress_bar_on_stderr(capsys):
    pytest.importorskip("tqdm")
    recs = batch.answer_many(QUESTIONS[:4], serial=True, progress=True)
    assert len(recs) == 4
    err = capsys.readouterr().err
    assert "fastpld batch" in err and "4/4" in err


def test_early_stop_leaves_no_workers():
    it = batch.run(QUESTIONS * 3, workers=2, chunk_size=1)
    pid = int(next(it)["worker"].rsplit(":", 1)[1])
    it.close()  # shuts the pool down and joins its processes
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# ------------------------------------------------------------------------------------------
# Dask
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    with warnings.catch_warnings():
        # a loaded machine can make Dask remark on slow start-up; nothing to act on in a test
        warnings.filterwarnings("ignore", message="Creating scratch directories is taking", category=UserWarning)
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                           dashboard_address="127.0.0.1:0", env={"FASTPLD_NUM_THREADS": "1"})
        client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_dask_equals_alone(dask_client, alone):
    _check(batch.answer_many(QUESTIONS, client=dask_client, chunk_size=2), alone)
    recs = list(batch.run(QUESTIONS, client=dask_client, chunk_size=1, ordered=False))
    assert sorted(r["index"] for r in recs) == list(range(len(QUESTIONS)))
    _check(sorted(recs, key=lambda r: r["index"]), alone)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_dask_worker_killed_mid_batch(dask_client, alone):
    qs = QUESTIONS * 2
    recs, pid = _kill_first_worker(batch.run(qs, client=dask_client, chunk_size=1))
    assert [r["index"] for r in recs] == list(range(len(qs)))
    ref = alone + [dict(r, index=r["index"] + len(QUESTIONS), id=r["id"] + len(QUESTIONS)
                        if isinstance(r["id"], int) else r["id"]) for r in alone]
    assert [_strip(r) for r in recs] == ref
    # the nanny restarted the worker: the cluster is whole again for the next user
    dask_client.wait_for_workers(2, timeout=60)


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------
def test_cli_batch(tmp_path, capsys, alone):
    src = tmp_path / "questions.jsonl"
    lines = [json.dumps(q) for q in QUESTIONS[:4]] + ["", "{not json", json.dumps(QUESTIONS[-1])]
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "answers.jsonl"
    assert main(["batch", str(src), "-o", str(out), "--serial"]) == 3  # some questions failed
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [_strip(r) for r in recs[:4]] == alone[:4]
    assert recs[4]["error"].startswith("line 6: not valid JSON") and recs[4]["index"] == 4
    assert "JSON object" in recs[5]["error"] and len(recs) == 6
    err = capsys.readouterr().err
    assert "4 of 6 questions answered, 2 failed" in err
    ok = tmp_path / "ok.jsonl"
    ok.write_text("\n".join(json.dumps(q) for q in QUESTIONS[:3]))
    assert main(["batch", str(ok), "-o", str(out), "--workers", "2", "--as-completed", "--no-progress"]) == 0
    recs = sorted((json.loads(x) for x in out.read_text().splitlines()), key=lambda r: r["index"])
    assert [_strip(r) for r in recs] == alone[:3]


def test_cli_batch_on_a_dask_scheduler(tmp_path, dask_client, alone):
    src = tmp_path / "q.jsonl"
    src.write_text("\n".join(json.dumps(q) for q in QUESTIONS[:5]))
    out = tmp_path / "a.jsonl"
    assert main(["batch", str(src), "-o", str(out), "--scheduler", dask_client.scheduler.address,
                 "--chunk-size", "2"]) == 0
    assert [_strip(json.loads(x)) for x in out.read_text().splitlines()] == alone[:5]


def test_cli_batch_bad_usage(tmp_path, capsys):
    assert main(["batch", str(tmp_path / "missing.jsonl")]) == 2
    assert "questions: cannot read" in capsys.readouterr().err
    (tmp_path / "q.jsonl").write_text("")
    assert main(["batch", str(tmp_path / "q.jsonl"), "--workers", "0"]) == 2
    assert "workers" in capsys.readouterr().err


def test_cli_batch_without_dask(tmp_path, capsys, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "distributed" else real(name, *a))
    (tmp_path / "q.jsonl").write_text("")
    assert main(["batch", str(tmp_path / "q.jsonl"), "--scheduler", "tcp://127.0.0.1:1"]) == 1
    assert "fastpld[dask]" in capsys.readouterr().err


def test_records_make_a_dataframe(alone):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(alone)
    assert list(df.columns) == [c for c in batch.RECORD_FIELDS if c not in VOLATILE]
    assert math.isclose(df.loc[df.id == "user-1", "upper"].iloc[0], alone[1]["upper"])


def test_accuracy_fields_reach_compose():
    sched = [{"mechanism": {"name": "poisson_subsampled_gaussian", "sigma": 1.0, "sampling_probability": 0.02},
              "count": 200}]
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    for extra, kw in (({}, {}), ({"rel_error": 1e-4}, {"rel_error": 1e-4}), ({"eps_error": 0.05}, {"eps_error": 0.05})):
        rec = batch.answer({"ask": "epsilon", "delta": 1e-5, "schedule": sched, **extra})
        b = fastpld.compose(m, 200, **kw).epsilon(1e-5)
        assert rec["ok"] and (rec["lower"], rec["estimate"], rec["upper"]) == tuple(b)
