"""Every loss value a float64 can hold (issue 17, section 2).

The subsampled losses evaluated their CDF through ``expm1(t)``, which overflows at t = 709.78: above
it the CDF jumped to 1 and the survival function to 0, and that mass vanished from every bound.
This file sweeps each mechanism's loss (both directions where there are two) across the overflow
and underflow thresholds of exp, expm1, log1p and the normal tail against exact references in
mpmath at 50 digits, and checks the claims the certificate makes of the computed values:

* CDF and survival function: within ``cdf_rel_error`` (relative) of the exact ones at some point
  within ``cdf_shift(|t|)`` of ``t`` (an absolute 1e-300 is allowed for subnormal results);
* density (the round-off certificate's edge movements): relative 1e-8 where it is normal;
* partial means: within the error bound they return;
* log-MGF: never NaN, and an upper bound where finite.

Then the failing cases of the issue end to end (compose / epsilon / delta / calibrate) against exact
values: lower <= exact <= upper, on both backends.
"""
import math

import numpy as np
import pytest

import fastpld as F
from fastpld import _kernels
from fastpld.mechanisms.losses import GaussianLoss, LaplaceLoss
from fastpld.mechanisms.pairs import _GaussPair, _LaplacePair
from fastpld.mechanisms.subsampled import SubsampledLoss

mpmath = pytest.importorskip("mpmath")
mp = mpmath.mp

_U = np.finfo(np.float64).eps / 2
TINY = 1e-300  # results below this may be subnormal (no relative accuracy claimed or needed)

# the thresholds: exp/expm1 overflow (709.78), underflow (-745.13), the 700 switch of g^-1, log1p's
# and expm1's small-argument ranges, the normal tail's underflow (z ~ -38), huge values
_T = [-1.7e308, -1e300, -1e100, -1e6, -1e4, -1000.0, -800.0, -745.2, -745.0, -720.0, -710.0, -709.79,
      -709.77, -700.5, -700.0, -699.5, -100.0, -37.5, -36.0, -30.0, -1.0, -0.5, -1e-5, -1e-300, 0.0, 1e-300,
      1e-5, 0.5, 1.0, 30.0, 36.0, 37.5, 100.0, 699.5, 700.0, 700.5, 709.77, 709.79, 710.0, 715.0, 720.0,
      745.0, 745.2, 800.0, 1000.0, 1e4, 1e6, 1e100, 1e300, 1.7e308]


def _points(loss, extra=()):
    """The threshold grid, the support's ends a few ulps either side, and the mass's own scale."""
    pts = list(_T) + list(extra)
    for end in loss.support:
        if math.isfinite(end):
            x = end
            for _ in range(4):
                x = math.nextafter(x, math.inf)
                pts.append(x)
            x = end
            for _ in range(4):
                x = math.nextafter(x, -math.inf)
                pts.append(x)
            pts += [end + d for d in (1e-12, 1e-9, 1e-6, 1e-3, 0.1, -1e-12, -1e-6, -0.1)]
    return np.array(sorted(set(pts)), dtype=np.float64)


# ---- exact references (mpmath) ---------------------------------------------------------------
def _ncdf(x):
    """Phi(x); beyond |x| = 1e5 (mpmath overflows there) the value is 0 or 1 to far below 1e-300."""
    if x < -1e5:
        return mpmath.mpf(0)
    if x > 1e5:
        return mpmath.mpf(1)
    return mpmath.ncdf(x)


def _npdf(x):
    return mpmath.mpf(0) if abs(x) > 1e5 else mpmath.npdf(x)


def _ginv(t, q):
    """log((e^t - 1 + q) / q), -inf at and below log(1 - q)."""
    a = mpmath.expm1(t) + q
    return mpmath.log(a / q) if a > 0 else -mpmath.inf


def _dginv(t, q):
    a = mpmath.expm1(t) + q
    return mpmath.exp(t) / a if a > 0 else mpmath.mpf(0)


