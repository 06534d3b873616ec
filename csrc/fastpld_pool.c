/* The arrays' memory pool (fastpld._pool): numpy's data allocator while fastpld composes.
 *
 * Why: an answer's arrays (leaf PMFs, node outputs, query tables, temporaries) are freed when it is evicted,
 * a few hundred kilobytes to megabytes at the top of the C heap, which glibc then gives back to the kernel
 * (M_TRIM_THRESHOLD, 128 KiB); the next composition maps it again, a page fault per 4 KiB touched (measured in
 * docs/performance.md, thirtieth session).  Blocks of POOL_MIN bytes or
 * more are kept on free lists per size class when freed, up to a cap of cached bytes, and handed out again: memory
 * already mapped.  Smaller blocks and blocks past the cap go to malloc and free as before.
 *
 * Every block carries a 16-byte header (its capacity, and padding) before the pointer handed out, so a free
 * needs no size from its caller, and the pointer keeps malloc's 16-byte alignment.  One mutex guards the lists
 * (numpy allocates and frees under the GIL; the lock makes the pool safe without it).  Contents are never read:
 * a pooled block is as uninitialised as a fresh one (calloc zeroes it). */
#include <Python.h> /* (first: its feature macros) */
#include <numpy/ndarraytypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fastpld_pool.h"

#define POOL_MIN ((size_t)16384)          /* smaller blocks: malloc and free */
#define POOL_MAX ((size_t)1 << 30)        /* larger blocks: never pooled */
#define NCLASS 64                          /* classes POOL_MIN 2^(k/4), k < NCLASS: past 2^30 */
#define HEADER 16

typedef struct {
    uint64_t cap; /* usable bytes after the header */
    uint64_t pad; /* (keeps the pointer handed out at malloc's 16-byte alignment) */
} header_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *heads[NCLASS];
static size_t cached = 0;      /* bytes on the free lists (capacities) */
static size_t limit = 0;       /* at most this many cached; set by fpld_pool_set_limit */
static size_t class_cap[NCLASS];
static int classes_ready = 0;

static void init_classes(void)
{
    /* POOL_MIN 2^(k/4), rounded up to 4 KiB: at most 19% above a request */
    static const double steps[4] = {1.0, 1.189207115002721, 1.414213562373095, 1.681792830507429};
    for (int k = 0; k < NCLASS; k++) {
        double c = (double)POOL_MIN * (double)((size_t)1 << (k / 4)) * steps[k % 4];
        size_t b = (size_t)c;
        b = (b + 4095) & ~(size_t)4095;
        class_cap[k] = b;
    }
    classes_ready = 1;
}

/* the smallest class holding n bytes, or -1 (below POOL_MIN or past the last class) */
static int class_of(size_t n)
{
    if (n < POOL_MIN || n > POOL_MAX)
        return -1;
    int lo = 0, hi = NCLASS - 1;
    if (class_cap[hi] < n)
        return -1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (class_cap[mid] >= n)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* a fresh block of cap bytes from the C heap (zeroed: calloc, which skips the zeroing of fresh pages) */
static void *raw_block(size_t cap, int zero)
{
    if (cap > SIZE_MAX - HEADER)
        return NULL;
    header_t *h = (header_t *)(zero ? calloc(1, HEADER + cap) : malloc(HEADER + cap));
    if (!h)
        return NULL;
    h->cap = cap;
    return (char *)h + HEADER;
}

/* a block of at least size bytes: a cached one of its class if any (*reused = 1), else a fresh one */
static void *get_block(size_t size, int zero, int *reused)
{
    pthread_mutex_lock(&lock);
    if (!classes_ready)
        init_classes();
    int k = class_of(size);
    if (k >= 0 && heads[k]) {
        void *p = heads[k];
        heads[k] = *(void **)p;
        cached -= class_cap[k];
        pthread_mutex_unlock(&lock);
        *reused = 1;
        return p;
    }
    pthread_mutex_unlock(&lock);
    *reused = 0;
    return raw_block(k >= 0 ? class_cap[k] : (size ? size : 1), zero);
}

void *fpld_pool_malloc(void *ctx, size_t size)
{
    int reused;
    (void)ctx;
    return get_block(size, 0, &reused);
}

void *fpld_pool_calloc(void *ctx, size_t nelem, size_t elsize)
{
    int reused;
    (void)ctx;
    if (elsize && nelem > SIZE_MAX / elsize)
        return NULL;
    size_t n = nelem * elsize;
    void *p = get_block(n, 1, &reused);
    if (p && reused)
        memset(p, 0, n);
    return p;
}

void fpld_pool_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    (void)size; /* (the header's capacity counts, not the caller's size) */
    if (!ptr)
        return;
    header_t *h = (header_t *)((char *)ptr - HEADER);
    size_t cap = (size_t)h->cap;
    pthread_mutex_lock(&lock);
    int k = class_of(cap);
    if (k >= 0 && class_cap[k] == cap && cached + cap <= limit) {
        *(void **)ptr = heads[k];
        heads[k] = ptr;
        cached += cap;
        pthread_mutex_unlock(&lock);
        return;
    }
    pthread_mutex_unlock(&lock);
    free(h);
}

void *fpld_pool_realloc(void *ctx, void *ptr, size_t new_size)
{
    if (!ptr)
        return fpld_pool_malloc(ctx, new_size);
    header_t *h = (header_t *)((char *)ptr - HEADER);
    size_t cap = (size_t)h->cap;
    if (new_size <= cap && (new_size >= cap / 2 || cap < POOL_MIN))
        return ptr; /* (fits, and not mostly empty) */
    void *q = fpld_pool_malloc(ctx, new_size);
    if (!q)
        return NULL; /* (the old block stays valid, as realloc's does) */
    memcpy(q, ptr, new_size < cap ? new_size : cap);
    fpld_pool_free(ctx, ptr, cap);
    return q;
}

size_t fpld_pool_cached(void)
{
    pthread_mutex_lock(&lock);
    size_t n = cached;
    pthread_mutex_unlock(&lock);
    return n;
}

/* keep at most n cached bytes from now on; n = 0 frees every cached block */
void fpld_pool_set_limit(size_t n)
{
    void *drop[NCLASS];
    pthread_mutex_lock(&lock);
    if (!classes_ready)
        init_classes();
    limit = n;
    for (int k = 0; k < NCLASS; k++)
        drop[k] = NULL;
    /* (the largest classes go first; what is left fits the limit) */
    for (int k = NCLASS - 1; k >= 0 && cached > limit; k--) {
        while (heads[k] && cached > limit) {
            void *p = heads[k];
            heads[k] = *(void **)p;
            cached -= class_cap[k];
            *(void **)p = drop[k];
            drop[k] = p;
        }
    }
    pthread_mutex_unlock(&lock);
    for (int k = 0; k < NCLASS; k++) {
        while (drop[k]) {
            void *p = drop[k];
            drop[k] = *(void **)p;
            free((char *)p - HEADER);
        }
    }
}

/* a forked child: the lock may have been held by a thread of the parent that does not exist in the child; the
 * lists' blocks are the child's copies, still valid */
static void child_after_fork(void)
{
    pthread_mutex_init(&lock, NULL);
}

void fpld_pool_init(void)
{
    static int done = 0;
    if (!done) {
        done = 1;
        pthread_atfork(NULL, NULL, child_after_fork);
    }
}

static PyDataMem_Handler handler = {
    "fastpld_pool",
    1,
    {NULL, fpld_pool_malloc, fpld_pool_calloc, fpld_pool_realloc, fpld_pool_free},
};

void *fpld_pool_handler(void)
{
    return &handler;
}
