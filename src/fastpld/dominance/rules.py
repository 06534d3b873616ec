"""The dominance leaves' quadrature rules: Gauss-Legendre 5-point rules on panels of a cell, and in
``u = log(distance to a support end)`` near one (:func:`fastpld.dominance.quadrature._integrals` chooses among them and
refines), with their truncation error -- proved for the subsampled Gaussian, the Gaussian, the Laplace and the
subsampled Laplace densities, else estimated by a 4-point rule -- and the sums that bound the density's rounding
(:meth:`fastpld.mechanisms.ContinuousLoss.pdf_error`; docs/dominance.md, "Leaf", "The density's rounding" and "The
rules' truncation error").  The subsampled Gaussian's in compiled kernels
(``_leaf.psg_panels``, ``_leaf.psg_logpanels``) and the Gaussian's panels (``_leaf.gauss_panels``); the numpy code
here is their reference and every other loss's."""
from __future__ import annotations

import math

import numpy as np

from .. import _kernels
from ..mechanisms.losses import GaussianLoss, LaplaceLoss
from ..mechanisms.pairs import _LaplacePair
from ..mechanisms.subsampled import SubsampledLoss, SymmetricSubsampledLoss
from .ends import _psg_from_end, _psl_end

_U = np.finfo(np.float64).eps / 2  # unit roundoff

# Gauss-Legendre nodes/weights on [-1, 1]: the 5-point rule of the leaves and the 4-point rule that
# checks it where its truncation error has no proved bound (ten times their disagreement is charged, as for the
# partial means)
_GL5 = np.polynomial.legendre.leggauss(5)
_GL4 = np.polynomial.legendre.leggauss(4)
_GL5_RULE = tuple(np.ascontiguousarray(a, dtype=np.float64) for a in _GL5)  # (the compiled rules' arguments)

_U_STEP = 0.125  # width of the panels in log(distance) at a support end


def _error_terms(fw, wn, wb, rel, wt) -> list:
    """Per 5-point node, the sizes of its terms of ``int f``, ``int (1 - e^-t) f`` and ``int e^-t f`` (``fw`` times
    the weights ``wn``, ``wb``) times their relative error bounds ``rel``, plus ``wt``, the weights' absolute error
    times ``|fw|``, for the last two (0 where ``fw`` is: no mass, no error)."""
    with np.errstate(invalid="ignore"):
        return [np.where(fw != 0, np.abs(v) * rel + extra, 0.0)
                for v, extra in ((fw, 0.0), (fw * wn, wt), (fw * wb, wt))]


def _rule_error(x5, x4, R):
    """A rule's truncation error bound: ``R``, the proved one, where there is no 4-point rule (``x4 is None``), else
    the larger of ``R`` and ten times the rules' disagreement, an estimate (the estimate alone where ``R`` is NaN: a
    panel the proof does not cover)."""
    return R if x4 is None else np.fmax(10.0 * np.abs(x5 - x4), R)


