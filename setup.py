"""Build the compiled core (the rest of the metadata lives in pyproject.toml)."""
import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup


def _extension(name, sources, macros=()):
    return Extension(
        name,
        sources=sources,
        # libm by name: its functions bind to their current versions (an unversioned exp or log binds
        # to glibc's oldest, behind an errno wrapper; same values)
        libraries=["m"],
        include_dirs=["csrc", np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), *macros],
        # no FMA contraction: kernels round like the numpy reference; no errno from libm (never
        # read): lets sqrt vectorise
        extra_compile_args=["-O3", "-ffp-contract=off", "-fno-math-errno"],
    )


extensions = [
    _extension("fastpld._core", ["src/fastpld/_core.pyx", "csrc/fastpld_kernels.c"]),
    # (the fused leaf calls the bucket-mass, normalisation and round-off kernels of fastpld_kernels.c)
    _extension("fastpld._leaf", ["src/fastpld/_leaf.pyx", "csrc/fastpld_leaf.c", "csrc/fastpld_kernels.c"]),
    # (the dominance certificate's balanced split: one sequential pass, no C core of its own)
    _extension("fastpld._dominance", ["src/fastpld/_dominance.pyx"]),
    # (the arrays' memory pool: numpy's data allocator API, numpy >= 1.22)
    _extension("fastpld._pool", ["src/fastpld/_pool.pyx", "csrc/fastpld_pool.c"],
               [("NPY_TARGET_VERSION", "NPY_1_22_API_VERSION")]),
]

setup(ext_modules=cythonize(extensions, language_level=3))
