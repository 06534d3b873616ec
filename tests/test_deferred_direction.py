"""The reversed direction's chains deferred (docs/dominance.md, "The reversed direction, deferred"): a
Poisson-subsampled mechanism's add direction, bounded by the remove direction's upper curve reversed, runs only
where that bound does not settle an answer; the answers are the same whatever ran first, certified against
dp_accounting's pessimistic and optimistic PLDs, and its width is checked (and its meshes refined) when it runs."""
import pickle
import threading

import numpy as np
import pytest

import fastpld
from fastpld.dominance import planner


def _eager(monkeypatch, mech, k, **kw):
    """The same composition with the reversed direction's chains run at once (same meshes)."""
    with monkeypatch.context() as m:
        m.setattr(planner, "_DEFER_REVERSED", False)
        return fastpld.compose(mech, k, method="dominance", **kw)


@pytest.mark.parametrize("sigma, q, k", [(5.0, 0.1, 1000), (1.0, 0.02, 300)])
def test_the_reversed_direction_runs_only_where_its_reversal_bound_does_not_settle_the_answer(monkeypatch, sigma,
                                                                                             q, k):
    m = fastpld.PoissonSubsampledGaussian(sigma, q)
    fastpld.clear_caches()
    pld = fastpld.compose(m, k, method="dominance", rel_error=1e-3)
    eager = _eager(monkeypatch, m, k, rel_error=1e-3)
    assert pld.directions.deferred == {"add"} and eager.directions.deferred == set()
    assert not pld.directions.ready("add") and not pld.lower_directions.ready("add")
    assert pld.method == eager.method and pld.stages == eager.stages  # (read without running the add direction)
    # epsilon(delta) where the reversal bound covers the add direction: the remove direction's bounds, bitwise the
    # eager composition's (below 1e-7 the remove chain's relative rounding, times e^eps, leaves it uncovered)
    deltas = np.array([1e-3, 1e-5, 1.0])
    a, b = pld.epsilon(deltas), eager.epsilon(deltas)
    assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)
    assert not pld.directions.ready("add")
    # delta near epsilon 0, where the directions meet: the add direction runs (once), on the eager one's meshes
    eps = np.linspace(0.0, 3.0, 31)
    a, b = pld.delta(eps), eager.delta(eps)
    assert pld.directions.ready("add")
    assert np.array_equal(pld.directions["add"].pmf.probs, eager.directions["add"].pmf.probs)
    # the lower bounds are the eager ones; the upper ones too, but where the eager composition also bounded the
    # remove direction by the add direction's curve reversed (near epsilon 0: a hair tighter)
    assert np.array_equal(a.lower, b.lower)
    assert np.all(a.upper >= b.upper) and np.all(a.upper <= b.upper * (1 + 1e-6))
    assert np.array_equal(a.upper[eps >= 1.0], b.upper[eps >= 1.0])
    c = pld.epsilon(deltas)  # (and nothing read before changes once it has run)
    a = eager.epsilon(deltas)
    assert np.array_equal(c.lower, a.lower) and np.array_equal(c.upper, a.upper)


def _answers(pld, first):
    ds = np.array([1e-2, 1e-5, 1e-9])
    es = np.array([0.0, 0.05, 0.5, 2.0])
    if first == "delta":
        b = pld.delta(es)
        a = pld.epsilon(ds)
    else:
        a = pld.epsilon(ds)
        b = pld.delta(es)
    return np.concatenate([a.lower, a.upper, b.lower, b.upper])


def test_the_answers_do_not_depend_on_what_ran_first():
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    out = []
    for first in ("epsilon", "delta"):
        fastpld.clear_caches()
        out.append(_answers(fastpld.compose(m, 300, rel_error=1e-3), first))
    assert np.array_equal(out[0], out[1])
    # four threads asking at once: one runs the deferred chains, the others wait for them
    fastpld.clear_caches()
    pld = fastpld.compose(m, 300, rel_error=1e-3)
    got = [None] * 4

    def ask(i):
        got[i] = _answers(pld, "delta" if i % 2 else "epsilon")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g in got:
        assert np.array_equal(g, out[0])
    # pickled (every chain run first): the same answers, the same rules
    back = pickle.loads(pickle.dumps(pld))
    assert back.directions.deferred == {"add"}
    assert np.array_equal(_answers(back, "epsilon"), out[0])


