"""The dominance chains' lattices anchored on a loss's atoms (``GridPMF.anchor``): a loss whose atoms are not
multiples of the mesh -- two atoms at ``-a`` and ``b``, ``a != b`` -- composes onto coarser lattices that hold all
their sums, so a discrete loss of two atoms composes exactly on the planner's aligned meshes.  Before, the splits
targeted ``mesh * Z``, off the sums: the dominated chain's epsilon stayed 0.1% low at every mesh."""
import math
from fractions import Fraction
from math import comb

import mpmath as mp
import numpy as np
import pytest

import fastpld
from fastpld.discretize import GridPMF
from fastpld.dominance import splits
from fastpld.dominance.alignment import _atom_quantum

from certified import dominance_epsilon, laplace_peer


def _exact_epsilon(loss_pairs, k, delta):
    """epsilon(delta) of k copies of two-atom losses (one per direction: max of the curves), by the binomial
    formula at 40 digits and bisection."""
    mp.mp.dps = 40

    def curve(values, probs, eps):
        v = [mp.mpf(float(x)) for x in values]
        p = [mp.mpf(float(x)) for x in probs]
        tot = mp.mpf(0)
        for i in range(k + 1):
            y = i * v[1] + (k - i) * v[0]
            if y > eps:
                tot += comb(k, i) * p[1] ** i * p[0] ** (k - i) * (1 - mp.e ** (eps - y))
        return tot

    lo, hi = mp.mpf(0), mp.mpf(5)
    for _ in range(70):
        mid = (lo + hi) / 2
        if max(curve(v, p, mid) for v, p in loss_pairs) > delta:
            lo = mid
        else:
            hi = mid
    return float(lo), float(hi)


def test_subsampled_randomized_response_composes_exactly():
    e, q, k = 0.22606834774071835, 0.04789508797669566, 61
    m = fastpld.PoissonSubsampled(fastpld.RandomizedResponse(e, 2), q)
    losses = m.privacy_losses()
    pairs = [(losses[d].values, losses[d].probs) for d in ("remove", "add")]
    assert all(len(v) == 2 and abs(v[0]) != abs(v[1]) for v, _ in pairs)
    r = dominance_epsilon(m, k)
    lo, hi = _exact_epsilon(pairs, k, 1e-5)
    assert r.lower <= lo * (1 + 1e-12) and hi <= r.upper * (1 + 1e-12)
    assert r.upper - r.lower <= 1e-6 * r.upper  # (exact up to the delta charges: was 0.1% at every mesh)


def test_subsampled_randomized_response_has_no_rounding_atom():
    """Randomized response's pair has no mass at L = -inf (``DiscreteLoss.p_minf`` = 0); computed from its float
    masses it was 1.1e-16, a third atom at log(1 - q) -- which left the two real ones without a common lattice
    (refused after 24 s at these parameters) and which a lower bound counted where the exact curve is 0 (a
    subsampled pure DP at one step, found by an exact-oracle audit).  Certified within 1e-7 in 0.3 s, and
    bracketing the binomial curve."""
    from scipy.special import gammaln
    e, q, k = 1.6084914216303374, 0.030334558664414406, 80272
    m = fastpld.PoissonSubsampled(fastpld.RandomizedResponse(e, 2), q)
    losses = m.privacy_losses()
    assert all(losses[d].values.size == 2 for d in ("remove", "add"))
    r = dominance_epsilon(m, k)
    assert r.upper - r.lower <= 1e-7 * r.upper
    i = np.arange(k + 1, dtype=np.float64)
    logc = gammaln(k + 1) - gammaln(i + 1) - gammaln(k - i + 1)

    def delta(eps):  # (the binomial curve in log space, ~1e-12 relative)
        out = 0.0
        for d in ("remove", "add"):
            (v0, v1), (p0, p1) = losses[d].values, losses[d].probs
            y = i * v1 + (k - i) * v0
            w = np.exp(logc + i * np.log(p1) + (k - i) * np.log(p0))
            out = max(out, float(np.sum(np.where(y > eps, w * -np.expm1(np.minimum(eps - y, 0.0)), 0.0))))
        return out

    assert delta(r.upper) <= 1e-5 * (1 + 1e-9) and delta(r.lower) >= 1e-5 * (1 - 1e-9)
    # (pure DP likewise, at one step: delta is 0 above the top atom, and so is the lower bound)
    pd = fastpld.compose(fastpld.PoissonSubsampled(fastpld.PureDP(0.008399782680406302), 0.032989745272044665), 1)
    assert pd.delta(0.00027823506345388564).lower == 0.0


