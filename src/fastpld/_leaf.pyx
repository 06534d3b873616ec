# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Native leaf kernels of fastpld: the Poisson-subsampled Gaussian loss (CDF, survival
function, density, partial moments).  Numpy references: :func:`fastpld._kernels.psg_eval`
and :func:`fastpld._kernels.psg_moments`.  The GIL is released around every kernel.

(A module of its own, next to :mod:`fastpld._core`, so that the leaf and the FFT-node
kernels can change independently.)
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t
from libc.math cimport isfinite, log, log1p

cnp.import_array()

cdef extern from "fastpld_leaf.h" nogil:
    int fpld_psg_eval(const double *t, Py_ssize_t n, double q, double v, double sd, int remove,
                      double *F, double *S, double *pdf)
    int fpld_psg_panels(const double *lo, const double *c0, const double *c1, Py_ssize_t n, double q, double v,
                        double sd, int remove, const double *x5, const double *w5, double *out, double *eout)
    void fpld_psg_rule_bound(double lo, double c0, double c1, double q, double v, double sd, double logq, double ylo,
                             int remove, double *R)
    int fpld_gauss_panels(const double *lo, const double *c0, const double *c1, Py_ssize_t n, double m, double s,
                          double mu_rel, const double *x5, const double *w5, double *out, double *eout)
    int fpld_psl_panels(const double *lo, const double *c0, const double *c1, Py_ssize_t n, double e0, double q,
                        int remove, const double *x5, const double *w5, double *out, double *eout)
    int fpld_psg_logpanels(const double *lo, const double *end, const double *dfar, const double *ulo,
                           const double *steps, Py_ssize_t n, double sgn, double q, double v, double sd, int remove,
                           const double *x5, const double *w5, double *out)
    int fpld_psg_moments(double l_lo, double l_hi, double q, double v, double sd, int remove,
                         const double *x16, const double *w16, const double *x8, const double *w8, double *out)
    int fpld_psg_moments16(double l_lo, double l_hi, double q, double v, double sd, int remove,
                           const double *x16, const double *w16, double *out)


def psg_eval(const double[::1] t, double q, double v, double sd, bint remove, bint want_pdf=True,
             bint want_cdf=True):
    """``(F, S, pdf)`` at ``t`` (``pdf`` is ``None`` unless ``want_pdf``, ``F`` and ``S`` unless ``want_cdf``)."""
    cdef Py_ssize_t n = t.shape[0]
    F = np.empty(n if want_cdf else 0, dtype=np.float64)
    S = np.empty(n if want_cdf else 0, dtype=np.float64)
    P = np.empty(n if want_pdf else 0, dtype=np.float64)
    cdef double[::1] fv = F, sv = S, pv = P
    cdef int status = 0
    if n:
        with nogil:
            status = fpld_psg_eval(&t[0], n, q, v, sd, remove, &fv[0] if want_cdf else NULL,
                                   &sv[0] if want_cdf else NULL, &pv[0] if want_pdf else NULL)
    if status != 0:
        raise ValueError("psg_eval: invalid argument")
    return (F if want_cdf else None), (S if want_cdf else None), (P if want_pdf else None)


cdef inline bint _tail_below(const double[::1] e, Py_ssize_t i, bint upper, double tau, double q, double v,
                             double sd, bint remove) noexcept nogil:
    """Whether the survival function (``upper``) or the CDF at ``e[i]`` is at most ``tau``, both finite
    (``fpld_psg_eval`` at that point alone: the same value as in a pass over many)."""
    cdef double x = e[i], F = 0.0, S = 0.0
    if fpld_psg_eval(&x, 1, q, v, sd, remove, &F, &S, NULL) != 0:
        return False
    return (S if upper else F) <= tau and isfinite(F) and isfinite(S)


