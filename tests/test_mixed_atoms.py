"""Heterogeneous compositions of mechanisms with atoms (Laplace, pure DP, subsampled Laplace) by the dominance
certificate: leaf meshes aligned on several losses' atoms (``fastpld.dominance.alignment``).  Before, their
atoms shared no lattice, the dominated chain moved them down a fraction of a mesh in every copy (first order in
the mesh), and such mixes were refused at rel_error 1e-3 (three Laplace mechanisms) or 1e-4 (two subsampled
Laplace ones), or took seconds.  Oracles: exact enumeration (pure DP), dp_accounting's two estimates."""
import math

import mpmath
import numpy as np
import pytest

import fastpld
from fastpld.dominance import alignment


def _convolve(a, b):
    out = {}
    for x, px in a.items():
        for y, py in b.items():
            out[x + y] = out.get(x + y, 0) + px * py
    return out


def _pure_mix_curve(parts):
    """Exact ``delta(eps)`` of pure-DP mechanisms ``(eps_i, k_i)`` composed (the binomials' sum, 40 digits)."""
    with mpmath.workdps(40):
        dist = {mpmath.mpf(0): mpmath.mpf(1)}
        for e0, k in parts:
            e0 = mpmath.mpf(e0)
            p = mpmath.exp(e0) / (1 + mpmath.exp(e0))
            dist = _convolve(dist, {e0 * (k - 2 * j): mpmath.binomial(k, j) * p ** (k - j) * (1 - p) ** j
                                    for j in range(k + 1)})

    def delta(eps):
        with mpmath.workdps(40):
            return float(sum(p * (1 - mpmath.exp(mpmath.mpf(eps) - v)) for v, p in dist.items() if v > eps))
    return delta


def test_pure_dp_mix_composes_exactly():
    # atoms 0.2 and 0.74 apart: a common quantum, 0.02, on which every lattice of the plan lies (the width was
    # 4.8e-4 of epsilon, the atoms' sums off the lattices)
    parts = [(0.1, 100), (0.37, 30)]
    pld = fastpld.compose([(fastpld.PureDP(e0), k) for e0, k in parts], rel_error=1e-3)
    assert pld.method.startswith("dominance")
    r = pld.epsilon(1e-5)
    assert r.upper - r.lower <= 1e-6 * r.upper
    exact = _pure_mix_curve(parts)
    for eps in (0.0, 3.0, 7.5, r.lower, r.upper, 12.0):
        b = pld.delta(eps)
        d = exact(eps)
        assert b.lower <= d * (1 + 1e-9) + 1e-300 and d <= b.upper * (1 + 1e-9), (eps, b, d)


def _peer(parts, grid=1e-4, delta=1e-5):
    """dp_accounting's epsilons of Poisson-subsampled Laplace mechanisms ``((b, q), k)`` composed:
    ``{True: pessimistic (an upper bound), False: optimistic (a lower bound)}``."""
    from dp_accounting.pld import privacy_loss_distribution as pldlib
    out = {}
    for pess in (True, False):
        acc = None
        for (b, q), k in parts:
            one = pldlib.from_laplace_mechanism(b, sensitivity=1.0, sampling_prob=q, value_discretization_interval=grid,
                                                pessimistic_estimate=pess, use_connect_dots=pess).self_compose(k)
            acc = one if acc is None else acc.compose(one)
        out[pess] = acc.get_epsilon_for_delta(delta)
    return out


def _mechanism(b, q):
    return fastpld.Laplace(b) if q == 1.0 else fastpld.PoissonSubsampledLaplace(b, q)


@pytest.mark.parametrize("parts,rel", [
    # three Laplace mechanisms: refused at rel_error 1e-3 (width 1.34x the width asked after five compositions)
    ([((1.0, 1.0), 10), ((3.0, 1.0), 20), ((0.7, 1.0), 5)], 1e-3),
    ([((1.0, 1.0), 10), ((3.0, 1.0), 20), ((0.7, 1.0), 5)], 1e-4),
    # two subsampled Laplace mechanisms: 2.2 s at rel_error 1e-3 (meshes 1,000x the planner's), refused at 1e-4
    ([((2.0, 0.05), 300), ((5.0, 0.02), 700)], 1e-3),
    ([((2.0, 0.05), 300), ((5.0, 0.02), 700)], 1e-4),
    # incommensurate atoms (2 and 2 sqrt(2) apart)
    ([((1.0, 1.0), 30), ((1 / math.sqrt(2), 1.0), 20)], 1e-4),
    # refused at 1e-3 (1.5x the width asked after five compositions) where 1e-4 was answered: asked again finer
    ([((5.815, 0.002783), 1338), ((9.551, 0.08407), 49)], 1e-3),
])
def test_laplace_mixes_certified_by_dominance(parts, rel):
    pld = fastpld.compose([(_mechanism(b, q), k) for (b, q), k in parts], rel_error=rel)
    assert pld.method.startswith("dominance"), pld.method
    r = pld.epsilon(1e-5)
    assert r.upper - r.lower <= rel * r.lower * (1 + 1e-12), r
    peer = _peer(parts)
    assert r.lower <= peer[True] and peer[False] <= r.upper, (r, peer)


