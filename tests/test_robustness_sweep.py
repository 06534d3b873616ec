"""The randomised robustness sweep (``tools/robustness_sweep.py``): a few seconds of random compositions of the
mechanisms without a closed-form curve, whose answers must be consistent and whose refusals clear."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import robustness_sweep  # noqa: E402


def test_robustness_sweep_short_run():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "robustness_sweep.py"), "--seconds", "4",
                        "--seed", "3"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert " 0 inconsistencies" in p.stdout, p.stdout[-1000:]
    assert int(p.stdout.split(" compositions answered")[0].split()[-1]) > 10, p.stdout[-500:]


class _Bounds:
    def __init__(self, lower, estimate, upper):
        self.lower, self.estimate, self.upper = lower, estimate, upper


class _Fake:
    """A composition whose answers a test sets: the checks must catch each kind of inconsistency."""

    def __init__(self, eps, delta_lo, delta_hi):
        self.eps, self.delta_lo, self.delta_hi = eps, delta_lo, delta_hi

    def epsilon(self, d):
        return self.eps[d]

    def delta(self, e):
        return _Bounds(self.delta_lo(e), self.delta_lo(e), self.delta_hi(e))


def test_the_checks_catch_inconsistent_answers():
    good = {1e-2: _Bounds(1.0, 1.1, 1.2), 1e-5: _Bounds(2.0, 2.1, 2.2), 1e-8: _Bounds(3.0, 3.1, 3.2)}

    def curve(e):  # (a curve whose epsilon at 1e-2, 1e-5, 1e-8 lies in the intervals above)
        return 10.0 ** (-2 - 3 * (e - 1.1))

    assert robustness_sweep._check(_Fake(good, curve, curve)) == ([], [])
    unordered = {**good, 1e-5: _Bounds(2.0, 2.3, 2.2)}
    assert robustness_sweep._check(_Fake(unordered, curve, curve))[0]
    increasing = {**good, 1e-8: _Bounds(0.5, 0.6, 0.7)}
    assert robustness_sweep._check(_Fake(increasing, curve, curve))[0]
    assert robustness_sweep._check(_Fake(good, lambda e: 2 * curve(e), curve))[0]  # (delta's lower bound too high)
    assert robustness_sweep._check(_Fake(good, curve, lambda e: 0.5 * curve(e)))[0]  # (delta's upper bound too low)
