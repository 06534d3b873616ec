"""Kernel dispatch: the compiled core when built, numpy otherwise.

Each function runs the Cython/C kernel of :mod:`fastpld._core` when it is
available and otherwise a numpy implementation with the same results (up to
the order of floating-point summation).  ``FASTPLD_PURE_PYTHON=1`` forces the
numpy implementations (as msgpack does); tests also set ``_kernels._core = None``
to run them in-process, so both paths stay tested.  The leaf kernels of the
subsampled Gaussian live in :mod:`fastpld._leaf` and follow the same switch.

The ``numpy`` FFT backend does not come through here: it keeps the reference
code inline in :mod:`fastpld.compose` and :mod:`fastpld.discretize`; the
``native`` backend calls these kernels.
"""
from __future__ import annotations

import math
import os

import numpy as np
from scipy import signal, special

_core = None
if os.environ.get("FASTPLD_PURE_PYTHON", "") not in ("1", "true", "yes"):
    try:
        from . import _core  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - depends on the build
        _core = None

HAVE_CORE = _core is not None

_leaf = None
if _core is not None:
    try:
        from . import _leaf  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - depends on the build
        _leaf = None

_TWO_PI_LD = 2 * np.longdouble("3.14159265358979323846264338327950288")
_TWO_PI = 2 * np.pi


