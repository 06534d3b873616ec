"""Grouped heterogeneous plans against the exact GDP formula, and bad schedules refused."""
import math

import numpy as np
import pytest

import fastpld
from oracles import gaussian_delta, gaussian_epsilon
from fastpld.composition import planner

EPS = np.array([0.0, 0.5, 1.0, 2.0, 3.0])


def _check(pld, mu):
    b = pld.delta(EPS)
    exact = gaussian_delta(EPS, mu)
    assert np.all(b.lower <= exact) and np.all(exact <= b.upper), (b, exact)
    for delta in (1e-3, 1e-6):
        e = pld.epsilon(delta)
        assert e.lower <= gaussian_epsilon(delta, mu) <= e.upper
    assert pld.eps_spent <= pld.eps_error


@pytest.mark.usefixtures("separate_gaussians")
@pytest.mark.parametrize("method", ["coupling", "recursive", "two_stage"])
def test_200_distinct_gaussians_count_one(method):
    sig = np.linspace(8.0, 40.0, 200)
    pld = fastpld.compose([(fastpld.Gaussian(float(s)), 1) for s in sig], method=method, eps_error=0.1)
    _check(pld, math.sqrt(np.sum(1 / sig**2)))
    if method != "two_stage":
        assert "blocks" in pld.method  # grouped, not one root with 200 inputs
    labels = [s.kind for s in pld.stages]
    assert labels.count("root") == 1 and any(k.startswith("block") for k in labels)


def test_20_distinct_gaussians_times_50():
    sig = np.linspace(6.0, 60.0, 20)
    pld = fastpld.compose([(fastpld.Gaussian(float(s)), 50) for s in sig])
    _check(pld, math.sqrt(np.sum(50 / sig**2)))


@pytest.mark.usefixtures("separate_gaussians")
@pytest.mark.parametrize("merge", [2, 3, 7])
def test_every_grouping_is_certified(merge):
    # forced grouping with mixed counts (chains below the blocks): still exact-GDP consistent
    sig = np.linspace(5.0, 30.0, 23)
    counts = [1 + (i * 7) % 13 for i in range(23)]
    events = [(fastpld.Gaussian(float(s)), c) for s, c in zip(sig, counts)]
    orig = planner._candidates
    try:
        planner._candidates = lambda method, parts, arity=None: ([("two_stage", None)], [merge])
        pld = fastpld.compose(events, eps_error=0.1, method="coupling")  # (the coupling planner's blocks)
    finally:
        planner._candidates = orig
    assert "blocks" in pld.method
    _check(pld, math.sqrt(sum(c / s**2 for s, c in zip(sig, counts))))


def test_heterogeneous_subsampled_matches_flat_plan():
    qs = np.linspace(0.01, 0.05, 12)
    events = [(fastpld.PoissonSubsampledGaussian(1.0, float(q)), 20) for q in qs]
    grouped = fastpld.compose(events)
    flat = fastpld.compose(events, method="glw")
    a, b = grouped.epsilon(1e-5), flat.epsilon(1e-5)
    assert a.lower <= b.upper and b.lower <= a.upper


@pytest.mark.parametrize("bad", [
    [],
    [(fastpld.Gaussian(1.0), 0)],
    [(fastpld.Gaussian(1.0), -3)],
    [(fastpld.Gaussian(1.0), 1.5)],
    [(fastpld.Gaussian(1.0),)],
    [("gaussian", 2)],
    [(fastpld.Gaussian(1.0), 2), (None, 1)],
])
def test_bad_schedules_refused(bad):
    with pytest.raises(ValueError):
        fastpld.compose(bad)


def test_a_degenerate_candidate_plan_is_skipped_not_the_composition_refused():
    """Three subsampled Gaussians, one of them composed once (from tools/robustness_sweep.py): the add direction
    borrowed the remove direction's recursive x256 plan, whose meshes for its own losses put a group at 5e-105, and the
    grid's reach check refused the whole composition ('the mechanism's epsilon ... is too large').  A reach refusal
    is a size limit now (``BucketLimitError``): the direction then ranks its own plans, and the planner takes the next
    candidate where one is degenerate; the coupling certificate answers, overlapping the dominance certificate's
    interval."""
    ev = [(fastpld.PoissonSubsampledGaussian(0.5220994599750354, 0.16252716370125472), 1074),
          (fastpld.PoissonSubsampledGaussian(2.618592647326738, 0.0005875688027907391), 1),
          (fastpld.PoissonSubsampledGaussian(6.681370058781485, 0.013685542758960422), 384)]
    for threads in (1, 2):
        c = fastpld.compose(ev, eps_error=0.01, method="coupling", threads=threads).epsilon(1e-5)
        assert c.lower <= c.upper <= c.lower + 0.05
    d = fastpld.compose(ev).epsilon(1e-5)
    assert d.lower <= c.upper and c.lower <= d.upper
    with pytest.raises(ValueError, match="beyond the grid"):  # (a loss no grid reaches is still refused, by name)
        fastpld.compose(fastpld.PureDP(1e300), 3, eps_error=0.01)


def test_an_inverted_predicted_window_is_not_a_degenerate_mesh():
    """Four subsampled Gaussians, one composed once (from tools/robustness_sweep.py, seed 35): the planner's
    Chernoff window of the add direction's root, from the summed MGF grids, had its lower quantile past the upper
    support (a width of -2,523), so its group's mesh was 2e-105 in every candidate, and the composition at
    eps_error 0.01 was refused blaming the mechanism's epsilon.  Such a window takes the parts' estimate now; the
    coupling certificate answers, overlapping the dominance certificate's interval."""
    ev = [(fastpld.PoissonSubsampledGaussian(4.217179966538297, 0.0022171358960567378), 18),
          (fastpld.PoissonSubsampledGaussian(0.5194545621907044, 0.007983329988504572), 4337),
          (fastpld.PoissonSubsampledGaussian(8.486884900099394, 0.014890669903169193), 506),
          (fastpld.PoissonSubsampledGaussian(7.393078116678355, 0.0005731755728364443), 1)]
    c = fastpld.compose(ev, eps_error=0.01, method="coupling").epsilon(1e-5)
    assert c.lower <= c.upper <= c.lower + 0.02
    d = fastpld.compose(ev, rel_error=1e-3).epsilon(1e-5)
    assert d.lower <= c.upper and c.lower <= d.upper