def test_an_atom_of_negligible_mass_is_left_out_of_the_alignment():
    """Two atoms (a pair's log-likelihood ratios) and a third of mass 1e-15: the meshes are aligned on the two,
    and the composition is exact but for the third (certified within 2e-8; aligned on none, refused at 61 copies,
    0.05% wide at 500)."""
    v = [math.log(0.2 / 0.25), math.log(0.8 / 0.75), 0.5]
    m = fastpld.CustomPMF(v, [0.2, 0.8 - 1e-15, 1e-15])
    for k in (61, 500):
        r = dominance_epsilon(m, k)
        assert r.upper - r.lower <= 1e-6 * r.upper


def test_subsampled_discrete_atom_at_zero_is_zero():
    """``log(1 - q + q e^0)`` is 0: computed as log1p(q expm1(L)), not logaddexp (2.8e-17, which the planner took
    for a lattice quantum of 7e-18 and refused the composition for its 1e16 buckets)."""
    m = fastpld.PoissonSubsampled(fastpld.RandomizedResponse(0.3, 3), 0.1)
    for loss in m.privacy_losses().values():
        assert 0.0 in set(float(v) for v in loss.values)
    r = fastpld.compose(m, 10, rel_error=1e-3).epsilon(1e-5)
    assert r.upper - r.lower <= 1e-3 * r.lower
    # (and a quantum far below the atoms' spacing is none)
    assert _atom_quantum([-0.0262599726, 2.77555756e-17, 0.0343877848]) == 0.0


@pytest.mark.parametrize("native", [False, True])
def test_splits_target_the_anchored_lattice(native):
    """A PMF whose lattice is anchored at ``a`` (not a multiple of the target mesh) splits onto ``a + mesh Z``:
    every atom on such a point stays whole, and the result's exact origin is ``a`` plus a multiple of the mesh."""
    h, R = 2.0 ** -10, 8
    a = (1 << 50) // 3 / 2.0 ** 50 * 0.1  # (a dyadic far from any multiple of R h)
    fa = Fraction(a)
    n0 = -37
    origin = fa + n0 * Fraction(h)
    o = (origin.numerator, origin.denominator.bit_length() - 1)
    p = np.zeros(200)
    on = np.arange((-n0) % R, 200, R)  # (points a + (n0 + i) h with n0 + i = 0 mod R: on the coarser lattice)
    p[on] = 1.0
    p /= p.sum()
    pmf = GridPMF(p, float(origin), h, origin=o, anchor=(fa.numerator, fa.denominator.bit_length() - 1))
    assert all((n0 + i) % R == 0 for i in on)
    for split in (splits.ctd_split, splits.dominated_split):
        out = split(pmf, R * h, native)
        start = Fraction(out.origin[0], 2 ** out.origin[1])
        assert (start - fa) / (R * Fraction(h)) == int((start - fa) / (R * Fraction(h)))
        # (every atom on its point, whole: the dominating split raises the upper shares by their rounding only)
        big = out.probs > 1e-12
        assert np.count_nonzero(big) == on.size and out.probs[~big].sum() <= 1e-13
        assert out.anchor == pmf.anchor
        np.testing.assert_allclose(out.probs[big], p[on], rtol=1e-13)


