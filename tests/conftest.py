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
def separate_gaussians(monkeypatch):
    """Gaussian parts composed as given, not merged into one (``composition.api._merged_gaussians``), and a Gaussian's
    ``k`` copies as ``k`` copies (``_single_gaussians``): the tests of the heterogeneous planners take distinct
    Gaussians for their exact oracle, those of the dominance chains' plans a Gaussian's copies."""
    import fastpld
    from fastpld.composition import api
    monkeypatch.setattr(api, "_MERGE_GAUSSIANS", False)
    fastpld.clear_caches(keep_plans=True)  # (answers kept by other tests: their keys do not hold the flag)
    yield
    fastpld.clear_caches(keep_plans=True)


@pytest.fixture
def spy(monkeypatch):
    """``spy(owner, name, record)``: ``owner.name`` replaced, while the test runs, by a wrapper that calls the real one
    and appends ``record(*args, **kwargs)`` to a list, which ``spy`` returns."""

    def install(owner, name, record):
        seen = []
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            seen.append(record(*args, **kwargs))
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)
        return seen

    return install


@pytest.fixture
def allocation_builds(spy):
    """The ``upper`` flag of every random-allocation epoch loss built while the test runs (a spy on
    ``RandomAllocation._losses``)."""
    from fastpld.allocation import RandomAllocation

    return spy(RandomAllocation, "_losses", lambda self, upper: upper)