class _RefGauss:
    def __init__(self, mu):
        self.mu = mpmath.mpf(mu)
        self.m = self.mu**2 / 2

    def cdf(self, t):
        return _ncdf((t - self.m) / self.mu)

    def sf(self, t):
        return _ncdf((self.m - t) / self.mu)

    def pdf(self, t):
        return _npdf((t - self.m) / self.mu) / self.mu


class _RefLaplace:
    def __init__(self, e):
        self.e = mpmath.mpf(e)

    def cdf(self, t):
        e = self.e
        return mpmath.mpf(0) if t < -e else mpmath.mpf(1) if t >= e else mpmath.exp((t - e) / 2) / 2

    def sf(self, t):
        e = self.e
        return mpmath.mpf(1) if t < -e else mpmath.mpf(0) if t >= e else 1 - mpmath.exp((t - e) / 2) / 2

    def pdf(self, t):
        e = self.e
        return mpmath.exp((t - e) / 2) / 4 if -e < t < e else mpmath.mpf(0)


class _RefPair:
    """Exact laws of the pair's loss L under P and Q, each tail computed directly (no ``1 - x``):
    ``le_X(l) = X[L <= l]``, ``gt_X(l) = X[L > l]``, ``lt_P(l) = P[L < l]``, ``ge_P(l) = P[L >= l]``."""

    @staticmethod
    def gauss(sigma):
        v = 1 / mpmath.mpf(sigma) ** 2
        sd = mpmath.sqrt(v)
        r = _RefPair()
        r.le_P = r.lt_P = lambda l: _ncdf((l + v / 2) / sd)
        r.gt_P = r.ge_P = lambda l: _ncdf(-(l + v / 2) / sd)
        r.le_Q = lambda l: _ncdf((l - v / 2) / sd)
        r.gt_Q = lambda l: _ncdf(-(l - v / 2) / sd)
        r.pdf_P = lambda l: _npdf((l + v / 2) / sd) / sd
        r.pdf_Q = lambda l: _npdf((l - v / 2) / sd) / sd
        r.atoms = ()
        return r

    @staticmethod
    def laplace(e0):
        e = mpmath.mpf(e0)
        r = _RefPair()
        one, zero = mpmath.mpf(1), mpmath.mpf(0)
        # under P: atom 1/2 at -e, atom e^-e / 2 at +e, density e^(-(l + e)/2) / 4 between;
        # P[L > l] = e^(-(l + e)/2) / 2 on [-e, e)
        r.gt_P = lambda l: one if l < -e else zero if l >= e else mpmath.exp(-(l + e) / 2) / 2
        r.ge_P = lambda l: one if l <= -e else zero if l > e else mpmath.exp(-(l + e) / 2) / 2
        r.le_P = lambda l: zero if l < -e else one if l >= e else 1 - mpmath.exp(-(l + e) / 2) / 2
        r.lt_P = lambda l: zero if l <= -e else one if l > e else 1 - mpmath.exp(-(l + e) / 2) / 2
        # under Q: atom 1/2 at +e, atom e^-e / 2 at -e, density e^((l - e)/2) / 4 between;
        # Q[L <= l] = e^((l - e)/2) / 2 on [-e, e)
        r.le_Q = lambda l: zero if l < -e else one if l >= e else mpmath.exp((l - e) / 2) / 2
        r.gt_Q = lambda l: one if l < -e else zero if l >= e else 1 - mpmath.exp((l - e) / 2) / 2
        r.pdf_P = lambda l: mpmath.exp(-(l + e) / 2) / 4 if -e < l < e else mpmath.mpf(0)
        r.pdf_Q = lambda l: mpmath.exp((l - e) / 2) / 4 if -e < l < e else mpmath.mpf(0)
        r.atoms = (-e, e)
        return r


