"""What fastpld keeps between calls (fastpld.resources) and the composed-answer cache (fastpld._answers).

Kept answers are bitwise the fresh ones; concurrent identical questions compose once; the store
stays within its bound; clear_caches frees every thread's workspace; bad limits are refused.
No timing is asserted.
"""
import math
import threading

import numpy as np
import pytest

import fastpld
from fastpld import _answers, resources
from fastpld.composition import api

try:
    from fastpld import _native
except ImportError:  # (no compiled core, or FASTPLD_PURE_PYTHON=1: no FFT plans to keep)
    _native = None
needs_native = pytest.mark.skipif(_native is None, reason="compiled core unavailable")


@pytest.fixture
def answers():
    """The answer cache on (tests/conftest.py turns it off for every other test), a roomy bound."""
    resources.set_cache_limit(256 << 20, results=None)
    fastpld.clear_caches()
    yield
    fastpld.clear_caches()


@pytest.fixture
def count_compositions(monkeypatch):
    calls = []
    lock = threading.Lock()
    real = api._compose_parts

    def spy(*a, **k):
        with lock:
            calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(api, "_compose_parts", spy)
    return calls


def _arrays(pld):
    out = []
    for name, d in sorted(pld.directions.items()):
        out += [np.asarray(d.pmf.probs), np.array([d.pmf.offset, d.pmf.mesh, d.p_inf, d.eps_spent, d.delta_spent])]
    return out


def _same(a, b):
    xa, xb = _arrays(a), _arrays(b)
    assert len(xa) == len(xb)
    for x, y in zip(xa, xb):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
    for d in (1e-3, 1e-5, 1e-7):
        assert tuple(a.epsilon(d)) == tuple(b.epsilon(d))
    for e in (0.0, 0.5, 2.0):
        assert tuple(a.delta(e)) == tuple(b.delta(e))
    grid = np.array([1e-6, 1e-4, 1e-2])
    for x, y in zip(a.epsilon(grid), b.epsilon(grid)):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


QUESTIONS = [
    lambda: (fastpld.PoissonSubsampledGaussian(1.0, 0.02), 60),
    lambda: (fastpld.Laplace(2.0), 12),
    lambda: (fastpld.Gaussian(3.0), 40),
    lambda: ([(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 30), (fastpld.Laplace(5.0), 4)], None),
    lambda: (fastpld.RandomizedResponse(0.5, 3), 20),
    lambda: (fastpld.CustomPMF([0.3, -0.3], [0.5744425168116589, 0.4255574831883411]), 25),
]


@pytest.mark.parametrize("make", QUESTIONS)
def test_kept_answer_is_bitwise_the_fresh_one(answers, make):
    mech, k = make()
    first = fastpld.compose(mech, k)
    hits = _answers.stats()["hits"]
    again = fastpld.compose(mech, k)
    assert _answers.stats()["hits"] == hits + 1
    assert again is not first and again.directions is first.directions  # a copy sharing the kept arrays
    resources.set_cache_limit(results=0)  # fresh compositions, same loss objects
    fresh = fastpld.compose(mech, k)
    assert not isinstance(fresh, _answers.KeptAnswer)
    _same(again, fresh)
    _same(first, fresh)
    fastpld.clear_caches()  # new loss objects too
    _same(fastpld.compose(mech, k), fresh)


def test_kept_answers_are_read_only_and_carry_the_callers_events(answers):
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    a = fastpld.compose(m, 40)
    b = fastpld.compose([(m, 15), (m, 25)])  # the same grouped question
    assert b.directions is a.directions and b.events == ((m, 15), (m, 25)) and a.events == ((m, 40),)
    for d in a.directions.values():
        with pytest.raises(ValueError):
            d.pmf.probs[0] = 1.0
    before = a.eps_error
    b.eps_error = 123.0  # rebinding an attribute of one copy does not reach the other
    assert a.eps_error == before != 123.0


def test_equal_custom_pmfs_are_one_part():
    v, p = [0.2, -0.2], [0.549833997312478, 0.45016600268752216]
    a, b = fastpld.CustomPMF(v, p), fastpld.CustomPMF(v, p)
    assert a == b and hash(a) == hash(b)
    _same(fastpld.compose([(a, 5), (b, 5)]), fastpld.compose(a, 10))


