/* Plain C kernels of fastpld (see fastpld_kernels.h). */
#include "fastpld_kernels.h"

#include <math.h>
#include <stdlib.h>

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

/* the positive range [*lo, *hi] of p and logp[i] = log p[i] on it; FPLD_ENOMASS if p has no mass */
static int fpld_logp_range(const double *p, ptrdiff_t n, double *logp, ptrdiff_t *lo_out, ptrdiff_t *hi_out)
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
    *lo_out = lo;
    *hi_out = hi;
    return FPLD_OK;
}

static void fpld_log_mgf_grid_logp(const double *p, const double *logp, ptrdiff_t lo, ptrdiff_t hi, double cen,
                                   const double *s, ptrdiff_t ns, double m, double *K);

static void fpld_log_mgf_sparse(const double *pv, const double *lv, const double *iv, ptrdiff_t nz, double cen,
                                const double *s, ptrdiff_t ns, double m, double *K);

/* the positive entries of p on [lo, hi] if at most 3/4 of them are positive (fpld_log_mgf_sparse's
 * inputs, in one malloc'ed block *buf of 3 nz doubles), else *buf = NULL; FPLD_ENOMEM */
static int fpld_compact(const double *p, const double *logp, ptrdiff_t lo, ptrdiff_t hi, double **buf,
                        ptrdiff_t *nz_out)
{
    ptrdiff_t nz = 0;
    for (ptrdiff_t i = lo; i <= hi; ++i)
        nz += p[i] > 0.0;
    *buf = NULL;
    *nz_out = nz;
    if (!(4 * nz <= 3 * (hi - lo + 1)))
        return FPLD_OK;
    double *q = (double *)malloc(3 * (size_t)nz * sizeof(double));
    if (!q)
        return FPLD_ENOMEM;
    ptrdiff_t k = 0;
    for (ptrdiff_t i = lo; i <= hi; ++i)
        if (p[i] > 0.0) {
            q[k] = p[i];
            q[nz + k] = logp[i];
            q[2 * nz + k] = (double)i;
            ++k;
        }
    *buf = q;
    return FPLD_OK;
}

int fpld_log_mgf_grid(const double *p, ptrdiff_t n, double cen, const double *s, ptrdiff_t ns,
                      double m, double *K, double *logp)
{
    ptrdiff_t lo, hi, nz;
    double *cb;
    int st = fpld_logp_range(p, n, logp, &lo, &hi);
    if (st == FPLD_OK)
        st = fpld_compact(p, logp, lo, hi, &cb, &nz);
    if (st != FPLD_OK)
        return st;
    if (cb) {  /* (the node window search sums sparse inputs the same way) */
        fpld_log_mgf_sparse(cb, cb + nz, cb + 2 * nz, nz, cen, s, ns, m, K);
        free(cb);
    } else {
        fpld_log_mgf_grid_logp(p, logp, lo, hi, cen, s, ns, m, K);
    }
    return FPLD_OK;
}

/* per block of FPLD_BLOCK entries of [0, n): bm[b] = log of the largest p (the largest log p up to
 * one rounding) and, at bm[nb + b], the log of the block's mass plus 1e-13 (>= the exact log of the
 * exact sum; -inf for an empty block); malloc'ed, 2 nb doubles; NULL if out of memory.  Two logs
 * per block instead of one per entry. */
static double *fpld_block_max(const double *p, ptrdiff_t n)
{
    ptrdiff_t nb = (n + FPLD_BLOCK - 1) / FPLD_BLOCK;
    double *bm = (double *)malloc((size_t)(nb > 0 ? 2 * nb : 1) * sizeof(double));
    if (!bm)
        return NULL;
    for (ptrdiff_t b = 0; b < nb; ++b) {
        double mx = 0.0, sum = 0.0;
        ptrdiff_t e = (b + 1) * FPLD_BLOCK < n ? (b + 1) * FPLD_BLOCK : n;
        for (ptrdiff_t i = b * FPLD_BLOCK; i < e; ++i) {
            if (p[i] > mx)
                mx = p[i];
            sum += p[i];
        }
        bm[b] = mx > 0.0 ? log(mx) : -INFINITY;
        bm[nb + b] = sum > 0.0 ? log(sum) + 1e-13 : -INFINITY;
    }
    return bm;
}

/* Blocks whose whole contribution is negligible: with lf = log(mass) + the largest exponent
 * s (i - cen) - mx over the block and ln = the same with the smallest exponent, a block with
 * lf < L + log(1e-17), L = max over blocks of ln, contributes at most 1e-17 e^L (exactly; the
 * floating-point test is off by far less than the factor 2 charged), and e^L is at most one
 * block's exact contribution, hence at most the sum: such blocks are not summed; each adds
 * 2e-17 e^L instead (an upper bound, so K stays an upper bound on the log-MGF; relative cost
 * <= 2e-17 per block, far inside the caller's 1e-9 margin).  Used by both log-MGF kernels below. */
#define FPLD_NEGLIGIBLE (-39.1439465808987777)  /* log(1e-17) */
/* sum_{i < FPLD_BLOCK} p[i] w r^i for a full block, in four interleaved chains stepped by r4 = r^4 (the
 * products of one chain do not wait on the others'; relative error <= (2 FPLD_BLOCK + 2) u per term) */
static double fpld_geom_block(const double *p, double w, double r, double r4)
{
    double w0 = w, w1 = w0 * r, w2 = w1 * r, w3 = w2 * r;
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    for (ptrdiff_t i = 0; i < FPLD_BLOCK; i += 4) {
        a0 += p[i] * w0;
        a1 += p[i + 1] * w1;
        a2 += p[i + 2] * w2;
        a3 += p[i + 3] * w3;
        w0 *= r4;
        w1 *= r4;
        w2 *= r4;
        w3 *= r4;
    }
    return (a0 + a1) + (a2 + a3);
}

