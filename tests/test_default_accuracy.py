"""The accuracy said once: every entry point's default is compose's (rel_error 1e-3 by dominance,
eps_error 0.01 by the coupling certificate where dominance refuses)."""
import math

import pytest

import fastpld
from fastpld import _validation as V
from oracles import gaussian_epsilon

PSG = fastpld.PoissonSubsampledGaussian(1.0, 0.02)


def test_resolution_of_the_accuracy_arguments():
    assert V.accuracy(None, None) == (V.DEFAULT_REL_ERROR, V.DEFAULT_EPS_ERROR, True)
    assert V.accuracy(None, None, "glw") == (None, V.DEFAULT_EPS_ERROR, True)
    assert V.accuracy(1e-4, None) == (1e-4, None, False)
    assert V.accuracy(None, 0.05, "glw") == (None, 0.05, False)
    with pytest.raises(ValueError, match="not both"):
        V.accuracy(1e-3, 0.1)
    with pytest.raises(ValueError, match="rel_error"):
        V.accuracy(1e-3, None, "two_stage")
    for bad in (0.0, -1e-3, 1.0, math.nan):
        with pytest.raises(ValueError, match="rel_error"):
            fastpld.compose(PSG, 10, rel_error=bad)


def test_compose_default_is_the_relative_accuracy():
    d = fastpld.compose(PSG, 500)
    r = fastpld.compose(PSG, 500, rel_error=1e-3)
    assert d.method.startswith("dominance") and d.rel_error == 1e-3
    for delta in (1e-3, 1e-5, 1e-8):
        assert tuple(d.epsilon(delta)) == tuple(r.epsilon(delta))
        b = d.epsilon(delta)
        assert b.upper - b.lower <= 1e-3 * b.lower


def test_exact_gaussian_within_the_default_accuracy():
    sigma, k = 4.0, 300
    mu = math.sqrt(k) / sigma
    pld = fastpld.compose(fastpld.Gaussian(sigma), k)
    # (deltas well above delta_error 1e-10: near it the delta charges widen the interval further)
    for delta in (1e-3, 1e-6, 1e-8):
        b, exact = pld.epsilon(delta), gaussian_epsilon(delta, mu)
        assert b.lower <= exact <= b.upper and b.upper - b.lower <= 1e-3 * exact


def test_default_falls_back_to_the_coupling_where_dominance_refuses():
    # three subsampled Laplace mechanisms whose atoms share no lattice (PS(Laplace(25.2), 0.021) x 3,395,
    # PS(Laplace(15.79), 0.0033) x 2,154, PSL(8.18, 0.0052) x 606): the dominance certificate does not reach the
    # width asked (14x after five compositions, at 1e-3 and again at 1e-4: their atoms' sums drift off the lattices,
    # first order in the mesh); the default answers by the coupling certificate at the first rung of its ladder that
    # certifies.  (Fixed-size batches were this test's case until their atom's error became relative, subsampled
    # Laplaces until the leaves placed a loss's atoms exactly, a Poisson-subsampled randomized response over 3
    # categories until one loss's atoms of no common quantum were weighed as several losses', two subsampled
    # Laplaces until a missed relative accuracy was asked again finer: certified now)
    from fastpld.composition import api
    m = [(fastpld.PoissonSubsampled(fastpld.Laplace(25.2), 0.02055), 3395),
         (fastpld.PoissonSubsampled(fastpld.Laplace(15.79), 0.003323), 2154),
         (fastpld.PoissonSubsampledLaplace(8.18, 0.005247), 606)]
    k = None
    with pytest.raises(ValueError):
        fastpld.compose(m, k, rel_error=1e-3)
    pld = fastpld.compose(m, k)
    assert not pld.method.startswith("dominance")
    ladder = api._fallback_eps_errors(list(api._direction_parts(api._normalise_events(m, k)).items()), 1e-3)
    assert pld.eps_error in ladder
    ref = fastpld.compose(m, k, eps_error=pld.eps_error, method="coupling")
    assert tuple(pld.epsilon(1e-5)) == tuple(ref.epsilon(1e-5))
    # a coupling method asked without an accuracy: eps_error 0.01
    assert fastpld.compose(fastpld.Gaussian(5.0), 20, method="glw").eps_error == V.DEFAULT_EPS_ERROR


