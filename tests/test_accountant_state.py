"""PrivacyAccountant persistence: state_dict, JSON and pickle round-trips answer bit for bit; bad states refused."""
import copy
import json
import pickle

import numpy as np
import pytest
from scipy.stats import norm

import fastpld

KW = dict(eps_error=0.1, delta_error=1e-9)

ALL = [fastpld.Gaussian(3.0, sensitivity=0.5), fastpld.Laplace(20.0), fastpld.PoissonSubsampledGaussian(1.1, 0.02),
       fastpld.PoissonSubsampledLaplace(5.0, 0.05, neighboring="remove"), fastpld.PureDP(0.01),
       fastpld.RandomizedResponse(0.05, num_categories=4), fastpld.ApproxDP(0.01, 1e-9),
       fastpld.CustomPMF([0.01, -0.01, 0.003], [0.6, 0.3, 0.1])]


def _filled(**kw):
    acc = fastpld.PrivacyAccountant(**{**KW, **kw})
    for i, m in enumerate(ALL):
        acc.compose(m, i + 1)
    acc.compose(ALL[2], 500)  # the last mechanism with a count where the bracket applies (lookahead 0.01)
    return acc


def _answers(acc):
    return [acc.get_epsilon(1e-5), acc.get_epsilon(1e-3), acc.get_delta(0.5), acc.get_delta(2.0)]


def _same(a, b):
    return all(x == y for x, y in zip(a, b))


def test_json_round_trip_answers_bit_for_bit():
    acc = _filled(lookahead=0.01)
    text = acc.to_json()
    back = fastpld.PrivacyAccountant.from_json(text)
    assert back.history == acc.history
    assert _same(_answers(back), _answers(acc))
    assert back.to_json() == text
    # the documented plain form: json.dumps(state_dict()) reads back the same way
    again = fastpld.PrivacyAccountant.from_state_dict(json.loads(json.dumps(acc.state_dict())))
    assert _same(_answers(again), _answers(acc))
    st = json.loads(text)
    assert st["format"] == "fastpld.PrivacyAccountant" and st["version"] == 1
    assert st["history"][0] == {"mechanism": {"type": "Gaussian", "sigma": 3.0, "sensitivity": 0.5}, "count": 1}
    assert st["last"] == 2


def test_round_trip_keeps_settings_and_continues():
    acc = fastpld.PrivacyAccountant(0.2, 1e-8, method="two_stage", backend="numpy", max_buckets=1 << 20,
                                    cache_size=3, lookahead=0.0).compose(fastpld.Gaussian(4.0), 10)
    back = fastpld.PrivacyAccountant.from_json(acc.to_json())
    for name in ("eps_error", "delta_error", "method", "backend", "max_buckets", "lookahead"):
        assert getattr(back, name) == getattr(acc, name)
    acc.compose(fastpld.Laplace(30.0))
    back.compose(fastpld.Laplace(30.0))
    assert acc.get_epsilon(1e-6) == back.get_epsilon(1e-6)


def test_empty_accountant_round_trips():
    acc = fastpld.PrivacyAccountant(**KW)
    back = fastpld.PrivacyAccountant.from_json(acc.to_json())
    assert back.history == () and back.get_epsilon(1e-5) == (0.0, 0.0, 0.0)
    assert acc.state_dict()["last"] is None


def _cdf_mech():
    return fastpld.CustomCDF(norm.cdf, _log_mgf, mean=0.0, std=1.0)


def _log_mgf(s):
    return s * s / 2


def test_pickle_round_trip_and_deepcopy():
    acc = _filled(lookahead=0.01)
    acc.get_epsilon(1e-5)  # a filled cache is not pickled
    back = pickle.loads(pickle.dumps(acc))
    assert back.history == acc.history
    assert _same(_answers(back), _answers(acc))
    assert _same(_answers(copy.deepcopy(acc)), _answers(acc))
    back.compose(ALL[0])  # a working lock
    assert back.num_compositions == acc.num_compositions + 1


def test_custom_cdf_pickles_but_has_no_data_form():
    acc = fastpld.PrivacyAccountant(**KW).compose(_cdf_mech(), 3)
    back = pickle.loads(pickle.dumps(acc))
    assert back.get_delta(1.0) == acc.get_delta(1.0)
    with pytest.raises(ValueError, match="CustomCDF"):
        acc.state_dict()
    with pytest.raises(ValueError, match="CustomCDF"):
        acc.to_json()


def _state():
    return _filled().state_dict()


def _set(path, value):
    st = _state()
    obj = st
    for p in path[:-1]:
        obj = obj[p]
    if value is _DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return st


_DELETE = object()

