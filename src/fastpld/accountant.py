"""Incremental privacy accountant with certified answers.

:class:`PrivacyAccountant` records mechanisms as they are used (a training loop
calls :meth:`~PrivacyAccountant.compose` once per step) and answers
``epsilon(delta)`` / ``delta(epsilon)`` queries with certified
:class:`~fastpld.Bounds`.  The history is kept as an ordered list of distinct
mechanisms with their counts (identical mechanisms, which are frozen
dataclasses and hence hashable, are merged exactly as ``compose`` merges them),
so recording a step only increments a count.

Answers.  Every composition the accountant runs is a one-shot
:func:`fastpld.compose` of a history state ``((mechanism, count), ...)``, and the
composed distributions of recent states are kept (an LRU cache).  A query at the
current state ``S`` is answered in one of two ways, chosen by ``S`` alone (so
two accountants with the same history, or a saved and reloaded one, answer the
same, bit for bit, whatever was asked before):

* exactly: the bounds of ``compose(S)``;
* bracketed (``lookahead > 0``): let ``m`` be the mechanism recorded last, ``c``
  its count in ``S`` and ``g`` the largest power of two ``<= lookahead * c``.
  When ``g >= 2`` and ``g`` does not divide ``c``, the states ``B`` and ``A``
  equal ``S`` except that ``m``'s count is rounded down, resp. up, to a multiple
  of ``g``.  The answer is ``lower`` from ``compose(B)`` and ``upper`` (and the
  estimate, clipped) from ``compose(A)``.

Why the bracket is certified: ``B`` is a sub-history of ``S`` and ``S`` of
``A`` (the counts of every mechanism are ordered).  The output of the
composition of ``S`` is a post-processing (dropping coordinates) of the output
of ``A``, so by the data-processing inequality of the hockey-stick divergence
``delta_S(eps) <= delta_A(eps)`` for every ``eps``, in each neighbouring
direction; likewise ``delta_B <= delta_S``.  Hence
``lower_B <= delta_B <= delta_S <= delta_A <= upper_A`` (and the same order
for ``epsilon(delta)``, the inverse of these non-increasing curves), where the
outer inequalities are the certificates of the two one-shot compositions.  No
certificate of separately composed blocks is combined: each bound comes from
one composition, so the guarantee is exactly that of :func:`fastpld.compose`.

The price is width: the upper bound is that of at most ``g - 1 <=
lookahead * c`` more uses of ``m`` than happened (with the default ``1e-3``,
0.1 % more steps of a long run: for DP-SGD, whose epsilon grows about like the
square root of the steps, about 0.05 % of epsilon, half the default relative
accuracy), the lower bound that of as many fewer.  Where the bracket's epsilon
interval is wider than the relative accuracy asked (``rel_error``, or the
default's 1e-3: an epsilon growing about linearly in the steps, as a
subsampled Gaussian's at 1e5 steps, widens it by the whole stride's 0.1 %), the
stride is halved until it is not, down to answering ``S`` exactly; an absolute
``eps_error`` keeps the first bracket.  What it buys:
``compose(A)`` serves every state up to ``A``, and ``A`` becomes the next
bracket's ``B``, so a training loop composes once every ``g`` steps and
otherwise answers from two cached compositions.  ``lookahead=0`` answers
every state exactly.  :meth:`PrivacyAccountant.pld` always returns the exact
composition of the current state.

Persistence: :meth:`~PrivacyAccountant.state_dict` /
:meth:`~PrivacyAccountant.from_state_dict` (plain data),
:meth:`~PrivacyAccountant.to_json` / :meth:`~PrivacyAccountant.from_json`, and
pickling.  A restored accountant answers bit for bit as the original.

Thread safety: the history and the cache are guarded by one lock; compositions
run outside it (two threads asking about the same new state may both compute
it; both get the same answer).
"""
from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict

from . import _validation as V
from ._serialize import check_fields, mechanism_from_dict, mechanism_to_dict
from .composition.api import DEFAULT_MAX_BUCKETS, METHODS, compose, compose_for_delta, within_accuracy
from .curve import Bounds, PrivacyLossDistribution
from .mechanisms import Mechanism

__all__ = ["PrivacyAccountant"]

STATE_FORMAT = "fastpld.PrivacyAccountant"
STATE_VERSION = 1
_MAX_ANSWERS = 32  # memoised query answers kept per accountant (a loop needs a few)


