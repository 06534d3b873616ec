"""Exact privacy curves used as independent truth (not computed by fastpld)."""
import math

import numpy as np
from scipy import optimize, special
from scipy.stats import norm


def gaussian_delta(eps, mu):
    """mu-GDP curve (Balle & Wang 2018): Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)."""
    eps = np.asarray(eps, dtype=np.float64)
    a = norm.logcdf(-eps / mu + mu / 2)
    b = eps + norm.logcdf(-eps / mu - mu / 2)
    return np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))


def gaussian_epsilon(delta, mu):
    f = lambda e: gaussian_delta(e, mu) - delta
    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2
    return optimize.brentq(f, 0.0, hi, xtol=1e-13, rtol=1e-13)


def assert_brackets_gaussian(pld, mu, eps, deltas):
    """``pld``'s certified intervals contain the mu-GDP curve's ``delta(eps)`` at every ``eps`` and its ``epsilon``
    at every delta of ``deltas``."""
    eps = np.asarray(eps, dtype=np.float64)
    b = pld.delta(eps)
    exact = gaussian_delta(eps, mu)
    assert np.all(b.lower <= exact) and np.all(exact <= b.upper), (b, exact)
    for delta in deltas:
        e = pld.epsilon(delta)
        assert e.lower <= gaussian_epsilon(delta, mu) <= e.upper, (delta, e)


def _binomial_logs(eps0, k):
    """``(i, log C(k, i), log p, log q)`` of binary randomized response's loss law: ``p = e^eps0 / (1 + e^eps0)`` the
    probability of the loss ``+eps0``, ``q = 1 - p``, ``i = 0..k`` the copies at ``-eps0``."""
    i = np.arange(k + 1)
    lc = special.gammaln(k + 1) - special.gammaln(i + 1) - special.gammaln(k - i + 1)
    return i, lc, -np.logaddexp(0.0, -eps0), -np.logaddexp(0.0, eps0)


def pure_dp_delta(eps, eps0, k):
    """k-fold eps0-DP (binary randomized response), Kairouz-Oh-Viswanath, summed in log space."""
    i, lc, lp, lq = _binomial_logs(eps0, k)
    a = lc + (k - i) * lp + i * lq
    b = lc + eps + i * lp + (k - i) * lq
    with np.errstate(divide="ignore"):
        terms = np.where(a > b, a + np.log(-np.expm1(np.minimum(b - a, 0.0))), -np.inf)
    return float(np.exp(special.logsumexp(terms)))


def approx_dp_delta(eps, eps0, d0, k):
    """k-fold (eps0, d0)-DP's worst case (:class:`fastpld.ApproxDP`: pure eps0 randomized response, and with
    probability d0 an infinite loss): no infinite loss in any copy w.p. (1 - d0)^k, then the binomial curve."""
    keep = math.exp(k * math.log1p(-d0))
    return -math.expm1(k * math.log1p(-d0)) + keep * pure_dp_delta(eps, eps0, k)


def rr_delta(eps, eps0, c, k):
    """k-fold c-ary randomized response (loss +eps0, -eps0, 0 w.p. e^eps0, 1, c - 2 over e^eps0 + c - 1), the
    trinomial law of the numbers of +eps0 and -eps0 copies summed in log space (c = 2: :func:`pure_dp_delta`)."""
    if c == 2:
        return pure_dp_delta(eps, eps0, k)
    lz = math.log(c - 2) - math.log(math.exp(eps0) + c - 1)
    la = eps0 - math.log(math.exp(eps0) + c - 1)
    lb = -math.log(math.exp(eps0) + c - 1)
    i = np.arange(k + 1)[:, None]  # copies at +eps0
    j = np.arange(k + 1)[None, :]  # copies at -eps0
    ok = (i + j <= k) & ((i - j) * eps0 > eps)
    r = np.maximum(k - i - j, 0)
    a = (special.gammaln(k + 1) - special.gammaln(i + 1) - special.gammaln(j + 1) - special.gammaln(r + 1)
         + i * la + j * lb + r * lz)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(ok, a + np.log(-np.expm1(np.minimum(eps - (i - j) * eps0, 0.0))), -np.inf)
    return float(np.exp(special.logsumexp(terms))) if ok.any() else 0.0


