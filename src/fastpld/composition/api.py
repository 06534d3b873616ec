"""The public :func:`compose`: argument checks, the kept answers, and the search for the cheapest
plan that certifies.
"""
from __future__ import annotations

import math
from typing import Sequence

from .. import _answers, _fft, resources
from .. import _validation as V
from .. import mechanisms as _mechanisms
from .._limits import BucketLimitError
from ..curve import DirectionResult, PrivacyLossDistribution, _certified_sides
from ..mechanisms import Mechanism
from .budget import _BudgetError, _Budgets
from .execute import _execute, _refusal, _roundoff_floor
from .grids import _cumulant_grids
from .plan import _plan_name
from .planner import _choose_plan
from .roundoff import _U64
from .threads import _run_jobs, _try_submit, default_threads


__all__ = ["compose", "METHODS", "DEFAULT_MAX_BUCKETS"]

METHODS = ("auto", "glw", "two_stage", "recursive", "dominance", "coupling")
DEFAULT_MAX_BUCKETS = 1 << 23


def _normalise_events(mechanism, count):
    """``[(mechanism, count)]`` of :func:`compose`'s first two arguments, checked (``ValueError`` naming the
    argument)."""
    if isinstance(mechanism, Mechanism):
        if count is None:
            raise ValueError("count is required when composing a single mechanism")
        return _expand([(mechanism, V.positive_int("count", count))])
    if count is not None:
        raise ValueError("count must not be given with a list of (mechanism, count) pairs")
    if isinstance(mechanism, (str, bytes)) or not isinstance(mechanism, Sequence) and not hasattr(mechanism, "__iter__"):
        raise ValueError(f"mechanism must be a Mechanism or a list of (mechanism, count) pairs, got {mechanism!r}")
    events = []
    for i, item in enumerate(mechanism):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise ValueError(f"events[{i}] must be a (mechanism, count) pair, got {item!r}")
        mech, c = item
        if not isinstance(mech, Mechanism):
            raise ValueError(f"events[{i}][0] must be a Mechanism, got {mech!r}")
        events.append((mech, V.positive_int(f"events[{i}] count", c)))
    if not events:
        raise ValueError("events must not be empty")
    return _expand(events)


def _expand(events):
    """``events`` with every mechanism that stands for a composition (``Mechanism._components``)
    replaced by its components, counts multiplied."""
    out = []
    for mech, c in events:
        parts = mech._components()
        if parts is None:
            out.append((mech, c))
        else:
            out.extend(_expand([(m, c * n) for m, n in parts]))
    return out


def _direction_parts(events):
    """Per direction, the list of (loss, count) with identical losses merged.

    Each distinct mechanism is asked for its losses once (equal mechanisms share the answer): the
    parts do not depend on what the loss cache evicts in between."""
    memo = {}
    maps = []
    for mech, c in events:
        try:
            losses = memo.get(mech)
            if losses is None:
                losses = memo[mech] = mech.privacy_losses()
        except TypeError:  # an unhashable mechanism
            losses = mech.privacy_losses()
        maps.append(losses)
    symmetric = all(m["add"] is m["remove"] for m in maps)
    names = ("remove",) if symmetric else ("remove", "add")
    dirs = {}
    for d in names:
        acc = {}
        for (mech, c), losses in zip(events, maps):
            loss = losses[d]
            key = id(loss)
            if key in acc:
                acc[key] = (loss, acc[key][1] + c)
            else:
                acc[key] = (loss, c)
        dirs[d] = _merged_gaussians(list(acc.values()))
    return dirs


# relative error of a merged Gaussian's mu (_merged_gaussians): each term c mu^2 within 1.5 u, their correctly rounded
# sum (math.fsum) u / 2 more, the square root halves that and rounds by u / 2: 1.75 u; each mu_i, the loss's
# sensitivity / sigma rounded, within u / 2 of the mechanism's: 2.25 u in all, taken as 5 u
_MERGED_MU_REL = 5 * _U64
# (False: Gaussian parts composed as given; the tests of the heterogeneous planners take distinct Gaussians for their
# exact oracle)
_MERGE_GAUSSIANS = True


