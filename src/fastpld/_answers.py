"""Composed answers kept between calls: a repeated question costs a lookup and a query.

Key: the question as :func:`fastpld.compose` computes it -- per direction, the grouped
``(loss object, count)`` parts (loss objects by identity: equal mechanisms share one through the
mechanisms' loss cache, so the key is their value; a custom mechanism's loss is its own), and the
accuracy and execution settings that reach the computation (``eps_error``, ``delta_error``,
``method``, ``arity``, backend, ``max_buckets``; not ``threads``, on which results do not
depend).  The composition is deterministic given these, so a kept answer is bitwise the one a
fresh composition of the same parts gives.

Concurrent identical questions compose once: the first caller registers the question as in
flight and composes; the others wait for its answer (or its error) instead of composing it again.

Answers are shared: their arrays are made read-only, and each caller receives its own shallow
copy of the :class:`fastpld.PrivacyLossDistribution` (its ``events`` are the caller's).  The
store bounds them in bytes with everything else (:func:`fastpld.set_cache_limit`; ``results=0``
disables them).
"""
from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np

from . import resources
from .curve import Bounds, PrivacyLossDistribution

_REGION = resources.region("results")
_inflight: dict = {}
_inflight_lock = threading.Lock()
_stats = {"hits": 0, "misses": 0, "joined": 0}


class _Retry(Exception):
    """The leader was interrupted (not an error of the question): the waiter composes itself."""


def _freeze(pld) -> int:
    """Make the answer's arrays read-only; its size in bytes."""
    # (the dominance certificate's second chain: its deferred directions are not run here, their arrays are made
    # read-only when they run, and they are counted as their dominating chain's: the same lattice)
    lower = getattr(pld, "lower_directions", {})
    upper = pld.directions
    for chains in (lower, upper):
        if hasattr(chains, "freeze"):
            chains.freeze = True  # (first: a chain that finishes from here on makes its own arrays read-only)
    ready = getattr(lower, "ready", lambda name: True)
    up_ready = getattr(upper, "ready", lambda name: True)
    names = [name for name in lower if ready(name)]
    later = [name for name in lower if name not in names]
    up_names = [name for name in upper if up_ready(name)]
    done = [lower[name] for name in names]
    ql = getattr(pld, "_ql", {})
    ups = [upper[name] for name in up_names]
    for d in (*ups, *done):
        for a in (d.pmf.probs,):
            if isinstance(a, np.ndarray):
                a.setflags(write=False)
    queries = (*(pld._q[name] for name in up_names), *(ql[name] for name in names))
    for q in queries:
        for name in _QUERY_ARRAYS:
            a = getattr(q, name, None)
            if isinstance(a, np.ndarray):
                a.setflags(write=False)
    # (the arrays are the PMFs' and the queries' tables: the stages' and certificates' scalars are not walked,
    # ~340 objects and 0.5 ms per answer; a deferred chain is counted as its dominating chain's -- the same lattice
    # --, and a deferred dominating chain as the largest one run: the reverse of its direction, on meshes as fine
    # or coarser)
    n = resources.array_bytes([d.pmf.probs for d in (*ups, *done)]
                              + [getattr(q, name, None) for q in queries for name in _QUERY_ARRAYS])
    one = {name: resources.array_bytes([upper[name].pmf.probs] + [getattr(pld._q[name], a, None)
                                                                  for a in _QUERY_ARRAYS]) for name in up_names}
    big = max(one.values(), default=0)
    n += sum(one.get(name, big) for name in later)
    n += big * sum(1 for name in upper if name not in one)
    pld.__class__ = _kept(type(pld))
    pld._memo = {}
    return n


_QUERY_ARRAYS = ("p", "S1", "T", "dgrid", "neg_dgrid")


_MEMO_MAX = 64  # scalar queries remembered per kept answer