class _RefSubsampled:
    """``remove``: Y = g(L), L ~ (1-q) P + q Q; ``add``: Y = -g(L), L ~ P; g(l) = log(1 - q + q e^l)."""

    def __init__(self, pair, q, direction):
        self.p, self.q, self.remove = pair, mpmath.mpf(q), direction == "remove"
        self.top = -mpmath.log1p(-self.q)

    def cdf(self, t):
        q = self.q
        if self.remove:
            l = _ginv(t, q)
            return (1 - q) * self.p.le_P(l) + q * self.p.le_Q(l) if l > -mpmath.inf else mpmath.mpf(0)
        if t >= self.top:
            return mpmath.mpf(1)
        return self.p.ge_P(_ginv(-t, q))  # Y <= t  <=>  L >= g^-1(-t)

    def sf(self, t):
        q = self.q
        if self.remove:
            l = _ginv(t, q)
            if l == -mpmath.inf:
                return mpmath.mpf(1)
            return (1 - q) * self.p.gt_P(l) + q * self.p.gt_Q(l)
        if t >= self.top:
            return mpmath.mpf(0)
        return self.p.lt_P(_ginv(-t, q))

    def pdf(self, t):
        q = self.q
        tt = t if self.remove else -t
        l = _ginv(tt, q)
        if l == -mpmath.inf:
            return mpmath.mpf(0)
        d = (1 - q) * self.p.pdf_P(l) + q * self.p.pdf_Q(l) if self.remove else self.p.pdf_P(l)
        return d * _dginv(tt, q)


def _cases():
    out = []
    for mu in (1e-3, 1.0, 38.0, 1e3):
        out.append((f"gauss-{mu}", GaussianLoss(mu), _RefGauss(mu)))
    for e in (1.0, 800.0, 1e5):
        out.append((f"laplace-{e}", LaplaceLoss(e), _RefLaplace(e)))
    for sigma, q in ((0.028, 0.1), (0.02, 0.1), (0.0265, 1e-3), (1.0, 1e-3), (0.03, 1 - 2.0**-53), (0.5, 1e-300),
                     (2e-3, 0.5)):
        pair = _GaussPair(sigma)
        for d in ("remove", "add"):
            out.append((f"psg-{sigma}-{q}-{d}", SubsampledLoss(pair, q, d), _RefSubsampled(_RefPair.gauss(sigma), q, d)))
    for e0, q in ((800.0, 0.5), (1e4, 0.1), (2.0, 1e-3), (750.0, 1 - 1e-12)):
        pair = _LaplacePair(e0)
        for d in ("remove", "add"):
            out.append((f"psl-{e0}-{q}-{d}", SubsampledLoss(pair, q, d),
                        _RefSubsampled(_RefPair.laplace(e0), q, d)))
    return out


_CASES = _cases()


def _scale_points(loss):
    """Points where the mass is (subsampled Gaussian: the images of L's component means +- k sd)."""
    if isinstance(loss, SubsampledLoss) and isinstance(loss.pair, _GaussPair):
        v, sd, q = loss.pair.v, loss.pair.sd, loss.q
        ls = [c + k * sd for c in (-v / 2, v / 2) for k in (-8, -2, 0, 2, 8)]
        g = [float(np.logaddexp(math.log1p(-q), math.log(q) + l)) for l in ls]
        return g + [-x for x in g]
    return []


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request, monkeypatch):
    """The compiled leaf kernels, and their numpy references (``_core = None``, as the tests of the leaf)."""
    if request.param == "numpy":
        monkeypatch.setattr(_kernels, "_core", None)
    elif not _kernels.have_leaf():
        pytest.skip("compiled kernels not built")
    return request.param


