"""Plans at huge k (the paper's subsampled Gaussian at k = 2^30, delta_error 1e-10).

* The planner's log-MGF grids continue past s = 512 only for losses that are Gaussian there, and
  then predict Chernoff windows close to the Gaussian ones (they were ~1000x too wide).
* The FFT lengths preferred for long double nodes, and the cost weight of the mesh shape.
* k = 2^30 at delta_error 1e-10 composes with auto, certified, on both backends with the same plan.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import fastpld
from fastpld import _fft
from fastpld.composition import api, budget, cost, grids, precision
from fastpld.composition import execute as execute_mod, node as node_mod, plan as plan_mod

SIGMA_2_30 = 27687.062681226034  # benchmarks/data/noise_params.json: delta(1.0) = 1e-6 at k = 2^30
SIGMA_2_10 = 27.095139504226402


def test_grids_extend_only_where_gaussian():
    big = fastpld.PoissonSubsampledGaussian(SIGMA_2_30, 0.2).privacy_losses()["remove"]
    small = fastpld.PoissonSubsampledGaussian(SIGMA_2_10, 0.2).privacy_losses()["remove"]
    i = int(np.searchsorted(grids._S_GRID, 512.0, side="right"))
    kp, kn = grids._cumulant_grid(big, False)
    assert np.all(np.isfinite(kp[i:])) and np.all(np.isfinite(kn[i:]))
    kp, kn = grids._cumulant_grid(small, False)
    assert np.all(np.isinf(kp[i:])) and np.all(np.isinf(kn[i:]))  # K(512) is not Gaussian: unchanged
    mu, sd = big.mean(), big.std()
    for copies, tail in ((1024, 1e-18), (2**20, 1e-14)):
        lo, hi = grids._est_window([(big, copies)], tail, False)
        half = math.sqrt(copies) * sd * math.sqrt(2 * math.log(1 / tail))
        assert half <= hi - copies * mu <= 1.1 * half
        assert half <= copies * mu - lo <= 1.1 * half


def test_fast_length_23():
    for n in (2, 3, 1000, 7000, 7057, 10001):
        m = _fft.fast_length_23(n)
        assert m >= n and m % 2 == 0
        r = m
        for p in (2, 3):
            while r % p == 0:
                r //= p
        assert r == 1
        assert _fft.fast_length_23(n) >= _fft.fast_length(n)


def test_precision_weight():
    loss = fastpld.PoissonSubsampledGaussian(SIGMA_2_30, 0.2).privacy_losses()["remove"]
    plan = plan_mod._build_plan([(loss, 2**30)], "recursive", 1024)
    de = 1e-10
    b = budget._Budgets(eps=0.1, delta=de, eta=0.4 * de, trunc=0.2 * de, wrap=0.2 * de, fp=0.15 * de)
    w = {o.label: cost._precision_weight(o, plan, b) for o in plan.order if isinstance(o, plan_mod._Node)}
    assert w["root"] == 1.0  # a pass-through
    ws = sorted(cost._precision_weight(o, plan, b) for o in plan.order if isinstance(o, plan_mod._Node) and o.label != "root")
    # the two lower levels are long double with float64 forward FFTs, the top one float64
    assert ws[0] == 1.0 and ws[1] == ws[2] == pytest.approx((cost._T_POINT_64 + cost._T_POINT_LD) / (2 * cost._T_POINT_64))


@pytest.fixture(scope="module")
def psg_2_30():
    return fastpld.PoissonSubsampledGaussian(SIGMA_2_30, 0.2)


@pytest.mark.parametrize("backend", [b for b in ("native", "numpy") if b in _fft.available_backends()])
def test_psg_2_30_certified_at_1e10(psg_2_30, backend):
    pld = fastpld.compose(psg_2_30, 2**30, eps_error=0.1, delta_error=1e-10, backend=backend, method="coupling")
    assert pld.method == "recursive(arity=1024)"
    for d in pld.directions.values():
        assert d.eps_spent <= 0.1 and d.delta_spent <= 1e-10
        # the first level's 2^20 instances run in long double (with float64 forward FFTs)
        first = [s for s in d.stages if s.kind != "leaf"][0]
        assert first.instances == 2**20 and first.precision == "longdouble"
    b = pld.delta(1.0)
    # the noise was calibrated to delta(1.0) = 1e-6 (fastpld at eps_error 0.01, delta_error 1e-7)
    assert b.lower <= 1e-6 <= b.upper
    assert 0.9e-6 <= b.estimate <= 1.1e-6


def test_refused_plans_stop_early_with_the_same_answer(monkeypatch):
    # Laplace at k = 2^30 with delta_error 1e-7, with FFTs instead of the leaves' direct DFTs: the
    # round-off of the first node's lattice powers (~9e-8) leaves too little delta for the cheaper
    # plans' meshes; each is stopped after the node that makes the refusal certain, and the answer
    # is the one without the early stop
    monkeypatch.setattr(precision, "_DFT_MAX_N", 0)
    mech, k = fastpld.Laplace(138694.82633119353), 2**30
    ran, refused = [], []
    run_node, execute = node_mod._run_node, execute_mod._execute

    def count(node, *a, **kw):
        ran[-1] += 1
        return run_node(node, *a, **kw)

    def spy(plan, *a, **kw):
        ran.append(0)
        try:
            return execute(plan, *a, **kw)
        except budget._EtaError:
            refused.append((ran[-1], plan.n_nodes))
            raise

    monkeypatch.setattr(execute_mod, "_run_node", count)
    monkeypatch.setattr(api, "_execute", spy)
    fast = fastpld.compose(mech, k, eps_error=0.1, delta_error=1e-7, threads=1)
    # stopped before the plan's last node where the charges make it certain early (recursive(64) after its
    # first node; recursive(8192)'s first nodes leave it open until its last)
    assert refused and any(r < n for r, n in refused)
    monkeypatch.setattr(execute_mod, "_eta_check", lambda *a: None)
    slow = fastpld.compose(mech, k, eps_error=0.1, delta_error=1e-7, threads=1)
    assert fast.method == slow.method
    np.testing.assert_array_equal(fast.directions["remove"].pmf.probs, slow.directions["remove"].pmf.probs)
    assert fast.delta(1.0) == slow.delta(1.0)
