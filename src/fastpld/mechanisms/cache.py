"""The process-wide cache of privacy-loss objects, one per mechanism value."""
from __future__ import annotations

import threading

from .. import resources

__all__: list[str] = []

# Loss objects are cached per mechanism value: building a subsampled loss computes moments.  They live in
# the process-wide store (fastpld.resources), bounded with everything else; compose records the size
# they grow to (MGF grids, moment tables) through _refresh_sizes.
_LOSS_CACHE = resources.region("losses")
_CACHE_LOCK = threading.RLock()


def _loss_key(mech):
    return (type(mech), mech)


def _cached(mech, factory):
    # under a lock: concurrent compose calls then share one loss object per mechanism value
    # (identical events are merged by the loss object's identity)
    key = _loss_key(mech)
    val = _LOSS_CACHE.get(key)
    if val is not None:
        return val
    with _CACHE_LOCK:
        val = _LOSS_CACHE.get(key)
        if val is None:
            val = factory()
            _LOSS_CACHE.put(key, val, resources.nbytes_of(val))
        return val


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