@pytest.mark.parametrize("name,loss,ref", _CASES, ids=[c[0] for c in _CASES])
def test_cdf_sf_within_their_claims_at_every_magnitude(name, loss, ref, kernels):
    ts = _points(loss, _scale_points(loss))
    tau = loss.cdf_rel_error
    Fc, Sc = loss.cdf(ts), loss.sf(ts)
    assert np.all(np.isfinite(Fc)) and np.all(np.isfinite(Sc)), name
    with mpmath.workdps(50):
        for t, f, s in zip(ts.tolist(), Fc.tolist(), Sc.tolist()):
            sh = loss.cdf_shift(abs(t))
            lo, hi = mpmath.mpf(t) - sh, mpmath.mpf(t) + sh
            f_lo, f_hi = ref.cdf(lo), ref.cdf(hi)
            s_lo, s_hi = ref.sf(hi), ref.sf(lo)
            assert f_lo * (1 - tau) - TINY <= f <= f_hi * (1 + tau) + TINY, (name, t, f, float(f_lo), float(f_hi))
            assert s_lo * (1 - tau) - TINY <= s <= s_hi * (1 + tau) + TINY, (name, t, s, float(s_lo), float(s_hi))


@pytest.mark.parametrize("name,loss,ref", _CASES, ids=[c[0] for c in _CASES])
def test_density_at_every_magnitude(name, loss, ref, kernels):
    ts = _points(loss, _scale_points(loss))
    ds = loss.pdf(ts)
    assert np.all(np.isfinite(ds)) and np.all(ds >= 0), name
    with mpmath.workdps(50):
        for t, d in zip(ts.tolist(), ds.tolist()):
            # (the density is continuous at these points except at atoms, support ends and their ulps)
            if any(abs(t - a) <= 1e-9 * max(1.0, abs(a)) for a in (*loss.atoms, *loss.support) if math.isfinite(a)):
                continue
            r = ref.pdf(mpmath.mpf(t))
            if r > 1e-290 and r < 1e300:
                assert abs(d - r) <= 1e-8 * r, (name, t, d, float(r))
            else:
                assert d <= 1e-280 or r >= 1e300, (name, t, d, float(r))


_GL_NODES = {}


def _gl(f, pts):
    """Sum of 12-point Gauss-Legendre (mpmath nodes at the working precision) over the panels ``pts``."""
    key = mpmath.mp.prec
    if key not in _GL_NODES:
        from mpmath.calculus.quadrature import GaussLegendre
        _GL_NODES[key] = GaussLegendre(mpmath.mp).calc_nodes(3, mpmath.mp.prec)
    nodes = _GL_NODES[key]
    total = mpmath.mpf(0)
    for a, b in zip(pts[:-1], pts[1:]):
        mid, half = (a + b) / 2, (b - a) / 2
        total += half * mpmath.fsum(w * f(mid + half * x) for x, w in nodes)
    return total


def _panels(loss, la, lb):
    """Panel ends in ``[la, lb]``: a decay scale of the density over 40 scales from each end and over
    +-40 sd around each peak, and 1 over +-30 around g's singular points log((1-q)/q) +- i pi (12 nodes
    on such panels: below 1e-20 relative)."""
    if isinstance(loss.pair, _GaussPair):
        v = 1 / mpmath.mpf(loss.pair.sg) ** 2
        sd = mpmath.sqrt(v)
        peaks = [(c, sd) for c in (-v / 2, v / 2)]
        lo, hi = max(la, -v / 2 - 45 * sd), min(lb, v / 2 + 45 * sd)
    else:
        e = mpmath.mpf(loss.pair.e)
        peaks = [(-e, None), (e, None)]
        lo, hi = max(la, -e), min(lb, e)
    pts = {lo, hi}
    for end, sign in ((lo, 1), (hi, -1)):
        for c, sd in peaks:
            rate = abs(end - c) / sd**2 if sd is not None else mpmath.mpf(1) / 2
            w = min(1 / rate if rate > 0 else mpmath.mpf(1), sd if sd is not None else 1, mpmath.mpf(1))
            pts.update(end + sign * k * w for k in range(1, 41))
    for c, sd in peaks:
        w = sd if sd is not None else mpmath.mpf(1)
        pts.update(c + k * w for k in range(-40, 41))
    q = mpmath.mpf(loss.q)
    ls = mpmath.log((1 - q) / q)
    pts.update(ls + k for k in range(-30, 31))
    return sorted(x for x in pts if lo <= x <= hi) if hi > lo else []


