"""A direction of a dominance composition whose two chains are deferred: the reverse of the direction that is
composed at once (docs/dominance.md, "The reversed direction, deferred").

Where each direction's pair is the other's reversed (a Poisson-subsampled mechanism's add and remove pairs), the
reversed direction's curve is bounded by the composed direction's upper curve at ``-eps``, reversed.  Where that
bound already lies under the composed direction's bounds the reversed direction cannot change the answer, and its
chains are not run; they run on the first query that needs them (:class:`DominancePLD`), once.  Their width at the
reference deltas is then checked as the planner checks the others' (:meth:`DominancePLD._deferred_excess`), and a
miss composes them again on finer meshes, the same way for every query (the result depends on the composition
only, never on which query ran it)."""
from __future__ import annotations

import functools
import math
import threading

_RESCALES = 3  # compositions after the first at most; then the narrowest one is kept (certified, only wider)


class _DeferredDirection:
    """The two chains of one deferred direction.

    ``make(mult, memo)`` returns its dominating and dominated chains (:class:`fastpld.dominance.chains._DeferredChain`)
    at meshes ``mult`` times the planner's for it (``mult = 1`` first), sharing the leaves in ``memo`` (the planner's
    attempt's, until :meth:`release`; ``None`` on other meshes).  ``pld`` is the answer whose bounds they join
    (set by the planner once it is built).  :attr:`upper` and :attr:`lower` are what the answer's
    :class:`fastpld.dominance.result._LazyChains` run: the dominated chain only after the dominating one's width has
    been checked (and its meshes refined), so both come from the same meshes whatever runs first.
    """

    def __init__(self, name: str, make, memo=None):
        self.name = name
        self._make = make
        self._memo = memo
        self._lock = threading.Lock()
        self._up = None  # (the dominating chain's result, once run and checked)
        self._lo_chain = None  # (the dominated chain on the same meshes, and its result once run)
        self._lo = None
        self.pld = None
        self.upper = functools.partial(self._get, False)
        self.lower = functools.partial(self._get, True)
        self.upper.release = self.lower.release = self.release

    def release(self) -> None:
        """Drop the planner's memo of leaves (a later run computes them again: the same ones)."""
        self._memo = None

    def _get(self, lower: bool):
        with self._lock:
            if self._up is None:
                self._run()
            if not lower:
                return self._up
            if self._lo is None:
                self._lo = self._lo_chain()
            return self._lo

    def _run(self) -> None:
        """The dominating chain, its width checked at the reference deltas; a miss composes both chains again on
        meshes refined by the width's h^2 law (the narrowest kept after ``_RESCALES`` more)."""
        from .planner import _MAX_REFINE, _SCALE_MARGIN

        mult, best = 1.0, None
        chains = self._make(mult, self._memo)
        for i in range(_RESCALES + 1):
            up_chain, lo_chain = chains
            up = up_chain()
            memo = []

            def lo_fn(lo_chain=lo_chain, memo=memo):
                if not memo:
                    memo.append(lo_chain())
                return memo[0]

            tables = {}
            excess = self.pld._deferred_excess(self.name, up, lo_fn, tables)
            if best is None or excess < best[0]:
                best = (excess, up, lo_chain, memo, tables)
            if excess <= 1.0 or not math.isfinite(excess) or i == _RESCALES:
                break
            mult *= max(math.sqrt(_SCALE_MARGIN ** 2 / excess), 1.0 / _MAX_REFINE)
            chains = self._make(mult, None)
        _, self._up, self._lo_chain, memo, tables = best
        self._lo = memo[0] if memo else None  # (run by the width check already)
        self._memo = None
        # (the width check's query tables are the answer's for these results: not built again on its first read)
        if "up" in tables:
            self.pld._q.keep(self.name, tables["up"])
        if "lo" in tables:
            self.pld._ql.keep(self.name, tables["lo"])


def _retry_args(build, parts, arity: int, eps_error: float, scale: float, rest, upper: bool = False):
    """The arguments of :func:`fastpld.dominance.chains._run_chain` for a deferred chain (dominated, or ``upper``)
    at each arity of ``_ARITIES`` above ``arity`` in turn (its plan and meshes as :func:`_compose_dominance`'s
    ``attempt`` makes them at ``scale``; ``rest``: the other arguments, budgets to ``p_inf``)."""
    from .arities import _ARITIES
    from .planner import leaf_mesh, resolved_meshes

    for a in _ARITIES:
        if a > arity:
            plan = build(a)
            yield ((plan, resolved_meshes(plan, leaf_mesh(parts, plan, eps_error, scale, far=False), eps_error))
                   + tuple(rest)
                   + (upper, a))


def _deferred_chains(plan, parts, eps_error: float, scale: float, rest_up, rest_lo, arity: int, build, mult: float,
                     memo):
    """A deferred direction's dominating and dominated chains (:class:`fastpld.dominance.deferred._DeferredDirection`)
    at meshes ``mult`` times those of ``scale`` (rounded to a power of 2^(1/8), as every rescaling is), each retried
    at larger arities where its charges do not fit (``rest_up``, ``rest_lo``: budgets to ``p_inf``)."""
    from .chains import _DeferredChain
    from .directions import _quantized
    from .planner import leaf_mesh, resolved_meshes

    s = scale if mult == 1.0 else _quantized(scale * mult)
    meshes = resolved_meshes(plan, leaf_mesh(parts, plan, eps_error, s, far=False), eps_error)
    out = []
    for upper, rest in ((True, rest_up), (False, rest_lo)):
        c = _DeferredChain((plan, meshes) + tuple(rest) + (upper, arity), memo)
        c.retry = functools.partial(_retry_args, build, parts, arity, eps_error, s, rest, upper)
        out.append(c)
    return out