def _log_panels(loss, lo, end, d_far, ulo, side: int, step=None):
    """The 5-point rule (and the 4-point rule that checks it, where its truncation error has no proved bound) in
    ``u = log(distance to a support end)`` (see :func:`_integrals`): per
    interval, panels ``[max(-(k + 1) s, ulo), -k s]`` (``s = step``, per interval, default ``_U_STEP``;
    ``k = 0, 1, ..``, at least one) in ``u - log d_far``; the nodes ``y = lo + end +- d_far e^u`` (``+``
    where the end is below, ``side == 0``) with weight ``d_far e^u``.  Returns ``((a5, n5, b5), (a4, n4,
    b4), (ea, en, eb), (Ra, Rn, Rb))``, the sums of ``f``, ``(1 - e^-t) f`` and ``e^-t f`` (``t = y - lo``; the
    4-point ones ``None`` for the subsampled Gaussian and Laplace), the
    5-point terms' sums weighted by their relative error bounds (the density's, :meth:`ContinuousLoss.pdf_error`, and
    the weights') and, for the subsampled Gaussian and Laplace, the sums of the panels' proved truncation bounds
    (:func:`_psg_log_truncation`, :func:`_psl_log_truncation`; 0 for other losses); the subsampled Gaussian's by the
    compiled ``fpld_psg_logpanels`` (same terms, sums in another order).  :func:`_rule_error` forms the rules'
    bound."""
    step = np.broadcast_to(np.asarray(_U_STEP if step is None else step, dtype=np.float64), np.shape(lo))
    psg = getattr(loss, "psg_params", None)
    if psg is not None and _kernels._core is not None and _kernels._leaf is not None:
        r = _kernels._leaf.psg_logpanels(*(np.ascontiguousarray(a, dtype=np.float64)
                                           for a in (lo, end, d_far, ulo, step)),
                                         1.0 if side == 0 else -1.0, float(psg[0]), float(psg[1]),
                                         float(psg[2]), bool(psg[3]), *_GL5_RULE)
        return r[:3], (None,) * 3, r[3:6], r[6:]
    psl = _psl_params(loss)
    npan = np.maximum(np.ceil(-ulo / step), 1).astype(np.int64)
    owner = np.repeat(np.arange(lo.size), npan)
    k = np.arange(owner.size) - np.repeat(np.cumsum(npan) - npan, npan)
    top = -step[owner] * k
    bot = np.maximum(-step[owner] * (k + 1), ulo[owner])
    half = 0.5 * (top - bot)
    sums, err = [], None
    for x, w in ((_GL5,) if psg is not None or psl is not None else (_GL5, _GL4)):
        five = x.size == 5
        uu = bot[:, None] + half[:, None] * (1.0 + x)[None, :]
        d = d_far[owner, None] * np.exp(uu)
        t = end[owner, None] + (d if side == 0 else -d)  # offsets from lo
        y = lo[owner, None] + t
        f = np.asarray(loss.pdf(y.ravel()), dtype=np.float64).reshape(t.shape)
        if five:
            # (the density's relative error at the nodes: d within rd of the exact node's distance, relative -- the
            # node's shift d rd, and at the rounded point y also t's and y's rounding; fpld_psg_logpanels's)
            rd = _U * (np.abs(uu) + 4 * half[:, None] + 9)
            with np.errstate(all="ignore"):
                rel = np.asarray(loss.pdf_error(y.ravel(), (d * rd + _U * (np.abs(t) + np.abs(y))).ravel()),
                                 dtype=np.float64).reshape(t.shape)
        if psl is not None and _psl_end(loss, side):
            # (a subsampled Laplace's end: at the distance d itself, SubsampledLoss.from_end -- near the end the rounded
            # point leaves its density known to ~5e-11 only)
            fn, reln, _, _, ok = loss.from_end(d, side, delta=d * rd if five else 0.0)
            f = np.where(ok, fn, f)
            if five:
                rel = np.where(ok, reln, rel)
        if psg is not None:
            # (at the distance d itself where the point is below log(1 - q)'s magnitude: see _exact_end)
            near = (y if psg[3] else -y) < 0
            if near.any():
                dn = np.where(near, d, 0.0)
                if five:
                    fn, reln = _psg_from_end(psg, dn, False, delta=dn * rd)
                    rel = np.where(near, reln, rel)
                else:
                    fn = _psg_from_end(psg, dn, False)
                f = np.where(near, fn, f)
        fw = f * d * half[:, None] * w[None, :]  # dy = d du
        wn, wb = -np.expm1(-t), np.exp(-t)
        sums.append(tuple(np.bincount(owner, weights=v.sum(axis=1), minlength=lo.size) for v in (fw, fw * wn, fw * wb)))
        if five:
            # (the weight d within rd, e^-t and 1 - e^-t within 12 u and moved by t's shift d rd + u |t| times e^-t,
            # absolute; the sums over the cell's 5 npan terms, (5 npan) u of their sizes)
            rel = rel + rd + 12 * _U + 5 * _U * npan[owner][:, None]
            terms = _error_terms(fw, wn, wb, rel, np.abs(fw) * wb * (d * rd + _U * np.abs(t)))
            err = tuple(np.bincount(owner, weights=v.sum(axis=1), minlength=lo.size) for v in terms)
    if psg is not None or psl is not None:
        R = tuple(np.bincount(owner, weights=r, minlength=lo.size) * (1 + 1e-12)
                  for r in (_psg_log_truncation(psg, d_far[owner], bot, top, end[owner]) if psg is not None else
                            _psl_log_truncation(*psl, d_far[owner], bot, top, end[owner], lo[owner], side)))
    else:
        R = (np.zeros(lo.size),) * 3
    return sums[0], (sums[1] if len(sums) > 1 else (None,) * 3), err, R