def test_entry_points_share_the_default():
    acc = fastpld.PrivacyAccountant(lookahead=0).compose(PSG, 500)
    assert tuple(acc.get_epsilon(1e-5)) == tuple(fastpld.compose(PSG, 500).epsilon(1e-5))
    restored = fastpld.PrivacyAccountant.from_json(acc.to_json())
    assert restored.eps_error is None and restored.rel_error is None
    assert tuple(restored.get_epsilon(1e-5)) == tuple(acc.get_epsilon(1e-5))
    from fastpld.plot import epsilon_vs_steps
    b = epsilon_vs_steps(PSG, [500], 1e-5)
    assert float(b.upper[0]) == fastpld.compose(PSG, 500).epsilon(1e-5).upper


def test_calibration_default_is_within_the_relative_accuracy():
    # the certified upper bound meets the target at sigma; 0.1% less noise does not
    s = fastpld.find_noise_multiplier(2.0, 1e-5, 0.02, 500)
    up = lambda sig: fastpld.compose(fastpld.PoissonSubsampledGaussian(sig, 0.02), 500,  # noqa: E731
                                     delta_error=1e-8).epsilon(1e-5).upper
    assert up(s) <= 2.0 < up(s / 1.001)
    # and the true epsilon (a finer certified interval) is not far below the target
    fine = fastpld.compose(fastpld.PoissonSubsampledGaussian(s / 1.002, 0.02), 500, rel_error=1e-4).epsilon(1e-5)
    assert fine.lower > 2.0


def test_views_of_a_dominance_answer_fall_back_to_coarser_coupling(monkeypatch):
    from fastpld._limits import BucketLimitError
    from fastpld.composition import api
    pld = fastpld.compose(PSG, 300)
    real = api.compose
    asked = []

    def refusing(*a, eps_error=None, **kw):  # the coupling refuses the composition's own eps_error
        asked.append(eps_error)
        if eps_error < 0.01:
            raise BucketLimitError("too many buckets", 1e9)
        return real(*a, eps_error=eps_error, **kw)

    monkeypatch.setattr(api, "compose", refusing)
    b = pld.renyi(2.0)  # (the Renyi view: a coupling composition; the hypothesis-testing views read both chains)
    assert asked == [pld.eps_error, 0.01]
    ref = real(PSG, 300, eps_error=0.01, delta_error=pld.delta_error, method="coupling").renyi(2.0)
    assert tuple(b) == tuple(ref) and b.lower <= b.upper
    assert pld.tpr(0.01).lower <= pld.tpr(0.01).upper and asked == [pld.eps_error, 0.01]


@pytest.mark.parametrize("mech,k", [(fastpld.RandomizedResponse(0.5, 4), 1000),
                                    (fastpld.PoissonSubsampled(fastpld.Laplace(1.0), 0.1), 1000),
                                    (fastpld.Gaussian(3.0), 1), (fastpld.Laplace(2.0), 10)],
                         ids=["rr-1000", "ps-laplace-1000", "gauss-1", "laplace-10"])
def test_dominance_answers_are_as_wide_as_asked_or_refused(mech, k):
    # every answer's width is checked: the last rescaled one used to be returned unchecked (0.5% and
    # 3.6% for the first two, asked 0.1%); thin-tail cells at few copies made the Gaussian's 1e-9
    # quantile 30x too wide; an erratic width (Laplace: epsilon(1e-3) near a flat stretch) must not
    # stop the rescaling early
    pld = fastpld.compose(mech, k, rel_error=1e-3)
    for delta in (1e-3, 1e-5, 1e-7):
        b = pld.epsilon(delta)
        assert b.upper - b.lower <= 1e-3 * b.lower * (1 + 1e-9), (delta, b)
    if isinstance(mech, fastpld.Gaussian):
        for delta in (1e-3, 1e-6, 1e-9):
            b = pld.epsilon(delta)
            assert b.lower <= gaussian_epsilon(delta, 1 / 3.0) <= b.upper


