"""Round-off bounds of a node: the FFT power's error and the total variation it is charged.

docs/roundoff.md has the model (sections 3 and 7); :func:`_fp_fft_bound` is the plain polar power's
bound, :func:`_node_tv` turns an l1 bound on a node's unnormalised output into its charge.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _kernels


_U64 = np.finfo(np.float64).eps / 2
_ULD = float(np.finfo(np.longdouble).eps) / 2


def _polar_rel(cond, msum, C, u):
    """Relative error of a polar power ``prod_c X_c^m_c = exp(L) cis(Phi) i^Q`` from the rounding of its
    evaluation (docs/roundoff.md sections 3 and 7): ``cond = sum_c m_c (|log|X_c|| + |psi_c|)``,
    ``msum = sum_c m_c``, ``C`` inputs, every maths-library call (``|X|``, ``log``, ``atan2``, ``exp``,
    ``cos``, ``sin``) within 4 ulp (8 u relative): ``m log|X|`` errs by ``m (8 u + 9 u |log|X||)``, ``m psi``
    by ``9 u m |psi|``, the sums over inputs by ``(C - 1) u`` of their terms' magnitudes, ``exp`` and
    ``cis`` by ``8 u`` each, the products by ``1.5 u``, the reduction mod ``2 pi`` by ``20 u + 2.6 u |Phi|``
    (at most 2 ulp in ``2 pi`` per multiple, one rounding): ``u ((11 + C) cond + 8 msum + 37.5)`` to first
    order, and 1.01 for the higher orders (the relative error is far below 0.02)."""
    return 1.01 * u * ((11 + C) * cond + 8 * msum + 40)


def _dyadic(x) -> tuple:
    """A finite float, or an exact ``(n, e)`` pair, as ``(n, e)``: the rational ``n / 2^e`` (every float is an
    integer over a power of two)."""
    if isinstance(x, tuple):
        return x
    n, d = float(x).as_integer_ratio()
    return n, d.bit_length() - 1


def _dyadic_sum(terms) -> tuple:
    """``sum k x`` over ``terms`` (pairs of an integer ``k`` and a finite float or ``(n, e)`` pair ``x``),
    exactly, as ``(n, e)`` (:func:`_dyadic`)."""
    parts = []
    for k, x in terms:
        n, e = _dyadic(x)
        parts.append((int(k) * n, e))
    e = max(p[1] for p in parts)
    return sum(n << (e - ei) for n, ei in parts), e


def _dyadic_ratio(a, b):
    """``a / b`` (floats or ``(n, e)`` pairs, ``b != 0``) if it is an integer, else ``None``."""
    na, ea = _dyadic(a)
    nb, eb = _dyadic(b)
    if nb == 0:
        return None
    # a / b = (na / nb) 2^(eb - ea)
    num, den = (na << (eb - ea), nb) if eb >= ea else (na, nb << (ea - eb))
    q, r = divmod(num, den)
    return q if r == 0 else None


def _rounded(x: tuple, direction: int) -> float:
    """The float nearest the exact ``(n, e)`` pair ``x`` (:func:`_dyadic`), moved by one ulp where needed to lie
    at or above it (``direction > 0``) or at or below it (``direction < 0``)."""
    n, e = x
    f = n / (1 << e)  # (correctly rounded)
    fn, fd = f.as_integer_ratio()
    c = fn * (1 << e) - n * fd  # (the sign of f - exact)
    if direction > 0 and c < 0:
        f = math.nextafter(f, math.inf)
    elif direction < 0 and c > 0:
        f = math.nextafter(f, -math.inf)
    return f


def _dyadic_error(terms, value: float) -> float:
    """``|value - sum k x|`` (:func:`_dyadic_sum`), rounded up."""
    diff = _dyadic_sum([(1, value)] + [(-k, x) for k, x in terms])
    up, down = _rounded(diff, 1), _rounded(diff, -1)
    return up if down >= 0 else (-down if up <= 0 else max(up, -down))


def _rounding_gamma(k, u):
    """Higham's ``gamma_k = k u / (1 - k u)``: the relative error bound of ``k`` roundings of unit ``u``."""
    return k * u / (1.0 - k * u)


def _pairwise_roundings(n: int) -> int:
    """The roundings a term passes through in numpy's pairwise sum of ``n`` terms (and in ``_core``'s and
    ``_dominance``'s replicas of it): at most ``ceil(log2 n) + 19``.  Blocks of at most 128 terms are summed by 8
    accumulators of at most 16 terms each, combined by a tree of 3 additions and followed by at most 7 more (25
    additions at most), and each halving of a longer sum adds one (docs/roundoff.md, section 3)."""
    return math.ceil(math.log2(max(n, 2))) + 19


