/* Plain C leaf kernels of fastpld (the Poisson-subsampled Gaussian privacy loss): no Python,
 * an int status (0 = ok, see fastpld_kernels.h).
 *
 * Each kernel mirrors a numpy reference in fastpld._kernels (psg_eval, psg_moments) or
 * fastpld.dominance.leaves (the dominance leaf's rules and integrals); the results agree to a few
 * units in the last place (same formulas; scipy's ndtr and the C library's erf/erfc may differ by
 * an ulp).
 */
#ifndef FASTPLD_LEAF_H
#define FASTPLD_LEAF_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* CDF F, survival function S and density of Y at t[0..n) for the subsampled Gaussian pair
 * (base P = N(-v/2, v), shifted Q = N(v/2, v) for L; sd = sqrt(v)):
 *   remove: Y = log(1 - q + q e^L), L ~ (1-q) P + q Q;   add: Y = -log(1 - q + q e^L), L ~ P.
 * Each normal probability is evaluated once (its smaller tail by erfc, the other side by
 * complement, exactly as scipy.special.ndtr does), so F and S cost one erfc per component.
 * Any of F, S, pdf may be NULL. */
int fpld_psg_eval(const double *t, ptrdiff_t n, double q, double v, double sd, int remove,
                  double *F, double *S, double *pdf);

/* The dominance leaf's panel rules for the same density (fastpld.dominance.rules._panels): per panel
 * [lo_i + c0_i, lo_i + c1_i] the 5-point Gauss-Legendre rule (x5, w5) of int f,
 * int (1 - e^(lo_i - y)) f and int e^(lo_i - y) f; out[6 n] = {a, a_err, n, n_err, b, b_err} with
 * err = R + 16 u I5 (R: fpld_psg_rule_bound's proved truncation bound); eout[3 n] (unless NULL) = {ea, en, eb}, the
 * 5-point terms' sums weighted by their relative error bounds (the computed density and weights against the exact
 * ones at the exact nodes), which the caller adds to the errors once it has chosen its rules. */
int fpld_psg_panels(const double *lo, const double *c0, const double *c1, ptrdiff_t n, double q, double v,
                    double sd, int remove, const double *x5, const double *w5, double *out, double *eout);

/* The 5-point rule's truncation error on the panel [lo + c0, lo + c1] of that density, proved (Cauchy's estimate;
 * numpy reference: fastpld.dominance.rules._psg_truncation): R[3] for int f, int (1 - e^(lo - y)) f and
 * int e^(lo - y) f, infinite where the panel reaches the support's end (fpld_psg_panels charges it).  logq, ylo:
 * log q and log1p(-q). */
void fpld_psg_rule_bound(double lo, double c0, double c1, double q, double v, double sd, double logq, double ylo,
                         int remove, double *R);

/* The same panel rules for the Gaussian loss N(m, s^2) (fastpld.dominance.rules._panels with GaussianLoss's density
 * and error bound; mu_rel its parameter's relative uncertainty, 0 for one mechanism's loss) and its proved truncation
 * bound (fastpld.dominance.rules._gauss_truncation): the same outputs as fpld_psg_panels. */
int fpld_gauss_panels(const double *lo, const double *c0, const double *c1, ptrdiff_t n, double m, double s,
                      double mu_rel, const double *x5, const double *w5, double *out, double *eout);
void fpld_gauss_rule_bound(double lo, double c0, double c1, double m, double s, double *R);

/* The same panel rules for the Poisson-subsampled Laplace loss (fastpld.dominance.rules._panels with SubsampledLoss's
 * density and error bound for the Laplace pair of eps0 e0, 0 < q < 1) and its proved truncation bound
 * (fastpld.dominance.rules._psl_truncation; ylo = log1p(-q)): the same outputs as fpld_psg_panels. */
int fpld_psl_panels(const double *lo, const double *c0, const double *c1, ptrdiff_t n, double e0, double q,
                    int remove, const double *x5, const double *w5, double *out, double *eout);
void fpld_psl_rule_bound(double lo, double c0, double c1, double e0, double q, int remove, double ylo, double *R);

/* The same rules in u = log(distance to a support end) (fastpld.dominance.rules._log_panels): interval i
 * has the end at offset end_i from lo_i and its far edge at distance dfar_i; its panels k = 0, 1, .. are
 * [max(-(k + 1) step_i, ulo_i), -k step_i] in u - log dfar_i, from 0 down to ulo_i <= 0 (at least one); the
 * nodes d = dfar_i e^u, t = end_i + sgn d, y = lo_i + t (sgn = +1: the end below, -1: above) and the terms
 * f(y) d half w, times -expm1(-t) and exp(-t).  out[9 n] = {a5, n5, b5, ea, en, eb, Ra, Rn, Rb} (the 5-point
 * rule's sums, its terms' sums weighted by their relative error bounds, as in fpld_psg_panels, and the sums of the
 * panels' proved truncation bounds, as fpld_psg_rule_bound's in log-distance; the caller forms the error bounds). */
int fpld_psg_logpanels(const double *lo, const double *end, const double *dfar, const double *ulo,
                       const double *steps, ptrdiff_t n, double sgn, double q, double v, double sd, int remove,
                       const double *x5, const double *w5, double *out);

