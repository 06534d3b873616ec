/* Plain C kernels of fastpld: no Python, an int status (0 = ok).
 *
 * Each kernel mirrors a numpy reference in fastpld (named in its comment);
 * the results agree up to the order of floating-point summation.  Kernels
 * that must work in both double and long double live in _core.pyx as fused
 * Cython functions; the ones here are double only.
 */
#ifndef FASTPLD_KERNELS_H
#define FASTPLD_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* sin and cos of one angle from one argument reduction: glibc's sincos / sincosl compute exactly what
 * sin and cos (sinl and cosl) return, each of which reduces the argument on its own (for long doubles
 * past pi/4 a multi-precision reduction); other C libraries take the two calls. */
#include <math.h>
#if defined(__GLIBC__)
extern void sincos(double x, double *s, double *c);
extern void sincosl(long double x, long double *s, long double *c);
#endif
static inline void fpld_sincos(double x, double *s, double *c) {
#if defined(__GLIBC__)
    sincos(x, s, c);
#else
    *s = sin(x);
    *c = cos(x);
#endif
}
static inline void fpld_sincosl(long double x, long double *s, long double *c) {
#if defined(__GLIBC__)
    sincosl(x, s, c);
#else
    *s = sinl(x);
    *c = cosl(x);
#endif
}

/* y = x^m in long double and b = rg^m in double, by the same binary powering (textbook complex products): the long
 * double node's power (_core.power_direct_ld) and the float64 node's summed low frequencies (fpld_power_direct) */
static inline void fpld_power_ld(long double xr, long double xi, double rg, int64_t m, long double *yr_out,
                                 long double *yi_out, double *b_out)
{
    long double yr = 0.0L, yi = 0.0L, t;
    double b = 1.0;
    int have = 0;
    for (int64_t e = m;;) {
        if (e & 1) {
            if (!have) {
                yr = xr;
                yi = xi;
                b = rg;
                have = 1;
            } else {
                t = yr * xr - yi * xi;
                yi = yr * xi + yi * xr;
                yr = t;
                b = b * rg;
            }
        }
        e >>= 1;
        if (!e)
            break;
        t = xr * xr - xi * xi;
        xi = 2 * xr * xi;
        xr = t;
        rg = rg * rg;
    }
    *yr_out = yr;
    *yi_out = yi;
    *b_out = b;
}

#define FPLD_OK 0
#define FPLD_EINVAL 1   /* an argument is out of its domain */
#define FPLD_ENOMASS 2  /* no positive mass where some is required */
#define FPLD_ENOMEM 3   /* a work buffer could not be allocated */

/* out[j] = sum_{i>=j} p[i] factor^(i-j)  (curve._Query) */
int fpld_discounted_rcumsum(const double *p, ptrdiff_t n, double factor, double *out);

/* Query tables of curve._Query: S1[j] = sum_{i>=j} p_i, T[j] = sum_{i>=j} p_i f^(i-j)
 * (both length n+1, last entry 0) and dgrid[j] = max(S1[j+1] - f T[j+1], 0) (length n). */
int fpld_query_tables(const double *p, ptrdiff_t n, double factor, double *S1, double *T, double *dgrid);

/* Bucket masses of Algorithm 1 (discretize._discretize_continuous) from CDF F and
 * survival function S at the n+1 bucket edges: CDF differences below `split`,
 * survival differences above it, the straddling bucket by complement; clipped at 0.
 * Writes the n masses to q and their sum to *total. */
int fpld_bucket_masses(const double *F, const double *S, ptrdiff_t n, ptrdiff_t split, double *q, double *total);

/* q /= total in place; *mean_index = sum_i i q_i (after normalisation). */
int fpld_normalise_mean(double *q, ptrdiff_t n, double total, double *mean_index);

/* Round-off certificate of the leaf (discretize._discretize_continuous): per edge
 * dev = tau min(F, S) + c0, move = dev / (dens / 2) (inf where dens <= 0);
 * edges with move <= limit widen the coupling range by 2 max(move), the others
 * are charged dev to total variation. */
int fpld_leaf_roundoff(const double *F, const double *S, const double *dens, ptrdiff_t m,
                       double tau, double c0, double limit, double *widen, double *tv);

