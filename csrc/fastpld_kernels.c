/* Plain C kernels of fastpld (see fastpld_kernels.h). */
#include "fastpld_kernels.h"

#include <math.h>

#define FPLD_BLOCK 32

/* out[j] = sum_{i>=j} p[i] factor^(i-j); stable for factor in [0, 1] (no growth). */
int fpld_discounted_rcumsum(const double *p, ptrdiff_t n, double factor, double *out)
{
    if (!(factor >= 0.0 && factor <= 1.0))
        return FPLD_EINVAL;
    double acc = 0.0;
    for (ptrdiff_t j = n - 1; j >= 0; --j) {
        acc = p[j] + factor * acc;
        out[j] = acc;
    }
    return FPLD_OK;
}

int fpld_query_tables(const double *p, ptrdiff_t n, double factor, double *S1, double *T, double *dgrid)
{
    if (!(factor >= 0.0 && factor <= 1.0))
        return FPLD_EINVAL;
    double s = 0.0, t = 0.0;
    S1[n] = 0.0;
    T[n] = 0.0;
    for (ptrdiff_t j = n - 1; j >= 0; --j) {
        /* dgrid[j] uses the tables at j + 1, before they absorb p[j] */
        double d = s - factor * t;
        dgrid[j] = d > 0.0 ? d : 0.0;
        s += p[j];
        t = p[j] + factor * t;
        S1[j] = s;
        T[j] = t;
    }
    return FPLD_OK;
}

int fpld_bucket_masses(const double *F, const double *S, ptrdiff_t n, ptrdiff_t split, double *q, double *total)
{
    if (n < 1 || split < 1 || split > n)
        return FPLD_EINVAL;
    double tot = 0.0;
    for (ptrdiff_t i = 0; i < n; ++i) {
        double v;
        if (i < split - 1)
            v = F[i + 1] - F[i];
        else if (i == split - 1)
            v = 1.0 - F[split - 1] - S[split];
        else
            v = S[i] - S[i + 1];
        /* clipping only moves a computed mass towards the exact (non-negative) one;
           NaN (a broken CDF) is kept so that the caller sees it */
        if (v < 0.0)
            v = 0.0;
        q[i] = v;
        tot += v;
    }
    *total = tot;
    return FPLD_OK;
}

int fpld_normalise_mean(double *q, ptrdiff_t n, double total, double *mean_index)
{
    if (!(total > 0.0))
        return FPLD_ENOMASS;
    double acc = 0.0;
    for (ptrdiff_t i = 0; i < n; ++i) {
        q[i] = q[i] / total;
        acc += (double)i * q[i];
    }
    *mean_index = acc;
    return FPLD_OK;
}

int fpld_leaf_roundoff(const double *F, const double *S, const double *dens, ptrdiff_t m,
                       double tau, double c0, double limit, double *widen, double *tv)
{
    double wmax = 0.0, charged = 0.0;
    int any = 0;
    for (ptrdiff_t i = 0; i < m; ++i) {
        double mn = F[i] < S[i] ? F[i] : S[i];
        double dev = tau * mn + c0;
        double move = dens[i] > 0.0 ? dev / (0.5 * dens[i]) : INFINITY;
        if (move <= limit) {
            if (!any || move > wmax)
                wmax = move;
            any = 1;
        } else {
            charged += dev;
        }
    }
    *widen = any ? 2.0 * wmax : 0.0;
    *tv = charged;
    return FPLD_OK;
}

int fpld_pmf_moments(const double *p, ptrdiff_t n, double cen, double *total, double *mean, double *var)
{
    double tot = 0.0, s1 = 0.0;
    for (ptrdiff_t i = 0; i < n; ++i) {
        tot += p[i];
        s1 += ((double)i - cen) * p[i];
    }
    if (!(tot > 0.0))
        return FPLD_ENOMASS;
    double mu = s1 / tot, s2 = 0.0;
    for (ptrdiff_t i = 0; i < n; ++i) {
        double d = ((double)i - cen) - mu;
        s2 += d * d * p[i];
    }
    *total = tot;
    *mean = mu;
    *var = s2 / tot;
    return FPLD_OK;
}