@pytest.mark.parametrize("b,q,k", [(34.49041977064028, 0.0030661307091822223, 9),
                                   (188.3197204584769, 0.0063232494575537765, 4)])
def test_aligned_meshes_follow_the_rescaling(b, q, k):
    """A subsampled Laplace of a tiny support (epsilon ~1e-4): its meshes are aligned on its two atoms (both
    directions: the add direction lists them in reverse), pinned at their spacing over the coarsest lattice's ratio
    while the planner's mesh is coarser; a rescaling goes on down until some mesh changes, else it composed the
    same meshes five times and refused (the first), or answered at 0.7% of epsilon (the second, before the add
    direction was aligned).  Certified, and bracketing dp_accounting at a fine grid both ways."""
    r = dominance_epsilon(fastpld.PoissonSubsampled(fastpld.Laplace(b), q), k)
    assert r.upper < 0.01  # (epsilon below 0.01: the width asked is 1e-3 of 0.01)
    pytest.importorskip("dp_accounting")
    peer = laplace_peer(b, q, k, 1e-7)
    assert r.lower <= peer[True] + 1e-12 and peer[False] - 1e-12 <= r.upper


def test_pinned_meshes_refine_by_the_factor_asked():
    """PoissonSubsampled(Laplace(1.55), 0.0012) x 2: both directions' meshes aligned at span / (R M); a rescaling
    that stopped at the first mesh that changed took M one step at a time (excess 6.1, 2.8, 3.9, 1.35, 1.07:
    refused); it now lowers the scale until a mesh is the factor asked finer."""
    dominance_epsilon(fastpld.PoissonSubsampled(fastpld.Laplace(1.5495120848029782), 0.0011600459504776176), 2)


@pytest.mark.parametrize("b,q", [(0.45984816563892483, 0.0010601576685362428), (0.9740383255889438, 0.0017817766563036261),
                                 (0.39253365292847736, 0.008642991326064829)])
@pytest.mark.parametrize("rel", [1e-2, 1e-3])
def test_a_support_between_two_atoms_takes_two_leaf_intervals(b, q, rel):
    """A subsampled Laplace step, its support a few ulp-free atoms' spacing wide, below the planner's mesh: the mesh
    aligned on its two atoms (the support's ends) was the whole spacing, so one leaf cell held both ends, whose
    integration rules each bound the density near one end only -- an infinite error bound, and a refusal that blamed a
    CustomCDF.  The leaf now takes two intervals at least; the answer brackets the closed form
    (``tests/oracles.psl_delta``)."""
    from oracles import epsilon_of, psl_delta
    pld = fastpld.compose(fastpld.PoissonSubsampledLaplace(b, q), 1, rel_error=rel)
    for delta in (1e-3, 1e-6, 1e-9):
        e = pld.epsilon(delta)
        exact = epsilon_of(lambda x: psl_delta(x, b, q), delta)
        assert e.lower - 1e-12 <= exact <= e.upper + 1e-12, (delta, e, exact)
        assert e.upper - e.lower <= rel * max(e.lower, 0.01) * (1 + 1e-9)


@pytest.mark.parametrize("rel", [1e-2, 1e-3])
@pytest.mark.parametrize("psl,psg", [((0.3443973433322327, 0.0012135239199821395), (5.147577533973027, 0.051689290405689134, 1)),
                                     ((0.6427008818344618, 0.005694757980511306), (7.98249346729303, 0.0454480044034196, 373))])