# the widest one copy (:func:`_single_gaussians`): a leaf of mesh ~1 and more refines its cells' quadrature to the
# weights' scale, ~24 mu panels.  At rel_error 1e-3 (k 100 .. 1e6): mu 3-30 one leaf 0.54-0.67 ms against chains of
# 0.82-3.0 ms, 100 1.09 against 1.00-3.06, 300 1.39-2.24 against 1.42-5.23, 1000 5.2 against 1.40-3.52
_SINGLE_MU_MAX = 300.0


def _single_gaussians(dir_parts):
    """``dir_parts`` with every direction's one Gaussian part of ``k > 1`` copies at ``mu`` as one copy at ``mu
    sqrt(k)`` (the dominance certificate's plans: one leaf instead of a chain, as :func:`_merged_gaussians` makes
    of several parts; the coupling plans keep their copies, as their research uses ask).  Beside other parts too:
    PSG(1, 0.01) x 1e4 with Gaussian(5) x 100 5.7 -> 4.1 ms, Laplace(3) x 100 with it 2.6 -> 2.0 ms.  The merged loss
    charges its parameter's rounding (``_MERGED_MU_REL``).  Up to ``mu sqrt(k) = _SINGLE_MU_MAX``."""
    return [(name, _merged_gaussians(parts, alone=True)) for name, parts in dir_parts]


def _merged_gaussians(parts, alone=False):
    """``parts`` (one direction's ``(loss, count)``) with its Gaussian losses merged into one: ``k_i`` copies of
    ``N(mu_i^2 / 2, mu_i^2)`` compose exactly to one copy of ``mu = sqrt(sum k_i mu_i^2)`` (the normal laws' sum), a
    single part where a schedule of many noise levels had one each.  The computed ``mu`` is within
    ``_MERGED_MU_REL`` of the exact one, which the merged loss charges (:class:`fastpld.mechanisms.GaussianLoss`'s
    ``mu_rel``).  One Gaussian part is left as it is (its copies' plan is the homogeneous one's), but ``alone``
    (:func:`_single_gaussians`) where it has several copies and the merged ``mu`` is at most ``_SINGLE_MU_MAX``."""
    G = _mechanisms.GaussianLoss
    plain = [type(loss) is G and not loss.mu_rel for loss, _ in parts]  # (one mechanism's Gaussian, not a merged one)
    gauss = [part for part, g in zip(parts, plain) if g]
    single = alone and len(gauss) == 1 and gauss[0][1] > 1
    if not (len(gauss) >= 2 or single) or not _MERGE_GAUSSIANS:
        return parts
    mu = math.sqrt(math.fsum(float(c) * (loss.mu * loss.mu) for loss, c in gauss))
    # (the range of a Gaussian's noise ratio, its loss's arithmetic; one part's copies up to _SINGLE_MU_MAX)
    if not 1e-100 <= mu <= (_SINGLE_MU_MAX if single else 1e100):
        return parts
    # (one loss object per merged mu -- all the merged loss depends on; fsum's sum does not depend on the parts'
    # order -- so equal questions share it, as the answers kept are keyed by it)
    merged = _mechanisms._cached(("merged Gaussian", mu, _MERGED_MU_REL), lambda: G(mu, mu_rel=_MERGED_MU_REL))
    first = plain.index(True)  # (the merged part where the first Gaussian was)
    return [(merged, 1) if i == first else part for i, (part, g) in enumerate(zip(parts, plain)) if not g or i == first]


_PREFETCH_MIN_PARTS = 32