_MEAN_CACHE = {}


def _quad_pair_mean(loss, pref, la, lb):
    """:func:`_quad_pair_mean_` memoised (the compiled and numpy runs of a test share it)."""
    key = (type(loss.pair).__name__, getattr(loss.pair, "sg", None), getattr(loss.pair, "e", None), loss.q,
           loss.direction, str(la), str(lb), mpmath.mp.prec)
    if key not in _MEAN_CACHE:
        _MEAN_CACHE[key] = _quad_pair_mean_(loss, pref, la, lb)
    return _MEAN_CACHE[key]


def _quad_pair_mean_(loss, pref, la, lb):
    """E[+-g(L); la < L <= lb] exactly (quadrature of the continuous part plus the atoms)."""
    q = mpmath.mpf(loss.q)
    remove = loss.direction == "remove"
    g = lambda l: mpmath.log(1 - q + q * mpmath.exp(l))
    dens = (lambda l: (1 - q) * pref.pdf_P(l) + q * pref.pdf_Q(l)) if remove else pref.pdf_P
    pts = _panels(loss, la, lb)
    val = _gl(lambda l: g(l) * dens(l), pts) if len(pts) > 1 else mpmath.mpf(0)
    for a in pref.atoms:  # Laplace: P/Q atoms
        if la < a <= lb:
            e = pref.atoms[1]
            wP = mpmath.mpf(1) / 2 if a == -e else mpmath.exp(-e) / 2
            wQ = mpmath.exp(-e) / 2 if a == -e else mpmath.mpf(1) / 2
            w = (1 - q) * wP + q * wQ if remove else wP
            val += w * g(a)
    return val if remove else -val


_PM = [("psg", 0.028, 0.1, "remove", (700.0, 709.5, 709.9, 730.0)),
       ("psg", 0.028, 0.1, "add", (-730.0, -709.9, -700.0, 0.0)),
       ("psl", 800.0, 0.5, "remove", (700.0, 709.9, 790.0, 800.0)),
       ("psl", 800.0, 0.5, "add", (-800.0, -709.9, -700.0, 0.0))]


@pytest.mark.parametrize("kind,param,q,direction,edges", _PM)
def test_partial_mean_across_the_overflow(kind, param, q, direction, edges, kernels):
    pair = _GaussPair(param) if kind == "psg" else _LaplacePair(param)
    loss = SubsampledLoss(pair, q, direction)
    pref = _RefPair.gauss(param) if kind == "psg" else _RefPair.laplace(param)
    e = np.array(edges, dtype=np.float64)
    val, err = loss.partial_mean(e)
    with mpmath.workdps(25):
        qm = mpmath.mpf(q)
        if direction == "remove":
            la, lb = _ginv(mpmath.mpf(e[0]), qm), _ginv(mpmath.mpf(e[-1]), qm)
        else:  # a < -g(L) <= b  <=>  g^-1(-b) <= L < g^-1(-a)
            la, lb = _ginv(-mpmath.mpf(e[-1]), qm), _ginv(-mpmath.mpf(e[0]), qm)
        ref = _quad_pair_mean(loss, pref, la, lb)
    # (the reference is good to ~1e-20 relative: the bound itself is tested)
    assert abs(val - float(ref)) <= err + 1e-15 * abs(float(ref)), (val, float(ref), err)
    if direction == "remove":
        assert float(ref) > 1e-3  # (the window holds mass above 709.78)


@pytest.mark.parametrize("sigma,q", [(0.028, 0.1), (0.03, 1 - 2.0**-53)])
def test_subsampled_gaussian_mean_at_large_losses(sigma, q, kernels):
    pair = _GaussPair(sigma)
    pref = _RefPair.gauss(sigma)
    for d in ("remove", "add"):
        loss = SubsampledLoss(pair, q, d)
        with mpmath.workdps(25):
            ref = _quad_pair_mean(loss, pref, -mpmath.inf, mpmath.inf)
        assert loss.mean() == pytest.approx(float(ref), rel=1e-9, abs=1e-12)


