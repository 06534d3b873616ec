"""max_buckets is honoured by every allocation path, before allocating; nothing is O(k)."""
import re
import tracemalloc

import pytest

import fastpld
from fastpld.composition import execute, node as node_mod

SIZE = re.compile(r"needs (an FFT of )?[0-9.e+]+ buckets.*max_buckets=\d+")


def test_leaf_window_refused_with_size():
    with pytest.raises(ValueError, match=SIZE):
        fastpld.compose(fastpld.Gaussian(1.0), 10, max_buckets=100)


def test_discrete_leaf_refused_before_allocating():
    # atoms 2e6 apart at mesh ~1e-2: the grid would be ~10^8 buckets (800 MB) before the fix
    with pytest.raises(ValueError, match=SIZE):
        fastpld.compose(fastpld.CustomPMF([0.0, 2e6], [0.5, 0.5]), 10, eps_error=0.1, max_buckets=10**6)


def test_node_fft_refused_with_size():
    pld = fastpld.compose(fastpld.Gaussian(1.0), 100, method="glw")
    leaf = max(s.buckets for s in pld.stages if s.kind == "leaf")
    node = max(s.buckets for s in pld.stages if s.kind != "leaf")
    assert leaf < node
    with pytest.raises(ValueError, match=r"needs an FFT of \d+ buckets.*max_buckets=\d+"):
        fastpld.compose(fastpld.Gaussian(1.0), 100, method="glw", max_buckets=(leaf + node) // 2)


def test_every_stage_within_max_buckets():
    for mb in (3000, 20000):
        for method in ("glw", "two_stage", "recursive"):
            try:
                pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.02), 500, method=method,
                                      max_buckets=mb)
            except ValueError as e:
                assert "max_buckets" in str(e)
                continue
            for d in pld.directions.values():
                assert all(s.buckets <= mb for s in d.stages)
                assert d.pmf.probs.size <= mb


@pytest.mark.parametrize("mech", [fastpld.PoissonSubsampledGaussian(1.0, 1e-6),
                                  fastpld.Gaussian(1e6)])
def test_no_allocation_proportional_to_k(mech):
    tracemalloc.start()
    try:
        pld = fastpld.compose(mech, 10**12, eps_error=1.0, delta_error=0.09)
        pld.delta(1.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 300e6, peak  # O(k) would be terabytes


def test_huge_k_refused_or_answered_without_overflow():
    for k in (10**30, 2**63 + 5):
        with pytest.raises(ValueError, match="buckets|delta_error"):
            fastpld.compose(fastpld.PureDP(1.0), k)


def test_consumed_results_are_released(monkeypatch):
    # a grouped heterogeneous plan: every leaf's PMF is consumed by a first-level block, so none
    # may still be alive when the root runs (they were all kept to the end: ~76 MB at 1000 x 10)
    import gc
    import weakref

    import numpy as np


    refs, alive_at_root = [], []
    leaf, run_node = execute.discretize_loss, node_mod._run_node

    def leaf_spy(*a, **k):
        pmf = leaf(*a, **k)
        refs.append(weakref.ref(pmf))
        return pmf

    def node_spy(node, *a, **k):
        if node.label == "root":
            gc.collect()
            alive_at_root.append(sum(r() is not None for r in refs))
            refs.clear()
        return run_node(node, *a, **k)

    monkeypatch.setattr(execute, "discretize_loss", leaf_spy)
    monkeypatch.setattr(execute, "_run_node", node_spy)
    ev = [(fastpld.PoissonSubsampledGaussian(1.0, float(q)), 10) for q in np.linspace(0.005, 0.02, 80)]
    pld = fastpld.compose(ev, eps_error=0.1, delta_error=1e-8, threads=1, method="coupling")
    assert all("blocks" in d.method for d in pld.directions.values())
    assert alive_at_root == [0, 0]
