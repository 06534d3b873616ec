/* Plain C kernels of fastpld: no Python, an int status (0 = ok). */
#ifndef FASTPLD_KERNELS_H
#define FASTPLD_KERNELS_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
int fpld_discounted_rcumsum(const double *p, ptrdiff_t n, double factor, double *out);
#ifdef __cplusplus
}
#endif
#endif
