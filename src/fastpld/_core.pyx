# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native kernels (typed memoryviews, GIL released).

Issue 3 grows this module; it starts with the discounted reverse cumulative
sum behind every delta/epsilon query.
"""
import numpy as np
cimport numpy as cnp

cdef extern from "fastpld_kernels.h" nogil:
    int fpld_discounted_rcumsum(const double *p, Py_ssize_t n, double factor, double *out)

cnp.import_array()


def discounted_rcumsum(const double[::1] p, double factor):
    """``out[j] = sum_{i >= j} p[i] * factor**(i - j)`` computed right to left."""
    cdef Py_ssize_t n = p.shape[0]
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] o = out
    cdef int status
    if n == 0:
        return out
    with nogil:
        status = fpld_discounted_rcumsum(&p[0], n, factor, &o[0])
    if status != 0:
        raise ValueError("discounted_rcumsum: factor must be in [0, 1]")
    return out
