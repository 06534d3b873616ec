/* Plain C leaf kernels of fastpld (the Poisson-subsampled Gaussian privacy loss): no Python,
 * an int status (0 = ok, see fastpld_kernels.h).
 *
 * Each kernel mirrors a numpy reference in fastpld._kernels (psg_eval, psg_moments); the
 * results agree to a few units in the last place (same formulas; scipy's ndtr and the C
 * library's erf/erfc may differ by an ulp).
 */
#ifndef FASTPLD_LEAF_H
#define FASTPLD_LEAF_H
#include <stddef.h>
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

/* int g(l)^k dmu(l) over l in [l_lo, l_hi] for k = 1, 2, with g(l) = log(1 - q + q e^l) and
 * mu = (1-q) P + q Q (remove) or P (add), by Gauss-Legendre on equal panels of width <= min(sd, 1)
 * restricted to [-v/2 - 40 sd, v/2 + 40 sd] (outside: mass < e^-800).  x16/w16 and x8/w8 are
 * the 16- and 8-point rules on [-1, 1].  out = {I1, |I1_16 - I1_8| summed over panels,
 * a bound on the round-off of I1 ((npan + 40) u sum |terms|), I2, its disagreement, its
 * round-off bound}. */
int fpld_psg_moments(double l_lo, double l_hi, double q, double v, double sd, int remove,
                     const double *x16, const double *w16, const double *x8, const double *w8, double *out);

/* The 16-point integrals of fpld_psg_moments alone, out = {I1, I2}: the same panels, terms and
 * order of summation (bitwise its out[0] and out[3]), without the 8-point check and the
 * round-off sums (about 2/3 of the work): the planner's mean and standard deviation. */
int fpld_psg_moments16(double l_lo, double l_hi, double q, double v, double sd, int remove,
                       const double *x16, const double *w16, double *out);

#ifdef __cplusplus
}
#endif
#endif
