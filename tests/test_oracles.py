"""The oracles themselves against the spot values in MATH.md."""
import pytest

from oracles import gaussian_delta, pure_dp_delta


@pytest.mark.parametrize("eps,expected", [(0.0, 0.3829249), (1.0, 0.1269367), (2.0, 0.02092364)])
def test_gaussian_spot_values(eps, expected):
    assert gaussian_delta(eps, 1.0) == pytest.approx(expected, abs=1e-7)


def test_pure_dp_spot_values():
    assert pure_dp_delta(1.0, 0.5, 20) == pytest.approx(0.5759293, abs=1e-7)
    assert pure_dp_delta(0.0, 0.1, 100) == pytest.approx(0.3819726, abs=1e-7)