_S = np.concatenate([-np.geomspace(1e-3, 1e6, 25), np.geomspace(1e-3, 1e6, 25)])


_DISCRETE = [F.PureDP(800.0), F.PureDP(1e300), F.RandomizedResponse(800.0, 5), F.ApproxDP(1e300, 1e-3),
             F.CustomPMF([1e300, -700.0], [1.0, 1e-305])]  # (as far below 0 as a pair's loss can go with mass)


@pytest.mark.parametrize("mech", _DISCRETE, ids=repr)
def test_discrete_log_mgf_never_nan(mech):
    for loss in mech.privacy_losses().values():
        K = np.asarray(loss.log_mgf(_S), dtype=np.float64)  # (no overflow warning either: they are errors here)
        assert not np.any(np.isnan(K))
        with mpmath.workdps(30):  # exact: log sum_i p_i e^(s v_i)
            for s, k in zip(_S.tolist(), K.tolist()):
                exact = mpmath.log(mpmath.fsum(mpmath.mpf(p) * mpmath.exp(mpmath.mpf(s) * v)
                                               for v, p in zip(loss.values.tolist(), loss.probs.tolist())))
                if abs(exact) < 1.7e308:
                    assert k >= float(exact) - 1e-9 * abs(float(exact)) - 1e-12, (s, k, float(exact))
                else:  # beyond the float range: the infinity of the right sign
                    assert k == (math.inf if exact > 0 else -math.inf) or k > 1.7e308, (s, k)


@pytest.mark.parametrize("name,loss,ref", _CASES, ids=[c[0] for c in _CASES])
def test_log_mgf_never_nan_and_bounds_integer_orders(name, loss, ref):
    K = np.asarray(loss.log_mgf(_S), dtype=np.float64)
    assert not np.any(np.isnan(K)), name
    assert np.all(K[np.isfinite(K)] > -np.inf)
    if isinstance(loss, SubsampledLoss) and isinstance(loss.pair, _GaussPair) and loss.q > 1e-200:
        # remove: E[e^(sY)] = E_P[(M/P)^(s+1)] = sum_j C(s+1, j) (1-q)^(s+1-j) q^j e^(j (j-1) v / 2)
        sgn = 1 if loss.direction == "remove" else -1
        for s in (1, 2, 3):
            a = s + 1 if sgn > 0 else s  # add, s -> -s: E_P[(M/P)^s]
            with mpmath.workdps(40):
                qm, v = mpmath.mpf(loss.q), 1 / mpmath.mpf(loss.pair.sg) ** 2
                tot = mpmath.fsum(mpmath.binomial(a, j) * (1 - qm) ** (a - j) * qm**j * mpmath.exp(j * (j - 1) * v / 2)
                                  for j in range(a + 1))
                exact = float(mpmath.log(tot))
            k = float(loss.log_mgf(np.array([sgn * float(s)]))[0])
            assert k >= exact * (1 - 1e-12) - 1e-12, (name, s, k, exact)


# ---- end to end: the issue's failing cases --------------------------------------------------
def _psg_delta(eps, sigma, q):
    """Exact delta(eps) of one Poisson-subsampled Gaussian step (max over the two directions)."""
    eps, s, q = mpmath.mpf(eps), mpmath.mpf(sigma), mpmath.mpf(q)
    if eps <= mpmath.log1p(-q):
        dr = 1 - mpmath.exp(eps)
    else:  # remove: Y > eps <=> w > w*, w ~ M, base P = N(0, s^2)
        w = s**2 * _ginv(eps, q) + mpmath.mpf(1) / 2
        dr = (1 - q) * _ncdf(-w / s) + q * _ncdf(-(w - 1) / s) - mpmath.exp(eps) * _ncdf(-w / s)
    da = mpmath.mpf(0)
    if eps < -mpmath.log1p(-q):  # add: Y > eps <=> w < w', w ~ P
        w = s**2 * _ginv(-eps, q) + mpmath.mpf(1) / 2
        da = _ncdf(w / s) - mpmath.exp(eps) * ((1 - q) * _ncdf(w / s) + q * _ncdf((w - 1) / s))
    return max(dr, da)


