"""The dominance leaf's integrals of the Poisson-subsampled Gaussian in one compiled call
(``_leaf.psg_integrals``, the C ``fpld_psg_integrals``) against the numpy code of
``fastpld.dominance.quadrature._integrals`` it replaces: the numpy reference (no compiled kernel anywhere) and
the numpy glue around the compiled rules (``_panels``, ``_log_panels``) that ran before it.

The kernel runs the same algorithm -- the same rules, branches and comparisons -- so the six arrays agree
to round-off: the sums over a refined cell's 8/64/512 panels are taken in order (numpy sums pairwise), the
ladder's and the log-distance bounds' ``exp``/``log`` are libm's (numpy's SIMD kernels round differently),
and the numpy reference evaluates the density through numpy and scipy.  Never bit-for-bit.
"""

import numpy as np
import pytest

import fastpld
from fastpld import _kernels
from fastpld import dominance as D
from fastpld.dominance import leaves as L
from fastpld.dominance import quadrature as Q
from concurrency import each_on_its_own_thread

pytestmark = pytest.mark.skipif(not (_kernels.have_leaf() and hasattr(_kernels._leaf, "psg_integrals")),
                                reason="compiled leaf kernels unavailable")

# |x - ref| <= tol (|ref| + scale), scale the cell's larger mass (int f or int e^(lo - y) f).  Every value --
# the integrals and their error bounds -- is a sum of terms of the cell's size whose rounding (a few u each,
# summed in another order, through another libm) moves it by ~1e-15 of the mass: the error bounds (ten times
# a 5- against 4-point disagreement, itself ~1e-16 relative where the rules agree) change by that much, not by
# a few ulps of themselves.  A refinement decided by a comparison at _REFINE_REL (1e-13 relative) on such a
# bound may go the other way: the values then move by about that bound.  Against the glue around the same
# compiled rules (seen: 1.6e-14 here, 1.5e-13 at sigma 20):
_TOL = 1e-12
# against the numpy reference, whose rules evaluate the density through numpy and scipy (ulps apart from the
# compiled rules everywhere, so more of its decisions go the other way: seen 5.9e-13, an N bound of 1e-17
# against 7e-19 in a cell of mass 1.7e-5 that both refine, the glue's as the fused kernel's)
_TOL_NUMPY = 1e-11

SIGMAS = [0.5, 1.0, 2.0, 5.0]
QS = [1e-4, 1e-2, 0.1, 0.5]


def _numpy_reference(loss, lo, h, tiny, anchor=None):
    """``_integrals`` by numpy alone (the rules too: no compiled core)."""
    core, _kernels._core = _kernels._core, None
    try:
        return Q._integrals(loss, lo, h, tiny, anchor=anchor)
    finally:
        _kernels._core = core


def _compiled_glue(loss, lo, h, tiny, anchor=None):
    """``_integrals`` as before the fused kernel: the numpy glue around the compiled rules."""
    fused = _kernels._leaf.psg_integrals
    del _kernels._leaf.psg_integrals
    try:
        return Q._integrals(loss, lo, h, tiny, anchor=anchor)
    finally:
        _kernels._leaf.psg_integrals = fused


def _check(got, ref, what, tol=_TOL):
    assert len(got) == len(ref) == 6
    scale = np.maximum(np.abs(ref[0]), np.abs(ref[4]))
    for k, (g, r) in enumerate(zip(got, ref)):
        assert g.shape == r.shape and g.dtype == np.float64, what
        assert np.all(np.isfinite(g)), what
        bad = np.flatnonzero(~(np.abs(g - r) <= tol * (np.abs(r) + scale) + 1e-300))
        assert bad.size == 0, (what, k, bad[:5], g[bad[:5]], r[bad[:5]], scale[bad[:5]])


def _leaves(loss, h, tail):
    """The leaf's lattice and cells (as ``_leaf_data`` takes them), or None where the window is refused."""
    try:
        e, _, _, _, _ = D._continuous_grid(loss, h, tail, 1 << 22, True)
    except ValueError:
        return None
    starts, sizes = D._tail_blocks(loss, e, h)
    return e, starts, sizes


