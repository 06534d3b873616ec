"""compose and queries from 8 threads give the same results as sequential runs.

Mechanism parameters are fresh per run (never seen by the module-level caches), so the
threaded run exercises the lazily filled caches (loss objects, moments, MGF grids) under
contention, for every available FFT backend.
"""
import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastpld
from fastpld import mechanisms

_salt = itertools.count()

EPS = np.array([0.0, 0.5, 1.0, 2.0, 4.0])
DELTAS = np.array([1e-3, 1e-5, 1e-7])


def _workloads(salt):
    # salt moves the parameters slightly so the sequential run starts with cold caches too
    s = 1.0 + salt * 1e-9
    return [
        (fastpld.PoissonSubsampledGaussian(1.0 * s, 0.01), 1000, dict(method="recursive")),
        (fastpld.PoissonSubsampledGaussian(1.0 * s, 0.01), 1000, dict(method="two_stage")),
        (fastpld.PoissonSubsampledGaussian(2.0 * s, 0.05), 200, dict()),
        (fastpld.Gaussian(2.0 * s), 50, dict(method="glw")),
        (fastpld.PureDP(0.1 * s), 300, dict()),
        (fastpld.PoissonSubsampledLaplace(1.0 * s, 0.02), 100, dict()),
        ([(fastpld.Gaussian(3.0 * s), 5), (fastpld.Laplace(2.0 * s), 40),
          (fastpld.PoissonSubsampledGaussian(1.0 * s, 0.01), 100)], None, dict()),
        (fastpld.RandomizedResponse(0.5 * s, 3), 64, dict(method="recursive", arity=4)),
    ]


def _run(task, backend):
    mech, count, kw = task
    pld = fastpld.compose(mech, count, backend=backend, **kw)
    d = pld.delta(EPS)
    e = pld.epsilon(DELTAS)
    return np.concatenate([d.lower, d.estimate, d.upper, e.lower, e.estimate, e.upper])


@pytest.mark.parametrize("backend", fastpld.available_backends())
def test_threads_match_sequential(backend):
    seq_tasks = _workloads(next(_salt))
    expected = [_run(t, backend) for t in seq_tasks]
    # same parameter values with cold caches: the loss objects (and their lazily computed
    # moments and MGF grids) are rebuilt by the threads themselves
    mechanisms._LOSS_CACHE.clear()
    jobs = [(i, t) for rep in range(3) for i, t in enumerate(seq_tasks)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [(i, pool.submit(_run, t, backend)) for i, t in jobs]
        for i, f in futures:
            got = f.result(timeout=120)  # hang detector, not a speed assertion
            np.testing.assert_allclose(got, expected[i], rtol=1e-15, atol=0)


def test_cache_is_shared_under_contention():
    """Concurrent first calls return one loss object per mechanism value."""
    mech = fastpld.PoissonSubsampledGaussian(1.2345 + next(_salt) * 1e-9, 0.03)
    with ThreadPoolExecutor(max_workers=8) as pool:
        losses = list(pool.map(lambda _: mech.privacy_losses()["remove"], range(32)))
        stds = list(pool.map(lambda loss: loss.std(), losses))
    assert all(x is losses[0] for x in losses)
    assert len(set(stds)) == 1 and stds[0] > 0


def test_queries_from_threads_match():
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 2000)
    grid = np.linspace(0.0, 5.0, 101)
    ref_d = pld.delta(grid)
    ref_e = pld.epsilon(np.geomspace(1e-9, 0.5, 60))
    with ThreadPoolExecutor(max_workers=8) as pool:
        ds = list(pool.map(lambda _: pld.delta(grid), range(16)))
        es = list(pool.map(lambda _: pld.epsilon(np.geomspace(1e-9, 0.5, 60)), range(16)))
    for d in ds:
        assert all(np.array_equal(a, b) for a, b in zip(d, ref_d))
    for e in es:
        assert all(np.array_equal(a, b) for a, b in zip(e, ref_e))


def _schedule(n, steps, salt):
    s = 1.0 + salt * 1e-9
    return [(fastpld.PoissonSubsampledGaussian(1.0 * s, float(q)), steps) for q in np.linspace(0.005, 0.02, n)]


@pytest.mark.parametrize("backend", fastpld.available_backends())
def test_directions_on_two_threads_equal_one_thread(backend):
    # asymmetric losses: the add direction runs on a worker thread, and with >= 32 parts its MGF
    # grids are computed there while the remove direction is planned; cold caches both times
    for n, steps in ((40, 20), (3, 300)):
        salt = next(_salt)
        one = fastpld.compose(_schedule(n, steps, salt), eps_error=0.1, delta_error=1e-8, backend=backend, threads=1)
        mechanisms._LOSS_CACHE.clear()
        two = fastpld.compose(_schedule(n, steps, salt), eps_error=0.1, delta_error=1e-8, backend=backend, threads=2)
        assert set(one.directions) == {"remove", "add"}
        for d in one.directions:
            a, b = one.directions[d], two.directions[d]
            assert a.method == b.method and a.certificate == b.certificate
            np.testing.assert_array_equal(a.pmf.probs, b.pmf.probs)
        for eps in (0.5, 2.0):
            assert one.delta(eps) == two.delta(eps)