def psg_tail_cells(const double[::1] e, double q, double v, double sd, bint remove, double share,
                   Py_ssize_t big, Py_ssize_t small):
    """``(starts, sizes)`` of the leaf's cells (reference: ``fastpld.dominance.leaves._tail_blocks``' scan for
    other losses, the same evaluations and comparisons): blocks of ``M`` intervals of the lattice ``e`` (``M =
    big``, then ``small``; ``big`` a multiple of ``small``) aligned on multiples of ``M`` whose outer mass
    (survival function at the lower edge, CDF at the upper, ``fpld_psg_eval``) is at most ``share / M^2`` become
    one cell where all their intervals are still cells of one; the rest are cells of one interval.

    The CDF rises and the survival function falls along the lattice, so the blocks whose CDF is small are a
    prefix and those whose survival function is small a suffix: each boundary is found by bisection, ~2 log2 of
    the blocks' evaluations instead of one per block (the scan's ``n / small``: 0.12 ms of a 7,452-point leaf,
    on the chain's path).  Where rounding made the computed values not monotone next to ``share / M^2`` the
    cells could differ from the scan's there; any cells give a valid leaf (their error is second order)."""
    cdef Py_ssize_t n = e.shape[0] - 1, nb, M, j, count = 0, r, lo, hi, mid, b, pfx, sfx
    cdef double tau
    cdef bint ok
    if n < 0 or small < 1 or big < small or big % small or not (0 < q < 1 and v > 0 and sd > 0):
        raise ValueError("psg_tail_cells: invalid argument")
    size = np.ones(max(n, 0), dtype=np.int64)
    cdef int64_t[::1] sz = size
    if n // small < 3:
        return np.arange(n, dtype=np.int64), size
    starts = np.empty(n, dtype=np.int64)
    sizes = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] st = starts, so = sizes
    with nogil:
        for r in range(2):
            M = big if r == 0 else small
            nb = n // M
            if nb < 3:
                continue
            tau = share / <double>(M * M)
            # the prefix: blocks whose CDF at the upper edge is at most tau
            lo = 0
            hi = nb
            while lo < hi:
                mid = (lo + hi) // 2
                if _tail_below(e, (mid + 1) * M, False, tau, q, v, sd, remove):
                    lo = mid + 1
                else:
                    hi = mid
            pfx = lo
            # the suffix: blocks whose survival function at the lower edge is at most tau
            lo = pfx
            hi = nb
            while lo < hi:
                mid = (lo + hi) // 2
                if _tail_below(e, mid * M, True, tau, q, v, sd, remove):
                    hi = mid
                else:
                    lo = mid + 1
            sfx = lo
            for b in range(nb):
                if pfx <= b < sfx:
                    continue
                ok = True
                for j in range(b * M, (b + 1) * M):
                    if sz[j] != 1:
                        ok = False
                        break
                if ok:
                    for j in range(b * M, (b + 1) * M):
                        sz[j] = M
        j = 0
        while j < n:
            st[count] = j
            so[count] = sz[j]
            count += 1
            j += sz[j]
    return starts[:count].copy(), sizes[:count].copy()


def psg_rule_bound(const double[::1] lo, const double[::1] c0, const double[::1] c1, double q, double v, double sd,
                   bint remove):
    """``(R_A, R_N, R_B)`` of ``fpld_psg_rule_bound`` per panel (reference: ``fastpld.dominance.rules._psg_truncation``)."""
    cdef Py_ssize_t n = lo.shape[0], i
    if c0.shape[0] != n or c1.shape[0] != n or not (0 < q < 1 and v > 0 and sd > 0):
        raise ValueError("psg_rule_bound: invalid argument")
    out = np.empty((3, n), dtype=np.float64)
    cdef double[:, ::1] ov = out
    cdef double R[3]
    cdef double logq = log(q), ylo = log1p(-q)
    with nogil:
        for i in range(n):
            fpld_psg_rule_bound(lo[i], c0[i], c1[i], q, v, sd, logq, ylo, remove, R)
            ov[0, i] = R[0]
            ov[1, i] = R[1]
            ov[2, i] = R[2]
    return tuple(out)


cdef int _panels_call(int kind, const double *lo, const double *c0, const double *c1, Py_ssize_t n,
                      const double *p, const double *x5, const double *w5, double *out) noexcept nogil:
    if kind == 0:
        return fpld_psg_panels(lo, c0, c1, n, p[0], p[1], p[2], <int>p[3], x5, w5, out, out + 6 * n)
    if kind == 1:
        return fpld_gauss_panels(lo, c0, c1, n, p[0], p[1], p[2], x5, w5, out, out + 6 * n)
    return fpld_psl_panels(lo, c0, c1, n, p[0], p[1], <int>p[2], x5, w5, out, out + 6 * n)


