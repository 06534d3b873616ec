# cython: language_level=3
"""Declarations of the native kernels (for cimport by other Cython modules)."""

ctypedef fused real_in:
    double
    long double

ctypedef fused real_out:
    double
    long double

ctypedef fused cplx:
    double complex
    long double complex

from libc.stdint cimport int64_t

cdef extern from "fastpld_kernels.h" nogil:
    int FPLD_OK
    int FPLD_EINVAL
    int FPLD_ENOMASS
    int FPLD_ENOMEM
    void fpld_sincos(double x, double *s, double *c)
    void fpld_sincosl(long double x, long double *s, long double *c)
    int fpld_discounted_rcumsum(const double *p, Py_ssize_t n, double factor, double *out)
    int fpld_query_tables(const double *p, Py_ssize_t n, double factor, double *S1, double *T, double *dgrid)
    int fpld_bucket_masses(const double *F, const double *S, Py_ssize_t n, Py_ssize_t split, double *q,
                           double *total)
    int fpld_normalise_mean(double *q, Py_ssize_t n, double total, double *mean_index)
    int fpld_leaf_roundoff(const double *F, const double *S, const double *dens, Py_ssize_t m, double tau,
                           double c0, double limit, double *widen, double *tv)
    int fpld_pmf_moments(const double *p, Py_ssize_t n, double cen, double *total, double *mean, double *var)
    int fpld_log_mgf_grid(const double *p, Py_ssize_t n, double cen, const double *s, Py_ssize_t ns, double m,
                          double *K, double *logp)
    int fpld_log_binomial_moments(const double *lm, const double *lf, double lq1, double lq,
                                  const int64_t *orders, Py_ssize_t n, double *out, double *terms)
    int fpld_chernoff_quantiles(const double *kp, const double *kn, const double *s, Py_ssize_t n, double c,
                                double lt, double *lo, double *up)
    int fpld_query_delta(const double *p, Py_ssize_t n, double v0, double h, const double *S1, const double *T,
                         double padc, const double *eps, Py_ssize_t m, double *d, double *pad)
    int fpld_delta_bounds(const double *p, Py_ssize_t n, double v0, double h, const double *S1, const double *T,
                          double padc, double es, double ds, double pinf, const double *eps, Py_ssize_t m,
                          double *lo, double *est, double *up)
    int fpld_chernoff_window(const double *const *ps, const Py_ssize_t *ns, const double *cens, const double *ms,
                             Py_ssize_t nin, const double *srel, Py_ssize_t nrel, const double *refine, double w,
                             double *lo, double *hi, double *sp, double *Kp, Py_ssize_t *np_, double *sn, double *Kn,
                             Py_ssize_t *nn_, double *scratch)
    int fpld_binomial_chord(const double *x, Py_ssize_t n, int64_t shift, const double *lm, const double *lf,
                            Py_ssize_t L, double lq1, double lq, double *memo, double *out, double *terms)
    int fpld_gauss_pair_moments(double v, double sd, double q, int remove, const double *x, const double *w,
                                Py_ssize_t ngl, double *mean, double *std)
    int fpld_power_direct(const double *X, Py_ssize_t F, int64_t m, double *P, double *B, double *D, double g,
                          int first, double *work, double rdead, Py_ssize_t *K, Py_ssize_t klow, double rho,
                          const long double *XL)
    void fpld_power_ld(long double xr, long double xi, double rg, int64_t m, long double *yr_out,
                       long double *yi_out, double *b_out)
    int fpld_low_dft(const double *p, Py_ssize_t n, int64_t cen, int64_t N, const double *c, const double *s,
                     double m, double g, double tau, Py_ssize_t kmax, double *X, long double *XL, Py_ssize_t *K)
    int fpld_dft_at(const double *p, Py_ssize_t n, int64_t cen, int64_t N, const double *c, const double *s,
                    int64_t k, double *out)
