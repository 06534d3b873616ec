/* The arrays' memory pool (fastpld_pool.c): numpy's PyDataMem_Handler functions and the pool's controls. */
#ifndef FASTPLD_POOL_H
#define FASTPLD_POOL_H
#include <stddef.h>

void *fpld_pool_malloc(void *ctx, size_t size);
void *fpld_pool_calloc(void *ctx, size_t nelem, size_t elsize);
void *fpld_pool_realloc(void *ctx, void *ptr, size_t new_size);
void fpld_pool_free(void *ctx, void *ptr, size_t size);
size_t fpld_pool_cached(void);
void fpld_pool_set_limit(size_t n);
/* the pool's PyDataMem_Handler (numpy's struct), for a "mem_handler" capsule */
void *fpld_pool_handler(void);
/* once, at import: the lock made afresh in a forked child */
void fpld_pool_init(void);

#endif
