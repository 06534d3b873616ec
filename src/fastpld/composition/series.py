"""The low-frequency series: accurate spectra near frequency 0 for large powers.

A node raises each input spectrum ``X`` to the power ``m``; near frequency 0 (``|X| ~ 1``) an FFT's
error ``g`` would grow ``m``-fold.  There the spectrum comes from the inputs' central moments with a
proved error instead (docs/roundoff.md, section 3b); see :func:`_series_spectrum`.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _kernels
from .roundoff import _U64, _ULD, _rounding_gamma


_TWO_PI_LD = _kernels._TWO_PI_LD


_SERIES_R = 48  # degree of the low-frequency series
_SERIES_PHI = 4.0  # used for theta max|j - c| <= 4: remainder <= 4^49 / 49! ~ 5e-34
_SERIES_MIN_ABS = 0.25  # and only while |1 - Z| >= 0.25 holds (Lipschitz constants of log and arg)
_FACT = [float(math.factorial(r)) for r in range(_SERIES_R + 2)]


def _series_spectrum(ins, N, dtype=np.float64, native=True):
    """Accurate low-frequency spectrum of a node: ``(K, L, Phi, dL, dPhi, g_extra, scale)`` or ``None``.

    Why: a node raises each input spectrum ``X`` to the power ``m``; an FFT computes ``X`` to
    an absolute ``g ~ u log N``, and near frequency 0 (``|X| ~ 1``) that error grows ``m``-fold,
    which made large powers need long double and made the round-off charge grow like ``k u``.
    Here, for the frequencies ``theta_k = 2 pi k / N`` with ``theta_k d rho <= 4`` (``d``, a power
    of two, bounds ``|j - cen|`` on the input's support; ``d rho >= max |j - cen - c d|``), the input's
    characteristic function is expanded about its mean ``c d``:
    ``X / mu0 = e^(-i theta c d) (1 - Z')``, ``Z' = -sum_(r>=1) (-i theta d)^r C_r / (r! mu0)``
    with the central moments ``C_r`` of ``s = (j - cen) / d`` (long double pairwise sums and a
    binomial transform), evaluated with a rigorous bound ``dZ`` on ``|Z'~ - Z'|`` (moment
    rounding, Horner rounding, Taylor remainder ``4^49 / 49!``).  The linear phase
    ``m theta c d`` is reduced exactly (integer part modulo ``N``).  Then ``m log|1 - Z'|`` and
    ``m arg(1 - Z')`` carry errors ``~ m dZ`` with ``dZ ~ u |Z'|``: where ``|X|^m`` matters,
    ``m |Z'| = O(1)``, so the error no longer grows with ``m``.  Evaluated in ``dtype``
    (float64 or long double: the node's precision).

    ``native``: the compiled kernels (the numpy backend keeps the numpy reference).

    The spectrum computed for an input is that of ``mu0~ p / mu0`` (its normalised PMF times the
    computed total ``mu0~``): a common scale per input, which the node's normalisation removes
    (``scale`` bounds ``sum m |log(mu0~ / mu0)|``; ``_run_node`` widens ``l1`` by ``1 + 2 scale``).
    The FFT values at the other frequencies approximate the same scaled spectrum within
    ``g + |mu0~ - mu0|``: ``g_extra`` is that addition.  ``L, Phi`` (in ``dtype``) are the summed
    ``m log|X|`` and ``m arg X`` at ``k < K``; ``dL, dPhi`` bound their errors.  ``None`` when
    no frequency qualifies.
    """
    F = N // 2 + 1
    R = _SERIES_R
    W = np.dtype(dtype).type
    u = _U64 if W is np.float64 else _ULD  # working precision of the evaluation
    LD = np.longdouble
    two_pi = W(_TWO_PI_LD) if W is LD else 2 * math.pi
    heads = []
    K = F
    for p, cen, m in ins:
        n = p.size
        tmax = max(cen, n - 1 - cen, 1)
        d = 2.0 ** math.ceil(math.log2(tmax))
        Mld = _kernels.series_moments(np.ascontiguousarray(p), cen, d, R + 3, native)
        if not Mld[0] > 0:
            return None
        c = Mld[1] / Mld[0]  # expansion point (the mean, in units of d); any value is exact below
        rho = (tmax / d + abs(float(c))) * (1 + 1e-12)  # |s_j - c| <= rho
        K = min(K, int(math.floor(_SERIES_PHI * N / (2 * math.pi * d * rho))) + 1)
        heads.append((d, Mld, c, rho))
    if K < 2:
        return None
    K0 = K
    Ltot = np.zeros(K, dtype=W)
    Ptot = np.zeros(K, dtype=W)
    dL = np.zeros(K)
    dP = np.zeros(K)
    absL = np.zeros(K)
    absP = np.zeros(K)
    g_extra = 0.0
    scale = 0.0
    for (p, cen, m), (d, Mld, c, rho) in zip(ins, heads):
        n = p.size
        lev = max(n - 1, 1).bit_length() + _kernels.SERIES_BLOCK + 1
        mu0l = Mld[0]
        mu0 = float(mu0l)
        Kc, d0, Lc, Pc, dLc, dPc, aL, aP = _series_input(Mld, c, rho, d, m, n, N, K0, W, u, lev, two_pi, native)
        if Kc < K:
            K = Kc
            if K < 2:
                return None
        g_extra = max(g_extra, d0)
        scale += m * d0 / (mu0 - d0)
        Ltot = Ltot + Lc
        Ptot = Ptot + Pc
        absL += aL
        absP += aP
        dL += dLc
        dP += dPc
        # the scale: log|mu0~ e^(-i theta c d) (1 - Z')| = log mu0~ + log|1 - Z'|
        ls = W(m) * W(np.log(mu0l))  # |log mu0~| ~ u: its rounding is negligible
        Ltot = Ltot + ls
        absL += abs(float(ls))
        dL += 4 * u * abs(float(ls))
    C = len(ins)
    dL = dL + _rounding_gamma(2 * C, u) * absL
    dP = dP + _rounding_gamma(2 * C, u) * absP
    if scale > 1e-6:
        return None
    return K, Ltot[:K], Ptot[:K], dL[:K], dP[:K], g_extra, scale


def _series_input(Mld, c, rho, d, m, n, N, K0, W, u, lev, two_pi, native=True):
    """One input's terms of :func:`_series_spectrum`: ``(K, d0, L, Phi, dL, dPhi, |L|, |Phi|)``.

    ``K``: the first frequency where ``|1 - Z'| - dZ < 1/4`` (``K0`` if none); the arrays have
    ``K0`` entries, valid below ``K``.  Compiled (``_core.series_input``) when built and ``native``
    (the numpy backend keeps this numpy reference).
    """
    R = _SERIES_R
    uld = _ULD
    LD = np.longdouble
    fact_ld, fact, binom = _SERIES_CONST
    hor_g = _SERIES_HOR[W is LD]
    if native and _kernels._core is not None:
        L = np.zeros(K0, dtype=W)
        P = np.zeros(K0, dtype=W)
        dL, dP, aL, aP = np.zeros(K0), np.zeros(K0), np.zeros(K0), np.zeros(K0)
        Kc, d0 = _kernels.series_input(Mld, np.array([c], dtype=LD), float(rho), float(d), float(m), int(n),
                                       int(N), fact_ld, fact, binom, hor_g, _SERIES_GC, float(u), float(uld),
                                       int(lev), _FACT[R + 1], np.array([two_pi], dtype=W), L, P, dL, dP, aL, aP)
        return Kc, d0, L, P, dL, dP, aL, aP
    a, cerr, d0 = _series_coeffs(Mld, c, n, W, u, lev)
    re, im, dz = _kernels.series_eval(a, cerr, W(two_pi * W(d) / W(N)), rho, _FACT[R + 1], K0, native)
    Kc, Lc, Ph, dLc, dPc, aL, aP = _series_finish(re, im, dz, c, d, m, N, K0, W, u, two_pi)
    return Kc, d0, Lc, Ph, dLc, dPc, aL, aP


def _series_coeffs(Mld, c, n, W, u, lev):
    """The series coefficients ``a_r`` of :func:`_series_input` (in ``W``), their error weights (coefficient
    errors plus Horner rounding, for ``series_eval``) and ``d0 >= |mu0~ - mu0|``."""
    R = _SERIES_R
    uld = _ULD
    LD = np.longdouble
    fact_ld, fact, binom = _SERIES_CONST
    hor_g = _SERIES_HOR[W is LD]
    mu0l = Mld[0]
    mu0 = float(mu0l)
    # |mu0~ - mu0| of the compensated long double sum (mu0~ is the series' scale): u + gamma_(2n)^2
    d0 = 1.02 * (uld + _rounding_gamma(2 * n + 2, uld) ** 2) * mu0
    # |M~_i - M_i| <= gamma_(i + lev) A_i, A_i >= sum p |s|^i: even i from M_i itself, odd i by
    # Cauchy-Schwarz sqrt(A_(i-1) A_(i+1))
    gi = _rounding_gamma(np.arange(R + 3.0) + lev, uld)
    Mf = Mld.astype(np.float64)
    A = np.empty(R + 3)
    A[0::2] = Mf[0::2] * (1 + 1.01 * gi[0::2])
    A[1::2] = np.sqrt(A[0:-1:2] * A[2::2]) * 1.01  # R even: A has R + 3 entries
    A = np.minimum(A, mu0 + d0)  # |s| <= 1
    e = (gi * A)[: R + 1]
    # M_0, M_1 are compensated sums (their errors would grow with m: a mean shift)
    g2 = _rounding_gamma(2 * n + 2, uld) ** 2
    e[:2] = 1.01 * (uld * np.abs(Mf[:2]) + g2 * A[:2])
    # central moments about c by the binomial transform (long double), with their errors
    Mld = Mld[: R + 1]
    pc = np.cumprod(np.concatenate([[LD(1)], np.full(R, -c, dtype=LD)]))  # (-c)^r, r roundings
    # row r of the lower-triangular binomial matrix times M_i (-c)^(r - i) (zeros above the diagonal)
    shift = np.zeros((R + 1, R + 1), dtype=LD)
    idx = np.arange(R + 1)
    diff = idx[:, None] - idx[None, :]
    low = diff >= 0
    shift[low] = pc[diff[low]]
    terms = binom * shift * Mld[None, :]
    Cm = terms.sum(axis=1)
    magf = np.abs((binom * shift).astype(np.float64))
    eC = magf @ e + _SERIES_GC * np.abs(terms.astype(np.float64)).sum(axis=1)
    # series coefficients of Z' (|C_r| relative rounding of the division/cast in da)
    a = (Cm / (mu0l * fact_ld)).astype(W)
    af = np.abs(a.astype(np.float64))
    da = 1.01 * (1.01 * eC + np.abs(Cm.astype(np.float64)) * d0 / mu0) / (mu0 * fact) + 5 * u * af
    # Horner in phi^2 (relative error of phi <= 3 u, in hor_g): Re Z' = a2 phi^2 - a4 phi^4 + ...,
    # Im Z' = a1 phi - a3 phi^3 + ...; dz adds the coefficient errors, Horner rounding and the
    # Taylor remainder 1.01 (phi rho)^(R+1) / (R+1)!  (|s - c| <= rho)
    return a, da + hor_g * af, d0


def _series_finish(re, im, dz, c, d, m, N, K0, W, u, two_pi):
    """From ``Z' = re + i im`` (``|Z'~ - Z'| <= dz``) at ``k < K0``: ``(K, L, Phi, dL, dPhi, |L|, |Phi|)`` of
    :func:`_series_input` (``m log|1 - Z'|``, ``m arg(1 - Z')`` plus the linear phase of the centre ``c d``)."""
    uld = _ULD
    LD = np.longdouble
    k = np.arange(K0).astype(W)
    kk = np.arange(K0, dtype=np.int64)
    wre = 1 - re
    wabs = np.hypot(wre, im).astype(np.float64)
    gap = wabs * (1 - 10 * u) - dz  # (hypot within 4 ulp, and 1 - Re's rounding)
    bad = np.flatnonzero(~(gap >= _SERIES_MIN_ABS))
    Kc = int(bad[0]) if bad.size else K0
    # log |1 - Z'| = log1p(v) / 2, v = Im^2 - Re (2 - Re); |log|w'| - log|w|| <= |w' - w| / min |w|
    v = im * im - re * (2 - re)
    with np.errstate(divide="ignore", invalid="ignore"):  # only k < K (|1 - Z'| >= 1/4) is used
        lw = np.log1p(v) / 2
        ref, imf, lwf = np.abs(re.astype(np.float64)), np.abs(im.astype(np.float64)), np.abs(lw.astype(np.float64))
        den = 0.99 * gap * gap
        # (+ log1p's rounding: 4 ulp = 8 u relative, docs/roundoff.md section 7)
        dlw = dz / gap + 0.5 * _rounding_gamma(4, u) * (ref * (2 + ref) + imf * imf) / den + 8 * u * lwf
        ph = np.arctan2(-im, wre)
        # (rounding 1 - Re moves w along the real axis: the angle moves by |Im| |dw| / |w|^2)
        dph = (math.pi / 2) * dz / gap + u * (1 + ref) * imf / (gap * gap) + 8 * u * np.abs(ph.astype(np.float64))
    # linear phase -m theta c d of the shift to c: T = m c d (long double; d a power of two),
    # T = Ti + Tf with Ti an integer whose phase 2 pi (k Ti mod N) / N is reduced exactly
    T = LD(m) * c * LD(d)
    Ti = int(np.rint(T))
    Tf = W(T - LD(Ti))
    step = W(two_pi / W(N))
    lin = -step * ((kk * Ti) % N).astype(W) - step * k * Tf
    dlin = 8 * u * (2 * math.pi) + (2 * math.pi / N) * kk * (2 * uld * abs(float(T)) + 4 * u * abs(float(Tf)))
    Lc = W(m) * lw
    mph = W(m) * ph
    aL = np.abs(Lc.astype(np.float64))
    aP = np.abs(mph.astype(np.float64)) + np.abs(lin.astype(np.float64))
    dLc = 1.01 * m * dlw + 2 * u * aL
    dPc = 1.01 * m * dph + 2 * u * np.abs(mph.astype(np.float64)) + 1.01 * dlin
    return Kc, Lc, mph + lin, dLc, dPc, aL, aP


_SERIES_CONST = (
    np.array([math.factorial(r) for r in range(_SERIES_R + 1)], dtype=np.longdouble),
    np.array([float(math.factorial(r)) for r in range(_SERIES_R + 1)]),
    np.array([[math.comb(r, i) for i in range(_SERIES_R + 1)] for r in range(_SERIES_R + 1)], dtype=np.longdouble),
)
# Horner rounding per coefficient, float64 / long double: a_r passes <= r + 2 roundings of the
# Horner steps, and phi (relative error 3 u) enters as phi^r, x = phi^2 (7 u) as x^(r/2): <= 5r + 2
_SERIES_HOR = {False: np.array([_rounding_gamma(6 * r + 8, _U64) for r in range(_SERIES_R + 1)]),
               True: np.array([_rounding_gamma(6 * r + 8, _ULD) for r in range(_SERIES_R + 1)])}
# rounding of the binomial transform (products and the sum of row r), long double
_SERIES_GC = np.array([_rounding_gamma(3 * r + 3, _ULD) for r in range(_SERIES_R + 1)])


def _series_amp(ser, u_node):
    """``(lp_low, amp_low)`` of :func:`_fp_fft_bound` at the series frequencies for a node in ``u_node``.

    ``|exp(L~) cis(Phi~) - exp(L) cis(Phi)| <= e^L~ (expm1(dL) + e^dL dPhi)``, plus the polar
    evaluation in the node's precision (``exp``, reduction mod 2 pi, ``cos``, ``sin``, products).
    """
    K, L, P, dL, dP = ser[:5]
    L = L.astype(np.float64)
    P = P.astype(np.float64)
    with np.errstate(over="ignore", under="ignore"):
        amp = 1.01 * np.exp(L) * (np.expm1(dL) + np.exp(dL) * dP + 8 * u_node * (5 + np.abs(P) + np.abs(L)))
    return L + dL, amp


# --------------------------------------------------------------------------------------
# Split series: a bulk by its moments, a thin far tail by a long double FFT (docs/roundoff.md, 3g)
# --------------------------------------------------------------------------------------
_SPLIT_GAIN = 4.0  # split only where the estimated spectral error drops at least this much


def _split_choice(p, cen, m, N, g, backend, k_series=0, predict_u=None):
    """The bulk ``[a, b)`` of a single-input node for :func:`_split_series_spectrum`, or ``None``.

    Only a choice (the bound is computed afterwards, whatever it is): from the float64 magnitudes
    ``r`` of the input's spectrum, the plain bound's error at frequency ``k`` is ``m g (r + g)^(m-1)``;
    a bulk of half-width ``R`` covers the frequencies ``theta d rho <= 4`` of its series (``d rho ~ R``)
    and leaves there ``m g tau (r + g)^(m-1)`` (``tau``: the tail's mass, whose FFT error stays ``g tau``),
    the plain error beyond.  The half-width (steps of ``sqrt 2``) with the least estimated l2 error, if it
    is ``_SPLIT_GAIN`` times below the plain error past ``k_series`` (the ordinary series' reach, if any) and
    that error is at least half the inverse FFT's ``g ||P||_2`` (else the split would not pay).

    ``predict_u``: a float64 node's unit round-off; then ``(bulk, err)`` with the best bulk (or ``None``)
    and an estimate of the node's ``l1`` round-off with the split: the split's spectral error above,
    plus the inverse FFT's ``g |P|`` and the polar evaluation's relative error (section 3) at every
    frequency, in the ``l2`` norm that Parseval turns into the ``l1`` bound.  Only a prediction: the node
    decides on it between float64 and long double and charges what it measures.
    """
    pf = np.ascontiguousarray(p, dtype=np.float64)
    n = pf.size
    tmax = max(cen, n - 1 - cen, 1)
    if tmax < 8:
        return None if predict_u is None else (None, math.inf)
    F = N // 2 + 1
    r = backend.abs_rfft(pf, cen, N, np.empty(F))  # (placed straight into the plan's buffer where native)
    w = np.full(F, 2.0)
    w[0] = 1.0
    if N % 2 == 0:
        w[-1] = 1.0
    with np.errstate(divide="ignore", under="ignore"):
        pw = w * np.exp(2.0 * (m - 1) * np.log(r + g))
    pre = np.concatenate([[0.0], np.cumsum(pw)])  # pre[K] = sum_(k < K)
    suf = (m * g) ** 2 * (pre[-1] - pre)  # plain error^2 from K on
    cs = np.concatenate([[0.0], np.cumsum(pf)])
    t = np.arange(n, dtype=np.float64) - cen
    ct = np.concatenate([[0.0], np.cumsum(pf * t)])
    best = (suf[0], None)
    R = 4.0
    while R < tmax:
        Ri = int(R)
        a, b = max(0, cen - Ri), min(n, cen + Ri + 1)
        mB = cs[b] - cs[a]
        tau = max(cs[n] - mB, 0.0)
        if mB > 0:
            mu = (ct[b] - ct[a]) / mB
            tB = max(cen - a, b - 1 - cen, 1)
            d = 2.0 ** math.ceil(math.log2(tB))
            K = min(F, int(math.floor(_SERIES_PHI * N / (2 * math.pi * (tB + abs(mu) + 1)))) + 1)
            est = (m * g * tau) ** 2 * pre[K] + suf[K]
            if est < best[0]:
                best = (est, (a, b), K)
        R *= math.sqrt(2.0)
    if predict_u is not None:
        if best[1] is None:
            return None, math.inf
        with np.errstate(divide="ignore", under="ignore"):
            lr = np.log(np.maximum(r, 1e-300))
            # |X^m| times the inverse FFT's g and the evaluation's relative rounding: a few u in the series'
            # reach (m |Z'| = O(1) there), the polar form's 1.01 u (12 m (|log r| + pi/4) + 8 m + 40) beyond
            rel = g + 1.01 * predict_u * (12.0 * m * (np.abs(lr) + 0.7854) + 8.0 * m + 40.0)
            rel[:best[2]] = g + 16.0 * predict_u
            inv = float(np.sum(w * np.exp(2.0 * m * lr) * rel * rel))
        return best[1], math.sqrt(best[0]) + math.sqrt(inv)
    # (and only where that error matters: at least half the inverse FFT's g ||P||_2, which stays)
    with np.errstate(under="ignore"):
        inv2 = g * g * float(np.sum(w * np.exp(2.0 * m * np.log(np.maximum(r, 1e-300)))))
    rest = suf[min(k_series, F)]
    if best[1] is None or best[0] * _SPLIT_GAIN ** 2 > rest or rest < 0.25 * inv2:
        return None
    return best[1]


def _tail_mass(p, a, b, native=True):
    """``(S, dS)``: the mass of ``p`` outside ``[a, b)`` by compensated long double sums, and a bound on its error."""
    S = np.longdouble(0)
    dS = 0.0
    for lo, hi in ((0, a), (b, p.size)):
        if hi > lo:
            M = _kernels.series_moments(np.ascontiguousarray(p[lo:hi]), 0, 1.0, 2, native)
            S = S + M[0]
            dS += 1.02 * (_ULD + _rounding_gamma(2 * (hi - lo) + 2, _ULD) ** 2) * float(M[0])
    return S, dS + _ULD * float(S)


def _split_series_spectrum(ins, N, dtype, backend, g, native=True, k_series=0, bulk=None):
    """The low-frequency series of a single-input node whose input has a thin, wide tail (the
    subsampled losses at small ``q``: a narrow bulk and a tail to the window's end), in the format of
    :func:`_series_spectrum`, or ``None``.

    The series needs ``theta d rho <= 4`` over the input's whole support, which a tail to the window's end
    shrinks to a few frequencies, while ``|X|^m`` matters over thousands.  Split (docs/roundoff.md, 3g):
    ``X = X_B + X_T`` with the bulk ``B = [a, b)`` (:func:`_split_choice`) and the tail ``T`` (mass
    ``S_T``).  About the bulk's mean ``c d``, ``1 - Z' = e^(i theta c d) X / mu0`` with
    ``mu0 Z' = mu0_B Z'_B + S_T - e^(i theta c d) X_T``: ``Z'_B`` from the bulk's moments (the series,
    with its proved bound), ``S_T`` a compensated sum, ``X_T`` an FFT of the tail alone (long double; float64
    in a float64 node), within ``g_T = (12 u log2 N + gamma_folds) S_T`` at that FFT's ``u`` (the FFT model
    of section 3 on an input of mass ``S_T``).  The error of ``Z'`` is then ``~ g_T``, not ``g``: ``m g S_T`` instead of ``m g`` where
    ``|X|^m`` matters.  The rest (``m log|1 - Z'|``, ``m arg``, the linear phase) is the series'
    (:func:`_series_finish`).  ``g``: the node's plain forward error; ``k_series``: the reach of the ordinary
    series where the node has it (both for the choice only). ``bulk``: the bulk, where the node chose it
    (:func:`_split_choice`) already.
    """
    if len(ins) != 1:
        return None
    p, cen, m = ins[0]
    ab = bulk if bulk is not None else _split_choice(p, cen, m, N, g, backend, k_series)
    if ab is None:
        return None
    a, b = ab
    R = _SERIES_R
    W = np.dtype(dtype).type
    u = _U64 if W is np.float64 else _ULD
    uld = _ULD
    LD = np.longdouble
    two_pi = W(_TWO_PI_LD) if W is LD else 2 * math.pi
    F = N // 2 + 1
    # the bulk's series (as _series_spectrum's, on the bulk alone)
    pB = np.ascontiguousarray(p[a:b])
    nB = pB.size
    cB = cen - a
    tB = max(cB, nB - 1 - cB, 1)
    d = 2.0 ** math.ceil(math.log2(tB))
    Mld = _kernels.series_moments(pB, cB, d, R + 3, native)
    if not Mld[0] > 0:
        return None
    c = Mld[1] / Mld[0]
    rho = (tB / d + abs(float(c))) * (1 + 1e-12)
    K0 = min(F, int(math.floor(_SERIES_PHI * N / (2 * math.pi * d * rho))) + 1)
    if K0 < 2:
        return None
    lev = max(nB - 1, 1).bit_length() + _kernels.SERIES_BLOCK + 1
    coef, cerr, d0B = _series_coeffs(Mld, c, nB, W, u, lev)
    reB, imB, dzB = _kernels.series_eval(coef, cerr, W(two_pi * W(d) / W(N)), rho, _FACT[R + 1], K0, native)
    # the tail: its mass and its spectrum (long double FFT of the input with the bulk removed)
    ST, dST = _tail_mass(p, a, b, native)
    mu0B = Mld[0]
    mu0 = mu0B + ST
    STf, mu0Bf, mu0f = float(ST), float(mu0B), float(mu0)
    d0 = d0B + dST + uld * mu0f  # |mu0~ - mu0|
    # (in a float64 node a float64 FFT, at float64's g_T: a long double input read into it is rounded once
    # per entry, relative u64, at most u64 S_T on every frequency)
    TD = np.float64 if W is np.float64 else LD
    ut = _U64 if TD is np.float64 else uld
    tail = np.array(p, dtype=TD)
    tail[a:b] = 0
    buf = np.empty(N, dtype=TD)
    _kernels.fold(tail, cen, buf)
    XT = backend.rfft(buf, N)[:K0]
    folds = -(-p.size // N)
    lg = math.ceil(math.log2(max(N, 2)))
    cast = ut if (TD is np.float64 and np.asarray(p).dtype == LD) else 0.0
    gT = 1.01 * (12.0 * ut * lg + _rounding_gamma(folds, ut) + cast) * (STf + dST)
    # rotation e^(i theta_k c d) (angle: 3 roundings and 2 pi's 2 ulp = 4 u, <= 7 u |angle| to first order;
    # cosl / sinl within 4 ulp each: 8 u per component)
    kk = np.arange(K0)
    ang = (LD(_TWO_PI_LD) * (kk.astype(LD) * (c * LD(d)))) / LD(N)
    cr, sr = np.cos(ang), np.sin(ang)
    xr, xi = XT.real.astype(LD), XT.imag.astype(LD)
    yr = xr * cr - xi * sr
    yi = xr * sr + xi * cr
    absX = (np.abs(xr.astype(np.float64)) + np.abs(xi.astype(np.float64))) * (1 + 1e-12)
    # |Y~ - Y| <= g_T |rot| + |X~| |rot~ - rot| + the complex product's roundings (2 per component)
    dY = 1.01 * (gT + absX * (8 * uld * np.abs(ang.astype(np.float64)) + 12 * uld + 4.04 * uld))
    # mu0 Z' = mu0_B Z'_B + S_T - Y (long double), then / mu0~
    reBl, imBl = reB.astype(LD), imB.astype(LD)
    nre = mu0B * reBl + (ST - yr)
    nim = mu0B * imBl - yi
    re = nre / mu0
    im = nim / mu0
    zB = np.abs(reB.astype(np.float64)) + np.abs(imB.astype(np.float64)) + dzB
    dnum = (mu0Bf * dzB + zB * d0B + dST + dY
            + 3.03 * uld * (mu0Bf * (np.abs(reBl.astype(np.float64)) + np.abs(imBl.astype(np.float64))) + STf
                            + np.abs(yr.astype(np.float64)) + np.abs(yi.astype(np.float64))))
    anum = np.abs(nre.astype(np.float64)) + np.abs(nim.astype(np.float64)) + dnum
    rw, iw = re.astype(W), im.astype(W)
    az = np.abs(re.astype(np.float64)) + np.abs(im.astype(np.float64))
    dz = 1.01 * (dnum / mu0f + anum * d0 / (mu0f * (mu0f - d0)) + uld * az + u * az)
    Kc, Lc, Ph, dLc, dPc, aL, aP = _series_finish(rw, iw, dz, c, d, m, N, K0, W, u, two_pi)
    if Kc < 2:
        return None
    scale = m * d0 / (mu0f - d0)
    if scale > 1e-6:
        return None
    ls = W(m) * W(np.log(mu0))
    L = Lc + ls
    absL = aL + abs(float(ls))
    dL = dLc + 4 * u * abs(float(ls)) + _rounding_gamma(2, u) * (absL)
    dP = dPc + _rounding_gamma(2, u) * aP
    return Kc, L[:Kc], Ph[:Kc], dL[:Kc], dP[:Kc], d0, scale
