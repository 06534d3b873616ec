"""One chain of a dominance composition: a direction's plan run on dominating leaves and re-discretisations
(its upper bound) or on dominated ones (its lower bound), and the chains an attempt of the planner
(:mod:`fastpld.dominance.planner`) hands to its threads."""
from __future__ import annotations

import functools

import numpy as np

from .._limits import BucketLimitError
from ..composition.budget import _BudgetError
from ..composition.execute import _execute
from ..curve import DirectionResult, _Query
from .leaves import ctd_leaf, dominated_leaf
from .splits import ctd_split, dominated_split

_U = np.finfo(np.float64).eps / 2


class _DeferredChain:
    """A chain of an attempt: the arguments of :func:`_run_chain` and the attempt's memo of leaves.  A deferred
    dominated chain (:class:`fastpld.dominance.result._LazyChains`) keeps the memo while the composition runs
    (its reference widths may need the chain) and releases it when it returns (a later run computes its leaves
    again: the same ones).

    ``retry``: for a deferred dominated chain, a callable giving the arguments of other plans (larger arities) to
    run in turn where this one's charges do not fit ``delta_error``.  Such a chain runs after the composition has
    answered, so a refusal would surface in a later query; its charges can differ from the eager chains' (where
    its lattices are not exactly nested, the dominated split charges the atoms its rounding cannot tell from a
    lattice point, and whether a node's offset falls on the coarser lattice depends on the plan).  Any dominated
    chain's curve is a lower bound, so a retry's answers are certified too (its own meshes, its own width).
    """

    __slots__ = ("args", "memo", "retry", "query", "tables")

    def __init__(self, args, memo, tables=False):
        self.args, self.memo, self.retry = args, memo, None
        self.tables, self.query = tables, None  # (tables: build the result's query tables, kept in ``query``)

    def __call__(self):
        try:
            d = _run_chain(*self.args, self.memo)
            if self.tables:
                # (run at once: the answer queries it, so its tables are built here, on the thread that ran the
                # chain -- its PMF still in that core's cache, the other thread's chain meanwhile -- not after
                # both chains on the calling thread; the same tables: :class:`fastpld.curve._Query`)
                self.query = _Query(d.pmf, self.args[3].name == "native")
            return d
        except _BudgetError as exc:
            if self.retry is None:
                raise
            first = exc
        for args in self.retry():
            try:
                return _run_chain(*args, None)
            except (_BudgetError, BucketLimitError):
                continue
        raise first

    def release(self):
        self.memo = None


def _run_chain(plan, meshes, budgets, backend, max_buckets, p_inf, upper, arity, memo):
    """One direction's ``plan`` on ``meshes`` with dominating leaves and splits (``upper``) or dominated ones, the
    nodes' offsets rounded the same way: its :class:`fastpld.curve.DirectionResult`, charges and certificate
    (``log_mass``: what a dominated chain lost; ``log_rel``: a dominating chain's relative rounding)."""
    leaf_fn, split_fn = (ctd_leaf, ctd_split) if upper else (dominated_leaf, dominated_split)
    leaf_fn = functools.partial(leaf_fn, memo=memo)
    final, _, _, stages, cert = _execute(plan, meshes, budgets, backend, max_buckets, leaf_fn=leaf_fn,
                                         split_fn=split_fn, position=1 if upper else -1)
    charges = (cert["truncation"] + cert["wrap"] + cert["roundoff"]) * (1 + 8 * _U)
    cert = {"truncation": cert["truncation"], "wrap": cert["wrap"], "roundoff": cert["roundoff"],
            "log_mass": cert["log_mass"], "log_rel": cert["log_rel"], "tv_rel": cert["tv_rel"],
            "bound": "upper" if upper else "lower"}
    return DirectionResult(final, p_inf, 0.0, charges, tuple(stages), cert, f"dominance(arity={arity})")