/* fpld_log_mgf_grid with logp (on [lo, hi]) already computed, or NULL (logs taken where needed) */
static void fpld_log_mgf_grid_logp(const double *p, const double *logp, ptrdiff_t lo, ptrdiff_t hi, double cen,
                                   const double *s, ptrdiff_t ns, double m, double *K)
{
    /* The shift mx only keeps the exponentials in range (K does not depend on it): with several s,
     * an upper bound from the blocks' maxima of log p (computed once) replaces the scan per s; it
     * exceeds the true maximum by at most |s| FPLD_BLOCK < 300, so the largest term stays above
     * e^-300 and nothing that matters underflows */
    ptrdiff_t nb = (hi - lo) / FPLD_BLOCK + 1;
    double *bm = (ns > 1 || !logp) ? fpld_block_max(p + lo, hi - lo + 1) : NULL;
    for (ptrdiff_t j = 0; j < ns; ++j) {
        double sj = s[j];
        double mx = -INFINITY;
        if (bm && fabs(sj) * FPLD_BLOCK < 300.0) {
            for (ptrdiff_t b = lo, bi = 0; b <= hi; b += FPLD_BLOCK, ++bi) {
                ptrdiff_t e = b + FPLD_BLOCK - 1 < hi ? b + FPLD_BLOCK - 1 : hi;
                double xa = sj * ((double)b - cen), xb = sj * ((double)e - cen);
                double M = bm[bi] + (xa > xb ? xa : xb);
                if (M > mx)
                    mx = M;
            }
        } else {
            for (ptrdiff_t i = lo; i <= hi; ++i) {
                if (!(p[i] > 0.0))
                    continue;
                double M = sj * ((double)i - cen) + (logp ? logp[i] : log(p[i]));
                if (M > mx)
                    mx = M;
            }
        }
        /* sum_i p_i e^(s (i - cen) - mx): within blocks of FPLD_BLOCK indices the factor
         * e^(s (i - cen) - mx) is a geometric sequence (one exp per block, then products in four
         * interleaved chains stepped by r^4; relative error <= (2 FPLD_BLOCK + 2) u per term, far
         * inside the 1e-9 margin the caller adds to K).  Exact exps where a block's factor could
         * over/underflow. */
        double r = exp(sj);
        double r4 = r * r;
        r4 = r4 * r4;
        int geometric = fabs(sj) * FPLD_BLOCK < 600.0;
        double acc = 0.0;
        /* negligible blocks (see FPLD_NEGLIGIBLE) */
        double L = -INFINITY;
        ptrdiff_t skipped = 0;
        if (bm) {
            for (ptrdiff_t b = lo, bi = 0; b <= hi; b += FPLD_BLOCK, ++bi) {
                ptrdiff_t e = b + FPLD_BLOCK - 1 < hi ? b + FPLD_BLOCK - 1 : hi;
                double xa = sj * ((double)b - cen) - mx, xb = sj * ((double)e - cen) - mx;
                double ln = bm[nb + bi] + (xa < xb ? xa : xb);
                if (ln > L)
                    L = ln;
            }
        }
        for (ptrdiff_t b = lo, bi = 0; b <= hi; b += FPLD_BLOCK, ++bi) {
            ptrdiff_t e = b + FPLD_BLOCK - 1 < hi ? b + FPLD_BLOCK - 1 : hi;
            double x0 = sj * ((double)b - cen) - mx;
            double x1 = x0 + sj * (double)(e - b);  /* exponent at the block's end */
            if (bm && L > -INFINITY && bm[nb + bi] + (x0 > x1 ? x0 : x1) < L + FPLD_NEGLIGIBLE) {
                skipped += bm[nb + bi] > -INFINITY;
                continue;
            }
            if (geometric && x0 < 600.0 && x1 < 600.0 && x0 > -600.0) {
                double w = exp(x0);
                if (e - b + 1 == FPLD_BLOCK) {
                    acc += fpld_geom_block(p + b, w, r, r4);
                } else {
                    for (ptrdiff_t i = b; i <= e; ++i) {
                        acc += p[i] * w;
                        w *= r;
                    }
                }
            } else {
                for (ptrdiff_t i = b; i <= e; ++i) {
                    if (!(p[i] > 0.0))
                        continue;
                    double d = sj * ((double)i - cen) + (logp ? logp[i] : log(p[i])) - mx;
                    /* e^d underflows to 0 below about -745.2: skip the call */
                    if (d > -746.0)
                        acc += exp(d);
                }
            }
        }
        if (skipped)
            acc += (double)skipped * 2e-17 * exp(L);
        K[j] += m * (mx + log(acc));
    }
    free(bm);
}

/* one order of fpld_log_binomial_moments */
static double fpld_lbm_one(const double *lm, const double *lf, double lq1, double lq, int64_t a, double *terms)
{
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
    if (!isfinite(mx))
        return mx; /* +inf: an infinite moment (an upper bound); -inf cannot occur (the j = a term is finite) */
    /* Terms below e^-60 of the largest are not exponentiated (at large orders nearly all of them:
     * this was ~20k exp per subsampled loss's MGF grid); they are counted at e^-60 each instead, so
     * the sum stays an upper bound.  Against a sum >= 1 (the largest term) that adds less than
     * 1e-23 relative, below half an ulp: the result is the full sum's to the last bit in practice. */
    double acc = 0.0;
    int64_t small = 0;
    for (int64_t j = 0; j <= a; ++j) {
        double d = terms[j] - mx;
        if (d > -60.0)
            acc += exp(d);
        else
            ++small;
    }
    if (small)
        acc += (double)small * 8.756510762696521e-27;  /* e^-60 rounded up */
    return mx + log(acc);
}

