/* Leaf kernels (see fastpld_leaf.h); numpy references: fastpld._kernels.psg_eval / psg_moments. */
#include <math.h>
#include "fastpld_kernels.h"
#include "fastpld_leaf.h"

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794

/* lower = Phi(a), upper = Phi(-a), as scipy.special.ndtr computes each of them */
static inline void ndtr_pair(double a, double *lower, double *upper)
{
    double x = a * SQRT1_2, z = fabs(x), y;
    if (isnan(a)) {
        *lower = *upper = NAN;
        return;
    }
    if (z < SQRT1_2) {
        *lower = 0.5 + 0.5 * erf(x);
        *upper = 0.5 + 0.5 * erf(-x);
        return;
    }
    y = 0.5 * erfc(z);  /* the smaller tail */
    if (x > 0) {
        *lower = 1.0 - y;
        *upper = y;
    } else {
        *lower = y;
        *upper = 1.0 - y;
    }
}

int fpld_psg_eval(const double *t, ptrdiff_t n, double q, double v, double sd, int remove,
                  double *F, double *S, double *pdf)
{
    if (n < 0 || !(q > 0 && q < 1) || !(v > 0) || !(sd > 0))
        return FPLD_EINVAL;
    double logq = log(q), ylo = log1p(-q), h = v / 2, cden = 1.0 / (sd * 2.5066282746310002);
    for (ptrdiff_t i = 0; i < n; i++) {
        double ti = t[i], tt = remove ? ti : -ti;
        double em1 = expm1(tt), arg = em1 + q;
        double l = arg > 0 ? log(arg) - logq : -INFINITY;  /* SubsampledLoss._ginv */
        double zp = (l + h) / sd, f, s, dens;
        double pl, pu;
        ndtr_pair(zp, &pl, &pu);
        if (remove) {
            double ql, qu, zq = (l - h) / sd;
            ndtr_pair(zq, &ql, &qu);
            f = (1 - q) * pl + q * ql;
            s = (1 - q) * pu + q * qu;
        } else if (ti >= -ylo) {
            f = 1.0;
            s = 0.0;
        } else {
            f = pu;  /* Y <= t  <=>  L >= ginv(-t) */
            s = pl;
        }
        if (F)
            F[i] = f;
        if (S)
            S[i] = s;
        if (pdf) {
            double dl = (em1 + 1.0) / arg;  /* dl/dt = e^t / (e^t - 1 + q) */
            double dp = exp(-0.5 * zp * zp) * cden;
            if (remove) {
                double zq = (l - h) / sd;
                dens = ((1 - q) * dp + q * (exp(-0.5 * zq * zq) * cden)) * dl;
            } else {
                dens = dp * dl;
            }
            pdf[i] = isfinite(dens) ? dens : 0.0;
        }
    }
    return FPLD_OK;
}

static inline double log_add_exp(double a, double b)
{
    /* numpy.logaddexp for finite arguments */
    double m = a > b ? a : b, d = a > b ? b - a : a - b;
    return m + log1p(exp(d));
}

