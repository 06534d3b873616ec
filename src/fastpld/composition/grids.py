"""Cumulant grids of the privacy losses and the planner's Chernoff windows from them.

The planner predicts how wide every leaf and node of a plan will be before anything is computed:
from each loss's log-MGF (its cumulant generating function ``K(s)``), tabulated once per loss on the
fixed grid ``_S_GRID`` of ``s`` and cached on the loss, Chernoff bounds give quantiles of any sum of
copies.  Prediction only: execution bounds its windows from the concrete PMFs
(:func:`fastpld.composition.node._chernoff_window`).
"""
from __future__ import annotations

import math

import numpy as np

from .. import _kernels
from ..mechanisms import DiscreteLoss, SubsampledLoss, subsampled_log_mgf_rows


_S_GRID = np.geomspace(1e-7, 1e5, 361)


def _cumulant_grid(loss, native=False):
    """Cached ``(K(+s), K(-s))`` on the absolute grid ``_S_GRID``.

    ``native``: subsampled losses take their binomial moments from the compiled kernel (cached
    apart from the numpy backend's grids: each backend's plans must not depend on call history).
    """
    native = bool(native) and isinstance(loss, SubsampledLoss)
    attr = "_fastpld_kgrid_native" if native else "_fastpld_kgrid"
    cache = getattr(loss, attr, None)
    if cache is None:
        s = _S_GRID
        if isinstance(loss, DiscreteLoss):
            kp, kn = loss.log_mgf(s), loss.log_mgf(-s)
        else:
            lmgf = (lambda x: loss.log_mgf(x, native=True)) if native else loss.log_mgf
            with np.errstate(over="ignore", invalid="ignore"):
                # one vectorised call for both signs (elementwise: the same values as two calls)
                sc = np.where(s <= 512, s, np.nan)
                both = np.asarray(lmgf(np.concatenate([sc, -sc])), dtype=np.float64)
                kp, kn = both[:s.size], both[s.size:]
            kp = np.where(np.isnan(kp), np.inf, kp)
            kn = np.where(np.isnan(kn), np.inf, kn)
            kp, kn = _gauss_extend(loss, kp, kn)
        cache = (kp, kn)
        try:
            setattr(loss, attr, cache)
        except AttributeError:  # pragma: no cover
            pass
    return cache


def _gauss_extend(loss, kp, kn, far=None):
    """Planning only: extend the log-MGF grids past ``s = 512`` for losses that are Gaussian there.

    The mechanisms' MGFs are evaluated up to ``s = 512``; a loss with a tiny standard deviation
    (huge noise, e.g. the subsampled Gaussian calibrated for ``k = 2^30``: sd ~ 7e-6) needs
    ``s ~ 1e5`` for a tight Chernoff window, and the capped grid predicted windows up to 1000x too
    wide (meshes, sizes, costs and round-off estimates of the plans followed).  Where ``K(512)`` or
    ``K(-512)`` agrees with ``s mean + s^2 sd^2 / 2`` to ``delta <= 1e-3`` (relative), both grids
    take the minimum with that quadratic inflated by ``4 delta s / 512`` (the cubic term's growth)
    while the inflation stays below 25% (the other side's MGF is often a loose convexity bound).
    Predictions only: execution bounds its windows from the concrete PMFs.

    ``far``: :func:`_far_from_gauss` of the grids if already known (it decides without the moments).
    """
    i = _IDX_S512
    if far is None:
        far = bool(_far_from_gauss(kp[None, :], kn[None, :])[0])
    if far:  # the test below fails whatever the moments are: they need not be computed
        return kp, kn
    try:
        mu, sd = float(loss.mean()), float(loss.std())
    except Exception:  # pragma: no cover - a loss without moments keeps the capped grid
        return kp, kn
    if not (math.isfinite(mu) and math.isfinite(sd) and sd > 0):
        return kp, kn
    s = _S_GRID
    deltas = []
    for k, sign in ((kp, 1.0), (kn, -1.0)):
        g0 = sign * s[i] * mu + 0.5 * (s[i] * sd) ** 2
        ok = math.isfinite(k[i]) and g0 > 0
        deltas.append(max(abs(float(k[i]) - g0) / g0, 1e-9) if ok else math.inf)
    delta = min(deltas)
    if delta > 1e-3:
        return kp, kn
    # one side's MGF is tight and Gaussian at s = 512: the loss is Gaussian at that scale, so the
    # other side (the mechanisms bound one side by a loose convexity argument) follows the same
    # quadratic, on the whole grid; both continue past 512 while the inflation stays below 25%
    infl = 4.0 * delta * s / s[i]
    out = []
    for k, sign in ((kp, 1.0), (kn, -1.0)):
        ext = np.where(infl <= 0.25, (sign * s * mu + 0.5 * (s * sd) ** 2) * (1 + infl), np.inf)
        out.append(np.minimum(k, ext))
    return out[0], out[1]