def test_a_cell_holding_both_support_ends_is_integrated_in_halves(rel, psl, psg):
    """A subsampled Laplace of a support narrower than the mesh, beside a subsampled Gaussian (the meshes aligned
    for both parts, so the Laplace's support fell in one leaf cell): each end's rules bound the density near their
    own end only, and the cell's bound was infinite (rel_error 1e-2: a refusal blaming a CustomCDF) or NaN (the add
    direction: 'the window holds no probability mass'; the second pair's cell ends a few ulps short of the upper
    end).  Such a cell is integrated in two halves now: its integrals agree with sixteen sub-cells' within their
    bounds, and the composition answers within the width asked."""
    from fastpld.composition.api import _direction_parts
    from fastpld.dominance import leaves
    psl = fastpld.PoissonSubsampledLaplace(*psl)
    for name, parts in _direction_parts([(psl, 2)]).items():
        loss = parts[0][0]
        s_lo, s_hi = loss.support
        h = 1.05 * (s_hi - s_lo)
        a, a_err, n, n_err, b, b_err = (float(x[1]) for x in leaves._integrals(loss, np.array([s_lo - h, s_lo, s_lo + h]),
                                                                              h, 0.0))
        assert math.isfinite(a_err) and math.isfinite(n_err) and math.isfinite(b_err), name
        w = (s_hi - s_lo) / 16
        lo16 = s_lo + w * np.arange(16)
        sub = leaves._integrals(loss, lo16, w, 0.0)
        a16, b16 = float(np.sum(sub[0])), float(np.sum(sub[4] * np.exp(s_lo - lo16)))
        slack = float(np.sum(sub[1]) + np.sum(sub[5]))
        assert abs(a - a16) <= a_err + slack and abs(b - b16) <= b_err + slack, name
        assert abs(n - (a16 - b16)) <= n_err + 2 * slack + 1e-15, name
    pld = fastpld.compose([(psl, 2), (fastpld.PoissonSubsampledGaussian(psg[0], psg[1]), psg[2])], rel_error=rel)
    e = pld.epsilon(1e-5)
    assert 0 < e.lower <= e.upper <= e.lower * (1 + rel)
    # (and it brackets dp_accounting's pessimistic and optimistic estimates at a fine grid)
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pldlib
    peer = {}
    for pess in (True, False):
        lap = pldlib.from_laplace_mechanism(psl.scale, sensitivity=1.0, sampling_prob=psl.sampling_probability,
                                            value_discretization_interval=2e-5, pessimistic_estimate=pess,
                                            use_connect_dots=pess).self_compose(2)
        gau = pldlib.from_gaussian_mechanism(psg[0], sampling_prob=psg[1], value_discretization_interval=2e-5,
                                             pessimistic_estimate=pess, use_connect_dots=pess).self_compose(psg[2])
        peer[pess] = lap.compose(gau).get_epsilon_for_delta(1e-5)
    assert e.lower <= peer[True] + 1e-12 and peer[False] - 1e-12 <= e.upper, (e, peer)


@pytest.mark.parametrize("b,q,acc", [(0.139, 0.0356, {}),
                                     (0.07692319707062308, 0.0013712588377132364, {"rel_error": 1e-3}),
                                     (0.10744863016929593, 0.0063557812300535045, {"rel_error": 1e-3})])
def test_a_near_atom_at_a_support_end_is_charged_as_a_factor(b, q, acc):
    """A subsampled Laplace of scale ~0.1 holds about half its mass within ~1e-6 of a support end, where the
    density's rounding (its distance to the end rounded with the point) alone bounds that cell's mass to ~1e-10 of
    itself and more: above the leaf's cap on relative errors (``_REL_CAP``), so it was charged as total variation, 1e-10
    a copy, and 66 of 300 random such compositions of 1-30 copies were refused at delta_error 1e-10 (PSL(0.139,
    0.0356) x 1 answered epsilon(1e-6) but refused epsilon(1e-9), its deferred direction run there).  A leaf of
    ``c`` copies now charges relative errors up to ``1e-7 / c`` as a factor (``leaves._rel_cap``), and its check of
    the window's mass counts them.  The answers bracket the closed form (``tests/oracles.psl_delta``) at every
    delta down to 1e-9."""
    from oracles import epsilon_of, psl_delta
    pld = fastpld.compose(fastpld.PoissonSubsampledLaplace(b, q), 1, **acc)
    rel = acc.get("rel_error", 1e-3)
    for delta in (1e-3, 1e-6, 1e-9):
        e = pld.epsilon(delta)
        exact = epsilon_of(lambda x: psl_delta(x, b, q), delta)
        assert e.lower - 1e-12 <= exact <= e.upper + 1e-12, (delta, e, exact)
        if delta > 1e-9:  # (at 1e-9 the delta charges widen it, as documented)
            assert e.upper - e.lower <= rel * max(e.lower, 0.01) * (1 + 1e-9), (delta, e)
    from fastpld.dominance import leaves
    assert leaves._rel_cap(1) == 1e-7 and leaves._rel_cap(10 ** 6) == leaves._REL_CAP


