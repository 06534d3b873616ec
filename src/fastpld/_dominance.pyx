# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled kernels of :mod:`fastpld.dominance`: the balanced (dominated) split of atoms onto a lattice,
the dominated re-discretisation's cells, connect-the-dots onto a coarser lattice, and the leaves' masses from
their cells' integrals (:func:`ctd_cells`, :func:`dominated_ratio`, :func:`dominated_cells`).

The references are in :mod:`fastpld.dominance.splits` (``_balanced_split_py``, ``_dominated_prep_py``,
``_ctd_split_py``): the same operations per atom (connect-the-dots sums into each point in another order);
the leaves' in :mod:`fastpld.dominance.leaves` (``_ctd_masses``, ``_dominated_masses``): the same operations
and sums (numpy's pairwise summation repeated), the same bits.
"""
import numpy as np
cimport numpy as cnp
from libc.math cimport expm1, exp, floor, fabs, rint, INFINITY

cnp.import_array()

cdef extern from "fastpld_npops.h" nogil:
    # numpy.maximum, numpy.minimum and numpy.clip on doubles (a NaN argument the result), shared with the C kernels
    double np_maximum(double a, double b)
    double np_minimum(double a, double b)
    double np_clip(double x, double lo, double hi)


cdef void _split(const long long *j, const double *s, const double *a, Py_ssize_t m, double H, Py_ssize_t n,
                 double margin, double *out, bint bounded=False, bint half_first=True) noexcept nogil:
    """The balanced split's pass (:func:`balanced_split`) into ``out[0..n)``, zeroed by the caller; ``bounded``: a
    point repays the atoms left below it from its own interval only; ``half_first``: the first cell takes the lower
    half of its interval."""
    cdef Py_ssize_t g, i = 0
    cdef double r = 1.0, bal, neg, acc, acc0, acc_lo, acc_hi, c, f, x, need
    cdef bint started = False, first
    for g in range(n):
        bal = 0.0
        neg = 0.0
        acc = 0.0
        acc0 = 0.0
        acc_lo = 0.0
        acc_hi = 0.0
        first = half_first and not started
        # atoms below the point (left over from the previous cell): all of them come up here
        while i < m and j[i] < g:
            x = <double>(g - j[i]) * H - s[i]  # point - y > 0
            c = r * a[i] * expm1(x)
            bal -= c
            neg += c
            acc += r * a[i]  # (its A-mass: the merged atom keeps it, below)
            acc_lo += r * a[i]
            i += 1
            r = 1.0
        # atoms at or above the point, in its interval: as much as makes the balance >= margin
        while i < m and j[i] >= g:
            x = <double>(j[i] - g) * H + s[i]  # y - point >= 0
            if x == 0.0:  # on the point: no balance, all of it here
                acc0 += r * a[i]
                i += 1
                r = 1.0
                continue
            need = margin * neg - bal
            if need <= 0.0:
                if first and x <= 0.5 * H * (1 + 1e-9):
                    f = r if x < 0.5 * H * (1 - 1e-9) else 0.5 * r
                    bal += f * a[i] * (-expm1(-x))
                    acc += f * a[i]
                    acc_hi += f * a[i]  # (at or above the point: kept there, should the cell not balance)
                    r -= f
                    if r > 0.0:
                        break
                    i += 1
                    r = 1.0
                    continue
                break
            if bounded and j[i] > g:  # (what its interval cannot repay: not balanced, below)
                break
            c = r * a[i] * (-expm1(-x))
            if c > need:
                f = need / (a[i] * (-expm1(-x)))
                acc += f * a[i]
                acc_hi += f * a[i]
                r -= f
                bal += f * a[i] * (-expm1(-x))
                break
            bal += c
            acc += r * a[i]
            acc_hi += r * a[i]
            i += 1
            r = 1.0
        if acc + acc0 > 0.0:
            started = True
        if bal >= 0.5 * margin * neg:
            out[g] += acc + acc0
        else:
            # not balanced (the top end: no atoms left): the atoms at or above the point stay -- each has a loss
            # >= the point's, so their merge has too --, those left below go to the point below (each >= it)
            out[g] += acc0 + acc_hi
            if acc_lo > 0.0:
                out[g - 1] += acc_lo


def balanced_split(const long long[::1] j, const double[::1] s, const double[::1] a, double H,
                   Py_ssize_t n, double margin, bint bounded=False, bint half_first=True):
    """See :func:`fastpld.dominance.splits._balanced_split_py`."""
    cdef Py_ssize_t m = a.shape[0]
    if j.shape[0] < m or s.shape[0] < m or n < 0:
        raise ValueError("balanced_split: invalid argument")
    out_arr = np.zeros(n, dtype=np.float64)
    cdef double[::1] out = out_arr
    if n == 0:
        return out_arr
    with nogil:
        _split(&j[0] if m else NULL, &s[0] if m else NULL, &a[0] if m else NULL, m, H, n, margin, &out[0], bounded,
               half_first)
    return out_arr


cdef double _U = 1.1102230246251565e-16  # unit roundoff of float64


def ctd_split(const double[::1] p, double offset, double hin, double mesh):
    """Connect-the-dots of the atoms ``p_i`` at ``offset + hin i`` onto ``mesh * Z``: the masses per lattice
    point from ``j0`` on; returns ``(out, j0)``.  Reference: :func:`fastpld.dominance.splits._ctd_split_py`
    (the same operations per atom; the sums into each point in another order, within the rounding the
    caller charges)."""
    cdef Py_ssize_t n = p.shape[0], i, jj
    cdef double den = -expm1(-mesh), t, slack, theta, w, t0, tl, pos
    t0 = (offset + hin * 0.0) / mesh
    tl = (offset + hin * <double>(n - 1)) / mesh
    cdef long long j0 = <long long>floor(t0)
    cdef Py_ssize_t m = <Py_ssize_t>(<long long>floor(tl) - j0 + 2)
    out_arr = np.zeros(m, dtype=np.float64)
    cdef double[::1] out = out_arr
    with nogil:
        for i in range(n):
            if p[i] == 0.0:
                continue
            pos = fabs(offset) + hin * <double>i
            t = (offset + hin * <double>i) / mesh
            slack = 8 * _U * (pos / mesh + fabs(t) + 2)
            jj = <Py_ssize_t>(<long long>floor(t) - j0)
            theta = t - floor(t)
            if theta < 0.0:
                theta = 0.0
            elif theta > 1.0:
                theta = 1.0
            # share sent up, raised by its rounding and by the position error of t (pessimistic)
            w = -expm1(-theta * mesh) / den
            w = w + 8 * _U + slack * mesh / den
            if w > 1.0:
                w = 1.0
            out[jj] += p[i] * (1 - w)
            out[jj + 1] += p[i] * w
    return out_arr, j0


def ctd_split_exact(const double[::1] p, long long n0, long long R, double hin, double mesh):
    """:func:`ctd_split` on an exactly nested lattice: atom ``i`` at exactly ``(n0 + i) hin``, the target mesh
    ``mesh = R hin`` (``R <= 4096``); returns ``(out, j0)``.  An atom's offset in its cell is exactly ``r hin``
    (``r = (n0 + i) mod R``), so its share sent up is one of ``R`` values, each computed once: 0 for ``r = 0`` (an
    atom on a lattice point stays on it), else ``-expm1(-r hin) / den`` raised by ``10 u`` (the product ``r hin``,
    ``expm1`` and the division: a few roundings of a share at most 1; no position error to cover).  Reference:
    :func:`fastpld.dominance.splits._ctd_split_exact_py` (the same operations; the sums into each point in index
    order, as :func:`ctd_split`'s)."""
    cdef Py_ssize_t n = p.shape[0], i, jj
    cdef long long q, jf, r, j0, jl
    cdef double den = -expm1(-mesh), w
    if R < 1 or R > 4096:
        raise ValueError("ctd_split_exact: R must lie in [1, 4096]")
    ws_arr = np.empty(R, dtype=np.float64)
    cdef double[::1] ws = ws_arr
    ws[0] = 0.0  # (an atom on a lattice point stays there: its share is exactly 0, no rounding to cover)
    for r in range(1, R):
        w = -expm1(-(<double>r * hin)) / den + 10 * _U
        ws[r] = w if w < 1.0 else 1.0
    j0 = n0 // R if n0 >= 0 else -((-n0 + R - 1) // R)  # (floor division)
    q = n0 + n - 1
    jl = q // R if q >= 0 else -((-q + R - 1) // R)
    out_arr = np.zeros(<Py_ssize_t>(jl - j0 + 2), dtype=np.float64)
    cdef double[::1] out = out_arr
    with nogil:
        q = n0
        jf = j0
        r = n0 - j0 * R
        for i in range(n):
            if p[i] != 0.0:
                jj = <Py_ssize_t>(jf - j0)
                w = ws[r]
                out[jj] += p[i] * (1 - w)
                out[jj + 1] += p[i] * w
            r += 1
            if r == R:
                r = 0
                jf += 1
    return out_arr, j0


def dominated_prep(const double[::1] p, double offset, double hin, double mesh):
    """The atoms' lattice cells and offsets for the balanced split onto ``mesh * Z``: ``(j - j0, s, tv, j0, m)``.
    Reference: :func:`fastpld.dominance.splits._dominated_prep_py` (the same operations per atom)."""
    cdef Py_ssize_t n = p.shape[0], i
    j_arr = np.empty(n, dtype=np.int64)
    s_arr = np.empty(n, dtype=np.float64)
    cdef long long[::1] j = j_arr
    cdef double[::1] s = s_arr
    cdef double t, slack, r, tv = 0.0, x
    cdef long long jf, j0 = 0
    with nogil:
        for i in range(n):
            t = (offset + hin * <double>i) / mesh
            slack = 8 * _U * ((fabs(offset) + hin * <double>i) / mesh + fabs(t) + 2)
            r = rint(t)
            if fabs(t - r) <= slack:  # within rounding of a lattice point: on it (charged p 2 slack mesh)
                tv += p[i] * slack
                jf = <long long>floor(r)
                s[i] = 0.0
            else:
                t = t - slack
                jf = <long long>floor(t)
                x = (t - <double>jf) * mesh
                s[i] = 0.0 if x < 0.0 else (mesh if x > mesh else x)
            j[i] = jf
        if n > 0:
            j0 = j[0]
        for i in range(n):
            j[i] -= j0
    m = (j_arr[n - 1] + 2) if n > 0 else 2
    return j_arr, s_arr, 2.0 * tv * mesh, j0, int(m)


def dominated_prep_exact(Py_ssize_t n, long long n0, long long R, double hin):
    """:func:`dominated_prep` on an exactly nested lattice: atom ``i`` at exactly ``(n0 + i) hin``, the target mesh
    ``R hin``.  Reference: :func:`fastpld.dominance.splits._dominated_prep_exact_py` (the same operations)."""
    j_arr = np.empty(n, dtype=np.int64)
    s_arr = np.empty(n, dtype=np.float64)
    cdef long long[::1] j = j_arr
    cdef double[::1] s = s_arr
    cdef Py_ssize_t i
    cdef long long q, jf, r, j0 = 0
    if R < 1:
        raise ValueError("dominated_prep_exact: R must be positive")
    with nogil:
        for i in range(n):
            q = n0 + i
            jf = q // R if q >= 0 else -((-q + R - 1) // R)  # (floor division)
            r = q - jf * R
            j[i] = jf
            # (the offset within the cell rounded down: two roundings, each at most u, against 1 - 2u)
            s[i] = (<double>r * hin) * (1 - 2 * _U)
        if n > 0:
            j0 = j[0]
        for i in range(n):
            j[i] -= j0
    m = (j_arr[n - 1] + 2) if n > 0 else 2
    return j_arr, s_arr, 0.0, j0, int(m)


# ---- the dominance leaves' bodies (fastpld.dominance.leaves: ctd_leaf, dominated_leaf) for a loss without atoms ----

cdef double _pairwise(const double *a, Py_ssize_t n) noexcept nogil:
    """numpy's pairwise summation (``DOUBLE_pairwise_sum``: blocks of at most 128 with eight accumulators, halves
    split at a multiple of eight), so that the leaves' totals are bit for bit those of ``np.sum``."""
    cdef Py_ssize_t i, n2
    cdef double res, r0, r1, r2, r3, r4, r5, r6, r7
    if n < 8:
        res = -0.0
        for i in range(n):
            res += a[i]
        return res
    if n <= 128:
        r0 = a[0]
        r1 = a[1]
        r2 = a[2]
        r3 = a[3]
        r4 = a[4]
        r5 = a[5]
        r6 = a[6]
        r7 = a[7]
        i = 8
        while i < n - (n % 8):
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, n2) + _pairwise(a + n2, n - n2)


cdef inline double _np_sum(const double *a, Py_ssize_t n) noexcept nogil:
    # (np.add.reduce starts from its identity, 0.0: a sum of negative zeros is +0.0)
    return 0.0 + _pairwise(a, n)


cdef bint _cells_ok(const long long *starts, const long long *sizes, Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    """Cells of lattice intervals in order, disjoint, within the ``n`` points (what the leaves' writes rely on)."""
    cdef Py_ssize_t k
    cdef long long end = 0
    for k in range(m):
        if sizes[k] < 1 or starts[k] < end:
            return False
        end = starts[k] + sizes[k]
        if end > n - 1:
            return False
    return True


def ctd_cells(const double[::1] a, const double[::1] a_err, const double[::1] nu, const double[::1] nu_err,
              const long long[::1] starts, const long long[::1] sizes, Py_ssize_t n, const double[::1] den,
              double u, double rel_cap, double negligible):
    """The connect-the-dots leaf's masses from its cells' integrals (``fastpld.dominance.leaves.ctd_leaf`` without
    atoms; the numpy code there is the reference, the same operations, comparisons and numpy's pairwise sums, so
    the same bits): returns ``(probs, total, rel, err)``, ``probs`` the ``n`` lattice points' masses divided by
    their sum ``total`` where it is positive.

    Cell ``k`` (``sizes[k]`` intervals from point ``starts[k]``, in order and disjoint) sends the share
    ``up = min((nu + nu_err) / den[sizes[k]] (1 + 16 u), a)`` of its mass ``a`` to its upper end and the rest to
    its lower end; ``den[m] = 1 - e^(-m h)`` (the caller's, as numpy's and libm's expm1 round them).  The masses'
    error bounds ``a_err``: ``rel`` the largest relative one at most ``rel_cap`` among those above
    ``negligible`` (0 if none), ``err`` the sum of the others."""
    cdef Py_ssize_t m = a.shape[0], k, nd = den.shape[0], cnt = 0
    cdef double up, r, rel = 0.0, err, total, fac = 1 + 16 * u
    cdef bint have = False, bad = False
    if (a_err.shape[0] != m or nu.shape[0] != m or nu_err.shape[0] != m or starts.shape[0] != m
            or sizes.shape[0] != m or n < 1):
        raise ValueError("ctd_cells: invalid argument")
    p_arr = np.zeros(n, dtype=np.float64)
    up_arr = np.empty(m, dtype=np.float64)
    rest_arr = np.empty(m, dtype=np.float64)
    cdef double[::1] p = p_arr, ups = up_arr, rest = rest_arr
    with nogil:
        if not _cells_ok(&starts[0] if m else NULL, &sizes[0] if m else NULL, m, n):
            bad = True
        else:
            for k in range(m):
                if sizes[k] >= nd:
                    bad = True
                    break
        if not bad:
            # (the lower shares first, then the upper ones, as numpy's two fancy-indexed additions)
            for k in range(m):
                up = np_minimum((nu[k] + nu_err[k]) / den[sizes[k]] * fac, a[k])
                ups[k] = up
                p[starts[k]] += a[k] - up
            for k in range(m):
                p[starts[k] + sizes[k]] += ups[k]
            # relative where at most rel_cap (and not negligible), total variation elsewhere
            for k in range(m):
                r = a_err[k] / a[k] if a[k] > 0 else INFINITY
                if r <= rel_cap and a_err[k] > negligible:
                    if not have or r > rel:
                        rel = r
                    have = True
                else:
                    rest[cnt] = a_err[k]
                    cnt += 1
            err = _np_sum(&rest[0] if cnt else NULL, cnt)
            total = _np_sum(&p[0], n)
            if total > 0:  # (the caller refuses the others)
                for k in range(n):
                    p[k] = p[k] / total
    if bad:
        raise ValueError("ctd_cells: cells out of order, overlapping, outside the lattice or of a size without den")
    return p_arr, total, rel, err


def dominated_ratio(const double[::1] a5, const double[::1] a_err, const double[::1] b5, const double[::1] b_err):
    """The dominated leaf's masses per cell: ``(a, b, ratio)`` with ``a = max(a5 - a_err, 0)`` (rounded down),
    ``b = b5 + b_err`` (rounded up) and ``ratio = a / b`` where both are positive, else 1 (the caller takes numpy's
    log of it, then :func:`dominated_cells`)."""
    cdef Py_ssize_t m = a5.shape[0], k
    if a_err.shape[0] != m or b5.shape[0] != m or b_err.shape[0] != m:
        raise ValueError("dominated_ratio: invalid argument")
    a_arr = np.empty(m, dtype=np.float64)
    b_arr = np.empty(m, dtype=np.float64)
    r_arr = np.empty(m, dtype=np.float64)
    cdef double[::1] a = a_arr, b = b_arr, ratio = r_arr
    with nogil:
        for k in range(m):
            a[k] = np_maximum(a5[k] - a_err[k], 0.0)
            b[k] = b5[k] + b_err[k]
            ratio[k] = a[k] / b[k] if (a[k] > 0 and b[k] > 0) else 1.0
    return a_arr, b_arr, r_arr


def dominated_cells(const double[::1] a, const double[::1] b, const double[::1] log_ratio,
                    const long long[::1] starts, const long long[::1] sizes, Py_ssize_t n, double h, double u,
                    double margin, double lower, bint bounded=False):
    """The dominated leaf's masses from :func:`dominated_ratio` and numpy's ``log_ratio = log(ratio)``
    (``fastpld.dominance.leaves.dominated_leaf`` without atoms; the numpy code there is the reference, the same
    operations and numpy's pairwise sum, so the same bits): returns ``(probs, kept)``, ``probs`` the ``n`` lattice
    points' masses divided by their sum ``kept`` where it is positive.

    Each cell with ``a, b > 0`` is one atom of mass ``a`` at offset
    ``s = clip(log_ratio - 4 u - 8 u |log_ratio|, 0, h sizes)`` from its start; in a cell of several intervals, in
    the interval ``k = min(floor(s / h), sizes - 1)`` of it,
    its offset from that interval's start lowered by its rounding.  The atoms (in order: the cells are) go to the
    lattice by the balanced split (:func:`balanced_split`, ``margin``), whose masses are lowered by the factor
    ``lower`` (``bounded``: each point's debt repaid from its own interval only)."""
    cdef Py_ssize_t m = a.shape[0], k, c = 0
    cdef long long jj
    cdef double s, kk, sb, kept, cap = h * (1 - 4 * u), low = 4 * u
    cdef bint bad = False
    if b.shape[0] != m or log_ratio.shape[0] != m or starts.shape[0] != m or sizes.shape[0] != m or n < 1:
        raise ValueError("dominated_cells: invalid argument")
    j_arr = np.empty(m, dtype=np.int64)
    s_arr = np.empty(m, dtype=np.float64)
    w_arr = np.empty(m, dtype=np.float64)
    out_arr = np.zeros(n, dtype=np.float64)
    cdef long long[::1] js = j_arr
    cdef double[::1] ss = s_arr, ws = w_arr, out = out_arr
    with nogil:
        if not _cells_ok(&starts[0] if m else NULL, &sizes[0] if m else NULL, m, n):
            bad = True
        else:
            for k in range(m):
                if not (a[k] > 0 and b[k] > 0):
                    continue
                s = np_clip(log_ratio[k] - low - 8 * u * fabs(log_ratio[k]), 0.0, h * <double>sizes[k])
                jj = starts[k]
                if sizes[k] > 1:
                    kk = np_minimum(floor(s / h), <double>(sizes[k] - 1))
                    sb = s - kk * h
                    s = np_clip(sb - low * (s + h), 0.0, cap)
                    jj += <long long>kk
                js[c] = jj
                ss[c] = s
                ws[c] = a[k]
                c += 1
            # (each atom inside its cell and the cells in order: sorted by point, then offset)
            _split(&js[0] if c else NULL, &ss[0] if c else NULL, &ws[0] if c else NULL, c, h, n, margin, &out[0],
                   bounded)
            for k in range(n):
                out[k] = out[k] * lower
            kept = _np_sum(&out[0], n)
            if kept > 0:  # (the caller refuses the others)
                for k in range(n):
                    out[k] = out[k] / kept
    if bad:
        raise ValueError("dominated_cells: cells out of order, overlapping or outside the lattice")
    return out_arr, kept


def contract_lattice(const double[::1] x, const double[::1] a, const double[::1] b, bint lift):
    """See :func:`fastpld.allocation._contract_py` (the same operations in the same order)."""
    cdef Py_ssize_t n = a.shape[0]
    if x.shape[0] != n + 1 or b.shape[0] != n:
        raise ValueError("contract_lattice: invalid argument")
    kend_arr = np.full(n + 1, -1, dtype=np.int64)
    phi_arr = np.zeros(n + 1, dtype=np.float64)
    cdef long long[::1] kend = kend_arr
    cdef double[::1] phi = phi_arr
    cdef Py_ssize_t j = 1, k = 0
    cdef double bal = 0.0, p = 0.0, T, tb, tk, need, full
    cdef double sg = 1.0 if lift else -1.0  # (the direction of every rounding margin)
    with nogil:
        while k < n and j <= n:
            T = x[j] * (1 - sg * 2 * _U)
            tb = T * b[k]
            tk = (a[k] - tb) + sg * 2 * _U * (fabs(a[k]) + tb)
            if k < j:  # below the target: the rest of it joins the group
                bal = bal + (1.0 - p) * tk
                bal = bal + sg * 2 * _U * fabs(bal)
                p = 0.0
                k += 1
                continue
            if lift:
                if bal > 0.0 or tk > 0.0:
                    full = bal + (1.0 - p) * tk
                    full = full + 2 * _U * fabs(full)
                    if bal > 0.0 or full > 0.0:
                        need = 0.0
                        if bal < 0.0:
                            need = (-bal / tk) * (1 - 4 * _U) - 2 * _U
                            if need < 0.0:
                                need = 0.0
                        p = p + need
                        if p > 1.0:
                            p = 1.0
                        kend[j] = k
                        phi[j] = p
                        j = k + 1
                        bal = 0.0
                        continue
            else:
                if bal >= 0.0:  # balanced: the group closes before what is left of bucket k
                    kend[j] = k
                    phi[j] = p
                    j = k + 1
                    bal = 0.0
                    continue
                if tk > 0.0:
                    need = (-bal / tk) * (1 + 4 * _U) + 2 * _U
                    if p + need < 1.0:
                        p = p + need
                        kend[j] = k
                        phi[j] = p
                        j = k + 1
                        bal = 0.0
                        continue
            bal = bal + (1.0 - p) * tk
            bal = bal + sg * 2 * _U * fabs(bal)
            p = 0.0
            k += 1
    return kend_arr, phi_arr, j