def _cases(loss, h, tail):
    """``(lo, h, tiny)``: the leaf's cells with the tiny it passes, and with 0 (every failing cell refined);
    every lattice interval with a scalar width."""
    got = _leaves(loss, h, tail)
    if got is None:
        return []
    e, starts, sizes = got
    tiny = L._negligible(tail, starts.size)
    return [(e[starts], h * sizes, tiny), (e[starts], h * sizes, 0.0), (e[:-1], h, 0.0)]


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_fused_integrals_match_the_numpy_reference(sigma, q):
    _compare_all(sigma, q, ((2e-3, 1e-13), (2e-4, 1e-14)))


def _compare_all(sigma, q, meshes):
    """The kernel against both references on every case of :func:`_cases` at each ``(h, tail)`` of ``meshes``, with
    the anchor the leaf passes where its lattice has a point on the end log(1 - q) (``leaves._anchor_end``)."""
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        assert loss.psg_params is not None
        for h, tail in meshes:
            anchor = _anchor(loss, h, tail)
            for lo, hh, tiny in _cases(loss, h, tail):
                what = (sigma, q, loss.direction, h, np.ndim(hh), tiny, anchor)
                got = Q._integrals(loss, lo, hh, tiny, anchor=anchor)
                _check(got, _numpy_reference(loss, lo, hh, tiny, anchor), what, _TOL_NUMPY)
                _check(got, _compiled_glue(loss, lo, hh, tiny, anchor), what)


def _anchor(loss, h, tail):
    """The ``anchor`` the leaf of ``loss`` at mesh ``h`` passes to ``_integrals``, or None."""
    try:
        lat = D._continuous_grid(loss, h, tail, 1 << 22, True)[4]
    except ValueError:
        return None
    return lat if L._end_shift(loss, lat) else None


# (sigma, q, h, tail) whose reference takes every refinement: all three levels of 8, 64 and 512 panels, and
# both log-distance refinements (a large sigma: steep in log-distance; with the proved truncation bound charged
# alone, sigma 20 at wide meshes still takes the 512 panels and the second log-distance refinement)
_REFINING = [(2.0, 0.5, 1e-4, 1e-14), (5.0, 1e-4, 1e-5, 1e-16), (20.0, 1e-3, 1e-5, 1e-16), (0.3, 0.01, 1e-2, 1e-10),
             (20.0, 0.1, 0.03, 1e-14), (20.0, 0.5, 0.01, 1e-10)]


@pytest.mark.parametrize("sigma,q,h,tail", _REFINING)
def test_fused_integrals_match_through_every_refinement(sigma, q, h, tail):
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        for lo, hh, tiny in _cases(loss, h, tail):
            what = (sigma, q, loss.direction, h, np.ndim(hh), tiny)
            got = Q._integrals(loss, lo, hh, tiny)
            _check(got, _numpy_reference(loss, lo, hh, tiny), what, _TOL_NUMPY)
            _check(got, _compiled_glue(loss, lo, hh, tiny), what)


def test_the_refining_cases_take_every_refinement(monkeypatch):
    # over _REFINING the reference (the glue around the compiled rules, whose calls tell its path) takes all
    # three levels of panels and both log-distance refinements: the comparisons above cover every branch
    levels, log_calls = 0, 0
    panels, log_panels = Q._panels, Q._log_panels
    for sigma, q, h, tail in _REFINING:
        for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
            for lo, hh, tiny in _cases(loss, h, tail):
                seen = {"panels": 0, "log": 0}

                def count(key, f):
                    def wrapped(*a, **kw):
                        seen[key] += 1
                        return f(*a, **kw)
                    return wrapped

                monkeypatch.setattr(Q, "_panels", count("panels", panels))
                monkeypatch.setattr(Q, "_log_panels", count("log", log_panels))
                _compiled_glue(loss, lo, hh, tiny)
                monkeypatch.undo()
                levels = max(levels, seen["panels"] - 1)  # (the first rules, then one call per level)
                log_calls = max(log_calls, seen["log"])  # (one support end: the rules, then one per refinement)
    assert levels == 3
    assert log_calls == 1 + Q._U_REFINE


