"""``import fastpld`` stays light: heavy dependencies are imported where they are used."""
import os
import subprocess
import sys

import pytest

HEAVY = ("scipy.signal", "scipy.special", "scipy.stats", "scipy.optimize", "matplotlib", "dp_accounting",
         "opacus", "prv_accountant", "torch", "pyfftw", "dask", "mpmath")


def _modules_after(code):
    env = dict(os.environ)
    import fastpld

    src = os.path.dirname(os.path.dirname(os.path.abspath(fastpld.__file__)))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, env=env, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("code", ["import fastpld", "import fastpld.cli", "import fastpld.plot"])
def test_import_does_not_load_heavy_modules(code):
    loaded = _modules_after(code)
    assert "fastpld" in loaded
    bad = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert not bad, f"{code!r} imported {bad}"


def test_heavy_modules_load_on_first_use():
    # (the Gaussian's CDF is scipy's ndtr; the subsampled Gaussian's is compiled, and its windows start from the
    # standard library's normal quantile: its first composition loads neither scipy.special nor pyFFTW's package,
    # only pyFFTW's compiled module)
    loaded = _modules_after("import fastpld\n"
                            "fastpld.compose(fastpld.Gaussian(1.0), 3).epsilon(1e-5)")
    assert "scipy.special" in loaded
    loaded = _modules_after("import fastpld\n"
                            "fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 3000).epsilon(1e-5)\n"
                            "assert fastpld.get_backend() == 'native' or 'native' not in fastpld.available_backends()")
    from fastpld import _kernels
    if _kernels._core is not None:  # (without the compiled core -- FASTPLD_PURE_PYTHON=1 -- numpy and scipy do it)
        assert not any(m in loaded for m in ("scipy.special", "scipy.fft", "pyfftw", "pyfftw.interfaces", "dask"))


def test_pyfftw_loaded_later_is_the_same_module():
    """fastpld loads pyFFTW's compiled module alone; a later ``import pyfftw`` (the package, its interfaces)
    finds it: one FFTW class, and the package works."""
    code = ("import fastpld, sys\n"
            "fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 3000).epsilon(1e-5)\n"
            "core = sys.modules.get('pyfftw.pyfftw')\n"
            "import pyfftw, numpy as np\n"
            "from pyfftw.interfaces import numpy_fft\n"
            "assert core is None or pyfftw.FFTW is core.FFTW\n"
            "assert np.allclose(numpy_fft.rfft(np.ones(8)), np.fft.rfft(np.ones(8)))\n"
            "print('ok')")
    loaded = _modules_after(code)
    assert "pyfftw.interfaces" in loaded


def test_lazy_proxy_returns_the_real_functions():
    import scipy.signal
    import scipy.special

    from fastpld import _kernels, curve, mechanisms
    from fastpld._lazy import lazy_module

    assert mechanisms.special.ndtr is scipy.special.ndtr
    assert _kernels.special.ndtri is scipy.special.ndtri
    assert curve.signal.lfilter is scipy.signal.lfilter
    proxy = lazy_module("math")
    assert proxy.pi == 3.141592653589793 and "math" in repr(proxy)
    with pytest.raises(AttributeError):
        proxy.no_such_name