int fpld_log_mgf_grid(const double *p, ptrdiff_t n, double cen, const double *s, ptrdiff_t ns,
                      double m, double *K, double *logp)
{
    if (n < 1)
        return FPLD_ENOMASS;
    /* only the positive entries contribute (log 0 = -inf gives e^-inf = 0 in the reference) */
    ptrdiff_t lo = 0, hi = n - 1;
    while (lo < n && !(p[lo] > 0.0))
        ++lo;
    while (hi > lo && !(p[hi] > 0.0))
        --hi;
    if (lo >= n)
        return FPLD_ENOMASS;
    for (ptrdiff_t i = lo; i <= hi; ++i)
        logp[i] = p[i] > 0.0 ? log(p[i]) : -INFINITY;
    for (ptrdiff_t j = 0; j < ns; ++j) {
        double sj = s[j];
        double mx = -INFINITY;
        for (ptrdiff_t i = lo; i <= hi; ++i) {
            double M = sj * ((double)i - cen) + logp[i];
            if (M > mx)
                mx = M;
        }
        /* sum_i p_i e^(s (i - cen) - mx): within blocks of FPLD_BLOCK indices the factor
         * e^(s (i - cen) - mx) is a geometric sequence (one exp per block, then products;
         * relative error <= (FPLD_BLOCK + 2) u per term, far inside the 1e-9 margin the
         * caller adds to K).  Exact exps where a block's factor could over/underflow. */
        double r = exp(sj);
        int geometric = fabs(sj) * FPLD_BLOCK < 600.0;
        double acc = 0.0;
        for (ptrdiff_t b = lo; b <= hi; b += FPLD_BLOCK) {
            ptrdiff_t e = b + FPLD_BLOCK - 1 < hi ? b + FPLD_BLOCK - 1 : hi;
            double x0 = sj * ((double)b - cen) - mx;
            double x1 = x0 + sj * (double)(e - b);  /* exponent at the block's end */
            if (geometric && x0 < 600.0 && x1 < 600.0 && x0 > -600.0) {
                double w = exp(x0);
                for (ptrdiff_t i = b; i <= e; ++i) {
                    acc += p[i] * w;
                    w *= r;
                }
            } else {
                for (ptrdiff_t i = b; i <= e; ++i) {
                    double d = sj * ((double)i - cen) + logp[i] - mx;
                    /* e^d underflows to 0 below about -745.2: skip the call */
                    if (d > -746.0)
                        acc += exp(d);
                }
            }
        }
        K[j] += m * (mx + log(acc));
    }
    return FPLD_OK;
}

int fpld_log_binomial_moments(const double *lm, const double *lf, double lq1, double lq,
                              const int64_t *orders, ptrdiff_t n, double *out, double *terms)
{
    for (ptrdiff_t r = 0; r < n; ++r) {
        int64_t a = orders[r];
        if (a < 0)
            return FPLD_EINVAL;
        double la = lf[a + 1], mx = -INFINITY;
        for (int64_t j = 0; j <= a; ++j) {
            double t = la - lf[j + 1] - lf[a - j + 1];
            if (a - j > 0)
                t += (double)(a - j) * lq1;
            t += (double)j * lq;  /* added in the reference's order */
            t += lm[j];
            terms[j] = t;
            if (t > mx)
                mx = t;
        }
        if (!isfinite(mx)) {
            /* +inf: an infinite moment (an upper bound); -inf cannot occur (the j = a term is finite) */
            out[r] = mx;
            continue;
        }
        double acc = 0.0;
        for (int64_t j = 0; j <= a; ++j) {
            double d = terms[j] - mx;
            /* e^d underflows to 0 below about -745.2 (the reference adds those zeros) */
            if (d > -746.0)
                acc += exp(d);
        }
        out[r] = mx + log(acc);
    }
    return FPLD_OK;
}