int fpld_binomial_chord(const double *x, ptrdiff_t n, int64_t shift, const double *lm, const double *lf,
                        ptrdiff_t L, double lq1, double lq, double *memo, double *out, double *terms)
{
    for (ptrdiff_t i = 0; i < n; ++i) {
        double lo = floor(x[i]);
        if (!(lo >= 0.0) || lo + (double)shift + 1.0 > (double)(L - 1))
            return FPLD_EINVAL;
        int64_t a = (int64_t)lo + shift;
        double w = x[i] - lo;
        if (memo[a] != memo[a])
            memo[a] = fpld_lbm_one(lm, lf, lq1, lq, a, terms);
        if (w == 0) {
            out[i] = memo[a];
            continue;
        }
        if (memo[a + 1] != memo[a + 1])
            memo[a + 1] = fpld_lbm_one(lm, lf, lq1, lq, a + 1, terms);
        out[i] = (1 - w) * memo[a] + w * memo[a + 1];
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
        out[r] = fpld_lbm_one(lm, lf, lq1, lq, a, terms);
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

int fpld_query_delta(const double *p, ptrdiff_t n, double v0, double h, const double *S1, const double *T,
                     double padc, const double *eps, ptrdiff_t m, double *d, double *pad)
{
    if (n < 1)
        return FPLD_EINVAL;
    for (ptrdiff_t i = 0; i < m; ++i)
        fpld_query_d(p, n, v0, h, S1, T, padc, eps[i], &d[i], &pad[i]);
    return FPLD_OK;
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

/* fpld_log_mgf_grid_logp over the nz positive entries only: pv[k] = p_i, lv[k] = log p_i, iv[k] = i
 * (increasing).  Sparse PMFs (leaves with coarse tails hold their tail mass at every c-th point)
 * cost nz instead of hi - lo + 1 per s.  Within blocks of FPLD_BLOCK entries the factor
 * e^(s (i - cen) - mx) is stepped by e^(s g) for the index gap g (one exp per change of g): relative
 * error <= (2 FPLD_BLOCK + 2) u per term, far inside the caller's 1e-9 margin; every factor of a
 * block lies between its two ends (monotone in i), which are checked against over/underflow. */
static void fpld_log_mgf_sparse(const double *pv, const double *lv, const double *iv, ptrdiff_t nz, double cen,
                                const double *s, ptrdiff_t ns, double m, double *K)
{
    /* the shift mx as in fpld_log_mgf_grid_logp: from the blocks' maxima of log p where the
     * blocks' index spans keep the excess below 300 */
    ptrdiff_t nb = (nz + FPLD_BLOCK - 1) / FPLD_BLOCK;
    double *bm = ns > 1 ? fpld_block_max(pv, nz) : NULL;
    /* per full block, its index gap if all its gaps are equal (the fine core, runs of equal coarse
     * cells), else 0: such blocks are summed in four interleaved chains as in the dense kernel */
    double *ug = (double *)malloc((size_t)(nb > 0 ? nb : 1) * sizeof(double));
    double span = 0.0;
    for (ptrdiff_t b = 0, bi = 0; b < nz; b += FPLD_BLOCK, ++bi) {
        ptrdiff_t e = b + FPLD_BLOCK - 1 < nz - 1 ? b + FPLD_BLOCK - 1 : nz - 1;
        if (iv[e] - iv[b] > span)
            span = iv[e] - iv[b];
        if (ug) {
            double g0 = e > b ? iv[b + 1] - iv[b] : 0.0;
            int uni = e - b + 1 == FPLD_BLOCK;
            for (ptrdiff_t k = b + 1; uni && k < e; ++k)
                uni = iv[k + 1] - iv[k] == g0;
            ug[bi] = uni ? g0 : 0.0;
        }
    }
    for (ptrdiff_t j = 0; j < ns; ++j) {
        double sj = s[j];
        double mx = -INFINITY;
        if (bm && fabs(sj) * span < 300.0) {
            for (ptrdiff_t b = 0, bi = 0; b < nz; b += FPLD_BLOCK, ++bi) {
                ptrdiff_t e = b + FPLD_BLOCK - 1 < nz - 1 ? b + FPLD_BLOCK - 1 : nz - 1;
                double xa = sj * (iv[b] - cen), xb = sj * (iv[e] - cen);
                double M = bm[bi] + (xa > xb ? xa : xb);
                if (M > mx)
                    mx = M;
            }
        } else {
            for (ptrdiff_t k = 0; k < nz; ++k) {
                double M = sj * (iv[k] - cen) + (lv ? lv[k] : log(pv[k]));
                if (M > mx)
                    mx = M;
            }
        }
        double acc = 0.0, gl = -1.0, rg = 1.0;
        /* negligible blocks (see FPLD_NEGLIGIBLE) */
        double L = -INFINITY;
        ptrdiff_t skipped = 0;
        if (bm) {
            for (ptrdiff_t b = 0, bi = 0; b < nz; b += FPLD_BLOCK, ++bi) {
                ptrdiff_t e = b + FPLD_BLOCK - 1 < nz - 1 ? b + FPLD_BLOCK - 1 : nz - 1;
                double xa = sj * (iv[b] - cen) - mx, xb = sj * (iv[e] - cen) - mx;
                double ln = bm[nb + bi] + (xa < xb ? xa : xb);
                if (ln > L)
                    L = ln;
            }
        }
        for (ptrdiff_t b = 0, bi = 0; b < nz; b += FPLD_BLOCK, ++bi) {
            ptrdiff_t e = b + FPLD_BLOCK - 1 < nz - 1 ? b + FPLD_BLOCK - 1 : nz - 1;
            double x0 = sj * (iv[b] - cen) - mx;
            double x1 = sj * (iv[e] - cen) - mx;
            if (bm && L > -INFINITY && bm[nb + bi] + (x0 > x1 ? x0 : x1) < L + FPLD_NEGLIGIBLE) {
                skipped += bm[nb + bi] > -INFINITY;
                gl = -1.0;  /* (the step factor is recomputed after a skipped block) */
                continue;
            }
            if (x0 < 600.0 && x1 < 600.0 && x0 > -600.0 && x1 > -600.0) {
                double w = exp(x0);
                if (ug && ug[bi] > 0.0) {
                    double g = ug[bi];
                    if (g != gl) {
                        rg = exp(sj * g);
                        gl = g;
                    }
                    double r4 = rg * rg;
                    r4 = r4 * r4;
                    acc += fpld_geom_block(pv + b, w, rg, r4);
                    continue;
                }
                for (ptrdiff_t k = b; k <= e; ++k) {
                    acc += pv[k] * w;
                    if (k < e) {
                        double g = iv[k + 1] - iv[k];
                        if (g != gl) {
                            rg = exp(sj * g);
                            gl = g;
                        }
                        w *= rg;
                    }
                }
            } else {
                for (ptrdiff_t k = b; k <= e; ++k) {
                    double d = sj * (iv[k] - cen) + (lv ? lv[k] : log(pv[k])) - mx;
                    if (d > -746.0)
                        acc += exp(d);
                }
            }
        }
        if (skipped)
            acc += (double)skipped * 2e-17 * exp(L);
        K[j] += m * (mx + log(acc));
    }
    free(bm);
    free(ug);
}

/* K[j] = sum_c m_c log E e^(s_j (I_c - cen_c)) + 1e-9 (1 + |K|) for j < ns (compose._chernoff_window.log_mgf);
 * logs[c] holds log p_c on its positive range [los[c], his[c]] (computed once per node); a child with
 * ivs[c] != NULL is summed over its nzs[c] positive entries (pvs, lvs, ivs; fpld_log_mgf_sparse) */
static void fpld_node_log_mgf(const double *const *ps, const double *const *logs, const ptrdiff_t *los,
                              const ptrdiff_t *his, const double *cens, const double *ms, ptrdiff_t nin,
                              const double *const *pvs, const double *const *lvs, const double *const *ivs,
                              const ptrdiff_t *nzs, const double *s, ptrdiff_t nsv, double *K)
{
    for (ptrdiff_t j = 0; j < nsv; ++j)
        K[j] = 0.0;
    if (nsv == 0)
        return;
    for (ptrdiff_t c = 0; c < nin; ++c) {
        if (ivs[c])
            fpld_log_mgf_sparse(pvs[c], lvs[c], ivs[c], nzs[c], cens[c], s, nsv, ms[c], K);
        else
            fpld_log_mgf_grid_logp(ps[c], logs[c], los[c], his[c], cens[c], s, nsv, ms[c], K);
    }
    for (ptrdiff_t j = 0; j < nsv; ++j)
        K[j] = K[j] + 1e-9 * (1 + fabs(K[j]));
}

/* the not yet evaluated neighbours iu-1, iu-2, iu+1, iu+2 of one side's best grid point iu, into need
   (at most 4): a side whose direct neighbour is already known (or is the grid's end) is dropped */
static ptrdiff_t fpld_refine_points(ptrdiff_t iu, ptrdiff_t last, const int *known, ptrdiff_t *need)
{
    const ptrdiff_t cand[4] = {iu - 1, iu - 2, iu + 1, iu + 2};
    int drop_low = (iu - 1 >= 0 && known[iu - 1]) || iu == 0;
    int drop_high = (iu + 1 <= last && known[iu + 1]) || iu == last;
    ptrdiff_t n = 0;
    for (int a = 0; a < 4; ++a) {
        ptrdiff_t j = cand[a];
        if (j < 0 || j > last || known[j])
            continue;
        if ((drop_low && !(j > iu)) || (drop_high && !(j < iu)))
            continue;
        need[n++] = j;
    }
    return n;
}

int fpld_chernoff_window(const double *const *ps, const ptrdiff_t *ns, const double *cens, const double *ms,
                         ptrdiff_t nin, const double *srel, ptrdiff_t nrel, const double *refine, double w,
                         double *lo, double *hi, double *sp, double *Kp, ptrdiff_t *np_, double *sn, double *Kn,
                         ptrdiff_t *nn_, double *scratch)
{
    if (nrel < 8 || nrel > 64 || nin < 1 || nin > 64)
        return FPLD_EINVAL;
    double sd2 = 0.0;
    double *s = scratch, *sb = scratch + nrel + 8, *Kb = sb + nrel + 8;
    const double *logs[64];
    ptrdiff_t los[64], his[64];
    /* per child in two passes (the same sums as fpld_pmf_moments, fpld_logp_range and
     * fpld_compact, which made five: zero entries add exactly nothing to them): the mass, the
     * first moment and the positive range; then the variance, with the logarithms (dense) or the
     * compacted positive entries (sparse: at most 3/4 of the range positive, summed over those) */
    const double *pvs[64], *lvs[64], *ivs[64];
    double *cbs[64];
    ptrdiff_t nzs[64];
    for (ptrdiff_t c = 0; c < nin; ++c) {
        const double *p = ps[c];
        ptrdiff_t n = ns[c], lo_c = -1, hi_c = -1, nz = 0;
        double tot = 0.0, s1 = 0.0, cen = cens[c];
        for (ptrdiff_t i = 0; i < n; ++i) {
            tot += p[i];
            s1 += ((double)i - cen) * p[i];
            if (p[i] > 0.0) {
                if (lo_c < 0)
                    lo_c = i;
                hi_c = i;
                ++nz;
            }
        }
        int st = (tot > 0.0 && lo_c >= 0) ? FPLD_OK : FPLD_ENOMASS;
        double *cb = NULL;
        if (st == FPLD_OK && 4 * nz <= 3 * (hi_c - lo_c + 1)) {
            cb = (double *)malloc(3 * (size_t)nz * sizeof(double));
            if (!cb)
                st = FPLD_ENOMEM;
        }
        if (st != FPLD_OK) {
            for (ptrdiff_t b = 0; b < c; ++b)
                free(cbs[b]);
            return st;
        }
        double mu = s1 / tot, s2 = 0.0;
        if (cb) {
            ptrdiff_t k = 0;
            for (ptrdiff_t i = lo_c; i <= hi_c; ++i)
                if (p[i] > 0.0) {
                    double d = ((double)i - cen) - mu;
                    s2 += d * d * p[i];
                    cb[k] = p[i];
                    cb[2 * nz + k] = (double)i;
                    ++k;
                }
        } else {  /* (dense: no log per entry, fpld_log_mgf_grid_logp works from block maxima) */
            for (ptrdiff_t i = lo_c; i <= hi_c; ++i) {
                double d = ((double)i - cen) - mu;
                s2 += d * d * p[i];
            }
        }
        logs[c] = NULL;
        los[c] = lo_c;
        his[c] = hi_c;
        cbs[c] = cb;
        nzs[c] = nz;
        pvs[c] = cb;
        lvs[c] = NULL;  /* (logs of the positive entries taken where a block needs them) */
        ivs[c] = cb ? cb + 2 * nz : NULL;
        sd2 += ms[c] * (s2 / tot);
    }
    double sd = sd2 > 0 ? sqrt(sd2) : 1.0;
    for (ptrdiff_t i = 0; i < nrel; ++i)
        s[i] = srel[i] / sd;
    double lw = log(2.0 / w);
    ptrdiff_t last = nrel - 1;
    /* coarse points first around the optimum of a Gaussian sum, then outwards while a side's
     * best point is at the edge of what was evaluated; rint rounds half to even like Python */
    double r0 = rint(log(sqrt(2 * lw) / srel[0]) / log(srel[1] / srel[0]));
    ptrdiff_t k0 = r0 < 2.0 ? 2 : (r0 > (double)(last - 2) ? last - 2 : (ptrdiff_t)r0);
    double Kpc[64], Knc[64];
    int ku[64] = {0}, kl[64] = {0};
    ptrdiff_t ordu[64], ordl[64], nordu = 0, nordl = 0;
    ptrdiff_t needu[4 + 1], needl[4 + 1], nu = 0, nl = 0;
    for (ptrdiff_t j = k0 - 2; j <= k0 + 2; ++j) {
        needu[nu++] = j;
        needl[nl++] = j;
    }
    ptrdiff_t iu = 0, il = 0;
    while (nu || nl) {
        ptrdiff_t nb = 0;
        for (ptrdiff_t a = 0; a < nu; ++a)
            sb[nb++] = s[needu[a]];
        for (ptrdiff_t a = 0; a < nl; ++a)
            sb[nb++] = -s[needl[a]];
        fpld_node_log_mgf(ps, logs, los, his, cens, ms, nin, pvs, lvs, ivs, nzs, sb, nb, Kb);
        for (ptrdiff_t a = 0; a < nu; ++a) {
            Kpc[needu[a]] = Kb[a];
            if (!ku[needu[a]]) {
                ku[needu[a]] = 1;
                ordu[nordu++] = needu[a];
            }
        }
        for (ptrdiff_t a = 0; a < nl; ++a) {
            Knc[needl[a]] = Kb[nu + a];
            if (!kl[needl[a]]) {
                kl[needl[a]] = 1;
                ordl[nordl++] = needl[a];
            }
        }
        /* first best point in insertion order (as Python's min / max with a key) */
        iu = ordu[0];
        double bu = (Kpc[iu] + lw) / s[iu];
        for (ptrdiff_t a = 1; a < nordu; ++a) {
            ptrdiff_t i = ordu[a];
            double v = (Kpc[i] + lw) / s[i];
            if (v < bu) {
                bu = v;
                iu = i;
            }
        }
        il = ordl[0];
        double bl = (Knc[il] + lw) / -s[il];
        for (ptrdiff_t a = 1; a < nordl; ++a) {
            ptrdiff_t i = ordl[a];
            double v = (Knc[i] + lw) / -s[i];
            if (v > bl) {
                bl = v;
                il = i;
            }
        }
        nu = fpld_refine_points(iu, last, ku, needu);
        nl = fpld_refine_points(il, last, kl, needl);
    }
    /* evaluated coarse points in index order, then the refinement around each side's best */
    ptrdiff_t npn = 0, nnn = 0;
    for (ptrdiff_t i = 0; i <= last; ++i) {
        if (ku[i]) {
            sp[npn] = s[i];
            Kp[npn++] = Kpc[i];
        }
        if (kl[i]) {
            sn[nnn] = -s[i];
            Kn[nnn++] = Knc[i];
        }
    }
    int ua = iu == 0 ? 4 : 0, ub = iu == last ? 4 : 8, la = il == 0 ? 4 : 0, lb = il == last ? 4 : 8;
    ptrdiff_t nb = 0;
    for (int a = ua; a < ub; ++a)
        sb[nb++] = s[iu] * refine[a];
    for (int a = la; a < lb; ++a)
        sb[nb++] = -(s[il] * refine[a]);
    fpld_node_log_mgf(ps, logs, los, his, cens, ms, nin, pvs, lvs, ivs, nzs, sb, nb, Kb);
    ptrdiff_t b = 0;
    for (int a = ua; a < ub; ++a, ++b) {
        sp[npn] = sb[b];
        Kp[npn++] = Kb[b];
    }
    for (int a = la; a < lb; ++a, ++b) {
        sn[nnn] = sb[b];
        Kn[nnn++] = Kb[b];
    }
    double us = INFINITY, ls = -INFINITY;
    int bad = 0;
    for (ptrdiff_t a = 0; a < npn; ++a) {
        double v = (Kp[a] + lw) / sp[a];
        if (v != v)
            bad = 1;
        else if (v < us)
            us = v;
    }
    for (ptrdiff_t a = 0; a < nnn; ++a) {
        double v = (Kn[a] + lw) / sn[a];
        if (v != v)
            bad = 1;
        else if (v > ls)
            ls = v;
    }
    for (ptrdiff_t c = 0; c < nin; ++c)
        free(cbs[c]);
    if (bad || !isfinite(us) || !isfinite(ls))
        return FPLD_EINVAL;
    *lo = floor(ls) + 1;
    *hi = ceil(us) - 1;
    *np_ = npn;
    *nn_ = nnn;
    return FPLD_OK;
}

/* numpy's logaddexp */
static double fpld_logaddexp(double a, double b)
{
    if (a == b)
        return a + 0.693147180559945309417232121458176568;
    double t = a - b;
    if (t > 0)
        return a + log1p(exp(-t));
    if (t <= 0)
        return b + log1p(exp(t));
    return t; /* NaN */
}

/* E[f(L)] and E[f(L)^2], f = g, for L = centre + sd z, z ~ N(0, 1) (_GaussPair.expect) */
static void fpld_gauss_expect(double centre, double sd, double lq1, double lq, const double *x, const double *w,
                              ptrdiff_t ngl, double *e1, double *e2)
{
    double width = sd > 0 ? (1.0 / sd < 1.0 ? 1.0 / sd : 1.0) : 1.0;
    ptrdiff_t n = (ptrdiff_t)ceil(80.0 / width);
    double step = 80.0 / (double)n, s1 = 0.0, s2 = 0.0;
    const double c0 = 0.3989422804014327; /* 1 / sqrt(2 pi) */
    for (ptrdiff_t k = 0; k < n; ++k) {
        double lo = -40.0 + step * (double)k, hi = k + 1 == n ? 40.0 : -40.0 + step * (double)(k + 1);
        double mid = 0.5 * (lo + hi), half = 0.5 * (hi - lo), p1 = 0.0, p2 = 0.0;
        for (ptrdiff_t i = 0; i < ngl; ++i) {
            double z = mid + half * x[i];
            double dens = exp(-0.5 * z * z) * c0;
            double gv = fpld_logaddexp(lq1, lq + (centre + sd * z));
            p1 += w[i] * (gv * dens);
            p2 += w[i] * (gv * gv * dens);
        }
        s1 += half * p1;
        s2 += half * p2;
    }
    *e1 = s1;
    *e2 = s2;
}

int fpld_gauss_pair_moments(double v, double sd, double q, int remove, const double *x, const double *w,
                            ptrdiff_t ngl, double *mean, double *std)
{
    if (!(q > 0.0 && q < 1.0) || !(v > 0.0) || ngl < 1 || !(80.0 * sd <= 1e9)) /* (panels: 80 sd) */
        return FPLD_EINVAL;
    double lq1 = log1p(-q), lq = log(q), p1, p2, m1, m2;
    fpld_gauss_expect(-v / 2, sd, lq1, lq, x, w, ngl, &p1, &p2);
    if (remove) {
        double q1, q2;
        fpld_gauss_expect(v / 2, sd, lq1, lq, x, w, ngl, &q1, &q2);
        m1 = (1 - q) * p1 + q * q1;
        m2 = (1 - q) * p2 + q * q2;
    } else {
        m1 = -p1;
        m2 = p2;
    }
    double var = m2 - m1 * m1;
    *mean = m1;
    *std = sqrt(var > 0.0 ? var : 0.0);
    return isfinite(m1) && isfinite(m2) ? FPLD_OK : FPLD_EINVAL;
}

/* Direct powers of a float64 node (compose._direct_power; _core.power_direct): X and P interleaved
 * complex (re, im) of length F; work >= 6 F doubles.  Only the frequencies [0, *K) are computed
 * (the caller's live prefix); with rdead > 0 the prefix is cut after the last frequency where
 * |X| >= rdead (beyond it this input's power alone is below the caller's e^-T: the caller sets P
 * to 0 there and charges it, see _native.convolve).  Array passes (one per bit of m) over
 * restrict-qualified buffers, so that the loops vectorise; the complex products by the textbook
 * formula (ac - bd, ad + bc) as in the numpy reference. */
int fpld_power_direct(const double *X, ptrdiff_t F, int64_t m, double *P, double *B, double *D, double g,
                      int first, double *work, double rdead, ptrdiff_t *K, ptrdiff_t klow, double rho,
                      const long double *XL)
{
    if (F < 1 || m < 1 || *K < 0 || *K > F || klow < 0 || klow > F || !(rho >= 0 && rho <= 1))
        return FPLD_EINVAL;
    /* the low frequencies' products in long double first (P's values there before this input's), put back after the
     * float64 pass below has overwritten them */
    double *low = NULL;
    ptrdiff_t nl = XL ? (klow < *K ? klow : *K) : 0;
    if (nl > 0) {
        low = (double *)malloc(sizeof(double) * 2 * (size_t)nl);
        if (!low)
            return FPLD_ENOMEM;
        for (ptrdiff_t k = 0; k < nl; ++k) {
            long double yr, yi;
            double b_unused;
            fpld_power_ld(XL[2 * k], XL[2 * k + 1], 1.0, m, &yr, &yi, &b_unused);
            if (!first) {
                long double pr = (long double)P[2 * k], pi = (long double)P[2 * k + 1], t = pr * yr - pi * yi;
                yi = pr * yi + pi * yr;
                yr = t;
            }
            low[2 * k] = (double)yr;
            low[2 * k + 1] = (double)yi;
        }
    }
    double *restrict xr = work, *restrict xi = work + F, *restrict yr = work + 2 * F,
           *restrict yi = work + 3 * F, *restrict rg = work + 4 * F, *restrict b = work + 5 * F;
    double *restrict Bo = B, *restrict Do = D;
    const double dm = (double)m;
    ptrdiff_t n = *K;
    for (ptrdiff_t k = 0; k < n; ++k) {
        xr[k] = X[2 * k];
        xi[k] = X[2 * k + 1];
    }
    for (ptrdiff_t k = 0; k < n; ++k) {
        /* |X| <= ~1: no overflow; an underflowed square moves r by < 1e-150, nothing against g */
        double r = sqrt(xr[k] * xr[k] + xi[k] * xi[k]);
        rg[k] = r + g;
    }
    if (rdead > 0) {
        /* (r + g compared with rdead + g: the same test as |X| < rdead up to one rounding, which
         * only moves the cut by a frequency whose power is at the threshold) */
        double lim = rdead + g;
        while (n > 0 && rg[n - 1] < lim)
            --n;
        *K = n;
    }
    /* (below klow the forward error is rho g: fpld_low_dft's frequencies) */
    ptrdiff_t kl = klow < n ? klow : n;
    if (first) {
        for (ptrdiff_t k = 0; k < kl; ++k)
            Do[k] = dm / rg[k] * rho;
        for (ptrdiff_t k = kl; k < n; ++k)
            Do[k] = dm / rg[k];
    } else {
        for (ptrdiff_t k = 0; k < kl; ++k)
            Do[k] = Do[k] + dm / rg[k] * rho;
        for (ptrdiff_t k = kl; k < n; ++k)
            Do[k] = Do[k] + dm / rg[k];
    }
    int have_y = 0;
    for (int64_t e = m;;) {
        if (e & 1) {
            if (!have_y) {
                for (ptrdiff_t k = 0; k < n; ++k) {
                    yr[k] = xr[k];
                    yi[k] = xi[k];
                    b[k] = rg[k];
                }
                have_y = 1;
            } else {
                for (ptrdiff_t k = 0; k < n; ++k) {
                    double t = yr[k] * xr[k] - yi[k] * xi[k];
                    yi[k] = yr[k] * xi[k] + yi[k] * xr[k];
                    yr[k] = t;
                    b[k] = b[k] * rg[k];
                }
            }
        }
        e >>= 1;
        if (!e)
            break;
        for (ptrdiff_t k = 0; k < n; ++k) {
            double t = xr[k] * xr[k] - xi[k] * xi[k];
            xi[k] = 2.0 * xr[k] * xi[k];
            xr[k] = t;
            rg[k] = rg[k] * rg[k];
        }
    }
    if (first) {
        for (ptrdiff_t k = 0; k < n; ++k) {
            P[2 * k] = yr[k];
            P[2 * k + 1] = yi[k];
            Bo[k] = b[k];
        }
    } else {
        for (ptrdiff_t k = 0; k < n; ++k) {
            double pr = P[2 * k], pi = P[2 * k + 1];
            P[2 * k] = pr * yr[k] - pi * yi[k];
            P[2 * k + 1] = pr * yi[k] + pi * yr[k];
            Bo[k] = Bo[k] * b[k];
        }
    }
    if (low) {
        for (ptrdiff_t k = 0; k < nl && k < n; ++k) {
            P[2 * k] = low[2 * k];
            P[2 * k + 1] = low[2 * k + 1];
        }
        free(low);
    }
    return FPLD_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * The low frequencies of an input spectrum, summed directly (fastpld._lowdft).  A node's power amplifies the
 * forward FFT's error g ~ 12 u log2 N m-fold where |X| ~ 1; these few frequencies are recomputed here to within a
 * few u (the bound is the caller's: fastpld._lowdft.low_dft_error).
 * --------------------------------------------------------------------------------------------------------------- */
#define LOWDFT_BLOCK 64

/* fpld_low_dft's sums of frequencies f and (two) f + 1 into X, rounded, and XL (unless NULL) */
static inline void low_dft_store(double *X, long double *XL, ptrdiff_t f, int two, long double re0, long double im0,
                                 long double re1, long double im1)
{
    X[2 * f] = (double)re0;
    X[2 * f + 1] = (double)im0;
    if (XL) {
        XL[2 * f] = re0;
        XL[2 * f + 1] = im0;
    }
    if (two) {
        X[2 * f + 2] = (double)re1;
        X[2 * f + 3] = (double)im1;
        if (XL) {
            XL[2 * f + 2] = re1;
            XL[2 * f + 3] = im1;
        }
    }
}

/* The table index of p_0 at frequency 1, (-cen) mod N in [0, N): entry j of p sits at (j - cen) mod N */
static inline int64_t low_dft_origin(int64_t cen, int64_t N)
{
    int64_t c0 = (-cen) % N;
    return c0 < 0 ? c0 + N : c0;
}

/* fpld_low_dft's sums over the non-zero entries of p alone (a leaf's thin-tail cells leave most of its points
 * empty: 9-19% of them hold mass in the x50-x125 nodes' leaves of the subsampled Gaussians of q 0.01-0.02, about
 * half in those of q 0.1): the same blocks of LOWDFT_BLOCK
 * indices, each summed over its non-zero terms in index order, so every sum is bitwise the dense loop's (a zero
 * term's product is a zero, and adding a zero to a sum that starts at +0 leaves it unchanged).  Per non-zero entry
 * j its table index r = ((j - cen) f) mod N, advanced by t_j = (j - cen) mod N per frequency. */
static int low_dft_sparse(const double *p, ptrdiff_t n, ptrdiff_t nnz, int64_t c0, int64_t N, const double *c,
                          const double *s, ptrdiff_t k, double *X, long double *XL)
{
    ptrdiff_t nblk = (n + LOWDFT_BLOCK - 1) / LOWDFT_BLOCK;
    int64_t *t = (int64_t *)malloc((size_t)(nnz > 0 ? nnz : 1) * 2 * sizeof(int64_t));
    double *pv = (double *)malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof(double));
    ptrdiff_t *blk = (ptrdiff_t *)malloc((size_t)(nblk + 1) * sizeof(ptrdiff_t));
    if (!t || !pv || !blk) {
        free(t);
        free(pv);
        free(blk);
        return FPLD_ENOMEM;
    }
    int64_t *cur = t + (nnz > 0 ? nnz : 1);
    ptrdiff_t i = 0;
    for (ptrdiff_t b = 0; b < nblk; ++b) {
        blk[b] = i;
        ptrdiff_t hi = (b + 1) * LOWDFT_BLOCK < n ? (b + 1) * LOWDFT_BLOCK : n;
        for (ptrdiff_t j = b * LOWDFT_BLOCK; j < hi; ++j) {
            if (p[j] != 0.0) {
                int64_t r = (c0 + (int64_t)j) % N;
                t[i] = r;
                cur[i] = 0; /* (frequency 0) */
                pv[i] = p[j];
                ++i;
            }
        }
    }
    blk[nblk] = i;
    for (ptrdiff_t f = 0; f < k; f += 2) {
        int two = f + 1 < k;
        long double re0 = 0.0L, im0 = 0.0L, re1 = 0.0L, im1 = 0.0L;
        for (ptrdiff_t b = 0; b < nblk; ++b) {
            long double br0 = 0.0L, bi0 = 0.0L, br1 = 0.0L, bi1 = 0.0L;
            for (ptrdiff_t a = blk[b]; a < blk[b + 1]; ++a) {
                int64_t r0 = cur[a], r1 = r0 + t[a];
                if (r1 >= N)
                    r1 -= N;
                long double pj = (long double)pv[a];
                br0 += pj * (long double)c[r0];
                bi0 -= pj * (long double)s[r0];
                br1 += pj * (long double)c[r1];
                bi1 -= pj * (long double)s[r1];
                r1 += t[a];
                if (r1 >= N)
                    r1 -= N;
                cur[a] = r1;
            }
            re0 += br0;
            im0 += bi0;
            re1 += br1;
            im1 += bi1;
        }
        low_dft_store(X, XL, f, two, re0, im0, re1, im1);
    }
    free(t);
    free(pv);
    free(blk);
    return FPLD_OK;
}

int fpld_low_dft(const double *p, ptrdiff_t n, int64_t cen, int64_t N, const double *c, const double *s, double m,
                 double g, double tau, ptrdiff_t kmax, double *X, long double *XL, ptrdiff_t *K)
{
    if (n < 1 || N < 2 || N > ((int64_t)1 << 31) || kmax < 1 || !(m >= 1) || !(g >= 0) || !(tau >= 0))
        return FPLD_EINVAL;
    ptrdiff_t F = (ptrdiff_t)(N / 2 + 1), kend = kmax < F ? kmax : F, k = 1;
    /* the prefix: past it the FFT's own error, m g (|X| + g)^(m - 1) per frequency, is at most tau */
    while (k < kend) {
        double r = sqrt(X[2 * k] * X[2 * k] + X[2 * k + 1] * X[2 * k + 1]);
        if (m * g * pow(r + g, m - 1.0) <= tau)
            break;
        ++k;
    }
    *K = k;
    int64_t c0 = low_dft_origin(cen, N);
    ptrdiff_t nnz = 0;
    for (ptrdiff_t j = 0; j < n; ++j)
        nnz += p[j] != 0.0;
    if (4 * nnz <= 3 * n)
        return low_dft_sparse(p, n, nnz, c0, N, c, s, k, X, XL);
    /* two frequencies at a time: four independent long double sums the FPU overlaps (each the same sequence of
     * roundings as alone) */
    for (ptrdiff_t f = 0; f < k; f += 2) {
        int two = f + 1 < k;
        int64_t s0 = (int64_t)f % N, s1 = (int64_t)(f + 1) % N;
        int64_t r0 = (c0 * s0) % N, r1 = two ? (c0 * s1) % N : 0; /* (< 2^62: N <= 2^31) */
        long double re0 = 0.0L, im0 = 0.0L, re1 = 0.0L, im1 = 0.0L;
        for (ptrdiff_t a = 0; a < n; a += LOWDFT_BLOCK) {
            ptrdiff_t b = a + LOWDFT_BLOCK < n ? a + LOWDFT_BLOCK : n;
            long double br0 = 0.0L, bi0 = 0.0L, br1 = 0.0L, bi1 = 0.0L;
            for (ptrdiff_t j = a; j < b; ++j) {
                long double pj = (long double)p[j];
                br0 += pj * (long double)c[r0];
                bi0 -= pj * (long double)s[r0];
                br1 += pj * (long double)c[r1];
                bi1 -= pj * (long double)s[r1];
                r0 += s0;
                if (r0 >= N)
                    r0 -= N;
                r1 += s1;
                if (r1 >= N)
                    r1 -= N;
            }
            re0 += br0;
            im0 += bi0;
            re1 += br1;
            im1 += bi1;
        }
        low_dft_store(X, XL, f, two, re0, im0, re1, im1);
    }
    return FPLD_OK;
}

int fpld_dft_at(const double *p, ptrdiff_t n, int64_t cen, int64_t N, const double *c, const double *s, int64_t k,
                double *out)
{
    if (n < 1 || N < 2 || N > ((int64_t)1 << 31) || k < 0)
        return FPLD_EINVAL;
    int64_t st = k % N, r = low_dft_origin(cen, N) * st % N; /* (< 2^62: N <= 2^31) */
    double re = 0.0, im = 0.0;
    for (ptrdiff_t j = 0; j < n; ++j) {
        if (p[j] != 0.0) {
            re += p[j] * c[r];
            im -= p[j] * s[r];
        }
        r += st;
        if (r >= N)
            r -= N;
    }
    out[0] = re;
    out[1] = im;
    return FPLD_OK;
}
