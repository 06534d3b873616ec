"""What fastpld keeps between calls, and how many threads compute at once.

Memory.  Everything fastpld keeps between calls lives in one process-wide store, bounded in bytes
(least recently used entries go first, whichever thread or kind they belong to):

* FFT plans with their aligned buffers, and the scratch arrays of the kernels, per *workspace*
  (a workspace is used by one thread at a time, so threads never share a buffer);
* the direct-DFT tables (read-only, shared);
* the privacy-loss objects of the mechanisms, with their MGF grids and moment tables;
* the composed answers (:func:`fastpld.compose`'s result cache);
* the binomial and index tables of the kernels.

The bound (default ``DEFAULT_CACHE_BYTES``, 32 MiB; composed answers take at most half of it unless
set otherwise) is set by :func:`set_cache_limit` or the
environment variable ``FASTPLD_CACHE_BYTES``; :func:`clear_caches` empties the store, every
workspace included.  Sizes are the arrays' bytes plus a fixed allowance per entry (an estimate
of the Python objects around them).  An entry in use when it is evicted stays alive until its
user drops it: the bound is on what is *kept*, not on a composition's working memory.

Threads.  Composition work runs in at most :func:`thread_limit` threads at once (default: the
CPUs this process may run on; ``FASTPLD_MAX_THREADS`` or :func:`set_thread_limit`).  A thread
composing holds a *compute slot*, and each slot owns a workspace: with 8 client threads and 2
slots, two compositions run while the others wait, instead of 8 (plus their worker directions)
sharing 2 cores and 8 sets of plans.  A thread without a slot (a direct call of a backend) uses
a workspace of its own, dropped with the thread.
"""
from __future__ import annotations

import itertools
import numbers
import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

from . import _kernels

_pool = None
if _kernels._core is not None:  # (the compiled build, FASTPLD_PURE_PYTHON unset: else numpy's own allocator)
    try:  # (the arrays' memory pool)
        from . import _pool  # type: ignore[no-redef]
    except ImportError:  # pragma: no cover - depends on the build
        _pool = None

__all__ = ["set_cache_limit", "cache_limit", "clear_caches", "cache_info", "set_thread_limit", "thread_limit",
           "DEFAULT_CACHE_BYTES"]

DEFAULT_CACHE_BYTES = 32 << 20
ENTRY_OVERHEAD = 512  # bytes charged per entry on top of its arrays (the Python objects around them)

_lock = threading.Lock()
_entries: OrderedDict = OrderedDict()  # (region id, key) -> [value, nbytes]; least recently used first
_region_bytes: dict = {}  # region id -> bytes held
_state = {"total": 0, "limit": None, "results": None}
_regions: dict = {}  # name -> Region (the named, process-wide ones)
_clear_hooks: list = []


