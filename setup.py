"""Build the compiled core (the rest of the metadata lives in pyproject.toml)."""
import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension(
        "fastpld._core",
        sources=["src/fastpld/_core.pyx", "csrc/fastpld_kernels.c"],
        include_dirs=["csrc", np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        # no FMA contraction: kernels round like the numpy reference
        extra_compile_args=["-O3", "-ffp-contract=off"],
    ),
    Extension(
        "fastpld._leaf",
        sources=["src/fastpld/_leaf.pyx", "csrc/fastpld_leaf.c"],
        include_dirs=["csrc", np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3", "-ffp-contract=off"],
    ),
]

setup(ext_modules=cythonize(extensions, language_level=3))