def test_a_badly_aligned_lattice_is_stepped_over_not_refined_past():
    # PSG(0.5, 0.01) x 1e4: at some meshes the dominated leaf's lowest cell (at the support end log(1 - q))
    # loses its balance, e^-3 of the mass over the copies, and the width jumps 60x; the next mesh 2^(1/8)
    # finer is fine.  The answer takes that one instead of meshes 8x finer (118,098-bucket nodes)
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(0.5, 0.01), 10_000, rel_error=1e-3)
    b = pld.epsilon(1e-5)
    assert b.upper - b.lower <= 1e-3 * b.lower
    assert max(s.buckets for d in pld.directions.values() for s in d.stages) <= 32_768


def test_a_built_in_mechanism_the_leaf_cannot_resolve_is_not_called_custom():
    # sigma 1e-3: the q-component's near-atoms escape the quadrature; the refusal says so (it blamed a
    # custom mechanism's cdf/pdf), and the default accuracy answers by the coupling certificate or says why not.
    # (Cells 30 wide: where the rules' proved truncation error is charged -- far above their masses there -- the
    # leaf's masses pass the window's check and the refusal names the leaves' mass error bounds instead)
    with pytest.raises(ValueError, match="near-atoms|the leaves' mass error bounds") as err:
        fastpld.compose(fastpld.PoissonSubsampledGaussian(1e-3, 0.01), 10, rel_error=1e-3)
    assert "custom" not in str(err.value)


def test_the_default_answers_at_k_1e7():
    # PSG(5, 1e-4) x 1e7 (epsilon ~0.21): the dominance chains' round-off did not fit delta_error 1e-10 at any
    # arity on the pilot's meshes (the default then answered by the coupling certificate); on the width model's
    # meshes it fits: certified within 0.1%, no warning, and the coupling certificate's interval overlaps it
    m = fastpld.PoissonSubsampledGaussian(5.0, 1e-4)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pld = fastpld.compose(m, 10_000_000)
        b = pld.epsilon(1e-5)
    assert b.upper - b.lower <= 1e-3 * b.lower and pld.delta_spent <= pld.delta_error
    c = fastpld.compose(m, 10_000_000, method="coupling", eps_error=1e-3 * b.lower / 2).epsilon(1e-5)
    assert c.lower <= b.upper and b.lower <= c.upper


# (0.5, 0.1): arities 64 and 256 did not fit while the dominated splits charged the atoms their rounding could not
# tell from a lattice point; on the exactly nested lattices they now read the default arity fits
@pytest.mark.parametrize("sigma,q,arities", [(0.5, 0.1, None),
                                             # (the width model's meshes fit the default arities here: the
                                             # pilot's did not)
                                             (5.0, 0.01, None)])
def test_larger_arities_certify_k_1e7_where_64_and_256_do_not_fit(sigma, q, arities):
    # the first node's round-off counts once per instance: arities ~1024 and ~4096 have 4x and 16x fewer
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(sigma, q), 10_000_000, rel_error=1e-3)
    assert pld.method.startswith("dominance(") and (arities is None
                                                    or pld.method in tuple(f"dominance(arity={a})" for a in arities))
    b = pld.epsilon(1e-5)
    assert b.upper - b.lower <= 1e-3 * b.lower and pld.delta_spent <= pld.delta_error
    # an independent certificate agrees: the coupling's interval at the same relative accuracy overlaps
    c = fastpld.compose(fastpld.PoissonSubsampledGaussian(sigma, q), 10_000_000,
                        eps_error=min(10.0, 1e-3 * b.lower / 2)).epsilon(1e-5)
    assert c.lower <= b.upper and b.lower <= c.upper


def test_an_arity_predicted_to_fail_is_skipped_but_never_the_last(monkeypatch):
    from fastpld.dominance import planner

    tried = []
    run = planner._compose_dominance

    def record(*a, **k):
        try:
            out = run(*a, **k)
        except Exception as exc:
            tried.append((a[5], type(exc).__name__))
            raise
        tried.append((a[5], "ok"))
        return out

    monkeypatch.setattr(planner, "_compose_dominance", record)
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    ref = fastpld.compose(m, 10_000, rel_error=1e-3)
    assert tried == [(125, "ok")]
    # every arity predicted to fail: each is skipped before its leaves, but the last one is composed
    tried.clear()
    monkeypatch.setattr(planner, "_DOOMED_FACTOR", 1e300)
    pld = fastpld.compose(m, 10_000, rel_error=1e-3)
    # (each of 256, 1024, 4096 as the arity within 0.75-1.25 of it whose plan does the least work)
    near = [planner._least_work_near(10_000, a) for a in (256, 1024, 4096)]
    assert tried == [(125, "_DoomedArity"), (near[0], "_DoomedArity"), (near[1], "_DoomedArity"), (near[2], "ok")]
    assert pld.method == f"dominance(arity={near[2]})"
    a, b = pld.epsilon(1e-5), ref.epsilon(1e-5)
    assert a.lower <= b.upper and b.lower <= a.upper and a.upper - a.lower <= 1e-3 * a.lower


