"""Cosine and sine tables of the direct DFTs and lattice spectra, with their error bounds.

Angles are reduced to ``[-pi/4, pi/4]`` exactly (integer quarter turns) before ``cosl`` / ``sinl``, so
every entry is within :data:`DFT_TABLE_ERR` u of the exact value (docs/roundoff.md, section 3e).  The
tables are kept in the process-wide store (:mod:`fastpld.resources`); both the compiled kernels and
their numpy references read them.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["DFT_TABLE_ERR", "DFT_TABLE_REL", "dft_table", "dft_order", "sin2_table"]


# Per component, every table entry is within 6 u of cos / sin of 2 pi r / N: the reduced angle
# phi = (pi/2) a / N, |phi| <= pi/4, carries 3 roundings (<= 3.01 u |phi| <= 2.4 u absolute) and
# cosl / sinl at most 2 ulp (<= 4 u |value| <= 2.9 u for sin's values <= 0.71, <= 2 u for cos's
# values in [0.71, 1)); quarter turns are exact swaps and negations.  Float64 tables are the long
# double ones rounded (within u64 of the exact values), not numpy's float64 sin / cos (whose SIMD
# versions may err by up to 4 ulp).
DFT_TABLE_ERR = 6.0
# tables are kept in the process-wide store (fastpld.resources, least recently used first out): a long
# double table of a 6k-point node costs ~1 ms of cosl / sinl and ~190 kB
_DFT_TABLES = None  # the store's region, made on first use


def _nbytes(v):
    return sum(a.nbytes for a in (v if isinstance(v, tuple) else (v,)))


def _dft_region():
    global _DFT_TABLES
    if _DFT_TABLES is None:
        from . import resources
        _DFT_TABLES = resources.region("dft_tables")
    return _DFT_TABLES


def _dft_cache_put(key, value):
    _dft_region().put(key, value, _nbytes(value))


def _dft_cache_get(key):
    return _dft_region().get(key)


_HALF_PI_LD = np.longdouble("1.57079632679489661923132169163975144")


def _reduced_angles(n: int, M: int):
    """``(q, phi)`` for ``2 pi r / M``, ``r = 0 .. n-1``: the nearest quarter turn ``q`` (mod 4; integers,
    exact) and the long double angle ``phi = (pi/2) (4 r - q M) / M`` in ``[-pi/4, pi/4]`` (three roundings)."""
    ld = np.dtype(np.longdouble)
    r = np.arange(n, dtype=np.int64)
    q = (4 * r + M // 2) // M
    phi = ((4 * r - q * M).astype(ld) * _HALF_PI_LD) / ld.type(M)
    return q & 3, phi


def dft_table(N: int, dtype):
    """``(c, s)``: ``cos`` and ``sin`` of ``2 pi r / N`` for ``r = 0 .. N-1`` in ``dtype`` (kept within
    :func:`fastpld.set_cache_limit`).  Each entry comes from an angle reduced to ``[-pi/4, pi/4]`` exactly
    (integer quarter turns), so it is within ``DFT_TABLE_ERR`` u of the exact value."""
    dt = np.dtype(dtype)
    key = (int(N), dt.char)
    t = _dft_cache_get(key)
    if t is not None:
        return t
    if dt != np.longdouble:
        c, s = (x.astype(dt) for x in dft_table(N, np.longdouble))
    else:
        q, phi = _reduced_angles(N, N)
        cp, sp = np.cos(phi), np.sin(phi)
        c = np.select([q == 0, q == 1, q == 2], [cp, -sp, -cp], sp).astype(dt)
        s = np.select([q == 0, q == 1, q == 2], [sp, cp, -sp], -cp).astype(dt)
    c.setflags(write=False)
    s.setflags(write=False)
    _dft_cache_put(key, (c, s))
    return c, s


def dft_order(p: np.ndarray, cen: int, N: int, dtype):
    """``(q, steps, err)`` for :func:`small_dft`: the non-zero masses in ascending order (in ``dtype``),
    their offsets ``(j - cen) mod N`` and the bound ``err`` on ``|X~_k - X_k|`` at every frequency, in
    units of ``u`` (of ``dtype``).

    Summing in ascending order keeps the partial sums small until the largest masses come: a
    sequential sum of products errs by at most ``u (sum |t_i| + sum_(i >= 2) |s_i|)`` per component
    (first order; ``1.01`` covers the rest), with ``|s_i| <= P_i`` (ascending partial sums of
    ``p``, table entries <= 1); the table adds ``DFT_TABLE_ERR u p_j`` and the cast of ``p`` into
    ``dtype`` ``u p_j``; the complex modulus is at most ``sqrt 2`` times the componentwise bound.
    """
    p = np.asarray(p)
    nz = np.flatnonzero(p)  # zero buckets add nothing (sparse inputs: the atoms of pure DP)
    order = nz[np.argsort(p[nz], kind="stable")]
    q = np.ascontiguousarray(p[order], dtype=dtype)
    steps = np.ascontiguousarray((order.astype(np.int64) - int(cen)) % int(N))
    pf = np.asarray(p[order], dtype=np.float64)
    P = np.cumsum(pf)
    S = float(P[-1]) if P.size else 0.0
    err = math.sqrt(2.0) * (1.01 * (S + float(np.sum(P[1:]))) + (DFT_TABLE_ERR + 1.0) * S) * (1 + 1e-9)
    return q, steps, err




# Relative error of every table entry (for the lattice spectra, which need it near zeros): an entry is
# +-sinl(phi) or +-cosl(phi) of the reduced angle, |phi| <= pi/4 with relative error 3.01 u; sin moves
# by at most 3.01 u (phi / sin phi) <= 3.35 u relative, cos by at most 3.01 u (pi/4) tan(phi) <= 2.4 u
# relative; libm adds 2 ulp <= 4 u relative.  (Float64 tables: the long double values rounded, u64.)
DFT_TABLE_REL = 7.5


def sin2_table(N: int, dtype):
    """``sin(pi r / N)^2`` for ``r = 0 .. N-1`` in ``dtype``, relatively accurate (``2 DFT_TABLE_REL + 1`` u):
    the squares of the sines :func:`dft_table` ``(2 N)`` would hold, computed alone (cached with it)."""
    dt = np.dtype(dtype)
    key = (int(N), dt.char, "s2")
    t = _dft_cache_get(key)
    if t is not None:
        return t
    # sin(2 pi r / (2N)) as in dft_table(2 N): +-sin or +-cos of the reduced angle by the quarter turn
    # (the sign goes in the square)
    q, phi = _reduced_angles(N, 2 * N)
    odd = (q & 1).astype(bool)
    v = np.empty(N, dtype=np.longdouble)
    v[odd] = np.cos(phi[odd])
    v[~odd] = np.sin(phi[~odd])
    t = (v * v).astype(dt)  # (float64: the long double square rounded once more, inside the bound)
    t.setflags(write=False)
    _dft_cache_put(key, t)
    return t