BAD = [
    (("format",), "fastpld.Other", "format"),
    (("version",), 2, "version"),
    (("version",), "1", "version"),
    (("version",), True, "version"),
    (("eps_error",), 0.0, "eps_error"),
    (("eps_error",), "0.1", "eps_error"),
    (("delta_error",), 0.5, "delta_error"),
    (("method",), "fast", "method"),
    (("backend",), 3, "backend"),
    (("max_buckets",), -1, "max_buckets"),
    (("max_buckets",), True, "max_buckets"),
    (("cache_size",), 0, "cache_size"),
    (("lookahead",), 0.5, "lookahead"),
    (("lookahead",), _DELETE, "lookahead"),
    (("extra",), 1, "extra"),
    (("history",), {}, "history"),
    (("history", 0), [1, 2], r"history\[0\]"),
    (("history", 0, "count"), 0, r"history\[0\]\.count"),
    (("history", 0, "count"), 1.5, r"history\[0\]\.count"),
    (("history", 0, "mechanism", "sigma"), -1.0, r"history\[0\]\.mechanism.*sigma"),
    (("history", 0, "mechanism", "sigma"), None, r"history\[0\]\.mechanism\.sigma"),
    (("history", 0, "mechanism", "type"), "Nope", r"history\[0\]\.mechanism\.type"),
    (("history", 0, "mechanism", "color"), "red", r"history\[0\]\.mechanism.*color"),
    (("history", 0, "mechanism", "sigma"), _DELETE, r"history\[0\]\.mechanism.*sigma"),
    (("history", 1, "mechanism"), {"type": "Gaussian", "sigma": 3.0, "sensitivity": 0.5}, r"history\[1\].*repeats"),
    (("history", 7, "mechanism", "probabilities"), [0.5, 0.5, 0.5], r"history\[7\]\.mechanism.*probabilities"),
    (("history", 7, "mechanism", "values"), ["a", 1, 2], r"history\[7\]\.mechanism\.values"),
    (("last",), 99, "last"),
    (("last",), None, "last"),
    (("last",), "0", "last"),
]


@pytest.mark.parametrize("path,value,match", BAD, ids=[f"{'.'.join(map(str, p))}={v!r}" for p, v, _ in BAD])
def test_bad_state_refused_naming_the_field(path, value, match):
    st = _set(path, value)
    with pytest.raises(ValueError, match=match):
        fastpld.PrivacyAccountant.from_state_dict(st)


@pytest.mark.parametrize("bad", [None, [], "x", 1])
def test_bad_state_type_refused(bad):
    with pytest.raises(ValueError, match="state"):
        fastpld.PrivacyAccountant.from_state_dict(bad)


@pytest.mark.parametrize("text", ["{", "", "[1, 2]", b"\xff"])
def test_bad_json_refused(text):
    with pytest.raises(ValueError, match="state"):
        fastpld.PrivacyAccountant.from_json(text)


def test_stored_floats_read_back_exactly():
    sigma = float(np.nextafter(1.1, 2.0))
    acc = fastpld.PrivacyAccountant(**KW).compose(fastpld.PoissonSubsampledGaussian(sigma, 0.1 + 2e-17))
    back = fastpld.PrivacyAccountant.from_json(acc.to_json())
    assert back.history[0][0] == acc.history[0][0]
    assert back.history[0][0].sigma == sigma


def test_relative_accuracy_is_kept_and_certified():
    import json
    import pickle
    mech = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    acc = fastpld.PrivacyAccountant(rel_error=1e-3, lookahead=0.0)
    acc.compose(mech, 1000)
    b = acc.get_epsilon(1e-5)
    assert b.lower <= b.upper <= b.lower * (1 + 1e-3)
    ref = fastpld.compose(mech, 1000, eps_error=0.01).epsilon(1e-5)  # an independent certificate
    assert b.lower <= ref.upper and ref.lower <= b.upper
    for again in (fastpld.PrivacyAccountant.from_json(acc.to_json()), pickle.loads(pickle.dumps(acc))):
        assert again.rel_error == 1e-3 and again.eps_error is None
        assert tuple(again.get_epsilon(1e-5)) == tuple(b)
    assert "rel_error" in json.loads(acc.to_json())
    with pytest.raises(ValueError, match="not both"):
        fastpld.PrivacyAccountant(eps_error=0.1, rel_error=1e-3)
    with pytest.raises(ValueError, match="rel_error"):
        fastpld.PrivacyAccountant(rel_error=1e-3, method="glw")
    with pytest.raises(ValueError, match="rel_error"):
        fastpld.PrivacyAccountant(rel_error=0.0)
