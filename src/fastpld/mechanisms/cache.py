"""The process-wide cache of privacy-loss objects, one per mechanism value."""
from __future__ import annotations

import threading
import weakref

from .. import resources

__all__: list[str] = []

# Loss objects are cached per mechanism value: building a subsampled loss computes moments.  They live in
# the process-wide store (fastpld.resources), bounded with everything else; compose records the size
# they grow to (MGF grids, moment tables) through _refresh_sizes.
_LOSS_CACHE = resources.region("losses")
_CACHE_LOCK = threading.RLock()


def _loss_key(mech):
    return (type(mech), mech)


# Weak references to the loss objects of every cached value: a value the bounded store evicted while
# its losses are still in use (by a running composition, whose FFT plans and tables can push them
# out) is put back as it is instead of being built again (random allocation's losses take seconds).
_SHADOW: dict = {}
_SHADOW_PURGE = 1024
# (the size at which the next purge runs: twice what the last one kept, so that a composition of many distinct
# mechanisms, all alive, is not scanned again at every new value -- 10,000 distinct Gaussians took 2.4 s, quadratic)
_shadow_limit = _SHADOW_PURGE


def _shadow_of(val):
    """Weak references to ``val``'s losses (a dict of them, or one object), or ``None``."""
    try:
        if isinstance(val, dict):
            return ("dict", {k: weakref.ref(v) for k, v in val.items()})
        return ("one", weakref.ref(val))
    except TypeError:  # (a value that cannot be weakly referenced)
        return None


def _revive(shadow):
    if shadow is None:
        return None
    kind, refs = shadow
    if kind == "one":
        return refs()
    out = {k: r() for k, r in refs.items()}
    return None if any(v is None for v in out.values()) else out


def _cached(mech, factory):
    # under a lock: concurrent compose calls then share one loss object per mechanism value
    # (identical events are merged by the loss object's identity)
    global _shadow_limit
    key = _loss_key(mech)
    val = _LOSS_CACHE.get(key)
    if val is not None:
        return val
    with _CACHE_LOCK:
        val = _LOSS_CACHE.get(key)
        if val is None:
            val = _revive(_SHADOW.get(key))
            if val is None:
                val = factory()
                if len(_SHADOW) >= _shadow_limit:  # (forget the values no longer alive)
                    for k in [k for k, s in _SHADOW.items() if _revive(s) is None]:
                        del _SHADOW[k]
                    _shadow_limit = max(_SHADOW_PURGE, 2 * len(_SHADOW))
                _SHADOW[key] = _shadow_of(val)
            _LOSS_CACHE.put(key, val, resources.nbytes_of(val))
        return val


def _clear_shadow() -> None:
    global _shadow_limit
    with _CACHE_LOCK:
        _SHADOW.clear()
        _shadow_limit = _SHADOW_PURGE


resources.on_clear(_clear_shadow)


def _refresh_sizes(mechs) -> None:
    """Record the current size of these mechanisms' cached loss objects (they grow MGF grids and tables)."""
    seen = set()
    for m in mechs:
        try:
            key = _loss_key(m)
            if key in seen:
                continue
            seen.add(key)
        except TypeError:  # an unhashable user mechanism: not cached here
            continue
        val = _LOSS_CACHE.get(key)
        if val is not None:
            _LOSS_CACHE.resize(key, resources.nbytes_of(val))