def _lattice_shift(parts, R, h):
    o = np.concatenate([alignment._offsets(loss)[0] for loss, _ in parts])
    w = np.concatenate([k * alignment._offsets(loss)[1] for loss, k in parts])
    G = R * h
    r = np.mod(o, G)
    r = np.where((r <= 1e-12 * G) | (G - r <= 1e-12 * G), 0.0, r)
    return float(w @ r)


def test_aligned_mesh_of_several_losses():
    lap = [(fastpld.Laplace(b).privacy_losses()["remove"], k) for b, k in ((1.0, 10), (3.0, 20), (0.7, 5))]
    # spacings 2, 2/3 and 20/7: a common quantum 2/21, so some mesh within 4x of the planner's holds them all
    # (asked for a width far below any shift of theirs: only such a mesh fits the model)
    for h1 in (0.01, 0.0037, 1e-4):
        h = alignment.aligned_mesh(lap, 2.0, h1, 1e-12)
        assert h1 / alignment._ALIGN_FINER <= h <= h1
        assert _lattice_shift(lap, 2.0, h) == 0.0
    # (a width the planner's mesh leaves room in: the coarsest mesh the model allows, its shift counted)
    h = alignment.aligned_mesh(lap, 2.0, 1e-4, 1e-3)
    assert 1e-3 * (h / 1e-4) ** 2 + _lattice_shift(lap, 2.0, h) <= (1 + alignment._ALIGN_SHARE) * 1e-3
    # incommensurate: the chosen mesh's shift is below the planner's mesh's, and within the model's allowance
    mix = [(fastpld.Laplace(1.0).privacy_losses()["remove"], 30),
           (fastpld.Laplace(1 / math.sqrt(2)).privacy_losses()["remove"], 20)]
    h1, eps = 1e-3, 1e-4
    h = alignment.aligned_mesh(mix, 4.0, h1, eps)
    assert h < h1 and _lattice_shift(mix, 4.0, h) < _lattice_shift(mix, 4.0, h1)
    assert eps * (h / h1) ** 2 + _lattice_shift(mix, 4.0, h) <= (1 + alignment._ALIGN_SHARE) * eps
    # no atoms (subsampled Gaussians): the planner's mesh
    psg = [(fastpld.PoissonSubsampledGaussian(1.0, q).privacy_losses()["remove"], 100) for q in (0.01, 0.02)]
    assert alignment.aligned_mesh(psg, 8.0, 1e-3, 1e-4) == 1e-3
    # one loss: its own rule
    assert alignment.aligned_mesh(lap[:1], 2.0, 0.01, 1e-3) == alignment._one_part(lap[0][0], 2.0, 0.01)


def _multinomial(values, probs, k):
    """The sums of ``k`` draws of atoms ``values`` (masses ``probs``), as arrays (float64: log-multinomials)."""
    from scipy.special import gammaln
    values, probs = np.asarray(values, dtype=np.float64), np.asarray(probs, dtype=np.float64)
    if values.size == 2:
        j = np.arange(k + 1)
        counts = np.stack([k - j, j], axis=1)
    else:
        a = np.repeat(np.arange(k + 1), np.arange(k + 1, 0, -1))
        b = np.arange(a.size) - np.repeat(np.cumsum(np.arange(k + 1, 0, -1)) - np.arange(k + 1, 0, -1), np.arange(k + 1, 0, -1))
        counts = np.stack([a, b, k - a - b], axis=1)
    logp = gammaln(k + 1) - gammaln(counts + 1).sum(axis=1) + counts @ np.log(probs)
    return counts @ values, np.exp(logp)


def _discrete_mix_delta(losses, eps):
    """Exact ``delta(eps)`` (to float64 rounding) of the composition of discrete losses ``(loss, copies)``."""
    (v1, p1), (v2, p2), (v3, p3) = (_multinomial(loss.values, loss.probs, k) for loss, k in losses)
    v12 = (v1[:, None] + v2[None, :]).ravel()
    p12 = (p1[:, None] * p2[None, :]).ravel()
    total = 0.0
    for v, p in zip(v3, p3):
        y = v12 + v
        sel = y > eps
        total += p * float(np.sum(p12[sel] * -np.expm1(eps - y[sel])))
    return total


