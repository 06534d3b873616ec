"""Lattice spectra: accurate ``m log|X|`` and ``m arg X`` at every frequency for few-bucket inputs.

Large powers of lattice-like inputs (a few large atoms, e.g. Laplace or pure DP leaves at large
``k``) have spectral peaks far from frequency 0, where the low-frequency series does not reach;
their direct DFTs are turned into log-magnitudes and phases with a small relative error
(docs/roundoff.md, section 3f).  Also the reusable per-thread scratch arrays of such nodes.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _kernels, resources
from .roundoff import _U64, _ULD, _rounding_gamma


_TRIU: dict = {}  # n -> read-only np.triu_indices(n, 1), for n <= _TRIU_MAX (direct-DFT inputs have <= 32 masses)
_TRIU_MAX = 64


def _lag_sums(q, t, W):
    """``(a, lags, cnt)`` of :func:`_lattice_spectrum`: the distinct lags ``d = |t_j - t_l| > 0`` of the pairs
    ``j < l`` (ascending), how many pairs have each, and ``a_d = sum q_j q_l`` over them in ``W``, accumulated
    in the pairs' row-major order (as ``np.unique`` and ``np.add.at``; a bincount over the lags instead of a
    sort: the offsets are distinct integers)."""
    n = q.size
    tri = _TRIU.get(n)
    if tri is None:
        tri = np.triu_indices(n, 1)
        for x in tri:
            x.setflags(write=False)
        if n <= _TRIU_MAX:
            tri = _TRIU.setdefault(n, tri)
    jj, ll = tri
    d = np.abs(t[jj] - t[ll])
    full = np.bincount(d)
    lags = np.flatnonzero(full)
    inv = (np.cumsum(full > 0) - 1)[d]
    a = np.zeros(lags.size, dtype=W)
    np.add.at(a, inv, q[jj] * q[ll])
    return a, lags.astype(np.int64), full[lags]


# entries per array kept (larger ones are allocated per call): a lattice node's nine arrays then hold at most
# 2^16 (16 + 16 + 1 + 6 x 8) bytes = 5.3 MB per workspace (Laplace at k = 2^30 needs 8193 entries)
_SCRATCH_MAX = 1 << 16


def _scratch(name, n, dtype):
    """This workspace's reusable array ``name`` of ``n`` entries of ``dtype``, contents undefined: for a
    node's temporaries that are consumed before the node ends (the next request of ``name`` in this
    workspace, which one thread uses at a time, returns the same memory unless it was evicted).  Why:
    large temporaries allocated afresh per node come back as new pages whenever the C allocator has
    returned its free memory to the system in between (a mixed workload does; docs/performance.md has the
    page faults of Laplace at k = 2^30 after other jobs).  At most one array
    per name and workspace, each of at most ``_SCRATCH_MAX`` entries, kept within
    :func:`fastpld.set_cache_limit`."""
    dt = np.dtype(dtype)
    if n > _SCRATCH_MAX:
        return np.empty(n, dtype=dt)
    ws = resources.workspace()
    key = ("scratch", name)
    a = ws.get(key)
    if a is None or a.dtype != dt or a.size < n:
        a = np.empty(max(n, 1024), dtype=dt)
        ws.put(key, a, a.nbytes)
    return a[:n]


def _numpy_abs_rfft(p, cen, N, out):
    """``out[:] = |rfft(fold(p, cen), N)|`` with numpy's FFT (the numpy backend's ``abs_rfft``)."""
    buf = np.empty(N)
    _kernels.fold(p, cen, buf)
    return np.abs(np.fft.rfft(buf, N), out=out)


def _crude_up(m, r, e, slow):
    """``m log((r + e) / slow)`` rounded upwards: ``r = hypot`` of the computed DFT and ``e`` (a hypot or a
    constant) within 4 ulp each, the sum, division and product (float64, docs/roundoff.md section 7): the
    argument inflated by ``16 u64``, ``log`` (4 ulp) and the product by ``10 u64`` of the result."""
    x = m * np.log((r + e) * (1 + 16 * _U64) / slow)
    return x + 10 * _U64 * np.abs(x)


def _lattice_spectrum(ins, dft, N, dtype, native=True, skip_log=None, abs_rfft=None, scratch=False):
    """Accurate ``m log|X|``, ``m arg X`` at every frequency of a node whose inputs take direct DFTs
    (docs/roundoff.md, section 3f): ``(F, L, Phi, dL, dPhi, Q, up)``.

    Why: at the spectral peaks of lattice-like inputs (``|X| ~ 1`` far from frequency 0) a spectrum
    error ``g`` becomes ``m g`` in ``X^m``.  Here, per input with masses ``q_j`` at offsets ``t_j``
    (sum ``S``): ``1 - |X / S|^2 = 4 sum_(d > 0) a_d sin^2(theta d / 2) / S^2`` with the lag sums
    ``a_d = sum_(t_j - t_l = d) q_j q_l``, all terms non-negative, so it is computed with a small
    *relative* error ``eta`` (relatively accurate ``sin^2`` table, sums of positive terms), and
    ``m log|X / S| = (m / 2) log1p(-x)`` errs by ``(m / 2) x eta / (1 - x (1 + eta))``: where
    ``|X|^m`` matters, ``m x = O(1)``.  The phase: ``arg X = psi + q pi/2`` (exact quarter turns) with
    ``psi`` from the DFT's components, whose per-frequency running error bounds ``E_re, E_im`` (the
    table's relative error, the products' and the partial sums' roundings) give
    ``|psi~ - psi| <= arcsin(((|x| + E_x) E_y + (|y| + E_y) E_x) / (|X~| (|X~| - E)))``: near a peak the
    component along ``X`` carries the large error and hardly moves the angle.  ``up``: a crude
    upper bound ``sum m log((|X~| + E) / S_low)`` on ``log|P|`` where ``x`` is near 1.
    ``L`` and ``Phi`` are in ``dtype`` (the node's precision); ``Q`` sums the quarter turns mod 4.
    ``native``: the compiled kernel (``_kernels.lattice_terms``, one pass per input); this function's numpy
    code is its reference.  ``skip_log`` (single-input nodes): frequencies where a crude bound on ``|X|^m``
    is below ``e^-skip_log`` keep only ``up = -skip_log`` (``L = -inf``, ``dL = inf``: the power there is 0
    and its error at most ``e^up``), without the DFT, logarithms and angles; that bound comes from a float64
    FFT, ``abs_rfft(p, cen, N, out)`` (default numpy's; any FFT within the error model ``12 u log2 N``, the
    backend's :meth:`fastpld._backend.Backend.abs_rfft`).  ``scratch`` (native only): the outputs are this
    thread's :func:`_scratch` arrays, valid until its next lattice node.
    """
    W = np.dtype(dtype).type
    u = _U64 if W is np.float64 else _ULD
    F = N // 2 + 1
    cdt = np.clongdouble if W is np.longdouble else np.complex128
    compiled = native and _kernels._core is not None
    # (scratch: the kernel's first input assigns every entry, so they need no zeros)
    def array(name, dt):
        return _scratch("lat." + name, F, dt) if compiled and scratch else np.zeros(F, dtype=dt)

    L, Phi, Q = array("L", W), array("Phi", W), array("Q", np.uint8)
    dL, dP, up, absL, absP = (array(x, np.float64) for x in ("dL", "dP", "up", "absL", "absP"))
    s2 = _kernels.sin2_table(N, W)
    tab = 1.0 + _kernels.DFT_TABLE_REL
    c_tab, s_tab = _kernels.dft_table(N, W)
    skip_below = -skip_log if (skip_log is not None and len(ins) == 1) else -math.inf
    for i, ((p, cen, m), (q, steps, err0)) in enumerate(zip(ins, dft)):
        n = q.size
        # 1 - |X / S|^2 from the lag sums
        t = np.where(steps <= N // 2, steps, steps - N)
        a, lags, cnt = _lag_sums(q, t, W)
        S = W(0)
        for qj in q:  # sequential: relative error gamma_(n-1)
            S = S + qj
        # eta: the table (squared), a_d (products and additions), a_d s2, the sum over lags, / S^2 (with S's own error)
        eta = 1.01 * u * (2 * _kernels.DFT_TABLE_REL + 1 + (int(cnt.max()) + 1 if cnt.size else 0) + 1 + lags.size
                          + 3 + 2 * n)
        slow = float(S) * (1 - 2 * n * u)  # <= the exact sum of q
        # the DFT's error per component: the products (u |t_j|), the table (DFT_TABLE_REL u |t_j|) and the
        # additions (u sum_i |s_i|, the partial sums of the ascending terms: |s_i| <= sum_(l <= i) |t_l|, so
        # term l counts in n - l of them): 1.01 u sum_j wt_j |table entry_j| with wt_j = q_j (tab + n - j)
        wt = q * (W(tab) + W(n) - np.arange(n).astype(W))
        # which frequencies are dead: a crude bound from a float64 FFT (the error model's 12 u64 log2 N, plus
        # the cast of the input), far cheaper than the long double DFT at every frequency
        pre = _EMPTY_F64
        thr = 0.0
        if i == 0 and skip_below > -math.inf:
            g64 = 1.01 * (12.0 * _U64 * math.ceil(math.log2(max(N, 2))) + _U64)
            # dead where |X~| < thr: there |X| <= |X~| + g64 < slow e^(skip_below / m), so |X / S|^m < e^skip_below,
            # which is their bound (up = skip_below; no logarithm per frequency); the factor covers the
            # roundings of thr and of |X~|
            thr = (slow * math.exp(skip_below / m) - g64) * (1.0 - 1e-12)
            pre = _scratch("lat.pre", F, np.float64) if scratch else np.empty(F)
            (abs_rfft or _numpy_abs_rfft)(np.ascontiguousarray(p, dtype=np.float64), cen, N, pre)
        if compiled:
            _kernels.lattice_terms(q, wt, steps, c_tab, s_tab, a, lags, s2, float(m), eta, u, slow, err0 * u,
                                   skip_below, pre, thr, i == 0, L, Phi, Q, dL, dP, up, absL, absP)
            continue
        X = _kernels.small_dft(q, steps, N, np.empty(F, dtype=cdt))
        Ere = 1.01 * u * _kernels.table_sum(wt, steps, np.abs(c_tab), F).astype(np.float64)
        Eim = 1.01 * u * _kernels.table_sum(wt, steps, np.abs(s_tab), F).astype(np.float64)
        D = _kernels.table_sum(a, lags, s2, F) * W(4)
        x = D / (S * S)
        xf = x.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            Lc = W(0.5 * m) * np.log1p(-x)
            den = 1.0 - xf * (1.0 + eta)
            Lf = Lc.astype(np.float64)
            # (+ log1p's rounding, <= 4 ulp = 8 u relative for any libm numpy may use, the product by m / 2)
            dLc = np.where(den > 0, 0.5 * m * xf * eta / np.where(den > 0, den, 1.0), np.inf) + 12 * u * np.abs(Lf)
            # crude: |X / S| <= (|X~| + E) / (S (1 - 2 n u)); skipped frequencies (below skip_below with the
            # a-priori error err0 u of the DFT) keep that bound
            r = np.hypot(X.real.astype(np.float64), X.imag.astype(np.float64))
            E = np.hypot(Ere, Eim)
            if pre.size:
                skip = pre < thr
                up_c = np.where(skip, skip_below, _crude_up(m, r, E, slow))
            else:
                up0 = _crude_up(m, r, err0 * u, slow)
                skip = up0 < skip_below
                up_c = np.where(skip, up0, _crude_up(m, r, E, slow))
            psi, qq = _kernels.quarter_angle(X)
            odd = (qq & 1).astype(bool)
            Ex = np.where(odd, Eim, Ere)  # the turned components' bounds: odd turns swap them
            Ey = np.where(odd, Ere, Eim)
            xr = np.where(odd, np.abs(X.imag), np.abs(X.real)).astype(np.float64)
            xi = np.where(odd, np.abs(X.real), np.abs(X.imag)).astype(np.float64)
            sang = ((xr + Ex) * Ey + (xi + Ey) * Ex) / (r * (r - E))
            ok = (r > E) & (sang < 1)
            psif = psi.astype(np.float64)
            # (+ atan2's rounding, <= 4 ulp = 8 u relative)
            dpsi = np.where(ok, 1.01 * np.arcsin(np.where(ok, sang, 0.0)), np.pi) + 8 * u * np.abs(psif)
        if skip.any():
            Lc = np.where(skip, -np.inf, Lc).astype(W)
            Lf = Lc.astype(np.float64)
            psi = np.where(skip, 0, psi).astype(W)
            psif = psi.astype(np.float64)
            qq = np.where(skip, 0, qq)
            dLc = np.where(skip, np.inf, dLc)
            dpsi = np.where(skip, 0.0, dpsi)
        L = L + Lc
        Phi = Phi + W(m) * psi
        Q = ((Q + (int(m) % 4) * qq.astype(np.int64)) & 3).astype(np.uint8)
        dL = dL + dLc
        dP = dP + m * dpsi + 2 * u * m * np.abs(psif)
        up = up + up_c
        absL += np.where(np.isfinite(Lf), np.abs(Lf), 0.0)
        absP += m * np.abs(psif)
    C = len(ins)
    dL = dL + _rounding_gamma(2 * C, u) * absL
    dP = dP + _rounding_gamma(2 * C, u) * absP
    return F, L, Phi, dL, dP, Q, up


_EMPTY_F64 = np.zeros(0)


def _lattice_amp(lat, u_node):
    """``(lp, amp)`` of the round-off bound at every frequency for :func:`_lattice_spectrum`'s node.

    ``amp`` bounds ``|computed - exact|`` of the power: the smaller of ``e^L~ (expm1(dL) + e^dL dPhi)``
    plus the polar evaluation (as :func:`_series_amp`) and ``|computed| + e^up``; ``lp`` bounds the
    log of both powers' magnitudes."""
    _, L, P, dL, dP, _, up = lat
    Lf = L.astype(np.float64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        # skipped frequencies (L = -inf: power 0, the exact one at most e^up) need only the crude terms
        amp = np.exp(up)
        lp = up + 1e-12
        live = np.flatnonzero(np.isfinite(Lf))
        Lv, dLv, upv = Lf[live], dL[live], up[live]
        # (exp, cis and the products 8 u + 8 u + 1.5 u, the reduction mod 2 pi 20 u + 2.6 u |Phi|: section 7)
        pol = 8 * u_node * (5 + np.abs(P[live].astype(np.float64)) + np.abs(Lv))
        mag = np.exp(Lv)
        fine = 1.01 * mag * (np.expm1(dLv) + np.exp(dLv) * dP[live] + pol)
        crude = 1.01 * mag * (1 + pol) + amp[live]
        amp[live] = np.where(np.isfinite(fine), np.minimum(fine, crude), crude)
        hi = Lv + dLv
        lp[live] = np.maximum(Lv, np.where(np.isfinite(hi), np.minimum(hi, upv), upv)) + 1e-12
    return lp, amp


resources.on_clear(lambda: _TRIU.clear())
