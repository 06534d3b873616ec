"""The arrays' memory pool (``fastpld._pool``, ``csrc/fastpld_pool.c``): numpy's allocator while fastpld composes.

It must hand out memory numpy can use as its own (contents as written, zeros where asked, resized in place or
moved with the contents), keep no more freed bytes than its limit, give them all back on a full clear, stay the
calling thread's only while it composes, and change no answer."""
import os
import threading

import numpy as np
import pytest

import fastpld
from fastpld import resources

pool = resources._pool
needs_pool = pytest.mark.skipif(pool is None, reason="the compiled pool is not built (or FASTPLD_PURE_PYTHON=1)")
try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # pragma: no cover - numpy < 2
    from numpy.core.multiarray import get_handler_name


@needs_pool
def test_arrays_made_while_composing_come_from_the_pool_and_others_do_not():
    before = get_handler_name()
    with resources.compute_slot():
        assert get_handler_name() == "fastpld_pool"
        a = np.ones(100_000)
        with resources.compute_slot():  # (re-entrant: the inner one changes nothing)
            b = np.ones(10)
        assert get_handler_name() == "fastpld_pool"
    assert get_handler_name() == before
    assert get_handler_name(a) == "fastpld_pool" and get_handler_name(b) == "fastpld_pool"
    assert get_handler_name(np.ones(100_000)) == before
    # another thread composing does not make this one's arrays the pool's
    seen = []
    inside, leave = threading.Event(), threading.Event()

    def worker():
        with resources.compute_slot():
            seen.append(get_handler_name())
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    try:
        assert get_handler_name(np.ones(50_000)) == before
    finally:
        leave.set()
        t.join()
    assert seen == ["fastpld_pool"]


@needs_pool
@pytest.mark.parametrize("n", [0, 1, 3, 2047, 2048, 100_000, 1_000_003])
def test_pooled_memory_behaves_as_numpys(n):
    rng = np.random.default_rng(n)
    with resources.compute_slot():
        for _ in range(3):  # (the second and third rounds reuse the blocks the first freed: dirty ones)
            x = rng.random(n)
            y = x.copy()
            np.testing.assert_array_equal(x, y)
            z = np.zeros(n)  # (calloc: zeros even in a reused block)
            assert not z.any()
            ld = np.zeros(n, dtype=np.longdouble)  # (16-byte elements: aligned as malloc's)
            assert ld.ctypes.data % 16 == 0 and not ld.any()
            r = x.copy()
            r.resize(2 * n + 5, refcheck=False)  # (realloc: the contents kept, the rest zeros)
            np.testing.assert_array_equal(r[:n], x)
            assert not r[n:].any()
            m = max(n // 3, 1)
            r.resize(m, refcheck=False)  # (shrunk: in place or moved, the first entries kept)
            np.testing.assert_array_equal(r[: min(n, m)], x[: min(n, m)])
            del x, y, z, ld, r


@needs_pool
def test_the_pool_keeps_at_most_its_limit_and_a_full_clear_empties_it():
    old = resources.cache_limit()
    try:
        fastpld.set_cache_limit(4 << 20)  # (the pool keeps a quarter: 1 MiB)
        with resources.compute_slot():
            arrays = [np.empty(300_000) for _ in range(10)]  # (2.4 MB each)
        del arrays
        assert fastpld.cache_info()["pool_bytes"] <= 1 << 20  # (ten blocks past the limit: freed, or one kept)
        with resources.compute_slot():
            small = [np.empty(20_000) for _ in range(100)]  # (160 kB each)
        del small
        assert 0 < fastpld.cache_info()["pool_bytes"] <= 1 << 20
        fastpld.clear_caches(keep_plans=True)  # (kept: scratch memory, as the plans' buffers)
        assert fastpld.cache_info()["pool_bytes"] > 0
        fastpld.clear_caches()
        assert fastpld.cache_info()["pool_bytes"] == 0
        fastpld.set_cache_limit(0)  # (nothing kept at all)
        with resources.compute_slot():
            a = np.empty(50_000)
        del a
        assert fastpld.cache_info()["pool_bytes"] == 0
    finally:
        fastpld.set_cache_limit(old)


@needs_pool
def test_answers_are_the_same_with_and_without_the_pool(monkeypatch):
    mech = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    fastpld.clear_caches()
    a = fastpld.compose(mech, 300, rel_error=1e-3)
    ea, da = a.epsilon(1e-6), a.delta(1.0)
    monkeypatch.setattr(resources, "_pool", None)
    fastpld.clear_caches()
    b = fastpld.compose(mech, 300, rel_error=1e-3)
    assert (ea, da) == (b.epsilon(1e-6), b.delta(1.0))


@needs_pool
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_a_forked_child_composes_while_a_parent_thread_held_the_pool():
    # a thread of the parent allocating from the pool in a loop while the parent forks: the child's pool lock is
    # made afresh (pthread_atfork), so the child composes instead of waiting forever on a lock no thread holds
    stop = threading.Event()

    def churn():
        with resources.compute_slot():
            while not stop.is_set():
                np.empty(5000)

    t = threading.Thread(target=churn)
    t.start()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                with resources.compute_slot():
                    x = np.ones(40_000)
                    del x
                pld = fastpld.compose(fastpld.Gaussian(2.0), 10, rel_error=1e-2)
                code = 0 if pld.epsilon(1e-5).upper > 0 else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        stop.set()
        t.join()