int fpld_psg_moments(double l_lo, double l_hi, double q, double v, double sd, int remove,
                     const double *x16, const double *w16, const double *x8, const double *w8, double *out)
{
    if (!(q > 0 && q < 1) || !(v > 0) || !(sd > 0) || isnan(l_lo) || isnan(l_hi))
        return FPLD_EINVAL;
    for (int k = 0; k < 6; k++)
        out[k] = 0.0;
    double h = v / 2, lo = -h - 40 * sd, hi = h + 40 * sd;
    if (l_lo > lo)
        lo = l_lo;
    if (l_hi < hi)
        hi = l_hi;
    if (!(hi > lo))
        return FPLD_OK;
    double width = sd < 1.0 ? sd : 1.0;
    ptrdiff_t npan = (ptrdiff_t)ceil((hi - lo) / width);
    if (npan < 1)
        npan = 1;
    double step = (hi - lo) / (double)npan, lq1 = log1p(-q), lq = log(q), cden = 1.0 / (sd * 2.5066282746310002);
    for (ptrdiff_t j = 0; j < npan; j++) {
        double a = lo + step * (double)j, b = (j + 1 == npan) ? hi : lo + step * (double)(j + 1);
        double mid = 0.5 * (a + b), half = 0.5 * (b - a);
        double r16[2] = {0.0, 0.0}, r8[2] = {0.0, 0.0}, ab[2] = {0.0, 0.0};
        for (int pass = 0; pass < 2; pass++) {
            const double *x = pass ? x8 : x16, *w = pass ? w8 : w16;
            int m = pass ? 8 : 16;
            double *r = pass ? r8 : r16;
            for (int i = 0; i < m; i++) {
                double l = mid + half * x[i];
                double zp = (l + h) / sd;
                double dens = exp(-0.5 * zp * zp) * cden;
                if (remove) {
                    double zq = (l - h) / sd;
                    dens = (1 - q) * dens + q * (exp(-0.5 * zq * zq) * cden);
                }
                double g = log_add_exp(lq1, lq + l);
                r[0] += w[i] * (g * dens);
                r[1] += w[i] * (g * g * dens);
                if (!pass) {
                    ab[0] += fabs(w[i] * (g * dens));
                    ab[1] += w[i] * (g * g * dens);
                }
            }
        }
        for (int k = 0; k < 2; k++) {
            double i16 = half * r16[k], i8 = half * r8[k];
            out[3 * k] += i16;
            out[3 * k + 1] += fabs(i16 - i8);
            out[3 * k + 2] += half * ab[k];
        }
    }
    /* round-off of the sums (16 terms per panel, then npan panel values, each term with a few
     * roundings in g and the density): at most (npan + 40) u times the sum of |terms| */
    for (int k = 0; k < 2; k++)
        out[3 * k + 2] *= (double)(npan + 40) * 1.1102230246251565e-16;
    return FPLD_OK;
}

int fpld_psg_moments16(double l_lo, double l_hi, double q, double v, double sd, int remove,
                       const double *x16, const double *w16, double *out)
{
    /* keep in step with fpld_psg_moments (tests compare the two bitwise) */
    if (!(q > 0 && q < 1) || !(v > 0) || !(sd > 0) || isnan(l_lo) || isnan(l_hi))
        return FPLD_EINVAL;
    out[0] = out[1] = 0.0;
    double h = v / 2, lo = -h - 40 * sd, hi = h + 40 * sd;
    if (l_lo > lo)
        lo = l_lo;
    if (l_hi < hi)
        hi = l_hi;
    if (!(hi > lo))
        return FPLD_OK;
    double width = sd < 1.0 ? sd : 1.0;
    ptrdiff_t npan = (ptrdiff_t)ceil((hi - lo) / width);
    if (npan < 1)
        npan = 1;
    double step = (hi - lo) / (double)npan, lq1 = log1p(-q), lq = log(q), cden = 1.0 / (sd * 2.5066282746310002);
    for (ptrdiff_t j = 0; j < npan; j++) {
        double a = lo + step * (double)j, b = (j + 1 == npan) ? hi : lo + step * (double)(j + 1);
        double mid = 0.5 * (a + b), half = 0.5 * (b - a);
        double r16[2] = {0.0, 0.0};
        for (int i = 0; i < 16; i++) {
            double l = mid + half * x16[i];
            double zp = (l + h) / sd;
            double dens = exp(-0.5 * zp * zp) * cden;
            if (remove) {
                double zq = (l - h) / sd;
                dens = (1 - q) * dens + q * (exp(-0.5 * zq * zq) * cden);
            }
            double g = log_add_exp(lq1, lq + l);
            r16[0] += w16[i] * (g * dens);
            r16[1] += w16[i] * (g * g * dens);
        }
        out[0] += half * r16[0];
        out[1] += half * r16[1];
    }
    return FPLD_OK;
}