def compose(mechanism, count: int | None = None, *, eps_error: float | None = None, delta_error: float = 1e-10,
            rel_error: float | None = None, method: str = "auto", backend: str | None = None,
            arity: int | None = None, max_buckets: int = DEFAULT_MAX_BUCKETS,
            threads: int | None = None) -> PrivacyLossDistribution:
    """Compose privacy loss distributions with certified error.

    Parameters
    ----------
    mechanism : Mechanism or list of (Mechanism, int)
        One mechanism composed ``count`` times, or a heterogeneous list of
        ``(mechanism, count)`` pairs.  Gaussian parts at different noise levels or
        sensitivities are merged into one Gaussian first (exactly; the rounding of the
        merged parameter is charged), so the result's ``stages`` show one part for them;
        the dominance certificate composes ``k`` copies of one Gaussian (``mu sqrt(k)`` up
        to 300) as one copy at ``mu sqrt(k)``, its ``stages`` one leaf.
    count : int, optional
        Number of compositions of a single ``mechanism``.
    eps_error, delta_error : float
        Target errors: the result ``Z`` satisfies ``|Y - Z| <=_delta_error eps_error``
        for the exact composed privacy loss ``Y``, so that
        ``delta_Z(eps + eps_error) - delta_error <= delta(eps) <= delta_Z(eps - eps_error) + delta_error``.
        Give ``eps_error`` or ``rel_error``, or neither: the default is ``rel_error=1e-3`` (the
        dominance certificate) and, where that composition is refused, the coupling certificate at
        ``eps_error`` = the same relative accuracy of a rough epsilon (its mean plus four standard
        deviations, at least 0.01) over 4 (at least 1e-6; 1e-4, 0.01, then 0.1, where that is refused or needs
        FFTs of over 2^20 buckets);
        a coupling ``method`` asked without an accuracy takes ``eps_error=0.01``.
    rel_error : float, optional
        The accuracy asked relative to epsilon instead of ``eps_error`` (give one of them): the
        certified interval of ``epsilon(delta)`` at most ``rel_error`` times epsilon wide (so both
        bounds within ``rel_error`` of the truth, relative), checked at deltas 1e-3 .. 1e-9, for
        epsilons of at least 0.01 (below: ``rel_error * 0.01``, absolute).  The width counts the
        discretisation; where ``delta`` is below 1000 times ``delta_error`` (1e-7 at the default) the delta
        charges widen it further (at 1e-9 up to ~5 times): pass ``delta_error=delta / 1000`` to query smaller
        deltas.  Certified by dominance: ``method`` "auto" or "dominance"; where the dominance
        certificate refuses it, so does ``compose`` (give ``eps_error`` for the coupling certificate: its width is
        absolute), but for the default accuracy (neither given), which falls back as above.
    method : {"auto", "glw", "two_stage", "recursive", "coupling", "dominance"}
        ``glw``: one fine grid (Gopi-Lee-Wutschitz); ``two_stage``: Algorithm 2;
        ``recursive``: Algorithm 3 for any ``k`` (``arity`` chooses the branching;
        default: the cheapest of several); ``auto``: the dominance certificate at the accuracy
        asked, and with ``eps_error``, where it refuses (or is predicted slower), the cheapest predicted
        coupling plan (with ``arity``: the coupling plans only; with ``rel_error``: see there);
        ``coupling``: the cheapest predicted coupling plan (``glw``, ``two_stage`` or ``recursive``).
        ``dominance``: the recursive plan on a dominating and a dominated PMF, certified
        without an epsilon shift (``docs/dominance.md``); there ``eps_error`` is the accuracy
        asked of each bound of ``epsilon(delta)`` (checked at deltas 1e-3 .. 1e-9) and
        ``arity`` defaults to 64 (256 where its round-off does not fit ``delta_error``).
    backend : {"native", "numpy"}, optional
        FFT backend (default: :func:`fastpld.get_backend`).
    arity : int, optional
        Branching factor of the recursive method.
    max_buckets : int
        Refuse (``ValueError``) before allocating an FFT or a discretisation
        larger than this.
    threads : int, optional
        ``1`` runs everything on the calling thread; ``2`` or more lets the two directions
        (add and remove) of an asymmetric composition run concurrently, the second on a
        process-wide worker thread when a compute slot is free (the compiled kernels and FFTs
        release the GIL; at most :func:`fastpld.thread_limit` threads compose at once, process-wide).
        Default: :func:`default_threads`.  The result does not depend on it.

    Returns
    -------
    PrivacyLossDistribution
        Query with ``delta(eps)`` and ``epsilon(delta)``; both return
        ``Bounds(lower, estimate, upper)``.  Answers are kept (see :func:`fastpld.set_cache_limit`):
        a repeated question returns a copy of the kept answer, bitwise the same as a fresh
        composition; its arrays are shared and read-only.
    """
    events = _normalise_events(mechanism, count)
    rel_error, eps_given, default = V.accuracy(rel_error, eps_error, method)
    if rel_error is not None and not default:
        method = "dominance"
    eps_err = V.DEFAULT_EPS_ERROR if eps_given is None else eps_given
    delta_err = V.delta_error(delta_error)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if arity is not None:
        arity = V.positive_int("arity", arity)
        if arity < 2:
            raise ValueError(f"arity must be >= 2, got {arity}")
        if method not in ("recursive", "auto", "dominance", "coupling"):
            raise ValueError("arity applies to methods 'recursive', 'dominance', 'coupling' and 'auto' only")
    max_buckets = V.positive_int("max_buckets", max_buckets)
    threads = default_threads() if threads is None else V.positive_int("threads", threads)
    be = _fft.resolve(backend)

    dir_parts = list(_direction_parts(events).items())

    def compute():
        with resources.compute_slot():
            if default and rel_error is not None and method == "auto":
                pld = _compose_default(dir_parts, events, delta_err, arity, max_buckets, threads, be, rel_error)
            elif method == "auto" and eps_given is not None and arity is None:
                pld = _compose_auto_eps(dir_parts, events, eps_err, delta_err, max_buckets, threads, be)
            else:
                pld = _compose_parts(dir_parts, events, eps_err, delta_err, method, arity, max_buckets, threads,
                                     be, rel_error)
        _mechanisms._refresh_sizes(m for m, _ in events)  # (their MGF grids and tables grew)
        return pld

    key = (tuple((name, tuple(parts)) for name, parts in dir_parts), eps_err, delta_err, method, arity, be.name,
           max_buckets) + ((("rel_error", rel_error),) if rel_error is not None else ())
    try:
        hash(key)
        loss_keys = {_mechanisms._loss_key(m) for m, _ in events}
    except TypeError:  # a custom loss or mechanism that cannot be a key: composed every time
        return compute()
    return _answers.answer(key, compute, events, loss_keys)


