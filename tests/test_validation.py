"""Every bad input at the public boundary is refused with a ValueError naming the parameter."""
import math

import numpy as np
import pytest
from scipy.stats import norm

import fastpld as F

NAN, INF = math.nan, math.inf
G = F.Gaussian(1.0)


def _custom_cdf(**kw):
    args = dict(cdf=norm.cdf, log_mgf=lambda s: s * s / 2, mean=0.0, std=1.0)
    args.update(kw)
    return F.CustomCDF(**args)


def _bad_positive(name):
    return [0, -1, -0.0, NAN, INF, -INF, "1", None, True, np.bool_(True), 1j, [1.0], np.array([1.0, 2.0])]


def _bad_probability():
    return [-0.1, 1.1, -1e-300, 1 + 1e-12, NAN, INF, "0.5", None, True, 0.5j]


MECHANISM_CASES = (
    [("sigma", lambda v=v: F.Gaussian(v)) for v in _bad_positive("sigma")]
    + [("sensitivity", lambda v=v: F.Gaussian(1.0, sensitivity=v)) for v in (0, -2, NAN, INF)]
    + [("scale", lambda v=v: F.Laplace(v)) for v in _bad_positive("scale")]
    + [("sensitivity", lambda v=v: F.Laplace(1.0, sensitivity=v)) for v in (0, NAN)]
    + [("sigma", lambda v=v: F.PoissonSubsampledGaussian(v, 0.1)) for v in (0, -1, NAN, INF)]
    + [("sampling_probability", lambda v=v: F.PoissonSubsampledGaussian(1.0, v)) for v in _bad_probability()]
    + [("neighboring", lambda v=v: F.PoissonSubsampledGaussian(1.0, 0.1, neighboring=v))
       for v in ("both", None, ["add"], 1)]
    + [("scale", lambda v=v: F.PoissonSubsampledLaplace(v, 0.1)) for v in (0, -1, NAN, INF)]
    + [("sampling_probability", lambda v=v: F.PoissonSubsampledLaplace(1.0, v)) for v in _bad_probability()]
    + [("neighboring", lambda: F.PoissonSubsampledLaplace(1.0, 0.1, neighboring="x"))]
    + [("epsilon", lambda v=v: F.PureDP(v)) for v in (-1, -1e-300, NAN, INF, "1", None, True)]
    + [("epsilon", lambda v=v: F.RandomizedResponse(v)) for v in (-1, NAN, INF)]
    + [("num_categories", lambda v=v: F.RandomizedResponse(1.0, v)) for v in (1, 0, -3, 2.5, True, "3", None, NAN)]
    + [("epsilon", lambda v=v: F.ApproxDP(v, 1e-5)) for v in (-1, NAN, INF)]
    + [("delta", lambda v=v: F.ApproxDP(1.0, v)) for v in (-0.1, 1.0, 1.5, NAN, INF, None, "0.1")]
    # CustomPMF: negative / NaN / wrong-sum probabilities, bad values, bad shapes, bad p_inf
    + [("probabilities", lambda: F.CustomPMF([1.0, -1.0], [1.2, -0.2])),
       ("probabilities", lambda: F.CustomPMF([1.0, -1.0], [NAN, 1.0])),
       ("probabilities", lambda: F.CustomPMF([1.0, -1.0], [0.5, 0.6])),
       ("probabilities", lambda: F.CustomPMF([1.0, -1.0], [0.2, 0.2])),
       ("probabilities", lambda: F.CustomPMF([1.0, -1.0], [INF, 0.0])),
       ("probabilities", lambda: F.CustomPMF([1.0, -1.0], [0.5, 0.5], p_inf=0.3)),
       ("probabilities", lambda: F.CustomPMF([1.0], ["a"])),
       ("values", lambda: F.CustomPMF([NAN, 1.0], [0.5, 0.5])),
       ("values", lambda: F.CustomPMF([INF, 1.0], [0.5, 0.5])),
       ("values", lambda: F.CustomPMF(["a", 1.0], [0.5, 0.5])),
       ("values", lambda: F.CustomPMF([], [])),
       ("values", lambda: F.CustomPMF([1.0, 2.0], [1.0])),
       ("values", lambda: F.CustomPMF(None, [1.0])),
       ("p_inf", lambda: F.CustomPMF([1.0], [1.0], p_inf=-0.1)),
       ("p_inf", lambda: F.CustomPMF([1.0], [0.0], p_inf=1.0)),
       ("p_inf", lambda: F.CustomPMF([1.0], [1.0], p_inf=NAN))]
    # CustomCDF: non-callables and bad numbers
    + [("cdf", lambda: _custom_cdf(cdf=3.0)),
       ("cdf", lambda: _custom_cdf(cdf=None)),
       ("log_mgf", lambda: _custom_cdf(log_mgf="x")),
       ("sf", lambda: _custom_cdf(sf=1.0)),
       ("pdf", lambda: _custom_cdf(pdf=[1.0])),
       ("mean", lambda: _custom_cdf(mean=NAN)),
       ("mean", lambda: _custom_cdf(mean=INF)),
       ("mean", lambda: _custom_cdf(mean="0")),
       ("std", lambda: _custom_cdf(std=-1.0)),
       ("std", lambda: _custom_cdf(std=NAN)),
       ("support", lambda: _custom_cdf(support=(1.0, 0.0))),
       ("support", lambda: _custom_cdf(support=(NAN, 1.0))),
       ("support", lambda: _custom_cdf(support=(0.0,))),
       ("support", lambda: _custom_cdf(support="ab")),
       ("support", lambda: _custom_cdf(support=None)),
       ("atoms", lambda: _custom_cdf(atoms=(NAN,))),
       ("atoms", lambda: _custom_cdf(atoms=("a",))),
       ("atoms", lambda: _custom_cdf(atoms=3.0)),
       ("p_inf", lambda: _custom_cdf(p_inf=1.0)),
       ("p_inf", lambda: _custom_cdf(p_inf=-1e-3)),
       ("cdf_rel_error", lambda: _custom_cdf(cdf_rel_error=0.0)),
       ("cdf_rel_error", lambda: _custom_cdf(cdf_rel_error=NAN)),
       ("cdf_rel_error", lambda: _custom_cdf(cdf_rel_error=0.5))]
)


