# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Native kernels of fastpld (typed memoryviews; the GIL is released around every kernel).

Every kernel has a numpy reference in :mod:`fastpld._kernels` (or in the module
that uses it) and agrees with it up to the order of floating-point summation.
Kernels return an ``int`` status inside the ``nogil`` block; it is turned into
an exception afterwards.  Double-only kernels are plain C (``csrc/``); the ones
that run in double and long double are fused Cython functions.
"""
import numpy as np
cimport cython
cimport numpy as cnp
from libc.math cimport (INFINITY, NAN, acosl, atan2, atan2l, exp, expl, fmod, fmodl, hypot, hypotl, isfinite,
                        log, logl, fabs, fabsl, floor, pow, sqrt, log1p, log1pl, rint, rintl, asin, expm1)
from libc.string cimport memset
from cpython.mem cimport PyMem_Free, PyMem_Malloc

cnp.import_array()

cdef extern from "fastpld_npops.h" nogil:
    # numpy.maximum and numpy.minimum on doubles (a NaN argument the result), shared with the other kernels
    double np_maximum(double a, double b)
    double np_minimum(double a, double b)

cdef double _TWO_PI = 2.0 * 3.141592653589793  # the float64 value numpy uses (2 * np.pi)
# long double nodes reduce phases by a long double 2 pi (composition.series._TWO_PI_LD): a float64 2 pi
# would add float64-size phase errors that the long double round-off charge does not cover
cdef long double _TWO_PI_L = 2.0 * acosl(-1.0)


cdef inline void _check(int status, str what) except *:
    if status == FPLD_OK:
        return
    if status == FPLD_ENOMASS:
        raise ValueError(f"{what}: no positive probability mass")
    if status == FPLD_ENOMEM:
        raise MemoryError(f"{what}: out of memory")
    raise ValueError(f"{what}: invalid argument")


# ---------------------------------------------------------------------------------------
# double-only kernels (plain C)
# ---------------------------------------------------------------------------------------
def discounted_rcumsum(const double[::1] p, double factor):
    """``out[j] = sum_{i >= j} p[i] * factor**(i - j)`` computed right to left."""
    cdef Py_ssize_t n = p.shape[0]
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] o = out
    cdef int status = FPLD_OK
    if n == 0:
        return out
    with nogil:
        status = fpld_discounted_rcumsum(&p[0], n, factor, &o[0])
    if status != FPLD_OK:
        raise ValueError("discounted_rcumsum: factor must be in [0, 1]")
    return out


def query_tables(const double[::1] p, double factor):
    """``(S1, T, dgrid)`` of :class:`fastpld.curve._Query` (see ``fpld_query_tables``)."""
    cdef Py_ssize_t n = p.shape[0]
    S1 = np.empty(n + 1, dtype=np.float64)
    T = np.empty(n + 1, dtype=np.float64)
    dg = np.empty(max(n, 1), dtype=np.float64)
    cdef double[::1] s1v = S1, tv = T, dv = dg
    cdef int status = FPLD_OK
    if n == 0:
        raise ValueError("query_tables: empty PMF")
    with nogil:
        status = fpld_query_tables(&p[0], n, factor, &s1v[0], &tv[0], &dv[0])
    if status != FPLD_OK:
        raise ValueError("query_tables: factor must be in [0, 1]")
    return S1, T, dg


cdef inline Py_ssize_t _first_at_least(const double[::1] a, Py_ssize_t n, double key) noexcept nogil:
    """``numpy.searchsorted(a[:n], key, side="left")`` for a non-decreasing ``a`` without NaN (a NaN key sorts last)."""
    cdef Py_ssize_t lo = 0, hi = n, mid
    if key != key:
        return n
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef double _U53 = 1.1102230246251565e-16  # 2^-53, the unit roundoff the numpy code's ``_U`` is


cdef inline double _query_solve(const double[::1] neg_dgrid, const double[::1] S1, const double[::1] T, Py_ssize_t n,
                                double v0, double h, double xi) noexcept nogil:
    """One element of :meth:`fastpld.curve._Query.epsilon` (its numpy code's operations in its order)."""
    cdef Py_ssize_t j = _first_at_least(neg_dgrid, n, -xi)  # first j with d(v_j) <= x
    cdef double vj, sol, lo_edge
    if j > n - 1:
        j = n - 1
    vj = v0 + h * <double>j
    # eps in (v_{j-1}, v_j]: S1_j - e^{eps - v_j} T_j = x
    sol = vj + log((S1[j] - xi) / T[j])
    lo_edge = v0 + h * <double>(j - 1) if j > 0 else -INFINITY
    if not isfinite(sol):
        sol = vj
    if sol < lo_edge:
        sol = lo_edge
    if sol > vj:
        sol = vj
    if xi >= S1[0]:
        sol = -INFINITY
    if xi <= 0:
        sol = v0 + h * <double>(n - 1)
    return sol


cdef inline double _query_pad(const double[::1] neg_dgrid, const double[::1] S1, Py_ssize_t n, double pad,
                              double xi) noexcept nogil:
    """One element of :meth:`fastpld.curve._Query.bracket_pad`."""
    cdef Py_ssize_t j = _first_at_least(neg_dgrid, n, -xi) - 1
    if j < 0:
        j = 0
    if j > n - 1:
        j = n - 1
    return pad * S1[j]


cdef inline double _eps_pad(double sol, double v0, double h, Py_ssize_t n) noexcept nogil:
    """One element of :meth:`fastpld.curve._Query.eps_pad`: ``8 u (|sol| + |v0| + h n + 2)`` (0 for a
    non-finite ``sol``), the numpy code's operations in its order."""
    return (8.0 * _U53) * (((((fabs(sol) if isfinite(sol) else 0.0) + fabs(v0)) + h * <double>n)) + 2.0)


def query_epsilon(const double[::1] neg_dgrid, const double[::1] S1, const double[::1] T, double v0, double h,
                  const double[::1] x, double[::1] out):
    """:meth:`fastpld.curve._Query.epsilon` at every ``x`` into ``out`` (its numpy code is the reference: the same
    operations in the same order per element; ``log`` is the C library's)."""
    cdef Py_ssize_t n = neg_dgrid.shape[0], m = x.shape[0], i
    if n < 1 or S1.shape[0] < n or T.shape[0] < n or out.shape[0] != m:
        raise ValueError("query_epsilon: need n >= 1 grid values, S1 and T of at least n and out of len(x)")
    with nogil:
        for i in range(m):
            out[i] = _query_solve(neg_dgrid, S1, T, n, v0, h, x[i])
    return out


def query_delta(const double[::1] p, const double[::1] S1, const double[::1] T, double v0, double h, double pad,
                const double[::1] eps, double[::1] d_out, double[::1] pad_out):
    """:meth:`fastpld.curve._Query.delta` at every ``eps``: ``d`` into ``d_out`` and its pad into ``pad_out``
    (``fpld_query_delta``: its numpy code is the reference, the same operations in the same order per element;
    ``exp`` is the C library's).  ``p``: the query's masses (``n`` of them), ``S1`` and ``T`` its tables (``n + 1``)."""
    cdef Py_ssize_t n = p.shape[0], m = eps.shape[0], i
    cdef int status = FPLD_OK
    if n < 1 or S1.shape[0] != n + 1 or T.shape[0] != n + 1 or d_out.shape[0] != m or pad_out.shape[0] != m:
        raise ValueError("query_delta: need n >= 1 masses, S1 and T of n + 1 and outputs of len(eps)")
    for i in range(m):
        if eps[i] != eps[i]:
            raise ValueError("query_delta: eps is NaN")
    if m:
        with nogil:
            status = fpld_query_delta(&p[0], n, v0, h, &S1[0], &T[0], pad, &eps[0], m, &d_out[0], &pad_out[0])
    _check(status, "query_delta")
    return d_out, pad_out


def query_bracket_pad(const double[::1] neg_dgrid, const double[::1] S1, double pad, const double[::1] x,
                      double[::1] out):
    """:meth:`fastpld.curve._Query.bracket_pad` at every ``x`` into ``out`` (the same operations as its numpy code)."""
    cdef Py_ssize_t n = neg_dgrid.shape[0], m = x.shape[0], i
    if n < 1 or S1.shape[0] < n or out.shape[0] != m:
        raise ValueError("query_bracket_pad: need n >= 1 grid values, S1 of at least n and out of len(x)")
    with nogil:
        for i in range(m):
            out[i] = _query_pad(neg_dgrid, S1, n, pad, x[i])
    return out


def query_upper(const double[::1] neg_dgrid, const double[::1] S1, const double[::1] T, double v0, double h, double pad,
                const double[::1] x, double[::1] x_out, double[::1] out):
    """:meth:`fastpld.curve._Query.upper_solution` at every ``x``: ``x' = x - bracket_pad(max(x, 0))`` into
    ``x_out`` and ``epsilon(x') + eps_pad(epsilon(x'))`` into ``out`` (its numpy composition of those methods is
    the reference: the same operations in the same order per element)."""
    cdef Py_ssize_t n = neg_dgrid.shape[0], m = x.shape[0], i
    cdef double xi, sol
    if n < 1 or S1.shape[0] < n or T.shape[0] < n or x_out.shape[0] != m or out.shape[0] != m:
        raise ValueError("query_upper: need n >= 1 grid values, S1 and T of at least n, x_out and out of len(x)")
    with nogil:
        for i in range(m):
            xi = x[i]
            xi = xi - _query_pad(neg_dgrid, S1, n, pad, np_maximum(xi, 0.0))
            x_out[i] = xi
            sol = _query_solve(neg_dgrid, S1, T, n, v0, h, xi)
            out[i] = sol + _eps_pad(sol, v0, h, n)
    return out


def query_lower(const double[::1] neg_dgrid, const double[::1] S1, const double[::1] T, double v0, double h, double pad,
                const double[::1] x, double[::1] out):
    """:meth:`fastpld.curve._Query.lower_solution` at every ``x``: ``P = lower_pad(x)`` (its fixed point, at most
    four steps, else the whole mass's pad), ``l = epsilon(min(x + P, 2))``, ``l - eps_pad(l)`` into ``out`` (its
    numpy composition of those methods is the reference: the same operations in the same order per element)."""
    cdef Py_ssize_t n = neg_dgrid.shape[0], m = x.shape[0], i, it
    cdef double xi, P, P2, ax, whole, sol
    cdef bint ok
    if n < 1 or S1.shape[0] < n or T.shape[0] < n or out.shape[0] != m:
        raise ValueError("query_lower: need n >= 1 grid values, S1 and T of at least n and out of len(x)")
    with nogil:
        whole = pad * (S1[0] if S1[0] > 1.0 else 1.0)  # (pad * max(1.0, S1[0]))
        for i in range(m):
            xi = x[i]
            ax = (2.0 * _U53) * fabs(xi)
            P = _query_pad(neg_dgrid, S1, n, pad, xi)
            ok = False
            for it in range(4):
                P2 = _query_pad(neg_dgrid, S1, n, pad, xi + P) + ax
                ok = P2 <= P
                if ok:
                    break
                P = P2
            if not ok:
                P = np_maximum(P, whole + ax)
            sol = _query_solve(neg_dgrid, S1, T, n, v0, h, np_minimum(xi + P, 2.0))
            out[i] = sol - _eps_pad(sol, v0, h, n)
    return out


def bucket_masses(const double[::1] F, const double[::1] S, Py_ssize_t split):
    """Masses of Algorithm 1 from the CDF/SF at the ``n + 1`` edges: ``(q, total)`` (q not normalised)."""
    cdef Py_ssize_t n = F.shape[0] - 1
    if S.shape[0] != F.shape[0] or n < 1:
        raise ValueError("bucket_masses: F and S must have the same length >= 2")
    q = np.empty(n, dtype=np.float64)
    cdef double[::1] qv = q
    cdef double total = 0.0
    cdef int status = FPLD_OK
    with nogil:
        status = fpld_bucket_masses(&F[0], &S[0], n, split, &qv[0], &total)
    _check(status, "bucket_masses")
    return q, total


def normalise_mean(double[::1] q, double total):
    """Normalise ``q`` in place by ``total``; returns ``sum_i i q_i``."""
    cdef Py_ssize_t n = q.shape[0]
    cdef double mean_index = 0.0
    cdef int status = FPLD_OK
    if n == 0:
        raise ValueError("normalise_mean: empty PMF")
    with nogil:
        status = fpld_normalise_mean(&q[0], n, total, &mean_index)
    _check(status, "normalise_mean")
    return mean_index


def leaf_roundoff(const double[::1] F, const double[::1] S, const double[::1] dens, double tau, double c0,
                  double limit):
    """``(widen, tv)`` of the leaf round-off certificate (see ``fpld_leaf_roundoff``)."""
    cdef Py_ssize_t m = F.shape[0]
    if S.shape[0] != m or dens.shape[0] != m or m == 0:
        raise ValueError("leaf_roundoff: F, S and dens must have the same non-zero length")
    cdef double widen = 0.0, tv = 0.0
    cdef int status = FPLD_OK
    with nogil:
        status = fpld_leaf_roundoff(&F[0], &S[0], &dens[0], m, tau, c0, limit, &widen, &tv)
    _check(status, "leaf_roundoff")
    return widen, tv


def pmf_moments(const double[::1] p, double cen):
    """``(total, mean, variance)`` of the PMF ``p`` on the indices ``i - cen``."""
    cdef Py_ssize_t n = p.shape[0]
    cdef double total = 0.0, mean = 0.0, var = 0.0
    cdef int status = FPLD_ENOMASS
    if n:
        with nogil:
            status = fpld_pmf_moments(&p[0], n, cen, &total, &mean, &var)
    _check(status, "pmf_moments")
    return total, mean, var


def mean_index(const double[::1] p):
    """``sum_i i p_i / sum_i p_i`` (one pass; NaN if the sum is not positive)."""
    cdef Py_ssize_t n = p.shape[0], i
    cdef double tot = 0.0, s1 = 0.0
    with nogil:
        for i in range(n):
            tot = tot + p[i]
            s1 = s1 + <double>i * p[i]
    return s1 / tot if tot > 0 else float("nan")


def log_mgf_grid(const double[::1] p, double cen, const double[::1] s, double m, double[::1] K):
    """``K[j] += m * log(sum_i p_i exp(s_j (i - cen)))`` (max-shifted log-sum-exp)."""
    cdef Py_ssize_t n = p.shape[0], ns = s.shape[0]
    if K.shape[0] != ns:
        raise ValueError("log_mgf_grid: K and s must have the same length")
    scratch = np.empty(max(n, 1), dtype=np.float64)
    cdef double[::1] lp = scratch
    cdef int status = FPLD_ENOMASS
    if n and ns:
        with nogil:
            status = fpld_log_mgf_grid(&p[0], n, cen, &s[0], ns, m, &K[0], &lp[0])
    elif n:
        status = FPLD_OK
    _check(status, "log_mgf_grid")


def log_binomial_moments(const double[::1] lm, const double[::1] lf, double lq1, double lq,
                         const cnp.int64_t[::1] orders):
    """``log sum_j C(a, j) (1-q)^(a-j) q^j E_P[e^(j L)]`` for each order ``a`` (see ``fpld_log_binomial_moments``)."""
    cdef Py_ssize_t n = orders.shape[0], r
    cdef cnp.int64_t amax = 0
    for r in range(n):
        if orders[r] > amax:
            amax = orders[r]
    if n and (lm.shape[0] < amax + 1 or lf.shape[0] < amax + 2):
        raise ValueError("log_binomial_moments: lm or lf is shorter than the largest order needs")
    out = np.empty(n, dtype=np.float64)
    scratch = np.empty(amax + 1, dtype=np.float64)
    cdef double[::1] ov = out, tv = scratch
    cdef int status = FPLD_OK
    if n:
        with nogil:
            status = fpld_log_binomial_moments(&lm[0], &lf[0], lq1, lq, <const int64_t *> &orders[0], n, &ov[0],
                                               &tv[0])
    _check(status, "log_binomial_moments")
    return out


def binomial_chord(const double[::1] x, cnp.int64_t shift, const double[::1] lm, const double[::1] lf, double lq1,
                   double lq, double[::1] memo):
    """Chord bound of the binomial moments at real orders ``x + shift`` (see ``fpld_binomial_chord``)."""
    cdef Py_ssize_t n = x.shape[0], L = memo.shape[0]
    if lm.shape[0] != L or lf.shape[0] != L + 1 or L < 2:
        raise ValueError("binomial_chord: lm, lf and memo must have L, L + 1 and L entries")
    out = np.empty(n, dtype=np.float64)
    scratch = np.empty(L, dtype=np.float64)
    cdef double[::1] ov = out, tv = scratch
    cdef int status = FPLD_OK
    if n:
        with nogil:
            status = fpld_binomial_chord(&x[0], n, shift, &lm[0], &lf[0], L, lq1, lq, &memo[0], &ov[0], &tv[0])
    _check(status, "binomial_chord")
    return out


def gauss_pair_moments(double v, double sd, double q, bint remove, const double[::1] x, const double[::1] w):
    """``(mean, std)`` of a Poisson-subsampled Gaussian loss (see ``fpld_gauss_pair_moments``)."""
    cdef double mean = 0.0, std = 0.0
    cdef int status
    if x.shape[0] != w.shape[0] or x.shape[0] == 0:
        raise ValueError("gauss_pair_moments: x and w must have the same non-zero length")
    with nogil:
        status = fpld_gauss_pair_moments(v, sd, q, remove, &x[0], &w[0], x.shape[0], &mean, &std)
    _check(status, "gauss_pair_moments")
    return mean, std


def chernoff_quantiles(const double[::1] kp, const double[::1] kn, const double[::1] s, double c, double lt):
    """``(lo, up)``: ``up = min (c kp - lt) / s``, ``lo = -min (c kn - lt) / s``; NaN maps to ``-inf`` / ``+inf``."""
    cdef Py_ssize_t n = s.shape[0]
    if kp.shape[0] != n or kn.shape[0] != n:
        raise ValueError("chernoff_quantiles: kp, kn and s must have the same length")
    cdef double lo = -INFINITY, up = INFINITY
    with nogil:
        fpld_chernoff_quantiles(&kp[0] if n else NULL, &kn[0] if n else NULL, &s[0] if n else NULL, n, c, lt,
                                &lo, &up)
    return (-INFINITY if lo != lo else lo), (INFINITY if up != up else up)


def delta_bounds(const double[::1] p, double v0, double h, const double[::1] S1, const double[::1] T, double padc,
                 double es, double ds, double pinf, const double[::1] eps):
    """``(lower, estimate, upper)`` of ``delta(eps)`` for one direction (see ``fpld_delta_bounds``)."""
    cdef Py_ssize_t n = p.shape[0], m = eps.shape[0]
    if n == 0 or S1.shape[0] != n + 1 or T.shape[0] != n + 1:
        raise ValueError("delta_bounds: S1 and T must have one entry more than the non-empty PMF")
    lo = np.empty(m, dtype=np.float64)
    est = np.empty(m, dtype=np.float64)
    up = np.empty(m, dtype=np.float64)
    cdef double[::1] lv = lo, ev = est, uv = up
    cdef int status = FPLD_OK
    if m:
        with nogil:
            status = fpld_delta_bounds(&p[0], n, v0, h, &S1[0], &T[0], padc, es, ds, pinf, &eps[0], m, &lv[0],
                                       &ev[0], &uv[0])
    _check(status, "delta_bounds")
    return lo, est, up


def chernoff_window(list ps, list cens, list ms, const double[::1] srel, const double[::1] refine, double w):
    """Chernoff window of a node: ``(lo, hi, sp, Kp, sn, Kn)`` (see ``fpld_chernoff_window``).

    ``ps``: C-contiguous float64 PMFs, ``cens``/``ms``: their centre indices and multiplicities.
    """
    cdef Py_ssize_t nin = len(ps), nrel = srel.shape[0], c, nmax = 1, npn = 0, nnn = 0  # nmax: total length
    if len(cens) != nin or len(ms) != nin or not 0 < nin <= 64 or refine.shape[0] != 8 or not 8 <= nrel <= 64:
        raise ValueError("chernoff_window: invalid argument")
    cdef const double **pp = <const double **> PyMem_Malloc(nin * sizeof(double *))
    cdef Py_ssize_t *nv = <Py_ssize_t *> PyMem_Malloc(nin * sizeof(Py_ssize_t))
    cdef double *cv = <double *> PyMem_Malloc(nin * sizeof(double))
    cdef double *mv = <double *> PyMem_Malloc(nin * sizeof(double))
    cdef const double[::1] a
    cdef double[::1] ov, sv
    cdef double lo = 0.0, hi = 0.0
    cdef int status = FPLD_OK
    if pp == NULL or nv == NULL or cv == NULL or mv == NULL:
        PyMem_Free(pp); PyMem_Free(nv); PyMem_Free(cv); PyMem_Free(mv)
        raise MemoryError()
    try:
        for c in range(nin):
            a = ps[c]  # the list keeps the arrays alive
            nv[c] = a.shape[0]
            pp[c] = &a[0] if a.shape[0] else NULL
            cv[c] = cens[c]
            mv[c] = ms[c]
            nmax += a.shape[0]
        out = np.empty(4 * (nrel + 8), dtype=np.float64)
        scratch = np.empty(3 * (nrel + 8) + nmax, dtype=np.float64)
        ov = out
        sv = scratch
        with nogil:
            status = fpld_chernoff_window(pp, nv, cv, mv, nin, &srel[0], nrel, &refine[0], w, &lo, &hi, &ov[0],
                                          &ov[nrel + 8], &npn, &ov[2 * (nrel + 8)], &ov[3 * (nrel + 8)], &nnn,
                                          &sv[0])
    finally:
        PyMem_Free(pp); PyMem_Free(nv); PyMem_Free(cv); PyMem_Free(mv)
    _check(status, "chernoff_window")
    k = nrel + 8
    return int(lo), int(hi), out[:npn], out[k:k + npn], out[2 * k:2 * k + nnn], out[3 * k:3 * k + nnn]


def chernoff_tail(const double[::1] K, const double[::1] s, double x):
    """``min(1, exp(min(0, min_i (K_i - s_i x))))``: one side's Chernoff bound at ``x`` from the log-MGF values ``K``
    at ``s`` of :func:`chernoff_window` (``composition.node._chernoff_window``'s, the same operations; a NaN term
    gives 1, as numpy's NaN minimum does there)."""
    cdef Py_ssize_t i, n = K.shape[0]
    cdef double e = INFINITY, t, r
    cdef bint nan = False
    if n == 0 or s.shape[0] != n:
        raise ValueError("chernoff_tail: invalid argument")
    for i in range(n):
        t = K[i] - s[i] * x
        if t != t:
            nan = True
        elif t < e:
            e = t
    if nan or not e < 0.0:  # (Python's min(0.0, e): 0 unless e < 0)
        e = 0.0
    r = exp(e)
    return r if r < 1.0 else 1.0


# ---------------------------------------------------------------------------------------
# fused kernels (double and long double)
# ---------------------------------------------------------------------------------------
cdef int _fold(const real_in[::1] p, Py_ssize_t cen, real_out[::1] out) noexcept nogil:
    cdef Py_ssize_t n = p.shape[0], N = out.shape[0], i, j
    if N <= 0:
        return FPLD_EINVAL
    for i in range(N):
        out[i] = 0
    j = (-cen) % N
    if j < 0:
        j += N
    for i in range(n):
        out[j] += <real_out>p[i]
        j += 1
        if j == N:
            j = 0
    return FPLD_OK


def fold(const real_in[::1] p, Py_ssize_t cen, real_out[::1] out):
    """Circular placement: ``out[:] = 0; out[(i - cen) mod N] += p[i]`` (wrap-around folding)."""
    cdef int status
    with nogil:
        status = _fold(p, cen, out)
    _check(status, "fold")


cdef int _finish_node(const real_out[::1] out, Py_ssize_t shift, double floor_, bint trim, double scale,
                      real_out[::1] lin, Py_ssize_t *first, Py_ssize_t *last, double *tiny_mass,
                      Py_ssize_t *n_tiny) noexcept nogil:
    cdef Py_ssize_t N = out.shape[0], j, src
    cdef real_out x, s = 0, c = 0, t, fl = <real_out>floor_, sc = <real_out>scale
    cdef bint scaled = scale != 1.0
    if lin.shape[0] != N or N == 0:
        return FPLD_EINVAL
    first[0] = -1
    last[0] = -1
    tiny_mass[0] = 0.0
    n_tiny[0] = 0
    src = shift % N
    if src < 0:
        src = src + N
    for j in range(N):
        x = out[src]
        if scaled:  # (the inverse FFT's 1/N: the same rounding as numpy's product by it)
            x = x * sc
        src = src + 1
        if src == N:
            src = 0
        if not (x > 0):  # clip negatives (the exact result is non-negative)
            x = 0
        elif trim and x < fl:
            x = 0
        elif x < 1e-300:  # below float64's range for the next node's MGF: dropped and charged
            tiny_mass[0] = tiny_mass[0] + <double>x
            n_tiny[0] = n_tiny[0] + 1
            x = 0
        lin[j] = x
        if x != 0:
            if first[0] < 0:
                first[0] = j
            last[0] = j
    if first[0] < 0:
        return FPLD_ENOMASS
    # Neumaier-compensated sum: error <= 2 u + O(N u^2), below what composition.roundoff._node_tv charges for the
    # normalising sum (it allows numpy's pairwise sum, ceil(log2 N) + 19 roundings)
    for j in range(first[0], last[0] + 1):
        t = s + lin[j]
        if fabsl(s) >= fabsl(lin[j]):
            c = c + ((s - t) + lin[j])
        else:
            c = c + ((lin[j] - t) + s)
        s = t
    s = s + c
    for j in range(first[0], last[0] + 1):
        lin[j] = lin[j] / s
    return FPLD_OK


def finish_node(const real_out[::1] out, Py_ssize_t shift, double floor_, bint trim, double scale=1.0):
    """One pass of a node's output: ``roll(out * scale, -shift)``, clip at 0, drop entries below ``floor_``
    (if ``trim``) and positive ones below 1e-300, cut to the nonzero range and normalise.  ``scale``: the
    inverse FFT's ``1/N`` when ``out`` is a plan's unscaled output buffer (``out * scale`` rounded in
    ``out``'s precision, as numpy's product); ``out`` is only read.

    Returns ``(lin, first, tiny_mass, n_tiny)``: ``lin`` the normalised entries ``first ..`` of
    the rolled array, ``tiny_mass``/``n_tiny`` the dropped sub-1e-300 entries' sum and count.
    Same result as the numpy steps of :func:`fastpld.composition.node._run_node` up to the rounding of the sum.
    """
    cdef Py_ssize_t first = -1, last = -1, n_tiny = 0
    cdef double tiny = 0.0
    cdef int status
    buf = np.empty(out.shape[0], dtype=np.float64 if real_out is double else np.longdouble)
    cdef real_out[::1] lv = buf
    with nogil:
        status = _finish_node(out, shift, floor_, trim, scale, lv, &first, &last, &tiny, &n_tiny)
    if status == FPLD_ENOMASS:
        raise ValueError("composition lost all probability mass to round-off; increase eps_error or delta_error")
    _check(status, "finish_node")
    return buf[first:last + 1], first, tiny, n_tiny


cdef int _split(const real_in[::1] p, double offset, double mesh_in, double mesh_out, Py_ssize_t j0,
                real_out[::1] lower, real_out[::1] upper) noexcept nogil:
    # With positive meshes t_i is non-decreasing in i (every rounding is monotone), so the atoms of one
    # target bucket are consecutive: their shares are summed in registers, in index order as before, and
    # stored once per bucket (a long double += in memory per atom took ~30% of the time).
    cdef Py_ssize_t n = p.shape[0], m = lower.shape[0], i, jj, cur = -1
    cdef double t, j
    cdef real_out theta, pd, acc_lo = 0, acc_up = 0
    if not (mesh_in > 0 and mesh_out > 0):
        return FPLD_EINVAL
    for i in range(m):
        lower[i] = 0
        upper[i] = 0
    for i in range(n):
        t = (offset + mesh_in * <double>i) / mesh_out
        j = floor(t)
        theta = <real_out>(t - j)
        jj = <Py_ssize_t>j - j0
        if jj < 0 or jj + 1 >= m or jj < cur:
            return FPLD_EINVAL
        if jj != cur:
            if cur >= 0:
                lower[cur] = acc_lo
                upper[cur + 1] = acc_up
            cur = jj
            acc_lo = 0
            acc_up = 0
        pd = <real_out>p[i]
        acc_lo += pd * (1 - theta)
        acc_up += pd * theta
    if cur >= 0:
        lower[cur] = acc_lo
        upper[cur + 1] = acc_up
    for i in range(m):
        lower[i] = lower[i] + upper[i]
    return FPLD_OK


def split(const real_in[::1] p, double offset, double mesh_in, double mesh_out, Py_ssize_t j0,
          real_out[::1] out, real_out[::1] scratch):
    """Mean-preserving split of atoms at ``offset + i mesh_in`` onto ``(j0 + k) mesh_out`` into ``out``.

    ``scratch`` has the length of ``out``.
    """
    if scratch.shape[0] != out.shape[0]:
        raise ValueError("split: scratch and out must have the same length")
    cdef int status
    with nogil:
        status = _split(p, offset, mesh_in, mesh_out, j0, out, scratch)
    _check(status, "split")


cdef inline int _quarter_turn(real_out *xr, real_out *xi) noexcept nogil:
    """Turn ``xr + i xi`` back by its quadrant's quarter turns ``q`` (exact swaps and negations) so that
    its angle lies in ``[-pi/4, pi/4]``; returns ``q`` (``arg = psi + q pi/2``, _kernels.quarter_angle)."""
    cdef real_out a = xr[0], b = xi[0]
    cdef int q
    if (a if a >= 0 else -a) >= (b if b >= 0 else -b):
        q = 0 if a >= 0 else 2
    else:
        q = 1 if b > 0 else 3
    if q == 1:
        xr[0] = b
        xi[0] = -a
    elif q == 2:
        xr[0] = -a
        xi[0] = -b
    elif q == 3:
        xr[0] = -b
        xi[0] = a
    return q


cdef int _spectrum_terms(const cplx[::1] X, double m, real_out[::1] logmag, real_out[::1] phase,
                         double[::1] lr64, double[::1] lrg64, double[::1] ph64, double g, bint first,
                         unsigned char[::1] dead, double rdead, unsigned char[::1] quarter,
                         int mq) noexcept nogil:
    cdef Py_ssize_t F = X.shape[0], k
    cdef real_out a, lr, ph, xr, xi
    cdef double r, r2, re, im
    cdef int q
    if logmag.shape[0] != F or phase.shape[0] != F or lr64.shape[0] != F or lrg64.shape[0] != F \
            or ph64.shape[0] != F or dead.shape[0] != F or quarter.shape[0] != F:
        return FPLD_EINVAL
    for k in range(F):
        if first:
            dead[k] = 0
        elif dead[k]:
            continue
        if rdead > 0:
            # |X| + g < rdead: this input's m-th power alone is below e^-T (see _native.convolve): skip
            # the logarithms; power_fp writes 0 there and convolve charges each such frequency
            re = <double>X[k].real
            im = <double>X[k].imag
            r2 = re * re + im * im
            if r2 < rdead * rdead * (1.0 - 1e-12):
                dead[k] = 1
                continue
        # arg X = psi + q pi/2 with |psi| <= pi/4 (_kernels.quarter_angle): X turned back exactly
        xr = <real_out>X[k].real
        xi = <real_out>X[k].imag
        q = _quarter_turn(&xr, &xi)
        if cplx is cython.doublecomplex:
            a = hypot(X[k].real, X[k].imag)
            ph = atan2(xi, xr)
        else:
            a = hypotl(X[k].real, X[k].imag)
            ph = atan2l(xi, xr)
        if real_out is double:
            lr = log(a)
        else:
            lr = logl(a)
        if first:
            logmag[k] = m * lr
            phase[k] = m * ph
            quarter[k] = (mq * q) & 3
        else:
            logmag[k] = logmag[k] + m * lr
            phase[k] = phase[k] + m * ph
            quarter[k] = (quarter[k] + mq * q) & 3
        r = <double>a
        if real_out is double:
            lr64[k] = lr  # (= log(r): the same call on the same value)
        else:
            lr64[k] = log(r)
        lrg64[k] = log(r + g)
        ph64[k] = <double>ph
    return FPLD_OK


def spectrum_terms(const cplx[::1] X, double m, real_out[::1] logmag, real_out[::1] phase, double[::1] lr64,
                   double[::1] lrg64, double[::1] ph64, double g, bint first, unsigned char[::1] dead,
                   double rdead, unsigned char[::1] quarter, int mq):
    """Accumulate ``m log|X|``, ``m psi`` and ``quarter += mq q (mod 4)`` (``arg X = psi + q pi/2``,
    ``|psi| <= pi/4``; ``mq = m mod 4``) and the float64 terms of the round-off bound (``psi`` for the phase).

    Frequencies with ``|X| < rdead`` are marked in ``dead`` (set to 0 by the first input) and skipped.
    """
    cdef int status
    if mq < 0 or mq > 3:
        raise ValueError("spectrum_terms: invalid argument")
    with nogil:
        status = _spectrum_terms(X, m, logmag, phase, lr64, lrg64, ph64, g, first, dead, rdead, quarter, mq)
    _check(status, "spectrum_terms")


cdef inline double _crude_up(double m, double r, double e, double slow) noexcept nogil:
    """composition.lattice._crude_up: ``m log((r + e) / slow)`` rounded upwards (hypot, log within 4 ulp)."""
    cdef double x = m * log((r + e) * (1 + 16 * 1.1102230246251565e-16) / slow)
    return x + 10 * 1.1102230246251565e-16 * fabs(x)


cdef inline void _polar(real_out lm, real_out phase, unsigned char quarter, real_out two_pi, real_out *re,
                        real_out *im) noexcept nogil:
    """``exp(lm) e^(i phase) i^quarter``: the phase reduced mod 2 pi as numpy.remainder does, sin and cos from
    one argument reduction, the quarter turns exact swaps and negations."""
    cdef real_out ph, e, sn, cs, r, i
    cdef double sd, cd
    cdef int q = quarter & 3
    if real_out is double:
        ph = fmod(phase, two_pi)
    else:
        ph = fmodl(phase, two_pi)
    if ph != 0 and ph < 0:
        ph = ph + two_pi
    if real_out is double:
        e = exp(lm)
        fpld_sincos(ph, &sd, &cd)
        r = e * cd
        i = e * sd
    else:
        e = expl(lm)
        fpld_sincosl(ph, &sn, &cs)
        r = e * cs
        i = e * sn
    if q == 0:
        re[0] = r
        im[0] = i
    elif q == 1:
        re[0] = -i
        im[0] = r
    elif q == 2:
        re[0] = -r
        im[0] = -i
    else:
        re[0] = i
        im[0] = -r


cdef int _power_fp(const real_out[::1] logmag, const real_out[::1] phase, const double[:, ::1] LR,
                   const double[:, ::1] LRG, const double[:, ::1] PH, const double[::1] ms, double g, double u,
                   Py_ssize_t N, cplx[::1] Pc, Py_ssize_t K, const double[::1] lp_low, const double[::1] amp_low,
                   const unsigned char[::1] dead, const unsigned char[::1] quarter, double *e2, double *p2,
                   double *ndead) noexcept nogil:
    cdef Py_ssize_t F = logmag.shape[0], C = ms.shape[0], k, c
    cdef real_out lm, two_pi, pr, pi_
    cdef double log_prod, amp, sum_lr, cond, lrc, w, se2 = 0.0, sp2 = 0.0, msum = 0.0
    if real_out is double:
        two_pi = _TWO_PI
    else:
        two_pi = <real_out>_TWO_PI_L
    if phase.shape[0] != F or Pc.shape[0] != F or LR.shape[0] != C or LRG.shape[0] != C or PH.shape[0] != C:
        return FPLD_EINVAL
    if C and (LR.shape[1] != F or LRG.shape[1] != F or PH.shape[1] != F):
        return FPLD_EINVAL
    if K < 0 or K > F or lp_low.shape[0] < K or amp_low.shape[0] < K or dead.shape[0] != F \
            or quarter.shape[0] != F:
        return FPLD_EINVAL
    ndead[0] = 0
    for c in range(C):
        msum = msum + ms[c]
    for k in range(F):
        if k >= K and dead[k]:
            Pc[k].real = 0
            Pc[k].imag = 0
            ndead[0] = ndead[0] + 1
            continue
        # powers in polar form, with the quarter turns of spectrum_terms (or the caller's for k < K)
        lm = logmag[k]
        if isfinite(lm):
            _polar(lm, phase[k], quarter[k], two_pi, &pr, &pi_)
            Pc[k].real = pr
            Pc[k].imag = pi_
        else:
            Pc[k].real = 0
            Pc[k].imag = 0
        # round-off bound (composition.roundoff._fp_fft_bound), float64; the first K frequencies come from
        # the accurate low-frequency series (composition.series._series_spectrum) with their own bound
        if k < K:
            amp = amp_low[k]
            log_prod = lp_low[k]
            w = 1.0 if (k == 0 or (N % 2 == 0 and k == F - 1)) else 2.0
            se2 = se2 + w * amp * amp
            sp2 = sp2 + w * exp(2.0 * log_prod)
            continue
        log_prod = 0.0
        for c in range(C):
            log_prod = log_prod + ms[c] * LRG[c, k]
        amp = 0.0
        sum_lr = 0.0
        cond = 0.0
        for c in range(C):
            amp = amp + ms[c] * g * exp(log_prod - LRG[c, k])
        for c in range(C):
            sum_lr = sum_lr + ms[c] * LR[c, k]
            lrc = LR[c, k] if isfinite(LR[c, k]) else 0.0
            cond = cond + ms[c] * (fabs(lrc) + fabs(PH[c, k]))
        # polar-power rounding, every maths-library call within 4 ulp (composition.roundoff._polar_rel)
        amp = amp + 1.01 * u * ((11 + C) * cond + 8 * msum + 40) * exp(sum_lr)
        if not isfinite(amp):
            amp = 0.0
        w = 1.0 if (k == 0 or (N % 2 == 0 and k == F - 1)) else 2.0
        se2 = se2 + w * amp * amp
        sp2 = sp2 + w * exp(2.0 * log_prod)
    e2[0] = se2
    p2[0] = sp2
    return FPLD_OK


def power_fp(const real_out[::1] logmag, const real_out[::1] phase, const double[:, ::1] LR,
             const double[:, ::1] LRG, const double[:, ::1] PH, const double[::1] ms, double g, double u,
             Py_ssize_t N, cplx[::1] Pc, Py_ssize_t K, const double[::1] lp_low, const double[::1] amp_low,
             const unsigned char[::1] dead, const unsigned char[::1] quarter):
    """Write ``exp(logmag + i phase) i^quarter`` into ``Pc``; return
    ``(sum w amp^2, sum w P^2, n_dead)``.

    For ``k < K`` the bound terms are ``amp_low[k]`` and ``exp(lp_low[k])`` (accurate series);
    frequencies marked ``dead`` by spectrum_terms get 0 (their count is returned; the caller charges each, see _native.convolve).
    """
    cdef double e2 = 0.0, p2 = 0.0, nd = 0.0
    cdef int status
    with nogil:
        status = _power_fp(logmag, phase, LR, LRG, PH, ms, g, u, N, Pc, K, lp_low, amp_low, dead, quarter, &e2, &p2, &nd)
    _check(status, "power_fp")
    return e2, p2, nd


cdef int _lattice_power(const real_out[::1] L, const real_out[::1] Phi, const unsigned char[::1] Q,
                        const double[::1] dL, const double[::1] dP, const double[::1] up, double u, Py_ssize_t N,
                        cplx[::1] Pc, double *e2, double *p2) noexcept nogil:
    cdef Py_ssize_t F = L.shape[0], k
    cdef real_out two_pi, pr, pi_
    cdef double lf, w, ea, amp, lp, pol, mag, fine, crude, hi, se2 = 0.0, sp2 = 0.0
    cdef double up_c = NAN, ea_c = 0.0, lp_c = 0.0, x2_c = 0.0
    if real_out is double:
        two_pi = _TWO_PI
    else:
        two_pi = <real_out>_TWO_PI_L
    if Phi.shape[0] != F or Q.shape[0] != F or dL.shape[0] != F or dP.shape[0] != F or up.shape[0] != F \
            or Pc.shape[0] != F or F != N // 2 + 1:
        return FPLD_EINVAL
    for k in range(F):
        w = 1.0 if (k == 0 or (N % 2 == 0 and k == F - 1)) else 2.0
        lf = <double>L[k]
        # |exact power| <= e^up (the crude bound); exp is 0 below -746 anyway (spared its underflow path);
        # the skipped frequencies share one up (composition.lattice._lattice_spectrum): computed once per run of
        # equal ones
        if up[k] != up_c:
            up_c = up[k]
            ea_c = exp(up_c) if up_c > -746.0 else 0.0
            lp_c = up_c + 1e-12
            x2_c = exp(2.0 * lp_c) if 2.0 * lp_c > -746.0 else 0.0
        ea = ea_c
        if not isfinite(lf):  # a skipped frequency: power 0, error at most e^up
            Pc[k].real = 0
            Pc[k].imag = 0
            se2 = se2 + w * ea * ea
            sp2 = sp2 + w * x2_c  # (+ 0 where exp(2 lp) would underflow: the same sum)
            continue
        _polar(L[k], Phi[k], Q[k], two_pi, &pr, &pi_)
        Pc[k].real = pr
        Pc[k].imag = pi_
        # the bound (composition.lattice._lattice_amp): the smaller of the fine and the crude one
        pol = 8.0 * u * (5.0 + fabs(<double>Phi[k]) + fabs(lf))
        mag = exp(lf)
        fine = 1.01 * mag * (expm1(dL[k]) + exp(dL[k]) * dP[k] + pol)
        crude = 1.01 * mag * (1.0 + pol) + ea
        amp = (fine if fine < crude else crude) if isfinite(fine) else crude
        hi = lf + dL[k]
        hi = (hi if hi < up[k] else up[k]) if isfinite(hi) else up[k]
        lp = (lf if lf > hi else hi) + 1e-12
        se2 = se2 + w * amp * amp
        if 2.0 * lp > -746.0:
            sp2 = sp2 + w * exp(2.0 * lp)
    e2[0] = se2
    p2[0] = sp2
    return FPLD_OK


def lattice_power(const real_out[::1] L, const real_out[::1] Phi, const unsigned char[::1] Q, const double[::1] dL,
                  const double[::1] dP, const double[::1] up, double u, Py_ssize_t N, cplx[::1] Pc):
    """The power of a lattice-spectrum node (composition.lattice._lattice_spectrum's ``L, Phi, Q, dL, dP, up``)
    into ``Pc`` and its round-off bound in one pass: ``(sum w amp^2, sum w e^(2 lp))`` with ``(lp, amp)`` of
    composition.lattice._lattice_amp at every frequency (reference: composition.lattice._lattice_amp and
    composition.powers._lattice_power_numpy; equal powers, and sums equal up to libm's ``exp`` against numpy's)."""
    cdef double e2 = 0.0, p2 = 0.0
    cdef int status
    with nogil:
        status = _lattice_power(L, Phi, Q, dL, dP, up, u, N, Pc, &e2, &p2)
    _check(status, "lattice_power")
    return e2, p2


# ---------------------------------------------------------------------------------------
# direct powers (float64 nodes without the low-frequency series): products instead of polar form
# ---------------------------------------------------------------------------------------
def power_direct(const double complex[::1] X, Py_ssize_t m, double complex[::1] P, double[::1] B, double[::1] D,
                 double g, bint first, double[::1] work=None, double rdead=0.0, K=None, Py_ssize_t klow=0,
                 double rho=1.0, const long double[::1] XL=None):
    """Accumulate one input spectrum of a float64 node: ``P *= X^m`` (binary powering),
    ``B *= (|X| + g)^m``, ``D += rho_k m / (|X| + g)`` (``first``: assign instead), on the frequencies
    ``[0, K)`` (default: all); returns the new ``K``: with ``rdead > 0`` the prefix ends after the
    last frequency where ``|X| >= rdead`` (the caller zeroes and charges the rest).  ``rho_k = rho`` below
    ``klow`` (frequencies whose forward error is ``rho g``: :func:`low_dft`'s), else 1.  ``XL``: :func:`low_dft`'s long
    double values (``2 klow`` entries, interleaved), whose powers below ``klow`` are taken in long double and
    multiplied into ``P`` in long double, rounded once (the bound's ``c1_low``, :func:`power_direct_bound`).

    With ``M`` the total power, ``|P - prod X^m| <= ((1 + sqrt(5) u)^(M - 1) - 1) prod |X|^m``
    (every addition chain for ``x^m`` accumulates ``m - 1`` relative roundings); the caller's
    bound is :func:`power_direct_bound`.  ``work``: scratch of at least ``6 len(X)`` doubles.
    """
    cdef int status
    cdef Py_ssize_t F = X.shape[0]
    cdef Py_ssize_t k = F if K is None else K
    if work is None:
        work = np.empty(6 * F + 1)
    cdef const long double *xl = NULL
    if P.shape[0] != F or B.shape[0] != F or D.shape[0] != F or work.shape[0] < 6 * F or F < 1:
        raise ValueError("power_direct: invalid argument")
    if XL is not None:
        if XL.shape[0] < 2 * klow:
            raise ValueError("power_direct: invalid argument")
        if klow > 0:
            xl = &XL[0]
    with nogil:
        status = fpld_power_direct(<const double *> &X[0], F, m, <double *> &P[0], &B[0], &D[0], g, first,
                                   &work[0], rdead, &k, klow, rho, xl)
    _check(status, "power_direct")
    return k


def low_dft(const double[::1] p, cnp.int64_t cen, cnp.int64_t N, const double[::1] c, const double[::1] s, double m,
            double g, double tau, Py_ssize_t kmax, double complex[::1] X, long double[::1] XL=None):
    """Overwrite the forward FFT's output ``X`` (``N // 2 + 1`` values) at the frequencies ``k < K`` by the directly
    summed spectrum of ``p`` placed at ``(j - cen) mod N`` (long double products and sums, the float64 tables
    ``c, s`` of ``cos, sin(2 pi r / N)``); ``K``, returned: the first ``k >= 1`` where ``m g (|X_k| + g)^(m - 1) <=
    tau``, at most ``kmax`` (C ``fpld_low_dft``; reference ``fastpld._reference.low_dft``).  ``XL`` (``2 kmax`` long
    doubles, or ``None``) receives the sums before their rounding, interleaved."""
    cdef int status
    cdef Py_ssize_t K = 0
    cdef long double *xl = NULL
    if (p.shape[0] < 1 or c.shape[0] != N or s.shape[0] != N or X.shape[0] != N // 2 + 1 or kmax < 1):
        raise ValueError("low_dft: invalid argument")
    if XL is not None:
        if XL.shape[0] < 2 * kmax:
            raise ValueError("low_dft: invalid argument")
        xl = &XL[0]
    with nogil:
        status = fpld_low_dft(&p[0], p.shape[0], cen, N, &c[0], &s[0], m, g, tau, kmax, <double *> &X[0], xl, &K)
    _check(status, "low_dft")
    return K


def dft_at(const double[::1] p, cnp.int64_t cen, cnp.int64_t N, const double[::1] c, const double[::1] s,
           cnp.int64_t k):
    """``sum_j p_j (c_r - i s_r)``, ``r = k (j - cen) mod N``, over the non-zero ``p_j`` in float64 (C ``fpld_dft_at``;
    reference ``fastpld._reference.dft_at``): one value of :func:`low_dft`'s spectrum."""
    cdef double out[2]
    cdef int status
    if p.shape[0] < 1 or c.shape[0] != N or s.shape[0] != N or k < 0:
        raise ValueError("dft_at: invalid argument")
    with nogil:
        status = fpld_dft_at(&p[0], p.shape[0], cen, N, &c[0], &s[0], k, out)
    _check(status, "dft_at")
    return complex(out[0], out[1])


def power_direct_ld(const long double[::1] X, Py_ssize_t m, long double[::1] P, double[::1] B, double[::1] D,
                    double g, bint first, double rdead=0.0, K=None):
    """:func:`power_direct` of a long double node: ``X`` and ``P`` interleaved ``(re, im)`` long double arrays
    (``2 F`` entries), the powers by binary powering and textbook complex products in long double (relative
    ``sqrt(5) u`` each, ``u`` long double's: :func:`power_direct_bound` with that ``u``); ``B`` and ``D`` in
    float64 from ``|X|`` in float64, as the float64 kernel's (its bound's ``1 + 1e-9`` covers their rounding).
    One pass per frequency, no logarithms or trigonometric calls (the polar form's ``logl``, ``atan2l``, ``expl``
    and ``sincosl`` cost most of a long double node's power).  Returns the new ``K`` as :func:`power_direct`."""
    cdef Py_ssize_t F = X.shape[0] // 2
    cdef Py_ssize_t n = F if K is None else K, k
    cdef long double xr, xi, yr, yi, pr, pim
    cdef double rg, b, dm = <double>m, lim, a, c
    if (F < 1 or X.shape[0] != 2 * F or P.shape[0] != 2 * F or B.shape[0] != F or D.shape[0] != F or m < 1
            or n < 0 or n > F):
        raise ValueError("power_direct_ld: invalid argument")
    with nogil:
        if rdead > 0:
            # (as the float64 kernel: the prefix ends after the last frequency where |X| + g >= rdead + g)
            lim = rdead + g
            while n > 0:
                a = <double>X[2 * n - 2]
                c = <double>X[2 * n - 1]
                if sqrt(a * a + c * c) + g < lim:
                    n -= 1
                else:
                    break
        for k in range(n):
            xr = X[2 * k]
            xi = X[2 * k + 1]
            a = <double>xr
            c = <double>xi
            rg = sqrt(a * a + c * c) + g
            if first:
                D[k] = dm / rg
            else:
                D[k] = D[k] + dm / rg
            fpld_power_ld(xr, xi, rg, m, &yr, &yi, &b)
            if first:
                P[2 * k] = yr
                P[2 * k + 1] = yi
                B[k] = b
            else:
                pr = P[2 * k]
                pim = P[2 * k + 1]
                P[2 * k] = pr * yr - pim * yi
                P[2 * k + 1] = pr * yi + pim * yr
                B[k] = B[k] * b
    return n


def power_direct_bound(const double[::1] B, const double[::1] D, double g, double msum, double u, Py_ssize_t N,
                       Py_ssize_t K=-1, Py_ssize_t klow=0, double c1_low=0.0):
    """``(sum_k w_k amp_k^2, sum_k w_k B_k^2)`` for the direct powers (composition.powers._direct_power):
    ``amp = (g D B + 4.01 (M - 1) u B) (1 + 1e-9) + M 1e-300`` (forward error propagated through
    the product; the products' rounding; the bound's own rounding and underflow), over the
    first ``K`` frequencies (default: all); below ``klow`` the products' rounding is ``c1_low B`` instead (powers
    in long double, :func:`power_direct`'s ``XL``)."""
    cdef Py_ssize_t F = B.shape[0] if K < 0 else K, k
    cdef Py_ssize_t Fall = N // 2 + 1
    cdef double se2 = 0.0, sp2 = 0.0, amp, w, c1 = 4.01 * (msum - 1.0) * u, infl = 1.0 + 1e-9, tiny = msum * 1e-300
    if D.shape[0] < F or B.shape[0] < F or klow < 0:
        raise ValueError("power_direct_bound: invalid argument")
    with nogil:
        for k in range(F):
            amp = (g * D[k] + (c1_low if k < klow else c1)) * B[k] * infl + tiny
            w = 1.0 if (k == 0 or (N % 2 == 0 and k == Fall - 1)) else 2.0
            se2 = se2 + w * amp * amp
            sp2 = sp2 + w * B[k] * B[k]
    return se2, sp2 * infl * infl


cdef inline int _start_steps(const cnp.int64_t[::1] steps, Py_ssize_t N, cnp.int64_t *r) noexcept nogil:
    """Check ``0 <= steps[j] < N`` and set the running indices ``r[j] = 0`` (``r[j] = k steps[j] mod N``
    at frequency ``k``, advanced by :func:`_advance_steps`)."""
    cdef Py_ssize_t j
    for j in range(steps.shape[0]):
        if steps[j] < 0 or steps[j] >= N:
            return FPLD_EINVAL
        r[j] = 0
    return FPLD_OK


cdef inline void _advance_steps(const cnp.int64_t[::1] steps, Py_ssize_t N, cnp.int64_t *r) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(steps.shape[0]):
        r[j] += steps[j]
        if r[j] >= N:
            r[j] -= N


cdef int _small_dft(const real_out[::1] q, const cnp.int64_t[::1] steps, const real_out[::1] c,
                    const real_out[::1] s, real_out[::1] out, cnp.int64_t *r) noexcept nogil:
    cdef Py_ssize_t n = q.shape[0], N = c.shape[0], F, j, k
    cdef real_out re, im
    if N <= 0 or s.shape[0] != N or steps.shape[0] != n:
        return FPLD_EINVAL
    F = N // 2 + 1
    if out.shape[0] != 2 * F:
        return FPLD_EINVAL
    if _start_steps(steps, N, r) != FPLD_OK:
        return FPLD_EINVAL
    # frequency by frequency, the sum over j in the given order in registers (r[j] = k steps[j] mod N)
    for k in range(F):
        re = 0
        im = 0
        for j in range(n):
            re = re + q[j] * c[r[j]]
            im = im - q[j] * s[r[j]]
        _advance_steps(steps, N, r)
        out[2 * k] = re
        out[2 * k + 1] = im
    return FPLD_OK


cdef int _lattice_terms(const real_out[::1] q, const real_out[::1] wt, const cnp.int64_t[::1] steps,
                        const real_out[::1] c, const real_out[::1] s, const real_out[::1] a,
                        const cnp.int64_t[::1] lags, const real_out[::1] s2, double m, double eta, double u,
                        double slow, double e0, double skip_below, const double[::1] pre, double thr, bint first,
                        real_out[::1] L, real_out[::1] Phi, unsigned char[::1] Q, double[::1] dL, double[::1] dP,
                        double[::1] up, double[::1] absL, double[::1] absP, cnp.int64_t *r) noexcept nogil:
    cdef Py_ssize_t n = q.shape[0], nl = a.shape[0], N = c.shape[0], N2 = s2.shape[0], F = L.shape[0], j, k
    cdef real_out re, im, cj, sj, are, aim, acc, x, lc, psi, xr, xi, S = 0, half_m = <real_out>(0.5 * m)
    cdef real_out mm = <real_out>m
    cdef double ere, eim, xf, den, dlc, rr, ee, sang, dpsi, ex, ey, ar, ai, lf, pf
    cdef int qq, mq = (<long long>m) % 4
    cdef bint live, use_pre = pre.shape[0] > 0
    cdef Py_ssize_t last = -2
    if N <= 0 or N2 <= 0 or s.shape[0] != N or steps.shape[0] != n or wt.shape[0] != n or lags.shape[0] != nl:
        return FPLD_EINVAL
    if Phi.shape[0] != F or Q.shape[0] != F or dL.shape[0] != F or dP.shape[0] != F or up.shape[0] != F \
            or absL.shape[0] != F or absP.shape[0] != F or F != N // 2 + 1 or (use_pre and pre.shape[0] != F):
        return FPLD_EINVAL
    if _start_steps(steps, N, r) != FPLD_OK or _start_steps(lags, N2, r + n) != FPLD_OK:
        return FPLD_EINVAL
    for j in range(n):
        # (sequential, as composition.lattice._lattice_spectrum: a Python long double argument would be a double)
        S = S + q[j]
    for k in range(F):
        if use_pre:
            # the caller's crude bound (from a float64 FFT): dead frequencies need nothing else
            if first and pre[k] < thr:
                L[k] = -INFINITY
                Phi[k] = 0
                Q[k] = 0
                dL[k] = INFINITY
                dP[k] = 0.0
                up[k] = skip_below
                absL[k] = 0.0
                absP[k] = 0.0
                continue
            if k != last + 1:  # r[j] = k steps[j] mod N afresh after a gap (else incremented below)
                for j in range(n):
                    r[j] = (k * steps[j]) % N
                for j in range(nl):
                    r[n + j] = (k * lags[j]) % N2
            last = k
        # the direct DFT (r[j] = k steps[j] mod N)
        re = 0
        im = 0
        for j in range(n):
            re = re + q[j] * c[r[j]]
            im = im - q[j] * s[r[j]]
        rr = hypot(<double>re, <double>im)
        # the crude bound with the a-priori error e0 first: frequencies below skip_below need no more
        # (with the caller's bound, every frequency reaching here is live)
        live = True
        if not use_pre:
            dlc = _crude_up(m, rr, e0, slow)
            live = not (first and dlc < skip_below)
        if live:
            # per component sum_j wt_j |table entry| (the a-priori-weighted error bound), the same r[j]
            are = 0
            aim = 0
            for j in range(n):
                if real_out is double:
                    are = are + wt[j] * fabs(c[r[j]])
                    aim = aim + wt[j] * fabs(s[r[j]])
                else:
                    are = are + wt[j] * fabsl(c[r[j]])
                    aim = aim + wt[j] * fabsl(s[r[j]])
            # 1 - |X / S|^2 from the lag sums (as table_sum)
            acc = 0
            for j in range(nl):
                acc = acc + a[j] * s2[r[n + j]]
            acc = acc * 4
        _advance_steps(steps, N, r)
        _advance_steps(lags, N2, r + n)
        if live:
            ere = 1.01 * u * <double>are
            eim = 1.01 * u * <double>aim
            ee = hypot(ere, eim)
            dlc = _crude_up(m, rr, ee, slow)
        if not live:
            L[k] = -INFINITY
            Phi[k] = 0
            Q[k] = 0
            dL[k] = INFINITY
            dP[k] = 0.0
            up[k] = dlc
            absL[k] = 0.0
            absP[k] = 0.0
            continue
        up[k] = (0.0 if first else up[k]) + dlc
        x = acc / (S * S)
        if real_out is double:
            lc = half_m * log1p(-x)
        else:
            lc = half_m * log1pl(-x)
        xf = <double>x
        lf = <double>lc
        den = 1.0 - xf * (1.0 + eta)
        dlc = 0.5 * m * xf * eta / den if den > 0 else INFINITY
        dlc = dlc + 12.0 * u * (fabs(lf) if isfinite(lf) else INFINITY)
        # arg X = psi + qq pi/2, X turned back exactly
        xr = re
        xi = im
        qq = _quarter_turn(&xr, &xi)
        if real_out is double:
            psi = atan2(xi, xr)
        else:
            psi = atan2l(xi, xr)
        pf = <double>psi
        ex = eim if (qq & 1) else ere
        ey = ere if (qq & 1) else eim
        ar = fabs(<double>xr)
        ai = fabs(<double>xi)
        if rr > ee:
            sang = ((ar + ex) * ey + (ai + ey) * ex) / (rr * (rr - ee))
        else:
            sang = 2.0
        dpsi = 1.01 * asin(sang) if sang < 1 else 3.141592653589793
        dpsi = dpsi + 8.0 * u * fabs(pf)
        if first:
            L[k] = lc
            Phi[k] = mm * psi
            Q[k] = (mq * qq) & 3
            dL[k] = dlc
            dP[k] = m * dpsi + 2.0 * u * m * fabs(pf)
            absL[k] = fabs(lf) if isfinite(lf) else 0.0
            absP[k] = m * fabs(pf)
        else:
            L[k] = L[k] + lc
            Phi[k] = Phi[k] + mm * psi
            Q[k] = (Q[k] + mq * qq) & 3
            dL[k] = dL[k] + dlc
            dP[k] = dP[k] + m * dpsi + 2.0 * u * m * fabs(pf)
            absL[k] = absL[k] + (fabs(lf) if isfinite(lf) else 0.0)
            absP[k] = absP[k] + m * fabs(pf)
    return FPLD_OK


def lattice_terms(const real_out[::1] q, const real_out[::1] wt, const cnp.int64_t[::1] steps, const real_out[::1] c,
                  const real_out[::1] s,
                  const real_out[::1] a, const cnp.int64_t[::1] lags, const real_out[::1] s2, double m,
                  double eta, double u, double slow, double e0, double skip_below, const double[::1] pre, double thr,
                  bint first,
                  real_out[::1] L,
                  real_out[::1] Phi,
                  unsigned char[::1] Q, double[::1] dL, double[::1] dP, double[::1] up, double[::1] absL,
                  double[::1] absP):
    """One input's terms of composition.lattice._lattice_spectrum at every frequency, in one pass (its numpy reference):
    the direct DFT with its error bound (``1.01 u sum_j wt_j |table entry|``), ``1 - |X / S|^2`` from the
    lag sums, ``m/2 log1p``, the quarter-turn angle and every bound; ``first`` assigns, otherwise accumulates.  With ``first``, frequencies whose crude
    bound ``m log((|X~| + e0) / slow)`` (``e0``: the DFT's a-priori error) is below ``skip_below`` get
    ``L = -inf``, ``dL = inf`` and only that bound, without the error sums, lag sums, logarithms and angles;
    ``pre`` (length ``N//2 + 1``, or empty): the caller's float64 ``|X~|`` instead; frequencies where it is
    below ``thr`` are dead, with ``up = skip_below`` (the caller sizes ``thr`` so), and take no DFT."""
    cdef int status
    cdef cnp.int64_t *r = <cnp.int64_t *>PyMem_Malloc(max(q.shape[0] + a.shape[0], 1) * sizeof(cnp.int64_t))
    if r == NULL:
        raise MemoryError("lattice_terms: out of memory")
    with nogil:
        status = _lattice_terms(q, wt, steps, c, s, a, lags, s2, m, eta, u, slow, e0, skip_below, pre, thr, first, L, Phi, Q,
                                dL, dP, up, absL, absP, r)
    PyMem_Free(r)
    _check(status, "lattice_terms")


cdef int _table_sum(const real_out[::1] w, const cnp.int64_t[::1] steps, const real_out[::1] tab,
                    real_out[::1] out, cnp.int64_t *r) noexcept nogil:
    cdef Py_ssize_t n = w.shape[0], N = tab.shape[0], F = out.shape[0], j, k
    cdef real_out acc
    if N <= 0 or _start_steps(steps, N, r) != FPLD_OK:
        return FPLD_EINVAL
    for k in range(F):
        acc = 0
        for j in range(n):
            acc = acc + w[j] * tab[r[j]]
        _advance_steps(steps, N, r)
        out[k] = acc
    return FPLD_OK


def table_sum(const real_out[::1] w, const cnp.int64_t[::1] steps, const real_out[::1] tab, real_out[::1] out):
    """``out[k] = sum_j w_j tab[(k steps_j) mod N]`` (``N = len(tab)``), summed over ``j`` in order."""
    cdef int status
    if steps.shape[0] != w.shape[0]:
        raise ValueError("table_sum: invalid argument")
    cdef cnp.int64_t *r = <cnp.int64_t *>PyMem_Malloc(max(w.shape[0], 1) * sizeof(cnp.int64_t))
    if r == NULL:
        raise MemoryError("table_sum: out of memory")
    with nogil:
        status = _table_sum(w, steps, tab, out, r)
    PyMem_Free(r)
    _check(status, "table_sum")


def small_dft(const real_out[::1] q, const cnp.int64_t[::1] steps, const real_out[::1] c, const real_out[::1] s,
              real_out[::1] out):
    """``out`` (interleaved re, im; ``N//2 + 1`` values) ``= sum_j q_j e^(-2 pi i k steps_j / N)`` from the
    tables ``c, s`` of ``cos, sin(2 pi r / N)``, summed over ``j`` in order (_kernels.small_dft)."""
    cdef int status
    cdef cnp.int64_t *r = <cnp.int64_t *>PyMem_Malloc(max(q.shape[0], 1) * sizeof(cnp.int64_t))
    if r == NULL:
        raise MemoryError("small_dft: out of memory")
    with nogil:
        status = _small_dft(q, steps, c, s, out, r)
    PyMem_Free(r)
    _check(status, "small_dft")


# ---------------------------------------------------------------------------------------
# accurate low-frequency spectra (composition.series._series_spectrum): scaled power moments
# ---------------------------------------------------------------------------------------
cdef enum:
    _MOM_BLOCK = 16
    _MOM_MAX = 64


cdef void _moments_rec(const real_in[::1] p, Py_ssize_t a, Py_ssize_t b, Py_ssize_t cen, long double inv_d,
                       Py_ssize_t R1, long double *acc) noexcept nogil:
    # pairwise over blocks of _MOM_BLOCK summed left to right: every term takes part in at most
    # ceil(log2 n) + _MOM_BLOCK additions (the bound in _kernels.series_moments)
    cdef long double left[_MOM_MAX]
    cdef long double right[_MOM_MAX]
    cdef long double pws[_MOM_BLOCK]
    cdef long double ss[_MOM_BLOCK]
    cdef long double x0, x1, x2, x3, x4, x5, q, st
    cdef Py_ssize_t j, r, mid, t, nb
    if b - a <= _MOM_BLOCK:
        # per moment r, the block's terms p_j s_j^r added left to right (each power by r products, as
        # p_j s_j s_j ...); six moments at a time: their sums are independent chains the FPU overlaps, and
        # each power is loaded and stored once per six moments (80-bit loads and stores are slow)
        nb = b - a
        for t in range(nb):
            ss[t] = <long double>(a + t - cen) * inv_d  # exact: inv_d is a power of two
            pws[t] = <long double>p[a + t]
        r = 0
        while r + 5 < R1:
            x0 = 0
            x1 = 0
            x2 = 0
            x3 = 0
            x4 = 0
            x5 = 0
            for t in range(nb):
                q = pws[t]
                st = ss[t]
                x0 = x0 + q
                q = q * st
                x1 = x1 + q
                q = q * st
                x2 = x2 + q
                q = q * st
                x3 = x3 + q
                q = q * st
                x4 = x4 + q
                q = q * st
                x5 = x5 + q
                pws[t] = q * st
            acc[r] = x0
            acc[r + 1] = x1
            acc[r + 2] = x2
            acc[r + 3] = x3
            acc[r + 4] = x4
            acc[r + 5] = x5
            r += 6
        while r + 1 < R1:
            x0 = 0
            x1 = 0
            for t in range(nb):
                x0 = x0 + pws[t]
                q = pws[t] * ss[t]
                x1 = x1 + q
                pws[t] = q * ss[t]
            acc[r] = x0
            acc[r + 1] = x1
            r += 2
        if r < R1:
            x0 = 0
            for t in range(nb):
                x0 = x0 + pws[t]
            acc[r] = x0
        return
    mid = a + (b - a) // 2
    _moments_rec(p, a, mid, cen, inv_d, R1, left)
    _moments_rec(p, mid, b, cen, inv_d, R1, right)
    for r in range(R1):
        acc[r] = left[r] + right[r]


cdef inline void _two_sum(long double a, long double b, long double *s, long double *e) noexcept nogil:
    cdef long double x = a + b
    cdef long double bb = x - a
    e[0] = (a - (x - bb)) + (b - bb)
    s[0] = x


cdef void _sum2_m01(const real_in[::1] p, Py_ssize_t cen, long double inv_d, long double *m0,
                    long double *m1) noexcept nogil:
    # Ogita-Rump-Oishi Sum2 (cascaded) of p_j and of the exact products p_j s_j: p_j is split
    # (Veltkamp, 2^32 + 1) into two 32-bit halves, each times s_j (<= 31 significant bits) exact
    cdef Py_ssize_t j, n = p.shape[0]
    cdef long double s0 = 0, e0 = 0, s1 = 0, e1 = 0, x, t, hi, lo, s, e
    cdef long double split = 4294967297.0
    for j in range(n):
        x = <long double>p[j]
        _two_sum(s0, x, &s, &e)
        s0 = s
        e0 = e0 + e
        t = split * x
        hi = t - (t - x)
        lo = x - hi
        s = <long double>(j - cen) * inv_d
        _two_sum(s1, hi * s, &s1, &e)
        e1 = e1 + e
        _two_sum(s1, lo * s, &s1, &e)
        e1 = e1 + e
    m0[0] = s0 + e0
    m1[0] = s1 + e1


def series_moments(const real_in[::1] p, Py_ssize_t cen, double d, long double[::1] out):
    """``out[r] = sum_j p_j ((j - cen) / d)^r`` for ``r < len(out)`` in long double (pairwise;
    ``r = 0, 1`` compensated, see ``_kernels.series_moments``).

    ``d`` must be a power of two (the scaling is then exact); ``len(out) <= 64``; ``|j - cen| < 2^31``.
    """
    cdef Py_ssize_t R1 = out.shape[0], n = p.shape[0], r
    cdef long double acc[_MOM_MAX]
    cdef long double inv_d = 1.0 / <long double>d
    if R1 < 1 or R1 > _MOM_MAX or n < 1 or not d > 0:
        raise ValueError("series_moments: invalid argument")
    with nogil:
        _moments_rec(p, 0, n, cen, inv_d, R1, acc)
        for r in range(R1):
            out[r] = acc[r]
        # M_0 and M_1 compensated: their errors would otherwise grow with the node's power
        _sum2_m01(p, cen, inv_d, &acc[0], &acc[1])
        out[0] = acc[0]
        if R1 > 1:
            out[1] = acc[1]


cdef int _series_eval(const real_out[::1] a, const double[::1] cerr, real_out step, double rho, double fact_r1,
                      real_out[::1] re, real_out[::1] im, double[::1] dz) noexcept nogil:
    cdef Py_ssize_t K = re.shape[0], R = a.shape[0] - 1, k, r
    cdef real_out phi, x, acc
    cdef double pf, pw, err, t
    if R < 2 or R % 2 or cerr.shape[0] != R + 1 or im.shape[0] != K or dz.shape[0] != K:
        return FPLD_EINVAL
    for k in range(K):
        phi = <real_out>k * step
        x = phi * phi
        acc = a[R]
        r = R - 2
        while r > 1:
            acc = a[r] - x * acc
            r -= 2
        re[k] = x * acc
        acc = a[R - 1]
        r = R - 3
        while r > 0:
            acc = a[r] - x * acc
            r -= 2
        im[k] = phi * acc
        pf = <double>phi
        pw = 1.0
        err = 0.0
        for r in range(1, R + 1):
            pw = pw * pf
            err = err + cerr[r] * pw
        t = pf * rho * 1.001
        dz[k] = 1.01 * (2.0 * err + 2.0 * 1.01 * pow(t, <double>(R + 1)) / fact_r1)
    return FPLD_OK


def series_eval(const real_out[::1] a, const double[::1] cerr, const real_out[::1] step, double rho, double fact_r1,
                real_out[::1] re, real_out[::1] im, double[::1] dz):
    """Horner evaluation of the low-frequency series (``composition.series._series_spectrum``) at ``phi_k = k step``.

    ``re = sum_(r even >= 2) (-1)^(r/2+1) a_r phi^r``, ``im = sum_(r odd) (-1)^((r-1)/2) a_r phi^r`` and
    ``dz = 1.01 (2 sum_r cerr_r phi^r + 2.02 (1.001 phi rho)^(R+1) / fact_r1)``.  ``step`` is a
    one-element array (a long double scalar passed as a Python object would be rounded to double).
    """
    cdef int status
    if step.shape[0] != 1:
        raise ValueError("series_eval: step must have one element")
    with nogil:
        status = _series_eval(a, cerr, step[0], rho, fact_r1, re, im, dz)
    _check(status, "series_eval")


cdef inline double _gam(double k, double u) noexcept nogil:
    return k * u / (1.0 - k * u)


cdef inline long double _rl(real_out x) noexcept nogil:
    return <long double>x


def series_input(const long double[::1] M, const long double[::1] cl, double rho, double d, double m, Py_ssize_t n,
                 Py_ssize_t N, const long double[::1] fact_ld, const double[::1] fact, const long double[:, ::1] binom,
                 const double[::1] hor_g, const double[::1] gc, double u, double uld, Py_ssize_t lev, double fact_r1,
                 const real_out[::1] two_pi_a, real_out[::1] L, real_out[::1] P, double[::1] dL, double[::1] dP,
                 double[::1] absL, double[::1] absP):
    """One input's low-frequency series terms (compiled ``composition.series._series_input``; same formulas).

    ``M``: the ``R + 3`` scaled moments; ``cl``: the expansion point ``c`` (one element, long
    double); ``two_pi_a``: ``2 pi`` in the working precision (one element).  Writes
    ``m log|1 - Z'|``, ``m arg(1 - Z') + linear phase`` and their error bounds at ``k < len(L)``;
    returns ``(K, d0)`` with ``K`` the first frequency where ``|1 - Z'| - dZ < 1/4``.
    """
    cdef Py_ssize_t R = fact.shape[0] - 1, K0 = L.shape[0], k, r, i, Kc
    cdef long double c = cl[0], mu0l = M[0], T, Tf_l, acc_l, t_l
    cdef double mu0, d0, g2, ssum, magsum
    cdef real_out two_pi = two_pi_a[0], step, Tf, wre, v, lw, ph, re_k, im_k, lin
    cdef double gap, den, dlw, dph, ref, imf, dlin, lwf, absph, wabs
    cdef long long Ti, kk
    if M.shape[0] != R + 3 or R % 2 or binom.shape[0] != R + 1 or binom.shape[1] != R + 1 or hor_g.shape[0] != R + 1 \
            or gc.shape[0] != R + 1 or fact_ld.shape[0] != R + 1 or P.shape[0] != K0 or dL.shape[0] != K0 \
            or dP.shape[0] != K0 or absL.shape[0] != K0 or absP.shape[0] != K0 or R + 3 > _MOM_MAX:
        raise ValueError("series_input: invalid argument")
    a_arr = np.empty(R + 1, dtype=np.asarray(L).dtype)
    cdef real_out[::1] a = a_arr
    cerr_arr = np.empty(R + 1)
    cdef double[::1] cerr = cerr_arr
    re_arr = np.empty(K0, dtype=np.asarray(L).dtype)
    im_arr = np.empty(K0, dtype=np.asarray(L).dtype)
    dz_arr = np.empty(K0)
    cdef real_out[::1] re = re_arr, im = im_arr
    cdef double[::1] dz = dz_arr
    cdef double A[_MOM_MAX]
    cdef double e[_MOM_MAX]
    cdef double gi
    cdef long double pc[_MOM_MAX]
    cdef long double Cm[_MOM_MAX]
    cdef double eC[_MOM_MAX]
    with nogil:
        mu0 = <double>mu0l
        g2 = _gam(<double>(2 * n + 2), uld)
        d0 = 1.02 * (uld + g2 * g2) * mu0
        # moment error bounds (composition.series._series_input)
        for i in range(R + 3):
            gi = _gam(<double>(i + lev), uld)
            if i % 2 == 0:
                A[i] = (<double>M[i]) * (1.0 + 1.01 * gi)
        for i in range(1, R + 3, 2):
            A[i] = sqrt(A[i - 1] * A[i + 1]) * 1.01
        for i in range(R + 3):
            if A[i] > mu0 + d0:
                A[i] = mu0 + d0
        for i in range(R + 1):
            e[i] = _gam(<double>(i + lev), uld) * A[i]
        g2 = _gam(<double>(2 * n + 2), uld)
        g2 = g2 * g2
        for i in range(2):
            e[i] = 1.01 * (uld * fabs(<double>M[i]) + g2 * A[i])
        # central moments about c (binomial transform, long double) and their errors
        pc[0] = 1
        for r in range(1, R + 1):
            pc[r] = pc[r - 1] * (-c)
        for r in range(R + 1):
            acc_l = 0
            ssum = 0.0
            magsum = 0.0
            for i in range(r + 1):
                t_l = binom[r, i] * pc[r - i] * M[i]
                acc_l = acc_l + t_l
                ssum = ssum + fabs(<double>t_l)
                magsum = magsum + fabs(<double>(binom[r, i] * pc[r - i])) * e[i]
            Cm[r] = acc_l
            eC[r] = magsum + gc[r] * ssum
        for r in range(R + 1):
            a[r] = <real_out>(Cm[r] / (mu0l * fact_ld[r]))
            cerr[r] = 1.01 * (1.01 * eC[r] + fabs(<double>Cm[r]) * d0 / mu0) / (mu0 * fact[r]) \
                + 5.0 * u * fabs(<double>a[r])
            cerr[r] = cerr[r] + hor_g[r] * fabs(<double>a[r])
    step_arr = np.empty(1, dtype=np.asarray(L).dtype)
    cdef real_out[::1] stepv = step_arr
    stepv[0] = two_pi * (<real_out>d) / (<real_out>N)
    with nogil:
        _series_eval(a, cerr, stepv[0], rho, fact_r1, re, im, dz)
        T = (<long double>m) * c * (<long double>d)
        if real_out is double:
            Ti = <long long>rint(<double>T)
        else:
            Ti = <long long>rintl(T)
        Tf = <real_out>(T - <long double>Ti)
        step = two_pi / (<real_out>N)
        Kc = K0
        for k in range(K0):
            re_k = re[k]
            im_k = im[k]
            wre = 1 - re_k
            if real_out is double:
                wabs = hypot(wre, im_k)
            else:
                wabs = <double>hypotl(wre, im_k)
            gap = wabs * (1 - 10 * u) - dz[k]
            if not gap >= 0.25:
                Kc = k
                break
            v = im_k * im_k - re_k * (2 - re_k)
            if real_out is double:
                lw = log1p(v) / 2
                ph = atan2(-im_k, wre)
            else:
                lw = log1pl(v) / 2
                ph = atan2l(-im_k, wre)
            ref = fabs(<double>re_k)
            imf = fabs(<double>im_k)
            lwf = fabs(<double>lw)
            den = 0.99 * gap * gap
            dlw = dz[k] / gap + 0.5 * _gam(4.0, u) * (ref * (2 + ref) + imf * imf) / den + 8 * u * lwf
            absph = fabs(<double>ph)
            dph = (3.141592653589793 / 2) * dz[k] / gap + u * (1 + ref) * imf / (gap * gap) + 8 * u * absph
            kk = (<long long>k * Ti) % N
            if kk < 0:
                kk = kk + N
            lin = -step * (<real_out>kk) - step * (<real_out>k) * Tf
            dlin = 8 * u * (2 * 3.141592653589793) + (2 * 3.141592653589793 / N) * k * (
                2 * uld * fabs(<double>T) + 4 * u * fabs(<double>Tf))
            L[k] = (<real_out>m) * lw
            P[k] = (<real_out>m) * ph + lin
            absL[k] = fabs(<double>L[k])
            absP[k] = fabs(<double>((<real_out>m) * ph)) + fabs(<double>lin)
            dL[k] = 1.01 * m * dlw + 2 * u * absL[k]
            dP[k] = 1.01 * m * dph + 2 * u * fabs(<double>((<real_out>m) * ph)) + 1.01 * dlin
    return Kc, d0