def compose_widening(compose_at, delta_errors):
    """``compose_at(delta_error)`` with the first of ``delta_errors`` whose composition is not refused for its error
    budget (the calibration's ladder, :func:`fastpld.calibrate._default_errors`); the last refusal is raised."""
    for i, de in enumerate(delta_errors):
        try:
            return compose_at(de)
        except _BudgetError:
            if i + 1 == len(delta_errors):
                raise


def within_accuracy(b, rel_error=None, eps_error=None) -> bool:
    """Whether ``b``, an interval of ``epsilon(delta)``, is within the relative accuracy asked (``rel_error``, or the
    default's where neither accuracy is given: :func:`fastpld.dominance.result._allowed_width`); always under an
    absolute ``eps_error``."""
    from ..dominance.result import _allowed_width
    rel = rel_error if rel_error is not None else (V.DEFAULT_REL_ERROR if eps_error is None else None)
    return rel is None or b.upper - b.lower <= _allowed_width(0.0, rel, b.lower)


def compose_for_delta(compose_at, delta: float, delta_error=None, rel_error=None, eps_error=None):
    """The composition an ``epsilon(delta)`` query reads, from ``compose_at(delta_error)``: the delta errors of
    :func:`fastpld._validation.delta_errors_at` in turn (``delta_error`` alone where given), the first composition
    not refused for its budget whose interval at ``delta`` is within the relative accuracy (``rel_error``, or the
    default's where neither accuracy is given; any with an absolute ``eps_error``), else the narrowest there of
    those composed (at ``delta / 1000`` the default accuracy may fall back to a coupling plan 0.2 wide where ten
    times that budget is certified by dominance within 0.1%: ``Gaussian(92) x 2`` at 1.6e-13).  Where every one
    is refused, the last refusal is raised."""
    best, err = None, None
    for de in V.delta_errors_at(delta, delta_error):
        try:
            pld = compose_at(de)
        except _BudgetError as exc:
            err = exc
            continue
        try:
            b = pld.epsilon(delta)
        except ValueError as exc:  # (a delta too small for what this budget spent)
            err = exc
            continue
        if within_accuracy(b, rel_error, eps_error):
            return pld
        if best is None or b.upper - b.lower < best[0]:
            best = (b.upper - b.lower, pld)
    if best is not None:
        return best[1]
    raise err


