"""Incremental privacy accountant with certified answers.

:class:`PrivacyAccountant` records mechanisms as they are used (a training loop
calls :meth:`~PrivacyAccountant.compose` once per step) and answers
``epsilon(delta)`` / ``delta(epsilon)`` queries with certified
:class:`~fastpld.Bounds`.  Its answers are *by construction* those of a one-shot
:func:`fastpld.compose` of the same history: the history is kept as an ordered
list of distinct mechanisms with their counts (identical mechanisms, which are
frozen dataclasses and hence hashable, are merged exactly as ``compose`` merges
them), and every query is answered from ``compose(history)``.

What is reused between queries:

* the composed distribution of every recent history state (an LRU cache), so
  any number of ``epsilon``/``delta`` queries at the same state cost one
  composition, and returning to an earlier state (e.g. two accountants sharing
  a history, or a rollback) is free;
* the per-mechanism set-up (privacy-loss objects, their moments and MGF grids),
  cached per mechanism value by :mod:`fastpld.mechanisms` and
  :mod:`fastpld.compose`, so a step that only increments the count of the last
  mechanism pays only for the composition itself.

Thread safety: the history and the cache are guarded by one lock; compositions
run outside it (two threads asking about the same new state may both compute
it; both get the same answer).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from . import _validation as V
from .compose import DEFAULT_MAX_BUCKETS, METHODS, compose
from .curve import Bounds, PrivacyLossDistribution
from .mechanisms import Mechanism

__all__ = ["PrivacyAccountant"]


class PrivacyAccountant:
    """Accumulate mechanisms and query certified privacy bounds of their composition.

    Parameters
    ----------
    eps_error, delta_error : float
        Error budget of every composition (see :func:`fastpld.compose`).
    method : str
        Composition method passed to :func:`fastpld.compose`.
    backend : str, optional
        FFT backend passed to :func:`fastpld.compose`.
    max_buckets : int
        Size guard passed to :func:`fastpld.compose`.
    cache_size : int
        Number of composed history states kept.

    Examples
    --------
    >>> acc = PrivacyAccountant(eps_error=0.1, delta_error=1e-9)
    >>> for step in range(100):  # doctest: +SKIP
    ...     acc.compose(PoissonSubsampledGaussian(sigma=1.0, sampling_probability=0.01))
    ...     eps = acc.get_epsilon(1e-5).upper
    """

    def __init__(self, eps_error: float = 0.1, delta_error: float = 1e-10, *, method: str = "auto",
                 backend: str | None = None, max_buckets: int = DEFAULT_MAX_BUCKETS, cache_size: int = 8):
        self.eps_error = V.eps_error(eps_error)
        self.delta_error = V.delta_error(delta_error)
        if not isinstance(method, str) or method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        self.method = method
        self.backend = backend
        self.max_buckets = V.positive_int("max_buckets", max_buckets)
        self._cache_size = V.positive_int("cache_size", cache_size)
        self._counts: OrderedDict = OrderedDict()  # mechanism -> count, in order of first use
        self._cache: OrderedDict = OrderedDict()  # history state -> PrivacyLossDistribution
        self._lock = threading.Lock()

    # recording -----------------------------------------------------------------------
    def compose(self, mechanism: Mechanism, count: int = 1) -> "PrivacyAccountant":
        """Record ``count`` uses of ``mechanism``; returns ``self`` (calls chain)."""
        if not isinstance(mechanism, Mechanism):
            raise ValueError(f"mechanism must be a fastpld Mechanism, got {mechanism!r}")
        count = V.positive_int("count", count)
        try:
            hash(mechanism)
        except TypeError:
            raise ValueError(f"mechanism must be hashable (a frozen mechanism), got {mechanism!r}") from None
        with self._lock:
            self._counts[mechanism] = self._counts.get(mechanism, 0) + count
        return self

    @property
    def history(self) -> tuple:
        """The recorded ``((mechanism, count), ...)`` with identical mechanisms merged."""
        with self._lock:
            return tuple(self._counts.items())

    @property
    def num_compositions(self) -> int:
        """Total number of recorded mechanism uses."""
        with self._lock:
            return sum(self._counts.values())

    # composition ---------------------------------------------------------------------
    def pld(self) -> PrivacyLossDistribution | None:
        """The composed distribution of the current history (``None`` if empty)."""
        state = self.history
        if not state:
            return None
        with self._lock:
            hit = self._cache.get(state)
            if hit is not None:
                self._cache.move_to_end(state)
                return hit
        result = compose(list(state), eps_error=self.eps_error, delta_error=self.delta_error,
                         method=self.method, backend=self.backend, max_buckets=self.max_buckets)
        with self._lock:
            self._cache[state] = result
            self._cache.move_to_end(state)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return result

    # queries -------------------------------------------------------------------------
    def get_epsilon(self, delta: float) -> Bounds:
        """Certified bounds on the smallest ``epsilon`` with ``delta(epsilon) <= delta``."""
        V.probability("delta", delta, open_low=True)
        pld = self.pld()
        if pld is None:
            return Bounds(0.0, 0.0, 0.0)
        return pld.epsilon(delta)

    def get_delta(self, epsilon: float) -> Bounds:
        """Certified bounds on ``delta(epsilon)``."""
        eps = V.nonnegative_float("epsilon", epsilon)
        pld = self.pld()
        if pld is None:
            return Bounds(0.0, 0.0, 0.0)
        return pld.delta(eps)

    # the same answers in the terms of attacks (see fastpld.fdp) ------------------------------
    def tradeoff(self, alpha) -> Bounds:
        """Certified bounds on the trade-off curve ``beta(alpha)`` (see :meth:`PrivacyLossDistribution.tradeoff`)."""
        pld = self.pld()
        if pld is None:  # nothing released: no test beats guessing, beta = 1 - alpha
            import numpy as np
            a = V.query_array("alpha", alpha, lo=0.0, hi=1.0)
            b = 1.0 - a if np.ndim(alpha) else float(1.0 - a)
            return Bounds(b, b, b)
        return pld.tradeoff(alpha)

    def tpr(self, fpr) -> Bounds:
        """Certified bounds on the best attack's true-positive rate at false-positive rate ``fpr``."""
        pld = self.pld()
        if pld is None:
            import numpy as np
            a = V.query_array("fpr", fpr, lo=0.0, hi=1.0)
            b = a if np.ndim(fpr) else float(a)
            return Bounds(b, b, b)
        return pld.tpr(fpr)

    def advantage(self) -> Bounds:
        """Certified bounds on the attack advantage ``max (TPR - FPR)``."""
        pld = self.pld()
        return Bounds(0.0, 0.0, 0.0) if pld is None else pld.advantage()

    def gdp_mu(self, alpha_range: tuple | None = None):
        """Certified Gaussian-DP mu (see :meth:`PrivacyLossDistribution.gdp_mu`); ``None`` if nothing was recorded."""
        pld = self.pld()
        return None if pld is None else pld.gdp_mu(alpha_range)

    def renyi(self, order) -> Bounds:
        """Certified bounds on the Renyi divergence of order ``order > 1`` of the composition."""
        pld = self.pld()
        if pld is None:
            import numpy as np
            o = V.query_array("order", order, lo=1.0)
            if (o <= 1.0).any() or np.isinf(o).any():
                raise ValueError(f"order must be finite and > 1, got {order!r}")
            z = np.zeros(o.shape) if np.ndim(order) else 0.0
            return Bounds(z, z, z)
        return pld.renyi(order)

    def __repr__(self):
        h = self.history
        return (f"PrivacyAccountant(eps_error={self.eps_error}, delta_error={self.delta_error}, "
                f"mechanisms={len(h)}, compositions={sum(c for _, c in h)})")