def discounted_rcumsum(p: np.ndarray, factor: float) -> np.ndarray:
    """``out[j] = sum_{i >= j} p[i] factor^(i - j)``."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.discounted_rcumsum(p, float(factor))
    if p.size == 0:
        return p.copy()
    return signal.lfilter([1.0], [1.0, -factor], p[::-1])[::-1]


def query_tables(p: np.ndarray, factor: float):
    """``(S1, T, dgrid)`` of :class:`fastpld.curve._Query`.

    ``S1[j] = sum_{i >= j} p_i``, ``T[j] = sum_{i >= j} p_i factor^(i-j)`` (both with a
    trailing 0) and ``dgrid[j] = max(S1[j+1] - factor T[j+1], 0)``.
    """
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.query_tables(p, float(factor))
    S1 = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
    T = np.concatenate([discounted_rcumsum(p, factor), [0.0]])
    dgrid = np.maximum(S1[1:] - factor * T[1:], 0.0)
    return S1, T, dgrid


def bucket_masses(F: np.ndarray, S: np.ndarray, split: int):
    """Bucket masses of Algorithm 1 from CDF/SF values at the ``n + 1`` edges: ``(q, total)``.

    CDF differences below bucket ``split - 1``, survival differences above it,
    the straddling bucket by complement; clipped at 0 (``q`` not normalised).
    """
    F = np.ascontiguousarray(F, dtype=np.float64)
    S = np.ascontiguousarray(S, dtype=np.float64)
    if _core is not None:
        return _core.bucket_masses(F, S, int(split))
    n = F.size - 1
    if n < 1 or S.size != F.size or not 1 <= split <= n:
        raise ValueError("bucket_masses: invalid argument")
    q = np.empty(n, dtype=np.float64)
    q[: split - 1] = np.diff(F[:split])
    q[split:] = S[split:n] - S[split + 1:]
    q[split - 1] = 1.0 - F[split - 1] - S[split]
    np.maximum(q, 0.0, out=q)
    return q, float(q.sum())


def normalise_mean(q: np.ndarray, total: float):
    """``(q / total, sum_i i q_i / total)``."""
    q = np.array(q, dtype=np.float64)
    if _core is not None:
        mi = _core.normalise_mean(q, float(total))
        return q, mi
    if not total > 0:
        raise ValueError("normalise_mean: no positive probability mass")
    qn = q / total
    return qn, float(np.dot(np.arange(qn.size), qn))


def leaf_roundoff(F, S, dens, tau: float, c0: float, limit: float):
    """``(widen, tv)``: edges whose movement ``(tau min(F, S) + c0) / (dens / 2)`` is at most
    ``limit`` widen the coupling range by twice the largest movement; the others are charged
    to total variation."""
    F = np.ascontiguousarray(F, dtype=np.float64)
    S = np.ascontiguousarray(S, dtype=np.float64)
    dens = np.ascontiguousarray(dens, dtype=np.float64)
    if _core is not None:
        return _core.leaf_roundoff(F, S, dens, float(tau), float(c0), float(limit))
    dev = tau * np.minimum(F, S) + c0
    with np.errstate(divide="ignore", invalid="ignore"):
        move = np.where(dens > 0, dev / (0.5 * dens), np.inf)
    small = move <= limit
    widen = 2 * float(move[small].max()) if small.any() else 0.0
    return widen, float(dev[~small].sum())


def psg_eval(t: np.ndarray, q: float, v: float, sd: float, remove: bool, want_pdf: bool = True):
    """``(F, S, pdf)`` of the Poisson-subsampled Gaussian privacy loss at ``t``.

    The pair is ``P = N(-v/2, v)``, ``Q = N(v/2, v)`` for ``L`` (``sd = sqrt(v)``);
    ``remove``: ``Y = log(1 - q + q e^L)`` with ``L ~ (1-q) P + q Q``, else
    ``Y = -log(1 - q + q e^L)`` with ``L ~ P`` (see
    :class:`fastpld.mechanisms.SubsampledLoss`).  ``pdf`` is ``None`` unless ``want_pdf``.
    """
    t = np.ascontiguousarray(t, dtype=np.float64)
    if _core is not None and _leaf is not None:  # (tests set _core = None to run every reference)
        F, S, P = _leaf.psg_eval(t.ravel(), float(q), float(v), float(sd), bool(remove), bool(want_pdf))
        return F.reshape(t.shape), S.reshape(t.shape), (None if P is None else P.reshape(t.shape))
    if not (0 < q < 1 and v > 0 and sd > 0):
        raise ValueError("psg_eval: invalid argument")
    tt = t if remove else -t
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        em1 = np.expm1(tt)
        arg = em1 + q
        l = np.where(arg > 0, np.log(arg) - math.log(q), -np.inf)
        zp = (l + v / 2) / sd
        if remove:
            zq = (l - v / 2) / sd
            F = (1 - q) * special.ndtr(zp) + q * special.ndtr(zq)
            S = (1 - q) * special.ndtr(-zp) + q * special.ndtr(-zq)
        else:
            top = t >= -math.log1p(-q)
            F = np.where(top, 1.0, special.ndtr(-zp))
            S = np.where(top, 0.0, special.ndtr(zp))
        P = None
        if want_pdf:
            cden = 1.0 / (sd * math.sqrt(2 * math.pi))
            dl = (em1 + 1.0) / arg  # dl/dt = e^t / (e^t - 1 + q)
            dens = np.exp(-0.5 * zp * zp) * cden
            if remove:
                dens = (1 - q) * dens + q * (np.exp(-0.5 * zq * zq) * cden)
            dens = dens * dl
            P = np.where(np.isfinite(dens), dens, 0.0)
    return F, S, P


def _gl_rule(n):
    x, w = np.polynomial.legendre.leggauss(n)
    return np.ascontiguousarray(x), np.ascontiguousarray(w)


_GL16 = _gl_rule(16)
_GL8 = _gl_rule(8)


def psg_moments(l_lo: float, l_hi: float, q: float, v: float, sd: float, remove: bool):
    """``int g^k dmu`` over ``l_lo <= L <= l_hi`` for ``k = 1, 2`` with ``g(l) = log(1 - q + q e^l)``.

    ``mu`` is the law of ``L`` (see :func:`psg_eval`).  Gauss-Legendre (16 points) on equal
    panels of width ``<= min(sd, 1)`` (the density's scale and ``g``'s strip of analyticity
    ``|Im l| < pi``), restricted to ``[-v/2 - 40 sd, v/2 + 40 sd]`` (outside: mass below
    ``e^-800``).  Returns ``(I1, d1, r1, I2, d2, r2)``: the integrals, the summed panel
    disagreements ``|I_16 - I_8|`` with the 8-point rule and bounds on the round-off of the
    sums, ``(panels + 40) u sum |terms|`` (16 terms per panel, then the panel values; a few
    roundings per term in ``g`` and the density).
    """
    (x16, w16), (x8, w8) = _GL16, _GL8
    if _core is not None and _leaf is not None:
        return _leaf.psg_moments(float(l_lo), float(l_hi), float(q), float(v), float(sd), bool(remove),
                                 x16, w16, x8, w8)
    if not (0 < q < 1 and v > 0 and sd > 0) or math.isnan(l_lo) or math.isnan(l_hi):
        raise ValueError("psg_moments: invalid argument")
    h = v / 2
    lo, hi = max(-h - 40 * sd, l_lo), min(h + 40 * sd, l_hi)
    if not hi > lo:
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    npan = max(1, math.ceil((hi - lo) / min(sd, 1.0)))
    step = (hi - lo) / npan
    a = lo + step * np.arange(npan, dtype=np.float64)
    b = np.append(a[1:], hi)
    mid, half = 0.5 * (a + b), 0.5 * (b - a)
    lq1, lq = math.log1p(-q), math.log(q)
    cden = 1.0 / (sd * math.sqrt(2 * math.pi))
    out = []
    res = {}
    for n, (x, w) in ((16, (x16, w16)), (8, (x8, w8))):
        l = mid[:, None] + half[:, None] * x[None, :]
        zp = (l + h) / sd
        dens = np.exp(-0.5 * zp * zp) * cden
        if remove:
            zq = (l - h) / sd
            dens = (1 - q) * dens + q * (np.exp(-0.5 * zq * zq) * cden)
        g = np.logaddexp(lq1, lq + l)
        res[n] = (half * ((g * dens) @ w), half * ((g * g * dens) @ w),
                  half * (np.abs(w * (g * dens)).sum(axis=1)), half * ((w * (g * g * dens)).sum(axis=1)))
    for k in range(2):
        i16, i8 = res[16][k], res[8][k]
        rnd = float(res[16][2 + k].sum()) * (npan + 40) * (np.finfo(np.float64).eps / 2)
        out += [float(i16.sum()), float(np.abs(i16 - i8).sum()), rnd]
    return tuple(out)


def pmf_moments(p: np.ndarray, cen: float):
    """``(total, mean, variance)`` of the weights ``p`` on the indices ``i - cen``."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    if _core is not None:
        return _core.pmf_moments(p, float(cen))
    idx = np.arange(p.size, dtype=np.float64) - cen
    tot = float(p.sum())
    if not tot > 0:
        raise ValueError("pmf_moments: no positive probability mass")
    mu = float(np.dot(idx, p) / tot)
    return tot, mu, float(np.dot((idx - mu) ** 2, p) / tot)


