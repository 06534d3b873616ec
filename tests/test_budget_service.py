"""The example budget service (examples/budget_service.py): a bounded load test on loopback.

Concurrent tenants and clients, a crash (SIGKILL) and restart of the server in the middle: no accepted
step is lost, none is spent twice, and no tenant goes over its certified budget.  Bounded: a fixed
number of requests, each client with a deadline.
"""
import http.client
import importlib.util
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

import fastpld

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "budget_service.py")
DELTA = 1e-5
BUDGET = 1.0
REQUESTS = 10  # per client in the crash test


def _load_example():
    spec = importlib.util.spec_from_file_location("budget_service", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _call(url, method="GET", body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _k_star(sigma):
    """Most uses of Gaussian(sigma) whose certified upper epsilon at DELTA stays within BUDGET."""
    acc = fastpld.PrivacyAccountant()
    k = 0
    while True:
        acc.compose(fastpld.Gaussian(sigma))
        if acc.get_epsilon(DELTA).upper > BUDGET:
            return k
        k += 1


@pytest.fixture
def inprocess(tmp_path):
    mod = _load_example()
    server = mod.make_server(str(tmp_path / "b.sqlite"))
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        th.join(timeout=10)


def test_concurrent_steps_of_one_tenant_spend_exactly_the_budget(inprocess):
    sigma = 16.0
    assert _call(inprocess + "/tenants", "POST", {"tenant": "t", "epsilon": BUDGET, "delta": DELTA})[0] == 201
    k_star = _k_star(sigma)
    assert 10 <= k_star <= 60
    results = []
    lock = threading.Lock()

    def client():
        for _ in range(k_star // 4 + 4):
            st, ans = _call(inprocess + "/tenants/t/steps", "POST",
                            {"mechanism": {"type": "Gaussian", "sigma": sigma}, "count": 1})
            with lock:
                results.append((st, ans))

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    accepted = [a for s, a in results if s == 200]
    refused = [a for s, a in results if s == 409]
    assert len(accepted) == k_star  # not one more (double spend), not one less (lost budget)
    assert len(refused) == len(results) - k_star > 0
    assert all(a["epsilon_if_accepted"]["upper"] > BUDGET for a in refused)
    summary = _call(inprocess + "/tenants/t")[1]
    assert summary["steps"] == k_star and summary["epsilon"]["upper"] <= BUDGET
    ref = fastpld.PrivacyAccountant().compose(fastpld.Gaussian(sigma), k_star)
    assert summary["epsilon"]["upper"] == ref.get_epsilon(DELTA).upper


def test_queries_and_bad_requests(inprocess):
    u = inprocess
    assert _call(u + "/tenants", "POST", {"tenant": "q", "epsilon": 2.0, "delta": 1e-6})[0] == 201
    assert _call(u + "/tenants", "POST", {"tenant": "q", "epsilon": 2.0, "delta": 1e-6})[0] == 409
    body = {"mechanism": {"type": "PoissonSubsampledGaussian", "sigma": 1.0, "sampling_probability": 0.01},
            "count": 100, "request_id": "r1"}
    st, a = _call(u + "/tenants/q/steps", "POST", body)
    assert st == 200 and a["accepted"] and a["steps"] == 100
    st, again = _call(u + "/tenants/q/steps", "POST", body)  # a retry is answered, not spent again
    assert st == 200 and again["replayed"] and again["steps"] == 100
    assert _call(u + "/tenants/q")[1]["steps"] == 100
    ref = fastpld.PrivacyAccountant().compose(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 100)
    st, e = _call(u + "/tenants/q/epsilon?delta=1e-5")
    assert st == 200 and e["epsilon"]["upper"] == ref.get_epsilon(1e-5).upper
    st, d = _call(u + "/tenants/q/delta?epsilon=1.0")
    assert st == 200 and d["delta"]["upper"] == ref.get_delta(1.0).upper
    for url, method, b, code, needle in [
        (u + "/tenants/nobody", "GET", None, 404, "nobody"),
        (u + "/tenants/q/epsilon", "GET", None, 400, "delta"),
        (u + "/tenants/q/epsilon?delta=2", "GET", None, 400, "delta"),
        (u + "/tenants/q/delta?epsilon=x", "GET", None, 400, "epsilon"),
        (u + "/tenants", "POST", {"tenant": "z", "epsilon": -1, "delta": 1e-5}, 400, "epsilon"),
        (u + "/tenants", "POST", {"tenant": "z", "epsilon": 1, "delta": 1.5}, 400, "delta"),
        (u + "/tenants", "POST", {"epsilon": 1, "delta": 1e-5}, 400, "tenant"),
        (u + "/tenants/q/steps", "POST", {"mechanism": {"type": "Gaussian", "sigma": -1}}, 400, "sigma"),
        (u + "/tenants/q/steps", "POST", {"mechanism": {"type": "Nope"}}, 400, "mechanism"),
        (u + "/tenants/q/steps", "POST", {"mechanism": {"type": "Gaussian", "sigma": 1}, "count": 0}, 400, "count"),
        (u + "/nowhere", "GET", None, 404, "route"),
    ]:
        st, ans = _call(url, method, b)
        assert st == code and needle in ans["error"], (url, b, st, ans)


def _start(db):
    # the server imports the very fastpld this test compares with (answers are compared bit for bit)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(fastpld.__file__)))
    env = dict(os.environ, PYTHONPATH=pkg_root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, SCRIPT, "--db", db, "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=env)
    line = p.stdout.readline()
    assert line.startswith("listening on http://127.0.0.1:"), line
    return p, line.split()[-1]


def _stop(p):
    p.kill()  # SIGKILL: a crash, no clean shutdown, requests in flight
    p.wait(timeout=30)
    p.stdout.close()


def test_load_with_a_crash_and_restart_in_the_middle(tmp_path):
    if os.name != "posix":
        pytest.skip("kills the server process with SIGKILL")
    db = str(tmp_path / "budgets.sqlite")
    proc, url = _start(db)
    state = {"url": url}
    sigmas = {"a": 12.0, "b": 16.0, "c": 20.0}  # budgets of ~8, 15 and 23 steps: every tenant runs out
    try:
        for t in sigmas:
            assert _call(url + "/tenants", "POST", {"tenant": t, "epsilon": BUDGET, "delta": DELTA})[0] == 201
        outcomes = {}  # request_id -> (tenant, count, final status)
        lock = threading.Lock()
        done = [0]
        deadline = time.monotonic() + 120
        errors = []

        def client(tenant, seed):
            rng = random.Random(seed)
            try:
                for _ in range(REQUESTS):
                    rid = str(uuid.UUID(int=rng.getrandbits(128)))
                    count = rng.choice((1, 1, 2))
                    body = {"mechanism": {"type": "Gaussian", "sigma": sigmas[tenant]}, "count": count,
                            "request_id": rid}
                    while True:  # retried with the same request_id across the crash
                        if time.monotonic() > deadline:
                            raise TimeoutError("client deadline")
                        try:
                            st, ans = _call(state["url"] + f"/tenants/{tenant}/steps", "POST", body, timeout=10)
                            break
                        except (urllib.error.URLError, OSError, http.client.HTTPException, json.JSONDecodeError):
                            # the server died before or while answering: the outcome is unknown, so
                            # ask again with the same request_id (answered from the store if it was decided)
                            time.sleep(0.05)
                    assert st in (200, 409), ans
                    with lock:
                        outcomes[rid] = (tenant, count, st)
                        done[0] += 1
            except Exception as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=client, args=(t, 100 * i + j)) for i, t in enumerate(sigmas)
                   for j in range(3)]
        for th in threads:
            th.start()
        while done[0] < 30 and any(th.is_alive() for th in threads) and time.monotonic() < deadline:
            time.sleep(0.01)
        _stop(proc)
        proc, state["url"] = _start(db)
        for th in threads:
            th.join(timeout=max(1.0, deadline - time.monotonic()))
        assert not errors, errors
        assert not any(th.is_alive() for th in threads)
        assert len(outcomes) == REQUESTS * len(threads)
        for t, sigma in sigmas.items():
            accepted = sum(c for tt, c, st in outcomes.values() if tt == t and st == 200)
            refused = sum(1 for tt, c, st in outcomes.values() if tt == t and st == 409)
            s = _call(state["url"] + f"/tenants/{t}")[1]
            assert s["steps"] == accepted, (t, s, accepted)  # every accepted step stored, nothing extra
            assert s["epsilon"]["upper"] <= BUDGET
            assert refused > 0  # the budget was reached
            # the stored history answers as a fresh accountant of the same history
            ref = fastpld.PrivacyAccountant().compose(fastpld.Gaussian(sigma), accepted)
            assert s["epsilon"]["upper"] == ref.get_epsilon(DELTA).upper
            assert accepted <= _k_star(sigma)
    finally:
        _stop(proc)
