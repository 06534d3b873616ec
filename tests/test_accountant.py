"""PrivacyAccountant: equals one-shot composition, merges identical mechanisms, thread-safe."""
import threading

import numpy as np
import pytest

import fastpld

KW = dict(eps_error=0.1, delta_error=1e-9)


def test_empty_accountant():
    acc = fastpld.PrivacyAccountant(**KW)
    assert acc.get_epsilon(1e-5) == (0.0, 0.0, 0.0)
    assert acc.get_delta(1.0) == (0.0, 0.0, 0.0)


def test_equals_one_shot_compose_along_a_training_loop():
    acc = fastpld.PrivacyAccountant(**KW)
    g = fastpld.PoissonSubsampledGaussian(1.1, 0.02)
    lap = fastpld.Laplace(20.0)
    history = []
    for step in range(1, 7):
        m = g if step != 4 else lap
        assert acc.compose(m) is acc
        history.append((m, 1))
        e = acc.get_epsilon(1e-5)
        ref = fastpld.compose(history, **KW)
        assert e == ref.epsilon(1e-5)
        for eps in (0.5, 1.0):
            assert acc.get_delta(eps) == ref.delta(eps)
    assert acc.history == ((g, 5), (lap, 1))
    assert acc.num_compositions == 6


def test_merges_identical_mechanisms_and_counts():
    a = fastpld.PrivacyAccountant(**KW).compose(fastpld.Gaussian(3.0), 10).compose(fastpld.Gaussian(3.0), 5)
    b = fastpld.PrivacyAccountant(**KW).compose(fastpld.Gaussian(3.0), 15)
    assert a.history == b.history
    assert a.get_epsilon(1e-6) == b.get_epsilon(1e-6)
    ref = fastpld.compose(fastpld.Gaussian(3.0), 15, **KW)
    assert abs(a.get_epsilon(1e-6).upper - ref.epsilon(1e-6).upper) <= 1e-12


def test_cache_reuses_the_composition():
    acc = fastpld.PrivacyAccountant(**KW).compose(fastpld.Gaussian(2.0), 7)
    p1 = acc.pld()
    acc.get_epsilon(1e-5)
    acc.get_delta(0.3)
    assert acc.pld() is p1


@pytest.mark.parametrize("args", [(None, 1), (fastpld.Gaussian(1.0), 0), (fastpld.Gaussian(1.0), -1),
                                  (fastpld.Gaussian(1.0), 2.5), ("gauss", 1)])
def test_bad_compose_refused(args):
    with pytest.raises(ValueError):
        fastpld.PrivacyAccountant(**KW).compose(*args)


def test_bad_queries_and_settings_refused():
    acc = fastpld.PrivacyAccountant(**KW).compose(fastpld.Gaussian(1.0))
    for bad in (0.0, -1e-5, 1.5, float("nan")):
        with pytest.raises(ValueError):
            acc.get_epsilon(bad)
    with pytest.raises(ValueError):
        acc.get_delta(-1.0)
    with pytest.raises(ValueError):
        fastpld.PrivacyAccountant(eps_error=0.0)
    with pytest.raises(ValueError):
        fastpld.PrivacyAccountant(method="fast")


def test_thread_safe():
    acc = fastpld.PrivacyAccountant(**KW)
    mechs = [fastpld.Gaussian(float(s)) for s in (2.0, 3.0, 4.0)]
    errors = []

    def work(i):
        try:
            for j in range(5):
                acc.compose(mechs[(i + j) % 3])
                acc.get_epsilon(1e-5)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert acc.num_compositions == 20
    ref = fastpld.compose(list(acc.history), **KW)
    assert acc.get_epsilon(1e-5) == ref.epsilon(1e-5)
    assert np.isclose(sum(c for _, c in acc.history), 20)