def _parse_bytes(name: str, value) -> int:
    if isinstance(value, str):
        s = value.strip()
        try:
            value = int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                raise ValueError(f"{name} must be a non-negative integer number of bytes, got {value!r}") from None
            if not (f >= 0 and f == int(f) and f < 2 ** 63):
                raise ValueError(f"{name} must be a non-negative integer number of bytes, got {value!r}") from None
            value = int(f)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise ValueError(f"{name} must be a non-negative integer number of bytes, got {value!r}")
    v = int(value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return v


def cache_limit() -> int:
    """Bytes fastpld may keep between calls.

    Returns
    -------
    int
        The bound set by :func:`set_cache_limit`, else ``FASTPLD_CACHE_BYTES``, else
        ``DEFAULT_CACHE_BYTES`` (32 MiB).

    Raises
    ------
    ValueError
        If ``FASTPLD_CACHE_BYTES`` is not a non-negative integer.
    """
    lim = _state["limit"]
    if lim is None:
        env = os.environ.get("FASTPLD_CACHE_BYTES")
        lim = DEFAULT_CACHE_BYTES if env is None or not env.strip() else _parse_bytes("FASTPLD_CACHE_BYTES", env)
        _state["limit"] = lim
    return lim


_UNCHANGED = object()


def set_cache_limit(nbytes=_UNCHANGED, *, results=_UNCHANGED) -> None:
    """Bound what fastpld keeps between calls.

    Parameters
    ----------
    nbytes : int or None, optional
        Bytes kept in all (plans and their buffers, scratch arrays, tables, loss objects and
        composed answers, every thread's); ``0`` keeps nothing between calls.  ``None``: back to
        ``FASTPLD_CACHE_BYTES`` or the default (32 MiB).  Lowering it evicts at once.  Unchanged
        when not given.
    results : int or None, optional
        Bytes the composed answers may take within ``nbytes`` (``0``: :func:`fastpld.compose`
        keeps no answers and composes every call afresh; ``None``: half of ``nbytes``, the
        default, so that answers asked once do not push out the plans and tables every
        composition uses).  Unchanged when not given.
    """
    lim = _state["limit"]
    if nbytes is not _UNCHANGED:
        lim = None if nbytes is None else _parse_bytes("nbytes", nbytes)
    res = _state["results"]
    if results is not _UNCHANGED:
        res = None if results is None else _parse_bytes("results", results)
    with _lock:
        _state["limit"] = lim
        _state["results"] = res
    if lim is None:
        cache_limit()  # (validates the environment now)
    _sync_pool()
    _evict()


def results_limit() -> int:
    """Bytes the result cache may hold (0: disabled)."""
    lim = cache_limit()
    r = _state["results"]
    return lim // 2 if r is None else min(lim, r)


def _evict() -> None:
    """Drop least recently used entries until the store fits its bound (and the answers theirs)."""
    lim = cache_limit()
    rlim = results_limit()
    dropped = []  # released outside the lock (freeing a plan may take a while)
    with _lock:
        res = _regions.get("results")
        if res is not None:
            rid = res.id
            it = iter(list(_entries.keys())) if _region_bytes.get(rid, 0) > rlim else iter(())
            for k in it:
                if _region_bytes.get(rid, 0) <= rlim:
                    break
                if k[0] == rid:
                    dropped.append(_drop(k))
        while _state["total"] > lim and _entries:
            k = next(iter(_entries))
            dropped.append(_drop(k))
    del dropped


def _drop(k):
    v, nb = _entries.pop(k)
    _state["total"] -= nb
    _region_bytes[k[0]] -= nb
    return v


_ids = itertools.count(1)


class Region:
    """One kind of kept values in the process-wide store (a dict-like view bounded with everything else)."""

    def __init__(self, name: str):
        self.name = name
        self.id = next(_ids)
        with _lock:
            _region_bytes[self.id] = 0

    def get(self, key, default=None):
        k = (self.id, key)
        with _lock:
            e = _entries.get(k)
            if e is None:
                return default
            _entries.move_to_end(k)
            return e[0]

    def put(self, key, value, nbytes: int) -> None:
        """Keep ``value`` (about ``nbytes`` bytes), evicting the least recently used entries beyond the bound."""
        nb = int(nbytes) + ENTRY_OVERHEAD
        k = (self.id, key)
        old = None
        with _lock:
            if k in _entries:
                old = _drop(k)
            _entries[k] = [value, nb]
            _state["total"] += nb
            _region_bytes[self.id] += nb
        del old
        _evict()

    def resize(self, key, nbytes: int) -> None:
        """Record a new size of a kept value (values that grow caches of their own)."""
        k = (self.id, key)
        with _lock:
            e = _entries.get(k)
            if e is None:
                return
            nb = int(nbytes) + ENTRY_OVERHEAD
            _state["total"] += nb - e[1]
            _region_bytes[self.id] += nb - e[1]
            e[1] = nb
        _evict()

    def touch(self, keys) -> None:
        """Mark these keys most recently used (missing ones are ignored)."""
        with _lock:
            for key in keys:
                k = (self.id, key)
                if k in _entries:
                    _entries.move_to_end(k)

    def pop(self, key):
        with _lock:
            k = (self.id, key)
            return _drop(k)[0] if k in _entries else None

    def clear(self) -> None:
        with _lock:
            dropped = [_drop(k) for k in [k for k in _entries if k[0] == self.id]]
        del dropped

    @property
    def nbytes(self) -> int:
        return _region_bytes.get(self.id, 0)

    def __len__(self):
        with _lock:
            return sum(1 for k in _entries if k[0] == self.id)

    def __contains__(self, key):
        with _lock:
            return (self.id, key) in _entries

    def _forget(self) -> None:
        self.clear()
        with _lock:
            _region_bytes.pop(self.id, None)


def region(name: str) -> Region:
    """The process-wide region ``name`` (made on first use)."""
    r = _regions.get(name)
    if r is None:
        with _lock:
            r = _regions.get(name)
        if r is None:
            r = Region(name)
            with _lock:
                r = _regions.setdefault(name, r)
    return r


def on_clear(fn, plans: bool = False) -> None:
    """Call ``fn()`` from :func:`clear_caches` (for small memo tables kept outside the store); ``plans``: only where
    the plans go too (``keep_plans=False``: a table of plan choices, as the FFT plans are)."""
    _clear_hooks.append((fn, plans))


def clear_caches(*, keep_plans: bool = False) -> None:
    """Free everything fastpld keeps between calls, in every thread.

    That is: FFT plans and their buffers, scratch arrays, the memory pool's freed arrays, DFT and binomial tables,
    the mechanisms' loss objects (with their MGF grids) and composed answers.  Values in use by a running
    composition are freed when it ends.  Thread-safe; the bound (:func:`cache_limit`) stays as set.
    Results do not change: the next composition rebuilds what it needs (call it between timed runs).

    Parameters
    ----------
    keep_plans : bool, optional
        Keep the FFT plans and scratch arrays (every workspace's, and the memory pool's; they hold no answers), and the
        plans' shapes chosen for the counts composed so far: the next composition then computes everything else afresh
        without rebuilding the FFT plans of the lengths it has used, as numpy's and scipy's FFTs keep theirs.  Default
        ``False``.

    Examples
    --------
    >>> import fastpld
    >>> fastpld.clear_caches()
    >>> fastpld.cache_info()["bytes"]
    0
    """
    with _lock:
        if keep_plans:
            # (the workspaces are the regions named "plans"; every other region is a process-wide named one)
            named = {r.id for r in _regions.values()}
            dropped = [_drop(k) for k in [k for k in _entries if k[0] in named]]
        else:
            dropped = list(_entries.values())
            _entries.clear()
            _state["total"] = 0
            for r in _region_bytes:
                _region_bytes[r] = 0
    del dropped
    if not keep_plans and _pool is not None:  # (the pool's freed arrays are scratch memory, as the plans' buffers)
        _pool.set_limit(0)
        _sync_pool()
    for fn, plans in _clear_hooks:
        if not (plans and keep_plans):
            fn()


def cache_info() -> dict:
    """What fastpld keeps now.

    Returns
    -------
    dict
        ``{"limit": bytes, "results_limit": bytes, "bytes": total, "entries": n,
        "by_kind": {kind: bytes}, "pool_bytes": bytes}``; the kinds are ``plans`` (every workspace's plans and
        scratch arrays), ``dft_tables``, ``losses``, ``results`` and ``tables``; ``pool_bytes``: freed arrays the
        memory pool keeps for the next compositions (at most a quarter of ``limit``; docs/design.md, section 8).
    """
    with _lock:
        names = {r.id: r.name for r in _regions.values()}
        by = {}
        for rid, nb in _region_bytes.items():
            name = names.get(rid, "plans")
            by[name] = by.get(name, 0) + nb
        return {"limit": cache_limit(), "results_limit": results_limit(), "bytes": _state["total"],
                "entries": len(_entries), "by_kind": by,
                "pool_bytes": _pool.cached_bytes() if _pool is not None else 0}


_NO_ARRAYS = frozenset((str, bytes, int, float, complex, bool, type(None), np.float64, np.longdouble, np.int64))


def _buffer_of(a: np.ndarray) -> np.ndarray:
    """The array owning ``a``'s memory: ``a`` itself, or the base of the chain of views it is."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def array_bytes(arrays) -> int:
    """Bytes of the distinct buffers under ``arrays`` (a view counted once, as its base; ``None`` ignored), as
    :func:`nbytes_of` counts them, without walking any object around them."""
    seen = {}
    for a in arrays:
        if isinstance(a, np.ndarray):
            b = _buffer_of(a)
            seen[id(b)] = b.nbytes
    return int(sum(seen.values()))


def nbytes_of(obj, depth: int = 4, _seen=None) -> int:
    """Bytes of the numpy arrays reachable from ``obj`` through containers and instance
    dictionaries, to ``depth`` levels (an estimate of what keeping ``obj`` costs)."""
    if type(obj) in _NO_ARRAYS:  # (most of what a loss object or an answer holds: nothing to walk or remember)
        return 0
    if _seen is None:
        _seen = set()
    if id(obj) in _seen:
        return 0
    _seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        base = _buffer_of(obj)
        if base is not obj:
            if id(base) in _seen:
                return 0
            _seen.add(id(base))
        return int(base.nbytes)
    if depth <= 0 or isinstance(obj, (str, bytes, int, float, complex, bool, type(None))):
        return 0
    # (snapshots: another thread may add to a loss object's dictionary while this walks it)
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (tuple, list, set, frozenset)):
        items = list(obj)
    else:
        d = getattr(obj, "__dict__", None)
        items = list(d.values()) if isinstance(d, dict) else []
        for s in getattr(type(obj), "__slots__", ()):
            v = getattr(obj, s, None)
            if v is not None:
                items.append(v)
    # (only the values that may hold arrays are walked: a loss object's floats, strings and tuples of floats are
    # most of what it holds, and the walk ran twice an answer)
    total = 0
    for v in items:
        t = type(v)
        if t in _NO_ARRAYS or (t is tuple and all(type(x) in _NO_ARRAYS for x in v)):
            continue
        total += nbytes_of(v, depth - 1, _seen)
    return total


# --------------------------------------------------------------------------------------
# Workspaces and compute slots
# --------------------------------------------------------------------------------------
class Workspace(Region):
    """Plans and scratch arrays used by one thread at a time (a compute slot's, or a thread's own)."""

    def __init__(self):
        super().__init__("plans")


class _ThreadWorkspace(threading.local):
    def __init__(self):
        self.slot = None  # the workspace of the compute slot this thread holds
        self.depth = 0
        self.own = None  # made on first use outside a slot


_tls = _ThreadWorkspace()


def _own_workspace() -> Workspace:
    ws = _tls.own
    if ws is None:
        ws = _tls.own = Workspace()
        # dropped with the thread: its entries go when the thread-local value is collected
        holder = _OwnHolder(ws)
        _tls.holder = holder
    return ws


class _OwnHolder:
    def __init__(self, ws):
        weakref.finalize(self, ws._forget)


def workspace() -> Workspace:
    """The workspace of the calling thread: its compute slot's, else its own."""
    ws = _tls.slot
    return ws if ws is not None else _own_workspace()


def _affinity() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class _Slots:
    def __init__(self):
        self.cond = threading.Condition(threading.Lock())
        self.active = 0
        self.limit = None
        self.free: list = []  # idle workspaces

    def get_limit(self) -> int:
        if self.limit is None:
            env = os.environ.get("FASTPLD_MAX_THREADS")
            if env is not None and env.strip():
                try:
                    v = int(env)
                except ValueError:
                    v = 0
                if v < 1:
                    raise ValueError(f"FASTPLD_MAX_THREADS must be a positive integer, got {env!r}")
                self.limit = v
            else:
                self.limit = _affinity()
        return self.limit

    def acquire(self, blocking: bool):
        """A slot's workspace, or ``None`` (``blocking=False`` and every slot busy)."""
        self.get_limit()
        with self.cond:
            while self.active >= self.limit:
                if not blocking:
                    return None
                self.cond.wait()
            self.active += 1
            ws = self.free.pop() if self.free else None
        return ws if ws is not None else Workspace()

    def release(self, ws) -> None:
        with self.cond:
            self.active -= 1
            if len(self.free) + self.active < self.get_limit():
                self.free.append(ws)
                ws = None
            self.cond.notify()
        if ws is not None:  # the limit was lowered: this workspace is not needed any more
            ws._forget()


_slots = _Slots()


def thread_limit() -> int:
    """Threads that may compose at once, process-wide.

    Returns
    -------
    int
        The limit set by :func:`set_thread_limit`, else ``FASTPLD_MAX_THREADS``, else the number of
        CPUs this process may run on.

    Raises
    ------
    ValueError
        If ``FASTPLD_MAX_THREADS`` is not a positive integer.
    """
    return _slots.get_limit()


def set_thread_limit(n: int | None) -> None:
    """Set how many threads may run composition work at once, process-wide.

    Callers beyond the limit wait for a slot; a composition's second direction runs on a worker
    thread only when a slot is free, else on the calling thread.  Results do not depend on it.

    Parameters
    ----------
    n : int or None
        A positive limit, or ``None`` for the default (``FASTPLD_MAX_THREADS``, else the CPUs
        available).

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer or ``None``.

    Examples
    --------
    >>> import fastpld
    >>> fastpld.set_thread_limit(1)
    >>> fastpld.thread_limit()
    1
    >>> fastpld.set_thread_limit(None)
    """
    if n is not None:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (numbers.Integral, np.integer)) or int(n) < 1:
            raise ValueError(f"n must be a positive integer or None, got {n!r}")
        n = int(n)
    with _slots.cond:
        _slots.limit = n
        _slots.cond.notify_all()
    thread_limit()  # (validates the environment now)
    with _slots.cond:
        _slots.cond.notify_all()