_IDX_S512 = int(np.searchsorted(_S_GRID, 512.0, side="right")) - 1  # _gauss_extend's test point
_IDX_S1 = int(np.argmin(np.abs(_S_GRID - 1.0)))  # s = 1 (to round-off) on the grid: K(1) for _tightened_grid_stack
# grid points for the second-moment bound of _far_from_gauss (every third from s = 1e-3: any s is valid)
_IDX_SECOND_MOMENT = np.nonzero(_S_GRID >= 1e-3)[0][::3]


def _far_from_gauss(kp, kn):
    """Rows of the 2-D grids ``(kp, kn)`` where :func:`_gauss_extend` returns the grids unchanged whatever
    the loss's mean and standard deviation (so that they need not be computed: a quadrature per loss).

    Its test compares ``K(+-512)`` with ``g0 = +-512 mu + 512^2 sd^2 / 2`` and keeps the grids when both
    sides miss by more than 0.1%.  Since ``cosh(x) - 1 >= x^2 / 2``, ``E[Y^2] <= (e^K(s) - 1 + e^K(-s) - 1)
    / s^2`` for the upper bounds ``K`` on the grid (any ``s``; :meth:`PrivacyLoss.log_mgf` bounds from
    above), and ``|mu|, sd <= sqrt(E[Y^2])``; a side whose ``K(+-512)`` is infinite, or above ``1.0011``
    times the largest ``g0`` these allow, misses (the 1e-4 slack covers the rounding and the moments'
    quadrature error, ~1e-12 relative).  Planning only; tested against the moments' test itself.
    """
    s = _S_GRID[_IDX_SECOND_MOMENT]
    with np.errstate(over="ignore", invalid="ignore"):
        e2 = np.min((np.expm1(kp[:, _IDX_SECOND_MOMENT]) + np.expm1(kn[:, _IDX_SECOND_MOMENT])) / (s * s), axis=1)
        si = _S_GRID[_IDX_S512]
        g_hi = (si * np.sqrt(e2) + 0.5 * (si * si) * e2) * 1.0011  # NaN (never far) if e2 < 0 by round-off
        far = [~np.isfinite(k[:, _IDX_S512]) | (k[:, _IDX_S512] > g_hi) for k in (kp, kn)]
    return far[0] & far[1]


