# cython: language_level=3
"""The arrays' memory pool (``csrc/fastpld_pool.c``): numpy's data allocator while fastpld composes.

An answer's arrays freed when it is evicted are kept on free lists per size class (up to a limit of cached bytes)
and handed out to the next composition, instead of going back to the C heap, whose top glibc returns to the kernel
and maps again page by page.  :func:`enter` makes the pool the calling thread's (its context's) numpy allocator and
returns the one it replaces, for :func:`leave`; arrays remember the allocator that made them, so they return to the
pool whenever and wherever they are freed.  :mod:`fastpld.resources` holds the Python side (``array_pool``).
"""
from cpython.pycapsule cimport PyCapsule_New
cimport numpy as cnp

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    object PyDataMem_SetHandler(object handler)

cdef extern from "fastpld_pool.h":
    void *fpld_pool_handler()
    size_t fpld_pool_cached()
    void fpld_pool_set_limit(size_t n)
    void fpld_pool_init()

fpld_pool_init()
_HANDLER = PyCapsule_New(fpld_pool_handler(), "mem_handler", NULL)


def enter():
    """Make the pool the calling context's numpy data allocator; returns the allocator it replaced."""
    return PyDataMem_SetHandler(_HANDLER)


def leave(previous):
    """Put back ``previous`` (what :func:`enter` returned) as the calling context's allocator."""
    PyDataMem_SetHandler(previous)


def cached_bytes():
    """Bytes the pool holds on its free lists."""
    return fpld_pool_cached()


def set_limit(size_t nbytes):
    """Keep at most ``nbytes`` on the free lists from now on (freeing what exceeds it; 0 frees them all)."""
    fpld_pool_set_limit(nbytes)