@pytest.mark.parametrize("name,make", MECHANISM_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(MECHANISM_CASES)])
def test_mechanism_rejects(name, make):
    with pytest.raises(ValueError, match=name):
        make()


COMPOSE_CASES = (
    [("count", lambda v=v: F.compose(G, v)) for v in (0, -1, 1.5, NAN, INF, True, np.bool_(False), "3", None, 1j,
                                                        [3], np.array([1, 2]), -(10**30))]
    + [("count", lambda: F.compose([(G, 2)], 3))]
    + [("mechanism", lambda v=v: F.compose(v, 3)) for v in (3, "gaussian", 1.0, G.__class__)]
    + [("mechanism", lambda: F.compose(None))]
    + [("events", lambda: F.compose([])),
       ("events", lambda: F.compose(())),
       ("events", lambda: F.compose([G])),
       ("events", lambda: F.compose([(G,)])),
       ("events", lambda: F.compose([(G, 1, 2)])),
       ("events", lambda: F.compose([(3, 1)])),
       ("events", lambda: F.compose([(1, G)])),
       ("events", lambda: F.compose([(G, 1), "x"])),
       ("count", lambda: F.compose([(G, 0)])),
       ("count", lambda: F.compose([(G, 2), (G, -1)])),
       ("count", lambda: F.compose([(G, 1.5)])),
       ("count", lambda: F.compose([(G, True)]))]
    + [("eps_error", lambda v=v: F.compose(G, 3, eps_error=v)) for v in (0, -0.1, NAN, INF, 11, "0.1", True)]  # (None: the default)
    + [("delta_error", lambda v=v: F.compose(G, 3, delta_error=v))
       for v in (0, -1e-10, 0.1, 1.0, NAN, INF, 1e-300, "1e-10", None, True)]
    + [("method", lambda v=v: F.compose(G, 3, method=v)) for v in ("fast", "GLW ", None, 3, ["glw"])]
    + [("backend", lambda v=v: F.compose(G, 3, backend=v)) for v in ("cuda", "", 3, ["numpy"])]
    + [("arity", lambda v=v: F.compose(G, 100, method="recursive", arity=v)) for v in (1, 0, -2, 2.5, True, "4", NAN)]
    + [("arity", lambda: F.compose(G, 100, method="glw", arity=4)),
       ("arity", lambda: F.compose(G, 100, method="two_stage", arity=4))]
    + [("max_buckets", lambda v=v: F.compose(G, 3, max_buckets=v)) for v in (0, -1, 2.5, True, None, "100", NAN)]
    + [("backend", lambda v=v: F.set_backend(v)) for v in ("cuda", 3, None)]
)


@pytest.mark.parametrize("name,call", COMPOSE_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(COMPOSE_CASES)])
def test_compose_rejects(name, call):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.fixture(scope="module")
def pld():
    return F.compose(F.PoissonSubsampledGaussian(1.0, 0.1), 20)


BAD_EPS = [NAN, -1.0, -1e-300, INF, -INF, "a", None, True, 1j, [0.0, NAN], [0.5, -1.0], np.array([[1.0, INF]]),
           np.float32("nan"), np.array(NAN)]