# (5!)^4 10! / (11 (10!)^3) = 1.43155e-6, rounded up: the 5-point rule's error constant times 10! (Cauchy's estimate)
_GL5_CAUCHY = 1.4316e-6


def _cauchy(W, r, M):
    """Cauchy's bound on the 5-point rule's error on panels of width ``W``: ``1.4316e-6 W (W / r)^10 M``, ``M`` the
    largest ``|F|`` on the stadium of radius ``r`` about the panel."""
    wr2 = (W / r) ** 2
    return _GL5_CAUCHY * W * (wr2 * wr2 * wr2 * wr2 * wr2) * M


def _normal_sup(la, lb, D, v):
    """The largest ``|exp(-(l - mu)^2 / 2v)|`` with ``l`` within ``D`` of a real point whose ``l - mu`` lies in
    ``[la, lb]``: ``exp((-x^2 + 2 x D + D^2) / 2v)`` at ``x = D`` clamped to the range of ``|l - mu|``."""
    mn = np.where((la <= 0) & (lb >= 0), 0.0, np.minimum(np.abs(la), np.abs(lb)))
    xx = np.clip(D, mn, np.maximum(np.abs(la), np.abs(lb)))
    return np.exp((-xx * xx + 2 * xx * D + D * D) / (2 * v))


def _psg_reach(lA, lB, v, remove):
    """The largest ``|l - mu|`` over ``l`` in ``[lA, lB]`` for the normal factors' means ``-v/2`` (and ``v/2``)."""
    h = v / 2
    x = np.maximum(np.abs(lA + h), np.abs(lB + h))
    return np.maximum(x, np.maximum(np.abs(lA - h), np.abs(lB - h))) if remove else x


def _psg_cauchy(W, r, lA, lB, D, jac, q, v, cden, remove):
    """Cauchy's bound at radius ``r`` on panels of width ``W`` (C ``psg_cauchy``): ``1.4316e-6 W (W / r)^10 M``,
    ``M = cden jac ((1 - q) G(-v/2) + q G(v/2))`` (remove; add: ``G(-v/2)``)."""
    h = v / 2
    M = ((1 - q) * _normal_sup(lA + h, lB + h, D, v) + q * _normal_sup(lA - h, lB - h, D, v)) if remove \
        else _normal_sup(lA + h, lB + h, D, v)
    return _cauchy(W, r, M * cden * jac)


def _log_weights(best, W, end, dmax):
    """``(R_A, R_N, R_B)`` of a log-distance panel's bound ``best`` for ``int f`` (``d`` at most ``dmax`` on its
    stadium, the end at offset ``end``): the weights are at most ``e^(|end| + dmax) - 1`` and ``e^(dmax - end)``
    there (0 on an empty panel)."""
    with np.errstate(all="ignore"):
        return (np.where(W > 0, best, 0.0), np.where(W > 0, best * np.expm1(np.abs(end) + dmax) * (1 + 1e-6), 0.0),
                np.where(W > 0, best * np.exp(dmax - end) * (1 + 1e-6), 0.0))


def _lattice_weights(best, W, c0, c1, r):
    """``(R_A, R_N, R_B)`` of a lattice panel's bound ``best`` for ``int f`` at radius ``r``: the weights ``1 - e^-t``
    and ``e^-t`` are at most ``e^(c1 + r) - 1`` and ``e^(r - c0)`` on the stadium (0 on an empty panel)."""
    with np.errstate(all="ignore"):
        return (np.where(W > 0, best, 0.0), np.where(W > 0, best * np.expm1(c1 + r) * (1 + 1e-6), 0.0),
                np.where(W > 0, best * np.exp(r - c0) * (1 + 1e-6), 0.0))