def test_a_near_atom_at_a_support_end_composed_ten_times():
    """PSL(0.0866, 0.0537) x 10 at rel_error 1e-3 (refused before: 1.4e-9 of leaf mass errors charged as total
    variation): it answers within the width asked and brackets dp_accounting's pessimistic and optimistic
    estimates."""
    b, q = 0.08661335973327859, 0.05371390712728089
    e = fastpld.compose(fastpld.PoissonSubsampledLaplace(b, q), 10, rel_error=1e-3).epsilon(1e-6)
    assert 0 < e.lower <= e.upper <= e.lower * (1 + 1e-3)
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pldlib
    peer = {pess: pldlib.from_laplace_mechanism(b, sensitivity=1.0, sampling_prob=q, value_discretization_interval=1e-4,
                                                pessimistic_estimate=pess, use_connect_dots=pess)
            .self_compose(10).get_epsilon_for_delta(1e-6) for pess in (True, False)}
    assert e.lower <= peer[True] + 1e-12 and peer[False] - 1e-12 <= e.upper, (e, peer)


def _from_end_reference(loss, side, d):
    """:meth:`SubsampledLoss.from_end`'s model in 60 digits: the loss whose end is the float one, at distance ``d``."""
    sgn, lower, le, s = loss.end_map(side)
    q, e = mp.mpf(loss.q), mp.mpf(loss.pair.e)
    with mp.workdps(60):
        c = mp.e ** (mp.mpf(s) - mp.mpf(le)) / q
        x = c * mp.expm1(sgn * mp.mpf(d))
        z = mp.log1p(x)
        dl = c * mp.e ** (sgn * mp.mpf(d)) / (1 + x)
        ee = mp.e ** -e
        if lower:
            pP, pQ = mp.e ** (-z / 2) / 4, ee * mp.e ** (z / 2) / 4
            mP, mQ = -mp.expm1(-z / 2) / 2, ee * mp.expm1(z / 2) / 2
        else:
            pP, pQ = ee * mp.e ** (-z / 2) / 4, mp.e ** (z / 2) / 4
            mP, mQ = ee * mp.expm1(-z / 2) / 2, -mp.expm1(z / 2) / 2
        if loss.direction == "remove":
            return ((1 - q) * pP + q * pQ) * dl, (1 - q) * mP + q * mQ
        return pP * dl, mP


