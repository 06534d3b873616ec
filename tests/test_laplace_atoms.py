"""Losses with atoms at the ends of their support (Laplace, subsampled Laplace) in the dominance leaves.

Three things the leaves got wrong for them, each refusing or slowing compositions that are now certified:
the dominated leaf took an atom that sits within rounding below a lattice point a whole mesh down (a first-order
loss in every copy), the quadrature near a support end counted the end's atom into the cell's error bound (a third of
the mass per copy), and the empty cell beyond an end on a lattice point carried a position charge as total variation.
"""
from fractions import Fraction
import math

import mpmath as mp
import numpy as np
import pytest

import fastpld
from fastpld.composition.roundoff import _dyadic_sum
from fastpld.dominance import leaves as L
from fastpld.dominance import ends as E
from fastpld.mechanisms.losses import LaplaceLoss

from certified import dominance_epsilon, laplace_peer, overlaps_coupling

_U = np.finfo(np.float64).eps / 2


def _exact(origin):
    return Fraction(origin[0], 1 << origin[1])


def test_atom_places_in_exact_arithmetic():
    h = 0.1  # (not a dyadic: lattice points lat + j h are not floats)
    lat = 0.3
    origin = _dyadic_sum([(1, lat), (-3, h)])  # (e[0] stands for lat - 3 h)
    e = lat + h * np.arange(-3, 40, dtype=np.float64)
    fo, fh = _exact(origin), Fraction(h)
    pt = lambda j: fo + j * fh  # noqa: E731
    below = math.nextafter(float(pt(20)), -math.inf)  # (within rounding below point 20)
    while Fraction(below) >= pt(20):
        below = math.nextafter(below, -math.inf)
    above = math.nextafter(float(pt(25)), math.inf)
    while Fraction(above) <= pt(25):
        above = math.nextafter(above, math.inf)
    mid = float(pt(30) + fh / 3)
    atoms = [lat, below, above, mid]
    masses = np.array([0.5, 0.2, 0.1, 0.2])
    j, s, tv = L._atom_places(atoms, masses, e, h, origin)
    assert j == [3, 20, 25, 30]
    assert s[:3] == [0.0, 0.0, 0.0]  # (on its point; moved up onto it; moved down onto it)
    exact_mid = Fraction(mid) - pt(30)
    assert Fraction(s[3]) <= exact_mid and exact_mid - Fraction(s[3]) <= 2 * _U * float(exact_mid)
    # the atom moved up is charged its mass times its exact distance (and no other)
    gap = float(pt(20) - Fraction(below))
    assert 0 < gap <= 8 * _U * 4.0
    assert 0.2 * gap <= tv <= 0.2 * gap * (1 + 1e-12)


def test_end_mass_laplace_exact():
    mp.mp.dps = 40
    for eps0 in (0.05, 0.7, 3.0):
        loss = LaplaceLoss(eps0)
        E = mp.mpf(eps0)
        for frac in (1e-9, 1e-3, 0.3, 0.5, 0.9, 1 - 1e-6):
            t = -eps0 + 2 * eps0 * frac
            T = mp.mpf(t)
            hi = mp.quad(lambda x: mp.e ** ((x - E) / 2) / 4, [T, E])
            lo = mp.quad(lambda x: mp.e ** ((x - E) / 2) / 4, [-E, T])
            assert abs(float(loss.end_mass(t, 1)) / float(hi) - 1) < 1e-14
            assert abs(float(loss.end_mass(t, 0)) / float(lo) - 1) < 1e-14


def _psl_end_mass_mp(b, q, direction, t, side):
    """The subsampled Laplace's continuous mass between ``t`` and an end, in mpmath: ``L`` under ``P = Lap(0, b)``
    (atoms 1/2 at -e, e^-e / 2 at e, density e^(-(l + e)/2) / 4) and ``Q`` (the Laplace loss), ``Y = +-log(1 - q +
    q e^L)``."""
    e = mp.mpf(1) / b
    Q = mp.mpf(q)
    ginv = lambda y: mp.log((mp.e ** y - 1 + Q) / Q)  # noqa: E731
    dP = lambda x: mp.e ** (-(x + e) / 2) / 4  # noqa: E731
    dQ = lambda x: mp.e ** ((x - e) / 2) / 4  # noqa: E731
    if direction == "remove":
        ll = ginv(mp.mpf(t))
        rng = [ll, e] if side == 1 else [-e, ll]
        return (1 - Q) * mp.quad(dP, rng) + Q * mp.quad(dQ, rng)
    ll = ginv(-mp.mpf(t))
    rng = [-e, ll] if side == 1 else [ll, e]
    return mp.quad(dP, rng)


