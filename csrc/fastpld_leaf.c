/* Leaf kernels (see fastpld_leaf.h); numpy references: fastpld._kernels.psg_eval / psg_moments. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "fastpld_kernels.h"
#include "fastpld_leaf.h"
#include "fastpld_npops.h"

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

/* g^-1(t) = log(e^t - 1 + q) - log q and dl/dt = e^t / (e^t - 1 + q) for every double t, the operations of
 * _kernels.subsampled_ginv: t > PSG_BIG_T (e^t overflows at 709.78): t - log q and 1 (exact but for terms
 * below 1e-304); 0 <= t <= PSG_BIG_T: log(expm1(t) + q) - log q; t < 0: e^t - 1 + q = (1 - q) expm1(d)
 * with d = t - log(1 - q) (expm1(t) + q cancels near the support's end), l = log(1 - q) + log(expm1(d))
 * - log q and dl/dt = (expm1(d) + 1) / expm1(d).  em1 is expm1(t) (0 <= t <= PSG_BIG_T) or expm1(d). */
#define PSG_BIG_T 700.0
static inline double psg_em1(double tt, double ylo)
{
    if (tt >= 0)
        return expm1(tt > PSG_BIG_T ? PSG_BIG_T : tt);
    return expm1(tt - ylo); /* (NaN stays NaN) */
}

static inline double psg_l(double tt, double em1, double q, double logq, double ylo)
{
    if (tt > PSG_BIG_T)
        return tt - logq;
    if (tt >= 0)
        return log(em1 + q) - logq;
    if (tt < 0)
        return em1 > 0 ? (ylo + log(em1)) - logq : -INFINITY;
    return tt; /* NaN */
}

static inline double psg_dl(double tt, double em1, double q)
{
    if (tt > PSG_BIG_T)
        return 1.0;
    if (tt >= 0)
        return (em1 + 1.0) / (em1 + q);
    return (em1 + 1.0) / em1;
}

/* The density of Y at tt = +-t (the sign of the direction) from psg_em1 / psg_l's em1 and l: the
 * normal densities of L times dl/dt (0 where that is not finite). */
static inline double psg_density_dl(double dl, double l, double q, double h, double sd, double cden, int remove)
{
    double zp = (l + h) / sd, dens;
    double dp = exp(-0.5 * zp * zp) * cden;
    if (remove) {
        double zq = (l - h) / sd;
        dens = ((1 - q) * dp + q * (exp(-0.5 * zq * zq) * cden)) * dl;
    } else {
        dens = dp * dl;
    }
    return isfinite(dens) ? dens : 0.0;
}

static inline double psg_density(double tt, double em1, double l, double q, double h, double sd, double cden,
                                 int remove)
{
    return psg_density_dl(psg_dl(tt, em1, q), l, q, h, sd, cden, remove); /* dl/dt = e^t / (e^t - 1 + q) */
}

/* A bound on the relative error of psg_density's value (the computed l and dl = dl/dt at a point whose t is within
 * delta of the exact node's), against the exact density at that node (numpy reference:
 * fastpld._reference.psg_density_rel, the same formula; docs/dominance.md, "The density's rounding").  l is
 * within Dl = 10 u (1 + 2 |l| + 2 |log q| + 2 |log(1 - q)|) + dl delta of the exact l (the rounded logs, expm1
 * and sums: each libm call within 4 ulp; the node's shift through dl/dt), so each normal argument z within
 * Dl / sd, which moves exp(-z^2 / 2) by |z| Dl / sd in log; z's own rounding and its square's 2.5 u z^2, and
 * sd = sqrt(v) rounded against 1 / sigma 1.5 u z^2 more, exp and the products 24 u; dl/dt's 11 u and, through the
 * shift, |dl - 1| delta (d log(dl/dt) / dt = 1 - dl/dt); the mixture 4 u.  Z = (|l| + v / 2) / sd bounds both
 * normal arguments.  The sum x bounds the log of the ratio: relative x (1 + x) for x < 1/2, else infinite.  lq:
 * |log q| + |log(1 - q)|; isd: 1 / sd (its rounding, and the products', are far inside the 1e-6 margin). */
static inline double psg_density_rel(double l, double dl, double delta, double lq, double v, double isd)
{
    const double u = 0x1p-53;
    double al = fabs(l), z = (al + 0.5 * v) * isd;
    double dlz = 10 * u * (1 + 2 * al + 2 * lq) + fabs(dl) * delta;
    double x = (z * dlz * isd + (4 * z * z + 40) * u + fabs(dl - 1.0) * delta) * (1 + 1e-6);
    return x < 0.5 ? x * (1 + x) : INFINITY;
}

/* A 5-point node's terms of int f, int (1 - e^-t) f and int e^-t f (fw times the weights wn, wb) times their
 * relative error bound e into E, plus wt, the weights' absolute error times |fw|, for the last two (numpy reference:
 * fastpld.dominance.rules._error_terms) */
static inline void add_error_terms(double *E, double fw, double wn, double wb, double e, double wt)
{
    E[0] += fabs(fw) * e;
    E[1] += fabs(fw * wn) * e + wt;
    E[2] += fabs(fw * wb) * e + wt;
}

int fpld_psg_eval(const double *t, ptrdiff_t n, double q, double v, double sd, int remove,
                  double *F, double *S, double *pdf)
{
    if (n < 0 || !(q > 0 && q < 1) || !(v > 0) || !(sd > 0))
        return FPLD_EINVAL;
    double logq = log(q), ylo = log1p(-q), h = v / 2, cden = 1.0 / (sd * 2.5066282746310002);
    for (ptrdiff_t i = 0; i < n; i++) {
        double ti = t[i], tt = remove ? ti : -ti;
        double em1 = psg_em1(tt, ylo);
        double l = psg_l(tt, em1, q, logq, ylo); /* SubsampledLoss._ginv */
        double zp = (l + h) / sd;
        if (F || S) { /* (the normal probabilities only where asked: the density alone costs a third) */
            double pl, pu, f, s;
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
        }
        if (pdf)
            pdf[i] = psg_density(tt, em1, l, q, h, sd, cden, remove);
    }
    return FPLD_OK;
}

/* The mass between the support end log(1 - q) (remove: the lower end; add: the upper one) and the point at
 * distance d > 0 from it, as fpld_psg_eval's F (remove) or S (add) there but with expm1(d) for expm1(tt - ylo):
 * the point itself rounds to within an ulp of the end's magnitude.  *rel: a bound on its relative error.  l is
 * within dl = 10 u (|log(1 - q)| + |log expm1(d)| + |log q| + v / 2 + 1) of the exact l at d (expm1, the logs and
 * sums, each libm call within 4 ulp), so each normal argument z within dl / sd, which moves Phi(z) by at most
 * (|z| + 1) dl / sd of itself (phi / Phi <= |z| + 1); z's own rounding 2 u |z| (|z| + 1), erfc's argument z / sqrt 2
 * rounded (~z^2 u), erfc itself and the mixture's sum 24 u.  For d >= -log(1 - q) (tt >= 0) the
 * point's own value is exact enough: fpld_psg_eval at it, within cre (the loss's cdf_rel_error) each. */
static double psg_end_tail(double d, double s_end, int side, double q, double v, double sd, int remove, double cre,
                           double *rel)
{
    const double u = 0x1p-53;
    double ylo = log1p(-q);
    if (!(d < -ylo)) {
        double y = side == 0 ? s_end + d : s_end - d, F, S;
        *rel = 16 * cre;
        if (fpld_psg_eval(&y, 1, q, v, sd, remove, &F, &S, NULL) != FPLD_OK)
            return NAN;
        return side == 0 ? F : S;
    }
    double em1 = expm1(d), h = v / 2, lem = log(em1), logq = log(q);
    double l = em1 > 0 ? (ylo + lem) - logq : -INFINITY;
    double dl = 10 * u * (fabs(ylo) + fabs(lem) + fabs(logq) + h + 1) / sd, zp = (l + h) / sd, zq = (l - h) / sd;
    double pl, pu;
    ndtr_pair(zp, &pl, &pu);
    if (remove) {
        double ql, qu, z = np_maximum(fabs(zp), fabs(zq));
        ndtr_pair(zq, &ql, &qu);
        *rel = (z + 1) * dl + (3 * z * z + 2 * z + 24) * u;
        return (1 - q) * pl + q * ql;
    }
    *rel = (fabs(zp) + 1) * dl + (3 * zp * zp + 2 * fabs(zp) + 24) * u;
    return pl;
}

/* The dominance leaf's panel rules (numpy reference: fastpld.dominance.rules._panels, the same operations per
 * term; the sums' order may differ, within the 16 u I5 rounding term of the error bounds).  The density
 * of fpld_psg_eval at y = lo_i + t, t = c0_i + half_i (1 + x_j), half_i = (c1_i - c0_i) / 2, for the
 * 5-point rule (x5, w5): I5 of int f, int (1 - e^-t) f and int e^-t f; out = {a, a_err, n, n_err, b, b_err}
 * (each n values) with err = R + 16 u I5, R the rule's proved truncation error (below); eout (3 n,
 * unless NULL) = the 5-point terms' sums weighted by their relative error bounds (the density's, psg_density_rel,
 * and the weights'), added to the errors by the caller once the rules are chosen (refining cannot reduce them). */
/* The rules' truncation error, proved (docs/dominance.md, "The rules' truncation error"; numpy reference:
 * fastpld.dominance.rules._psg_truncation, the same operations).  The 5-point Gauss-Legendre rule on a panel of
 * width W errs by W^11 (5!)^4 / (11 (10!)^3) |F^(10)(xi)| at most, and Cauchy's estimate bounds F^(10) by
 * 10! M / r^10, M the largest |F| on the stadium of radius r about the panel (in tt = +-y: [A, B]).  There, with
 * gap = A - log(1 - q) and r <= gap / 2, |(1 - q) e^-tau| <= alpha = e^-(gap - r) < 1, so l(tau) = log(e^tau - 1 + q)
 * - log q is analytic with |l'| <= Lp = 1 / (1 - alpha), and within D = Lp r of l at the nearest point t0 of
 * [A, B]; a normal factor exp(-(l - mu)^2 / 2v) is then at most exp((-x^2 + 2 x D + D^2) / 2v) with x = |l(t0) -
 * mu|, whose largest value over the panel is at x = D clamped to the range of |l - mu| over it (widened by l's
 * rounding).  The weights 1 - e^-t and e^-t (t = y - lo, c0 <= Re t <= c1) are at most e^(c1 + r) - 1 and
 * e^(r - c0) there.  r: the minimiser of -10 log r + x D / v + D^2 / 2v with Lp at r = 0, halved and doubled,
 * at most gap / 2 and 1; any r gives a bound.  R[3]: the bounds of the three integrals (infinite where the panel
 * reaches the support's end). */
#define GL5_CAUCHY 1.4316e-6 /* (5!)^4 10! / (11 (10!)^3) = 1.43155e-6, rounded up */
static inline double cauchy_wr10(double W, double r)
{
    double wr = W / r, wr2 = wr * wr;
    return wr2 * wr2 * wr2 * wr2 * wr2;
}

/* The rules' bounds R[3] of a lattice panel from best, the bound of int f at radius rb: the weights 1 - e^-t and
 * e^-t are at most e^(c1 + rb) - 1 and e^(rb - c0) on the stadium (0 on an empty panel) */
static inline void lattice_weights(double best, double rb, double W, double c0, double c1, double *R)
{
    if (!(W > 0)) {
        R[0] = R[1] = R[2] = 0.0;
        return;
    }
    R[0] = best;
    R[1] = best * expm1(c1 + rb) * (1 + 1e-6);
    R[2] = best * exp(rb - c0) * (1 + 1e-6);
}
static inline double psg_gauss_sup(double la, double lb, double D, double v)
{
    double mn = (la <= 0 && lb >= 0) ? 0.0 : fmin(fabs(la), fabs(lb)), mx = fmax(fabs(la), fabs(lb));
    double x = D < mn ? mn : (D > mx ? mx : D);
    return exp((-x * x + 2 * x * D + D * D) / (2 * v));
}

