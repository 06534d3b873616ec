"""Gauss-Legendre quadrature on panels, shared by the losses' partial moments and the pairs' expectations."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # (annotations only: the losses import this module)
    from .base import ContinuousLoss

__all__: list[str] = []

_GL_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _gl_panels(f, lo, hi, n, keep=False):
    """Gauss-Legendre integral of ``f`` over each panel ``[lo_i, hi_i]`` (``keep``: also nodes, values)."""
    if n not in _GL_CACHE:
        _GL_CACHE[n] = np.polynomial.legendre.leggauss(n)
    x, w = _GL_CACHE[n]
    mid = 0.5 * (lo + hi)
    half = 0.5 * (hi - lo)
    pts = mid[:, None] + half[:, None] * x[None, :]
    vals = f(pts.ravel()).reshape(pts.shape)
    if keep:
        return half * (vals @ w), pts, vals
    return half * (vals @ w)


def _gl_panels_16_8(f, lo, hi):
    """:func:`_gl_panels` with 16 and with 8 points from one call of ``f`` (same values)."""
    for n in (16, 8):
        if n not in _GL_CACHE:
            _GL_CACHE[n] = np.polynomial.legendre.leggauss(n)
    (x16, w16), (x8, w8) = _GL_CACHE[16], _GL_CACHE[8]
    mid = 0.5 * (lo + hi)
    half = 0.5 * (hi - lo)
    p16 = mid[:, None] + half[:, None] * x16[None, :]
    p8 = mid[:, None] + half[:, None] * x8[None, :]
    vals = f(np.concatenate([p16.ravel(), p8.ravel()]))
    return half * (vals[: p16.size].reshape(p16.shape) @ w16), half * (vals[p16.size:].reshape(p8.shape) @ w8)


def _gl_integrate(f, lo, hi, n):
    return float(np.sum(_gl_panels(f, lo, hi, n)))


def _cdf_moments(loss: "ContinuousLoss", lo: float, hi: float) -> tuple[float, float]:
    """Mean and standard deviation of a loss on ``[lo, hi]`` by quadrature of its CDF on 2048 panels.

    Second moment by parts, ``int t^2 dF = b^2 F(b) - a^2 F(a) - 2 int t F(t) dt``; the CDF values at the
    16-point nodes serve both integrals.
    """
    edges = np.linspace(lo, hi, 2049)
    m, _, i16 = loss._partial_moments(edges, second=True)
    if i16 is None:
        i16 = _gl_integrate(lambda x: x * loss.cdf(x), edges[:-1], edges[1:], 16)
    fa, fb = float(loss.cdf(np.array([lo]))[0]), float(loss.cdf(np.array([hi]))[0])
    m2 = hi * hi * fb - lo * lo * fa - 2 * i16
    return float(m), float(math.sqrt(max(m2 - m * m, 0.0)))
