/* Plain C kernels of fastpld (see fastpld_kernels.h). */
#include "fastpld_kernels.h"

/* out[j] = sum_{i>=j} p[i] factor^(i-j); stable for factor in [0, 1] (no growth). */
int fpld_discounted_rcumsum(const double *p, ptrdiff_t n, double factor, double *out)
{
    if (!(factor >= 0.0 && factor <= 1.0))
        return 1;
    double acc = 0.0;
    for (ptrdiff_t j = n - 1; j >= 0; --j) {
        acc = p[j] + factor * acc;
        out[j] = acc;
    }
    return 0;
}