/* The largest |l - mu| over the panel for the normal factors' means mu = -v/2 (and v/2: remove), l in [lA, lB] */
static inline double psg_reach(double lA, double lB, double v, int remove)
{
    double h = v / 2, x = fmax(fabs(lA + h), fabs(lB + h));
    return remove ? fmax(x, fmax(fabs(lA - h), fabs(lB - h))) : x;
}

/* Cauchy's bound at radius r on a panel of width W: 1.4316e-6 W (W / r)^10 M, M = cden jac ((1 - q) G(-v/2) +
 * q G(v/2)) (remove; add: G(-v/2)), G the normal factors' largest values with l within D of [lA, lB] and jac the
 * bound of the Jacobian (Lp, Gp) */
static inline double psg_cauchy(double W, double r, double lA, double lB, double D, double jac, double q, double v,
                                double cden, int remove)
{
    double h = v / 2;
    double M = remove ? (1 - q) * psg_gauss_sup(lA + h, lB + h, D, v) + q * psg_gauss_sup(lA - h, lB - h, D, v)
                      : psg_gauss_sup(lA + h, lB + h, D, v);
    return GL5_CAUCHY * W * cauchy_wr10(W, r) * (M * cden * jac);
}

void fpld_psg_rule_bound(double lo, double c0, double c1, double q, double v, double sd, double logq, double ylo,
                         int remove, double *R)
{
    const double u = 0x1p-53;
    double W = c1 - c0;
    R[0] = R[1] = R[2] = 0.0;
    if (!(W > 0))
        return;
    double ya = lo + c0, yb = lo + c1, A = remove ? ya : -yb, B = remove ? yb : -ya;
    /* (a lower bound on the exact gap: A and log(1 - q) each within a few ulp) */
    double gap = (A - ylo) - 8 * u * (fabs(A) + fabs(ylo));
    double lA = psg_l(A, psg_em1(A, ylo), q, logq, ylo), lB = psg_l(B, psg_em1(B, ylo), q, logq, ylo);
    if (!(gap > 0) || !isfinite(lA) || !isfinite(lB) || !(W < 1e300)) {
        R[0] = R[1] = R[2] = INFINITY;
        return;
    }
    /* l's rounding (psg_density_rel's 10 u (1 + 2 |l| + 2 |log q| + 2 |log(1 - q)|), doubled) widens its range */
    double lq = fabs(logq) + fabs(ylo);
    lA -= 20 * u * (1 + 2 * fabs(lA) + 2 * lq);
    lB += 20 * u * (1 + 2 * fabs(lB) + 2 * lq);
    double cden = 1.0 / (sd * 2.5066282746310002), x = psg_reach(lA, lB, v, remove);
    double lp0 = 1.0 / -expm1(-gap), cap = fmin(0.5 * gap, 1.0);
    double r0 = fmin((-x + sqrt(x * x + 40 * v)) / (2 * lp0), cap), best = INFINITY, rb = 0.0;
    for (int k = 0; k < 3; k++) {
        double r = k == 0 ? r0 : (k == 1 ? 0.5 * r0 : fmin(2 * r0, cap));
        if (!(r > 0))
            continue;
        double lp = 1.0 / -expm1(-(gap - r));
        double Rk = psg_cauchy(W, r, lA, lB, lp * r, lp, q, v, cden, remove);
        if (Rk < best) {
            best = Rk;
            rb = r;
        }
    }
    if (!(best < INFINITY)) {
        R[0] = R[1] = R[2] = INFINITY;
        return;
    }
    /* (1e-6: this evaluation's own rounding, a few dozen u, and the exponent's, relative ~ u |exponent|) */
    lattice_weights(best * (1 + 1e-6), rb, W, c0, c1, R);
}

/* One loss's density at a 5-point node y (tn: its offset from the panel's start, c0 <= tn) and, where rel is not
 * NULL and the density not 0, the relative error bound of the computed value against the exact density at the exact
 * node (the node within u (|y| + 4 tn) of it); and its rules' proved truncation bound R[3] on a panel */
typedef double (*panel_density_fn)(const void *par, double y, double tn, double *rel);
typedef void (*panel_bound_fn)(const void *par, double lo, double c0, double c1, double *R);

/* The 5-point rules on the panels [lo_i + c0_i, lo_i + c1_i] of one loss's density (fpld_psg_panels and the others:
 * the same loop, the loss's density, error bound and proved truncation bound passed in): out[6 n] = {a, a_err, n,
 * n_err, b, b_err} with err = R + 16 u I5; eout[3 n] (unless NULL) the 5-point terms' sums weighted by their
 * relative error bounds, the weights' 12 u and their move by the rounded tn (e^-t 4 u tn, absolute: 1 - e^-t is
 * small near tn = 0) included */
static void panels_run(const double *lo, const double *c0, const double *c1, ptrdiff_t n, const double *x5,
                       const double *w5, const void *par, panel_density_fn density, panel_bound_fn bound,
                       double *out, double *eout)
{
    const double u = 0x1p-53;
    /* e^-t and -expm1(-t) per node, kept while consecutive panels share (c0, c1) (most do) */
    double kc0 = NAN, kc1 = NAN, em[5], ex[5], tn[5];
    for (ptrdiff_t i = 0; i < n; i++) {
        double half = 0.5 * (c1[i] - c0[i]);
        if (!(c0[i] == kc0 && c1[i] == kc1)) {
            kc0 = c0[i];
            kc1 = c1[i];
            for (int j = 0; j < 5; j++) {
                tn[j] = c0[i] + half * (1.0 + x5[j]);
                em[j] = -expm1(-tn[j]);
                ex[j] = exp(-tn[j]);
            }
        }
        double I[3] = {0, 0, 0}, E[3] = {0, 0, 0};
        for (int j = 0; j < 5; j++) {
            double rel = 0.0;
            double dens = density(par, lo[i] + tn[j], tn[j], eout ? &rel : NULL);
            double fw = (dens * half) * w5[j];
            I[0] += fw;
            I[1] += fw * em[j];
            I[2] += fw * ex[j];
            if (eout && fw != 0)
                add_error_terms(E, fw, em[j], ex[j], rel + 12 * u, fabs(fw) * ex[j] * (4 * u * tn[j]));
        }
        /* the 5-point rule's truncation error, proved (the choices read it: where it is loose -- near the support's
         * end -- they refine or take the log-distance rules) */
        double Rt[3];
        bound(par, lo[i], c0[i], c1[i], Rt);
        for (int m = 0; m < 3; m++) {
            out[2 * m * n + i] = I[m];
            out[(2 * m + 1) * n + i] = Rt[m] + 16 * u * I[m];
            if (eout)
                eout[m * n + i] = E[m];
        }
    }
}

/* The subsampled Gaussian's density and bounds for panels_run */
struct psg_par {
    double q, v, sd, logq, ylo, h, cden, lq, isd;
    int remove;
};

static double psg_panel_density(const void *vp, double y, double tn, double *rel)
{
    const struct psg_par *P = vp;
    const double u = 0x1p-53;
    double tt = P->remove ? y : -y;
    double em1 = psg_em1(tt, P->ylo), l = psg_l(tt, em1, P->q, P->logq, P->ylo), dl = psg_dl(tt, em1, P->q);
    double dens = psg_density_dl(dl, l, P->q, P->h, P->sd, P->cden, P->remove);
    if (rel && dens != 0) {
        /* for t below 0 the argument t - log(1 - q) of expm1 within u |t - log(1 - q)| + 8 u |log(1 - q)| */
        double delta = u * (fabs(y) + 4 * tn) + (tt < 0 ? u * fabs(tt - P->ylo) + 8 * u * fabs(P->ylo) : 0.0);
        *rel = psg_density_rel(l, dl, delta, P->lq, P->v, P->isd);
    }
    return dens;
}

static void psg_panel_bound(const void *vp, double lo, double c0, double c1, double *R)
{
    const struct psg_par *P = vp;
    fpld_psg_rule_bound(lo, c0, c1, P->q, P->v, P->sd, P->logq, P->ylo, P->remove, R);
}

int fpld_psg_panels(const double *lo, const double *c0, const double *c1, ptrdiff_t n, double q, double v,
                    double sd, int remove, const double *x5, const double *w5, double *out, double *eout)
{
    if (n < 0 || !(q > 0 && q < 1) || !(v > 0) || !(sd > 0))
        return FPLD_EINVAL;
    struct psg_par P = {q, v, sd, log(q), log1p(-q), v / 2, 1.0 / (sd * 2.5066282746310002), 0.0, 1.0 / sd, remove};
    P.lq = fabs(P.logq) + fabs(P.ylo);
    panels_run(lo, c0, c1, n, x5, w5, &P, psg_panel_density, psg_panel_bound, out, eout);
    return FPLD_OK;
}

/* The Gaussian loss N(m, s^2)'s panel rules (numpy reference: fastpld.dominance.rules._panels with
 * fastpld.mechanisms.GaussianLoss.pdf and pdf_error and fastpld.dominance.rules._gauss_truncation; the same
 * operations in the same order, libm's exp and expm1 in place of numpy's).  mu_rel: the merged Gaussians' parameter
 * uncertainty (GaussianLoss._param_shift), 0 for one mechanism's loss. */
void fpld_gauss_rule_bound(double lo, double c0, double c1, double m, double s, double *R)
{
    const double u = 0x1p-53;
    double W = c1 - c0;
    double ya = lo + c0, yb = lo + c1;
    /* (the panel's ends against m, widened by their rounding and m's) */
    double la = (ya - m) - 4 * u * (fabs(ya) + fabs(m)), lb = (yb - m) + 4 * u * (fabs(yb) + fabs(m));
    double v = s * s, cden = 1.0 / (s * 2.5066282746310002);
    double x = fmax(fabs(la), fabs(lb)), xv = x + v;
    double r0 = 20 * v / (xv + sqrt(xv * xv + 40 * v)), best = INFINITY, rb = 0.0, tot = INFINITY;
    for (int k = 0; k < 3; k++) {
        double r = k == 0 ? r0 : (k == 1 ? 0.5 * r0 : 2 * r0);
        if (!(r > 0))
            continue;
        double Rk = GL5_CAUCHY * W * cauchy_wr10(W, r) * (cden * psg_gauss_sup(la, lb, r, v));
        double t = Rk * (exp(c1 + r) + exp(r - c0)); /* (R[0] + R[1] + R[2] before their 1e-6: lattice_weights) */
        if (t < tot) {
            best = Rk;
            rb = r;
            tot = t;
        }
    }
    lattice_weights(best < INFINITY ? best * (1 + 1e-6) : INFINITY, rb, W, c0, c1, R);
}

/* The Gaussian's density (GaussianLoss.pdf) and error bound (GaussianLoss.pdf_error) for panels_run */
struct gauss_par {
    double m, s, mu_rel, snorm, am;
};

static double gauss_panel_density(const void *vp, double y, double tn, double *rel)
{
    const struct gauss_par *P = vp;
    const double u = 0x1p-53;
    double z = (y - P->m) / P->s;
    double dens = exp(-0.5 * z * z) / P->snorm;
    if (rel && dens != 0) {
        double za = fabs(z), dt = u * (fabs(y) + 4 * tn);
        double a = (dt + u * P->am) / P->s, xl;
        if (P->mu_rel > 0) {
            /* (the parameter's uncertainty: a point within GaussianLoss._param_shift more, the scale 1.01 r) */
            a = a + (1.02 * P->mu_rel * (fabs(y - P->m) + 2 * P->am)) / P->s;
            xl = (2.5 * za * za + 16) * u + za * a + 0.5 * a * a + 1.01 * P->mu_rel;
        } else {
            xl = (2.5 * za * za + 16) * u + za * a + 0.5 * a * a;
        }
        xl *= 1 + 1e-6;
        *rel = xl < 0.5 ? xl * (1 + xl) : INFINITY;
    }
    return dens;
}