class compute_slot:
    """Context manager: hold a compute slot (waiting for one) while composing; re-entrant per thread.

    ``blocking=False``: :meth:`try_acquire` instead (returns ``None`` when every slot is busy)."""

    __slots__ = ("_held", "_prev")

    def __enter__(self):
        if _tls.slot is not None:
            _tls.depth += 1
            self._held = None
            return _tls.slot
        ws = _slots.acquire(True)
        _tls.slot = ws
        _tls.depth = 1
        self._held = ws
        self._prev = _pool_enter()
        return ws

    def __exit__(self, *exc):
        _tls.depth -= 1
        if self._held is not None:
            _pool_leave(self._prev)
            _tls.slot = None
            _slots.release(self._held)
        return False


def _pool_enter():
    """While this thread composes, numpy's arrays come from the pool (``fastpld._pool``): an answer's arrays freed
    when it is evicted are kept for the next composition, up to :func:`_pool_limit` bytes, instead of going back to
    the C heap, whose top glibc returns to the kernel and maps again page by page (docs/design.md, section 8).
    Returns the allocator replaced."""
    if _pool is None:
        return None
    if _state.get("pool_limit") is None:
        _sync_pool()
    return _pool.enter()


def _pool_leave(prev) -> None:
    if _pool is not None and prev is not None:
        _pool.leave(prev)


