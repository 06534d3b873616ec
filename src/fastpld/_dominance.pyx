# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled kernels of :mod:`fastpld.dominance`: the balanced (dominated) split of atoms onto a lattice,
the dominated re-discretisation's cells, and connect-the-dots onto a coarser lattice.

The references are in :mod:`fastpld.dominance.splits` (``_balanced_split_py``, ``_dominated_prep_py``,
``_ctd_split_py``): the same operations per atom (connect-the-dots sums into each point in another order).
"""
import numpy as np
cimport numpy as cnp
from libc.math cimport expm1, exp, floor, fabs, rint

cnp.import_array()


def balanced_split(const long long[::1] j, const double[::1] s, const double[::1] a, double H,
                   Py_ssize_t n, double margin):
    """See :func:`fastpld.dominance._balanced_split_py`."""
    cdef Py_ssize_t m = a.shape[0]
    out_arr = np.zeros(n, dtype=np.float64)
    cdef double[::1] out = out_arr
    cdef Py_ssize_t g, i = 0
    cdef double r = 1.0, bal, neg, acc, acc0, c, f, x, need
    cdef bint started = False, first
    with nogil:
        for g in range(n):
            bal = 0.0
            neg = 0.0
            acc = 0.0
            acc0 = 0.0
            first = not started
            # atoms below the point (left over from the previous cell): all of them come up here
            while i < m and j[i] < g:
                x = <double>(g - j[i]) * H - s[i]  # point - y > 0
                c = r * a[i] * expm1(x)
                bal -= c
                neg += c
                acc += r * a[i]  # (its A-mass: the merged atom keeps it, below)
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
                        r -= f
                        if r > 0.0:
                            break
                        i += 1
                        r = 1.0
                        continue
                    break
                c = r * a[i] * (-expm1(-x))
                if c > need:
                    f = need / (a[i] * (-expm1(-x)))
                    acc += f * a[i]
                    r -= f
                    bal += f * a[i] * (-expm1(-x))
                    break
                bal += c
                acc += r * a[i]
                i += 1
                r = 1.0
            if acc + acc0 > 0.0:
                started = True
            if bal >= 0.5 * margin * neg:
                out[g] += acc + acc0
            else:  # not balanced: atoms on the point stay, the rest goes to the point below
                out[g] += acc0
                out[g - 1] += acc
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