def _psg_truncation(psg, lo, c0, c1, raw: bool = False):
    """The 5-point rule's truncation error on the panels ``[lo + c0, lo + c1]`` of the subsampled Gaussian's density
    ``psg = (q, v, sd, remove)``, proved (docs/dominance.md, "The rules' truncation error"): ``(R_A, R_N, R_B)`` for
    ``int f``, ``int (1 - e^-t) f`` and ``int e^-t f`` (``t = y - lo``), infinite where a panel reaches the support's
    end.  Cauchy's estimate on the stadium of radius ``r`` about each panel; the reference of the C
    ``psg_rule_bound`` (the same operations; numpy's ``exp``, ``expm1``, ``log`` in place of libm's)."""
    from .._reference import subsampled_ginv
    q, v, sd, remove = psg
    lo, c0, c1 = (np.asarray(a, dtype=np.float64) for a in (lo, c0, c1))
    W = c1 - c0
    ya, yb = lo + c0, lo + c1
    A, B = (ya, yb) if remove else (-yb, -ya)
    ylo, logq = math.log1p(-q), math.log(q)
    gap = (A - ylo) - 8 * _U * (np.abs(A) + abs(ylo))
    with np.errstate(all="ignore"):
        lA, lB = subsampled_ginv(A, q), subsampled_ginv(B, q)
        bad = ~(gap > 0) | ~np.isfinite(lA) | ~np.isfinite(lB) | ~(W < 1e300)
        lq = abs(logq) + abs(ylo)
        lA = lA - 20 * _U * (1 + 2 * np.abs(lA) + 2 * lq)
        lB = lB + 20 * _U * (1 + 2 * np.abs(lB) + 2 * lq)
        cden, x = 1.0 / (sd * 2.5066282746310002), _psg_reach(lA, lB, v, remove)
        lp0, cap = 1.0 / -np.expm1(-gap), np.minimum(0.5 * gap, 1.0)
        r0 = np.minimum((-x + np.sqrt(x * x + 40 * v)) / (2 * lp0), cap)
        best, rb = np.full(W.shape, np.inf), np.zeros(W.shape)
        for r in (r0, 0.5 * r0, np.minimum(2 * r0, cap)):
            lp = 1.0 / -np.expm1(-(gap - r))
            Rk = _psg_cauchy(W, r, lA, lB, lp * r, lp, q, v, cden, remove)
            take = (r > 0) & (Rk < best)
            best, rb = np.where(take, Rk, best), np.where(take, r, rb)
        best = np.where(bad | ~(best < np.inf), np.inf, best * (1 + 1e-6))
    # (raw: the bound of int f and its radius, for the mirrored side of the samplers' symmetric loss)
    return (best, rb) if raw else _lattice_weights(best, W, c0, c1, rb)


def _psg_log_truncation(psg, d_far, bot, top, end):
    """The 5-point rule's truncation error on the log-distance panels ``[bot, top]`` (in ``u - log d_far``; the
    offset of the end from the cell's ``lo``: ``end``) of the subsampled Gaussian's density, proved: ``(R_A, R_N,
    R_B)`` per panel (docs/dominance.md, "The rules' truncation error"); the reference of the C
    ``psg_logrule_bound`` (the same operations)."""
    q, v, sd, remove = psg
    d_far, bot, top, end = (np.asarray(a, dtype=np.float64) for a in (d_far, bot, top, end))
    W = top - bot
    ylo, logq = math.log1p(-q), math.log(q)
    lq = abs(logq) + abs(ylo)
    with np.errstate(all="ignore"):
        db, dt = d_far * np.exp(bot), d_far * np.exp(top)
        lA, lB = (ylo + np.log(np.expm1(db))) - logq, (ylo + np.log(np.expm1(dt))) - logq
        g0 = dt / -np.expm1(-dt)
        bad = ~np.isfinite(lA) | ~np.isfinite(lB) | ~(g0 < np.inf) | ~(d_far > 0)
        lA = lA - (20 * _U * (1 + 2 * np.abs(lA) + 2 * lq) + g0 * _U * (np.abs(bot) + np.abs(top) + 6))
        lB = lB + (20 * _U * (1 + 2 * np.abs(lB) + 2 * lq) + g0 * _U * (np.abs(bot) + np.abs(top) + 6))
        cden, x = 1.0 / (sd * 2.5066282746310002), _psg_reach(lA, lB, v, remove)
        # (one radius: these panels are many, a cell's up to 360)
        r = np.minimum((-x + np.sqrt(x * x + 40 * v)) / (2 * g0), 1.0)
        dmax = d_far * np.exp(top + r)
        gp = dmax / -np.expm1(-dmax * np.cos(r))
        best = np.where(r > 0, _psg_cauchy(W, r, lA, lB, r * gp, gp, q, v, cden, remove), np.inf)
        dbest = np.where(r > 0, dmax, 0.0)
        best = np.where(bad | ~(best < np.inf), np.inf, best * (1 + 1e-6))
    return _log_weights(best, W, end, dbest)