def _compose_default(dir_parts, events, delta_err, arity, max_buckets, threads, be, rel_error):
    """:func:`compose` at the default accuracy: the dominance certificate at ``rel_error``, and where it
    refuses (its charges do not fit delta_error, a lattice too large, a loss it cannot bound, a width it
    cannot reach) the cheapest coupling plan at the first of :func:`_fallback_eps_errors` it certifies; where the
    width was missed and the rungs within the accuracy asked are refused, the dominance certificate asked
    ``_RETRY_FACTOR`` times finer (:func:`fastpld.dominance.planner.compose_finer`) comes before the coarser rungs."""
    try:
        # (not asked again finer where the width is missed: the coupling certificate's answer is quicker --
        # PS(RR(0.42, 3), 0.31) x 40,688: 0.6 s and 0.048% wide, against 8.2 s and 4.7e-7 of epsilon at 1e-4)
        return _compose_parts(dir_parts, events, V.DEFAULT_EPS_ERROR, delta_err, "dominance", arity, max_buckets,
                              threads, be, rel_error, retry=False)
    except ValueError as refused:
        narrowest = _narrowest_answer(refused, dir_parts)
        if narrowest is not None:
            return narrowest
        from ..dominance.planner import _WidthError, compose_finer
        width = _asked_width(dir_parts, rel_error)
        ladder = _fallback_eps_errors(dir_parts, rel_error, width)
        # (a width the dominance meshes missed is asked again finer before a rung coarser than the accuracy asked:
        # PSG(0.296, 1.66e-4) x 39 missed it 1.85-fold, its finer rungs needed FFTs past 2^20 buckets, and the
        # default answered 0.01 wide, 1.8% of epsilon where 0.1% was asked; finer, the dominance certificate answers)
        within = width / 2
        finer = isinstance(refused, _WidthError)
        for i, ee in enumerate(ladder):
            if finer and ee > within:
                finer = False
                try:
                    return compose_finer(dir_parts, events, V.DEFAULT_EPS_ERROR, delta_err, be, arity, max_buckets,
                                         threads, rel_error)
                except ValueError:
                    pass
            # (the finer rungs only where they stay cheap: at most _FALLBACK_BUCKETS per FFT)
            mb = max_buckets if i + 1 == len(ladder) else min(max_buckets, _FALLBACK_BUCKETS)
            try:
                return _compose_parts(dir_parts, events, ee, delta_err, "auto", arity, mb, threads, be)
            except ValueError as exc:  # (its type and attributes kept: callers widen on them)
                if i + 1 < len(ladder):  # (too fine a rung: its FFTs or its round-off; the next)
                    continue
                exc.args = (f"{exc} (eps_error={ee:g}, the default accuracy's fallback); the dominance "
                            f"certificate at rel_error={rel_error:g} refused too: {refused}",)
                raise exc from None


def _lower_by_dominance_only(dir_parts) -> bool:
    """Whether a lower bound of these losses is certified by the dominance certificate only: a loss that
    only dominates its mechanism's (random allocation) but carries a dominated one, which the dominance
    certificate's lower chain composes (with the coupling certificate its lower bounds are reported as 0)."""
    losses = [loss for _, parts in dir_parts for loss, _ in parts]
    return _certified_sides(losses) != _certified_sides(losses, lower_chain=True)


def _narrowest_answer(refused: ValueError, dir_parts):
    """The narrowest dominance answer of a ``_WidthError`` where a coupling plan would certify no lower
    bound (losses that only dominate their mechanism's, e.g. random allocation's), else ``None``: there
    the width asked is out of reach (the gap of the dominating and dominated losses), and that answer,
    wider than asked, still certifies both bounds."""
    narrowest = getattr(refused, "narrowest", None)
    return narrowest if narrowest is not None and _lower_by_dominance_only(dir_parts) else None