/* The whole of fastpld.dominance.leaves._integrals for the same loss in one call: per cell
 * (lo_i, lo_i + h_i] (h: n widths, or one with h_stride 0) clipped to the support [s_lo, s_hi] (one
 * end finite), the rules of fpld_psg_panels; near a finite support end the rules in log-distance
 * (fpld_psg_logpanels) for the cells whose rules fail, with their depth ladder 5, 10, .., u_depth
 * (fpld_psg_eval's CDF or survival function against 1e-18 of the cell's mass), the tail beyond it
 * charged, and up to u_refine refinements; then the cells that still fail split into 8, 64, 512
 * panels; finally the position charge from the density at every cell end (and next to a support end
 * inside the window).  The same formulas, comparisons and branches as the numpy code, whose tuning
 * constants are the arguments (_NEAR_END, _REFINE_REL, _U_STEP, _U_STEP_NEAR, _U_DEPTH, _U_REFINE,
 * _REL_CAP, _REFINE_MAX_PANELS); tiny: the cells' negligible mass error; cre: the loss's
 * cdf_rel_error.  The results agree with the numpy code's to a few ulps (a refined cell's panels
 * summed in order, numpy's pairwise; libm's exp and log against numpy's in the ladder).
 * out[6 n] = {a, a_err, n, n_err, b, b_err} (each n values).  FPLD_EINVAL: bad arguments (or a
 * log-distance panel count fpld_psg_logpanels refuses); FPLD_ENOMEM: scratch could not be
 * allocated (a few dozen doubles per cell). */
int fpld_psg_integrals(const double *lo, const double *h, ptrdiff_t n, ptrdiff_t h_stride, double tiny, double s_lo,
                       double s_hi, double q, double v, double sd, int remove, double cre, double near_end,
                       double refine_rel, double u_step, double u_step_near, double u_depth, int u_refine,
                       double rel_cap, int64_t max_panels, const double *x5, const double *w5, double anchor,
                       double *out);

/* int g(l)^k dmu(l) over l in [l_lo, l_hi] for k = 1, 2, with g(l) = log(1 - q + q e^l) and
 * mu = (1-q) P + q Q (remove) or P (add), by Gauss-Legendre on equal panels of width <= min(sd, 1)
 * restricted to [-v/2 - 40 sd, v/2 + 40 sd] (outside: mass < e^-800).  x16/w16 and x8/w8 are
 * the 16- and 8-point rules on [-1, 1].  out = {I1, |I1_16 - I1_8| summed over panels,
 * a bound on the round-off of I1 ((npan + 40) u sum |terms|), I2, its disagreement, its
 * round-off bound}. */
int fpld_psg_moments(double l_lo, double l_hi, double q, double v, double sd, int remove,
                     const double *x16, const double *w16, const double *x8, const double *w8, double *out);

/* Truncation window of the subsampled Gaussian loss (fastpld.discretize._psg_window, same
 * arithmetic): the candidates are the images under Y = +-g(L) of the normal quantiles of L moved
 * steps[0..k) standard deviations outward; *a (*b) is the first candidate whose computed CDF
 * (survival function) is at most tail.  z1, z2: scipy's ndtri(tail / (1 - q)) and ndtri(tail / q)
 * (remove; has_hi = tail < q) or z1 = ndtri(tail) (add).  *found = 0 where the numpy version
 * returns None (no upper candidates, a non-finite candidate, none at most tail, or a > b). */
int fpld_psg_window(double q, double v, double sd, int remove, double tail, double z1, double z2, int has_hi,
                    const double *steps, ptrdiff_t k, double *a, double *b, int *found);

/* Out slots of fpld_psg_leaf. */
enum {
    FPLD_LEAF_REF, FPLD_LEAF_MU, FPLD_LEAF_WIDEN, FPLD_LEAF_TV, FPLD_LEAF_MEAN_ERR, FPLD_LEAF_TRUNCATED,
    FPLD_LEAF_TOTAL, FPLD_LEAF_PC3, FPLD_LEAF_PC9, FPLD_LEAF_PC27, FPLD_LEAF_PC81, FPLD_LEAF_CELLS,
    FPLD_LEAF_NOUT
};

/* Algorithm 1 for the subsampled Gaussian loss on the buckets i_lo..i_hi (centres lat + i h) in
 * one call: fastpld.discretize._discretize_continuous after the window, with the coarse cells of
 * _coarse_cells (nlev > 0: the levels (decreasing, already filtered by the caller) and their
 * tail-mass thresholds; nlev = 0: all fine), the same CDF/SF/density evaluations (those of
 * fpld_psg_eval, computed in passes over blocks of points, and kept from the cell search where it
 * evaluated an edge), bucket masses, partial mean (fpld_psg_moments with the 16/8-point
 * rules), normalisation and round-off certificate, in the same order (bitwise the same results).
 * cre: the loss's cdf_rel_error.  probs (n = i_hi - i_lo + 1 entries): the normalised masses.
 * out[FPLD_LEAF_*]: ref (centre of bucket i_lo), mu (mean correction), widen, tv, the bias bound
 * mean_err, the truncated mass, the total mass before normalisation, the summed cell masses per
 * coarse size 3, 9, 27, 81 (unnormalised, as numpy.bincount adds them) and the number of cells.
 * FPLD_ENOMASS: the window holds no mass; FPLD_EINVAL: bad arguments (or a NaN CDF). */
int fpld_psg_leaf(double q, double v, double sd, int remove, double cre, double lat, double h,
                  int64_t i_lo, int64_t i_hi, const int64_t *levels, const double *thr, int nlev,
                  const double *x16, const double *w16, const double *x8, const double *w8,
                  double *probs, double *out);

/* The 16-point integrals of fpld_psg_moments alone, out = {I1, I2}: the same panels, terms and
 * order of summation (bitwise its out[0] and out[3]), without the 8-point check and the
 * round-off sums (about 2/3 of the work): the planner's mean and standard deviation. */
int fpld_psg_moments16(double l_lo, double l_hi, double q, double v, double sd, int remove,
                       const double *x16, const double *w16, double *out);

#ifdef __cplusplus
}
#endif
#endif