def test_spacing_inside_the_coarsest_cell_is_aligned_on():
    # PS(PureDP(1/13), 0.0011) x 924: two atoms 1.7e-4 apart, inside every cell of the coarsest lattice at the
    # planner's meshes, with parts whose atoms share no quantum with them: on any coarser mesh the dominated chain
    # moves the upper atom down in every copy (924 x 0.48 x 1.7e-4 = 0.075 of epsilon 13.6, whatever the mesh), and
    # the composition was refused at rel_error 1e-3 (width 8.0x the width asked after five compositions) and 1e-4
    mechs = [(fastpld.PoissonSubsampled(fastpld.PureDP(0.70), 0.33), 121),
             (fastpld.PoissonSubsampled(fastpld.PureDP(1 / 13), 0.0011), 924),
             (fastpld.PoissonSubsampled(fastpld.RandomizedResponse(1.37, 3), 0.0015), 40)]
    pld = fastpld.compose(mechs, rel_error=1e-3)
    assert pld.method.startswith("dominance"), pld.method
    r = pld.epsilon(1e-5)
    assert r.upper - r.lower <= 1e-3 * r.lower, r
    directions = [[(m.privacy_losses()[d], k) for m, k in mechs] for d in ("remove", "add")]
    assert all(loss.p_inf == 0 for losses in directions for loss, _ in losses)
    for eps in (r.lower, r.upper, 0.5 * r.upper):
        # (the bounds are the directions' largest)
        exact = max(_discrete_mix_delta(losses, eps) for losses in directions)
        b = pld.delta(eps)
        assert b.lower <= exact * (1 + 1e-9) and exact <= b.upper * (1 + 1e-9), (eps, b, exact)
        if eps == r.upper:
            assert exact <= 1e-5 * (1 + 1e-9)
        if eps == r.lower:
            assert exact >= 1e-5 * (1 - 1e-9)


def test_aligned_mesh_takes_a_spacing_far_below_the_planner_mesh():
    # a heavy spacing a few times below the coarsest lattice's mesh (every coarser mesh leaves its shift, copies x
    # mass x spacing, whatever the mesh): that spacing itself, where the model says it narrows the width
    parts = [(fastpld.PoissonSubsampled(fastpld.PureDP(1 / 13), 0.0011).privacy_losses()["remove"], 924),
             (fastpld.PoissonSubsampled(fastpld.PureDP(0.70), 0.33).privacy_losses()["remove"], 121)]
    a = float(np.diff(parts[0][0].values)[0])
    R, h1 = 4.0, 2.15e-4  # (G_t = 8.6e-4 = 4.9 a)
    h = alignment.aligned_mesh(parts, R, h1, 2.6e-5)
    assert h * R == pytest.approx(a, rel=1e-12)
    # beyond _ALIGN_FAR times finer than the planner's: not considered
    assert alignment.aligned_mesh(parts, R, a * alignment._ALIGN_FAR / R * 1.01, 2.6e-5) > a / R


@pytest.mark.parametrize("categories", [3, 5])
def test_one_loss_with_atoms_of_no_common_quantum(categories):
    # a Poisson-subsampled randomized response: three atoms (log(1 - q + q e^-1), 0, log(1 - q + q e)) with no common
    # quantum, which one loss's rule leaves on the planner's meshes: its atom off the lattices moved down in every
    # copy, and at 5 categories x 3,000 the composition was refused at rel_error 1e-3 (2.5x the width asked after
    # five compositions at meshes 1/360 of the planner's); weighed as several losses' atoms, 0.2 s
    m = fastpld.PoissonSubsampled(fastpld.RandomizedResponse(1.0, categories), 0.01)
    k = 3000
    pld = fastpld.compose(m, k, rel_error=1e-3)
    assert pld.method.startswith("dominance"), pld.method
    r = pld.epsilon(1e-5)
    assert r.upper - r.lower <= 1e-3 * r.lower, r
    directions = [m.privacy_losses()[d] for d in ("remove", "add")]
    assert all(loss.p_inf == 0 and loss.values.size == 3 for loss in directions)

    sums = [_multinomial(loss.values, loss.probs, k) for loss in directions]

    def exact(eps):
        out = 0.0
        for v, p in sums:
            sel = v > eps
            out = max(out, float(np.sum(p[sel] * -np.expm1(eps - v[sel]))))
        return out
    assert exact(r.upper) <= 1e-5 * (1 + 1e-9) and exact(r.lower) >= 1e-5 * (1 - 1e-9)
    for eps in (0.0, 0.5 * r.upper, 1.5 * r.upper):
        b, d = pld.delta(eps), exact(eps)
        assert b.lower <= d * (1 + 1e-9) and d <= b.upper * (1 + 1e-9), (eps, b, d)