def log_mgf_grid(p: np.ndarray, cen: float, s: np.ndarray, m: float, K: np.ndarray) -> None:
    """``K += m * log(sum_i p_i exp(s (i - cen)))`` for every ``s`` (in place)."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    s = np.ascontiguousarray(s, dtype=np.float64)
    if _core is not None:
        _core.log_mgf_grid(p, float(cen), s, float(m), K)
        return
    if not (p > 0).any():
        raise ValueError("log_mgf_grid: no positive probability mass")
    idx = np.arange(p.size, dtype=np.float64) - cen
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    M = s[:, None] * idx[None, :] + logp[None, :]
    mx = M.max(axis=1)
    K += m * (mx + np.log(np.exp(M - mx[:, None]).sum(axis=1)))


def fold(p: np.ndarray, cen: int, out: np.ndarray) -> None:
    """Circular placement into ``out`` (any float dtype): ``out[:] = 0; out[(i - cen) mod N] += p[i]``."""
    if _core is not None and p.dtype in (np.float64, np.longdouble) and p.flags.c_contiguous:
        _core.fold(p, int(cen), out)
        return
    N = out.size
    out[:] = 0
    np.add.at(out, (np.arange(p.size) - cen) % N, p.astype(out.dtype))


def split(p: np.ndarray, offset: float, mesh_in: float, mesh_out: float, dtype):
    """Mean-preserving split of atoms at ``offset + i mesh_in`` onto the lattice ``mesh_out Z``.

    Returns ``(out, j0, tmax)``: masses at ``(j0 + k) mesh_out`` in ``dtype`` and
    ``max |offset + i mesh_in| / mesh_out`` (for the bias bound).
    """
    n = p.size
    t0 = offset / mesh_out
    t1 = (offset + mesh_in * float(n - 1)) / mesh_out
    j0 = int(math.floor(t0))
    m = int(math.floor(t1)) - j0 + 2
    tmax = max(abs(t0), abs(t1))
    if _core is not None and p.dtype in (np.float64, np.longdouble) and p.flags.c_contiguous:
        out = np.empty(m, dtype=dtype)
        _core.split(p, float(offset), float(mesh_in), float(mesh_out), j0, out, np.empty(m, dtype=dtype))
        return out, j0, tmax
    t = (offset + mesh_in * np.arange(n, dtype=np.float64)) / mesh_out
    j = np.floor(t)
    theta = (t - j).astype(dtype)
    jj = j.astype(np.int64) - j0
    pd = p.astype(dtype, copy=False)
    out = np.zeros(m, dtype=dtype)
    np.add.at(out, jj, pd * (1 - theta))
    up = np.zeros(m, dtype=dtype)
    np.add.at(up, jj + 1, pd * theta)
    return out + up, j0, tmax


def spectrum_terms(X, m, logmag, phase, lr64, lrg64, ph64, g, first) -> None:
    """Accumulate ``m log|X|``, ``m arg X`` (in ``X``'s precision) and the float64 terms of the
    round-off bound (``log|X|``, ``log(|X| + g)``, ``arg X``) for one input spectrum."""
    if _core is not None:
        _core.spectrum_terms(X, float(m), logmag, phase, lr64, lrg64, ph64, float(g), bool(first))
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.abs(X)
        ph = np.angle(X)
        lr = np.log(a)
        r = a.astype(np.float64)
        lr64[:] = np.log(r)
        lrg64[:] = np.log(r + g)
    ph64[:] = ph.astype(np.float64)
    if first:
        logmag[:] = m * lr
        phase[:] = m * ph
    else:
        logmag += m * lr
        phase += m * ph


def power_fp(logmag, phase, LR, LRG, PH, ms, g, u, N, Pc):
    """Write the polar power ``exp(logmag) e^(i phase)`` into ``Pc``; return the weighted sums
    ``(sum_k w_k amp_k^2, sum_k w_k P_k^2)`` of the round-off bound of :func:`fastpld.compose._fp_fft_bound`."""
    ms = np.ascontiguousarray(ms, dtype=np.float64)
    if _core is not None:
        return _core.power_fp(logmag, phase, LR, LRG, PH, ms, float(g), float(u), int(N), Pc)
    # a long double node reduces by a long double 2 pi (see compose._TWO_PI_LD)
    ph = np.remainder(phase, _TWO_PI_LD if phase.dtype == np.longdouble else _TWO_PI)
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        P = np.exp(logmag) * (np.cos(ph) + 1j * np.sin(ph))
    P[~np.isfinite(logmag)] = 0
    Pc[:] = P
    with np.errstate(over="ignore", invalid="ignore"):
        log_prod = 0.0
        for c in range(ms.size):
            log_prod = log_prod + ms[c] * LRG[c]
        amp = 0.0
        for c in range(ms.size):
            amp = amp + ms[c] * g * np.exp(log_prod - LRG[c])
        cond = 0.0
        sum_lr = 0.0
        for c in range(ms.size):
            sum_lr = sum_lr + ms[c] * LR[c]
            cond = cond + (1.0 + ms[c] * (np.abs(np.where(np.isfinite(LR[c]), LR[c], 0.0)) + np.abs(PH[c])))
        # polar-power rounding, plus the rounding of |X| before its m-th power (~ m u)
        amp = amp + (8 * u * cond + 2 * u * float(ms.sum())) * np.exp(sum_lr)
        amp = np.where(np.isfinite(amp), amp, 0.0)
        w = np.full(amp.shape, 2.0)
        w[0] = 1.0
        if N % 2 == 0:
            w[-1] = 1.0
        return float(np.sum(w * amp**2)), float(np.sum(w * np.exp(2 * log_prod)))