class _KeptMixin:
    """A kept answer handed out: its scalar queries are remembered (shared by every copy of the
    answer; the bounds of a scalar query are a pure function of the distribution and the argument,
    so a remembered one is bitwise a fresh one).  Mixed into the answer's own class, so that a
    subclass's queries (the dominance certificate's) stay its own."""

    def delta(self, epsilon) -> Bounds:
        return self._memoised("d", epsilon, super().delta)

    def __reduce_ex__(self, protocol):
        # pickled as the answer's own class, without the remembered queries: a kept class is made at run time
        # (KeptDominancePLD), which another process cannot find by name -- pickling a kept dominance answer failed
        cls = next(c for c in type(self).__mro__[1:] if not issubclass(c, _KeptMixin))
        return _rebuild, (cls, {k: v for k, v in self.__dict__.items() if k != "_memo"})

    def epsilon(self, delta) -> Bounds:
        return self._memoised("e", delta, super().epsilon)

    def _memoised(self, kind, x, fn):
        if type(x) is not float:  # (arrays, numpy scalars and others: computed; only exact floats are keys)
            return fn(x)
        memo = self._memo
        key = (kind, x)
        out = memo.get(key)
        if out is None:
            out = fn(x)
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            memo[key] = out
        return out


def _rebuild(cls, state):
    """An answer of class ``cls`` with the attributes ``state`` (unpickling a kept answer)."""
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


_KEPT_CLASSES: dict = {}


def _kept(cls):
    """The kept-answer class of an answer class (one per class, made once)."""
    k = _KEPT_CLASSES.get(cls)
    if k is None:
        if issubclass(cls, _KeptMixin):
            return cls
        k = type("Kept" + cls.__name__, (_KeptMixin, cls), {"__doc__": _KeptMixin.__doc__,
                                                             "__module__": __name__})
        _KEPT_CLASSES[cls] = k
    return k


KeptAnswer = _kept(PrivacyLossDistribution)
KeptAnswer.__name__ = KeptAnswer.__qualname__ = "KeptAnswer"


def _hand_out(pld, events):
    out = _rebuild(type(pld), pld.__dict__)  # (a shallow copy; copy.copy's protocol costs ~10 us here)
    out.events = tuple(events)
    return out


def answer(key, compute, events, loss_keys=()):
    """The answer to ``key``: kept, being composed by another thread, or ``compute()`` (then kept).

    ``loss_keys``: the loss cache's keys of the question's losses, marked used after the answer so
    that the answer is evicted before the losses it is keyed by.
    """
    if resources.results_limit() <= 0:
        return compute()
    from .mechanisms import _LOSS_CACHE
    hit = _REGION.get(key)
    if hit is None:
        with _inflight_lock:
            fut = _inflight.get(key)
            leader = fut is None
            hit = _REGION.get(key) if leader else None  # (kept while this thread waited for the lock)
            if hit is None and leader:
                fut = _inflight[key] = Future()
                _stats["misses"] += 1
            elif hit is None:
                _stats["joined"] += 1
    if hit is not None:
        with _inflight_lock:
            _stats["hits"] += 1
        _LOSS_CACHE.touch(loss_keys)
        return _hand_out(hit, events)
    if not leader:
        try:
            return _hand_out(fut.result(), events)
        except _Retry:
            return compute()
    try:
        pld = compute()
        # kept before the question leaves the in-flight table: a later caller finds one or the other
        _REGION.put(key, pld, _freeze(pld))
        _LOSS_CACHE.touch(loss_keys)
    except Exception as exc:
        fut.set_exception(exc)
        raise
    except BaseException:
        fut.set_exception(_Retry())
        raise
    else:
        fut.set_result(pld)
    finally:
        with _inflight_lock:
            _inflight.pop(key, None)
    return _hand_out(pld, events)


def stats() -> dict:
    """Counts since start: ``hits``, ``misses`` (compositions) and ``joined`` (waited for another thread's)."""
    with _inflight_lock:
        out = dict(_stats)
    return dict(out, kept=len(_REGION), bytes=_REGION.nbytes)