def _gauss_truncation(m: float, s: float, lo, c0, c1):
    """The 5-point rule's truncation error on the panels ``[lo + c0, lo + c1]`` of the Gaussian loss's density
    ``N(m, s^2)``, proved as :func:`_psg_truncation`'s with ``l = t`` (entire: ``Lp = 1``, no end):
    ``|exp(-(z - m)^2 / 2 s^2)| <= exp((-x^2 + 2 x r + r^2) / 2 s^2)`` within ``r`` of a point ``x`` from ``m``;
    ``r`` the minimiser of ``-10 log r + (x r + r^2 / 2) / s^2 + r`` (the weights' ``e^r`` counted):
    ``20 s^2 / ((x + s^2) + sqrt((x + s^2)^2 + 40 s^2))``, at most 10, and half and twice it; of the three the one
    whose ``R_A + R_N + R_B`` is least.  ``(R_A, R_N, R_B)``."""
    lo, c0, c1 = (np.asarray(a, dtype=np.float64) for a in (lo, c0, c1))
    W = c1 - c0
    with np.errstate(all="ignore"):
        ya, yb = lo + c0, lo + c1
        # (the panel's ends against m, widened by their rounding and m's)
        la = (ya - m) - 4 * _U * (np.abs(ya) + abs(m))
        lb = (yb - m) + 4 * _U * (np.abs(yb) + abs(m))
        v, cden = s * s, 1.0 / (s * 2.5066282746310002)
        x = np.maximum(np.abs(la), np.abs(lb))
        xv = x + v
        r0 = 20 * v / (xv + np.sqrt(xv * xv + 40 * v))
        best, rb, tot = np.full(W.shape, np.inf), np.zeros(W.shape), np.full(W.shape, np.inf)
        for r in (r0, 0.5 * r0, 2 * r0):
            Rk = _cauchy(W, r, cden * _normal_sup(la, lb, r, v))
            t = Rk * (np.exp(c1 + r) + np.exp(r - c0))  # (R_A + R_N + R_B before their 1e-6: _lattice_weights)
            take = (r > 0) & (t < tot)
            best, rb, tot = np.where(take, Rk, best), np.where(take, r, rb), np.where(take, t, tot)
        best = np.where(best < np.inf, best * (1 + 1e-6), np.inf)
    return _lattice_weights(best, W, c0, c1, rb)


def _psl_sup(e0: float, q: float, remove: bool, tau_max, gap):
    """The largest ``|f|`` of the Poisson-subsampled Laplace loss's density (:func:`_psl_truncation`) where ``Re tau``
    is at most ``tau_max`` and at least ``gap`` above ``log(1 - q)``: ``(C / q) e^tau_max`` times its powers of ``w``
    at ``q |w| = (1 - q) expm1(gap)``, their least."""
    wmin = (1.0 - q) * np.expm1(gap) / q * (1 - 1e-9)  # (|w| at least this; its rounding)
    dens = ((1 - q) * wmin ** -1.5 + q * wmin ** -0.5) if remove else wmin ** -1.5
    return 0.25 * math.exp(-e0 / 2) / q * np.exp(tau_max) * dens


def _psl_params(loss):
    """``(e0, q, remove)`` of a Poisson-subsampled Laplace loss (``0 < q < 1``), else ``None``."""
    pair = getattr(loss, "pair", None)
    if isinstance(loss, SubsampledLoss) and isinstance(pair, _LaplacePair) and 0 < loss.q < 1:
        return pair.e, loss.q, loss.direction == "remove"
    return None


# (5!)^4 / (11 (10!)^3) = 3.94497e-13, rounded up: the 5-point rule's error constant against F^(10) W^11
_GL5_DERIV = 3.9450e-13


def _laplace_truncation(e0: float, lo, c0, c1):
    """The 5-point rule's truncation error on the panels ``[lo + c0, lo + c1]`` (``c0 >= 0``, inside the support
    ``(-e0, e0)``) of the Laplace loss's density ``f(y) = e^((y - e0) / 2) / 4``, proved: ``(R_A, R_N, R_B)``.  The
    integrands are exponentials in ``t = y - lo``: ``f`` grows like ``e^(t / 2)``, ``e^-t f`` like ``e^(-t / 2)`` and
    ``(1 - e^-t) f = f - e^-t f`` is ``2 f(lo) sinh(t / 2)``, so each has ``F^(10) = 2^-10 F`` and the rule errs by at
    most ``3.9450e-13 W^11 2^-10 max |F|`` over the panel (at ``c1``, ``c0`` and ``c1``)."""
    lo, c0, c1 = (np.asarray(a, dtype=np.float64) for a in (lo, c0, c1))
    W = np.maximum(c1 - c0, 0.0)
    with np.errstate(all="ignore"):
        # (f at the panel's ends, from above: exp within 4 ulp and the sums' rounding, 1e-6 relative covers both)
        k = _GL5_DERIV * 2.0 ** -10 * W ** 11 * (1 + 1e-6)
        fa = 0.25 * np.exp((lo + c1 - e0) / 2)
        RA = k * fa
        RN = k * fa * -np.expm1(-c1)
        RB = k * 0.25 * np.exp((lo + c0 - e0) / 2) * np.exp(-c0)
    return RA, RN, RB