def _cumulant_grids(losses, native=False):
    """``[_cumulant_grid(loss, native) for loss in losses]``, the missing grids of subsampled losses in one pass.

    Heterogeneous schedules have one loss per part: :func:`fastpld.mechanisms.subsampled_log_mgf_rows`
    evaluates all their MGFs at once and :func:`_far_from_gauss` spares most of them the moments of
    :func:`_gauss_extend`; the cached grids are bitwise those of :func:`_cumulant_grid` (tested).
    """
    attr = "_fastpld_kgrid_native" if native else "_fastpld_kgrid"
    todo, seen = [], set()
    for loss in losses:
        # (exactly SubsampledLoss: a subclass may have its own log_mgf)
        if type(loss) is SubsampledLoss and id(loss) not in seen and getattr(loss, attr, None) is None:
            seen.add(id(loss))
            todo.append(loss)
    if len(todo) > 1:
        s = _S_GRID
        with np.errstate(over="ignore", invalid="ignore"):
            sc = np.where(s <= 512, s, np.nan)  # as _cumulant_grid
            both = subsampled_log_mgf_rows(todo, np.concatenate([sc, -sc]), native=native)
            kp, kn = both[:, :s.size], both[:, s.size:]
            kp = np.where(np.isnan(kp), np.inf, kp)
            kn = np.where(np.isnan(kn), np.inf, kn)
            far = _far_from_gauss(kp, kn)
        for r, (loss, f) in enumerate(zip(todo, far.tolist())):
            cache = (kp[r], kn[r]) if f else _gauss_extend(loss, kp[r], kn[r], False)
            try:
                setattr(loss, attr, (cache[0], cache[1]))
            except AttributeError:  # pragma: no cover
                pass
    return [_cumulant_grid(loss, native) for loss in losses]


def _est_window(parts, tail, native=False):
    """Approximate ``[lo, hi]`` holding ``sum_i (count_i copies of loss_i)`` up to ``tail`` each side.

    ``native``: the quantiles of one part come from the compiled kernel (same arithmetic).
    """
    # called ~10 times per candidate plan: one array operation per loss
    kp = kn = None
    lo_sup = hi_sup = 0.0
    if native and len(parts) == 1:
        loss, c = parts[0]
        a, b = _cumulant_grid(loss, True)
        lo, up = _kernels.chernoff_quantiles(a, b, _S_GRID, float(c), math.log(tail))
        lo_sup = c * loss.support[0] if math.isfinite(loss.support[0]) else -math.inf
        hi_sup = c * loss.support[1] if math.isfinite(loss.support[1]) else math.inf
    for loss, c in ([] if native and len(parts) == 1 else parts):
        a, b = _cumulant_grid(loss, native)
        kp = c * a if kp is None else kp + c * a
        kn = c * b if kn is None else kn + c * b
        lo_sup += c * loss.support[0] if math.isfinite(loss.support[0]) else -math.inf
        hi_sup += c * loss.support[1] if math.isfinite(loss.support[1]) else math.inf
    if kp is not None:
        lo, up = _chernoff_quantiles(kp, kn, tail, native)
    if not (math.isfinite(up) and math.isfinite(lo)):  # no MGF known: Gaussian approximation
        mean = var = 0.0
        for loss, c in parts:
            mean += c * loss.mean()
            var += c * loss.std() ** 2
        z = math.sqrt(-2 * math.log(tail)) * 1.5
        if not math.isfinite(up):
            up = mean + z * math.sqrt(var)
        if not math.isfinite(lo):
            lo = mean - z * math.sqrt(var)
    return max(lo, lo_sup), min(up, hi_sup)


def _chernoff_quantiles(kp, kn, tail, native=False):
    """``(lo, up)`` with ``Pr[S < lo], Pr[S > up] <= tail`` from summed log-MGF grids on ``+-_S_GRID``.

    ``+inf`` grid entries (unknown MGF) drop out of the minimum; non-finite if nothing is known.
    ``native``: one pass of the compiled kernel (same arithmetic, same result).
    """
    lt = math.log(tail)
    if native:
        return _kernels.chernoff_quantiles(kp, kn, _S_GRID, 1.0, lt)
    with np.errstate(invalid="ignore", over="ignore"):
        up = float(np.min((kp - lt) / _S_GRID))
        lo = -float(np.min((kn - lt) / _S_GRID))
    return (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(up) else up)


def _window_from_grids(kp, kn, lo_sup, hi_sup, tail, native=False):
    """Chernoff window of a sum from its summed MGF grids (as :func:`_est_window`, non-finite if unknown)."""
    lo, up = _chernoff_quantiles(kp, kn, tail, native)
    return max(lo, lo_sup), min(up, hi_sup)