def test_the_larger_arities_are_searched_only_when_needed(monkeypatch, spy):
    # the searches near 1024 and 4096 copies (~2,500 plans' work) took 2-3 ms of every new count's answer, which the
    # default arity serves: they run only when the arity before them has not certified
    from fastpld.dominance import arities, planner

    real = arities._least_work_near
    asked = spy(arities, "_least_work_near", lambda k, a: a)
    m = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    pld = fastpld.compose(m, 10_007, rel_error=1e-3)
    assert pld.method == f"dominance(arity={planner._least_work_arity(10_007)})"
    assert asked == []
    # where every arity is predicted to fail, each is found in turn, and the last one is composed
    monkeypatch.setattr(planner, "_DOOMED_FACTOR", 1e300)
    pld = fastpld.compose(m, 10_007, rel_error=1e-3)
    assert asked == list(planner._ARITIES)
    assert pld.method == f"dominance(arity={real(10_007, planner._ARITIES[-1])})"


def test_the_larger_arities_are_the_least_work_near_them():
    from fastpld.dominance import planner

    # k = 1e7 = 160 x 250^2: three convolving nodes and two re-discretisations, where 256 leaves digits 152, 150
    # and 128 (six nodes and a leaf of 128 copies)
    assert planner._least_work_near(10_000_000, 256) == 250
    assert planner._plan_work(10_000_000, 250) < planner._plan_work(10_000_000, 256)
    for k in (10_000, 123_457, 10_000_000, 2 ** 24, 10 ** 9):
        for a in (256, 1024, 4096):
            b = planner._least_work_near(k, a)
            assert 0.75 * a <= b <= 1.25 * a or (b == a and k < 1.25 * a)
            assert planner._plan_work(k, b) <= planner._plan_work(k, a)
    # (a schedule of several parts keeps the list's arities)
    parts = [("remove", [(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 10), (fastpld.Gaussian(2.0), 5)])]
    assert planner._nearby_arity(parts, 256) == 256
    # composed with it: k = 1e7 of a subsampled Gaussian whose first node needs arity 256's round-off
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(0.5, 1e-4), 10_000_000, rel_error=1e-3)
    assert pld.method == "dominance(arity=250)"
    b = pld.epsilon(1e-5)
    assert b.upper - b.lower <= 1e-3 * b.lower and pld.delta_spent <= pld.delta_error


def test_the_first_node_floor_predicts_the_k_1e7_refusal():
    # PSG(0.5, 1e-4) x 1e7 at delta_error 1e-10: arity 100's first node was charged 1.78e-10 (refused after its
    # leaf and first node, 0.14 s), arity 256's 4.05e-11 (certified); the floor tells them apart before any leaf
    from fastpld.composition.api import _direction_parts, _normalise_events
    from fastpld.dominance import planner

    dp = _direction_parts(_normalise_events(fastpld.PoissonSubsampledGaussian(0.5, 1e-4), 10_000_000))
    parts = dp["remove"]
    floors = {}
    for a in (100, 256):
        plan = planner._build_plan(parts, "recursive", a, direct_max=planner._DIRECT_COPIES * a ** 2)
        h1 = planner.leaf_mesh(parts, plan, 0.006, planner._model_scale(list(dp.items())))
        floors[a] = planner._first_node_floor(parts, plan, h1)
        # (the planner's own: the loss's window by the compiled kernel, the same prediction to round-off)
        native = planner._first_node_floor(parts, plan, h1, native=True)
        assert native == pytest.approx(floors[a], rel=1e-9)
    assert planner._DOOMED_FACTOR * floors[100] > 1e-10 > planner._DOOMED_FACTOR * floors[256], floors


