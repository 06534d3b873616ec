# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled kernel of :mod:`fastpld.dominance`: the balanced (dominated) split of atoms onto a lattice.

The reference is :func:`fastpld.dominance._balanced_split_py` (same operations, same order).
"""
import numpy as np
cimport numpy as cnp
from libc.math cimport expm1, exp

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
                acc += r * a[i] * exp(x)
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
                        acc += f * a[i] * exp(-x)
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
                    acc += f * a[i] * exp(-x)
                    r -= f
                    bal += f * a[i] * (-expm1(-x))
                    break
                bal += c
                acc += r * a[i] * exp(-x)
                i += 1
                r = 1.0
            if acc + acc0 > 0.0:
                started = True
            if bal >= 0.5 * margin * neg:
                out[g] += acc + acc0
            else:  # not balanced: atoms on the point stay, the rest goes to the point below
                out[g] += acc0
                out[g - 1] += acc * exp(-H)
    return out_arr