def _pool_limit() -> int:
    """Bytes of freed arrays the pool keeps: a quarter of :func:`cache_limit` (8 MiB by default)."""
    return cache_limit() // 4


def _sync_pool() -> None:
    if _pool is not None:
        n = _state["pool_limit"] = _pool_limit()
        _pool.set_limit(n)


def try_acquire_slot():
    """A free compute slot's workspace (to hand to :func:`run_in_slot` on another thread), or ``None``."""
    return _slots.acquire(False)


def run_in_slot(ws, fn):
    """Run ``fn()`` on this thread holding the slot ``ws`` (from :func:`try_acquire_slot`), then release it."""
    prev, pdepth = _tls.slot, _tls.depth
    _tls.slot, _tls.depth = ws, 1
    handler = _pool_enter()
    try:
        return fn()
    finally:
        _pool_leave(handler)
        _tls.slot, _tls.depth = prev, pdepth
        _slots.release(ws)


def _after_fork_in_child():
    # locks may have been held by other threads of the parent; its slots' threads do not exist here
    global _lock, _tls, _slots
    _lock = threading.Lock()
    _entries.clear()
    _state["total"] = 0
    for r in list(_region_bytes):
        _region_bytes[r] = 0
    lim = _slots.limit
    _slots = _Slots()
    _slots.limit = lim
    _tls = _ThreadWorkspace()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
