"""The size limit's refusal, shared by the leaves (:mod:`fastpld.discretize`) and the planner."""
from __future__ import annotations

__all__ = ["BucketLimitError"]


class BucketLimitError(ValueError):
    """A discretisation, re-discretisation or FFT would need more than ``max_buckets`` buckets.

    ``needed``: the buckets asked for (the smallest a refusing plan needs, where known).
    """

    def __init__(self, msg: str, needed: float = float("nan")):
        super().__init__(msg)
        self.needed = needed