def _psl_truncation(e0: float, q: float, remove: bool, lo, c0, c1, raw: bool = False):
    """The 5-point rule's truncation error on the panels ``[lo + c0, lo + c1]`` (inside the support) of the
    Poisson-subsampled Laplace loss's density, proved by Cauchy's estimate as :func:`_psg_truncation`'s: ``(R_A, R_N,
    R_B)``.  In the direction's variable ``tau = +-y``, with ``w = (e^tau - (1 - q)) / q = e^L`` and ``C = e^(-e0/2) /
    4``, the density is ``(C / q) e^tau ((1 - q) w^(-3/2) + q w^(-1/2))`` (remove: ``L`` under ``(1 - q) P + q Q``,
    whose densities are ``C e^(-+L/2)``) or ``(C / q) e^tau w^(-3/2)`` (add: under ``P``), analytic away from ``tau =
    log(1 - q)`` (``w = 0``), which lies ``gap`` below the panel.  On the stadium of radius ``r < gap`` about it,
    ``|e^tau| <= e^(B + r)`` and ``q |w| >= e^(A - r) - (1 - q) = (1 - q) expm1(gap - r) > 0`` (``tau = a + i b``:
    ``|e^tau - c| >= e^a - c``), so ``M`` is at most the density's expression with those; the weights as on the
    Gaussian panels.  ``r``: a quarter, half and three quarters of ``gap`` (at most 1), the least of the three."""
    lo, c0, c1 = (np.asarray(a, dtype=np.float64) for a in (lo, c0, c1))
    W = c1 - c0
    ya, yb = lo + c0, lo + c1
    A, B = (ya, yb) if remove else (-yb, -ya)
    ylo = math.log1p(-q)
    # (a lower bound on the exact gap: A and log(1 - q) each within a few ulp)
    gap = (A - ylo) - 8 * _U * (np.abs(A) + abs(ylo))
    with np.errstate(all="ignore"):
        bad = ~(gap > 0) | ~(W < 1e300)
        best, rb = np.full(W.shape, np.inf), np.zeros(W.shape)
        for f in (0.25, 0.5, 0.75):
            r = np.minimum(f * gap, 1.0)
            Rk = _cauchy(W, r, _psl_sup(e0, q, remove, B + r, gap - r))
            take = (r > 0) & (Rk < best)
            best, rb = np.where(take, Rk, best), np.where(take, r, rb)
        best = np.where(bad | ~(best < np.inf), np.inf, best * (1 + 1e-6))
    return (best, rb) if raw else _lattice_weights(best, W, c0, c1, rb)


def _sym_remove(loss):
    """The remove loss of the samplers' symmetric subsampled loss (:class:`SymmetricSubsampledLoss`) where its
    rules' bound is proved (a Gaussian or Laplace pair), else ``None``."""
    if isinstance(loss, SymmetricSubsampledLoss):
        rem = loss.rem
        if rem.psg_params is not None or _psl_params(rem) is not None:
            return rem
    return None