static void gauss_panel_bound(const void *vp, double lo, double c0, double c1, double *R)
{
    const struct gauss_par *P = vp;
    fpld_gauss_rule_bound(lo, c0, c1, P->m, P->s, R);
}

int fpld_gauss_panels(const double *lo, const double *c0, const double *c1, ptrdiff_t n, double m, double s,
                      double mu_rel, const double *x5, const double *w5, double *out, double *eout)
{
    if (n < 0 || !(s > 0) || !(mu_rel >= 0))
        return FPLD_EINVAL;
    struct gauss_par P = {m, s, mu_rel, s * 2.5066282746310002, fabs(m)};
    panels_run(lo, c0, c1, n, x5, w5, &P, gauss_panel_density, gauss_panel_bound, out, eout);
    return FPLD_OK;
}

/* The Poisson-subsampled Laplace loss's panel rules (numpy reference: fastpld.dominance.rules._panels with
 * SubsampledLoss.pdf and pdf_error of the Laplace pair, and fastpld.dominance.rules._psl_truncation; the same
 * operations in the same order, libm's exp, expm1 and log in place of numpy's).  e0: the pair's eps0; l = g^-1(+-y)
 * and dl/dy as for the subsampled Gaussian (psg_em1, psg_l, psg_dl: _kernels.subsampled_ginv's operations). */
static inline double psl_pair_pdf(double l, double e, int which_q)
{
    if (!(l > -e && l < e)) /* (inside, the reference's clip to [-e, e] leaves l as it is) */
        return 0.0;
    return which_q ? 0.25 * exp((l - e) / 2) : 0.25 * exp(-(l + e) / 2);
}

/* _psl_sup: the largest |f| where Re tau <= tau_max and tau lies gap above log(1 - q) */
static inline double psl_sup(double e0, double q, int remove, double tau_max, double gap)
{
    double wmin = (1.0 - q) * expm1(gap) / q * (1 - 1e-9);
    double dens = remove ? (1 - q) * pow(wmin, -1.5) + q * pow(wmin, -0.5) : pow(wmin, -1.5);
    return 0.25 * exp(-e0 / 2) / q * exp(tau_max) * dens;
}

void fpld_psl_rule_bound(double lo, double c0, double c1, double e0, double q, int remove, double ylo, double *R)
{
    const double u = 0x1p-53;
    double W = c1 - c0, ya = lo + c0, yb = lo + c1, A = remove ? ya : -yb, B = remove ? yb : -ya;
    double gap = (A - ylo) - 8 * u * (fabs(A) + fabs(ylo)), best = INFINITY, rb = 0.0;
    int bad = !(gap > 0) || !(W < 1e300);
    static const double fr[3] = {0.25, 0.5, 0.75};
    for (int k = 0; k < 3; k++) {
        double r = fmin(fr[k] * gap, 1.0);
        if (!(r > 0))
            continue;
        double Rk = GL5_CAUCHY * W * cauchy_wr10(W, r) * psl_sup(e0, q, remove, B + r, gap - r);
        if (Rk < best) {
            best = Rk;
            rb = r;
        }
    }
    lattice_weights((bad || !(best < INFINITY)) ? INFINITY : best * (1 + 1e-6), rb, W, c0, c1, R);
}

/* The subsampled Laplace's density (SubsampledLoss.pdf) and error bound (SubsampledLoss.pdf_error: the Laplace pair's
 * slope 1/2 and operations (|l| + e0) u / 2 + 9 u) for panels_run */
struct psl_par {
    double e0, q, logq, ylo, lq;
    int remove;
};

static double psl_panel_density(const void *vp, double y, double tn, double *rel)
{
    const struct psl_par *P = vp;
    const double u = 0x1p-53;
    double tt = P->remove ? y : -y, q = P->q;
    double em1 = psg_em1(tt, P->ylo), l = psg_l(tt, em1, q, P->logq, P->ylo), dl = psg_dl(tt, em1, q);
    double dens = P->remove ? ((1 - q) * psl_pair_pdf(l, P->e0, 0) + q * psl_pair_pdf(l, P->e0, 1)) * dl
                            : psl_pair_pdf(l, P->e0, 0) * dl;
    if (!isfinite(dens))
        dens = 0.0;
    if (rel && dens != 0) {
        double delta = u * (fabs(y) + 4 * tn) + (tt < 0 ? u * fabs(tt - P->ylo) + 8 * u * fabs(P->ylo) : 0.0);
        double dlz = 10 * u * (1 + 2 * fabs(l) + 2 * P->lq) + fabs(dl) * delta;
        double ops = (0.5 * (fabs(l) + P->e0) + 9) * u;
        double xl = (0.5 * dlz + ops + 15 * u + fabs(dl - 1.0) * delta) * (1 + 1e-6);
        *rel = xl < 0.5 ? xl * (1 + xl) : INFINITY;
    }
    return dens;
}

static void psl_panel_bound(const void *vp, double lo, double c0, double c1, double *R)
{
    const struct psl_par *P = vp;
    fpld_psl_rule_bound(lo, c0, c1, P->e0, P->q, P->remove, P->ylo, R);
}

int fpld_psl_panels(const double *lo, const double *c0, const double *c1, ptrdiff_t n, double e0, double q,
                    int remove, const double *x5, const double *w5, double *out, double *eout)
{
    if (n < 0 || !(q > 0 && q < 1) || !(e0 > 0))
        return FPLD_EINVAL;
    struct psl_par P = {e0, q, log(q), log1p(-q), 0.0, remove};
    P.lq = fabs(P.logq) + fabs(P.ylo);
    panels_run(lo, c0, c1, n, x5, w5, &P, psl_panel_density, psl_panel_bound, out, eout);
    return FPLD_OK;
}

/* The same in u = log(distance to the end), for fpld_psg_logpanels (numpy reference: fastpld.dominance.rules.
 * _psg_log_truncation): the panel [bot, top] of u - log dfar, the distance d = dfar e^u, the offset t = end + sgn d
 * from lo.  In tt = +-y, tt = log(1 - q) + d, so l = log(1 - q) - log q + log(expm1(d)) and the integrand in u is
 * C(l) g(d) with g(d) = dl/du = d / (1 - e^-d).  On the stadium of radius rho <= 1 about the panel, |arg d| <= rho
 * and |d| <= dmax = dfar e^(top + rho), so Re d >= |d| cos rho > 0: expm1(d) has no zero there, l is analytic, and
 * |1 - e^-d| >= 1 - e^-Re d gives |g| <= Gp = dmax / (1 - e^-(dmax cos rho)) (increasing in |d|).  So l lies within
 * D = rho Gp of its value at the nearest point of the panel, and the normal factors are bounded as on the plain
 * panels, M <= Gp cden ((1 - q) G(-v/2) + q G(v/2)).  The weights: |t| <= |end| + dmax and Re t >= end - dmax, so
 * |1 - e^-t| <= e^(|end| + dmax) - 1 and |e^-t| <= e^(dmax - end).  rho: as r on the plain panels, with g at the
 * panel's top for Lp, at most 1. */
/* (lA, lB: l at the distances dfar e^bot and dt = dfar e^top, (log(1 - q) + log(expm1(d))) - log q, which the panels
 * of a cell share at their common ends) */
static void psg_logrule_bound(double dfar, double bot, double top, double dt, double lA, double lB, double end,
                              double q, double v, double sd, double logq, double ylo, int remove, double *R)
{
    const double u = 0x1p-53;
    double W = top - bot;
    R[0] = R[1] = R[2] = 0.0;
    if (!(W > 0))
        return;
    double lq = fabs(logq) + fabs(ylo);
    double g0 = dt / -expm1(-dt);
    if (!isfinite(lA) || !isfinite(lB) || !(g0 < INFINITY) || !(dfar > 0)) {
        R[0] = R[1] = R[2] = INFINITY;
        return;
    }
    /* (l's rounding, doubled, and d's own -- within u (|u| + 6) relative, which moves l by g times it) */
    lA -= 20 * u * (1 + 2 * fabs(lA) + 2 * lq) + g0 * u * (fabs(bot) + fabs(top) + 6);
    lB += 20 * u * (1 + 2 * fabs(lB) + 2 * lq) + g0 * u * (fabs(bot) + fabs(top) + 6);
    double cden = 1.0 / (sd * 2.5066282746310002), x = psg_reach(lA, lB, v, remove);
    /* (one radius: these panels are many, a cell's up to 360) */
    double r = fmin((-x + sqrt(x * x + 40 * v)) / (2 * g0), 1.0), best = INFINITY, dbest = 0.0;
    if (r > 0) {
        double dmax = dfar * exp(top + r), gp = dmax / -expm1(-dmax * cos(r));
        best = psg_cauchy(W, r, lA, lB, r * gp, gp, q, v, cden, remove);
        dbest = dmax;
    }
    if (!(best < INFINITY)) {
        R[0] = R[1] = R[2] = INFINITY;
        return;
    }
    best *= 1 + 1e-6;
    R[0] = best;
    R[1] = best * expm1(fabs(end) + dbest) * (1 + 1e-6);
    R[2] = best * exp(dbest - end) * (1 + 1e-6);
}