def test_fused_integrals_respect_the_panel_budget(monkeypatch):
    # a small _REFINE_MAX_PANELS stops the log-distance refinements and the panel levels early (the coarser
    # bounds stand): the kernel takes it from the module, as the numpy code does
    monkeypatch.setattr(Q, "_REFINE_MAX_PANELS", 200)
    for sigma, q, h, tail in _REFINING:
        for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
            for lo, hh, tiny in _cases(loss, h, tail):
                got = Q._integrals(loss, lo, hh, tiny)
                _check(got, _compiled_glue(loss, lo, hh, tiny), (sigma, q, loss.direction, h, tiny))
                _check(got, _numpy_reference(loss, lo, hh, tiny), (sigma, q, loss.direction, h, tiny), _TOL_NUMPY)


def test_fused_integrals_of_no_cells():
    loss = fastpld.PoissonSubsampledGaussian(1.0, 0.01).privacy_losses()["remove"]
    for h in (1e-3, np.zeros(0)):
        got = Q._integrals(loss, np.zeros(0), h, 0.0)
        ref = _numpy_reference(loss, np.zeros(0), h, 0.0)
        assert len(got) == 6 and all(g.shape == (0,) for g in got) and all(r.shape == (0,) for r in ref)


def test_fused_integrals_in_threads_match_serial():
    # no state of its own: the two directions' leaves on two threads give the serial results bitwise
    losses = list(fastpld.PoissonSubsampledGaussian(1.0, 0.01).privacy_losses().values())
    args = []
    for loss in losses:
        e, starts, sizes = _leaves(loss, 1e-4, 1e-14)
        args.append((loss, e[starts], 1e-4 * sizes, L._negligible(1e-14, starts.size)))
    serial = [Q._integrals(*a) for a in args]
    out = each_on_its_own_thread(lambda a: Q._integrals(*a), args)
    for s, o in zip(serial, out):
        for a, b in zip(s, o):
            np.testing.assert_array_equal(a, b)


def _kernel_args(**kw):
    loss = fastpld.PoissonSubsampledGaussian(1.0, 0.01).privacy_losses()["remove"]
    q, v, sd, remove = loss.psg_params
    args = dict(lo=np.linspace(-0.02, 0.05, 8), h=0.01, tiny=0.0, s_lo=loss.support[0], s_hi=loss.support[1], q=q,
                v=v, sd=sd, remove=remove, cre=loss.cdf_rel_error, near_end=float(Q._NEAR_END),
                refine_rel=Q._REFINE_REL, u_step=Q._U_STEP, u_step_near=Q._U_STEP_NEAR, u_depth=Q._U_DEPTH,
                u_refine=Q._U_REFINE, rel_cap=Q._REL_CAP, max_panels=Q._REFINE_MAX_PANELS, x5=Q._GL5_RULE[0],
                w5=Q._GL5_RULE[1])
    args.update(kw)
    return args


@pytest.mark.parametrize("kw,name", [
    (dict(h=np.full(7, 0.01)), "h"),
    (dict(h=np.full(9, 0.01)), "h"),
    (dict(x5=np.zeros(4)), "x5"),
    (dict(w5=np.zeros(4)), "x5 and w5"),
    (dict(q=1.5), "invalid argument"),
    (dict(sd=0.0), "invalid argument"),
    (dict(u_depth=2.0), "invalid argument"),
    (dict(u_step=0.0), "invalid argument"),
    (dict(s_lo=1.0, s_hi=0.0), "invalid argument"),
])
def test_kernel_refuses_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        _kernels._leaf.psg_integrals(**_kernel_args(**kw))