def test_a_deferred_direction_whose_width_misses_is_composed_again_on_finer_meshes(monkeypatch):
    # the remove direction's width passes the planner's check; the add direction's is measured when it runs, and
    # a miss (here the first measurement, made 5x the width asked) composes both its chains again on finer meshes,
    # until the width is within the asked
    from fastpld.dominance.result import DominancePLD

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    seen = []
    real = DominancePLD._deferred_excess

    def record(self, name, d_up, lo_fn, tables=None):
        x = real(self, name, d_up, lo_fn, tables)
        seen.append((d_up.stages[0].mesh, x if seen else 5.0))
        return seen[-1][1]

    monkeypatch.setattr(DominancePLD, "_deferred_excess", record)
    fastpld.clear_caches()
    pld = fastpld.compose(m, 300, rel_error=1e-3)
    assert pld.directions.deferred == {"add"} and not seen
    fine = pld.directions["add"]
    assert len(seen) == 2 and seen[-1][1] <= 1.0
    # (the h^2 law: sqrt(0.81 / 5) of the mesh, rounded down to a power of 2^(1/8))
    assert fine.stages[0].mesh == seen[-1][0] and 0.36 <= seen[1][0] / seen[0][0] <= 0.41
    assert pld.lower_directions["add"].stages[0].mesh == fine.stages[0].mesh  # (both chains on the finer meshes)
    # the answers: within the width asked, and containing the eager composition's own (certified) estimate
    eager = _eager(monkeypatch, m, 300, rel_error=1e-3)
    deltas = np.array([1e-3, 1e-5, 1e-7, 1e-9])
    a, b = pld.epsilon(deltas), eager.epsilon(deltas)
    # (at 1e-9 the delta charges widen both: what delta_error buys, not the meshes)
    w = (a.upper - a.lower)[:3]
    assert np.all(w <= 1e-3 * a.lower[:3]) and np.all(w <= 1.2 * (b.upper - b.lower)[:3])
    assert np.all(a.lower <= b.upper) and np.all(b.lower <= a.upper)


def test_a_deferred_directions_tables_are_built_once(monkeypatch):
    # its width check builds query tables for the results it reads; the answer keeps those for the results it
    # keeps, and builds none again on its first read of the deferred direction
    from fastpld.dominance import result

    built = []
    real = result._Query

    class Counted(real):
        def __init__(self, pmf, native=False):
            built.append(id(pmf))
            super().__init__(pmf, native)

    monkeypatch.setattr(result, "_Query", Counted)
    fastpld.clear_caches()
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.02), 300, method="dominance", rel_error=1e-3)
    assert pld.directions.deferred == {"add"} and not built
    pld.delta(np.linspace(0.0, 1.0, 11))  # (near epsilon 0: the add direction runs, both its chains)
    pld.epsilon(np.array([1e-3, 1e-9]))
    up, lo = pld.directions["add"], pld.lower_directions["add"]
    assert built.count(id(up.pmf)) == 1 and built.count(id(lo.pmf)) == 1
    assert isinstance(pld._q["add"], Counted) and isinstance(pld._ql["add"], Counted)


def test_a_deferred_direction_whose_charges_do_not_fit_retries_at_larger_arities(monkeypatch):
    from fastpld.composition.budget import _BudgetError
    from fastpld.dominance import chains

    m = fastpld.PoissonSubsampledGaussian(1.0, 0.02)
    eager = _eager(monkeypatch, m, 300, rel_error=1e-3)
    run = chains._run_chain
    refused, refused_arities = [], set()

    def refuse(*args):
        upper, arity, memo = args[6], args[7], args[8]
        if upper and memo is None and arity in refused_arities:
            refused.append(arity)
            raise _BudgetError("refused (test)")
        return run(*args)

    monkeypatch.setattr(chains, "_run_chain", refuse)
    fastpld.clear_caches()
    pld = fastpld.compose(m, 300, method="dominance", rel_error=1e-3)
    a0 = int(pld.method.split("=")[1].rstrip(")"))
    assert not pld.directions.ready("add")
    refused_arities.add(a0)
    eps = np.linspace(0.0, 2.0, 21)
    a, b = pld.delta(eps), eager.delta(eps)
    assert refused == [a0] and pld.directions["add"].method != f"dominance(arity={a0})"
    assert np.all(a.lower <= b.upper) and np.all(b.lower <= a.upper)


@pytest.mark.parametrize("sigma, q, k", [(2.0, 0.05, 300), (0.8, 0.1, 100)])
def test_deferred_answers_lie_between_dp_accountings_optimistic_and_pessimistic_curves(sigma, q, k):
    pld_mod = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    m = fastpld.PoissonSubsampledGaussian(sigma, q)
    fastpld.clear_caches()
    pld = fastpld.compose(m, k, rel_error=1e-3)
    assert pld.directions.deferred == {"add"}
    eps = np.array([0.0, 0.02, 0.2, 1.0, 2.0])
    got = pld.delta(eps)
    assert pld.directions.ready("add")  # (epsilon 0 needs it)
    for pessimistic in (True, False):
        one = pld_mod.from_gaussian_mechanism(sigma, value_discretization_interval=1e-4, sampling_prob=q,
                                              pessimistic_estimate=pessimistic)
        ref = one.self_compose(k)
        d = np.array([ref.get_delta_for_epsilon(float(e)) for e in eps])
        if pessimistic:
            assert np.all(got.lower <= d + 1e-12)
        else:
            assert np.all(d <= got.upper + 1e-12)


def test_a_kept_answer_counts_and_freezes_a_deferred_direction_without_running_it():
    # the cache sizes a kept answer without running its deferred chains (counted as the largest direction run),
    # and a deferred chain that runs later makes its arrays read-only as the others are
    from fastpld import _answers

    fastpld.clear_caches()
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.02), 300, rel_error=1e-3)
    n = _answers._freeze(pld)
    assert not pld.directions.ready("add") and not pld.lower_directions.ready("add")
    remove = pld.directions["remove"].pmf.probs
    assert n >= 4 * remove.nbytes and not remove.flags.writeable
    pld.delta(0.0)
    assert pld.directions.ready("add") and not pld.directions["add"].pmf.probs.flags.writeable
    assert not pld.lower_directions["add"].pmf.probs.flags.writeable
