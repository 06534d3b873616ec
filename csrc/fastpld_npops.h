/* numpy's elementwise maximum, minimum and clip on doubles, for the kernels that repeat a numpy reference's
 * operations (fastpld_leaf.c, _core.pyx, _dominance.pyx): a NaN argument is the result (numpy.clip: a NaN x),
 * and of two equal values the first is returned, as numpy's loops do. */
#ifndef FASTPLD_NPOPS_H
#define FASTPLD_NPOPS_H

#include <math.h>

/* numpy.maximum */
static inline double np_maximum(double a, double b)
{
    if (isnan(a))
        return a;
    if (isnan(b))
        return b;
    return a >= b ? a : b;
}

/* numpy.minimum */
static inline double np_minimum(double a, double b)
{
    if (isnan(a))
        return a;
    if (isnan(b))
        return b;
    return a <= b ? a : b;
}

/* numpy.clip(x, lo, hi) with scalar bounds (not NaN) */
static inline double np_clip(double x, double lo, double hi)
{
    if (isnan(x))
        return x;
    double r = x > lo ? x : lo;
    return r < hi ? r : hi;
}

#endif