def test_worker_error_reaches_the_caller():
    # the first direction runs on the worker: its refusal must surface as the same ValueError
    ev = _schedule(40, 20, next(_salt))
    with pytest.raises(ValueError, match="max_buckets"):
        fastpld.compose(ev, eps_error=0.1, delta_error=1e-8, max_buckets=2000, threads=2)
    with pytest.raises(ValueError, match="max_buckets"):
        fastpld.compose(ev, eps_error=0.1, delta_error=1e-8, max_buckets=2000, threads=1)


def test_shared_tasks_in_order_first_error_wins():
    """``_run_shared``: the results in the tasks' order whichever thread ran them, every task run, and the error
    of the first failing task (in that order) raised, on two threads as on one."""
    import threading
    import time
    from fastpld.composition.threads import _PARALLEL_MIN_US, _run_shared
    for threads, us in ((2, _PARALLEL_MIN_US), (1, _PARALLEL_MIN_US), (2, 0.0)):
        names = []

        def task(i, delay, fail=False):
            def run():
                time.sleep(delay)
                names.append(threading.current_thread().name)
                if fail:
                    raise ValueError(f"task {i}")
                return i * i
            return run
        assert _run_shared([task(i, 0.02 * (i % 2)) for i in range(5)], threads, us) == [0, 1, 4, 9, 16]
        assert len(names) == 5
        ran = []
        tasks = [task(0, 0.03), task(1, 0.0, fail=True), task(2, 0.0, fail=True), task(3, 0.0)]
        tasks = [(lambda t=t, j=j: (ran.append(j), t())[1]) for j, t in enumerate(tasks)]
        with pytest.raises(ValueError, match="task 1"):
            _run_shared(tasks, threads, us)
        # (shared out, every task runs; in turn, they stop at the first error)
        assert sorted(ran) == ([0, 1, 2, 3] if threads == 2 and us else [0, 1])


def test_shared_chains_equal_one_thread():
    """Leaves above _SHARED_LEAF_BUCKETS: the chains shared out over two threads give the one thread's answer
    bitwise (the threshold lowered so that a small composition takes that path)."""
    from fastpld.dominance import planner
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    fastpld.clear_caches()
    one = fastpld.compose(m, 2000, rel_error=1e-3, threads=1)
    old = planner._SHARED_LEAF_BUCKETS, planner._PARALLEL_LEAF_BUCKETS
    try:
        planner._SHARED_LEAF_BUCKETS = planner._PARALLEL_LEAF_BUCKETS = 1
        fastpld.clear_caches()
        two = fastpld.compose(m, 2000, rel_error=1e-3, threads=2)
    finally:
        planner._SHARED_LEAF_BUCKETS, planner._PARALLEL_LEAF_BUCKETS = old
    assert one.method == two.method and one.method.startswith("dominance")
    for d in one.directions:
        np.testing.assert_array_equal(one.directions[d].pmf.probs, two.directions[d].pmf.probs)
    assert one.epsilon(1e-5) == two.epsilon(1e-5)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, float("nan")])
def test_threads_validated(bad):
    with pytest.raises(ValueError, match="threads"):
        fastpld.compose(fastpld.Gaussian(1.0), 10, threads=bad)


def test_default_threads(monkeypatch):
    import os

    monkeypatch.delenv("FASTPLD_NUM_THREADS", raising=False)
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    assert fastpld.default_threads() == (2 if n > 1 else 1)


def _child_compose(q):
    ev = _schedule(40, 20, 0)
    pld = fastpld.compose(ev, eps_error=0.1, delta_error=1e-8, threads=2)
    q.put(pld.delta(1.0).upper)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_forked_child_does_not_hang():
    # the parent's worker pool is in use when the child is forked; the child's compose must not
    # send work to the (inherited, threadless) executor
    import multiprocessing as mp

    ev = _schedule(40, 20, 0)
    parent = fastpld.compose(ev, eps_error=0.1, delta_error=1e-8, threads=2).delta(1.0).upper
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_compose, args=(q,), daemon=True)
    p.start()
    p.join(120)  # hang detector, not a speed assertion
    if p.is_alive():
        p.kill()
    assert p.exitcode == 0
    assert q.get(timeout=5) == parent


def test_threads_from_the_environment(monkeypatch):
    monkeypatch.setenv("FASTPLD_NUM_THREADS", "1")
    assert fastpld.default_threads() == 1
    monkeypatch.setenv("FASTPLD_NUM_THREADS", "4")
    assert fastpld.default_threads() == 4
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("FASTPLD_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="FASTPLD_NUM_THREADS"):
            fastpld.compose(fastpld.Gaussian(1.0), 10)