def _psl_delta(eps, e0, q):
    """Exact delta(eps) of one Poisson-subsampled Laplace step (remove direction; add is 0 above -log(1-q))."""
    eps, e, q = mpmath.mpf(eps), mpmath.mpf(e0), mpmath.mpf(q)
    assert eps > -mpmath.log1p(-q)  # (where the add direction's loss cannot reach)
    l = _ginv(eps, q)
    tail_P = mpmath.mpf(1) if l < -e else mpmath.mpf(0) if l >= e else mpmath.exp(-(l + e) / 2) / 2
    tail_Q = mpmath.mpf(1) if l < -e else mpmath.mpf(0) if l >= e else 1 - mpmath.exp((l - e) / 2) / 2
    return (1 - q) * tail_P + q * tail_Q - mpmath.exp(eps) * tail_P


def _exact_epsilon(delta_fn, target, lo=0.0, hi=5000.0):
    with mpmath.workdps(50):
        lo, hi, target = mpmath.mpf(lo), mpmath.mpf(hi), mpmath.mpf(target)
        for _ in range(80):
            mid = (lo + hi) / 2
            if delta_fn(mid) > target:
                lo = mid
            else:
                hi = mid
        return float((lo + hi) / 2)


def test_reference_values_of_the_issue():
    # (the references themselves: the issue's quoted exact values)
    assert _exact_epsilon(lambda e: _psg_delta(e, 0.028, 0.1), 1e-3) == pytest.approx(717.57, abs=0.01)
    with mpmath.workdps(50):
        assert float(_psl_delta(750, 800, 0.5)) == pytest.approx(0.5, abs=1e-10)
    assert _exact_epsilon(lambda e: _psg_delta(e, 0.026476, 0.001), 1e-5) == pytest.approx(793.28, abs=0.01)


BACKENDS = [b for b in ("native", "numpy") if b in F.available_backends()]


def _contains(b, exact):
    lo, est, up = (float(x) for x in b)
    assert all(map(math.isfinite, (lo, est, up))), b
    assert lo <= exact <= up, (b, exact)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sigma,sens", [(0.028, 1.0), (1.0, 1 / 0.028), (0.027, 1.0), (0.02, 1.0), (0.015, 1.0)])
def test_subsampled_gaussian_epsilon_above_709(backend, sigma, sens):
    exact = _exact_epsilon(lambda e: _psg_delta(e, sigma / sens, 0.1), 1e-3)
    assert exact > 709.78  # (the range that was dropped)
    pld = F.compose(F.PoissonSubsampledGaussian(sigma, 0.1, sensitivity=sens), 1, eps_error=0.1, delta_error=1e-3,
                    backend=backend)
    _contains(pld.epsilon(1e-3), exact)
    # and delta at the exact epsilon's neighbourhood
    for eps in (exact - 5, exact, exact + 5):
        with mpmath.workdps(50):
            d = float(_psg_delta(eps, sigma / sens, 0.1))
        _contains(pld.delta(eps), d)


@pytest.mark.parametrize("backend", BACKENDS)
def test_subsampled_gaussian_q_near_one(backend):
    q = 1 - 2.0**-53
    exact = _exact_epsilon(lambda e: _psg_delta(e, 0.03, q), 1e-3)
    pld = F.compose(F.PoissonSubsampledGaussian(0.03, q), 1, eps_error=0.1, delta_error=1e-3, backend=backend)
    _contains(pld.epsilon(1e-3), exact)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scale,sens", [(1 / 800, 1.0), (1.0, 800.0)])