def test_mechanisms_are_keys_by_value():
    made = [lambda: fastpld.Gaussian(1.0), lambda: fastpld.Laplace(1.0, 2.0),
            lambda: fastpld.PoissonSubsampledGaussian(1.0, 0.1), lambda: fastpld.PoissonSubsampledLaplace(1.0, 0.1),
            lambda: fastpld.PureDP(1.0), lambda: fastpld.RandomizedResponse(1.0, 4), lambda: fastpld.ApproxDP(1.0, 1e-6),
            lambda: fastpld.CustomPMF([0.1, -0.1], [0.52497918747894, 0.47502081252106])]
    for f in made:
        x, y = f(), f()
        assert x == y and hash(x) == hash(y) and {x: 1}[y] == 1
    assert fastpld.PoissonSubsampledGaussian(1.0, 0.1) != fastpld.PoissonSubsampledGaussian(1.0, 0.1, neighboring="remove")
    assert fastpld.Gaussian(1) == fastpld.Gaussian(1.0) and type(fastpld.Gaussian(1).sigma) is float


def test_custom_cdf_is_keyed_by_identity(answers, count_compositions):
    from scipy.stats import norm

    def make():
        mu = 0.5  # the privacy loss of the Gaussian mechanism with sigma = 2: N(mu^2/2, mu^2)
        return fastpld.CustomCDF(lambda t: norm.cdf(t, mu * mu / 2, mu), lambda s: s * mu * mu / 2 + s * s * mu * mu / 2,
                                 mu * mu / 2, mu, sf=lambda t: norm.sf(t, mu * mu / 2, mu))

    a, b = make(), make()
    assert a != b
    ra = fastpld.compose(a, 10)
    n = len(count_compositions)  # (1, or 2 where the default accuracy's dominance attempt was refused)
    fastpld.compose(a, 10)
    assert len(count_compositions) == n  # a twice, composed once
    rb = fastpld.compose(b, 10)
    assert len(count_compositions) == 2 * n  # b once
    _same(ra, rb)


def test_concurrent_identical_questions_compose_once(answers, count_compositions):
    m = fastpld.PoissonSubsampledGaussian(0.9, 0.03)
    n = 8
    barrier = threading.Barrier(n)
    out, errors = [None] * n, []

    def ask(i):
        try:
            barrier.wait()
            out[i] = fastpld.compose(m, 300)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    ts = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(count_compositions) == 1
    assert len({id(r) for r in out}) == n and all(r.directions is out[0].directions for r in out)
    resources.set_cache_limit(results=0)
    _same(out[0], fastpld.compose(m, 300))


def test_concurrent_failing_question_fails_for_everyone(answers):
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    n = 4
    barrier = threading.Barrier(n)
    errors = []

    def ask():
        barrier.wait()
        try:
            fastpld.compose(m, 1000, max_buckets=64)
        except ValueError as exc:
            errors.append(exc)

    ts = [threading.Thread(target=ask) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(errors) == n and all("max_buckets" in str(e) for e in errors)
    assert not _answers._inflight


def _recount():
    with resources._lock:
        return sum(nb for _, nb in resources._entries.values())


def test_bound_is_respected_after_a_threaded_workload():
    limit = 3 << 20
    resources.set_cache_limit(limit, results=None)
    fastpld.clear_caches()
    keys = [(s, q, k) for s in (0.8, 1.0, 1.3) for q in (0.01, 0.05) for k in (50, 400)]
    errors = []

    def client(j):
        try:
            for i in range(len(keys)):
                s, q, k = keys[(i + j) % len(keys)]
                fastpld.compose(fastpld.PoissonSubsampledGaussian(s, q), k).epsilon(1e-5)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    ts = [threading.Thread(target=client, args=(j,)) for j in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    info = fastpld.cache_info()
    assert 0 < info["bytes"] <= limit and info["bytes"] == _recount()
    assert sum(info["by_kind"].values()) == info["bytes"]
    assert info["by_kind"].get("plans", 0) > 0 or _native is None  # (the compiled core's FFT plans)
    # a tighter bound evicts at once; the answers' own bound holds within it
    resources.set_cache_limit(1 << 20, results=200_000)
    info = fastpld.cache_info()
    assert info["bytes"] <= 1 << 20 and info["by_kind"].get("results", 0) <= 200_000
    fastpld.clear_caches()


def test_limit_zero_keeps_nothing_and_answers_the_same():
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.05)
    ref = fastpld.compose(m, 100)
    resources.set_cache_limit(0, results=None)
    fastpld.clear_caches()
    got = fastpld.compose(m, 100)
    assert fastpld.cache_info()["bytes"] == 0 and fastpld.cache_info()["entries"] == 0
    _same(got, ref)


@needs_native
def test_clear_caches_frees_every_threads_workspace():
    resources.set_cache_limit(64 << 20)
    fastpld.clear_caches()
    if "native" not in fastpld.available_backends():
        pytest.skip("the native backend is not built")
    ready, cleared, done = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def other():
        be = fastpld._fft.resolve("native")
        be.rfft(np.ones(100), 4096)  # a plan in this thread's own workspace
        seen["ws"] = resources.workspace()
        seen["plan"] = _native._plan(4096, np.float64, True)
        fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.02), 50, backend="native")  # a slot's workspace
        ready.set()
        cleared.wait(30)
        seen["after"] = _native._plan(4096, np.float64, True)
        done.set()

    t = threading.Thread(target=other)
    t.start()
    ready.wait(30)
    assert len(seen["ws"]) > 0 and fastpld.cache_info()["by_kind"]["plans"] > 0
    fastpld.clear_caches()
    assert len(seen["ws"]) == 0 and fastpld.cache_info()["bytes"] == 0
    cleared.set()
    done.wait(30)
    t.join()
    assert seen["after"] is not seen["plan"]  # rebuilt after the clear