def _sym_truncation(rem, lo, c0, c1):
    """The 5-point rule's truncation error on the panels ``[lo + c0, lo + c1]`` of the samplers' symmetric subsampled
    loss, whose density is the remove loss's ``f`` above 0 and ``e^y f(-y)`` below (kinked at its atom 0): a panel
    above 0 has ``f``'s bound; one below has that of ``f`` on the mirrored panel ``[-yb, -ya]`` at the same radius
    ``r`` times ``e^(yb + r)``, the largest ``|e^y|`` on the stadium; one holding 0 has none (NaN: the 4-point
    estimate is charged there).  ``(R_A, R_N, R_B)``."""
    lo, c0, c1 = (np.asarray(a, dtype=np.float64) for a in (lo, c0, c1))
    W = c1 - c0
    ya, yb = lo + c0, lo + c1
    psg, psl = rem.psg_params, _psl_params(rem)

    def raw(lo_, c0_, c1_):
        return _psg_truncation(psg, lo_, c0_, c1_, raw=True) if psg is not None else \
            _psl_truncation(*psl, lo_, c0_, c1_, raw=True)
    pos = ya >= 0
    neg = (yb <= 0) & ~pos
    best, rb = np.full(W.shape, np.nan), np.zeros(W.shape)
    if pos.any():
        best[pos], rb[pos] = raw(lo[pos], c0[pos], c1[pos])
    if neg.any():
        bn, rb[neg] = raw(-yb[neg], np.zeros(int(neg.sum())), W[neg])
        with np.errstate(all="ignore"):
            best[neg] = bn * np.exp(yb[neg] + rb[neg]) * (1 + 1e-6)  # (exp within 4 ulp, the sum yb + r, the product)
    return _lattice_weights(best, W, c0, c1, rb)


def _psl_log_truncation(e0: float, q: float, remove: bool, d_far, bot, top, end, lo, side: int):
    """The 5-point rule's truncation error on the log-distance panels ``[bot, top]`` (in ``u - log d_far``; the
    support's end at offset ``end`` from the cell's ``lo``, ``side`` 0: below) of the Poisson-subsampled Laplace loss's
    density, proved as :func:`_psl_truncation`'s: ``(R_A, R_N, R_B)`` per panel.  The integrand in ``u`` is ``F(tau)
    d`` with ``d = d_far e^u`` and ``tau = tau_end +- d`` (``tau = +-y``).  On the stadium of radius ``rho <= 1``,
    ``|arg d| <= rho`` and ``|d| <= dmax = d_far e^(top + rho)``, so ``Re d >= 0``: ``Re tau`` lies between ``tau_end``
    and ``tau_end +- dmax`` (towards ``log(1 - q)`` or away from it), and ``M <= (C / q) e^(tau_max) dens(w_min)
    dmax`` with ``q w_min = (1 - q) expm1(tau_min - log(1 - q))``; the weights as on the subsampled Gaussian's
    log-distance panels.  ``rho``: a quarter, half and all of 1, the least of the three."""
    d_far, bot, top, end, lo = (np.asarray(a, dtype=np.float64) for a in (d_far, bot, top, end, lo))
    W = top - bot
    ylo = math.log1p(-q)
    s_end = lo + end
    tau_end = s_end if remove else -s_end
    towards = (side == 0) != remove  # (tau decreases with d: from the end towards log(1 - q))
    with np.errstate(all="ignore"):
        best, dbest = np.full(W.shape, np.inf), np.zeros(W.shape)
        for rho in (0.25, 0.5, 1.0):
            dmax = d_far * np.exp(top + rho)
            tmin = tau_end - dmax if towards else tau_end
            tmax = tau_end if towards else tau_end + dmax
            # (a lower bound on the exact gap: tau_end, dmax and log(1 - q) each within a few ulp)
            gap = (tmin - ylo) - 8 * _U * (np.abs(tau_end) + dmax + abs(ylo))
            Rk = np.where(gap > 0, _cauchy(W, rho, _psl_sup(e0, q, remove, tmax, gap) * dmax), np.inf)
            take = Rk < best
            best, dbest = np.where(take, Rk, best), np.where(take, dmax, dbest)
        bad = ~(best < np.inf) | ~(d_far > 0)
        best = np.where(bad, np.inf, best * (1 + 1e-6))
    return _log_weights(best, W, end, dbest)


def _proved_truncation(loss, lo, c0, c1):
    """``(R_A, R_N, R_B)``, the proved truncation error of the 5-point rule on the panels ``[lo + c0, lo + c1]`` of
    ``loss``'s density -- the subsampled Gaussian, the Gaussian, the Laplace loss, the subsampled Laplace and the
    samplers' symmetric loss of those pairs -- or ``None`` (no proof: custom densities)."""
    psg, psl, sym = getattr(loss, "psg_params", None), _psl_params(loss), _sym_remove(loss)
    if psg is not None:
        return _psg_truncation(psg, lo, c0, c1)
    if psl is not None:
        return _psl_truncation(*psl, lo, c0, c1)
    if sym is not None:
        return _sym_truncation(sym, lo, c0, c1)
    if isinstance(loss, GaussianLoss):
        return _gauss_truncation(loss.m, loss.s, lo, c0, c1)
    if isinstance(loss, LaplaceLoss):
        return _laplace_truncation(loss.e, lo, c0, c1)
    return None