def test_kernel_matches_the_dispatch():
    # the keyword arguments above are the dispatch's (a direct call gives _integrals' arrays)
    loss = fastpld.PoissonSubsampledGaussian(1.0, 0.01).privacy_losses()["remove"]
    a = _kernel_args()
    got = _kernels._leaf.psg_integrals(**a)
    ref = Q._integrals(loss, a["lo"], a["h"], a["tiny"])
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("sigma,q", [(0.25, 0.01), (0.1, 0.01), (0.1, 0.1), (0.05, 0.01)])
def test_fused_integrals_match_at_small_sigma(sigma, q):
    # a small sigma puts most of the mass within ~1e-18 of the end log(1 - q), closer than the points end +- d
    # can say: the rules near it run at exact distances and the mass beyond their depth is added from the
    # tail there (dominance.leaves._exact_end), in the kernel as in the numpy code
    _compare_all(sigma, q, ((2e-3, 1e-13), (5e-2, 1e-13)))


@pytest.mark.parametrize("sigma,q", [(0.25, 0.01), (0.1, 0.01), (0.05, 0.1)])
def test_the_cell_holding_the_end_against_the_cdf(sigma, q):
    # the cell holding log(1 - q) holds most of the mass at a small sigma: its mass from the integrals (the
    # rules and the tail beyond their depth) must be the CDF's at its far edge, within its error bound, which
    # must be small (it was the whole tail beyond the depth, ~0.4 of the mass at sigma 0.1: a refusal)
    for loss in fastpld.PoissonSubsampledGaussian(sigma, q).privacy_losses().values():
        side = 0 if loss.direction == "remove" else 1
        end = loss.support[side]
        h = 2e-3
        lo = np.array([end - h / 3 if side == 0 else end - 2 * h / 3])
        a, a_err, n, n_err, b, b_err = Q._integrals(loss, lo, h, 0.0)
        x = np.array([lo[0] + h if side == 0 else lo[0]])
        exact = float((loss.cdf(x) if side == 0 else loss.sf(x))[0])
        assert abs(a[0] - exact) <= a_err[0] + 1e-10 * exact, (sigma, q, loss.direction, a, exact, a_err)
        assert a_err[0] <= 1e-11 * a[0], (sigma, q, loss.direction, a_err, a)
        assert 0 <= n[0] <= a[0] and 0 <= b[0] <= a[0]


def test_the_anchored_end_is_charged_no_position():
    # a lattice with a point on the end log(1 - q) (small noise multipliers: leaves._anchor_end): the cell end on
    # it is not charged the density there times its position's error -- the add direction's spike lies below it,
    # and lo + h rounds within an ulp of it, where that density is ~1e15: 1e-5 of the cell's mass was charged at
    # sigma 0.07 -- but the leaf charges the end's shift instead (leaves._end_shift, 16 u |s| a copy)
    loss = fastpld.PoissonSubsampledGaussian(0.07, 0.01).privacy_losses()["add"]
    end = loss.support[1]
    h = 0.19437627
    lo = np.array([end - 4 * h, end - h])
    hh = np.array([3 * h, h])
    plain = Q._integrals(loss, lo, hh, 0.0)
    for got in (Q._integrals(loss, lo, hh, 0.0, anchor=end), _numpy_reference(loss, lo, hh, 0.0, end)):
        a, a_err = got[0], got[1]
        assert a[-1] > 0.99 and a_err[-1] <= 1e-12 * a[-1], (a, a_err)
        assert np.all(got[1] <= plain[1])
    assert L._end_shift(loss, end) == pytest.approx(16 * np.finfo(float).eps / 2 * abs(end), rel=1e-4)
    assert L._end_shift(loss, 0.0) == 0.0


def test_the_end_shift_is_refused_past_its_bound():
    # the anchored end's charge assumes the composed shift k r stays at most 1e-5 (its e^(k r) taken as 1 + 1e-5)
    loss = fastpld.PoissonSubsampledGaussian(0.1, 0.01).privacy_losses()["remove"]
    end = loss.support[0]
    r = L._anchored_shift(loss, end, 1000)
    assert 0 < r <= 16 * np.finfo(float).eps / 2 * abs(end) * (1 + 2e-5)
    assert L._anchored_shift(loss, 0.0, 10 ** 15) == 0.0  # (not anchored: nothing to bound)
    with pytest.raises(ValueError, match="shift"):
        L._anchored_shift(loss, end, 10 ** 15)