int fpld_psg_logpanels(const double *lo, const double *end, const double *dfar, const double *ulo,
                       const double *steps, ptrdiff_t n, double sgn, double q, double v, double sd, int remove,
                       const double *x5, const double *w5, double *out)
{
    if (n < 0 || !(q > 0 && q < 1) || !(v > 0) || !(sd > 0) || !(sgn == 1.0 || sgn == -1.0))
        return FPLD_EINVAL;
    const double u = 0x1p-53;
    double logq = log(q), ylo = log1p(-q), h = v / 2, cden = 1.0 / (sd * 2.5066282746310002);
    double lq = fabs(logq) + fabs(ylo), isd = 1.0 / sd;
    for (ptrdiff_t i = 0; i < n; i++) {
        double reach = -ulo[i], step = steps[i];
        if (!(step > 0) || !(reach >= 0) || !(reach <= 1e6 * step) || !(dfar[i] > 0))
            return FPLD_EINVAL;
        double np = ceil(reach / step);
        ptrdiff_t npan = np < 1 ? 1 : (ptrdiff_t)np;
        double I[3] = {0, 0, 0}, E[3] = {0, 0, 0}, Rs[3] = {0, 0, 0};
        /* (d and l at u = 0, dfar e^0; each panel's bot is the next one's top) */
        double d_top = dfar[i], l_top = (ylo + log(expm1(d_top))) - logq;
        for (ptrdiff_t k = 0; k < npan; k++) {
            double top = -step * (double)k, bot = -step * (double)(k + 1);
            if (bot < ulo[i])
                bot = ulo[i];
            double half = 0.5 * (top - bot), Rp[3];
            double d_bot = dfar[i] * exp(bot), l_bot = (ylo + log(expm1(d_bot))) - logq;
            psg_logrule_bound(dfar[i], bot, top, d_top, l_bot, l_top, end[i], q, v, sd, logq, ylo, remove, Rp);
            d_top = d_bot;
            l_top = l_bot;
            for (int m = 0; m < 3; m++)
                Rs[m] += Rp[m];
            for (int j = 0; j < 5; j++) {
                double w = w5[j], uu = bot + half * (1.0 + x5[j]);
                double d = dfar[i] * exp(uu);
                double t = end[i] + sgn * d;
                double y = lo[i] + t, tt = remove ? y : -y;
                /* (the density at the distance d itself: tt - ylo is d, the end being log(1 - q) -- the only
                 * finite end of these losses --, but y = end +- d rounds to within an ulp of |y|, which is
                 * all of d below ~1e-18, where a small sigma puts most of the mass) */
                double em1 = tt < 0 ? expm1(d) : psg_em1(tt, ylo), l = psg_l(tt, em1, q, logq, ylo);
                double dl = psg_dl(tt, em1, q), dens = psg_density_dl(dl, l, q, h, sd, cden, remove);
                double fw = ((dens * d) * half) * w, wn = -expm1(-t), wb = exp(-t);
                I[0] += fw;
                I[1] += fw * wn;
                I[2] += fw * wb;
                if (fw != 0) {
                    /* d within rd = u (|uu| + 4 half + 9) of the exact node's distance (relative): the node's
                     * shift d rd, plus the rounding of t and y where the density is taken at y; the weight d (rd);
                     * the weights 1 - e^-t, e^-t (12 u, and t's shift d rd + u |t| moves both by e^-t times it,
                     * absolute); the sums over the cell's 5 npan terms in sequence ((5 npan) u of their sizes) */
                    double rd = u * (fabs(uu) + 4 * half + 9);
                    double delta = d * rd + (tt < 0 ? 0.0 : u * (fabs(t) + fabs(y)));
                    add_error_terms(E, fw, wn, wb,
                                    psg_density_rel(l, dl, delta, lq, v, isd) + rd + 12 * u + u * (double)(5 * npan),
                                    fabs(fw) * wb * (d * rd + u * fabs(t)));
                }
            }
        }
        for (int m = 0; m < 3; m++) {
            out[m * n + i] = I[m];
            out[(m + 3) * n + i] = E[m];
            out[(m + 6) * n + i] = Rs[m] * (1 + 1e-12); /* (the sum's rounding) */
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

/* The panels of the subsampled Gaussian's moment quadratures (fpld_psg_moments and its variants):
 * [l_lo, l_hi] clipped to both components' +-40 sd, cut into *npan panels of width *step <= min(sd, 1).
 * Returns 0 if the clipped interval is empty, -1 beyond PSG_MAX_PANELS panels (v ~ 1/sigma^2 huge: the
 * Python side refuses such a sigma first, _GaussPair; the count would not fit a ptrdiff_t).
 * psg_skip: the panels evaluated, *j0 .. *j1 - 1.  Over the whole line (the mean and variance: l_lo = -inf,
 * l_hi = inf) those within a panel of +-PSG_SKIP_SD sd of the components' centres -+v/2; the others' terms are
 * below e^-128 of the density's peak: added first (the left ones, to an accumulator that the first evaluated
 * panel's terms then exceed by e^16 and more) or last (the right ones, to the whole sum), they change no bit of
 * the sums but with probability ~1e-40, and they cost half the quadrature's time at sigma 5 (40 of 80 panels),
 * where the planner asks for the moments of every loss (tests/test_leaf_native.py checks the bits against every
 * panel's).  A finite interval (a partial mean: a bucket's, whose mean must lie in it however small its mass)
 * evaluates every panel, and so does the numpy reference (its pairwise sums would group fewer panels' terms
 * differently). */
#define PSG_MAX_PANELS 1e9
#define PSG_SKIP_SD 16.0
static void psg_skip(double l_lo, double l_hi, double lo, double step, ptrdiff_t npan, double v, double sd,
                     ptrdiff_t *j0, ptrdiff_t *j1)
{
    *j0 = 0;
    *j1 = npan;
    if (!(isinf(l_lo) && l_lo < 0 && isinf(l_hi) && l_hi > 0))
        return;
    double h = v / 2;
    double a = floor((-h - PSG_SKIP_SD * sd - lo) / step) - 1.0, b = ceil((h + PSG_SKIP_SD * sd - lo) / step) + 1.0;
    *j0 = a > 0.0 ? (a < (double)npan ? (ptrdiff_t)a : npan) : 0;
    *j1 = b < (double)npan ? (b > (double)*j0 ? (ptrdiff_t)b : *j0) : npan;
}

static int psg_panels(double l_lo, double l_hi, double v, double sd, double *lo, double *hi, ptrdiff_t *npan,
                      double *step)
{
    double h = v / 2;
    *lo = -h - 40 * sd;
    *hi = h + 40 * sd;
    if (l_lo > *lo)
        *lo = l_lo;
    if (l_hi < *hi)
        *hi = l_hi;
    if (!(*hi > *lo))
        return 0;
    double width = sd < 1.0 ? sd : 1.0;
    if (!((*hi - *lo) / width <= PSG_MAX_PANELS))
        return -1;
    *npan = (ptrdiff_t)ceil((*hi - *lo) / width);
    if (*npan < 1)
        *npan = 1;
    *step = (*hi - *lo) / (double)*npan;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * The whole leaf in one call (fastpld.discretize._discretize_continuous for the subsampled
 * Gaussian).  Every step below names the numpy statement it mirrors; the operations and their
 * order are the same, so the results are bitwise those of the numpy/compiled mix it replaces when numpy's
 * exp/log/expm1/log1p are the C library's (its baseline kernels); its SIMD kernels (AVX2, AVX-512) round
 * differently, and the window and partial-mean limits then agree to a few ulps (tests/test_leaf_native.py).
 * --------------------------------------------------------------------------------------------- */

#define FPLD_U 1.1102230246251565e-16 /* unit round-off of double (discretize._U) */

/* numpy.searchsorted(a, key) (side 'left'): numpy's binary search, also on an array that round-off
 * left slightly unsorted (then the index found is the one numpy finds) */
static ptrdiff_t searchsorted_left(const double *a, ptrdiff_t n, double key)
{
    ptrdiff_t lo = 0, hi = n;
    while (lo < hi) {
        ptrdiff_t mid = lo + ((hi - lo) >> 1);
        if (a[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Python's a // c and -(-a // c) * c for c > 0 */
static inline int64_t floor_div(int64_t a, int64_t c)
{
    int64_t d = a / c;
    return (a % c != 0 && a < 0) ? d - 1 : d;
}

static inline int64_t ceil_mult(int64_t a, int64_t c)
{
    return -floor_div(-a, c) * c;
}

/* g(l) = log(1 - q + q e^l) of discretize._psg_window: numpy.where(l > 30, big, small) */
static inline double psg_g(double l, double q, double logq)
{
    if (l > 30) {
        double m = l < 700.0 ? l : 700.0;
        return (l + logq) + log1p(((1 - q) * exp(-m)) / q);
    }
    return log1p(q * expm1(l)); /* l <= 30, or NaN (numpy.minimum keeps it) */
}

int fpld_psg_window(double q, double v, double sd, int remove, double tail, double z1, double z2, int has_hi,
                    const double *steps, ptrdiff_t k, double *a, double *b, int *found)
{
    double ylo[64], yhi[64], F[64], S[64];
    *found = 0;
    if (k < 1 || k > 64 || !(q > 0 && q < 1) || !(v > 0) || !(sd > 0))
        return FPLD_EINVAL;
    double logq = log(q);
    if (remove) { /* L ~ (1 - q) N(-v/2, v) + q N(v/2, v); Y = g(L) */
        if (!has_hi)
            return FPLD_OK;
        double c_lo = -v / 2 + sd * z1, c_hi = v / 2 - sd * z2;
        for (ptrdiff_t i = 0; i < k; i++) {
            ylo[i] = psg_g(c_lo - sd * steps[i], q, logq);
            yhi[i] = psg_g(c_hi + sd * steps[i], q, logq);
        }
    } else { /* L ~ N(-v/2, v); Y = -g(L): z = -ndtri(tail) */
        double z = -z1, c_lo = -v / 2 + sd * z, c_hi = -v / 2 - sd * z;
        for (ptrdiff_t i = 0; i < k; i++) {
            ylo[i] = -psg_g(c_lo + sd * steps[i], q, logq);
            yhi[i] = -psg_g(c_hi - sd * steps[i], q, logq);
        }
    }
    for (ptrdiff_t i = 0; i < k; i++)
        if (!isfinite(ylo[i]) || !isfinite(yhi[i]))
            return FPLD_OK;
    int st = fpld_psg_eval(ylo, k, q, v, sd, remove, F, NULL, NULL);
    if (st == FPLD_OK)
        st = fpld_psg_eval(yhi, k, q, v, sd, remove, NULL, S, NULL);
    if (st != FPLD_OK)
        return st;
    ptrdiff_t il = -1, ih = -1;
    for (ptrdiff_t i = 0; i < k && il < 0; i++)
        if (F[i] <= tail)
            il = i;
    for (ptrdiff_t i = 0; i < k && ih < 0; i++)
        if (S[i] <= tail)
            ih = i;
    if (il < 0 || ih < 0 || !(ylo[il] <= yhi[ih]))
        return FPLD_OK;
    *a = ylo[il];
    *b = yhi[ih];
    *found = 1;
    return FPLD_OK;
}

/* runs of cells (first start, cell size, number of cells) in increasing order (_coarse_cells' fill) */
#define LEAF_MAX_RUNS 256 /* at most 2 (31 + 15 + 7 + 3) + 1 with 4 levels */
struct leaf_runs {
    int64_t start[LEAF_MAX_RUNS], size[LEAF_MAX_RUNS], count[LEAF_MAX_RUNS];
    int n;
};

static int runs_push(struct leaf_runs *R, int64_t a, int64_t c, int64_t cnt)
{
    if (R->n >= LEAF_MAX_RUNS)
        return FPLD_EINVAL;
    R->start[R->n] = a;
    R->size[R->n] = c;
    R->count[R->n] = cnt;
    R->n++;
    return FPLD_OK;
}

/* cells of size levels[lv] aligned to its multiples inside [a, b), the ends with smaller sizes */
static int runs_fill(struct leaf_runs *R, int64_t a, int64_t b, int lv, const int64_t *levels, int nlev)
{
    if (a >= b)
        return FPLD_OK;
    if (lv >= nlev)
        return runs_push(R, a, 1, b - a);
    int64_t c = levels[lv], a2 = ceil_mult(a, c), b2 = floor_div(b, c) * c;
    if (a2 >= b2)
        return runs_fill(R, a, b, lv + 1, levels, nlev);
    int st = runs_fill(R, a, a2, lv + 1, levels, nlev);
    if (st == FPLD_OK)
        st = runs_push(R, a2, c, (b2 - a2) / c);
    if (st == FPLD_OK)
        st = runs_fill(R, b2, b, lv + 1, levels, nlev);
    return st;
}

/* fpld_psg_eval (F, S and the density) in passes over blocks of points: the same operations on
 * every point as there, so the same values bitwise, but each pass is a loop of independent calls
 * (expm1, log, erfc, exp) that the processor overlaps, where fpld_psg_eval's one long chain per
 * point (expm1 -> log -> erfc -> exp) waits on each result in turn. */
#define PSG_BLOCK 128
static int psg_eval_passes(const double *t, ptrdiff_t n, double q, double v, double sd, int remove,
                           double *F, double *S, double *pdf)
{
    if (n < 0 || !(q > 0 && q < 1) || !(v > 0) || !(sd > 0))
        return FPLD_EINVAL;
    double logq = log(q), ylo = log1p(-q), h = v / 2, cden = 1.0 / (sd * 2.5066282746310002);
    double tt[PSG_BLOCK], em1[PSG_BLOCK], l[PSG_BLOCK], zp[PSG_BLOCK], zq[PSG_BLOCK];
    double pl[PSG_BLOCK], pu[PSG_BLOCK], ql[PSG_BLOCK], qu[PSG_BLOCK];
    for (ptrdiff_t i0 = 0; i0 < n; i0 += PSG_BLOCK) {
        int nb = n - i0 < PSG_BLOCK ? (int)(n - i0) : PSG_BLOCK;
        const double *tb = t + i0;
        for (int i = 0; i < nb; i++) {
            tt[i] = remove ? tb[i] : -tb[i];
            em1[i] = psg_em1(tt[i], ylo);
        }
        for (int i = 0; i < nb; i++)
            l[i] = psg_l(tt[i], em1[i], q, logq, ylo); /* SubsampledLoss._ginv */
        for (int i = 0; i < nb; i++)
            zp[i] = (l[i] + h) / sd;
        if (remove)
            for (int i = 0; i < nb; i++)
                zq[i] = (l[i] - h) / sd;
        for (int i = 0; i < nb; i++)
            ndtr_pair(zp[i], &pl[i], &pu[i]);
        if (remove) {
            for (int i = 0; i < nb; i++)
                ndtr_pair(zq[i], &ql[i], &qu[i]);
            for (int i = 0; i < nb; i++) {
                F[i0 + i] = (1 - q) * pl[i] + q * ql[i];
                S[i0 + i] = (1 - q) * pu[i] + q * qu[i];
            }
        } else {
            for (int i = 0; i < nb; i++) {
                int top = tb[i] >= -ylo;
                F[i0 + i] = top ? 1.0 : pu[i]; /* Y <= t  <=>  L >= ginv(-t) */
                S[i0 + i] = top ? 0.0 : pl[i];
            }
        }
        for (int i = 0; i < nb; i++) {
            double dl = psg_dl(tt[i], em1[i], q); /* dl/dt = e^t / (e^t - 1 + q) */
            double dp = exp(-0.5 * zp[i] * zp[i]) * cden, dens;
            if (remove)
                dens = ((1 - q) * dp + q * (exp(-0.5 * zq[i] * zq[i]) * cden)) * dl;
            else
                dens = dp * dl;
            pdf[i0 + i] = isfinite(dens) ? dens : 0.0;
        }
    }
    return FPLD_OK;
}

/* CDF, survival function and density at the edges of the buckets idx[0..m) (lat + (idx - 0.5) h) */
static int psg_eval_idx(const int64_t *idx, ptrdiff_t m, double lat, double h, double q, double v, double sd,
                        int remove, double *x, double *F, double *S, double *P)
{
    for (ptrdiff_t j = 0; j < m; j++)
        x[j] = lat + ((double)idx[j] - 0.5) * h;
    return m ? psg_eval_passes(x, m, q, v, sd, remove, F, S, P) : FPLD_OK;
}

#define LEAF_CAND 32      /* candidates per level and side: fewer than 81 / 3 */
#define LEAF_MEMO 256     /* candidates in all: 4 levels, 2 sides */
#define LEAF_FALLBACK 100 /* the cells do not tile the window (never seen): the caller runs the numpy code */

/* Every point the cell search evaluates is a bucket edge, and many are edges of the cells chosen
 * (the grid: every multiple of cmax is a cell start, as cmax is a multiple of every level), so
 * their values (with the density, which the edges need) are kept for the edges instead of being
 * evaluated again (same points, same fpld_psg_eval: the same values). */
struct leaf_memo {
    int64_t g0, cmax;
    ptrdiff_t ng, nc;
    double *block; /* x, F, S, P of the grid points g0 + j cmax, j < ng (ng doubles each) */
    int64_t cidx[LEAF_MEMO];
    double cF[LEAF_MEMO], cS[LEAF_MEMO], cP[LEAF_MEMO];
};

/* discretize._coarse_cells after its early exits: *use = 0 where it returns None */
static int psg_coarse(double q, double v, double sd, int remove, double lat, double h, int64_t i_lo, int64_t i_hi,
                      const int64_t *levels, const double *thr, int nlev, struct leaf_runs *R, int64_t *ncells,
                      int *use, struct leaf_memo *M)
{
    int64_t n = i_hi - i_lo + 1, end = i_hi + 1, cmax = levels[0];
    int64_t g0 = ceil_mult(i_lo, cmax); /* g = arange(g0, end + 1, cmax) */
    ptrdiff_t ng = g0 < end + 1 ? (ptrdiff_t)((end + 1 - g0 + cmax - 1) / cmax) : 0;
    int64_t ku[4], kl[4], ub[4], lb[4], cand[LEAF_CAND];
    int hu[4], hl[4], st = FPLD_OK;
    double xc[LEAF_CAND];
    *use = 0;
    R->n = 0;
    if (ng < 2)
        return FPLD_OK;
    double *buf = (double *)malloc(sizeof(double) * 4 * (size_t)ng);
    int64_t *g = (int64_t *)malloc(sizeof(int64_t) * (size_t)ng);
    if (!buf || !g) {
        free(buf);
        free(g);
        return FPLD_ENOMEM;
    }
    M->block = buf; /* (freed by the caller) */
    M->g0 = g0;
    M->cmax = cmax;
    M->ng = ng;
    double *F0 = buf + ng, *S0 = buf + 2 * ng;
    for (ptrdiff_t j = 0; j < ng; j++)
        g[j] = g0 + (int64_t)j * cmax;
    st = psg_eval_idx(g, ng, lat, h, q, v, sd, remove, buf, F0, S0, buf + 3 * ng);
    if (st != FPLD_OK)
        goto done;
    /* upper side: the first coarse point past the median with S <= thr_c; lower side: the last
     * one before it with F <= thr_c */
    ptrdiff_t jm = searchsorted_left(F0, ng, 0.5);
    for (int r = 0; r < nlev; r++) {
        hu[r] = hl[r] = 0;
        for (ptrdiff_t j = jm; j < ng; j++)
            if (S0[j] <= thr[r]) {
                ku[r] = g[j];
                hu[r] = 1;
                break;
            }
        for (ptrdiff_t j = jm - 1; j >= 0; j--)
            if (F0[j] <= thr[r]) {
                kl[r] = g[j];
                hl[r] = 1;
                break;
            }
    }
    /* refined between evaluated points: u_c in (k - cmax, k] (side 0), l_c in [k, k + cmax) (side 1) */
    int64_t u_prev = end, l_prev = i_lo;
    for (int side = 0; side < 2; side++) {
        for (int r = 0; r < nlev; r++) {
            int64_t c = levels[r], k = side ? kl[r] : ku[r], bound = side ? l_prev : u_prev;
            if (side ? hl[r] : hu[r]) {
                if (c < cmax) {
                    ptrdiff_t nc = 0;
                    if (!side) {
                        int64_t s0 = k - cmax + c > i_lo ? k - cmax + c : i_lo;
                        for (int64_t x = ceil_mult(s0, c); x < k && nc < LEAF_CAND; x += c)
                            cand[nc++] = x;
                    } else {
                        int64_t stop = k + cmax < end + 1 ? k + cmax : end + 1;
                        for (int64_t x = k + c; x < stop && nc < LEAF_CAND; x += c)
                            cand[nc++] = x;
                    }
                    if (M->nc + nc > LEAF_MEMO) {
                        st = FPLD_EINVAL;
                        goto done;
                    }
                    double *Fc = M->cF + M->nc, *Sc = M->cS + M->nc;
                    st = psg_eval_idx(cand, nc, lat, h, q, v, sd, remove, xc, Fc, Sc, M->cP + M->nc);
                    if (st != FPLD_OK)
                        goto done;
                    for (ptrdiff_t j = 0; j < nc; j++)
                        M->cidx[M->nc + j] = cand[j];
                    M->nc += nc;
                    if (!side) { /* the first candidate with S <= thr_c past the median */
                        for (ptrdiff_t j = 0; j < nc; j++)
                            if (Sc[j] <= thr[r] && Fc[j] >= 0.5) {
                                k = cand[j];
                                break;
                            }
                    } else { /* the last one with F <= thr_c before it */
                        for (ptrdiff_t j = nc - 1; j >= 0; j--)
                            if (Fc[j] <= thr[r] && Sc[j] >= 0.5) {
                                k = cand[j];
                                break;
                            }
                    }
                }
                bound = side ? (k > bound ? k : bound) : (k < bound ? k : bound);
            }
            if (side)
                lb[r] = l_prev = bound;
            else
                ub[r] = u_prev = bound;
        }
    }
    /* the candidates in increasing index order (insertion sort of at most a few hundred) */
    for (ptrdiff_t j = 1; j < M->nc; j++) {
        int64_t ci = M->cidx[j];
        double cf = M->cF[j], cs = M->cS[j], cp = M->cP[j];
        ptrdiff_t i = j - 1;
        for (; i >= 0 && M->cidx[i] > ci; i--) {
            M->cidx[i + 1] = M->cidx[i];
            M->cF[i + 1] = M->cF[i];
            M->cS[i + 1] = M->cS[i];
            M->cP[i + 1] = M->cP[i];
        }
        M->cidx[i + 1] = ci;
        M->cF[i + 1] = cf;
        M->cS[i + 1] = cs;
        M->cP[i + 1] = cp;
    }
    /* [i_lo, l_cmax) level cmax, [l_c, l_next) level next, ..., fine, ..., [u_cmax, end) level cmax */
    for (int r = 0; r < nlev && st == FPLD_OK; r++)
        st = runs_fill(R, r ? lb[r - 1] : i_lo, lb[r], r, levels, nlev);
    if (st == FPLD_OK)
        st = runs_fill(R, lb[nlev - 1], ub[nlev - 1], nlev, levels, nlev);
    for (int r = nlev - 1; r >= 0 && st == FPLD_OK; r--)
        st = runs_fill(R, ub[r], r ? ub[r - 1] : end, r, levels, nlev);
    if (st != FPLD_OK)
        goto done;
    /* numpy builds the starts by a cumulative sum from i_lo and the last edge at end: the runs must
     * tile [i_lo, end) for that to describe them (they do: the bounds nest) */
    int64_t pos = i_lo, cells = 0;
    for (int j = 0; j < R->n; j++) {
        if (R->start[j] != pos || R->count[j] < 1) {
            st = LEAF_FALLBACK;
            goto done;
        }
        pos += R->size[j] * R->count[j];
        cells += R->count[j];
    }
    if (R->n == 0 || pos != end) {
        st = LEAF_FALLBACK;
        goto done;
    }
    *ncells = cells;
    *use = !((double)cells > 0.6 * (double)n); /* _COARSE_MAX_FRACTION */
done:
    free(g);
    return st;
}

/* F, S and the density at the edges eidx[0..m) (increasing): from the memo where the cell search
 * evaluated them, the others by psg_eval_passes.  scratch: 4 m doubles; pos: m entries. */
static int psg_eval_edges(const int64_t *eidx, ptrdiff_t m, const struct leaf_memo *M, double lat, double h,
                          double q, double v, double sd, int remove, double *F, double *S, double *P,
                          double *scratch, ptrdiff_t *pos)
{
    double *x = scratch, *Ft = scratch + m, *St = scratch + 2 * m, *Pt = scratch + 3 * m;
    ptrdiff_t todo = 0, cp = 0, k = 0;
    int64_t gnext = M->g0; /* the grid point g0 + k cmax not below the edges seen so far */
    for (ptrdiff_t j = 0; j < m; j++) {
        int64_t e = eidx[j];
        if (M->ng) {
            while (k < M->ng && gnext < e) {
                k++;
                gnext += M->cmax;
            }
            if (k < M->ng && gnext == e) {
                F[j] = M->block[M->ng + k];
                S[j] = M->block[2 * M->ng + k];
                P[j] = M->block[3 * M->ng + k];
                continue;
            }
        }
        while (cp < M->nc && M->cidx[cp] < e)
            cp++;
        if (cp < M->nc && M->cidx[cp] == e) {
            F[j] = M->cF[cp];
            S[j] = M->cS[cp];
            P[j] = M->cP[cp];
            continue;
        }
        x[todo] = lat + ((double)e - 0.5) * h;
        pos[todo++] = j;
    }
    int st = todo ? psg_eval_passes(x, todo, q, v, sd, remove, Ft, St, Pt) : FPLD_OK;
    if (st != FPLD_OK)
        return st;
    for (ptrdiff_t t = 0; t < todo; t++) {
        F[pos[t]] = Ft[t];
        S[pos[t]] = St[t];
        P[pos[t]] = Pt[t];
    }
    return FPLD_OK;
}

/* SubsampledLoss._ginv */
static inline double psg_ginv(double t, double q)
{
    double ylo = log1p(-q);
    return psg_l(t, psg_em1(t, ylo), q, log(q), ylo);
}

int fpld_psg_leaf(double q, double v, double sd, int remove, double cre, double lat, double h,
                  int64_t i_lo, int64_t i_hi, const int64_t *levels, const double *thr, int nlev,
                  const double *x16, const double *w16, const double *x8, const double *w8,
                  double *probs, double *out)
{
    struct leaf_runs R;
    struct leaf_memo M;
    int64_t ncells = 0;
    int use = 0, st;
    M.ng = M.nc = 0;
    M.block = NULL;
    if (!(q > 0 && q < 1) || !(v > 0) || !(sd > 0) || !(h > 0) || i_hi < i_lo || nlev < 0 || nlev > 4)
        return FPLD_EINVAL;
    for (int r = 0; r < nlev; r++)
        /* odd, decreasing, each dividing the previous (the grid of multiples of the coarsest size
         * then holds only cell starts), at most LEAF_CAND candidates per level */
        if (levels[r] < 3 || levels[r] % 2 == 0 || (r && (levels[r] >= levels[r - 1] || levels[r - 1] % levels[r]))
            || levels[0] / levels[r] > LEAF_CAND)
            return FPLD_EINVAL;
    int64_t n = i_hi - i_lo + 1;
    if (nlev > 0) {
        st = psg_coarse(q, v, sd, remove, lat, h, i_lo, i_hi, levels, thr, nlev, &R, &ncells, &use, &M);
        if (st != FPLD_OK) {
            free(M.block);
            return st;
        }
    }
    ptrdiff_t m = use ? (ptrdiff_t)ncells : (ptrdiff_t)n; /* cells */
    /* F, S, dens, qc, 4 scratch (m + 1 doubles each); edge indices and positions (m + 1 each) */
    double *buf = (double *)malloc(sizeof(double) * 8 * ((size_t)m + 1));
    int64_t *eidx = (int64_t *)malloc(sizeof(int64_t) * ((size_t)m + 1));
    ptrdiff_t *pos = (ptrdiff_t *)malloc(sizeof(ptrdiff_t) * ((size_t)m + 1));
    if (!buf || !eidx || !pos) {
        st = FPLD_ENOMEM;
        goto done;
    }
    double *F = buf, *S = buf + (m + 1), *dens = buf + 2 * (m + 1), *qc = buf + 3 * (m + 1);
    /* edges lat + (arange(i_lo, i_hi + 2) - 0.5) h, or at the cell starts and i_hi + 1 */
    if (!use) {
        for (ptrdiff_t j = 0; j <= m; j++)
            eidx[j] = i_lo + j;
    } else {
        ptrdiff_t e = 0;
        for (int j = 0; j < R.n; j++)
            for (int64_t c = 0; c < R.count[j]; c++)
                eidx[e++] = R.start[j] + c * R.size[j];
        eidx[m] = i_hi + 1;
    }
    st = psg_eval_edges(eidx, m + 1, &M, lat, h, q, v, sd, remove, F, S, dens, buf + 4 * (m + 1), pos);
    if (st != FPLD_OK)
        goto done;
    /* lower half from CDF differences, upper half from survival differences */
    ptrdiff_t split = searchsorted_left(F, m + 1, 0.5);
    if (split < 1)
        split = 1;
    if (split > m)
        split = m;
    double total = 0.0;
    st = fpld_bucket_masses(F, S, m, split, use ? qc : probs, &total);
    if (st != FPLD_OK)
        goto done;
    double out_lo = F[0], out_hi = S[m];
    double truncated = (out_lo + out_hi) * (1 + 8 * cre);
    if (!(total > 0)) {
        st = FPLD_ENOMASS;
        goto done;
    }
    double pc[4] = {0.0, 0.0, 0.0, 0.0}; /* numpy.bincount(sizes, weights=qc) at 3, 9, 27, 81 */
    double mean_index = 0.0;
    if (use) {
        /* each cell's mass at its centre, a point of the fine grid (sizes are odd), normalised as
         * fpld_normalise_mean does over all n entries: the zeros between the centres stay 0 and add
         * (double)i * 0.0 = +0 to a sum of non-negative terms, which leaves it unchanged */
        memset(probs, 0, sizeof(double) * (size_t)n);
        ptrdiff_t e = 0;
        for (int j = 0; j < R.n; j++) {
            int64_t c = R.size[j];
            int slot = c == 3 ? 0 : c == 9 ? 1 : c == 27 ? 2 : c == 81 ? 3 : -1;
            for (int64_t k = 0; k < R.count[j]; k++, e++) {
                int64_t i = R.start[j] + k * c + (c - 1) / 2 - i_lo;
                probs[i] = qc[e] / total;
                mean_index += (double)i * probs[i];
                if (slot >= 0)
                    pc[slot] += qc[e];
            }
        }
    } else {
        st = fpld_normalise_mean(probs, (ptrdiff_t)n, total, &mean_index);
        if (st != FPLD_OK)
            goto done;
    }
    /* mean of Y conditioned on the window, relative to the bucket-0 centre (SubsampledLoss.partial_mean
     * over the window's ends: Y = +-g(L) integrated over L) */
    double ref = lat + (double)i_lo * h, mom[6];
    double a = lat + ((double)eidx[0] - 0.5) * h, b = lat + ((double)eidx[m] - 0.5) * h;
    if (remove)
        st = fpld_psg_moments(psg_ginv(a, q), psg_ginv(b, q), q, v, sd, 1, x16, w16, x8, w8, mom);
    else
        st = fpld_psg_moments(psg_ginv(-b, q), psg_ginv(-a, q), q, v, sd, 0, x16, w16, x8, w8, mom);
    if (st != FPLD_OK)
        goto done;
    double part = remove ? mom[0] : -mom[0], part_err = 10.0 * mom[1] + mom[2];
    double inside = 1.0 - out_lo - out_hi;
    double true_mean = part / inside - ref;
    double mean_err = (part_err / inside + 8 * cre * fabs(part / inside)) + 8 * FPLD_U * fabs(ref);
    double mu = true_mean - mean_index * h;
    /* round-off certificate: edge movement -> coupling range; where density vanishes -> TV */
    double widen = 0.0, tv = 0.0;
    st = fpld_leaf_roundoff(F, S, dens, m + 1, 4 * (cre + FPLD_U), 4 * FPLD_U * (out_lo + out_hi), 1e-3 * h,
                            &widen, &tv);
    if (st != FPLD_OK)
        goto done;
    out[FPLD_LEAF_REF] = ref;
    out[FPLD_LEAF_MU] = mu;
    out[FPLD_LEAF_WIDEN] = widen;
    out[FPLD_LEAF_TV] = tv;
    out[FPLD_LEAF_MEAN_ERR] = mean_err;
    out[FPLD_LEAF_TRUNCATED] = truncated;
    out[FPLD_LEAF_TOTAL] = total;
    for (int k = 0; k < 4; k++)
        out[FPLD_LEAF_PC3 + k] = pc[k];
    out[FPLD_LEAF_CELLS] = use ? (double)ncells : 0.0;
done:
    free(buf);
    free(eidx);
    free(pos);
    free(M.block);
    return st;
}

/* (the per-panel nodes in passes over all 24 of them, so that their exps and log1ps overlap; the
 * same operations on every node and the same sums in the same order as the one-node-at-a-time
 * loop this replaced, and as fpld_psg_moments16) */
int fpld_psg_moments(double l_lo, double l_hi, double q, double v, double sd, int remove,
                     const double *x16, const double *w16, const double *x8, const double *w8, double *out)
{
    if (!(q > 0 && q < 1) || !(v > 0) || !(sd > 0) || isnan(l_lo) || isnan(l_hi))
        return FPLD_EINVAL;
    for (int k = 0; k < 6; k++)
        out[k] = 0.0;
    double h = v / 2, lo, hi, step;
    ptrdiff_t npan;
    int pan = psg_panels(l_lo, l_hi, v, sd, &lo, &hi, &npan, &step);
    if (pan < 0)
        return FPLD_EINVAL;
    if (!pan)
        return FPLD_OK;
    double lq1 = log1p(-q), lq = log(q), cden = 1.0 / (sd * 2.5066282746310002);
    double xs[24], ws[24], l[24], dens[24], d[24], g[24];
    for (int i = 0; i < 16; i++) {
        xs[i] = x16[i];
        ws[i] = w16[i];
    }
    for (int i = 0; i < 8; i++) {
        xs[16 + i] = x8[i];
        ws[16 + i] = w8[i];
    }
    ptrdiff_t j0, j1;
    psg_skip(l_lo, l_hi, lo, step, npan, v, sd, &j0, &j1);
    for (ptrdiff_t j = j0; j < j1; j++) {
        double a = lo + step * (double)j, b = (j + 1 == npan) ? hi : lo + step * (double)(j + 1);
        double mid = 0.5 * (a + b), half = 0.5 * (b - a);
        double r16[2] = {0.0, 0.0}, r8[2] = {0.0, 0.0}, ab[2] = {0.0, 0.0};
        /* the 16 nodes, then the 8: each pass over all 24 */
        for (int i = 0; i < 24; i++) {
            l[i] = mid + half * xs[i];
            double zp = (l[i] + h) / sd;
            dens[i] = exp(-0.5 * zp * zp) * cden;
        }
        if (remove)
            for (int i = 0; i < 24; i++) {
                double zq = (l[i] - h) / sd;
                dens[i] = (1 - q) * dens[i] + q * (exp(-0.5 * zq * zq) * cden);
            }
        for (int i = 0; i < 24; i++) { /* log_add_exp(lq1, lq + l) */
            double b2 = lq + l[i];
            d[i] = lq1 > b2 ? b2 - lq1 : lq1 - b2;
            g[i] = exp(d[i]);
        }
        for (int i = 0; i < 24; i++) {
            double b2 = lq + l[i], m = lq1 > b2 ? lq1 : b2;
            g[i] = m + log1p(g[i]);
        }
        for (int i = 0; i < 16; i++) {
            r16[0] += ws[i] * (g[i] * dens[i]);
            r16[1] += ws[i] * (g[i] * g[i] * dens[i]);
            ab[0] += fabs(ws[i] * (g[i] * dens[i]));
            ab[1] += ws[i] * (g[i] * g[i] * dens[i]);
        }
        for (int i = 16; i < 24; i++) {
            r8[0] += ws[i] * (g[i] * dens[i]);
            r8[1] += ws[i] * (g[i] * g[i] * dens[i]);
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
    double h = v / 2, lo, hi, step;
    ptrdiff_t npan;
    int pan = psg_panels(l_lo, l_hi, v, sd, &lo, &hi, &npan, &step);
    if (pan < 0)
        return FPLD_EINVAL;
    if (!pan)
        return FPLD_OK;
    double lq1 = log1p(-q), lq = log(q), cden = 1.0 / (sd * 2.5066282746310002);
    ptrdiff_t j0, j1;
    psg_skip(l_lo, l_hi, lo, step, npan, v, sd, &j0, &j1);
    for (ptrdiff_t j = j0; j < j1; j++) {
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

/* ---------------------------------------------------------------------------------------------
 * The dominance leaf's integrals for the subsampled Gaussian in one call
 * (fastpld.dominance.leaves._integrals).  Every step names the numpy statement it mirrors; the
 * formulas, comparisons and branches are those of the numpy code with its compiled rules
 * (fpld_psg_panels, fpld_psg_logpanels) and fpld_psg_eval for loss.cdf / loss.sf / loss.pdf.  What
 * may differ in the last bits: the sums over a refined cell's panels (numpy sums pairwise) and the
 * exp / log of the ladder and the log-distance bounds (numpy's SIMD kernels against libm's).
 * --------------------------------------------------------------------------------------------- */

/* numpy.searchsorted(a, key, side="right") */
static ptrdiff_t searchsorted_right(const double *a, ptrdiff_t n, double key)
{
    ptrdiff_t lo = 0, hi = n;
    while (lo < hi) {
        ptrdiff_t mid = lo + ((hi - lo) >> 1);
        if (key < a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

#define INTEGRALS_MAX_LADDER 64 /* rungs of the depth ladder 5, 10, .., u_depth (u_depth <= 324) */

/* the rules' failure test of _integrals (fails): an error above refine_rel of what it is measured against */
static inline int integrals_fail(const double *out, ptrdiff_t n, ptrdiff_t i, const double *ns, double rr)
{
    return out[n + i] > rr * out[i] || out[3 * n + i] > rr * out[i] * ns[i] || out[5 * n + i] > rr * out[4 * n + i];
}

/* One support end (side 0: below, at s_end = s_lo; side 1: above, s_hi) of _integrals: the cells near it
 * whose rules fail, on the log-distance panels with their depth and refinements.  out: the six rows. */
static int integrals_side(int side, double s_end, const double *lo, const double *h, ptrdiff_t hs, ptrdiff_t n,
                          double tiny, const double *c0, const double *c1, const double *ns, char *done,
                          double q, double v, double sd, int remove, double near_end, double rr, double u_step,
                          double u_step_near, double u_depth, int u_refine, double rel_cap, int64_t max_panels,
                          const double *x5, const double *w5, double cre,
                          char *endrules, double *out, double *eo)
{
    const double u = 0x1p-53, sgn = side == 0 ? 1.0 : -1.0;
    double *a = out, *a_err = out + n, *nn = out + 2 * n, *n_err = out + 3 * n, *b = out + 4 * n,
           *b_err = out + 5 * n;
    int st = FPLD_OK;
    /* bad = flatnonzero(near_end & (c1 > c0) & (at_end | (a_err > tiny)) & fails) */
    ptrdiff_t nb = 0;
    for (ptrdiff_t i = 0; i < n; i++) {
        double hi_ = h[i * hs];
        int near = side == 0 ? (lo[i] - near_end * hi_ < s_end) : (lo[i] + (near_end + 1) * hi_ > s_end);
        int at = side == 0 ? (lo[i] - hi_ < s_end) : (lo[i] + 2 * hi_ > s_end);
        if (near && c1[i] > c0[i] && (at || a_err[i] > tiny) && integrals_fail(out, n, i, ns, rr))
            nb++;
    }
    if (nb == 0)
        return FPLD_OK;
    /* per bad cell: 23 doubles of its own, 14 for a refinement's gathered copy and rules */
    double *buf = (double *)calloc(37 * (size_t)nb, sizeof(double)); /* (zeroed: gcc cannot see the fill) */
    ptrdiff_t *idx = (ptrdiff_t *)malloc(sizeof(ptrdiff_t) * 2 * (size_t)nb);
    char *flags = (char *)malloc(4 * (size_t)nb);
    if (!buf || !idx || !flags) {
        st = FPLD_ENOMEM;
        goto finish;
    }
    double *lob = buf, *end = buf + nb, *dfar = buf + 2 * nb, *ulo = buf + 3 * nb, *step = buf + 4 * nb,
           *depth = buf + 5 * nb, *rest = buf + 6 * nb, *ae = buf + 7 * nb, *ne = buf + 8 * nb,
           *be = buf + 9 * nb, *dis = buf + 10 * nb, *lp = buf + 11 * nb; /* lp: 9 nb, {a5, n5, b5}, the
                                                                         * density's error sums {ea, en, eb} and
                                                                         * the proved bounds {Ra, Rn, Rb} */
    double *ra = buf + 20 * nb, *rn = buf + 21 * nb, *rb = buf + 22 * nb; /* a holding cell's rest, as mass */
    double *gw = buf + 23 * nb; /* a refinement's lo, end, d_far, ulo, step (5 nw) and rules (9 nw) */
    ptrdiff_t *widx = idx + nb;
    char *deep = flags, *live = flags + nb, *close = flags + 2 * nb, *holds = flags + 3 * nb;
    ptrdiff_t k = 0;
    for (ptrdiff_t i = 0; i < n; i++) {
        double hi_ = h[i * hs];
        int near = side == 0 ? (lo[i] - near_end * hi_ < s_end) : (lo[i] + (near_end + 1) * hi_ > s_end);
        int at = side == 0 ? (lo[i] - hi_ < s_end) : (lo[i] + 2 * hi_ > s_end);
        if (near && c1[i] > c0[i] && (at || a_err[i] > tiny) && integrals_fail(out, n, i, ns, rr)) {
            idx[k] = i;
            close[k++] = (char)at;
        }
    }
    /* end, d_far, d_near, u_near = log(d_near / d_far) (-inf where the end is inside); deep = ~(u_near > -D) */
    double ladder[INTEGRALS_MAX_LADDER], tl[INTEGRALS_MAX_LADDER];
    /* numpy.arange(5.0, u_depth + 1, 5.0) */
    ptrdiff_t nl = (ptrdiff_t)ceil((u_depth + 1 - 5.0) / 5.0);
    for (ptrdiff_t r = 0; r < nl; r++)
        ladder[r] = 5.0 + (double)r * 5.0;
    for (ptrdiff_t j = 0; j < nb; j++) {
        ptrdiff_t i = idx[j];
        lob[j] = lo[i];
        end[j] = s_end - lo[i];
        dfar[j] = side == 0 ? c1[i] - end[j] : end[j] - c0[i];
        double d_near = np_maximum(side == 0 ? c0[i] - end[j] : end[j] - c1[i], 0.0);
        double u_near = log(d_near / dfar[j]);
        holds[j] = d_near == 0.0;
        deep[j] = !(u_near > -u_depth);
        depth[j] = u_depth;
        if (deep[j]) {
            /* the first rung whose tail beyond e^-D of the far edge's distance is below 1e-18 of the
             * cell's mass (the first rules' estimate), else the last */
            ptrdiff_t first = nl - 1;
            if (a[i] > 0) {
                /* (at the exact distances: the points round to within an ulp of the end, see psg_end_tail) */
                double rel_r;
                for (ptrdiff_t r = 0; r < nl; r++)
                    tl[r] = psg_end_tail(dfar[j] * exp(-ladder[r]), s_end, side, q, v, sd, remove, cre, &rel_r);
                for (ptrdiff_t r = 0; r < nl; r++)
                    if (tl[r] <= 1e-18 * a[i]) {
                        first = r;
                        break;
                    }
            }
            depth[j] = ladder[first];
        }
        ulo[j] = deep[j] ? -depth[j] : u_near;
        /* (the cells clear of the end on panels a quarter as wide) */
        step[j] = deep[j] ? u_step : u_step_near;
    }
    st = fpld_psg_logpanels(lob, end, dfar, ulo, step, nb, sgn, q, v, sd, remove, x5, w5, lp);
    if (st != FPLD_OK)
        goto finish;
    double *a5 = lp, *n5 = lp + nb, *b5 = lp + 2 * nb;
    double *ea = lp + 3 * nb, *en = lp + 4 * nb, *eb = lp + 5 * nb;
    double *Ra = lp + 6 * nb, *Rn = lp + 7 * nb, *Rb = lp + 8 * nb;
    /* rest: the tail beyond the depth (the CDF or survival function at the distance de = d_far e^-D).  In a
     * cell holding the end it is the cell's mass between the end and de, at t within de of the end's offset:
     * added to the integrals (ra, rn, rb), its error bounds (the CDF's relative error, the weights' spread
     * over de, their rounding) in rest; elsewhere charged to every rule (it may lie beyond the cell) */
    for (ptrdiff_t j = 0; j < nb; j++) {
        rest[j] = ra[j] = rn[j] = rb[j] = 0.0;
        if (deep[j]) {
            double rel_t, de = dfar[j] * exp(-depth[j]), t = psg_end_tail(de, s_end, side, q, v, sd, remove, cre, &rel_t);
            if (isnan(t)) {
                st = FPLD_EINVAL;
                goto finish;
            }
            double m = np_maximum(t, 0.0);
            if (holds[j]) {
                /* weights at the end's offset; over the rest they move by at most de times their slope (<= 1) */
                double wb = exp(-end[j]), wn = -expm1(-end[j]);
                ra[j] = m;
                rn[j] = m * wn;
                rb[j] = m * wb;
                rest[j] = m * (rel_t + 8 * u + 2 * de);
            } else {
                rest[j] = m * (1 + 1e-6);
            }
        }
        /* (the rules' truncation: the proved bound) */
        ae[j] = Ra[j] + 16 * u * a5[j] + rest[j];
        ne[j] = Rn[j] + 16 * u * n5[j] + rest[j];
        be[j] = Rb[j] + 16 * u * b5[j] + rest[j];
        /* (the rules' truncation bound: refined where it is most of an error that would be total variation) */
        dis[j] = Ra[j];
        live[j] = 1;
    }
    /* refinements: panels a quarter as wide where the rules' truncation bound is most of a bound that would be
     * charged as total variation; the smaller bound kept, no more where one did not cut it 4x */
    for (int it = 0; it < u_refine; it++) {
        ptrdiff_t nw = 0;
        double panels = 0.0;
        for (ptrdiff_t j = 0; j < nb; j++)
            if (live[j] && ae[j] > rel_cap * (a5[j] + ra[j]) && ae[j] > tiny && dis[j] > 0.5 * ae[j]) {
                widx[nw++] = j;
                panels += ceil(-ulo[j] / (step[j] / 4)); /* (integers: exact, as numpy's sum) */
            }
        if (nw == 0 || panels > (double)max_panels)
            break;
        double *wlo = gw, *wend = gw + nw, *wdfar = gw + 2 * nw, *wulo = gw + 3 * nw, *wstep = gw + 4 * nw,
               *wr = gw + 5 * nw;
        for (ptrdiff_t w = 0; w < nw; w++) {
            ptrdiff_t j = widx[w];
            step[j] /= 4;
            wlo[w] = lob[j];
            wend[w] = end[j];
            wdfar[w] = dfar[j];
            wulo[w] = ulo[j];
            wstep[w] = step[j];
        }
        st = fpld_psg_logpanels(wlo, wend, wdfar, wulo, wstep, nw, sgn, q, v, sd, remove, x5, w5, wr);
        if (st != FPLD_OK)
            goto finish;
        for (ptrdiff_t w = 0; w < nw; w++) {
            ptrdiff_t j = widx[w];
            double a5w = wr[w], n5w = wr[nw + w], b5w = wr[2 * nw + w];
            double Raw = wr[6 * nw + w], Rnw = wr[7 * nw + w], Rbw = wr[8 * nw + w];
            double aew = Raw + 16 * u * a5w + rest[j];
            double new_ = Rnw + 16 * u * n5w + rest[j];
            double bew = Rbw + 16 * u * b5w + rest[j];
            int better = aew + new_ + bew < ae[j] + ne[j] + be[j];
            if (!(aew < 0.25 * ae[j]))
                live[j] = 0;
            if (better) {
                a5[j] = a5w;
                ae[j] = aew;
                n5[j] = n5w;
                ne[j] = new_;
                b5[j] = b5w;
                be[j] = bew;
                ea[j] = wr[3 * nw + w];
                en[j] = wr[4 * nw + w];
                eb[j] = wr[5 * nw + w];
                dis[j] = Raw;
            }
        }
    }
    /* take: those holding the end or within one mesh of it always, the others where the bound is smaller */
    for (ptrdiff_t j = 0; j < nb; j++) {
        ptrdiff_t i = idx[j];
        if (!(close[j] || ae[j] + ne[j] + be[j] < a_err[i] + n_err[i] + b_err[i]))
            continue;
        a[i] = a5[j] + ra[j];
        a_err[i] = ae[j];
        nn[i] = n5[j] + rn[j];
        n_err[i] = ne[j];
        b[i] = b5[j] + rb[j];
        b_err[i] = be[j];
        eo[i] = ea[j];
        eo[n + i] = en[j];
        eo[2 * n + i] = eb[j];
        done[i] = (char)(close[j] || (ae[j] <= rr * a[i] && ne[j] <= rr * a[i] * ns[i] && be[j] <= rr * b[i]));
        if (close[j] && holds[j] && endrules) {
            /* its rules are at exact distances from the float end log1p(-q), which is within 8 u |s| of the
             * exact one (4 ulp): the cell's mass moves by at most 16 u |s| (the map from L moves with it), which
             * moves N and B by at most that times B; no position charge at the end (fpld_psg_integrals) */
            double es = 16 * u * fabs(s_end) * b[i];
            n_err[i] += es;
            b_err[i] += es;
            endrules[i] = 1;
        }
    }
finish:
    free(buf);
    free(idx);
    free(flags);
    return st;
}

int fpld_psg_integrals(const double *lo, const double *h, ptrdiff_t n, ptrdiff_t h_stride, double tiny, double s_lo,
                       double s_hi, double q, double v, double sd, int remove, double cre, double near_end,
                       double refine_rel, double u_step, double u_step_near, double u_depth, int u_refine,
                       double rel_cap, int64_t max_panels, const double *x5, const double *w5, double anchor,
                       double *out)
{
    const double u = 0x1p-53;
    if (n < 0 || !(h_stride == 0 || h_stride == 1) || !(q > 0 && q < 1) || !(v > 0) || !(sd > 0) || isnan(s_lo)
        || isnan(s_hi) || s_lo > s_hi || !(near_end >= 0) || !(u_step > 0) || !(u_step_near > 0)
        || !(u_depth >= 5.0 && u_depth + 1 - 5.0 <= 5.0 * INTEGRALS_MAX_LADDER) || u_refine < 0 || max_panels < 0)
        return FPLD_EINVAL;
    if (n == 0)
        return FPLD_OK;
    double *a_err = out + n, *n_err = out + 3 * n, *b_err = out + 5 * n;
    /* c0, c1, nscale (n each); ends, f_end, pos, move (n + 1 each); a level's panels (9 * 512 and their error
     * sums 3 * 512); the density's error sums (3 n) */
    double *buf = (double *)malloc(sizeof(double) * (6 * (size_t)n + 4 * ((size_t)n + 1) + 12 * 512));
    char *done = (char *)calloc((size_t)n, 1), *endrules = (char *)calloc((size_t)n, 1);
    int st = FPLD_OK;
    if (!buf || !done || !endrules) {
        st = FPLD_ENOMEM;
        goto finish;
    }
    double *c0 = buf, *c1 = buf + n, *ns = buf + 2 * n, *ends = buf + 3 * n, *fend = ends + (n + 1),
           *pos = fend + (n + 1), *move = pos + (n + 1), *pan = move + (n + 1), *eo = pan + 12 * 512;
    /* each interval integrated over its part inside the support */
    for (ptrdiff_t i = 0; i < n; i++) {
        double hi_ = h[i * h_stride];
        c0[i] = np_clip(lo[i], s_lo, s_hi) - lo[i];
        c1[i] = np_maximum(np_clip(lo[i] + hi_, s_lo, s_hi) - lo[i], c0[i]);
        ns[i] = -expm1(-hi_); /* nscale: N's error against the cell's mass times 1 - e^-w */
    }
    st = fpld_psg_panels(lo, c0, c1, n, q, v, sd, remove, x5, w5, out, eo);
    if (st != FPLD_OK)
        goto finish;
    /* the support ends: the log-distance rules near them */
    for (int side = 0; side < 2; side++) {
        double s_end = side == 0 ? s_lo : s_hi;
        if (!isfinite(s_end))
            continue;
        st = integrals_side(side, s_end, lo, h, h_stride, n, tiny, c0, c1, ns, done, q, v, sd, remove, near_end,
                            refine_rel, u_step, u_step_near, u_depth, u_refine, rel_cap, max_panels, x5, w5, cre,
                            endrules, out, eo);
        if (st != FPLD_OK)
            goto finish;
    }
    /* the cells whose rules still fail (not negligible): split into 8, 64, then 512 equal panels */
    for (int level = 1; level < 4; level++) {
        ptrdiff_t m = (ptrdiff_t)1 << (3 * level), nbad = 0;
        for (ptrdiff_t i = 0; i < n; i++)
            if (!done[i] && a_err[i] > tiny && integrals_fail(out, n, i, ns, refine_rel))
                nbad++;
        if (nbad == 0)
            break;
        if ((int64_t)nbad * (int64_t)m > max_panels)
            break; /* (bounded work: the coarser rules' error bounds stand, charged as they are) */
        double *plo = pan, *p0 = pan + m, *p1 = pan + 2 * m, *pr = pan + 3 * m, *pe = pan + 9 * m;
        for (ptrdiff_t i = 0; i < n; i++) {
            if (!(!done[i] && a_err[i] > tiny && integrals_fail(out, n, i, ns, refine_rel)))
                continue;
            /* edges c0 + (c1 - c0) (k / m), k = 0..m (numpy.arange(m + 1) / m) */
            double w = c1[i] - c0[i], e0 = c0[i] + w * 0.0;
            for (ptrdiff_t k = 0; k < m; k++) {
                double e1 = c0[i] + w * ((double)(k + 1) / (double)m);
                plo[k] = lo[i];
                p0[k] = e0;
                p1[k] = e1;
                e0 = e1;
            }
            st = fpld_psg_panels(plo, p0, p1, m, q, v, sd, remove, x5, w5, pr, pe);
            if (st != FPLD_OK)
                goto finish;
            for (int r = 0; r < 6; r++) {
                double s = 0.0;
                for (ptrdiff_t k = 0; k < m; k++)
                    s += pr[r * m + k];
                out[r * n + i] = s;
            }
            for (int r = 0; r < 3; r++) {
                /* (and the m panels' values summed in sequence: m u of their sizes) */
                double s = 0.0, sa = 0.0;
                for (ptrdiff_t k = 0; k < m; k++) {
                    s += pe[r * m + k];
                    sa += fabs(pr[2 * r * m + k]);
                }
                eo[r * n + i] = s + (double)m * u * sa;
            }
        }
    }
    /* the density's rounding at the chosen rules' nodes (refining does not reduce it, so it took no part above) */
    for (ptrdiff_t i = 0; i < n; i++) {
        a_err[i] += eo[i];
        n_err[i] += eo[n + i];
        b_err[i] += eo[2 * n + i];
    }
    /* the position charge: each cell end within 4 u (|y| + w) of the lattice point it stands for moves up to
     * f(end) times that between neighbouring cells, charged to all three integrals */
    for (ptrdiff_t i = 0; i < n; i++)
        ends[i] = lo[i];
    ends[n] = lo[n - 1] + h[(n - 1) * h_stride];
    /* a lattice anchored at the end log(1 - q) (anchor; NaN: none) has a point exactly there: the cell end that
     * stands for it is put on it (the sum lo + h may round off it) and charged no position (below) */
    ptrdiff_t at_anchor = -1;
    if (!isnan(anchor)) {
        double w_end = h[(n - 1) * h_stride];
        if (fabs(ends[0] - anchor) <= (4 * u) * (fabs(anchor) + h[0]))
            at_anchor = 0;
        else if (fabs(ends[n] - anchor) <= (4 * u) * (fabs(anchor) + w_end))
            at_anchor = n;
        if (at_anchor >= 0)
            ends[at_anchor] = anchor;
    }
    st = fpld_psg_eval(ends, n + 1, q, v, sd, remove, NULL, NULL, fend);
    if (st != FPLD_OK)
        goto finish;
    double hmax = h[0]; /* numpy.max(h) (NaN propagates) */
    for (ptrdiff_t i = 1; i < (h_stride ? n : 1); i++)
        if (!(hmax >= h[i]) && !isnan(hmax))
            hmax = h[i];
    for (ptrdiff_t i = 0; i <= n; i++) {
        double delta = (4 * u) * (fabs(ends[i]) + hmax);
        pos[i] = fabs(fend[i]) * delta;
        if (!isfinite(pos[i])) {
            /* (a density not finite at an end: the mass within delta of it, from the CDF or the survival
             * function, whichever is smaller, and their rounding) */
            double x[2] = {ends[i] + delta, ends[i] - delta}, F[2], S[2];
            st = fpld_psg_eval(x, 2, q, v, sd, remove, F, S, NULL);
            if (st != FPLD_OK)
                goto finish;
            int use_f = F[0] <= S[1];
            pos[i] = (use_f ? fabs(F[0] - F[1]) : fabs(S[1] - S[0])) + 16 * cre * (use_f ? fabs(F[0]) : fabs(S[1]))
                     + 1e-300;
        }
    }
    /* (the anchored end: the computed model -- its end is the float log1p(-q), the anchor -- has no mass beyond it,
     * so none crosses that cell end; the exact loss lies within 4 u |s| of the model there, a shift of the loss,
     * which the leaves charge as such: dominance.leaves._end_shift) */
    if (at_anchor >= 0)
        pos[at_anchor] = 0.0;
    for (ptrdiff_t i = 0; i < n; i++)
        move[i] = pos[i] + pos[i + 1];
    /* a support end inside the window: the density next to it, inside */
    for (int side = 0; side < 2; side++) {
        double s_end = side == 0 ? s_lo : s_hi;
        if (!(isfinite(s_end) && ends[0] < s_end && s_end < ends[n]))
            continue;
        ptrdiff_t j = searchsorted_right(ends, n + 1, s_end) - 1;
        j = j < 0 ? 0 : (j > n - 1 ? n - 1 : j);
        if (endrules[j])
            continue; /* (its rules at exact distances from the end: nothing there moves with the positions) */
        double d_s = (4 * u) * (fabs(s_end) + hmax), f_s, y = nextafter(s_end, side == 0 ? INFINITY : -INFINITY);
        st = fpld_psg_eval(&y, 1, q, v, sd, remove, NULL, NULL, &f_s);
        if (st != FPLD_OK)
            goto finish;
        if (!isfinite(f_s)) {
            double x = side == 0 ? s_end + d_s : s_end - d_s, F, S;
            st = fpld_psg_eval(&x, 1, q, v, sd, remove, &F, &S, NULL);
            if (st != FPLD_OK)
                goto finish;
            f_s = 1.0;
            d_s = (side == 0 ? F : S) * (1 + 16 * cre) + 1e-300;
        }
        move[j] += fabs(f_s) * d_s;
    }
    for (ptrdiff_t i = 0; i < n; i++) {
        double mv = move[i] * (1 + 1e-6);
        a_err[i] = a_err[i] + mv;
        n_err[i] = n_err[i] + mv;
        b_err[i] = b_err[i] + mv;
    }
finish:
    free(buf);
    free(done);
    free(endrules);
    return st;
}