def test_subsampled_laplace_delta_above_709(backend, scale, sens):
    pld = F.compose(F.PoissonSubsampledLaplace(scale, 0.5, sensitivity=sens), 1, eps_error=0.1, delta_error=1e-6,
                    backend=backend)
    for eps in (700.0, 709.0, 710.0, 750.0, 790.0):
        with mpmath.workdps(50):
            exact = float(_psl_delta(eps, 800.0, 0.5))
        _contains(pld.delta(eps), exact)
    with mpmath.workdps(50):
        assert float(_psl_delta(750.0, 800.0, 0.5)) > 0.49


def test_calibrate_does_not_overshoot_above_709():
    target = 715.0
    s = F.calibrate(lambda p: F.PoissonSubsampledGaussian(p, 0.001), 1, target, 1e-5)
    exact = _exact_epsilon(lambda e: _psg_delta(e, s, 0.001), 1e-5)
    assert exact <= target, (s, exact)
    assert exact > 0.95 * target  # (rtol 1% on the noise: not wildly conservative either)


def test_huge_losses_refused_with_a_named_cause():
    with pytest.raises(ValueError, match="epsilon"):
        F.compose(F.PureDP(1e300), 1, eps_error=0.1, delta_error=1e-6)
    with pytest.raises(ValueError, match="buckets|epsilon|noise"):
        F.compose(F.PoissonSubsampledLaplace(1e-100, 0.5), 1, eps_error=0.1, delta_error=1e-6)
    with pytest.raises(ValueError, match="sigma / sensitivity"):
        F.compose(F.PoissonSubsampledGaussian(1e-100, 0.5), 1, eps_error=0.1, delta_error=1e-6)
    with pytest.raises(ValueError, match="sigma / sensitivity"):
        F.compose(F.PoissonSubsampledGaussian(1.0, 0.5, sensitivity=1e4), 1, eps_error=0.1, delta_error=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gaussian_and_custom_cdf_above_709(backend):
    from scipy import special

    from oracles import gaussian_delta
    mu = 38.0  # Y ~ N(722, 38^2): the mass straddles 709.78
    m = mu * mu / 2
    custom = F.CustomCDF(lambda t: special.ndtr((t - m) / mu), lambda s: s * m + 0.5 * s * s * mu * mu, m, mu,
                         sf=lambda t: special.ndtr((m - t) / mu),
                         pdf=lambda t: np.exp(-0.5 * ((t - m) / mu) ** 2) / (mu * math.sqrt(2 * math.pi)),
                         cdf_rel_error=1e-12)
    for mech in (F.Gaussian(1 / mu), F.Gaussian(1.0, sensitivity=mu), custom):
        pld = F.compose(mech, 1, eps_error=0.1, delta_error=1e-8, backend=backend)
        for eps in (600.0, 709.0, 722.0, 750.0, 800.0):
            _contains(pld.delta(eps), float(gaussian_delta(eps, mu)))


@pytest.mark.parametrize("mech", [F.PureDP(800.0), F.RandomizedResponse(800.0, 5), F.ApproxDP(800.0, 1e-3),
                                  F.CustomPMF([800.0, 0.0, -700.0], [0.75, 0.25, 1e-305])])
def test_discrete_losses_above_709(mech):
    pld = F.compose(mech, 1, eps_error=0.1, delta_error=1e-6)
    losses = mech.privacy_losses()
    for eps in (700.0, 750.0, 799.0):
        with mpmath.workdps(50):
            exact = mpmath.mpf(0)
            for loss in {id(x): x for x in losses.values()}.values():
                d = mpmath.mpf(loss.p_inf)
                for v, p in zip(loss.values.tolist(), loss.probs.tolist()):
                    d += mpmath.mpf(p) * (1 - loss.p_inf) * max(mpmath.mpf(0), 1 - mpmath.exp(mpmath.mpf(eps) - v))
                exact = max(exact, d)
        _contains(pld.delta(eps), float(exact))
