import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_compositions():
    """Tests compare fresh compositions (and spy on or patch their internals): compose keeps no answers
    unless a test turns it on (tests/test_caches.py does, and checks them against fresh ones)."""
    from fastpld import resources

    saved = resources._state["limit"]
    resources.set_cache_limit(results=0)
    yield
    resources.set_cache_limit(saved, results=0)


@pytest.fixture
def allocation_builds(monkeypatch):
    """The ``upper`` flag of every random-allocation epoch loss built while the test runs (a spy on
    ``RandomAllocation._losses``)."""
    from fastpld.allocation import RandomAllocation

    built = []
    real = RandomAllocation._losses

    def counting(self, upper):
        built.append(upper)
        return real(self, upper)

    monkeypatch.setattr(RandomAllocation, "_losses", counting)
    return built