BAD_DELTA = [0.0, -0.0, -1e-5, 1.5, 1 + 1e-12, NAN, INF, "x", None, True, 1e-5j, [1e-5, 0.0], np.array([1e-5, NAN]),
             np.array(0.0)]


@pytest.mark.parametrize("value", BAD_EPS, ids=repr)
def test_delta_query_rejects(pld, value):
    with pytest.raises(ValueError, match="epsilon"):
        pld.delta(value)


@pytest.mark.parametrize("value", BAD_DELTA, ids=repr)
def test_epsilon_query_rejects(pld, value):
    with pytest.raises(ValueError, match="delta"):
        pld.epsilon(value)


def test_epsilon_query_too_small_names_delta(pld):
    with pytest.raises(ValueError, match="delta"):
        pld.epsilon(1e-300)


NUMERIC_FORMS = [lambda x: x, np.float64, np.float32, np.array, lambda x: np.array(x, dtype=np.longdouble),
                 lambda x: np.array([x])[0]]


@pytest.mark.parametrize("form", range(len(NUMERIC_FORMS)))
def test_numpy_scalars_and_0d_arrays_accepted(form):
    f = NUMERIC_FORMS[form]
    g = F.Gaussian(f(2.0), sensitivity=f(1.0))
    assert g.sigma == 2.0 and type(g.sigma) is float
    s = F.PoissonSubsampledGaussian(f(2.0), f(0.5))
    assert s.sampling_probability == 0.5 and type(s.sampling_probability) is float
    assert F.Laplace(f(2.0)).scale == 2.0
    assert F.PureDP(f(0.5)).epsilon == 0.5
    assert F.ApproxDP(f(0.5), f(0.25)).delta == 0.25
    ref = F.compose(F.Gaussian(2.0), 5)
    ref = F.compose(F.Gaussian(2.0), 5, eps_error=float(f(0.1)), delta_error=float(f(1e-10)))
    pld = F.compose(g, np.int64(5), eps_error=f(0.1), delta_error=f(1e-10))
    assert pld.delta(f(1.0)) == ref.delta(1.0)
    assert pld.epsilon(f(0.25)) == ref.epsilon(0.25)
    assert isinstance(pld.delta(f(1.0)).upper, float)


def test_integer_like_counts_accepted():
    ref = F.compose(G, 7)
    for c in (np.int64(7), np.int32(7), np.array(7), 7.0, np.uint8(7)):
        assert F.compose(G, c).delta(1.0) == ref.delta(1.0)
    assert F.compose([(G, np.int64(7))]).delta(1.0) == ref.delta(1.0)


def test_arrays_of_queries_accepted(pld):
    b = pld.delta([0.0, 1.0, 2.0])
    assert b.upper.shape == (3,)
    b = pld.epsilon(np.array([[1e-3, 1e-5]]))
    assert b.upper.shape == (1, 2)


def test_custom_pmf_refuses_a_loss_that_is_no_pairs():
    # the loss log(Q/P) under Q has E[exp(-L)] = P(Q > 0) <= 1: more is no mechanism's curve
    for values, probs, p_inf in [([-1.0, 1.0], [0.9, 0.1], 0.0), ([0.5, -0.5], [0.6, 0.4 - 1e-6], 1e-6),
                                 ([-800.0, 0.0], [1e-300, 1.0], 0.0), ([1.0, -1.0], [0.7, 0.3], 0.0)]:
        with pytest.raises(ValueError, match=r"values and probabilities are no pair's privacy loss"):
            F.CustomPMF(values, probs, p_inf=p_inf)
    # valid pairs' losses, rounded to floats, pass: randomized response's (E[exp(-L)] = 1 exactly) and a random pair's
    e = math.log(3.0)
    F.CustomPMF([e, -e], [0.75, 0.25])
    rng = np.random.default_rng(5)
    for _ in range(50):
        q, p = rng.random(7), rng.random(7)
        q, p = q / q.sum(), p / p.sum()
        F.CustomPMF(np.log(q / p), q)
    F.CustomPMF([1e300, -700.0], [1.0, 1e-305])  # (e^700 1e-305 = 0.1: as far below 0 as mass can go)


def test_custom_pmf_reads_back_as_given():
    # stored as given: the normalised masses normalised again moved an ulp, and the mechanism read back was another
    from fastpld._serialize import mechanism_from_dict, mechanism_to_dict

    rng = np.random.default_rng(6)
    for _ in range(200):
        q, p = rng.random(5), rng.random(5)
        q, p = q / q.sum(), p / p.sum()
        m = F.CustomPMF(np.log(q / p), q * (1 - 1e-7), p_inf=1e-7)
        assert mechanism_from_dict(mechanism_to_dict(m)) == m
