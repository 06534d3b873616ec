"""The randomised oracle sweep (``tools/oracle_sweep.py``): a few seconds of random compositions whose certified
intervals must hold the exact curves, and the subsampled Gaussian step's closed form it uses against the 50-digit
one of ``test_overflow_sweep``."""
import os
import subprocess
import sys

import mpmath
import pytest

from oracles import epsilon_of, psg_delta
from test_overflow_sweep import _psg_delta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("sigma,q", [(0.6, 0.3), (1.0, 0.01), (4.0, 0.001)])
def test_psg_delta_is_the_exact_curve(sigma, q):
    with mpmath.workdps(50):
        for eps in (0.0, 0.05, 0.5, 2.0):
            exact = float(_psg_delta(eps, sigma, q))
            assert psg_delta(eps, sigma, q) == pytest.approx(exact, rel=1e-9, abs=1e-15), eps
    e = epsilon_of(lambda x: psg_delta(x, sigma, q), 1e-6)
    assert psg_delta(e, sigma, q) <= 1e-6 < psg_delta(e * (1 - 1e-9) - 1e-15, sigma, q)


def test_oracle_sweep_short_run():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "oracle_sweep.py"), "--seconds", "4", "--seed", "7"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert " 0 intervals missing the oracle" in p.stdout, p.stdout[-1000:]
    assert int(p.stdout.split(" compositions")[0].split()[-1]) > 10, p.stdout[-500:]
