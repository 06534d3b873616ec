"""The result of a dominance composition: :class:`DominancePLD`, its bounds from the two chains, and the
width it is asked to reach (:func:`_allowed_width`)."""
from __future__ import annotations

import math
import threading
from collections.abc import Mapping

import numpy as np

from .. import _validation as V, resources
from ..curve import Bounds, PrivacyLossDistribution, _pack, _Query

_U = np.finfo(np.float64).eps / 2  # unit roundoff

_REFERENCE_DELTAS = (1e-3, 1e-5, 1e-7, 1e-9)  # where compose_dominance checks the width it reached


def _reference_deltas(delta_error: float) -> tuple:
    """``_REFERENCE_DELTAS``, and the decades below them down to ``100 delta_error``: a composition asked for a
    tiny ``delta_error`` is queried there, and its width is held to the accuracy asked there too."""
    out = list(_REFERENCE_DELTAS)
    d = _REFERENCE_DELTAS[-1] / 10
    while d >= 100 * delta_error:
        out.append(d)
        d /= 10
    return tuple(out)


def _allowed_width(eps_error: float, rel_error: float | None, eps_lower: float) -> float:
    """The certified width of ``epsilon(delta)`` asked for where its lower bound is ``eps_lower``:
    ``2 eps_error`` (each bound within ``eps_error`` of the estimate), or ``rel_error`` times epsilon
    (each bound within ``rel_error`` of the truth, relative), epsilon taken at least ``_REL_FLOOR``
    (a relative accuracy of an epsilon near 0 asks nothing meaningful)."""
    if rel_error is None:
        return 2.0 * eps_error
    return rel_error * max(eps_lower, _REL_FLOOR)


_REL_FLOOR = 0.01  # epsilons below this are held to rel_error * _REL_FLOOR, absolute


def _rel_factor(d) -> float:
    """``e^r`` of a dominating chain's result ``d`` (its masses' relative rounding), rounded up (``exp`` within 4 ulp,
    and the products the queries take it into, a few u more)."""
    return math.exp(d.certificate["log_rel"]) * (1 + 16 * _U)


def _rel_tv(d) -> float:
    """The same rounding of ``d``'s masses as total variation, ``T e^(T + c)`` (``T``: the leaves' and splits' sum,
    ``tv_rel``; ``e^(T + c)`` bounds the masses' growth through the nodes, ``c`` the chain's charges), rounded up;
    ``inf`` where not known (results made before it was)."""
    t = d.certificate.get("tv_rel")
    if t is None:
        return math.inf
    return t * math.exp(t + d.delta_spent) * (1 + 16 * _U)


def _upper_curve(d, du):
    """A dominating chain's upper bound on its exact PMF's curve from ``du`` (its computed curve plus the queries'
    pads): the smaller of its masses' rounding as a factor (``e^r``, tight where the curve is small) and as total
    variation (``T``, tight where it is near 1: the reversed direction's bound reads it at ``-eps``), each plus the
    chain's delta charges, clipped at 1."""
    s = du + d.delta_spent
    return np.minimum(1.0, np.minimum(_rel_factor(d) * s, (s + _rel_tv(d)) * (1 + 4 * _U)))


def _reversed_directions(events) -> bool:
    """Whether every event's add pair is exactly its remove pair reversed (:meth:`SubsampledLoss.reverses`), so that
    the composed add pair is the composed remove pair reversed: ``delta_add(eps) = 1 - e^eps (1 - delta_remove(-eps))``
    and the other way round (docs/dominance.md, "Reversed pairs")."""
    try:
        for mech, _ in events:
            losses = mech.privacy_losses()
            r, a = losses.get("remove"), losses.get("add")
            if r is None or a is None or r is a or not getattr(r, "reverses", lambda other: False)(a):
                return False
    except Exception:  # (a custom mechanism whose losses cannot be read here: no such relation assumed)
        return False
    return bool(events)


