# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Native leaf kernels of fastpld: the Poisson-subsampled Gaussian loss (CDF, survival
function, density, partial moments).  Numpy references: :func:`fastpld._kernels.psg_eval`
and :func:`fastpld._kernels.psg_moments`.  The GIL is released around every kernel.

(A module of its own, next to :mod:`fastpld._core`, so that the leaf and the FFT-node
kernels can change independently.)
"""
import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "fastpld_leaf.h" nogil:
    int fpld_psg_eval(const double *t, Py_ssize_t n, double q, double v, double sd, int remove,
                      double *F, double *S, double *pdf)
    int fpld_psg_moments(double l_lo, double l_hi, double q, double v, double sd, int remove,
                         const double *x16, const double *w16, const double *x8, const double *w8, double *out)
    int fpld_psg_moments16(double l_lo, double l_hi, double q, double v, double sd, int remove,
                           const double *x16, const double *w16, double *out)


def psg_eval(const double[::1] t, double q, double v, double sd, bint remove, bint want_pdf=True):
    """``(F, S, pdf)`` at ``t`` (``pdf`` is ``None`` unless ``want_pdf``)."""
    cdef Py_ssize_t n = t.shape[0]
    F = np.empty(n, dtype=np.float64)
    S = np.empty(n, dtype=np.float64)
    P = np.empty(n if want_pdf else 0, dtype=np.float64)
    cdef double[::1] fv = F, sv = S, pv = P
    cdef int status = 0
    if n:
        with nogil:
            status = fpld_psg_eval(&t[0], n, q, v, sd, remove, &fv[0], &sv[0], &pv[0] if want_pdf else NULL)
    if status != 0:
        raise ValueError("psg_eval: invalid argument")
    return F, S, (P if want_pdf else None)


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