@pytest.mark.parametrize("b,q", [(2.539993017447988, 0.04085563619635581), (0.6537932405300699, 0.002713906947624475),
                                 (1.2661637245827688, 0.3675132544170437)])
def test_end_mass_subsampled_laplace_against_mpmath(b, q):
    mp.mp.dps = 40
    for direction, loss in fastpld.PoissonSubsampledLaplace(b, q).privacy_losses().items():
        lo, hi = loss.support
        for frac in (1e-7, 1e-3, 0.5, 1 - 1e-3, 1 - 1e-7):
            t = lo + (hi - lo) * frac
            for side in (0, 1):
                ref = float(_psl_end_mass_mp(b, q, direction, t, side))
                # (the CDF's own accuracy: cdf_rel_error, and the shift of g^-1's rounding near the far end)
                assert abs(float(loss.end_mass(t, side)) - ref) <= 1e-9 * ref + 1e-15, (direction, frac, side)
        # the leaves take it at an end that holds an atom: the tail without the atom (the CDF's with it: 0.1-0.5)
        tl = float(E._end_tail(loss, np.array([hi - 1e-12 * (hi - lo)]), 1)[0])
        assert tl < 1e-9 and float(loss.sf(hi - 1e-12 * (hi - lo))) > 0.05


def test_end_tail_without_end_mass_keeps_the_cdf():
    g = fastpld.Gaussian(1.0).privacy_losses()["add"]
    t = np.array([-1.0, 0.5])
    np.testing.assert_array_equal(E._end_tail(g, t, 1), g.sf(t))
    np.testing.assert_array_equal(E._end_tail(g, t, 0), g.cdf(t))


@pytest.mark.parametrize("b,q,h", [(2.539993017447988, 0.04085563619635581, 0.0026514822387421477),
                                   (0.6537932405300699, 0.002713906947624475, 0.0003717)])
def test_subsampled_laplace_leaf_charges(b, q, h):
    """At these meshes the connect-the-dots leaf charged total variation 1 per copy (the atom at the support end in
    the error bound of the cell holding it) and the dominated leaf lost 2-11% of its mass; the empty cell beyond the
    end carried 1e-15 a copy."""
    loss = fastpld.PoissonSubsampledLaplace(b, q).privacy_losses()["add"]
    tail = 1e-16
    up = L.ctd_leaf(loss, h, tail, native=True)
    lo = L.dominated_leaf(loss, h, tail, native=True)
    assert up.tv <= 1e-16
    assert 1 - lo.mass < 1e-12
    assert lo.tv <= 1e-16


def test_subsampled_laplace_certified_by_dominance():
    """PSL(2.54, 0.0409) x 38,766 at rel_error 1e-3: refused by dominance (the dominated chain's lower bound 7.26
    for a true 16.75, at every mesh down to 8M-bucket FFTs) and answered by the coupling certificate in 7 s; now
    certified within 0.1% in well under a second, below dp_accounting's pessimistic (upper) bound."""
    b, q, k = 2.539993017447988, 0.04085563619635581, 38766
    r = dominance_epsilon(fastpld.PoissonSubsampledLaplace(b, q), k)
    pytest.importorskip("dp_accounting")
    assert r.lower <= laplace_peer(b, q, k, 1e-3)[True] + 1e-9


def test_subsampled_laplace_many_copies_certified():
    """PSL(0.654, 0.00271) x 70,733: the empty cell beyond the support end charged 1e-15 total variation a copy,
    over delta_error at every mesh tried (the coupling certificate answered); now dominance certifies it."""
    b, q, k = 0.6537932405300699, 0.002713906947624475, 70733
    r = dominance_epsilon(fastpld.PoissonSubsampledLaplace(b, q), k)
    pytest.importorskip("dp_accounting")
    assert r.lower <= laplace_peer(b, q, k, 1e-4)[True] + 1e-9