def _reversal_upper(upper: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """An upper bound on ``1 - e^eps (1 - x)`` for every ``x <= upper`` (``upper`` in ``[0, 1]``, ``eps >= 0``): the
    reversed pair's curve at ``eps`` from an upper bound on the curve at ``-eps``, rounded up (``e^eps`` within 4 ulp,
    the product and ``1 - upper`` within one rounding each: ``t = e^eps (1 - upper)`` is computed within ``10 u t``
    (``u`` the unit round-off), lowered by ``16 u`` relative; the last subtraction's rounding and ``1 - upper``'s
    below ``4 u``)."""
    # (where upper = 1 the bound is 1, whatever e^eps: no 0 * inf; a valid upper bound below 1 keeps
    # e^eps (1 - upper) <= 1, since the reversed curve is at least 0)
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.where(upper >= 1.0, 0.0, np.exp(eps) * (1.0 - upper) * (1 - 16 * _U))
    return np.clip(1.0 - t + 4 * _U, 0.0, 1.0)


def _kept_mass(dl) -> float:
    """``M``, the mass a dominated chain's result ``dl`` kept (its PMF is normalised), rounded down (``exp`` within 4
    ulp, and the products the queries take it into, a few u more)."""
    return math.exp(dl.certificate["log_mass"]) * (1 - 16 * _U)


class _LazyChains(Mapping):
    """One kind of chain's results by direction (the dominating or the dominated chains), some of them deferred: a
    deferred chain (a callable) runs on its first access, once (thread-safe), and is then kept.  Its result is the
    one an eager run gives (the same deterministic computation on the same plan, meshes and budgets; a deferred
    direction's both chains: :class:`fastpld.dominance.deferred._DeferredDirection`, its width checked when it
    runs).  ``deferred`` names the directions deferred
    at construction; it stays fixed, so that the bounds' rules (:class:`DominancePLD`) do not depend on which
    chains have run since.  Pickling runs every chain first."""

    def __init__(self, done: dict, deferred: dict, order, deferred_names=None):
        self._done = dict(done)
        self._todo = dict(deferred)
        self._order = tuple(order)
        self.deferred = frozenset(deferred if deferred_names is None else deferred_names)
        self._lock = threading.Lock()
        self.freeze = False  # (a kept answer's: chains run later get read-only arrays too)

    def ready(self, name) -> bool:
        """Whether direction ``name``'s chain has run (without running it)."""
        return name in self._done

    def release(self) -> None:
        """Let the deferred chains drop what their composition kept for them (their ``release``, if any)."""
        for fn in list(self._todo.values()):
            getattr(fn, "release", lambda: None)()

    def __getitem__(self, name):
        d = self._done.get(name)
        if d is None:
            # (a composition: it holds a compute slot like any other, taken before the lock, so that a thread
            # holding the lock never waits for a slot held by one waiting for the lock)
            with resources.compute_slot(), self._lock:
                d = self._done.get(name)
                if d is None:
                    d = self._todo[name]()
                    if self.freeze and isinstance(d.pmf.probs, np.ndarray):
                        d.pmf.probs.setflags(write=False)
                    self._done[name] = d
                    del self._todo[name]
        return d

    def __iter__(self):
        return iter(self._order)

    def __len__(self):
        return len(self._order)

    def __reduce__(self):
        return (_LazyChains, ({name: self[name] for name in self._order}, {}, self._order, tuple(self.deferred)))


class _LazyQueries(Mapping):
    """The query tables of :class:`_LazyChains`' results, each built on first access (running its chain)."""

    def __init__(self, chains: _LazyChains, native: bool, built=None):
        self._chains = chains
        self._native = native
        self._q = {name: q for name, q in (built or {}).items() if q is not None}  # (tables built with the chains)

    def __getitem__(self, name):
        q = self._q.get(name)
        if q is None:
            q = self._q.setdefault(name, _Query(self._chains[name].pmf, self._native))
        return q

    def keep(self, name, q) -> None:
        """Take ``q`` as direction ``name``'s tables (built for its result by a deferred direction's width check:
        :meth:`DominancePLD._deferred_excess`), unless some are already kept."""
        self._q.setdefault(name, q)

    def __iter__(self):
        return iter(self._chains)

    def __len__(self):
        return len(self._chains)

    def __reduce__(self):
        return (_LazyQueries, (self._chains, self._native))


class DominancePLD(PrivacyLossDistribution):
    """A composition certified by dominance: its upper curve comes from a dominating PMF, its
    lower curve from a dominated one, with no epsilon shift (see :mod:`fastpld.dominance`).

    ``directions`` holds the dominating chain's results (as for the other methods: ``stages``,
    ``method``, ``delta_spent``), ``lower_directions`` the dominated chain's.  ``eps_spent`` is 0.
    Bounds per direction, with ``d`` the curve of a finite grid PMF and ``c`` its chain's delta
    charges (truncated tails, wrap-around, round-off: total variation):

        delta(eps) <= p_inf + (1 - p_inf) min(e^r (d_up(eps) + c_up), d_up(eps) + c_up + T)
        delta(eps) >= p_inf' + (1 - p_inf') (m d_lo(eps) - c_lo)

    where ``p_inf'`` is the dominated chain's mass at ``+inf`` (that of the losses it composes: a dominating
    loss's ``dominated_loss`` where it has one, whose ``p_inf`` may be below the dominating one's), ``m <= 1`` is
    the mass the dominated chain kept (its PMF is normalised for the FFTs) and
    ``r`` the relative rounding of the dominating chain's masses (leaves and re-discretisations:
    entries within a factor ``e^(+-rel)`` of exact ones compose into such a factor on the curve), ``T`` the same
    rounding as total variation (:func:`_rel_tv`).
    The estimate is the midpoint of the certified interval.

    A direction's dominated chain may be deferred (``lower`` a :class:`_LazyChains`): the lower bound is the
    maximum of the directions' lower bounds, and a deferred direction's lower bound is at most its upper one,
    so at the arguments where its upper bound is at most the lower bound of the directions composed at once it
    cannot change the maximum and is not used.  It runs on the first query that needs it (where its upper bound
    is larger), and is then used there only: the same bounds whether or not it has run.

    Where the two directions are each other's reverse, the other direction's dominating chain may be deferred too
    (``directions`` a :class:`_LazyChains` with it in ``deferred``; :meth:`_deferred`): its curve is at most the
    composed direction's upper curve at ``-eps`` reversed, and it runs only where that does not settle a bound.
    """

    _LOWER_CHAIN = True

    def __init__(self, upper, lower, eps_error, delta_error, events, backend, queries=(None, None)):
        if not isinstance(upper, _LazyChains):
            upper = _LazyChains(upper, {}, upper)
        # (the base class's tables for the directions composed at once; a deferred one's when it runs)
        super().__init__({name: upper[name] for name in upper if upper.ready(name)}, eps_error, delta_error, events,
                         backend, queries[0])
        self.directions = upper
        self._q = _LazyQueries(upper, backend == "native", self._q)
        if not isinstance(lower, _LazyChains):
            lower = _LazyChains(lower, {}, lower)
        self.lower_directions = lower
        self._ql = _LazyQueries(lower, backend == "native", queries[1])

    def _deferred(self):
        """``(E, D)``: the direction composed at once and its reverse, whose chains are deferred (docs/dominance.md,
        "The reversed direction, deferred"); ``None`` where no dominating chain is deferred.  Fixed at
        construction, so that the bounds' rules do not depend on which chains have run since."""
        dd = self.directions.deferred
        if len(dd) != 1 or len(self.directions) != 2 or not self._reversed():
            return None
        (d,) = dd
        return next(name for name in self.directions if name != d), d

    def _first_ready(self):
        name = next((n for n in self.directions if n not in self.directions.deferred), None)
        return self.directions[name if name is not None else next(iter(self.directions))]

    @property
    def stages(self) -> tuple:
        """Stages of the plan of the first direction composed at once (see :class:`fastpld.curve.StageInfo`)."""
        return self._first_ready().stages

    @property
    def method(self) -> str:
        """Name of the plan of the first direction composed at once."""
        return self._first_ready().method

    def _reversed(self) -> bool:
        """Whether the two directions are exact reverses of each other (:func:`_reversed_directions`)."""
        r = self.__dict__.get("_reversed_pairs")
        if r is None:
            r = self.__dict__["_reversed_pairs"] = set(self.directions) == {"remove", "add"} and _reversed_directions(
                self.events)
        return r

    def _lower_max(self, lo_fn, up_of: dict, shape, skip=None):
        """The maximum over directions of ``lo_fn(name)`` (a lower bound per direction, an array of ``shape``):
        the directions composed at once everywhere, a deferred one only where its upper bound ``up_of[name]``
        exceeds their maximum (running its chain if that happens anywhere but where ``skip``: arguments whose
        answer does not read the lower bound)."""
        lo = None
        deferred = self.lower_directions.deferred
        for name in self.directions:
            if name not in deferred:
                l = lo_fn(name)
                lo = l if lo is None else np.maximum(lo, l)
        for name in self.directions:
            if name in deferred:
                if lo is None:
                    lo = lo_fn(name)
                    continue
                need = up_of[name] > lo
                if skip is not None:
                    need &= ~skip
                if np.any(need):
                    lo = np.where(need, np.maximum(lo, lo_fn(name)), lo)
        return lo if lo is not None else np.zeros(shape)

    rel_error = None  #: the relative accuracy asked (``compose(..., rel_error=)``), or None

    # The hypothesis-testing views (trade-off, TPR, advantage, Gaussian-DP mu) read both chains
    # (fastpld.fdp._DominanceDirection: lower bounds from the dominating chain, upper bounds from the
    # dominated one).  The Renyi view's PMF bounds are written for the coupling certificate's PMF:
    # it is answered by a coupling composition of the same events, made once.
    def _coupling(self) -> PrivacyLossDistribution:
        pld = self.__dict__.get("_coupling_pld")
        if pld is None:
            from ..composition.api import _eps_ladder, compose
            # (at this composition's eps_error; where the coupling refuses it, e.g. an FFT past
            # max_buckets at a large k, at coarser ones: wider views, still certified)
            ladder = _eps_ladder(self.eps_error)
            for i, ee in enumerate(ladder):
                try:
                    pld = compose(list(self.events), eps_error=ee, delta_error=self.delta_error, backend=self.backend,
                                  method="coupling")
                    break
                except ValueError:
                    if i + 1 == len(ladder):
                        raise
            self._coupling_pld = pld
        return pld

    def renyi(self, order) -> Bounds:
        """See :meth:`PrivacyLossDistribution.renyi` (answered by a coupling composition)."""
        return self._coupling().renyi(order)

    def _reference_excess(self, eps_error: float, rel_error: float | None = None) -> float:
        """Largest ratio, over the reference deltas, of the width of ``epsilon(delta)`` between the two
        chains' curves alone to the width asked (:func:`_allowed_width`): the discretisation's share of
        the certified width, which the meshes control (the delta charges add to it where ``delta`` is
        within a few orders of ``delta_error``; they are what ``delta_error`` buys, not the meshes').
        A deferred direction (:meth:`_deferred`) is not run here: the direction composed at once is measured
        alone (its own width, which the answer's can only narrow where the reversal bound covers the other), and
        the deferred one is measured when it runs (:meth:`_deferred_excess`)."""
        pair = self._deferred()
        d, live, ups = self._ref_uppers([pair[0]] if pair is not None else list(self.directions))
        up = np.full(d.size, -np.inf)
        for u in ups.values():
            up = np.maximum(up, u)
        if pair is not None:
            lo = np.maximum(self._ref_lower(pair[0], d), 0.0)
        else:
            # (a vacuous lower bound, -inf, is epsilon >= 0: counted as 0)
            lo = np.maximum(self._lower_max(lambda name: self._ref_lower(name, d), ups, d.shape), 0.0)
        return self._excess(up, lo, live, eps_error, rel_error)

    def _ref_uppers(self, names):
        """``(d, live, ups)``: the reference deltas, where every one of the directions ``names`` has a finite epsilon
        (``d`` above its ``p_inf``), and per direction its dominating chain's solution there (every reference delta at
        once per chain: the same arithmetic elementwise)."""
        d = np.array(_reference_deltas(self.delta_error), dtype=np.float64)
        live = np.ones(d.size, dtype=bool)
        ups = {}
        for name in names:
            dr = self.directions[name]
            live &= d > dr.p_inf * (1 + 1e-9)
            ups[name] = self._q[name].epsilon(self._ref_base(dr, d))
        return d, live, ups

    def _excess_with(self, name, eps_error: float, rel_error: float | None = None,
                     excess: float | None = None) -> float:
        """About the least :meth:`_reference_excess` an answer can have whose direction ``name`` has these chains (the
        same meshes) and whose other directions are composed on any meshes: ``name``'s upper solution less the larger
        of its lower one and the others' upper ones here (another direction's lower solution lies below its epsilon,
        which lies about below its upper one), against the width asked at that larger value.  For the planner's
        choice only (a re-run with finer meshes for the other directions cannot narrow the answer below it).  Where
        the other direction is ``name``'s reverse, deferred, the reference width is ``name``'s alone: exactly it
        (``excess``, this answer's, where the caller has it).  ``0`` where ``name``'s own chains are deferred."""
        pair = self._deferred()
        if pair is not None and pair[0] == name:
            return self._reference_excess(eps_error, rel_error) if excess is None else excess
        if (pair is not None or name not in self.directions or name in self.directions.deferred
                or name in self.lower_directions.deferred):
            return 0.0
        d, live, ups = self._ref_uppers(list(self.directions))
        others = np.full(d.size, -np.inf)
        for n, u in ups.items():
            if n != name:
                others = np.maximum(others, u)
        lo = np.maximum(np.maximum(self._ref_lower(name, d), others), 0.0)
        return self._excess(ups[name], lo, live, eps_error, rel_error)

    def _ref_lower(self, name, d, dl=None, ql=None):
        """The dominated chain's solution at the reference deltas ``d`` (its lost mass counted: the meshes' doing
        too), as :meth:`_reference_excess` reads it."""
        dl = self.lower_directions[name] if dl is None else dl
        ql = self._ql[name] if ql is None else ql
        m = math.exp(dl.certificate["log_mass"])
        with np.errstate(divide="ignore"):  # (all mass lost, m = 0: the lower curve is vacuous)
            return ql.epsilon(np.minimum(self._ref_base(dl, d) / m, 2.0))

    @staticmethod
    def _excess(up, lo, live, eps_error, rel_error) -> float:
        excess = 0.0
        for i in np.flatnonzero(live):
            if not math.isfinite(up[i]):
                return math.inf
            excess = max(excess, (max(float(up[i]), 0.0) - float(lo[i]))
                         / _allowed_width(eps_error, rel_error, float(lo[i])))
        return excess

    def _deferred_excess(self, name, d_up, lo_fn, tables=None) -> float:
        """:meth:`_reference_excess` of the answer with the deferred direction ``name``'s dominating chain result
        ``d_up`` (``lo_fn()``: its dominated chain's, run only if needed), read as :meth:`epsilon` reads them: the
        width the answer's ``epsilon(delta)`` has at the reference deltas.  ``tables``: a dict that receives the
        query tables built for the results (``"up"``, and ``"lo"`` where the dominated chain ran), for the answer to
        keep if it keeps these results (:meth:`_LazyQueries.keep`)."""
        d = np.array(_reference_deltas(self.delta_error), dtype=np.float64)
        e = self._deferred()[0]
        live = (d > self.directions[e].p_inf * (1 + 1e-9)) & (d > d_up.p_inf * (1 + 1e-9))
        if not live.any():
            return 0.0
        dq = d[live]
        q_up = _Query(d_up.pmf, self.backend == "native")
        lo_cell = []
        if tables is not None:
            tables["up"] = q_up

        def lo_of():
            if not lo_cell:
                dl = lo_fn()
                lo_cell.append((dl, _Query(dl.pmf, self.backend == "native")))
                if tables is not None:
                    tables["lo"] = lo_cell[0][1]
            return lo_cell[0]

        try:
            _, _, run_up, need = self._epsilon_deferred(dq, np.zeros(dq.shape, dtype=bool), (d_up, q_up), lo_of)
        except ValueError:  # (a delta too small for its charges: what the planner's own checks refuse)
            return math.inf
        # (the chains' curves alone, as _reference_excess reads them, where the answer reads them)
        up = self._q[e].epsilon(self._ref_base(self.directions[e], dq))
        if run_up.any():
            up = np.where(run_up, np.maximum(up, q_up.epsilon(self._ref_base(d_up, dq))), up)
        lo = self._ref_lower(e, dq)
        if need.any():
            lo = np.where(need, np.maximum(lo, self._ref_lower(name, dq, *lo_of())), lo)
        return self._excess(up, np.maximum(lo, 0.0), np.ones(dq.shape, dtype=bool), self.eps_error,
                            self.rel_error)

    @staticmethod
    def _ref_base(dr, d):
        pinf = dr.p_inf
        return (d - pinf) / (1 - pinf) if pinf < 1 else np.zeros(d.size)

    def _up_delta(self, name, x, d=None, q=None):
        """Direction ``name``'s upper bound on ``delta(x)`` (``d``, ``q``: its result and tables, if not the
        answer's)."""
        d = self.directions[name] if d is None else d
        q = self._q[name] if q is None else q
        pinf = d.p_inf
        du, pu = q.delta(x)
        return np.minimum(1.0, (pinf + (1 - pinf) * _upper_curve(d, du + pu)) * (1 + 8 * _U))

    def _lo_delta(self, name, eps, dl=None, ql=None):
        """Direction ``name``'s lower bound on ``delta(eps)`` from its dominated chain."""
        dl = self.lower_directions[name] if dl is None else dl
        ql = self._ql[name] if ql is None else ql
        pinf = dl.p_inf
        m = _kept_mass(dl)
        dd, pl = ql.delta(eps)
        return (pinf + (1 - pinf) * np.maximum(0.0, m * (dd - pl) - dl.delta_spent)) * (1 - 8 * _U)

    def delta(self, epsilon) -> Bounds:
        """Bounds on ``delta(epsilon)``; ``epsilon`` a float >= 0 or an array of them."""
        eps = V.query_array("epsilon", epsilon, lo=0.0)
        if np.isinf(eps).any():
            raise ValueError("epsilon must be finite")
        pair = self._deferred()
        if pair is not None:
            # (the deferred direction D: its curve is at most R, the composed direction E's upper curve at -eps
            # reversed; where R is at most E's lower bound, D changes neither bound and does not run.  Elsewhere
            # it runs, and its upper bound is the smaller of its own and R: the same rule whether or not it ran
            # for an earlier query.  E's own bound is not tightened by D's reversed, which would need D.)
            e, dn = pair
            up_e = self._up_delta(e, eps)
            lo_e = self._lo_delta(e, eps)
            r = _reversal_upper(self._up_delta(e, -eps), eps)
            run = r > np.minimum(lo_e, up_e)
            up_d = r
            if run.any():
                up_d = np.where(run, np.minimum(r, self._up_delta(dn, eps)), r)
            up = np.maximum(up_e, up_d)
            need = up_d > lo_e  # (only where it ran: elsewhere up_d = r <= lo_e)
            lo = np.where(need, np.maximum(lo_e, self._lo_delta(dn, eps)), lo_e) if need.any() else lo_e
            return self._sided(_pack(lo, 0.5 * (lo + up), up, np.ndim(epsilon) == 0), 0.0, 1.0)

        ups = {name: self._up_delta(name, eps) for name in self.directions}
        if self._reversed():
            # (each direction's pair is the other's reversed: its curve at eps is also at most the other's upper
            # curve at -eps, reversed; near eps = 0 that is the tighter one -- the total variation is the same
            # for both -- where one direction ran on coarser meshes)
            other = {"remove": "add", "add": "remove"}
            ups = {name: np.minimum(u, _reversal_upper(self._up_delta(other[name], -eps), eps))
                   for name, u in ups.items()}
        up = None
        for u in ups.values():
            up = u if up is None else np.maximum(up, u)
        lo = self._lower_max(lambda name: self._lo_delta(name, eps), ups, eps.shape)
        return self._sided(_pack(lo, 0.5 * (lo + up), up, np.ndim(epsilon) == 0), 0.0, 1.0)

    def _eps_upper(self, name, dq, one, d=None, q=None, where=None):
        """Direction ``name``'s upper bound on ``epsilon(dq)`` (``None`` where its ``p_inf`` is 1: epsilon 0),
        raising where ``dq`` (the entries ``where``, all but ``one`` by default) cannot be certified."""
        d = self.directions[name] if d is None else d
        q = self._q[name] if q is None else q
        check = ~one if where is None else where & ~one
        pinf = d.p_inf
        if (dq[check] <= pinf).any():
            raise ValueError(
                f"delta={float(np.min(dq[check])):.3g} is at or below the probability of an infinite privacy "
                f"loss ({pinf:.3g}): no finite epsilon exists")
        if pinf >= 1.0:
            return None
        base = (dq - pinf) / (1 - pinf)
        # (the curve's bound at most base: the larger of the two forms' targets, _upper_curve)
        x_up, u = q.upper_solution(np.maximum(base / _rel_factor(d), (base * (1 - 4 * _U) - _rel_tv(d)) * (1 - 4 * _U))
                                   - d.delta_spent)
        if (x_up[check] <= 0).any():
            raise ValueError(
                f"delta={float(np.min(dq[check])):.3g} is too small to certify: the composition spent a delta error "
                f"of {d.delta_spent:.3g}; compose with a smaller delta_error")
        return u

    def _eps_lower(self, name, dq, dl=None, ql=None):
        """Direction ``name``'s lower bound on ``epsilon(dq)`` from its dominated chain (``dl``, ``ql``: its result
        and tables, if not the answer's)."""
        dl = self.lower_directions[name] if dl is None else dl
        ql = self._ql[name] if ql is None else ql
        m = _kept_mass(dl)
        pl = dl.p_inf  # (the dominated chain's own: at most the dominating one's, below dq where that is)
        base = (dq - pl) / (1 - pl) if pl < 1 else np.zeros(dq.shape)
        with np.errstate(divide="ignore", invalid="ignore"):  # (all mass lost, m = 0: the lower bound is vacuous)
            x = (base + dl.delta_spent) / m
            # (the suffix sums' rounding, relative to the tail mass at the solution: ql.lower_pad; the whole
            # mass's pad, absolute, put 4 (n + 4) u ~ 3e-12 under delta 1e-12 on 7,000 buckets: epsilon 715.06
            # against the exact 721.55 for Gaussian(1) x 1000)
            return ql.lower_solution(x)

    def _epsilon_deferred(self, dq, one, up_d=None, lo_d=None):
        """``(lower, upper, run_up, need)`` of :meth:`epsilon` with a deferred direction (:meth:`_deferred`),
        unclipped; ``run_up``, ``need``: where the deferred direction's upper and lower bounds are read.  The
        deferred direction D's epsilon is at most E's upper bound where R, E's upper curve at ``-eps`` reversed,
        is at most ``dq`` there (D's curve is at most R and non-increasing); it cannot raise the lower bound where
        R is at most ``dq`` at E's lower bound.  Elsewhere D runs (``up_d``, ``lo_d()``: its results and tables
        if not the answer's), the same rule whether or not it ran for an earlier query."""
        e, dn = self._deferred()
        u_e = self._eps_upper(e, dq, one)
        up = np.zeros(dq.shape) if u_e is None else u_e
        lo_e = np.zeros(dq.shape) if u_e is None else self._eps_lower(e, dq)

        # (R at E's upper and lower bounds, in one call)
        x = np.concatenate([up.reshape(-1), np.reshape(lo_e, -1)])
        x = np.where(np.isfinite(x), np.maximum(x, 0.0), 0.0)
        r = (_reversal_upper(self._up_delta(e, -x), x) > np.concatenate([dq.reshape(-1)] * 2)).reshape((2,) + dq.shape)
        run_up = r[0] & ~one
        run = run_up | (r[1] & ~one)
        lo, need = lo_e, np.zeros(dq.shape, dtype=bool)
        if run.any():
            d, q = up_d if up_d is not None else (self.directions[dn], self._q[dn])
            u_d = self._eps_upper(dn, dq, one, d, q, where=run)
            if u_d is None:  # (p_inf = 1: epsilon 0)
                u_d = np.zeros(dq.shape)
            up = np.where(run_up, np.maximum(up, u_d), up)
            need = run & (u_d > lo_e)
            if need.any():
                dl, ql = lo_d() if lo_d is not None else (self.lower_directions[dn], self._ql[dn])
                lo = np.where(need, np.maximum(lo_e, self._eps_lower(dn, dq, dl, ql)), lo_e)
        return lo, up, run_up, need

    def epsilon(self, delta) -> Bounds:
        """Bounds on ``epsilon(delta)`` (the smallest eps with ``delta(eps) <= delta``), clipped at 0.

        Raises ``ValueError`` if ``delta`` is outside ``(0, 1]`` or too small to certify a finite
        upper bound (at or below the mass at infinity plus the delta charges).
        """
        dq = V.query_array("delta", delta, lo=0.0, hi=1.0, lo_open=True)
        one = dq >= 1.0
        if self._deferred() is not None:
            lo, up, _, _ = self._epsilon_deferred(dq, one)
        else:
            ups = {}
            up = None
            for name in self.directions:
                u = ups[name] = self._eps_upper(name, dq, one)
                u = np.zeros(dq.shape) if u is None else u
                up = u if up is None else np.maximum(up, u)

            def lo_of(name):
                if ups[name] is None:  # (p_inf = 1: epsilon 0)
                    return np.zeros(dq.shape)
                return self._eps_lower(name, dq)

            ups = {name: (np.zeros(dq.shape) if u is None else u) for name, u in ups.items()}
            lo = self._lower_max(lo_of, ups, dq.shape, skip=one)
        lo = np.where(one, 0.0, np.maximum(lo, 0.0))
        up = np.where(one, 0.0, np.maximum(up, 0.0))
        lo = np.minimum(lo, up)
        return self._sided(_pack(lo, 0.5 * (lo + up), up, np.ndim(delta) == 0), 0.0, np.inf)