def gauss_pure_delta(eps, mu, eps0, k):
    """mu-GDP composed with k-fold eps0-DP: the composed curve is linear in each factor's, ``delta(eps) = E[
    delta_G(eps - Y)]`` over the pure part's binomial loss ``Y = (k - 2 i) eps0`` (``delta_G`` the mu-GDP curve,
    whose formula holds at negative arguments too)."""
    i, lc, lp, lq = _binomial_logs(eps0, k)
    d = gaussian_delta(eps - (k - 2 * i) * eps0, mu)
    return float(np.sum(np.exp(lc + (k - i) * lp + i * lq) * d))


def psl_delta(eps, scale, q):
    """One Poisson-subsampled Laplace step's ``delta(eps)`` (sensitivity 1, add/remove neighbours: the larger of the
    two directions).  The loss is monotone in the sample ``y`` through ``g(y) = (|y| - |y - 1|) / b`` (-1/b up to 0,
    linear to 1/b at 1), so each direction's event ``Y > eps`` is a half-line of ``y`` whose end solves
    ``g(y) = log r``, and its masses are Laplace tails."""
    b = scale

    def sf(y, mu):  # P[Laplace(mu, b) > y]
        return 0.5 * math.exp(-(y - mu) / b) if y >= mu else 1.0 - 0.5 * math.exp((y - mu) / b)

    ee = math.exp(eps)
    # remove: P = (1 - q) Lap(0) + q Lap(1) against Q = Lap(0); Y > eps where g(y) > log r
    r = (ee - (1 - q)) / q
    if r <= 0 or math.log(r) < -1.0 / b:
        dr = 1.0 - ee
    elif math.log(r) >= 1.0 / b:
        dr = 0.0
    else:
        ys = (1.0 + b * math.log(r)) / 2.0
        dr = (1 - q) * sf(ys, 0.0) + q * sf(ys, 1.0) - ee * sf(ys, 0.0)
    # add: P = Lap(0) against Q = (1 - q) Lap(0) + q Lap(1); Y > eps where g(y) < log r'
    r2 = (math.exp(-eps) - (1 - q)) / q
    if r2 <= 0 or math.log(r2) <= -1.0 / b:
        da = 0.0
    elif math.log(r2) > 1.0 / b:
        da = 1.0 - ee
    else:
        ys = (1.0 + b * math.log(r2)) / 2.0
        da = (1 - sf(ys, 0.0)) - ee * ((1 - q) * (1 - sf(ys, 0.0)) + q * (1 - sf(ys, 1.0)))
    return max(dr, da, 0.0)


def laplace_delta(eps, eps0):
    """One Laplace mechanism's curve, ``eps0`` its sensitivity over its scale: ``1 - e^((eps - eps0) / 2)`` on
    ``[0, eps0]``, 0 above."""
    return -math.expm1((eps - eps0) / 2) if eps < eps0 else 0.0


def psg_delta(eps, sigma, q):
    """One Poisson-subsampled Gaussian step's ``delta(eps)`` (add/remove neighbours: the larger of the two
    directions), from the normal CDFs at the loss's inverse: ``Y > eps`` exactly where the Gaussian sample ``w``
    passes ``sigma^2 log((e^(+-eps) - 1 + q) / q) + 1/2`` (tests/test_overflow_sweep.py has it in mpmath)."""
    s2, ee = sigma * sigma, math.exp(eps)
    if ee > 1 - q:  # remove: w ~ (1 - q) N(0, s^2) + q N(1, s^2) against N(0, s^2)
        w = s2 * math.log((ee - 1 + q) / q) + 0.5
        dr = (1 - q) * norm.sf(w / sigma) + q * norm.sf((w - 1) / sigma) - ee * norm.sf(w / sigma)
    else:
        dr = 1 - ee
    em = math.exp(-eps)
    da = 0.0
    if em > 1 - q:  # add: w ~ N(0, s^2) against the mixture, Y > eps where w is below the threshold
        w = s2 * math.log((em - 1 + q) / q) + 0.5
        da = norm.cdf(w / sigma) - ee * ((1 - q) * norm.cdf(w / sigma) + q * norm.cdf((w - 1) / sigma))
    return max(dr, da, 0.0)