cdef tuple _panels(str name, int kind, const double[::1] lo, const double[::1] c0, const double[::1] c1,
                   tuple params, const double[::1] x5, const double[::1] w5):
    """``(a, a_err, n, n_err, b, b_err, ea, en, eb)`` of the panels kernel ``kind`` (0: ``fpld_psg_panels``, 1:
    ``fpld_gauss_panels``, 2: ``fpld_psl_panels``) with its loss's ``params``."""
    cdef Py_ssize_t n = lo.shape[0]
    if c0.shape[0] != n or c1.shape[0] != n or x5.shape[0] != 5 or w5.shape[0] != 5:
        raise ValueError(f"{name}: need n panels and the 5-point Gauss-Legendre rule")
    out = np.empty((9, n), dtype=np.float64)
    cdef double[:, ::1] ov = out
    cdef double p[4]
    cdef int status = 0, j
    for j in range(len(params)):
        p[j] = float(params[j])
    if n:
        with nogil:
            status = _panels_call(kind, &lo[0], &c0[0], &c1[0], n, p, &x5[0], &w5[0], &ov[0, 0])
    if status != 0:
        raise ValueError(f"{name}: invalid argument")
    return tuple(out)


def psg_panels(const double[::1] lo, const double[::1] c0, const double[::1] c1, double q, double v, double sd,
               bint remove, const double[::1] x5, const double[::1] w5):
    """``(a, a_err, n, n_err, b, b_err, ea, en, eb)`` of ``fpld_psg_panels`` (reference:
    ``fastpld.dominance.rules._panels``)."""
    return _panels("psg_panels", 0, lo, c0, c1, (q, v, sd, 1.0 if remove else 0.0), x5, w5)


def gauss_panels(const double[::1] lo, const double[::1] c0, const double[::1] c1, double m, double s,
                 double mu_rel, const double[::1] x5, const double[::1] w5):
    """The same of ``fpld_gauss_panels``, the Gaussian loss ``N(m, s^2)``'s (``mu_rel``: its parameter's
    uncertainty; reference: ``fastpld.dominance.rules._panels``)."""
    return _panels("gauss_panels", 1, lo, c0, c1, (m, s, mu_rel), x5, w5)


def psl_panels(const double[::1] lo, const double[::1] c0, const double[::1] c1, double e0, double q, bint remove,
               const double[::1] x5, const double[::1] w5):
    """The same of ``fpld_psl_panels``, the Poisson-subsampled Laplace loss's (the pair's ``eps0`` ``e0``;
    reference: ``fastpld.dominance.rules._panels``)."""
    return _panels("psl_panels", 2, lo, c0, c1, (e0, q, 1.0 if remove else 0.0), x5, w5)


def psg_logpanels(const double[::1] lo, const double[::1] end, const double[::1] dfar, const double[::1] ulo,
                  const double[::1] steps, double sgn, double q, double v, double sd, bint remove,
                  const double[::1] x5, const double[::1] w5):
    """``(a5, n5, b5, ea, en, eb, Ra, Rn, Rb)`` of ``fpld_psg_logpanels`` (reference:
    ``fastpld.dominance.rules._log_panels``)."""
    cdef Py_ssize_t n = lo.shape[0]
    if end.shape[0] != n or dfar.shape[0] != n or ulo.shape[0] != n or steps.shape[0] != n or x5.shape[0] != 5 \
            or w5.shape[0] != 5:
        raise ValueError("psg_logpanels: need n intervals and the 5-point Gauss-Legendre rule")
    out = np.empty((9, n), dtype=np.float64)
    cdef double[:, ::1] ov = out
    cdef int status = 0
    if n:
        with nogil:
            status = fpld_psg_logpanels(&lo[0], &end[0], &dfar[0], &ulo[0], &steps[0], n, sgn, q, v, sd, remove,
                                        &x5[0], &w5[0], &ov[0, 0])
    if status != 0:
        raise ValueError("psg_logpanels: invalid argument")
    return tuple(out)


cdef extern from "fastpld_leaf.h" nogil:
    int fpld_psg_integrals(const double *lo, const double *h, Py_ssize_t n, Py_ssize_t h_stride, double tiny,
                           double s_lo, double s_hi, double q, double v, double sd, int remove, double cre,
                           double near_end, double refine_rel, double u_step, double u_step_near, double u_depth,
                           int u_refine, double rel_cap, int64_t max_panels, const double *x5, const double *w5,
                           double anchor, double *out)