def _compiled_panels(loss):
    """``(kernel, params)`` of the compiled panel rules of ``loss`` (``_leaf.psg_panels``, ``gauss_panels`` or
    ``psl_panels``, each with this numpy code as its reference), or ``None``.  Their proved bounds have no NaN (no
    panel they do not cover), so the 4-point rule would not run for these losses here either."""
    psg = getattr(loss, "psg_params", None)
    if psg is not None:
        return _kernels._leaf.psg_panels, (float(psg[0]), float(psg[1]), float(psg[2]), bool(psg[3]))
    if type(loss) is GaussianLoss:
        return _kernels._leaf.gauss_panels, (loss.m, loss.s, loss.mu_rel)
    psl = _psl_params(loss)
    if psl is not None:
        return _kernels._leaf.psl_panels, (float(psl[0]), float(psl[1]), bool(psl[2]))
    return None


def _panels(loss, lo, c0, c1):
    """5-point rules on the panels ``[lo + c0, lo + c1]`` (see :func:`_integrals`): ``(a, a_err, n, n_err,
    b, b_err, ea, en, eb)``, the errors the rules' (their truncation error -- proved for the subsampled Gaussian, the
    Gaussian, the Laplace and the subsampled Laplace, else estimated by a 4-point rule -- and rounding) and
    ``ea, en, eb`` the 5-point
    terms' sums weighted by their relative error bounds (:meth:`ContinuousLoss.pdf_error` at the nodes' positions,
    and the weights'), which no refinement reduces; the subsampled Gaussian's, the Gaussian's and the subsampled
    Laplace's by the compiled kernels (:func:`_compiled_panels`: the same terms, sums in another order)."""
    compiled = _compiled_panels(loss) if _kernels._core is not None and _kernels._leaf is not None else None
    if compiled is not None:
        fn, params = compiled
        return fn(*(np.ascontiguousarray(a, dtype=np.float64) for a in (lo, c0, c1)), *params, *_GL5_RULE)
    # (the 5-point truncation error, proved where :func:`_proved_truncation` has it: the choices read it, and refine
    # or take the log-distance rules where it is loose, near an end; NaN on a panel it does not cover -- the symmetric
    # loss's kink at 0 -- and the 4-point rule runs for its estimate)
    R = _proved_truncation(loss, lo, c0, c1)
    proved = R is not None and not np.isnan(R[0]).any()
    half = 0.5 * (c1 - c0)
    res = []
    for gl in ((_GL5,) if proved else (_GL5, _GL4)):
        x, w = gl
        t = c0[:, None] + half[:, None] * (1.0 + x[None, :])
        y = lo[:, None] + t
        f = np.asarray(loss.pdf(y.ravel()), dtype=np.float64).reshape(y.shape) * half[:, None]
        fw = f * w[None, :]
        wn, wb = -np.expm1(-t), np.exp(-t)
        res.append((fw.sum(axis=1), (fw * wn).sum(axis=1), (fw * wb).sum(axis=1)))
        if x.size == 5:
            # (the density's relative error at the nodes, each within u |y| + 4 u t of the exact one (c0 >= 0), and
            # the weights' 12 u, their values at the rounded t moved by up to e^-t 4 u t, absolute: 1 - e^-t is small
            # near 0; fpld_psg_panels's)
            with np.errstate(all="ignore"):
                rel = np.asarray(loss.pdf_error(y.ravel(), (_U * (np.abs(y) + 4 * t)).ravel()),
                                 dtype=np.float64).reshape(y.shape) + 12 * _U
            es = [v.sum(axis=1) for v in _error_terms(fw, wn, wb, rel, np.abs(fw) * wb * (4 * _U * t))]
    (a5, n5, b5), (a4, n4, b4) = res[0], (res[1] if not proved else (None,) * 3)
    R = (0.0, 0.0, 0.0) if R is None else R
    err = lambda x5, x4, r: _rule_error(x5, x4, r) + 16 * _U * x5
    return a5, err(a5, a4, R[0]), n5, err(n5, n4, R[1]), b5, err(b5, b4, R[2]), es[0], es[1], es[2]