@needs_native
def test_clear_caches_can_keep_the_plans(answers):
    if "native" not in fastpld.available_backends():
        pytest.skip("the native backend is not built")
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.05)
    ref = fastpld.compose(m, 100, backend="native")
    plan = _native._plan(4096, np.float64, True)
    kinds = fastpld.cache_info()["by_kind"]
    assert kinds["plans"] > 0 and kinds["results"] > 0 and kinds["losses"] > 0
    fastpld.clear_caches(keep_plans=True)
    info = fastpld.cache_info()
    assert info["by_kind"]["plans"] == kinds["plans"] and info["bytes"] == kinds["plans"]
    assert _native._plan(4096, np.float64, True) is plan  # (kept)
    got = fastpld.compose(m, 100, backend="native")
    assert got is not ref  # (the answer was not kept: composed again, the same)
    _same(got, ref)
    fastpld.clear_caches()
    assert fastpld.cache_info()["bytes"] == 0


def test_the_arity_choices_are_kept_as_plans_are():
    # a count's arity search is a plan choice: kept by clear_caches(keep_plans=True), as the FFT plans; a full clear
    # drops it, so that a timed run after one pays for it as a new count's first answer does
    from fastpld.dominance import arities

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.05)
    fastpld.clear_caches()
    assert arities._least_work_arity.cache_info().currsize == 0
    fastpld.compose(m, 12_345)
    assert arities._least_work_arity.cache_info().currsize == 1
    fastpld.clear_caches(keep_plans=True)
    assert arities._least_work_arity.cache_info().currsize == 1
    fastpld.clear_caches()
    assert arities._least_work_arity.cache_info().currsize == 0


def test_thread_limit_bounds_concurrent_compositions(monkeypatch):
    active, peak = [0], [0]
    lock = threading.Lock()
    real = api._compose_parts

    def spy(*a, **k):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return real(*a, **k)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(api, "_compose_parts", spy)
    fastpld.set_thread_limit(1)
    try:
        assert fastpld.thread_limit() == 1
        res = [None] * 4

        def ask(i):
            res[i] = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.02), 100 + i)

        ts = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert peak[0] == 1 and all(r is not None for r in res)
    finally:
        fastpld.set_thread_limit(None)
    assert fastpld.thread_limit() >= 1


@pytest.mark.parametrize("bad", [-1, 1.5, "many", True, None.__class__, float("nan")])
def test_bad_cache_limits_are_refused(bad):
    with pytest.raises(ValueError, match="nbytes"):
        fastpld.set_cache_limit(bad)
    with pytest.raises(ValueError, match="results"):
        fastpld.set_cache_limit(results=bad)


