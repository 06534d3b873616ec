"""fastpld.compat.prv_accountant against the real prv_accountant package."""
import math

import pytest

from fastpld import PoissonSubsampledGaussian
from fastpld.compat import prv_accountant as F

P = pytest.importorskip("prv_accountant")

K = {"psg": 1000, "gauss": 100, "lap": 100, "pure": 100, "approx": 100}
MAKERS = {
    "psg": lambda M: M.PoissonSubsampledGaussianMechanism(sampling_probability=0.01, noise_multiplier=1.0),
    "gauss": lambda M: M.GaussianMechanism(noise_multiplier=10.0),
    "lap": lambda M: M.LaplaceMechanism(mu=0.05),
    "pure": lambda M: M.PureDPMechanism(eps=0.1),
    "approx": lambda M: M.ApproximateDPMechanism(epsilon=0.1, delta=1e-8),
}


def _overlap(a, b):
    return a[0] <= b[2] and b[0] <= a[2]


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_agrees_with_prv_accountant(name):
    k = K[name]
    ref = P.PRVAccountant(prvs=[MAKERS[name](P)], max_self_compositions=[k], eps_error=0.1, delta_error=1e-10)
    acc = F.PRVAccountant(prvs=[MAKERS[name](F)], max_self_compositions=[k], eps_error=0.1, delta_error=1e-10)
    pe, fe = ref.compute_epsilon(delta=1e-5, num_self_compositions=[k]), acc.compute_epsilon(1e-5, [k])
    pd, fd = ref.compute_delta(epsilon=1.0, num_self_compositions=[k]), acc.compute_delta(1.0, [k])
    assert all(isinstance(x, float) for x in fe + fd)
    assert fe[0] <= fe[1] <= fe[2] and fd[0] <= fd[1] <= fd[2]
    # both claim to bracket the truth: the intervals must overlap, the estimates agree within eps_error
    assert _overlap(pe, fe) and _overlap(pd, fd)
    assert abs(pe[1] - fe[1]) <= 0.1
    # the real prv_accountant objects are accepted and give the same numbers
    acc2 = F.PRVAccountant(MAKERS[name](P), eps_error=0.1, delta_error=1e-10, max_self_compositions=k)
    assert acc2.compute_epsilon(1e-5, k) == fe


def test_gaussian_exact_inside_bounds():
    dpa = pytest.importorskip("dp_accounting")
    acc = F.PRVAccountant([F.GaussianMechanism(10.0)], eps_error=0.1, delta_error=1e-10, max_self_compositions=[100])
    lo, _, up = acc.compute_epsilon(1e-5, [100])
    assert lo <= dpa.get_epsilon_gaussian(1.0, 1e-5) <= up


def test_heterogeneous_and_smaller_counts():
    def mk(M):
        return [M.PoissonSubsampledGaussianMechanism(0.01, 1.0), M.GaussianMechanism(20.0), M.LaplaceMechanism(0.02)]
    ref = P.PRVAccountant(mk(P), max_self_compositions=[500, 20, 30], eps_error=0.1, delta_error=1e-10)
    acc = F.PRVAccountant(mk(F), max_self_compositions=[500, 20, 30], eps_error=0.1, delta_error=1e-10)
    for ks in ([500, 20, 30], [200, 0, 30]):
        pe, fe = ref.compute_epsilon(1e-5, ks), acc.compute_epsilon(1e-5, ks)
        assert _overlap(pe, fe) and abs(pe[1] - fe[1]) <= 0.1
    with pytest.raises(ValueError, match="num_self_compositions"):
        acc.compute_epsilon(1e-5, [501, 20, 30])


def test_remove_direction_like_prv_accountant():
    mech = F.PoissonSubsampledGaussianMechanism(sampling_probability=0.5, noise_multiplier=1.0).to_fastpld()
    assert mech == PoissonSubsampledGaussian(1.0, 0.5, neighboring="remove")
    # q = 0.5, sigma = 1, one step: exact remove-direction delta(0.3) = 0.115259 (add: 0.059166)
    lo, est, up = F.PRVAccountant(F.PoissonSubsampledGaussianMechanism(0.5, 1.0), eps_error=0.01,
                                  delta_error=1e-10).compute_delta(0.3, 1)
    assert lo <= 0.115259 <= up and up < 0.12


def test_dpsgd_and_legacy_accountant():
    with pytest.warns(DeprecationWarning):
        ref = P.Accountant(noise_multiplier=1.0, sampling_probability=0.01, delta=1e-5, max_compositions=1000,
                           eps_error=0.1)
    pe = ref.compute_epsilon(1000)
    fe = F.Accountant(noise_multiplier=1.0, sampling_probability=0.01, delta=1e-5, max_compositions=1000,
                      eps_error=0.1).compute_epsilon(1000)
    assert _overlap(pe, fe)
    from prv_accountant.dpsgd import DPSGDAccountant
    pe = DPSGDAccountant(1.0, 0.01, 1000).compute_epsilon(1e-5, 1000)
    fe = F.DPSGDAccountant(1.0, 0.01, 1000).compute_epsilon(1e-5, 1000)
    assert _overlap(pe, fe) and abs(pe[1] - fe[1]) <= 0.1


def test_bad_input():
    with pytest.raises(ValueError, match="noise_multiplier"):
        F.PoissonSubsampledGaussianMechanism(0.1, -1.0)
    with pytest.raises(ValueError, match="sampling_probability"):
        F.PoissonSubsampledGaussianMechanism(1.5, 1.0)
    with pytest.raises(ValueError, match="mu"):
        F.LaplaceMechanism(0.0)
    with pytest.raises(ValueError, match="max_self_compositions"):
        F.PRVAccountant([F.PureDPMechanism(1.0)], eps_error=0.1, delta_error=1e-10, max_self_compositions=[1, 2])
    with pytest.raises(ValueError, match="prvs"):
        F.PRVAccountant([object()], eps_error=0.1, delta_error=1e-10)
    acc = F.PRVAccountant(F.PureDPMechanism(1.0), eps_error=0.1, delta_error=1e-10)
    with pytest.raises(ValueError, match="delta"):
        acc.compute_epsilon(0.0, 1)
    assert math.isfinite(acc.compute_epsilon(0.5, 1)[2])