class PrivacyAccountant:
    """Accumulate mechanisms and query certified privacy bounds of their composition.

    Parameters
    ----------
    eps_error : float, optional
        Error budget of every composition (see :func:`fastpld.compose`); give ``eps_error`` or
        ``rel_error``, or neither: compose's default (``rel_error=1e-3``; ``None`` kept here).
    delta_error : float, optional
        The compositions' delta error.  By default (``None``, kept here) 1e-10, and for
        :meth:`get_epsilon` at a ``delta`` below 1e-7 that delta over 1000: the delta charges (at most
        ``delta_error``) then keep the accuracy asked at that delta.
    rel_error : float, optional
        The accuracy relative to epsilon instead of ``eps_error`` (see :func:`fastpld.compose`: the
        certified interval of epsilon at most ``rel_error`` times it wide; the dominance certificate).
    method : str
        Composition method passed to :func:`fastpld.compose`.
    backend : str, optional
        FFT backend passed to :func:`fastpld.compose`.
    max_buckets : int
        Size guard passed to :func:`fastpld.compose`.
    cache_size : int
        Number of composed history states kept.
    lookahead : float
        In ``[0, 0.1]``.  ``0``: every answer is that of ``compose`` of the current
        history.  Otherwise a long run of one mechanism is answered from
        compositions of at most ``lookahead`` times its count more (upper bound)
        and fewer (lower bound) uses of it, composed once for many steps; the
        bounds stay certified (see the module documentation).

    Examples
    --------
    >>> acc = PrivacyAccountant(eps_error=0.1, delta_error=1e-9)
    >>> for step in range(100):  # doctest: +SKIP
    ...     acc.compose(PoissonSubsampledGaussian(sigma=1.0, sampling_probability=0.01))
    ...     eps = acc.get_epsilon(1e-5).upper
    """

    def __init__(self, eps_error: float | None = None, delta_error: float | None = None, *,
                 rel_error: float | None = None,
                 method: str = "auto", backend: str | None = None, max_buckets: int = DEFAULT_MAX_BUCKETS,
                 cache_size: int = 8, lookahead: float = 1e-3):
        rel, eps, default = V.accuracy(rel_error, eps_error, method)
        # (neither given: None, None, and every composition takes compose's default accuracy)
        self.rel_error, self.eps_error = (None, None) if default else (rel, eps)
        self.delta_error = None if delta_error is None else V.delta_error(delta_error)
        if not isinstance(method, str) or method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        self.method = method
        if backend is not None and not isinstance(backend, str):
            raise ValueError(f"backend must be a backend name or None, got {backend!r}")
        self.backend = backend
        self.max_buckets = V.positive_int("max_buckets", max_buckets)
        self._cache_size = V.positive_int("cache_size", cache_size)
        lookahead = V.nonnegative_float("lookahead", lookahead)
        if lookahead > 0.1:
            raise ValueError(f"lookahead must be in [0, 0.1], got {lookahead!r}")
        self.lookahead = lookahead
        self._counts: OrderedDict = OrderedDict()  # mechanism -> count, in order of first use
        self._last: Mechanism | None = None  # the mechanism recorded last
        self._cache: OrderedDict = OrderedDict()  # history state -> PrivacyLossDistribution
        self._answers: OrderedDict = OrderedDict()  # (state, "epsilon" or "delta", x) -> Bounds
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
            self._last = mechanism
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
    def _composed(self, state: tuple, delta_error: float | None = None) -> PrivacyLossDistribution:
        """``compose(state)`` at ``delta_error`` (default: the accountant's, or 1e-10), from the cache when there."""
        de = delta_error if delta_error is not None else V.delta_error_or_default(self.delta_error)
        key = (state, de)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        acc = {"rel_error": self.rel_error, "eps_error": self.eps_error}
        result = compose(list(state), delta_error=de, method=self.method, backend=self.backend,
                         max_buckets=self.max_buckets, **acc)
        with self._lock:
            self._cache[key] = result
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return result

    def pld(self) -> PrivacyLossDistribution | None:
        """The composed distribution of the current history, exactly (``None`` if empty)."""
        state = self.history
        return self._composed(state) if state else None

    def _snapshot(self):
        """``(S, last, g)``: the current state, the mechanism recorded last and the bracket's stride (``g < 2``:
        answer exactly)."""
        with self._lock:
            state = tuple(self._counts.items())
            last = self._last
        if not state or self.lookahead == 0 or last is None:
            return state, last, 0
        x = self.lookahead * dict(state)[last]
        if x < 2:
            return state, last, 0
        return state, last, 1 << (math.floor(x).bit_length() - 1)  # largest power of two <= lookahead * c

    @staticmethod
    def _bracket(state: tuple, last, g: int):
        """``(B, A)``: ``state`` with ``last``'s count rounded down and up to multiples of ``g`` (``None, None``
        where it is one)."""
        c = dict(state)[last]
        lo, hi = (c // g) * g, -(-c // g) * g
        if lo == c:
            return None, None
        below = tuple((m, lo if m == last else n) for m, n in state if not (m == last and lo == 0))
        above = tuple((m, hi if m == last else n) for m, n in state)
        return below, above

    def _query(self, state: tuple, kind: str, x: float) -> Bounds:
        """``compose(state).epsilon(x)`` or ``.delta(x)``, memoised (a loop asks the same question each step)."""
        key = (state, kind, x)
        with self._lock:
            hit = self._answers.get(key)
            if hit is not None:
                self._answers.move_to_end(key)
                return hit
        if kind == "epsilon":  # (at delta / 1000 where that is below the default: the accuracy asked holds at x)
            pld = compose_for_delta(lambda de: self._composed(state, de), x, self.delta_error, self.rel_error,
                                    self.eps_error)
        else:
            pld = self._composed(state)
        out = pld.epsilon(x) if kind == "epsilon" else pld.delta(x)
        with self._lock:
            self._answers[key] = out
            while len(self._answers) > _MAX_ANSWERS:
                self._answers.popitem(last=False)
        return out

    def _narrow_enough(self, kind: str, b: Bounds) -> bool:
        """Whether a bracket's ``epsilon`` interval is within the relative accuracy asked (``rel_error``, or the
        default's 1e-3; an absolute ``eps_error`` and ``delta`` queries: always)."""
        return kind != "epsilon" or within_accuracy(b, self.rel_error, self.eps_error)

    def _answer(self, kind: str, x: float) -> Bounds:
        state, last, g = self._snapshot()
        if not state:
            return Bounds(0.0, 0.0, 0.0)
        # the bracket at stride g, halved while its interval is wider than the accuracy asked (an epsilon growing
        # about linearly in the steps widens by the whole stride's share: PSG(1, 0.01) x 1e5 at stride 64, 1.06
        # times the 0.1% asked), down to answering this state exactly
        while g >= 2:
            below, above = self._bracket(state, last, g)
            if above is None:
                break
            try:
                up = self._query(above, kind, x)
                low = self._query(below, kind, x).lower if below else 0.0
            except ValueError:
                # e.g. a delta too small to certify at the longer history: answer this state exactly
                break
            b = Bounds(low, min(max(up.estimate, low), up.upper), up.upper)
            if self._narrow_enough(kind, b):
                return b
            g //= 2
        return self._query(state, kind, x)

    # queries -------------------------------------------------------------------------
    def get_epsilon(self, delta: float) -> Bounds:
        """Certified bounds on the smallest ``epsilon`` with ``delta(epsilon) <= delta``."""
        return self._answer("epsilon", V.probability("delta", delta, open_low=True))

    def get_delta(self, epsilon: float) -> Bounds:
        """Certified bounds on ``delta(epsilon)``."""
        return self._answer("delta", V.nonnegative_float("epsilon", epsilon))

    # persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The accountant as plain data (JSON-compatible): settings and history.

        ``{"format": "fastpld.PrivacyAccountant", "version": 1, "eps_error": ..., "delta_error": ...,
        "method": ..., "backend": ..., "max_buckets": ..., "cache_size": ..., "lookahead": ...,
        "history": [{"mechanism": {"type": "PoissonSubsampledGaussian", "sigma": ..., ...}, "count": ...}, ...],
        "last": index in history of the mechanism recorded last, or None}``.
        The cache of compositions is not part of it.  Raises ``ValueError`` for
        mechanisms without a data form (:class:`~fastpld.CustomCDF`; pickle those).
        """
        with self._lock:
            items = list(self._counts.items())
            last = self._last
        history = [{"mechanism": mechanism_to_dict(m), "count": int(n)} for m, n in items]
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "eps_error": self.eps_error,
                **({"rel_error": self.rel_error} if self.rel_error is not None else {}),
                "delta_error": self.delta_error, "method": self.method, "backend": self.backend,
                "max_buckets": self.max_buckets, "cache_size": self._cache_size, "lookahead": self.lookahead,
                "history": history,
                "last": None if last is None else next(i for i, (m, _) in enumerate(items) if m == last)}

    @classmethod
    def from_state_dict(cls, state: dict) -> "PrivacyAccountant":
        """An accountant restored from :meth:`state_dict`; ``ValueError`` naming the field of a bad state."""
        if not isinstance(state, dict):
            raise ValueError(f"state must be a dict, got {type(state).__name__}")
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"state.format must be {STATE_FORMAT!r}, got {state.get('format')!r}")
        version = state.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= STATE_VERSION:
            raise ValueError(f"state.version must be an integer in [1, {STATE_VERSION}] (this fastpld "
                             f"reads versions up to {STATE_VERSION}), got {version!r}")
        fields = ("eps_error", "delta_error", "method", "backend", "max_buckets", "cache_size", "lookahead")
        known = {"format", "version", "history", "last", *fields}
        check_fields("state", state, known | {"rel_error"}, known)  # (rel_error: only where it was asked)
        fields = fields + (("rel_error",) if "rel_error" in state else ())
        for k in fields:
            if isinstance(state[k], bool):  # JSON true/false would pass the integer checks
                raise ValueError(f"state.{k} has an invalid value {state[k]!r}")
        try:
            acc = cls(**{k: state[k] for k in fields})
        except ValueError as exc:
            raise ValueError(f"state: {exc}") from None
        history = state["history"]
        if not isinstance(history, list):
            raise ValueError(f"state.history must be a list, got {type(history).__name__}")
        mechs = []
        for i, item in enumerate(history):
            where = f"state.history[{i}]"
            if not isinstance(item, dict) or set(item) != {"mechanism", "count"}:
                raise ValueError(f"{where} must be a dict with keys 'mechanism' and 'count', got {item!r}")
            mech = mechanism_from_dict(item["mechanism"], f"{where}.mechanism")
            if mech in acc._counts:
                raise ValueError(f"{where}.mechanism repeats an earlier entry")
            acc._counts[mech] = V.positive_int(f"{where}.count", item["count"])
            mechs.append(mech)
        last = state["last"]
        if last is None:
            if mechs:
                raise ValueError("state.last must index the history when it is not empty, got None")
        elif isinstance(last, bool) or not isinstance(last, int) or not 0 <= last < len(mechs):
            raise ValueError(f"state.last must be None or an index into state.history, got {last!r}")
        else:
            acc._last = mechs[last]
        return acc

    def to_json(self) -> str:
        """:meth:`state_dict` as a JSON string (floats written exactly)."""
        return json.dumps(self.state_dict(), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> "PrivacyAccountant":
        """An accountant restored from :meth:`to_json`."""
        try:
            state = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"state is not valid JSON: {exc}") from None
        return cls.from_state_dict(state)

    def __getstate__(self):
        # the lock cannot be pickled and the cache is only a speed-up: both are made afresh
        with self._lock:
            counts = list(self._counts.items())
            last = self._last
        return {"version": STATE_VERSION, "eps_error": self.eps_error, "rel_error": self.rel_error,
                "delta_error": self.delta_error,
                "method": self.method, "backend": self.backend, "max_buckets": self.max_buckets,
                "cache_size": self._cache_size, "lookahead": self.lookahead, "counts": counts, "last": last}

    def __setstate__(self, st):
        self.__init__(st["eps_error"], st["delta_error"], rel_error=st.get("rel_error"), method=st["method"],
                      backend=st["backend"],
                      max_buckets=st["max_buckets"], cache_size=st["cache_size"], lookahead=st["lookahead"])
        self._counts.update(st["counts"])
        self._last = st["last"]

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
        acc = (f"rel_error={self.rel_error}, " if self.rel_error is not None else
               f"eps_error={self.eps_error}, " if self.eps_error is not None else "")
        return (f"PrivacyAccountant({acc}delta_error={self.delta_error}, "
                f"mechanisms={len(h)}, compositions={sum(c for _, c in h)})")