def psg_integrals(const double[::1] lo, h, double tiny, double s_lo, double s_hi, double q, double v, double sd,
                  bint remove, double cre, double near_end, double refine_rel, double u_step, double u_step_near,
                  double u_depth, int u_refine, double rel_cap, int64_t max_panels, const double[::1] x5,
                  const double[::1] w5, double anchor=float("nan")):
    """``(a, a_err, n, n_err, b, b_err)`` of ``fpld_psg_integrals`` (reference: ``dominance.quadrature._integrals``).

    Parameters
    ----------
    lo : float64 array
        The cells' starts.
    h : float or float64 array
        Their width, or one width per cell.
    tiny : float
        A cell's mass error at most this is not refined (``leaves._negligible``).
    s_lo, s_hi : float
        The loss's support (one end finite).
    q, v, sd, remove :
        The loss's ``psg_params``.
    cre : float
        The loss's ``cdf_rel_error``.
    near_end, refine_rel, u_step, u_step_near, u_depth, u_refine, rel_cap, max_panels :
        ``quadrature._NEAR_END``, ``_REFINE_REL``, ``_U_STEP``, ``_U_STEP_NEAR``, ``_U_DEPTH``, ``_U_REFINE``,
        ``_REL_CAP`` and ``_REFINE_MAX_PANELS``.
    x5, w5 : float64 arrays
        The 5-point Gauss-Legendre rule on ``[-1, 1]``.
    anchor : float, optional
        The support end the cells' lattice has a point on (``leaves._anchor_end``), or NaN.

    Returns
    -------
    tuple of six float64 arrays
        The rows of one ``(6, len(lo))`` array.  The GIL is released for the whole computation.
    """
    cdef Py_ssize_t n = lo.shape[0], hs
    cdef const double[::1] hv
    if x5.shape[0] != 5 or w5.shape[0] != 5:
        raise ValueError("psg_integrals: x5 and w5 must be the 5-point Gauss-Legendre rule")
    if np.ndim(h) == 0:
        hv = np.full(1, float(h))
        hs = 0
    else:
        hv = h
        hs = 1
        if hv.shape[0] != n:
            raise ValueError(f"psg_integrals: h has {hv.shape[0]} widths for {n} cells (lo)")
    out = np.empty((6, n), dtype=np.float64)
    cdef double[:, ::1] ov = out
    cdef int status = 0
    if n:
        with nogil:
            status = fpld_psg_integrals(&lo[0], &hv[0], n, hs, tiny, s_lo, s_hi, q, v, sd, remove, cre, near_end,
                                        refine_rel, u_step, u_step_near, u_depth, u_refine, rel_cap, max_panels,
                                        &x5[0], &w5[0], anchor, &ov[0, 0])
    if status == 3:
        raise MemoryError("psg_integrals: out of memory")
    if status != 0:
        raise ValueError("psg_integrals: invalid argument (q, v, sd, the support or a tuning constant)")
    return tuple(out)


def psg_moments(double l_lo, double l_hi, double q, double v, double sd, bint remove,
                const double[::1] x16, const double[::1] w16, const double[::1] x8, const double[::1] w8):
    """``(I1, d1, a1, I2, d2, a2)``: see ``fpld_psg_moments``."""
    if x16.shape[0] != 16 or w16.shape[0] != 16 or x8.shape[0] != 8 or w8.shape[0] != 8:
        raise ValueError("psg_moments: need the 16- and 8-point Gauss-Legendre rules")
    cdef double out[6]
    cdef int status = 0
    with nogil:
        status = fpld_psg_moments(l_lo, l_hi, q, v, sd, remove, &x16[0], &w16[0], &x8[0], &w8[0], out)
    if status != 0:
        raise ValueError("psg_moments: invalid argument")
    return out[0], out[1], out[2], out[3], out[4], out[5]


cdef extern from "fastpld_leaf.h" nogil:
    int fpld_psg_window(double q, double v, double sd, int remove, double tail, double z1, double z2, int has_hi,
                        const double *steps, Py_ssize_t k, double *a, double *b, int *found)
    int fpld_psg_leaf(double q, double v, double sd, int remove, double cre, double lat, double h,
                      int64_t i_lo, int64_t i_hi, const int64_t *levels, const double *thr, int nlev,
                      const double *x16, const double *w16, const double *x8, const double *w8,
                      double *probs, double *out)
    int FPLD_LEAF_NOUT