def test_subsampled_laplace_brackets_peer_both_ways():
    pytest.importorskip("dp_accounting")
    b, q, k = 1.2661637245827688, 0.3675132544170437, 5
    r = fastpld.compose(fastpld.PoissonSubsampledLaplace(b, q), k, rel_error=1e-3, method="dominance").epsilon(1e-5)
    peer = laplace_peer(b, q, k, 1e-4)
    assert r.lower <= peer[True] + 1e-9 and peer[False] - 1e-9 <= r.upper


@pytest.mark.parametrize("b,q,k", [(0.8507951300600777, 0.0035919839841600286, 6), (3.0, 1e-3, 1000)])
def test_subsampled_laplace_once_refused_now_certified(b, q, k):
    """PSL(0.851, 0.0036) x 6 was refused by dominance ("the leaves' mass error bounds alone cost 6": the atom at the
    top of the add direction's support counted into the cell below it), PSL(3, 1e-3) x 1,000 missed its width (the
    dominated leaf's atom a mesh down); both fell back to the coupling certificate.  Now certified, and the
    intervals overlap the coupling certificate's (two independent certificates)."""
    m = fastpld.PoissonSubsampledLaplace(b, q)
    assert overlaps_coupling(m, k, dominance_epsilon(m, k), 0.003)


@pytest.mark.parametrize("native", [True, False])
def test_balanced_split_keeps_a_top_atom_above_its_point(native, monkeypatch):
    # at the top end of a support the last cell cannot balance the mass left below its point; the atoms at or
    # above the point stay there (each has a loss at least the point's) and only those below go down -- all of it
    # went down before, and a heavy atom a little above the top point lost a whole mesh in every copy
    from fastpld.dominance import splits as S
    if not native:
        monkeypatch.setattr(S, "_dom", None)
    H = 0.01
    j = np.array([3, 4, 4, 5], dtype=np.int64)
    s = np.array([0.5 * H, 0.3 * H, 0.9 * H, 0.001 * H])
    a = np.array([0.2, 0.2, 0.2, 0.4])
    out = S._balanced_split(j, s, a, H, 6)
    assert out.sum() == pytest.approx(1.0, rel=1e-12)
    assert out[5] == pytest.approx(0.4 * S._split_lower(4), rel=1e-15)  # (the top atom on its point)
    # dominated: at every eps the split's curve is at most the atoms' (mass under the first distribution)
    y = j * H + s
    for eps in np.linspace(0.0, 0.06, 61):
        lo = float(np.sum(out * np.maximum(0.0, 1.0 - np.exp(eps - H * np.arange(6)))))
        assert lo <= float(np.sum(a * np.maximum(0.0, 1.0 - np.exp(eps - y)))) + 1e-15



def _kfold_epsilon(pmf, k, delta):
    """``epsilon(delta)`` of ``pmf`` composed ``k`` times (one float64 FFT power, no truncation: its round-off is
    ~1e-12 of the mass, far below the differences checked)."""
    p = np.asarray(pmf.probs, dtype=np.float64) * getattr(pmf, "mass", 1.0)
    n = k * (p.size - 1) + 1
    N = 1 << (n - 1).bit_length()
    out = np.fft.irfft(np.fft.rfft(p, N) ** k, N)[:n]
    v = k * pmf.offset + pmf.mesh * np.arange(n)

    def curve(e):
        s = v > e
        return float(np.sum(out[s] * -np.expm1(e - v[s])))

    lo, hi = 0.0, float(v[-1])
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if curve(mid) > delta else (lo, mid)
    return hi


