"""Tail bounds of privacy losses: Chernoff bounds from the log-MGF, and the truncation ladder.

:func:`chernoff_tail_bound` / :func:`chernoff_tail_quantile` bound the tails of ``count``
self-compositions of a loss from an upper bound on its cumulant generating function (the
methods :meth:`PrivacyLoss.tail_bound` / :meth:`PrivacyLoss.tail_quantile`).  :func:`ladder` and
:func:`_generic_window` find points beyond which a loss's CDF / survival function is below a
tail (the generic truncation window, which :mod:`fastpld.discretize` continues).  Only the
loss's ``support``, ``std``, ``log_mgf``, ``cdf`` and ``sf`` are used.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # (annotations only: the losses import this module)
    from .base import ContinuousLoss, PrivacyLoss

__all__ = ["chernoff_tail_bound", "chernoff_tail_quantile", "ladder"]


def chernoff_tail_bound(loss: "PrivacyLoss", count: int, x: float, *, upper: bool = True) -> float:
    """Rigorous bound on ``Pr[Y_1 + ... + Y_count >= x]`` (or ``<= x`` if ``upper=False``).

    Uses ``Pr[S >= x] <= exp(count * K(s) - s x)`` minimised over a grid of
    ``s`` (any ``s`` gives a valid bound), and the support of the loss.
    """
    lo, hi = loss.support
    if upper and x > count * hi:
        return 0.0
    if not upper and x < count * lo:
        return 0.0
    s = _s_grid(loss.std() * math.sqrt(count))
    if not upper:
        s = -s
    with np.errstate(over="ignore", invalid="ignore"):
        expo = count * loss.log_mgf(s) - s * x
    expo = expo[np.isfinite(expo)]
    if expo.size == 0:
        return 1.0
    return float(min(1.0, math.exp(min(0.0, expo.min()))))


def chernoff_tail_quantile(loss: "PrivacyLoss", count: int, tail: float, *, upper: bool = True) -> float:
    """Smallest ``x`` (largest if ``upper=False``) with ``chernoff_tail_bound(loss, count, x) <= tail``.

    Solved per grid point ``s``: ``x(s) = (count K(s) - log tail) / s``; the
    best grid point is returned, which is a valid (slightly loose) answer.
    """
    lo, hi = loss.support
    s = _s_grid(loss.std() * math.sqrt(count))
    if not upper:
        s = -s
    with np.errstate(over="ignore", invalid="ignore"):
        xs = (count * loss.log_mgf(s) - math.log(tail)) / s
    xs = xs[np.isfinite(xs)]
    if upper:
        best = xs.min() if xs.size else math.inf
        return float(min(best, count * hi))
    best = xs.max() if xs.size else -math.inf
    return float(max(best, count * lo))


def _s_grid(scale: float) -> np.ndarray:
    """Grid of Chernoff parameters around the natural scale ``1/scale``."""
    scale = max(scale, 1e-300)
    return np.geomspace(1e-3, 1e4, 160) / scale


def _generic_window(loss: "ContinuousLoss", tail: float, centre: float = 0.0, scale: float = 1.0) -> tuple[float, float]:
    """Points ``a <= b`` with ``cdf(a) <= tail`` and ``sf(b) <= tail``.

    Searched on a vectorised geometric ladder around ``centre``; any such pair is
    valid where it is used, because callers charge the mass actually left out.
    """
    lo, hi = loss.support
    steps = _ladder_steps(centre, scale)  # shared by both sides
    a = ladder(loss.cdf, tail, centre, scale, -1.0, lo, _steps=steps)
    b = ladder(loss.sf, tail, centre, scale, +1.0, hi, _steps=steps)
    return a, b


_LADDER_BASE = np.concatenate([[0.0], np.geomspace(1e-9, 1e7, 400)])


def _ladder_steps(centre, scale):
    """Sorted distinct distances of :func:`ladder`: the base ladder on the scale and on ``|centre|``."""
    base = _LADDER_BASE
    # a second ladder on the scale of |centre|: a standard deviation that underflowed (all the
    # mass numerically at one point) must not hide the tail; any point found is valid
    a = base * max(scale, 1e-300)
    b = base[1:] * max(abs(centre), 1.0)
    # np.unique of the concatenation (a merge sort of two sorted runs is one linear pass)
    merged = np.concatenate([a, b])
    merged.sort(kind="mergesort")
    keep = np.empty(merged.size, dtype=bool)
    keep[0] = True
    np.not_equal(merged[1:], merged[:-1], out=keep[1:])
    return merged[keep]


def ladder(fn, tail, centre, scale, direction, limit, *, _steps=None):
    """First point ``centre + direction * d`` (``d`` on a refined ladder) with ``fn <= tail``.

    Points beyond a finite support ``limit`` are replaced by a point just outside
    it, where ``fn`` (a CDF below the support, a survival function above) is 0.
    """
    if math.isfinite(limit):
        out = limit + direction * max(1e-12 * abs(limit), 1e-300)
        # an atom at the support's end heavier than tail (Laplace): fn exceeds tail at every
        # point inside, so the ladder would end just outside; one evaluation instead of a search
        inside = math.nextafter(limit, -direction * math.inf)
        if float(fn(np.array([inside]))[0]) > tail:
            return float(out)
    steps = _ladder_steps(centre, scale) if _steps is None else _steps
    xs = centre + direction * steps
    if math.isfinite(limit):
        xs = np.where(direction * (xs - limit) >= 0, out, xs)
        # a scale that underflowed (tiny losses) must not hide the support's end, where fn = 0
        xs = np.append(xs, out)
    # fn is non-increasing along the ladder: find its first point <= tail on every 16th point,
    # then inside that stride (the same point as a full scan, at a tenth of the evaluations;
    # should round-off break the monotonicity, the point found still satisfies fn <= tail)
    coarse = np.nonzero(fn(xs[15::16]) <= tail)[0]
    if coarse.size:
        j = 16 * int(coarse[0])
        ok = np.nonzero(fn(xs[j:j + 15]) <= tail)[0]
        ok = ok + j if ok.size else np.array([j + 15])
    else:
        j = 16 * (xs.size // 16)
        ok = np.nonzero(fn(xs[j:]) <= tail)[0] + j
    if ok.size == 0:
        raise ValueError(
            f"the privacy loss distribution has tail mass above {tail:.3g} beyond 1e7 standard "
            "deviations; its parameters are outside the supported range (too little noise for the "
            "sensitivity, or too large an epsilon: the loss cannot be evaluated in float64 there)"
        )
    i = ok[0]
    if i == 0:
        return float(xs[0])
    fine = np.linspace(xs[i - 1], xs[i], 48)
    # (strided as above: every 8th point, then inside the stride)
    cf = np.nonzero(fn(fine[7::8]) <= tail)[0]
    j = 8 * int(cf[0]) if cf.size else 40  # fine[-1] = xs[i] is <= tail
    okf = np.nonzero(fn(fine[j:j + 7]) <= tail)[0]
    return float(fine[j + okf[0]] if okf.size else fine[j + 7])
