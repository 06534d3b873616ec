"""fastpld.compat.dp_accounting against the real dp_accounting package."""
import math

import pytest

dpa = pytest.importorskip("dp_accounting")
from dp_accounting.pld import PLDAccountant  # noqa: E402

from fastpld.compat.dp_accounting import (  # noqa: E402
    EpsilonDeltaDpEvent,
    FastPLDAccountant,
    randomized_response_epsilon,
)

R = dpa.NeighboringRelation
EPS_ERR = 0.01
# dp_accounting's PLD (pessimistic, 1e-4 grid) is an upper bound a little above the truth;
# it must lie in fastpld's certified interval up to this much of its own pessimism.
SLACK_EPS = 2e-3


def test_is_a_privacy_accountant():
    acc = FastPLDAccountant()
    assert isinstance(acc, dpa.PrivacyAccountant)
    assert acc.neighboring_relation is R.ADD_OR_REMOVE_ONE
    assert acc.get_epsilon(1e-5) == 0.0 and acc.get_delta(0.5) == 0.0


@pytest.mark.parametrize("name,event,count,relation", [
    ("gaussian", dpa.GaussianDpEvent(2.0), 50, R.ADD_OR_REMOVE_ONE),
    ("subsampled-gaussian", dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 1000, R.ADD_OR_REMOVE_ONE),
    ("subsampled-laplace", dpa.PoissonSampledDpEvent(0.05, dpa.LaplaceDpEvent(2.0)), 200, R.ADD_OR_REMOVE_ONE),
    ("laplace", dpa.LaplaceDpEvent(20.0), 100, R.ADD_OR_REMOVE_ONE),
    ("gaussian-replace", dpa.GaussianDpEvent(4.0), 50, R.REPLACE_ONE),
])
def test_agrees_with_pld_accountant(name, event, count, relation):
    ref = PLDAccountant(relation).compose(event, count)
    acc = FastPLDAccountant(relation, eps_error=EPS_ERR).compose(event, count)
    e_ref, d_ref = ref.get_epsilon(1e-5), ref.get_delta(1.0)
    b = acc.get_epsilon_bounds(1e-5)
    assert b.lower - SLACK_EPS <= e_ref <= b.upper + SLACK_EPS
    assert abs(b.estimate - e_ref) <= EPS_ERR
    assert acc.get_epsilon(1e-5) == b.upper and isinstance(acc.get_epsilon(1e-5), float)
    db = acc.get_delta_bounds(1.0)
    assert db.lower * 0.99 <= d_ref <= db.upper * 1.01
    assert acc.get_delta(1.0) == db.upper


def test_gaussian_exact():
    # k Gaussians with sigma compose exactly to one with sigma / sqrt(k)
    acc = FastPLDAccountant(eps_error=EPS_ERR).compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(10.0), 25), 4)
    exact = dpa.get_epsilon_gaussian(1.0, 1e-5)
    b = acc.get_epsilon_bounds(1e-5)
    assert b.lower <= exact <= b.upper


def test_randomized_response_mapping():
    # dp_accounting: true bucket w.p. 1 - p + p/k, each other w.p. p/k
    p, k = 0.5, 4
    eps = randomized_response_epsilon(p, k)
    assert eps == pytest.approx(math.log((1 - p + p / k) / (p / k)), rel=1e-15)
    ev = dpa.RandomizedResponseDpEvent(p, k)
    ref = PLDAccountant(R.REPLACE_ONE).compose(ev)
    acc = FastPLDAccountant(R.REPLACE_ONE, eps_error=EPS_ERR).compose(ev)
    b = acc.get_epsilon_bounds(1e-5)
    assert b.lower - SLACK_EPS <= ref.get_epsilon(1e-5) <= b.upper + SLACK_EPS
    # 30 copies: compare with a ComposedDpEvent, because dp_accounting 0.6.0's PLDAccountant
    # ignores `count` for RandomizedResponseDpEvent (compose(ev, 30) == compose(ev, 1) there).
    ref30 = PLDAccountant(R.REPLACE_ONE).compose(dpa.ComposedDpEvent([ev] * 30))
    acc30 = FastPLDAccountant(R.REPLACE_ONE, eps_error=EPS_ERR).compose(ev, 30)
    b30 = acc30.get_epsilon_bounds(1e-5)
    assert b30.lower - SLACK_EPS <= ref30.get_epsilon(1e-5) <= b30.upper + SLACK_EPS


def test_heterogeneous_composed_event():
    ev = dpa.ComposedDpEvent([
        dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(1.5)), 300),
        dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(30.0), 20),
        dpa.NoOpDpEvent(),
    ])
    ref = PLDAccountant().compose(ev)
    acc = FastPLDAccountant(eps_error=EPS_ERR).compose(ev)
    b = acc.get_epsilon_bounds(1e-6)
    assert b.lower - SLACK_EPS <= ref.get_epsilon(1e-6) <= b.upper + SLACK_EPS
    assert len(acc.get_pld().events) == 2