/* Weighted moments of a PMF on indices i - cen: total, mean and variance (compose._chernoff_window). */
int fpld_pmf_moments(const double *p, ptrdiff_t n, double cen, double *total, double *mean, double *var);

/* K[j] += m log sum_i p_i e^(s_j (i - cen)) for j < ns, by a max-shifted log-sum-exp
 * (compose._chernoff_window).  logp: scratch of length n. */
int fpld_log_mgf_grid(const double *p, ptrdiff_t n, double cen, const double *s, ptrdiff_t ns,
                      double m, double *K, double *logp);

/* Binomial Renyi moments of a Poisson-subsampled pair (mechanisms._log_binomial_moment):
 * out[r] = log sum_{j=0}^{a} exp(lf[a+1] - lf[j+1] - lf[a-j+1] + (a-j) lq1 + j lq + lm[j]), a = orders[r],
 * by a max-shifted log-sum-exp; the (a-j) lq1 term is 0 for j = a (also when lq1 = -inf, q = 1).
 * lm: log E_P[e^(j L)] for j <= max(orders); lf[i] = log((i-1)!) for i <= max(orders) + 1;
 * terms: scratch of length max(orders) + 1.  An infinite largest term gives +inf (an upper bound). */
int fpld_log_binomial_moments(const double *lm, const double *lf, double lq1, double lq,
                              const int64_t *orders, ptrdiff_t n, double *out, double *terms);

/* Chord upper bound of the binomial moments at real orders (mechanisms.SubsampledLoss.log_mgf:
 * _integer_chord over _K_binom): for x[i] >= 0, a = floor(x[i]) + shift, w = x[i] - floor(x[i]),
 * out[i] = Kb(a) if w == 0 else (1 - w) Kb(a) + w Kb(a + 1), with Kb the sums of
 * fpld_log_binomial_moments.  memo (L entries, NaN = not computed) caches Kb per order; lm, lf
 * have L and L + 1 entries; FPLD_EINVAL if an order reaches L.  terms: scratch of L doubles. */
int fpld_binomial_chord(const double *x, ptrdiff_t n, int64_t shift, const double *lm, const double *lf,
                        ptrdiff_t L, double lq1, double lq, double *memo, double *out, double *terms);

/* Moments of a Poisson-subsampled Gaussian loss Y = +-g(L), g(l) = log(1 - q + q e^l)
 * (SubsampledLoss._pair_moments with _GaussPair.expect, for the native leaf's truncation ladder):
 * L ~ N(-+v/2, v) under P/Q (sd = sqrt(v)); each expectation by ngl-point Gauss-Legendre (nodes
 * x, weights w) on n = ceil(80 / min(1, 1/sd)) equal panels of z in [-40, 40]; remove (w ~ M =
 * (1-q) P + q Q) or add (w ~ P, Y = -g(L)).  Writes the mean and the standard deviation. */
int fpld_gauss_pair_moments(double v, double sd, double q, int remove, const double *x, const double *w,
                            ptrdiff_t ngl, double *mean, double *std);

/* Chernoff quantiles of the planner (compose._chernoff_quantiles / _est_window): with kp, kn
 * the log-MGF grids at +s and -s, *up = min_i (c kp[i] - lt) / s[i] and
 * *lo = -min_i (c kn[i] - lt) / s[i] (+inf entries drop out; a NaN entry makes that side NaN,
 * as numpy's min does).  Same operations in the same order as the numpy reference. */
int fpld_chernoff_quantiles(const double *kp, const double *kn, const double *s, ptrdiff_t n, double c,
                            double lt, double *lo, double *up);

/* curve._Query.delta at m points: d(eps[i]) = sum_{v_j > eps[i]} p_j (1 - e^(eps[i] - v_j)) into d[i] and its
 * round-off pad into pad[i] (the same operations in the same order; the grid and tables as for
 * fpld_delta_bounds, which evaluates the same function at eps -+ es). */
int fpld_query_delta(const double *p, ptrdiff_t n, double v0, double h, const double *S1, const double *T,
                     double padc, const double *eps, ptrdiff_t m, double *d, double *pad);