def test_bad_environment_and_thread_limits_are_refused(monkeypatch):
    monkeypatch.setenv("FASTPLD_CACHE_BYTES", "lots")
    resources.set_cache_limit.__globals__["_state"]["limit"] = None
    with pytest.raises(ValueError, match="FASTPLD_CACHE_BYTES"):
        fastpld.cache_limit()
    monkeypatch.setenv("FASTPLD_CACHE_BYTES", "32e6")
    assert fastpld.cache_limit() == 32_000_000
    resources.set_cache_limit(None)
    assert fastpld.cache_limit() == 32_000_000
    for bad in (0, -2, 1.0, "2", True):
        with pytest.raises(ValueError, match="n must be"):
            fastpld.set_thread_limit(bad)
    monkeypatch.setenv("FASTPLD_MAX_THREADS", "0")
    with pytest.raises(ValueError, match="FASTPLD_MAX_THREADS"):
        fastpld.set_thread_limit(None)
    monkeypatch.setenv("FASTPLD_MAX_THREADS", "3")
    fastpld.set_thread_limit(None)
    assert fastpld.thread_limit() == 3
    monkeypatch.delenv("FASTPLD_MAX_THREADS")
    fastpld.set_thread_limit(None)
    monkeypatch.delenv("FASTPLD_CACHE_BYTES")
    resources.set_cache_limit(None)
    assert fastpld.cache_limit() == resources.DEFAULT_CACHE_BYTES


def test_scalar_queries_of_a_kept_answer_are_the_fresh_ones(answers):
    m = fastpld.PoissonSubsampledGaussian(1.2, 0.02)
    kept = fastpld.compose(m, 80)
    kept = fastpld.compose(m, 80)
    assert isinstance(kept, _answers._KeptMixin)
    resources.set_cache_limit(results=0)
    fresh = fastpld.compose(m, 80)
    for d in [1e-2, 1e-5, 1e-8, 1.0]:
        for _ in range(2):  # computed, then remembered
            assert tuple(kept.epsilon(d)) == tuple(fresh.epsilon(d))
    for e in [0.0, 0.3, 4.0]:
        for _ in range(2):
            assert tuple(kept.delta(e)) == tuple(fresh.delta(e))
    with pytest.raises(ValueError):
        kept.epsilon(0.0)
    assert all(math.isfinite(x) for x in kept.epsilon(np.float64(1e-5)))


def test_an_evicted_loss_still_in_use_is_not_built_again(allocation_builds):
    # a composition's FFT plans and tables can push its own loss objects out of the bounded store; asked
    # for again (the answer's certified sides read them), they come back as they are instead of being
    # built again (random allocation's take seconds); once unused they go
    import gc

    builds = allocation_builds
    m = fastpld.RandomAllocation(fastpld.PureDP(0.5), 3)
    fastpld.clear_caches()
    held = m.privacy_losses()
    assert len(builds) == 1
    resources.set_cache_limit(0)  # (evicts everything)
    try:
        assert fastpld.cache_info()["entries"] == 0
        again = m.privacy_losses()
        assert len(builds) == 1 and all(again[d] is held[d] for d in ("add", "remove"))
        del held, again
        gc.collect()
        m.privacy_losses()
        assert len(builds) == 2  # (nothing held them: built anew)
    finally:
        resources.set_cache_limit(None)
        fastpld.clear_caches()


def test_many_distinct_mechanisms_are_cached_in_linear_time(spy):
    # the weak references that revive an evicted loss are purged of dead ones as they grow; where every value is
    # alive (one composition of thousands of distinct mechanisms) the purge is not run again at every new value:
    # 10,000 distinct Gaussians took 2.4 s, 49 million revivals
    from fastpld.mechanisms import cache
    fastpld.clear_caches()
    revived = spy(cache, "_revive", lambda shadow: None)
    n = 5000
    held = [fastpld.Gaussian(20.0 + 1e-3 * i).privacy_losses() for i in range(n)]
    assert len(revived) < 4 * n, len(revived)
    del held
    fastpld.clear_caches()


def test_a_kept_answer_pickles_as_its_own_class():
    # the cache hands out answers of a class made at run time (KeptDominancePLD), which pickle cannot find by name:
    # they pickle as the answer's own class, without the remembered queries (conftest keeps no answers: made here)
    import pickle

    from fastpld import _answers
    from fastpld.dominance.result import DominancePLD

    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.05), 200, rel_error=1e-3)
    _answers._freeze(pld)
    assert type(pld).__name__ == "KeptDominancePLD"
    e = pld.epsilon(1e-5)  # (remembered)
    copy = pickle.loads(pickle.dumps(pld))
    assert type(copy) is DominancePLD and "_memo" not in copy.__dict__
    assert copy.epsilon(1e-5) == e
    eps = np.array([0.0, 0.5, 2.0])
    a, b = copy.delta(eps), pld.delta(eps)
    assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)