def psg_window(double q, double v, double sd, bint remove, double tail, double z1, double z2, bint has_hi,
               const double[::1] steps):
    """``(a, b)`` of ``fpld_psg_window`` or ``None`` (where the numpy ``_psg_window`` gives ``None``)."""
    cdef double a = 0.0, b = 0.0
    cdef int found = 0, status = 0
    cdef Py_ssize_t k = steps.shape[0]
    if k < 1:
        raise ValueError("psg_window: steps must not be empty")
    with nogil:
        status = fpld_psg_window(q, v, sd, remove, tail, z1, z2, has_hi, &steps[0], k, &a, &b, &found)
    if status != 0:
        raise ValueError("psg_window: invalid argument")
    return (a, b) if found else None


cdef inline void _check_leaf(int status, str nomass) except *:
    """The errors of ``fpld_psg_leaf`` (status 100, "use the numpy code", is the caller's)."""
    if status == 2:
        raise ValueError(nomass)
    if status == 3:
        raise MemoryError("psg_leaf: out of memory")
    if status != 0:
        raise ValueError("psg_leaf: invalid argument")


def psg_leaf(double q, double v, double sd, bint remove, double cre, double lat, double h, int64_t i_lo,
             int64_t i_hi, levels, const double[::1] x16, const double[::1] w16, const double[::1] x8,
             const double[::1] w8):
    """Algorithm 1 for the subsampled Gaussian on buckets ``i_lo..i_hi`` (see ``fpld_psg_leaf``).

    ``levels``: ``(c, threshold)`` pairs of the coarse levels (decreasing ``c``; empty: all fine).
    Returns ``(probs, out)`` with ``out`` the tuple of ``fpld_psg_leaf``'s out slots, or ``None``
    where the cells would not tile the window (the caller then runs the numpy code); raises
    ``ValueError`` (``"no mass"`` in the message where the window holds no probability).
    """
    cdef int64_t lv[4]
    cdef double th[4]
    cdef double out[16]
    cdef int nlev = len(levels), status = 0, j
    if nlev > 4 or FPLD_LEAF_NOUT > 16:
        raise ValueError("psg_leaf: at most 4 coarse levels")
    if x16.shape[0] != 16 or w16.shape[0] != 16 or x8.shape[0] != 8 or w8.shape[0] != 8:
        raise ValueError("psg_leaf: need the 16- and 8-point Gauss-Legendre rules")
    if i_hi < i_lo:
        raise ValueError("psg_leaf: empty window")
    for j in range(nlev):
        lv[j] = levels[j][0]
        th[j] = levels[j][1]
    probs = np.empty(i_hi - i_lo + 1, dtype=np.float64)
    cdef double[::1] pv = probs
    with nogil:
        status = fpld_psg_leaf(q, v, sd, remove, cre, lat, h, i_lo, i_hi, lv, th, nlev, &x16[0], &w16[0],
                               &x8[0], &w8[0], &pv[0], out)
    if status == 100:
        return None
    _check_leaf(status, "psg_leaf: no mass in the window")
    return probs, tuple([out[j] for j in range(FPLD_LEAF_NOUT)])


from libc.math cimport floor, ceil, fabs, isfinite, log, log1p


