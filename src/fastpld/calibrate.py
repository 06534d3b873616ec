"""Calibration that never overshoots: the certified upper bound decides.

Every search here treats ``p -> upper bound on epsilon(target_delta)`` (the
certified :attr:`Bounds.upper` of :func:`fastpld.compose` at the given errors)
as a monotone function of the parameter ``p`` and keeps a bracket
``[infeasible, feasible]`` whose *both ends have been evaluated*.  It stops when
the ends are within a factor ``1 + rtol`` (by default the relative accuracy, 0.1%) and
returns the feasible end, so

* the certified upper bound at the returned parameter is ``<= target_epsilon``
  (it was computed, not interpolated), and
* the returned parameter is within ``rtol`` of the boundary of the feasible set
  (the smallest feasible noise multiplier, the largest feasible sampling
  probability or number of steps).

Brackets are found by geometric expansion from an analytic guess (no fixed
range); inside the bracket the next point is the root of the log-log secant of
``epsilon(p)``, placed just on alternating sides of the predicted root so that
typically two or three compositions close the bracket.  An unattainable target
raises ``ValueError`` saying why.  The compositions take :func:`fastpld.compose`'s
default accuracy (``rel_error=1e-3``: relative to epsilon, so tiny targets get a
fine enough grid) unless ``eps_error`` or ``rel_error`` is given, and ``compose``'s
``max_buckets`` guard bounds memory and time.

A composition that ``compose`` refuses for its error budget (the round-off of
many compositions can exceed a tiny ``delta_error``) is not evidence that the
target is missed.  With the default ``delta_error`` such a composition is
retried with ``delta_error`` 10 and 100 times larger (at most
``target_delta / 10``: the certified bound stays rigorous, only slightly looser);
if the search still ends against a refused composition, the feasible end is
returned with a :class:`CalibrationWarning` saying what limited it.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable

from . import _validation as V
from .allocation import _upper_only
from .composition.api import DEFAULT_MAX_BUCKETS, compose, compose_widening
from .mechanisms import Mechanism, PoissonSubsampledGaussian


__all__ = ["calibrate", "find_noise_multiplier", "find_sampling_probability", "find_steps", "CalibrationWarning"]


class CalibrationWarning(UserWarning):
    """The search ended against compositions that ``compose`` refused (not certified infeasible):
    the returned parameter is feasible but may be far from the optimum."""


def _default_errors(target_epsilon, target_delta, eps_error, delta_error):
    """``(eps_error, delta_errors)``: the delta errors to try in turn on a refusal (one if given)."""
    widen = delta_error is None
    if eps_error is None:
        eps_error = min(0.1, target_epsilon / 20)
    eps_error = V.eps_error(eps_error)
    if delta_error is None:
        delta_error = max(target_delta * 1e-3, 1e-250)
    delta_error = V.delta_error(delta_error)
    if not delta_error < target_delta:
        raise ValueError(f"delta_error={delta_error:.3g} must be smaller than target_delta={target_delta:.3g}")
    des = [delta_error]
    while widen and len(des) < 3 and des[-1] * 10 <= target_delta / 10:
        des.append(des[-1] * 10)
    return eps_error, tuple(des)


def _accuracy(te, td, rel_error, eps_error, delta_error, rtol, method="auto"):
    """``(acc, ee, delta_errors, rtol)`` of a calibration's accuracy arguments: ``acc`` the accuracy
    passed to :func:`fastpld.compose` (``{}``: neither given, compose's default, ``rel_error`` 1e-3
    with its fallback), ``ee`` the absolute epsilon error standing for it in first guesses and
    messages, the delta errors of :func:`_default_errors`, and the search's tolerance (``rtol`` if
    given, else the relative accuracy, else 1%)."""
    rel, eps, default = V.accuracy(rel_error, eps_error, method)
    acc = {} if default else ({"rel_error": rel} if rel is not None else {"eps_error": eps})
    ee = rel * te / 2 if rel is not None else eps
    ee, des = _default_errors(te, td, ee, delta_error)
    if rtol is None:
        rtol = rel if rel is not None else 0.01
    return acc, ee, des, rtol


def _targets(target_epsilon, target_delta):
    te = V.positive_float("target_epsilon", target_epsilon)
    td = V.probability("target_delta", target_delta, open_low=True, open_high=True)
    return te, td


class _Evaluator:
    """``p -> certified upper epsilon``, memoised; compose failures recorded, not hidden.

    ``refused``: the parameters whose composition was refused (grid too large, delta error too
    small, ...) with the error; ``bracket``: the ``(feasible, infeasible)`` ends the search ended on.
    """

    def __init__(self, make, run):
        self.make, self.run = make, run
        self.memo = {}
        self.last_error = None
        self.refused = {}
        self.bracket = None

    def __call__(self, p):
        if p not in self.memo:
            mech = self.make(p)  # bad parameters raise here, unmasked
            try:
                self.memo[p] = float(self.run(mech))
            except ValueError as e:  # not certifiable here (grid too large, delta too small, ...)
                self.last_error = e
                self.refused[p] = e
                self.memo[p] = math.inf
        return self.memo[p]

    def warn_if_limited(self, name, eps_error, delta_errors, max_buckets):
        """Warn when the infeasible end of the final bracket is a refusal, not a certified miss."""
        if self.bracket is None or self.bracket[1] not in self.refused:
            return
        good, bad = self.bracket
        warnings.warn(
            f"calibration stopped at {name}={good:.6g} because the composition at {name}={bad:.6g} was refused "
            f"({self.refused[bad]}), not because it misses the target: the answer is feasible but may be far "
            f"from optimal; pass a larger delta_error (tried up to {max(delta_errors):.3g}), eps_error "
            f"({eps_error:.3g}) or max_buckets ({max_buckets})", CalibrationWarning, stacklevel=3)


def _search(ev, target, *, decreasing, guess, lower, upper, rtol, integer, name, slope=1.0):
    """Monotone search on the certified upper bound; see the module docstring.

    ``decreasing``: epsilon decreases in ``p`` (feasible set ``[p*, upper]``),
    else it increases (feasible set ``[lower, p*]``).  Returns the feasible end.
    """
    def feasible(p):
        return ev(p) <= target

    def clamp(p):
        p = min(max(p, lower), upper)
        return float(round(p)) if integer else p

    p = clamp(guess)
    # expansion until both a feasible and an infeasible point are known: each step jumps to
    # just past the root predicted by a local power law epsilon ~ p^(+-a) (a from the last
    # two points, 1 at first), at least by 1 + rtol and at most by a growing factor
    good = bad = None
    prev = None
    cap = 4.0
    while True:
        e = ev(p)
        if e <= target:
            good = p
        else:
            bad = p
        if good is not None and bad is not None:
            break
        up = (good is not None) != decreasing  # direction that leads towards the other side
        a = slope
        if prev is not None and math.isfinite(e) and math.isfinite(prev[1]) and e > 0 and prev[1] > 0 \
                and prev[0] != p and prev[1] != e:
            a = min(max(abs(math.log(e / prev[1]) / math.log(p / prev[0])), 0.25), 4.0)
        if math.isfinite(e) and e > 0:
            factor = abs(math.log(e / target)) / a + math.log1p(0.45 * rtol)
            factor = min(max(math.exp(factor), 1 + rtol), cap)
        else:
            factor = cap
        cap = min(cap * 4, 1e3)
        nxt = clamp(p * factor if up else p / factor)
        if nxt == p:
            if good is not None:  # hit the range limit: every parameter up to it is feasible
                ev.bracket = (p, None)
                return p
            why = f" (last composition failed: {ev.last_error})" if ev.last_error is not None and \
                math.isinf(e) else ""
            limit = "upper" if decreasing else "lower"
            raise ValueError(
                f"target_epsilon={target:.4g} is not attainable: the certified epsilon at the {limit} limit "
                f"{name}={p:.6g} is {e:.4g}{why}")
        prev = (p, e)
        p = nxt

    def done(g, b):
        if integer and abs(g - b) <= 1:
            return True
        hi, lo = max(g, b), min(g, b)
        return hi <= lo * (1 + rtol)

    side = 1 if bad == p else -1  # first aim at the side the expansion did not end on
    while not done(good, bad):
        lo, hi = min(good, bad), max(good, bad)
        eg, eb = ev(good), ev(bad)
        x = None
        if math.isfinite(eg) and math.isfinite(eb) and eg > 0 and eb > 0 and eg != eb:
            # log-log secant root of epsilon(p) = target
            lg, lb = math.log(good), math.log(bad)
            t = (math.log(target) - math.log(eg)) / (math.log(eb) - math.log(eg))
            x = math.exp(lg + t * (lb - lg))
        if x is None or not (lo < x < hi):
            x = math.sqrt(lo * hi)
        # aim just past the predicted root, alternately on the feasible and the infeasible side
        f = 1 + 0.45 * rtol
        x = x * f if (side > 0) == decreasing else x / f
        side = -side
        r = hi / lo
        x = min(max(x, lo * r ** 0.02), hi / r ** 0.02)
        if integer:
            x = float(round(x))
            if x <= lo or x >= hi:
                x = float(math.floor((lo + hi) / 2))
        if x in ev.memo or not (lo < x < hi):
            x = math.sqrt(lo * hi) if not integer else float(math.floor((lo + hi) / 2))
        if feasible(x):
            good = x
        else:
            bad = x
    ev.bracket = (good, bad)
    return good


def calibrate(make_mechanism: Callable[[float], Mechanism], count: int, target_epsilon: float | None = None,
              target_delta: float | None = None, bracket: tuple | None = None, *, decreasing: bool = True,
              eps_error: float | None = None, delta_error: float | None = None, rtol: float | None = None,
              guess: float | None = None, method: str = "auto", max_buckets: int = DEFAULT_MAX_BUCKETS,
              target_tpr: float | None = None, at_fpr: float | None = None, target_mu: float | None = None,
              alpha_range: tuple | None = None, rel_error: float | None = None) -> float:
    """Find the parameter of ``make_mechanism`` at which ``count`` compositions meet the target.

    Parameters
    ----------
    make_mechanism : callable
        ``p -> Mechanism`` for a parameter ``p > 0``.
    count : int
        Number of compositions.
    target_epsilon, target_delta : float
        The guarantee to meet: the certified upper bound on ``epsilon(target_delta)``
        at the returned parameter is ``<= target_epsilon``.
    bracket : (float, float), optional
        Range ``(lower, upper)`` to search; default ``(1e-6, 1e6)``, explored by
        geometric expansion from ``guess`` (so only the part near the answer is
        evaluated).
    decreasing : bool
        ``True`` if epsilon decreases as the parameter grows (a noise scale: the
        smallest feasible parameter is returned), ``False`` if it increases (the
        largest feasible parameter is returned).
    eps_error, delta_error : float, optional
        Composition errors (give ``eps_error`` or ``rel_error``, or neither: :func:`fastpld.compose`'s
        default, ``rel_error=1e-3``); ``delta_error`` default ``target_delta / 1000``.
    rtol : float, optional
        Relative width of the final bracket (default: the relative accuracy, 0.1%; 1% with ``eps_error``).
    rel_error : float, optional
        Compose with this accuracy relative to epsilon instead of ``eps_error`` (see
        :func:`fastpld.compose`; epsilon targets only).
    guess : float, optional
        Starting point (default: geometric middle of the bracket, or 1).
    method, max_buckets
        Passed to :func:`fastpld.compose`.
    target_tpr, at_fpr : float, optional
        Instead of (epsilon, delta): the certified upper bound on the best
        attack's true-positive rate at false-positive rate ``at_fpr`` (see
        :meth:`PrivacyLossDistribution.tpr`) must be ``<= target_tpr``.
    target_mu : float, optional
        Instead of (epsilon, delta): the certified Gaussian-DP mu over
        ``alpha_range`` (see :meth:`PrivacyLossDistribution.gdp_mu`) must be
        ``<= target_mu``.
    alpha_range : (float, float), optional
        Range of type-I errors for ``target_mu`` (default as in ``gdp_mu``).

    Returns
    -------
    float
        A feasible parameter within ``rtol`` of the boundary of the feasible set.

    Raises
    ------
    ValueError
        If the target cannot be met anywhere in the bracket or cannot be certified.
    """
    if not callable(make_mechanism):
        raise ValueError(f"make_mechanism must be callable, got {make_mechanism!r}")
    count = V.positive_int("count", count)
    attack = target_tpr is not None or at_fpr is not None or target_mu is not None
    if attack and rel_error is not None:
        raise ValueError("rel_error applies to epsilon targets; give eps_error for target_tpr / target_mu")
    if attack:  # an operational target (fastpld.fdp); the same search on its certified upper bound
        rtol = 0.01 if rtol is None else rtol
        from .fdp import attack_target
        te, run, tname = attack_target(count, target_epsilon, target_delta, target_tpr, at_fpr, target_mu,
                                       alpha_range, eps_error, delta_error, max_buckets, method)
    else:
        te, td = _targets(target_epsilon, target_delta)
        acc, ee, de, rtol = _accuracy(te, td, rel_error, eps_error, delta_error, rtol, method)
    rtol = V.positive_float("rtol", rtol)
    if bracket is None:
        lower, upper = 1e-6, 1e6
    else:
        if not (isinstance(bracket, (tuple, list)) and len(bracket) == 2):
            raise ValueError(f"bracket must be a (lower, upper) pair, got {bracket!r}")
        lower = V.positive_float("bracket[0]", bracket[0])
        upper = V.positive_float("bracket[1]", bracket[1])
        if not lower < upper:
            raise ValueError(f"bracket must satisfy lower < upper, got {bracket!r}")
    if guess is None:
        guess = math.sqrt(lower * upper) if bracket is not None else 1.0
    guess = V.positive_float("guess", guess)

    def make(p):
        mech = make_mechanism(p)
        if not isinstance(mech, Mechanism):
            raise ValueError(f"make_mechanism({V.show(p)}) returned {mech!r}, not a Mechanism")
        return mech

    if not attack:
        run = _upper_epsilon(count, acc, de, td, max_buckets, method)
    ev = _Evaluator(make, run)
    try:
        out = _search(ev, te, decreasing=decreasing, guess=guess, lower=lower, upper=upper,
                      rtol=rtol, integer=False, name="parameter")
    except ValueError as exc:
        if not attack:
            raise
        # (the search words its messages for epsilon)
        raise ValueError(str(exc).replace("target_epsilon", tname).replace("certified epsilon",
                                                                           f"certified {tname[7:]}")) from None
    if not attack:
        ev.warn_if_limited("parameter", ee, de, max_buckets)
    return out


# --------------------------------------------------------------------------------------
# DP-SGD (Poisson-subsampled Gaussian)
# --------------------------------------------------------------------------------------
def _ndtr(x: float) -> float:
    """The standard normal CDF (``math.erfc``: the guesses below need no scipy.special, whose import costs
    ~100 ms of a process's first calibration)."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _log_ndtr(x: float) -> float:
    """``log Phi(x)``: from ``math.erfc`` above -30 (no underflow), else the Mills ratio's asymptotic series
    (four terms: relative error ~1e-12 at -30, less below)."""
    if x > -30.0:
        return math.log(_ndtr(x))
    t = 1.0 / (x * x)
    return (-0.5 * x * x - math.log(-x) - 0.5 * math.log(2.0 * math.pi)
            + math.log1p(t * (-1.0 + t * (3.0 + t * (-15.0 + 105.0 * t)))))


def _gaussian_mu(eps, delta):
    """mu of the Gaussian mechanism with delta(eps) = delta (Balle & Wang), by bisection (a starting point of
    the searches: the answers are certified by compositions)."""
    def d(mu):
        # e^eps Phi(-eps/mu - mu/2) as one exponential of a log: e^eps alone overflows past eps ~ 709.78
        return _ndtr(-eps / mu + mu / 2) - math.exp(eps + _log_ndtr(-eps / mu - mu / 2))
    lo, hi = 1e-6, 1.0
    while d(hi) < delta and hi < 1e6:
        hi *= 2
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if d(mid) < delta:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def _clt_sigma(eps, delta, q, steps):
    """Central-limit (GDP) guess: mu = q sqrt(T (e^(1/sigma^2) - 1)) (Bu et al. 2020)."""
    mu = _gaussian_mu(eps, delta)
    x = (mu / q) ** 2 / steps
    return 1.0 / math.sqrt(math.log1p(x)) if x > 0 else 1.0


def _upper_epsilon(count, acc, delta_errors, target_delta, max_buckets, method="auto"):
    """``mechanism -> certified upper bound on epsilon(target_delta)`` after ``count`` compositions.

    ``delta_errors``: tried in turn while ``compose`` refuses the composition for its error
    budget (:func:`_default_errors`); the last refusal is raised.  ``count=None``: the argument is a
    ``(mechanism, count)`` pair.
    """

    def run(mech):
        if count is None:  # (find_steps: the count is the parameter)
            mech, k = mech
        else:
            k = count
        # (upper bounds only: random allocation's dominated losses are not built)
        mech = _upper_only(mech)
        return _compose_widening(mech, k, acc, delta_errors, max_buckets, method).epsilon(target_delta).upper

    return run


def _compose_widening(mech, count, acc, delta_errors, max_buckets, method="auto"):
    """``compose`` with the first of ``delta_errors`` whose composition is not refused for its error
    budget (the calibration's ladder, :func:`_default_errors`); the last refusal is raised.
    ``acc``: the accuracy arguments (:func:`_accuracy`)."""
    return compose_widening(lambda de: compose(mech, count, delta_error=de, method=method, max_buckets=max_buckets,
                                               **acc), delta_errors)


def find_noise_multiplier(target_epsilon: float, target_delta: float, sampling_probability: float, steps: int,
                          *, eps_error: float | None = None, delta_error: float | None = None,
                          rtol: float | None = None, neighboring: str = "add_or_remove",
                          max_buckets: int = DEFAULT_MAX_BUCKETS,
                          sampler: Callable[[float, float], Mechanism] | None = None,
                          rel_error: float | None = None) -> float:
    """Smallest noise multiplier (within ``rtol``) for DP-SGD to be (target_epsilon, target_delta)-DP.

    DP-SGD with Poisson sampling rate ``sampling_probability`` for ``steps`` steps:
    the certified upper bound on epsilon at the returned ``sigma`` is
    ``<= target_epsilon``, and ``sigma / (1 + rtol)`` was found infeasible (or is
    within the stated tolerance).  See :func:`calibrate` for the search.

    Parameters
    ----------
    target_epsilon : float
        Epsilon to meet (``> 0``).
    target_delta : float
        Delta at which epsilon is measured, in ``(0, 1)``.
    sampling_probability : float
        Poisson sampling rate ``q`` in ``(0, 1]``.
    steps : int
        Number of DP-SGD steps (compositions).
    eps_error, delta_error : float, optional
        Composition errors (give ``eps_error`` or ``rel_error``, or neither: :func:`fastpld.compose`'s
        default, ``rel_error=1e-3``); ``delta_error`` default ``target_delta / 1000`` (retried 10x and
        100x larger, below ``target_delta / 10``, when :func:`fastpld.compose` refuses it).
    rtol : float, optional
        Relative width of the final bracket (default: the relative accuracy, 0.1%; 1% with ``eps_error``).
    neighboring : {"add_or_remove", "remove", "add"}
        Neighbouring directions accounted, as in :class:`fastpld.PoissonSubsampledGaussian`.
    max_buckets : int
        Passed to :func:`fastpld.compose`.
    rel_error : float, optional
        Compose with this accuracy relative to epsilon instead of ``eps_error`` (see
        :func:`fastpld.compose`; the dominance certificate): with ``rel_error=1e-3`` (the default) the
        answer is within about 0.1% of the smallest feasible ``sigma``, never below it.
    sampler : callable, optional
        ``(sigma, sampling_probability) -> Mechanism``: the step for the batches actually drawn
        (e.g. ``lambda s, q: SubsampledWithoutReplacement(Gaussian(s), b, n)``), used instead of
        ``PoissonSubsampledGaussian`` (``neighboring`` then does not apply);
        ``sampling_probability`` still gives the first guess.

    Returns
    -------
    float
        The noise multiplier ``sigma``; the certified upper bound on ``epsilon(target_delta)`` after
        ``steps`` steps at ``sigma`` is ``<= target_epsilon``.

    Raises
    ------
    ValueError
        If an argument is invalid (naming it), or the target cannot be certified for any noise
        multiplier up to 1e6.

    Warns
    -----
    CalibrationWarning
        If the search ended against a limit (a refused composition), so that the answer, while
        feasible, may be further than ``rtol`` from the smallest feasible ``sigma``.

    Examples
    --------
    >>> import fastpld
    >>> sigma = fastpld.find_noise_multiplier(3.0, 1e-5, sampling_probability=0.01, steps=1000)
    >>> pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(sigma, 0.01), 1000, delta_error=1e-8)
    >>> pld.epsilon(1e-5).upper <= 3.0
    True
    """
    te, td = _targets(target_epsilon, target_delta)
    q = V.probability("sampling_probability", sampling_probability, open_low=True)
    steps = V.positive_int("steps", steps)
    acc, ee, de, rtol = _accuracy(te, td, rel_error, eps_error, delta_error, rtol)

    if sampler is not None and not callable(sampler):
        raise ValueError(f"sampler must be callable (sigma, sampling_probability) -> Mechanism, got {sampler!r}")

    def make(s):
        if sampler is not None:
            mech = sampler(s, q)
            if not isinstance(mech, Mechanism):
                raise ValueError(f"sampler({s!r}, {q!r}) returned {mech!r}, not a Mechanism")
            return mech
        return PoissonSubsampledGaussian(sigma=s, sampling_probability=q, neighboring=neighboring)

    run = _upper_epsilon(steps, acc, de, td, max_buckets)

    guess = _clt_sigma(max(te - ee, te / 2), td, q, steps)
    # local exponent of epsilon ~ sigma^(-a) in the same model, for the first jump
    g2 = _clt_sigma(max(te - ee, te / 2) * 1.05, td, q, steps)
    slope = min(max(math.log(1.05) / abs(math.log(guess / g2)), 0.25), 4.0) if g2 != guess else 1.0
    make(guess)  # validates neighboring
    ev = _Evaluator(make, run)
    out = _search(ev, te, decreasing=True, guess=guess, lower=1e-3, upper=1e6, rtol=rtol,
                  integer=False, name="sigma", slope=slope)
    ev.warn_if_limited("sigma", ee, de, max_buckets)
    return out


def find_sampling_probability(target_epsilon: float, target_delta: float, noise_multiplier: float, steps: int,
                              *, eps_error: float | None = None, delta_error: float | None = None,
                              rtol: float | None = None, neighboring: str = "add_or_remove",
                              max_buckets: int = DEFAULT_MAX_BUCKETS, rel_error: float | None = None) -> float:
    """Largest Poisson sampling rate (within ``rtol``) meeting the target for ``steps`` DP-SGD steps.

    Parameters
    ----------
    target_epsilon : float
        Epsilon to meet (``> 0``).
    target_delta : float
        Delta at which epsilon is measured, in ``(0, 1)``.
    noise_multiplier : float
        Noise multiplier ``sigma > 0`` of each step.
    steps : int
        Number of DP-SGD steps (compositions).
    eps_error, delta_error : float, optional
        Composition errors (give ``eps_error`` or ``rel_error``, or neither: :func:`fastpld.compose`'s
        default, ``rel_error=1e-3``); ``delta_error`` default ``target_delta / 1000`` (retried 10x and
        100x larger, below ``target_delta / 10``, when :func:`fastpld.compose` refuses it).
    rtol : float, optional
        Relative width of the final bracket (default: the relative accuracy, 0.1%; 1% with ``eps_error``).
    rel_error : float, optional
        Compose with this accuracy relative to epsilon instead of ``eps_error`` (see :func:`fastpld.compose`).
    neighboring : {"add_or_remove", "remove", "add"}
        Neighbouring directions accounted, as in :class:`fastpld.PoissonSubsampledGaussian`.
    max_buckets : int
        Passed to :func:`fastpld.compose`.

    Returns
    -------
    float
        The sampling rate ``q`` (``1.0`` if even full-batch training meets the target); the certified
        upper bound on ``epsilon(target_delta)`` at ``q`` is ``<= target_epsilon``.

    Raises
    ------
    ValueError
        If an argument is invalid (naming it), or no sampling rate down to 1e-9 meets the target.

    Warns
    -----
    CalibrationWarning
        If the search ended against a limit (a refused composition).

    Examples
    --------
    >>> import fastpld
    >>> q = fastpld.find_sampling_probability(3.0, 1e-5, noise_multiplier=1.0, steps=1000)
    >>> 0 < q <= 1
    True
    """
    te, td = _targets(target_epsilon, target_delta)
    sigma = V.positive_float("noise_multiplier", noise_multiplier)
    steps = V.positive_int("steps", steps)
    acc, ee, de, rtol = _accuracy(te, td, rel_error, eps_error, delta_error, rtol)

    def make(q):
        return PoissonSubsampledGaussian(sigma=sigma, sampling_probability=q, neighboring=neighboring)

    run = _upper_epsilon(steps, acc, de, td, max_buckets)

    # GDP guess: q = mu / sqrt(T (e^(1/sigma^2) - 1))
    mu = _gaussian_mu(max(te - ee, te / 2), td)
    guess = min(1.0, mu / math.sqrt(steps * math.expm1(min(1.0 / sigma**2, 700.0))))
    make(guess)  # validates neighboring
    ev = _Evaluator(make, run)
    out = _search(ev, te, decreasing=False, guess=guess, lower=1e-9, upper=1.0, rtol=rtol,
                  integer=False, name="sampling_probability")
    ev.warn_if_limited("sampling_probability", ee, de, max_buckets)
    return out


def find_steps(target_epsilon: float, target_delta: float, mechanism: Mechanism, *,
               eps_error: float | None = None, delta_error: float | None = None, rtol: float | None = None,
               max_steps: int = 10**9, max_buckets: int = DEFAULT_MAX_BUCKETS,
               rel_error: float | None = None) -> int:
    """Largest number of compositions of ``mechanism`` (within ``rtol``, or exact when small) meeting the target.

    Parameters
    ----------
    target_epsilon : float
        Epsilon to meet (``> 0``).
    target_delta : float
        Delta at which epsilon is measured, in ``(0, 1)``.
    mechanism : Mechanism
        The mechanism used once per step.
    eps_error, delta_error : float, optional
        Composition errors (give ``eps_error`` or ``rel_error``, or neither: :func:`fastpld.compose`'s
        default, ``rel_error=1e-3``); ``delta_error`` default ``target_delta / 1000`` (retried 10x and
        100x larger, below ``target_delta / 10``, when :func:`fastpld.compose` refuses it).
    rtol : float, optional
        Relative width of the final bracket (default: the relative accuracy, 0.1%; 1% with ``eps_error``).
    rel_error : float, optional
        Compose with this accuracy relative to epsilon instead of ``eps_error`` (see :func:`fastpld.compose`).
    max_steps : int
        Largest count searched (default 10**9).
    max_buckets : int
        Passed to :func:`fastpld.compose`.

    Returns
    -------
    int
        The number of steps ``k`` (``max_steps`` if that many still meet the target); the certified
        upper bound on ``epsilon(target_delta)`` of ``k`` compositions is ``<= target_epsilon``.

    Raises
    ------
    ValueError
        If an argument is invalid (naming it), or a single use already exceeds the target.

    Warns
    -----
    CalibrationWarning
        If the search ended against a limit (a refused composition).

    Examples
    --------
    >>> import fastpld
    >>> k = fastpld.find_steps(1.0, 1e-5, fastpld.Gaussian(20.0))
    >>> fastpld.compose(fastpld.Gaussian(20.0), k, delta_error=1e-8).epsilon(1e-5).upper <= 1.0
    True
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a fastpld Mechanism, got {mechanism!r}")
    te, td = _targets(target_epsilon, target_delta)
    max_steps = V.positive_int("max_steps", max_steps)
    acc, ee, de, rtol = _accuracy(te, td, rel_error, eps_error, delta_error, rtol)

    upper = _upper_epsilon(None, acc, de, td, max_buckets)

    def run(k):
        return upper((mechanism, int(k)))

    ev = _Evaluator(lambda k: k, run)
    if not ev(1.0) <= te:
        why = f" ({ev.last_error})" if ev.last_error is not None else ""
        raise ValueError(f"target_epsilon={te:.4g} is not attainable: one use of {mechanism!r} already has a "
                         f"certified epsilon of {ev(1.0):.4g}{why}")
    out = int(_search(ev, te, decreasing=False, guess=1.0, lower=1.0, upper=float(max_steps), rtol=rtol,
                      integer=True, name="steps"))
    ev.warn_if_limited("steps", ee, de, max_buckets)
    return out