# auto with an absolute eps_error compares the coupling planner's prediction for its cheapest plan (which
# runs 1.5-4x above the measured times: halved) with a rough model of the dominance certificate's time:
# _DOM_NODE_US per chain level and _DOM_PART_US per further distinct part (benchmarks/bench_auto.py;
# docs/dominance.md).  The dominance certificate now runs 1-2 ms per level, but 3 ms is kept: at 1.5 ms auto
# sent PSG(1, 0.01) x 1000 at eps_error 0.02 to dominance, whose coarse meshes bound beta loosely at the
# extreme alphas (0 against the coupling's 2.4e-12 at alpha = 1 - 1e-10): its epsilon within eps_error, its
# Gaussian-DP mu over alpha in [1e-10, 1 - 1e-10] in [0.467, inf) against the coupling's [0.543, 0.549]; at
# 1.0 ms the paper's PSG x 2^16 at 0.01 went to dominance too (18 ms against 7)
_DOM_NODE_US = 3000.0
_DOM_PART_US = 1000.0
_COUPLING_PREDICTION_BIAS = 2.0


def _dominance_time_us(dir_parts) -> float:
    """A rough prediction of the dominance certificate's time (microseconds)."""
    total = 0.0
    for _, parts in dir_parts:
        copies = max(1, sum(c for _, c in parts))
        total += _DOM_NODE_US * (1 + math.log(copies) / math.log(64)) + _DOM_PART_US * (len(parts) - 1)
    return total


def _compose_auto_eps(dir_parts, events, eps_err, delta_err, max_buckets, threads, be):
    """``method="auto"`` with an absolute ``eps_error``: the cheapest predicted coupling plan where it is
    predicted faster than the dominance certificate (:func:`_dominance_time_us`), else the dominance
    certificate at that accuracy (each bound of ``epsilon(delta)`` within ``eps_error`` of the estimate,
    no epsilon shift) and, where that refuses, the coupling plans.  (Losses that only dominate their
    mechanism's keep auto's own order: dominance first, see :func:`_compose_parts`.)"""
    if _lower_by_dominance_only(dir_parts):
        return _compose_parts(dir_parts, events, eps_err, delta_err, "auto", None, max_buckets, threads, be)
    budgets = _Budgets.split(eps_err, delta_err)
    ranked0 = _choose_plan(dir_parts[0][1], "auto", None, budgets.eps_azuma, budgets.log_term, budgets, be.native)
    if ranked0[0][0] / _COUPLING_PREDICTION_BIAS <= _dominance_time_us(dir_parts):
        return _compose_parts(dir_parts, events, eps_err, delta_err, "coupling", None, max_buckets, threads, be,
                              ranked0=ranked0)
    try:
        return _compose_parts(dir_parts, events, eps_err, delta_err, "dominance", None, max_buckets, threads, be)
    except ValueError as refused:
        try:
            return _compose_parts(dir_parts, events, eps_err, delta_err, "coupling", None, max_buckets, threads,
                                  be, ranked0=ranked0)
        except ValueError as exc:  # (its type and attributes kept: callers widen on them)
            exc.args = (f"{exc}; the dominance certificate at eps_error={eps_err:g} refused too: {refused}",)
            raise exc from None


# the finest eps_error the default accuracy's fallback asks for, and the rung after a finer first one: at 1e-4 as the
# floor, an epsilon below 0.4 was answered 2e-4 wide whatever it was -- a mix of two Poisson-subsampled pure DP
# mechanisms at epsilon 0.0027, 19x the 1e-5 that rel_error 1e-3 allows there, where eps_error 2.5e-6 took 0.57 s
_FALLBACK_FLOOR = 1e-6
_FALLBACK_RUNG = 1e-4
_FALLBACK_BUCKETS = 1 << 20  # the largest FFT of the fallback's rungs but the last (its time ~0.1-1 s)


def _asked_width(dir_parts, rel_error: float) -> float:
    """The certified width ``rel_error`` asks of ``epsilon(delta)`` against a rough epsilon (the composed loss's mean
    plus four standard deviations, :func:`fastpld.dominance.planner._epsilon_guess`, at least ``_REL_FLOOR`` as
    ``rel_error`` is read)."""
    from ..dominance.planner import _epsilon_guess
    from ..dominance.result import _REL_FLOOR
    return rel_error * max(_epsilon_guess(dir_parts), _REL_FLOOR)