def test_auto_with_eps_error_takes_dominance_where_coupling_is_dear():
    import numpy as np
    from oracles import pure_dp_delta

    # pure DP x 1000 at eps_error 0.01: a coupling plan predicted at ~40 ms (measured ~100 ms), the
    # dominance certificate ~3 ms and exact here (the atoms lie on its lattices)
    pld = fastpld.compose(fastpld.PureDP(0.1), 1000, eps_error=0.01)
    assert pld.method.startswith("dominance")
    eps = np.array([5.0, 10.0, 19.0, 30.0])
    b = pld.delta(eps)
    exact = np.array([pure_dp_delta(e, 0.1, 1000) for e in eps])
    assert np.all(b.lower <= exact * (1 + 1e-12)) and np.all(exact * (1 - 1e-12) <= b.upper)
    e = pld.epsilon(1e-6)
    assert e.upper - e.lower <= 2 * 0.01
    # a composition whose coupling plan is predicted cheap keeps it
    assert not fastpld.compose(fastpld.Gaussian(1.0), 1, eps_error=0.1).method.startswith("dominance")
    # and method="coupling" is the coupling plans only
    assert not fastpld.compose(fastpld.PureDP(0.1), 1000, eps_error=0.01, method="coupling").method.startswith(
        "dominance")


def test_auto_with_eps_error_falls_back_to_coupling(monkeypatch):
    import fastpld.dominance as dom
    from fastpld.composition.budget import _BudgetError

    def refuse(*a, **k):
        raise _BudgetError("refused by the test")

    monkeypatch.setattr(dom, "compose_dominance", refuse)
    fastpld.clear_caches()
    pld = fastpld.compose(fastpld.PureDP(0.1), 1000, eps_error=0.01)
    assert not pld.method.startswith("dominance") and pld.eps_spent <= 0.01


def test_default_fallback_meets_the_width_at_small_epsilons():
    # two Poisson-subsampled pure DP mechanisms at epsilon ~0.0027 (atoms 1e-5 apart: refused by dominance at the
    # default accuracy); rel_error 1e-3 allows 1e-3 x 0.01 there.  The fallback's eps_error had a floor of 1e-4: the
    # interval was 1.9e-4 wide (6.9% of epsilon); its first rung is now rel_error x max(guess, 0.01) / 4
    from fastpld.composition import api
    mix = [(fastpld.PoissonSubsampled(fastpld.PureDP(0.318332), 6.17967e-05), 3132),
           (fastpld.PoissonSubsampled(fastpld.PureDP(0.453731), 1.91725e-05), 6891)]
    ladder = api._fallback_eps_errors(list(api._direction_parts(api._normalise_events(mix, None)).items()), 1e-3)
    assert ladder[0] == pytest.approx(2.5e-6) and ladder[1:] == [1e-4, 0.01, 0.1]
    pld = fastpld.compose(mix)
    assert not pld.method.startswith("dominance") and pld.eps_error == ladder[0]
    r = pld.epsilon(1e-5)
    assert r.lower < 0.01 and r.upper - r.lower <= 1e-3 * 0.01
    # (two certificates: the dominance one, asked explicitly -- and asked again finer -- must meet it)
    d = fastpld.compose(mix, rel_error=1e-3).epsilon(1e-5)
    assert d.lower <= r.upper and r.lower <= d.upper


def test_the_default_asks_a_missed_width_again_finer_before_a_coarse_rung():
    """PSG(0.296, 1.66e-4) x 39 at delta 5.8e-4 (from a random calibration): the dominance certificate missed the
    width asked 1.85-fold after its rescalings, the coupling rungs within 0.1% of epsilon needed FFTs past 2^20
    buckets, and the default answered at eps_error 0.01 -- 1.8% of epsilon wide where 0.1% is promised.  The
    dominance certificate asked ten times finer comes before the coarser rungs now, and answers within it."""
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(0.29639357328457766, 0.0001659902662441039), 39)
    b = pld.epsilon(0.0005769069549652286)
    assert pld.method.startswith("dominance")
    assert b.upper - b.lower <= 1e-3 * b.lower
    ref = fastpld.compose(fastpld.PoissonSubsampledGaussian(0.29639357328457766, 0.0001659902662441039), 39,
                          eps_error=0.01, method="coupling").epsilon(0.0005769069549652286)
    assert ref.lower <= b.upper and b.lower <= ref.upper