@pytest.mark.parametrize("b,q", [(0.104, 0.0034), (0.0866, 0.0537), (0.139, 0.0356), (1.0, 0.05), (3.0, 0.3)])
def test_a_subsampled_laplace_is_evaluated_at_exact_distances_from_its_ends(b, q):
    """Near a subsampled Laplace's end the point ``end +- d`` rounds to within ``u |end|`` and ``e^t - 1 + q``
    cancels: its density there was known to ~5e-11 only, where half its mass lies within ~1e-6 of the end (scale
    ~0.1).  ``SubsampledLoss.from_end`` evaluates the density and the end's mass from ``d`` itself: within its
    stated relative bounds of the model in 60 digits, from 1e-22 to 0.5, both directions and both ends; and away
    from the end it agrees with the density at the rounded point within both bounds."""
    for loss in fastpld.PoissonSubsampledLaplace(b, q).privacy_losses().values():
        for side in (0, 1):
            d = np.array([1e-22, 1e-18, 1e-14, 1e-10, 1e-6, 1e-3, 1e-2, 0.1, 0.5])
            f, rf, m, rm, ok = loss.from_end(d, side)
            assert ok[:6].all()
            for i in np.flatnonzero(ok):
                fe, me = _from_end_reference(loss, side, float(d[i]))
                assert abs(f[i] - fe) <= rf[i] * fe and abs(m[i] - me) <= rm[i] * me, (loss, side, d[i])
                assert rf[i] < 1e-13 and rm[i] < 1e-13
            far = np.array([0.05, 0.1, 0.2]) * min(1.0, (loss.support[1] - loss.support[0]) / 0.5)
            y = loss.support[side] + (far if side == 0 else -far)
            f, rf, _, _, ok = loss.from_end(far, side)
            g = loss.pdf(y)
            bound = rf + loss.pdf_error(y, 4 * 2.3e-16 * np.abs(y)) + 1e-13
            assert (np.abs(f - g) <= bound * g)[ok].all(), (loss, side)
    assert fastpld.PoissonSubsampledLaplace(b, q).privacy_losses()["remove"].end_shift() < 1e-13


def test_the_float_ends_are_charged_to_the_leaves_that_evaluate_from_them():
    """A leaf whose rules evaluate a subsampled Laplace from its float ends (alone, or as a part of a mixture: a
    truncated Poisson batch) charges the model's shift from the exact loss per copy (``ends._end_shift``); the
    subsampled Gaussian's end is charged where its lattice is anchored there only, as before."""
    from fastpld.composition.api import _direction_parts
    from fastpld.dominance import ends
    lap = fastpld.Laplace(1.0)
    for m in (fastpld.PoissonSubsampledLaplace(0.5, 0.01), fastpld.TruncatedPoissonSubsampled(lap, 0.01, 10_000, 130)):
        for parts in _direction_parts([(m, 2)]).values():
            r = ends._end_shift(parts[0][0], 0.0)
            assert 0 < r < 1e-14, (m, r)
    for parts in _direction_parts([(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 2)]).values():
        assert ends._end_shift(parts[0][0], 0.0) == 0.0


@pytest.mark.parametrize("b,q,k", [(0.10021574686863234, 0.0006840647039242508, 898),
                                   (0.10408864221192476, 0.0034120433342114268, 1364)])
def test_a_near_atom_composed_a_thousand_times(b, q, k):
    """PSL(0.100, 6.8e-4) x 898 at the default accuracy answered the composition and refused epsilon(1e-5) (its
    deferred direction's leaf charged 1.2e-6 of mass error bounds, the rounded points' density near its end); at
    rel_error 1e-3 both refused.  Evaluated at exact distances from the end they answer within the width asked and
    bracket dp_accounting's pessimistic and optimistic estimates (grid 1e-4)."""
    m = fastpld.PoissonSubsampledLaplace(b, q)
    assert fastpld.compose(m, k).epsilon(1e-5).upper > 0
    e = fastpld.compose(m, k, rel_error=1e-3).epsilon(1e-6)
    assert 0 < e.lower <= e.upper <= e.lower * (1 + 1e-3)
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pldlib
    peer = {pess: pldlib.from_laplace_mechanism(b, sensitivity=1.0, sampling_prob=q, value_discretization_interval=1e-4,
                                                pessimistic_estimate=pess, use_connect_dots=pess)
            .self_compose(k).get_epsilon_for_delta(1e-6) for pess in (True, False)}
    assert e.lower <= peer[True] + 1e-12 and peer[False] - 1e-12 <= e.upper, (e, peer)