int fpld_chernoff_quantiles(const double *kp, const double *kn, const double *s, ptrdiff_t n, double c,
                            double lt, double *lo, double *up)
{
    double mu = INFINITY, ml = INFINITY;
    int nan_u = 0, nan_l = 0;
    for (ptrdiff_t i = 0; i < n; ++i) {
        double vu = (c * kp[i] - lt) / s[i];
        double vl = (c * kn[i] - lt) / s[i];
        if (vu != vu)
            nan_u = 1;
        else if (vu < mu)
            mu = vu;
        if (vl != vl)
            nan_l = 1;
        else if (vl < ml)
            ml = vl;
    }
    *up = nan_u ? NAN : mu;
    *lo = nan_l ? NAN : -ml;
    return FPLD_OK;
}

/* d(eps) = sum_{v_i > eps} p_i (1 - e^(eps - v_i)) and its round-off pad (curve._Query.delta) */
static void fpld_query_d(const double *p, ptrdiff_t n, double v0, double h, const double *S1, const double *T,
                         double padc, double eps, double *d_out, double *pad_out)
{
    const double u = 1.1102230246251565e-16; /* 2^-53 */
    /* J = first index with v_J > eps, clipped to [0, n] (the float is clipped before the cast) */
    double x = floor((eps - v0) / h);
    ptrdiff_t J;
    if (!(x >= -1.0))
        J = 0;
    else if (x >= (double)n)
        J = n;
    else
        J = (ptrdiff_t)x + 1;
    double vJ = v0 + h * (double)J;
    double dx = eps - vJ;
    double w = exp(dx < 0.0 ? dx : 0.0);
    double d = S1[J] - w * T[J];
    if (d < 0.0)
        d = 0.0;
    double err = 8 * u * (((fabs(eps) + fabs(v0)) + h * (double)n) + 1.0);
    double below = J >= 1 ? p[J - 1] : 0.0; /* pp[J] */
    double above = J < n ? p[J] : 0.0;      /* pp[J + 1] */
    double near = below * (double)(eps - (v0 + h * (double)(J - 1)) <= err) + above * (double)(vJ - eps <= err);
    *d_out = d;
    *pad_out = padc * S1[J] + err * (w * T[J] + near);
}

int fpld_delta_bounds(const double *p, ptrdiff_t n, double v0, double h, const double *S1, const double *T,
                      double padc, double es, double ds, double pinf, const double *eps, ptrdiff_t m,
                      double *lo, double *est, double *up)
{
    if (n < 1)
        return FPLD_EINVAL;
    const double u = 1.1102230246251565e-16;
    for (ptrdiff_t i = 0; i < m; ++i) {
        double du, pu, dl, pl, de, pe;
        fpld_query_d(p, n, v0, h, S1, T, padc, eps[i] - es, &du, &pu);
        fpld_query_d(p, n, v0, h, S1, T, padc, eps[i] + es, &dl, &pl);
        fpld_query_d(p, n, v0, h, S1, T, padc, eps[i], &de, &pe);
        /* (1 +- 8u): rounding of the p_inf combination, outward */
        double a = (du + pu) + ds;
        double uu = (pinf + (1 - pinf) * (a < 1.0 ? a : 1.0)) * (1 + 8 * u);
        if (uu > 1.0)
            uu = 1.0;
        double b = (dl - pl) - ds;
        double ll = (pinf + (1 - pinf) * (b > 0.0 ? b : 0.0)) * (1 - 8 * u);
        double e = pinf + (1 - pinf) * de;
        if (e < ll)
            e = ll;
        if (e > uu)
            e = uu;
        lo[i] = ll;
        est[i] = e;
        up[i] = uu;
    }
    return FPLD_OK;
}