def epsilon_of(delta_fn, delta, hi=1.0):
    """The smallest ``eps >= 0`` with ``delta_fn(eps) <= delta`` (``delta_fn`` non-increasing), by bisection to the
    float resolution: the bracket's upper end, where ``delta_fn`` is at most ``delta``."""
    if delta_fn(0.0) <= delta:
        return 0.0
    while delta_fn(hi) > delta:
        hi *= 2
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        if delta_fn(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def exact_power(p, m, bits=320, dtype=np.float64):
    """Normalised coefficients of ``(sum_i p_i x^i)^m`` to ~2^-300 (exact integer arithmetic).

    Fixed point with ``bits`` fractional bits; powers by repeated squaring, each product one
    big-integer multiplication (Kronecker substitution), entries rounded to the fixed point and
    the zero tails trimmed between products.  Each rounding moves an entry by 2^-bits, far below
    what the tests resolve (1e-20).  Returned with all ``(len(p) - 1) m + 1`` entries, in
    ``dtype``: float64 (correctly rounded) or long double (an exact split into two float64 parts).
    """
    from fractions import Fraction
    tot = sum(Fraction(float(x)) for x in p)
    one = 1 << bits
    base = (0, [round(Fraction(float(x)) / tot * one) for x in p])

    def mul(A, B):
        (oa, a), (ob, b) = A, B
        L = len(a) + len(b) - 1
        W = (2 * bits + L.bit_length() + 8 + 7) // 8  # bytes per slot: no carries between slots
        ia = int.from_bytes(b"".join(x.to_bytes(W, "little") for x in a), "little")
        ib = int.from_bytes(b"".join(x.to_bytes(W, "little") for x in b), "little")
        raw = (ia * ib).to_bytes(W * L + W, "little")
        half = 1 << (bits - 1)
        c = [(int.from_bytes(raw[i * W:(i + 1) * W], "little") + half) >> bits for i in range(L)]
        lo = next(i for i, x in enumerate(c) if x)
        hi = L - next(i for i, x in enumerate(reversed(c)) if x)
        return oa + ob + lo, c[lo:hi]

    res = None
    e = m
    while e:
        if e & 1:
            res = base if res is None else mul(res, base)
        e >>= 1
        if e:
            base = mul(base, base)
    off, c = res
    out = np.zeros((len(p) - 1) * m + 1, dtype=dtype)
    if np.dtype(dtype) == np.dtype(np.longdouble):
        two = np.longdouble(2.0)
        for i, x in enumerate(c):  # exact split into two float64-representable parts
            hi = x >> (bits - 53)
            lo = x - (hi << (bits - 53))
            out[off + i] = np.longdouble(float(hi)) * two ** -53 + np.longdouble(float(lo)) * two ** -bits
    else:
        out[off:off + len(c)] = [x / one for x in c]
    return out


def node_tv(out, ref):
    """Total variation between a node's output ``GridPMF`` (mesh 1, ``out.probs[i]`` at index
    ``offset + i``) and the exact coefficient vector ``ref`` (from index 0), in ``ref``'s precision."""
    shift = int(round(out.offset))
    o = np.asarray(out.probs, dtype=ref.dtype)
    full = np.zeros(ref.size, dtype=ref.dtype)
    full[shift: shift + o.size] = o
    return 0.5 * float(np.abs(full - ref).sum())