/* Certified delta bounds of one direction at m query points (curve.PrivacyLossDistribution.delta
 * with curve._Query.delta inlined; same operations in the same order).  The grid PMF p (n > 0
 * entries at v0 + j h) has the tables S1, T of fpld_query_tables and round-off pad coefficient
 * padc; es, ds: the eps and delta errors spent; pinf: the mass at infinity.  Writes the lower
 * bound, estimate and upper bound at eps[i] to lo[i], est[i], up[i]. */
int fpld_delta_bounds(const double *p, ptrdiff_t n, double v0, double h, const double *S1, const double *T,
                      double padc, double es, double ds, double pinf, const double *eps, ptrdiff_t m,
                      double *lo, double *est, double *up);

/* Chernoff window of a node's linear index sum (compose._chernoff_window, native path; the same
 * kernel calls, search and arithmetic).  Inputs c < nin: PMF ps[c] (ns[c] entries) centred at
 * cens[c], taken ms[c] times.  srel (8 <= nrel <= 64 points, geometric) is the coarse s-grid in units
 * of 1/sd, refine (8 ratios, 4 below 1 then 4 above) the refinement; w the tail per side.
 * Writes the window lo..hi (*lo = floor(l*) + 1, *hi = ceil(u*) - 1) and the evaluated points:
 * sp/Kp (*np_ of them) for s > 0 and sn/Kn (*nn_) for s < 0, each of capacity nrel + 8.
 * scratch: 3 (nrel + 8) + sum(ns) doubles (at most 64 inputs).  FPLD_ENOMASS if an input has no mass,
 * FPLD_EINVAL if the window is not finite. */
int fpld_chernoff_window(const double *const *ps, const ptrdiff_t *ns, const double *cens, const double *ms,
                         ptrdiff_t nin, const double *srel, ptrdiff_t nrel, const double *refine, double w,
                         double *lo, double *hi, double *sp, double *Kp, ptrdiff_t *np_, double *sn, double *Kn,
                         ptrdiff_t *nn_, double *scratch);

/* P (*)= X^m, B (*)= (|X| + g)^m, D (+)= rho_k m / (|X| + g) for a float64 node's direct powers
 * (compose._direct_power) on the frequencies [0, *K), cut after the last one with |X| >= rdead if
 * rdead > 0; rho_k = rho below klow (frequencies whose error bound is rho g: fpld_low_dft's), else 1;
 * X, P interleaved complex of length F; work >= 6 F doubles.  XL (or NULL): fpld_low_dft's long double values
 * below klow, whose powers are then taken in long double (binary powering, textbook products) and multiplied into
 * P in long double, rounded once per input. */
int fpld_power_direct(const double *X, ptrdiff_t F, int64_t m, double *P, double *B, double *D, double g,
                      int first, double *work, double rdead, ptrdiff_t *K, ptrdiff_t klow, double rho,
                      const long double *XL);

/* The low frequencies of a float64 node's input spectrum summed directly (fastpld._lowdft; numpy reference
 * fastpld._reference.low_dft): X (interleaved re, im, the forward FFT's output of p placed at (j - cen) mod N)
 * is overwritten at k < *K by sum_j p_j (c_r - i s_r), r = k (j - cen) mod N, the products and sums in long double
 * (blocks of 64 terms, then the blocks' sums), from the float64 tables c, s of cos, sin(2 pi r / N); the sums also
 * into XL (interleaved, 2 kmax long doubles; NULL: not kept) before their rounding.  *K: the first
 * k >= 1 where m g (|X_k| + g)^(m - 1) <= tau (the FFT's error there, amplified by the power: small enough),
 * at most kmax and N / 2 + 1.  Error bound: fastpld._lowdft.low_dft_error. */
int fpld_low_dft(const double *p, ptrdiff_t n, int64_t cen, int64_t N, const double *c, const double *s, double m,
                 double g, double tau, ptrdiff_t kmax, double *X, long double *XL, ptrdiff_t *K);

/* One value of that spectrum in float64, sum_j p_j (c_r - i s_r) with r = k (j - cen) mod N over the non-zero p_j, into
 * out[0], out[1] (fastpld._lowdft.plan's check of the frequencies it would sum; numpy reference
 * fastpld._reference.dft_at). */
int fpld_dft_at(const double *p, ptrdiff_t n, int64_t cen, int64_t N, const double *c, const double *s, int64_t k,
                double *out);

#ifdef __cplusplus
}
#endif
#endif