@pytest.mark.parametrize("native", [True, False])
def test_dominated_leaf_leaves_the_interval_above_a_bottom_atom_to_the_next_point(native, monkeypatch):
    """PSL(2, 0.01) on a mesh of a 20th of its atoms' spacing: its bottom atom on a lattice point and 2% of the mass
    in the interval above it.  The balanced split's first cell took that interval (its merged atom, about mid-cell)
    whole, half a mesh down: the leaf's mean 0.012 meshes low a copy, its lower bound 0.063 below the upper at 10,000
    copies, and the dominance certificate composed three times.  The leaf's split now leaves that interval to the
    next point as its debt: still dominated (the exact curve of one step), its mean the loss's, and the 10,000-fold
    lower bound within 2e-3 of the dominating leaf's upper one."""
    from fastpld.dominance import splits as S
    from oracles import psl_delta
    if not native:
        monkeypatch.setattr(S, "_dom", None)
    b, q, k = 2.0, 0.01, 10_000
    loss = fastpld.PoissonSubsampledLaplace(b, q).privacy_losses()["remove"]
    lo_atom, hi_atom = loss.atoms
    h = (hi_atom - lo_atom) / 20
    lo = L.dominated_leaf(loss, h, 1e-18)
    up = L.ctd_leaf(loss, h, 1e-18)
    v, p = lo.values, lo.probs * getattr(lo, "mass", 1.0)
    assert abs(np.dot(v, p) / p.sum() - loss.mean()) <= 1e-3 * h
    for eps in np.linspace(0.0, hi_atom, 41):
        assert float(np.sum(p[v > eps] * -np.expm1(eps - v[v > eps]))) <= psl_delta(eps, b, q) + 1e-15
    e_lo, e_up = _kfold_epsilon(lo, k, 1e-5), _kfold_epsilon(up, k, 1e-5)
    assert e_lo <= e_up <= e_lo + 2e-3


def test_dominated_leaf_keeps_the_rule_where_a_thin_support_would_repay_the_debt_with_its_top_atom():
    """PSL(0.1145, 0.00107) x 1 at rel_error 0.01: nearly all the mass on the bottom atom, the support above it thin
    up to the top atom (loss ~2).  Without the first-cell rule the first interval's atom was the next point's debt,
    repaid by the top atom merged down onto that point: the lower bound of epsilon(1e-5) 0.06 for 2.0168, refused
    after five compositions.  The leaf keeps the higher-curved of the two: answered, bracketing the exact epsilon."""
    from oracles import epsilon_of, psl_delta
    b, q = 0.11446161401955088, 0.0010662900188294555
    r = fastpld.compose(fastpld.PoissonSubsampledLaplace(b, q), 1, rel_error=0.01, method="dominance").epsilon(1e-5)
    exact = epsilon_of(lambda e: psl_delta(e, b, q), 1e-5, hi=4.0)
    assert r.lower <= exact <= r.upper
    assert r.upper - r.lower <= 0.01 * exact

@pytest.mark.parametrize("frac", [42.0008, 42.002, 30.001])
def test_dominated_leaf_top_atom_a_little_above_a_point(frac):
    # PSL(4.89, 0.0013)'s atoms 5.4e-4 apart, a mesh dividing it to 0.1%: its top atom a little above a lattice
    # point went a mesh down (the leaf's mean -0.41 meshes a copy, the lower bound of a three-part mix first order
    # in the mesh: 3.9-19 s); now by its distance above the point only
    loss = fastpld.PoissonSubsampledLaplace(4.8940705330892245, 0.0013024946558910025).privacy_losses()["remove"]
    lo, hi = loss.atoms
    h = (hi - lo) / frac
    pmf = L.dominated_leaf(loss, h, 1e-13)
    v = pmf.values
    top = int(np.flatnonzero(pmf.probs > 0.3)[-1])
    assert 0.0 <= hi - v[top] <= (frac - math.floor(frac)) * h * (1 + 1e-6) + 1e-18
    assert np.dot(pmf.probs, v) / pmf.probs.sum() - loss.mean() >= -0.01 * h