def test_epsilon_delta_event():
    acc = FastPLDAccountant(eps_error=EPS_ERR).compose(EpsilonDeltaDpEvent(0.5, 1e-7), 4)
    # 4 copies of an (0.5, 1e-7) mechanism: the finite loss is <= 2, so delta(2.5) = 1 - (1 - 1e-7)^4
    exact = -math.expm1(4 * math.log1p(-1e-7))
    d = acc.get_delta_bounds(2.5)
    assert d.lower <= exact * (1 + 1e-12) and exact <= d.upper < 1e-6
    pure = FastPLDAccountant(eps_error=EPS_ERR).compose(EpsilonDeltaDpEvent(0.5), 4)
    assert pure.get_delta(2.5) < 1e-9
    assert FastPLDAccountant().compose(EpsilonDeltaDpEvent(0.5, 1.0)).get_epsilon(0.5) == math.inf


def test_supports_is_honest():
    add_remove = FastPLDAccountant()
    replace = FastPLDAccountant(R.REPLACE_ONE)
    rr = dpa.RandomizedResponseDpEvent(0.5, 4)
    psg = dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(1.0))
    assert add_remove.supports(psg) and add_remove.supports(dpa.LaplaceDpEvent(1.0))
    assert not add_remove.supports(rr)  # as dp_accounting: RR is a replace-one mechanism
    assert replace.supports(rr) and replace.supports(dpa.LaplaceDpEvent(1.0))
    assert not replace.supports(psg)  # mixture-vs-mixture pair is not implemented
    for ev in (dpa.UnsupportedDpEvent(), dpa.ZCDpEvent(0.1),
               dpa.PoissonSampledDpEvent(0.1, dpa.PoissonSampledDpEvent(0.5, dpa.GaussianDpEvent(1.0))),
               dpa.ComposedDpEvent([dpa.GaussianDpEvent(1.0), dpa.UnsupportedDpEvent()])):
        assert not add_remove.supports(ev)
        with pytest.raises(dpa.UnsupportedEventError):
            add_remove.compose(ev)
    assert add_remove.get_epsilon(1e-5) == 0.0  # nothing composed by failed calls


def test_non_private_and_no_op():
    acc = FastPLDAccountant().compose(dpa.NoOpDpEvent())
    assert acc.get_epsilon(1e-5) == 0.0
    acc.compose(dpa.PoissonSampledDpEvent(0.0, dpa.GaussianDpEvent(1.0)), 10)
    assert acc.get_epsilon(1e-5) == 0.0
    acc.compose(dpa.GaussianDpEvent(0.0))
    assert acc.get_epsilon(1e-5) == math.inf and acc.get_delta(3.0) == 1.0
    replace = FastPLDAccountant(R.REPLACE_ONE).compose(dpa.RandomizedResponseDpEvent(1.0, 4), 5)
    assert replace.get_epsilon_bounds(1e-5) == (0.0, 0.0, 0.0)
    replace.compose(dpa.RandomizedResponseDpEvent(0.0, 4))
    assert replace.get_epsilon(1e-5) == math.inf
    acc2 = FastPLDAccountant().compose(dpa.NonPrivateDpEvent())
    assert acc2.get_epsilon_bounds(1e-5) == (math.inf, math.inf, math.inf)
    assert PLDAccountant().compose(dpa.NonPrivateDpEvent()).get_epsilon(1e-5) == math.inf


def test_ledger_and_bad_input():
    acc = FastPLDAccountant()
    acc.compose(dpa.GaussianDpEvent(3.0), 2)
    assert acc.ledger == PLDAccountant().compose(dpa.GaussianDpEvent(3.0), 2).ledger
    with pytest.raises(ValueError, match="noise_multiplier"):
        acc.compose(dpa.GaussianDpEvent(-1.0))
    with pytest.raises(ValueError, match="target_delta"):
        acc.get_epsilon(0.0)
    with pytest.raises(ValueError, match="neighboring_relation"):
        FastPLDAccountant(R.REPLACE_SPECIAL)
    with pytest.raises(ValueError, match="eps_error"):
        FastPLDAccountant(eps_error=-1)


def test_relative_accuracy():
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 2000)
    ours = FastPLDAccountant(rel_error=1e-3)
    ours.compose(event)
    b = ours.get_epsilon_bounds(1e-5)
    assert b.lower <= b.upper <= b.lower * (1 + 1e-3)
    ref = PLDAccountant(value_discretization_interval=1e-4)
    ref.compose(event)
    e_ref = ref.get_epsilon(1e-5)  # pessimistic: an upper bound a little above the truth
    assert b.lower <= e_ref <= b.upper + SLACK_EPS
    with pytest.raises(ValueError, match="not both"):
        FastPLDAccountant(eps_error=0.01, rel_error=1e-3)