def psg_leaf_full(double q, double v, double sd, bint remove, double cre, double tail, double z1, double z2,
                  bint has_hi, const double[::1] steps, double lattice, double h, int64_t max_buckets, levels,
                  const double[::1] x16, const double[::1] w16, const double[::1] x8, const double[::1] w8):
    """The whole native leaf of ``fastpld.discretize._discretize_continuous`` for the subsampled Gaussian
    in one call: the window (``fpld_psg_window``), the bucket range (as there, lattice shift 0: the
    loss has no atoms), the coarse levels that fit (``levels``: ``(c, threshold)`` with
    ``threshold > tail``, decreasing ``c``) and ``fpld_psg_leaf``.  Returns ``(probs, offset,
    coupling_range, tv, bias, truncated, mix, mu, slack)`` (``slack``: the tolerance of the mean-
    correction check), or ``None`` where that code would take another branch or raise (no window
    from the quantiles, too many buckets, the cells do not tile): the caller then runs it.
    """
    cdef double a = 0.0, b = 0.0, lat, xlo, xhi
    cdef int found = 0, status = 0, nlev = 0, j
    cdef int64_t i_lo, i_hi, n, c
    cdef int64_t lv[4]
    cdef double th[4]
    cdef double out[16]
    if steps.shape[0] < 1 or x16.shape[0] != 16 or w16.shape[0] != 16 or x8.shape[0] != 8 or w8.shape[0] != 8:
        raise ValueError("psg_leaf_full: bad steps or Gauss-Legendre rules")
    if len(levels) > 4 or FPLD_LEAF_NOUT > 16:
        raise ValueError("psg_leaf_full: at most 4 coarse levels")
    with nogil:
        status = fpld_psg_window(q, v, sd, remove, tail, z1, z2, has_hi, &steps[0], steps.shape[0], &a, &b, &found)
    if status != 0:
        raise ValueError("psg_window: invalid argument")
    if not found:
        return None
    lat = lattice + 0.0 * h
    xlo = floor((a - lat) / h + 0.5)
    xhi = ceil((b - lat) / h - 0.5)
    if not (isfinite(xlo) and isfinite(xhi) and fabs(xlo) < 4e18 and fabs(xhi) < 4e18):
        return None
    i_lo = <int64_t>xlo
    i_hi = <int64_t>xhi
    n = i_hi - i_lo + 1
    if n > max_buckets or n < 1:
        return None
    if n >= 2048:  # discretize._COARSE_MIN_BUCKETS
        for lvl in levels:
            c = lvl[0]
            if 4 * c <= n:
                lv[nlev] = c
                th[nlev] = lvl[1]
                nlev += 1
    probs = np.empty(n, dtype=np.float64)
    cdef double[::1] pv = probs
    with nogil:
        status = fpld_psg_leaf(q, v, sd, remove, cre, lat, h, i_lo, i_hi, lv, th, nlev, &x16[0], &w16[0],
                               &x8[0], &w8[0], &pv[0], out)
    if status == 100:
        return None
    _check_leaf(status, "the discretisation window holds no probability mass; the mechanism parameters are degenerate")
    cdef double ref = out[0], mu = out[1], widen = out[2], mean_err = out[4], total = out[6]
    # the edges' position error (discretize._edge_error with SubsampledLoss.cdf_shift, the same operations)
    cdef double u = 1.1102230246251565e-16
    cdef double tmax = max(fabs(lat + (<double>i_lo - 0.5) * h), fabs(lat + (<double>i_hi + 0.5) * h))
    widen = widen + 2 * (8 * u * ((((tmax + fabs(log(q))) + fabs(log1p(-q))) + v / 2) + 2)
                         + 2 * u * (tmax + fabs(lat)))
    cdef double slack = 0.0, p, r, pc
    cdef int sizes[4]
    sizes[:] = [3, 9, 27, 81]
    # discretize._discretize_continuous: mix and the slack of _check_mu, the same operations
    mix = []
    for j in range(4):
        pc = out[7 + j]
        if pc > 0:
            p = pc / total * (1 + 1e-9) + 1e-300
            if not p < 1.0:  # min(1.0, p)
                p = 1.0
            r = sizes[j] * h + widen
            mix.append((p, r, fabs(mu) + (sizes[j] * h + widen) / 2 + mean_err))
            slack = slack + p * r
    return probs, ref + mu, h + widen, out[3], mean_err, out[5], tuple(mix), mu, widen + slack


def psg_moments16(double l_lo, double l_hi, double q, double v, double sd, bint remove,
                  const double[::1] x16, const double[::1] w16):
    """``(I1, I2)``: the 16-point integrals of :func:`psg_moments` alone (see ``fpld_psg_moments16``)."""
    if x16.shape[0] != 16 or w16.shape[0] != 16:
        raise ValueError("psg_moments16: need the 16-point Gauss-Legendre rule")
    cdef double out[2]
    cdef int status = 0
    with nogil:
        status = fpld_psg_moments16(l_lo, l_hi, q, v, sd, remove, &x16[0], &w16[0], out)
    if status != 0:
        raise ValueError("psg_moments16: invalid argument")
    return out[0], out[1]