def test_fixed_size_batches_of_laplace_atoms_and_composition():
    """Fixed-size batches (sampling without replacement) of a Laplace mechanism: the symmetric subsampled loss has
    atoms at +-g(eps) and 0.  Its CDF goes through g^-1, which rounded across the atoms at +-g(eps): their masses
    read 0, the leaf found its density and atoms holding 0.68 of the window's mass, and dominance refused every
    such composition (the default accuracy fell back to the coupling certificate, 0.18-0.26% wide).  Now the
    masses come from the pair's closed forms: with the density's integral (scipy's quadrature) they fill the
    mass, and the composition is certified within 0.1%, meeting the coupling certificate's interval."""
    from scipy import integrate

    m = fastpld.SubsampledWithoutReplacement(fastpld.Laplace(1.7391846962663469), 100, 10_000)
    loss = m.privacy_losses()["remove"]
    a = loss.support[1]
    assert loss.atoms == (-a, 0.0, a)
    mass, err = L._atom_masses(loss, list(loss.atoms))
    dens = sum(integrate.quad(lambda t: float(loss.pdf(np.array([t]))[0]), lo, hi, epsabs=1e-13, limit=200)[0]
               for lo, hi in ((-a, 0.0), (0.0, a)))
    assert abs(float(np.sum(mass)) + dens - 1.0) < 1e-9, (mass, dens)
    assert mass[0] == pytest.approx(float(loss.cdf(np.array([-a]))[0]), rel=1e-12)  # (nothing below -a)
    # (above a little below a: the atom at a and the density's sliver)
    assert mass[2] == pytest.approx(float(loss.sf(np.array([a * (1 - 1e-9)]))[0]), rel=1e-6)
    assert np.all(err <= 1e-14)
    r = dominance_epsilon(m, 6442)
    assert overlaps_coupling(m, 6442, r, 0.01)


@pytest.mark.parametrize("b,cap,k", [(0.9009404281499402, 1060, 14242), (4.9136481600100375, 1024, 36)])
def test_truncated_poisson_batches_of_laplace(b, cap, k):
    """Poisson batches of a Laplace mechanism capped at ``cap`` records: a revealed mixture of the Poisson-subsampled
    loss and a replace-one one, four atoms a direction.  Its CDF rounded across every atom (all four read 0: the leaf
    refused, 0.115 of the window's mass held), and each component's support ends lie inside the mixture's, where the
    quadrature took the steep density for a smooth one (8.4e-7 of the mass missed, refused).  Now the masses are
    the components' (closed forms) and the integrals each component's at its own ends, weighted: the masses and the
    density's integral fill the mass, and dominance certifies within 0.1% (the default accuracy fell back to the
    coupling certificate, 0.44% wide at k = 36), meeting the coupling certificate's interval."""
    from scipy import integrate

    m = fastpld.TruncatedPoissonSubsampled(fastpld.Laplace(b), 0.01, 100_000, cap)
    assert 1e-3 < m.truncation_probability < 1
    for loss in m.privacy_losses().values():
        atoms = list(loss.atoms)
        assert len(atoms) == 4
        mass, err = L._atom_masses(loss, atoms)
        ends = [loss.support[0]] + [x for x in atoms if loss.support[0] < x < loss.support[1]] + [loss.support[1]]
        dens = sum(integrate.quad(lambda t: float(loss.pdf(np.array([t]))[0]), lo, hi, epsabs=1e-14, limit=200)[0]
                   for lo, hi in zip(ends[:-1], ends[1:]))
        assert abs(float(np.sum(mass)) + dens - 1.0) < 1e-9, (mass, dens)
        assert np.all(mass > 0) and np.all(err <= 1e-14)
    r = dominance_epsilon(m, k)
    assert overlaps_coupling(m, k, r, 0.1 * r.upper * 1e-2)


def test_a_million_subsampled_laplaces_where_the_planners_meshes_exceed_delta_error():
    # the first composition of losses with atoms is on the planner's meshes; a million copies of a Poisson-subsampled
    # Laplace charge more than delta_error there (their cells' mass error bounds): the coarse pilot, whose fewer cells
    # fit, and the rescaling from it find meshes that certify by dominance (the coupling certificate answered before)
    pld = fastpld.compose(fastpld.PoissonSubsampled(fastpld.Laplace(1.0), 0.01), 1_000_000)
    b = pld.epsilon(1e-5)
    assert pld.method.startswith("dominance"), pld.method
    assert b.upper - b.lower <= 1e-3 * b.lower and pld.delta_spent <= pld.delta_error