def _fallback_eps_errors(dir_parts, rel_error: float, width: float | None = None) -> list:
    """The coupling certificate's ``eps_error``s where the default accuracy's dominance composition is
    refused, tried in turn while refused (all but the last within FFTs of 2^20 buckets; round-off):
    the same relative accuracy against a rough epsilon (``width``, :func:`_asked_width`, computed where not given),
    a quarter of it for the guess's error (at least 1e-6), then 1e-4, ``DEFAULT_EPS_ERROR`` (0.01) and 0.1 where
    larger."""
    if width is None:
        width = _asked_width(dir_parts, rel_error)
    first = max(_FALLBACK_FLOOR, width / 4)
    return _eps_ladder(first, (_FALLBACK_RUNG, V.DEFAULT_EPS_ERROR, 0.1))


def _eps_ladder(first: float, rungs=(V.DEFAULT_EPS_ERROR, 0.1)) -> list:
    """``[first]``, then the ``rungs`` coarser than it (by default ``DEFAULT_EPS_ERROR``, 0.01, and 0.1): the coupling
    certificate's ``eps_error``s tried in turn where one is refused."""
    return [first] + [e for e in rungs if e > first]


def _compose_parts(dir_parts, events, eps_err, delta_err, method, arity, max_buckets, threads, be, rel_error=None,
                   ranked0=None, retry=True):
    """:func:`compose` of validated arguments (``dir_parts``: :func:`_direction_parts` of ``events``).
    ``ranked0``: the first direction's ranked coupling plans, when the caller has them
    (:func:`_compose_auto_eps`); ``retry``: the dominance certificate asks a missed relative accuracy again, finer
    (:func:`fastpld.dominance.planner.compose_dominance`)."""
    coupling_only = method == "coupling"
    if coupling_only:  # (the planner's auto: the cheapest coupling plan)
        method = "auto"
    if method == "dominance":
        from ..dominance import compose_dominance  # (a certificate of its own; imported where used)
        return compose_dominance(dir_parts, events, eps_err, delta_err, be, arity, max_buckets, threads, rel_error,
                                 retry=retry)
    if method == "auto" and not coupling_only and arity is None and _lower_by_dominance_only(dir_parts):
        # (the dominance certificate composes both bounds of such losses: auto tries it first)
        from ..dominance import compose_dominance
        try:
            return compose_dominance(dir_parts, events, eps_err, delta_err, be, None, max_buckets, threads)
        except (_BudgetError, BucketLimitError):
            pass
    budgets = _Budgets.split(eps_err, delta_err)
    log_term = budgets.log_term
    eps_az = budgets.eps_azuma
    def run(ranked):
        # the cheapest predicted plan first; if its measured round-off/wrap charges do not fit
        # delta_error (the prediction cannot see, e.g., the spectral peaks of lattice PMFs), or it
        # needs more than max_buckets, the next ones, so that the answer is the fastest plan that
        # certifies, and a refusal means that no candidate certifies
        # (a plan whose measured charges leave too little failure probability for its meshes --
        # the round-off of large powers of lattice PMFs is ~5x the prediction -- stops as soon as
        # that is certain, instead of after the plan's last node).
        # A plan predicted to need more than max_buckets (by more than the prediction's error) is
        # refused without executing it.
        budget_errors, size_errors = [], []
        for _, plan, meshes in ranked:
            peak = getattr(plan, "peak", 0.0)
            if peak > max_buckets * getattr(plan, "peak_slack", math.inf):
                what = (f"composition needs an FFT of {peak:.0f} buckets" if plan.peak_node and math.isfinite(peak)
                        else f"discretising the privacy loss needs {peak:.4g} buckets")
                size_errors.append(BucketLimitError(
                    f"{what} (the planner's prediction for the largest step of the {_plan_name(plan)} plan), more "
                    f"than max_buckets={max_buckets}; increase eps_error or max_buckets", peak))
                continue
            floor = _roundoff_floor(plan)
            if floor * (1 - 1e-6) >= budgets.delta:
                budget_errors.append(_BudgetError(
                    f"delta_error={budgets.delta:.3g} is too small for this composition: the {_plan_name(plan)} plan's "
                    f"node normalisations alone are charged at least {floor:.3g} of round-off; increase delta_error"))
                continue
            try:
                final, eps_spent, delta_spent, stages, cert = _execute(plan, meshes, budgets, be, max_buckets,
                                                                       eps_limit=eps_err)
                if eps_spent > eps_err:
                    raise _BudgetError(
                        f"the certified eps error {eps_spent:.4g} exceeds eps_error={eps_err:.4g} (round-off and "
                        f"truncation left delta {cert['eta']:.3g} for the discretisation term; mean-correction "
                        f"bias {cert['bias']:.3g}); increase eps_error or delta_error"
                    )
                return plan, final, eps_spent, delta_spent, stages, cert
            except _BudgetError as exc:
                budget_errors.append(exc)
            except BucketLimitError as exc:
                size_errors.append(exc)
        raise _refusal(budget_errors, size_errors, max_buckets)

    def finish(name, parts, out):
        plan, final, eps_spent, delta_spent, stages, cert = out
        p_inf_log = sum(c * math.log1p(-loss.p_inf) for loss, c in parts)
        # (a dominated loss -- random allocation's bound="lower" epochs -- puts the mass it would place at -inf at its
        # lowest value instead, lower_slack, which can raise a curve by at most that much per copy: charged to the
        # delta spent, so that the lower bounds hold; their upper bounds are reported as the trivial ones anyway)
        slack = sum(c * float(getattr(loss, "lower_slack", 0.0) or 0.0) for loss, c in parts)
        if slack > 0:
            delta_spent = (delta_spent + slack) * (1 + 4 * _U64)
            cert = dict(cert, lower_slack=slack)
        return DirectionResult(final, -math.expm1(p_inf_log), eps_spent, delta_spent, tuple(stages), cert,
                               _plan_name(plan))

    def shape(plan):
        return plan.method, plan.params[0].get("arity"), plan.params[0].get("merge")

    name0, parts0 = dir_parts[0]
    # many distinct parts: the second direction's MGF grids (~0.1 ms per part) are computed on a
    # worker thread while this one plans the first direction
    prefetch = None
    if len(dir_parts) == 2 and threads > 1 and len(dir_parts[1][1]) >= _PREFETCH_MIN_PARTS:
        prefetch = _try_submit(lambda: _cumulant_grids([loss for loss, _ in dir_parts[1][1]], be.native))
    try:
        if ranked0 is None:
            ranked0 = _choose_plan(parts0, method, arity, eps_az, log_term, budgets, be.native)
    finally:
        if prefetch is not None:
            prefetch.result()
    jobs = [lambda: finish(name0, parts0, run(ranked0))]
    if len(dir_parts) == 2:
        name1, parts1 = dir_parts[1]
        # The add and remove losses of one mechanism have the same shape of plan: for auto, the
        # second direction predicts only the first one's top-ranked chain and grouping (its meshes
        # are still predicted for its own loss), and ranks every candidate only if that plan is
        # refused.  (The top-ranked plan, not the one the first direction ends up executing: the
        # second direction does not wait for the first, and its answer does not depend on threads.)
        reuse = shape(ranked0[0][1]) if method == "auto" and arity is None else None

        def second():
            refused = None
            if reuse is not None:
                try:
                    return finish(name1, parts1, run(_choose_plan(parts1, reuse[0], reuse[1], eps_az, log_term,
                                                                  budgets, be.native, merge=reuse[2])))
                except (_BudgetError, BucketLimitError):
                    refused = reuse
            ranked = _choose_plan(parts1, method, arity, eps_az, log_term, budgets, be.native)
            return finish(name1, parts1, run([r for r in ranked if shape(r[1]) != refused] or ranked))

        jobs.append(second)
    directions = dict(zip([name for name, _ in dir_parts], _run_jobs(jobs, threads, ranked0[0][0])))
    return PrivacyLossDistribution(directions, eps_err, delta_err, tuple(events), be.name)