def _pairwise_gamma(n: int, u: float = _U64) -> float:
    """The relative error bound of numpy's pairwise sum of ``n`` non-negative terms: ``gamma`` of
    :func:`_pairwise_roundings` (Higham, section 4.2)."""
    return _rounding_gamma(_pairwise_roundings(n), u)


def _fp_fft_bound(specs, N, u, g_extra=0.0, low=None, fwd=None, detail=False):
    """Bound on ||computed - exact||_1 of irfft(prod X_c^m_c) (see module docstring).

    ``specs``: list of (X_computed, m).  ``low = (K, lp_low, amp_low)`` replaces the bound
    terms of the first ``K`` frequencies (accurate series, :func:`_series_spectrum`);
    ``g_extra`` widens the FFT error of the others (the series' scale).  ``fwd = (g, u_pol)``
    (float64 forward FFTs in a long double node, :func:`fastpld._fft_error._fwd_error`): the forward
    error and the polar rounding of the spectra; the inverse stays ``12 u log2 N`` with the node's ``u``.
    Returns (l1_bound, linf_bound), and with ``detail`` also the spectral error ``e2`` and ``||P||_2``.
    """
    g = 12.0 * u * math.ceil(math.log2(max(N, 2))) + g_extra
    g_inv = g
    if fwd is not None:
        g_inv = 12.0 * u * math.ceil(math.log2(max(N, 2)))
        g, u = fwd
    log_prod = 0.0
    amp = 0.0
    logs = []
    for X, m in specs:
        r = np.abs(X).astype(np.float64)
        with np.errstate(divide="ignore"):
            lr = np.log(r)
            lrg = np.log(r + g)
        logs.append((lr, lrg, m, _kernels.quarter_angle(X)[0].astype(np.float64)))  # psi: arg X mod pi/2
        log_prod = log_prod + m * lrg
    # derivative term: sum_c m_c (r_c+g)^(m_c-1) g prod_{c' != c} (r_c'+g)^(m_c')
    with np.errstate(over="ignore", invalid="ignore"):
        for lr, lrg, m, ph in logs:
            amp = amp + m * g * np.exp(log_prod - lrg)
        # rounding of the power itself (polar form, every maths-library call within 4 ulp = 8 u, docs/roundoff.md
        # section 7): relative error <= 1.01 u ((11 + C) sum m (|log r| + |psi|) + 8 sum m + 40)
        prod_r = np.exp(sum(m * lr for lr, _, m, _ in logs))
        cond = sum(m * (np.abs(np.where(np.isfinite(lr), lr, 0.0)) + np.abs(ph)) for lr, _, m, ph in logs)
        amp = amp + _polar_rel(cond, sum(m for *_, m, _ in logs), len(logs), u) * prod_r
    amp = np.where(np.isfinite(amp), amp, 0.0)
    if low is not None:
        K, lp_low, amp_low = low
        amp = np.array(amp, dtype=np.float64)
        amp[:K] = amp_low
        log_prod = np.array(log_prod, dtype=np.float64)
        log_prod[:K] = lp_low
    w = np.full(amp.shape, 2.0)
    w[0] = 1.0
    if N % 2 == 0:
        w[-1] = 1.0
    e2 = math.sqrt(float(np.sum(w * amp**2)))
    p2 = math.sqrt(float(np.sum(w * np.exp(2 * log_prod))))  # >= ||P||_2 (full spectrum)
    l2 = (e2 + g_inv * p2) / math.sqrt(N)
    if detail:
        return e2 + g_inv * p2, l2, e2, p2
    return e2 + g_inv * p2, l2


def _node_tv(removed, N, u):
    """Total variation charged for one node instance whose clipped, trimmed output is within
    ``removed`` (l1) of the exact unnormalised result ``y`` (docs/roundoff.md, section 3).

    With ``a`` the clipped output, ``||a - y||_1 <= E`` and ``S = sum a``, ``|S - sum y| <= E``:
    ``||a / S - y / sum y||_1 <= E / S + |sum y - S| / S <= 2 E / S``, so the total variation
    (half the l1 distance) is at most ``E / S`` with ``S >= sum y - E >= 0.99 - E`` (the inputs'
    sums are 1 up to their last roundings).  The normalisation itself (numpy's pairwise sum,
    at most ``ceil(log2 N) + 19`` roundings, and one division per entry) moves every entry by a
    relative ``gamma_(ceil(log2 N) + 24)`` at most: half of that in total variation, charged in
    full.  (A long double output that a float64 FFT reads is rounded entrywise: charged to that
    FFT's error, :func:`fastpld._fft_error._fwd_error`; the final result's cast in :func:`_execute`.)"""
    tv = removed / (0.99 - removed) if removed < 0.5 else 1.0
    return tv + _rounding_gamma(_pairwise_roundings(N) + 5, u)
