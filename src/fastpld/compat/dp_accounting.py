"""A ``dp_accounting.PrivacyAccountant`` backed by fastpld.

Replace ``dp_accounting.pld.PLDAccountant`` by :class:`FastPLDAccountant`::

    from fastpld.compat.dp_accounting import FastPLDAccountant
    import dp_accounting

    acc = FastPLDAccountant()
    event = dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0))
    acc.compose(event, 10_000)
    acc.get_epsilon(1e-5)          # certified upper bound (a float)
    acc.get_epsilon_bounds(1e-5)   # Bounds(lower, estimate, upper)

Importing this module imports ``dp_accounting`` (install ``fastpld[compat]``).

Event mapping (``noise_multiplier`` is the noise scale divided by the
sensitivity, as in ``dp_accounting``; "replace" means ``REPLACE_ONE``):

* ``GaussianDpEvent(s)``: ``Gaussian(s)``; replace: ``Gaussian(s, sensitivity=2)``.
* ``LaplaceDpEvent(b)``: ``Laplace(b)``; replace: ``Laplace(b, sensitivity=2)``.
* ``PoissonSampledDpEvent(q, GaussianDpEvent(s))``: ``PoissonSubsampledGaussian(s, q)``
  (both directions, the maximum taken); replace: unsupported for ``0 < q < 1``.
* ``PoissonSampledDpEvent(q, LaplaceDpEvent(b))``: ``PoissonSubsampledLaplace(b, q)``;
  replace: unsupported for ``0 < q < 1``.
* ``SampledWithoutReplacementDpEvent(n, b, GaussianDpEvent(s))`` (or ``LaplaceDpEvent``):
  ``SubsampledWithoutReplacement(Gaussian(s), b, n, neighboring="add_or_remove")``;
  replace: ``neighboring="replace_one"`` (the base's replace-one shift is 2, as for
  ``GaussianDpEvent``; ``dp_accounting``'s RDP accountant takes ``s`` relative to the
  replace-one sensitivity instead, see ``docs/samplers.md``).
* ``TruncatedSubsampledGaussianDpEvent(n, q, B, s)``:
  ``TruncatedPoissonSubsampled(Gaussian(s), q, n, B)``; replace: unsupported.
* ``RandomizedResponseDpEvent(p, k)``: unsupported under ``ADD_OR_REMOVE_ONE``
  (as in ``dp_accounting``); replace: ``RandomizedResponse(log(1 + k (1 - p) / p), k)``.
* :class:`EpsilonDeltaDpEvent` ``(eps, delta)``: ``ApproxDP(eps, delta)`` (``PureDP(eps)``
  if ``delta == 0``), under either relation.
* ``SelfComposedDpEvent`` and ``ComposedDpEvent`` are recursed into; ``NoOpDpEvent``
  does nothing; ``NonPrivateDpEvent`` makes epsilon infinite and delta 1.

A zero noise multiplier (or ``p = 0`` for randomized response) is non-private,
a zero sampling probability (or one bucket) is a no-op, as in ``dp_accounting``;
``p = 1`` and ``EpsilonDeltaDpEvent(0, 0)`` are no-ops too (their output does not
depend on the input).  Every other event is reported unsupported
(``supports(event)`` is ``False``; ``compose`` raises
``dp_accounting.UnsupportedEventError``); ``REPLACE_SPECIAL`` is refused when the
accountant is constructed.  The Poisson-subsampled mechanisms
under ``REPLACE_ONE`` (a mixture against a mixture) are not implemented by the
fastpld core, so they are refused rather than approximated.
"""
from __future__ import annotations

import math
from typing import Optional

import attr
from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant

from .. import _validation as V
from ._accuracy import accuracy, compose
from ..composition.api import compose_for_delta
from ..curve import Bounds, PrivacyLossDistribution
from ..samplers import SubsampledWithoutReplacement, TruncatedPoissonSubsampled
from ..mechanisms import (
    ApproxDP,
    Gaussian,
    Laplace,
    Mechanism,
    PoissonSubsampledGaussian,
    PoissonSubsampledLaplace,
    PureDP,
    RandomizedResponse,
)

__all__ = ["FastPLDAccountant", "EpsilonDeltaDpEvent", "randomized_response_epsilon"]


_CompositionErrorDetails = PrivacyAccountant.CompositionErrorDetails
_NON_PRIVATE = object()  # marker: the event releases its input without noise
_NO_OP = object()


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EpsilonDeltaDpEvent(dp_event.DpEvent):
    """A mechanism known only to be ``(epsilon, delta)``-DP.

    ``dp_accounting`` 0.6 has no such event; this one composes in
    :class:`FastPLDAccountant` (and is unsupported by ``dp_accounting``'s own
    accountants).  The guarantee is taken to hold for the accountant's
    neighbouring relation.

    Parameters
    ----------
    epsilon : float
        ``epsilon >= 0``.
    delta : float
        ``0 <= delta <= 1``; ``delta = 0`` is pure DP, ``delta = 1`` non-private.
    """

    epsilon: float
    delta: float = 0.0


def randomized_response_epsilon(noise_parameter: float, num_buckets: int) -> float:
    """Pure-DP epsilon of ``dp_accounting``'s randomized response.

    ``RandomizedResponseDpEvent(p, k)`` outputs the true bucket with probability
    ``1 - p + p / k`` and each other bucket with probability ``p / k``, which is
    fastpld's ``RandomizedResponse(epsilon, k)`` with
    ``e^epsilon = (1 - p + p / k) / (p / k) = 1 + k (1 - p) / p``.

    Parameters
    ----------
    noise_parameter : float
        ``p`` in ``(0, 1]``.
    num_buckets : int
        ``k >= 2``.

    Returns
    -------
    float
        ``log1p(k (1 - p) / p)`` (0 for ``p = 1``).
    """
    p = V.probability("noise_parameter", noise_parameter, open_low=True)
    k = V.positive_int("num_buckets", num_buckets)
    if k < 2:
        raise ValueError(f"num_buckets must be >= 2, got {num_buckets!r}")
    return math.log1p(k * (1.0 - p) / p)


def _epsilon_delta_types():
    # A future dp_accounting may ship its own (epsilon, delta) event; accept it too.
    own = getattr(dp_event, "EpsilonDeltaDpEvent", None)
    return (EpsilonDeltaDpEvent,) if own is None else (EpsilonDeltaDpEvent, own)


class FastPLDAccountant(PrivacyAccountant):
    """Privacy accountant with certified bounds, a drop-in for ``PLDAccountant``.

    Events are recorded when composed; the privacy loss distribution is
    composed (heterogeneously, identical mechanisms merged) on the first query
    after a change and reused until the next :meth:`compose`.

    Parameters
    ----------
    neighboring_relation : dp_accounting.NeighboringRelation, default ADD_OR_REMOVE_ONE
        ``ADD_OR_REMOVE_ONE`` or ``REPLACE_ONE`` (see the module docstring for
        what each supports).
    eps_error : float, optional
        Certified epsilon error of the composition: the returned upper bound is
        at most about ``2 * eps_error`` above the true epsilon.  By default (neither
        ``eps_error`` nor ``rel_error``): ``rel_error=1e-3``, and ``eps_error=0.01``
        for a composition the dominance certificate refuses.
    delta_error : float, optional
        Certified delta error.  By default 1e-10, and for :meth:`get_epsilon` at a ``target_delta``
        below 1e-7 that delta over 1000 (a composition of its own): the delta charges (at most
        ``delta_error``) then keep the accuracy asked at that delta.
    method : str, default "auto"
        Composition method of :func:`fastpld.compose`.
    rel_error : float, optional
        Instead of ``eps_error``: the accuracy relative to epsilon (see :func:`fastpld.compose`;
        ``1e-3``: the certified interval within 0.1% of epsilon, by the dominance certificate).

    Raises
    ------
    ValueError
        If ``neighboring_relation`` is ``REPLACE_SPECIAL`` or the error budgets
        are invalid.
    """

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE,
                 eps_error: Optional[float] = None, delta_error: Optional[float] = None, method: str = "auto", *,
                 rel_error: Optional[float] = None):
        if neighboring_relation not in (NeighboringRelation.ADD_OR_REMOVE_ONE, NeighboringRelation.REPLACE_ONE):
            raise ValueError(
                f"neighboring_relation must be ADD_OR_REMOVE_ONE or REPLACE_ONE, got {neighboring_relation!r}")
        super().__init__(neighboring_relation)
        # by default: 0.1% of epsilon (the dominance certificate), eps_error 0.01 where it refuses
        self._fallback, self._rel_error, self._eps_error = accuracy(eps_error, rel_error)
        self._delta_error = None if delta_error is None else V.delta_error(delta_error)
        self._method = method
        self._counts: dict[Mechanism, int] = {}
        self._non_private = False
        self._pld: Optional[PrivacyLossDistribution] = None
        self._small: dict = {}  # delta_error -> the composition get_epsilon reads at deltas below 1e-7 (by default)

    # ---- event translation ----------------------------------------------------------
    def _translate(self, event) -> tuple[object, Optional[_CompositionErrorDetails]]:
        """Map a leaf event to a fastpld mechanism, ``_NO_OP``, ``_NON_PRIVATE`` or an error."""
        replace = self.neighboring_relation is NeighboringRelation.REPLACE_ONE
        sens = 2.0 if replace else 1.0
        if isinstance(event, dp_event.GaussianDpEvent):
            s = V.nonnegative_float("noise_multiplier", event.noise_multiplier)
            return (_NON_PRIVATE if s == 0 else Gaussian(s, sensitivity=sens)), None
        if isinstance(event, dp_event.LaplaceDpEvent):
            b = V.nonnegative_float("noise_multiplier", event.noise_multiplier)
            return (_NON_PRIVATE if b == 0 else Laplace(b, sensitivity=sens)), None
        if isinstance(event, dp_event.PoissonSampledDpEvent):
            q = V.probability("sampling_probability", event.sampling_probability)
            inner = event.event
            if not isinstance(inner, (dp_event.GaussianDpEvent, dp_event.LaplaceDpEvent)):
                return None, _CompositionErrorDetails(
                    event, f"Subevent of PoissonSampledDpEvent must be GaussianDpEvent or LaplaceDpEvent, found {inner}.")
            if q == 0:
                return _NO_OP, None
            if q == 1:
                return self._translate(inner)
            if replace:
                return None, _CompositionErrorDetails(
                    event, "PoissonSampledDpEvent with 0 < sampling_probability < 1 is supported only for "
                           "ADD_OR_REMOVE_ONE.")
            s = V.nonnegative_float("noise_multiplier", inner.noise_multiplier)
            if s == 0:
                return _NON_PRIVATE, None
            cls = PoissonSubsampledGaussian if isinstance(inner, dp_event.GaussianDpEvent) else PoissonSubsampledLaplace
            return cls(s, q), None
        sampled = self._translate_sampler(event, replace)
        if sampled is not None:
            return sampled
        if isinstance(event, dp_event.RandomizedResponseDpEvent):
            if not replace:
                return None, _CompositionErrorDetails(
                    event, "neighboring_relation must be REPLACE_ONE for RandomizedResponseDpEvent, found "
                           f"{self.neighboring_relation}.")
            k = V.positive_int("num_buckets", event.num_buckets)
            p = V.probability("noise_parameter", event.noise_parameter)
            if k == 1 or p == 1:  # the output does not depend on the input
                return _NO_OP, None
            if p == 0:
                return _NON_PRIVATE, None
            return RandomizedResponse(randomized_response_epsilon(p, k), k), None
        if isinstance(event, _epsilon_delta_types()):
            e = V.nonnegative_float("epsilon", event.epsilon)
            d = V.probability("delta", event.delta)
            if d == 1:
                return _NON_PRIVATE, None
            if e == 0 and d == 0:
                return _NO_OP, None
            return (PureDP(e) if d == 0 else ApproxDP(e, d)), None
        return None, _CompositionErrorDetails(event, "Unsupported event.")

    def _translate_sampler(self, event, replace):
        """Fixed-size and truncated Poisson batches (``None`` for other events)."""
        if isinstance(event, dp_event.SampledWithoutReplacementDpEvent):
            n = V.positive_int("source_dataset_size", event.source_dataset_size)
            b = event.sample_size
            if b == 0:
                return _NO_OP, None
            b = V.positive_int("sample_size", b)
            inner = event.event
            if not isinstance(inner, (dp_event.GaussianDpEvent, dp_event.LaplaceDpEvent)):
                return None, _CompositionErrorDetails(
                    event, "Subevent of SampledWithoutReplacementDpEvent must be GaussianDpEvent or LaplaceDpEvent, "
                           f"found {inner}.")
            s = V.nonnegative_float("noise_multiplier", inner.noise_multiplier)
            if s == 0:
                return _NON_PRIVATE, None
            base = Gaussian(s) if isinstance(inner, dp_event.GaussianDpEvent) else Laplace(s)
            try:
                return SubsampledWithoutReplacement(base, b, n, "replace_one" if replace else "add_or_remove"), None
            except ValueError as e:
                return None, _CompositionErrorDetails(event, str(e))
        if isinstance(event, dp_event.TruncatedSubsampledGaussianDpEvent):
            q = V.probability("sampling_probability", event.sampling_probability)
            if q == 0 or event.truncated_batch_size == 0 or event.dataset_size == 0:
                return _NO_OP, None
            if replace:
                return None, _CompositionErrorDetails(
                    event, "TruncatedSubsampledGaussianDpEvent is supported only for ADD_OR_REMOVE_ONE.")
            s = V.nonnegative_float("noise_multiplier", event.noise_multiplier)
            if s == 0:
                return _NON_PRIVATE, None
            n = V.positive_int("dataset_size", event.dataset_size)
            cap = V.positive_int("truncated_batch_size", event.truncated_batch_size)
            return TruncatedPoissonSubsampled(Gaussian(s), q, n, cap), None
        return None

    def _maybe_compose(self, event: dp_event.DpEvent, count: int,
                       do_compose: bool) -> Optional[_CompositionErrorDetails]:
        if isinstance(event, dp_event.NoOpDpEvent):
            return None
        if isinstance(event, dp_event.NonPrivateDpEvent):
            if do_compose and count > 0:
                self._non_private = True
            return None
        if isinstance(event, dp_event.SelfComposedDpEvent):
            return self._maybe_compose(event.event, event.count * count, do_compose)
        if isinstance(event, dp_event.ComposedDpEvent):
            for e in event.events:
                err = self._maybe_compose(e, count, do_compose)
                if err is not None:
                    return err
            return None
        mech, err = self._translate(event)
        if err is not None:
            return err
        if do_compose and count > 0:
            if mech is _NON_PRIVATE:
                self._non_private = True
            elif mech is not _NO_OP:
                self._counts[mech] = self._counts.get(mech, 0) + count
                self._pld = None
                self._small.clear()
        return None

    # ---- queries --------------------------------------------------------------------
    def get_pld(self) -> Optional[PrivacyLossDistribution]:
        """The composed :class:`fastpld.PrivacyLossDistribution` (``None`` if nothing was composed).

        Returns
        -------
        PrivacyLossDistribution or None
            ``None`` when no private mechanism was composed (or a non-private one was).
        """
        if self._non_private or not self._counts:
            return None
        if self._pld is None:
            self._pld = compose(list(self._counts.items()), self._rel_error, self._eps_error, self._fallback,
                                delta_error=V.delta_error_or_default(self._delta_error), method=self._method)
        return self._pld

    def _pld_at(self, delta: float) -> Optional[PrivacyLossDistribution]:
        """:meth:`get_pld`, or where ``delta_error`` is the default and ``delta`` is below 1000 times it, the
        composition at ``delta / 1000`` (ten and a hundred times it where that is refused for its budget or wider than
        asked there: :func:`fastpld.composition.api.compose_for_delta`)."""
        pld = self.get_pld()
        base = V.delta_error_or_default(self._delta_error)

        def at(de):
            if de == base:
                return pld
            if de not in self._small:
                if len(self._small) >= 4:  # (a few small deltas asked in turn: the oldest out)
                    self._small.pop(next(iter(self._small)))
                self._small[de] = compose(list(self._counts.items()), self._rel_error, self._eps_error,
                                          self._fallback, delta_error=de, method=self._method)
            return self._small[de]

        return pld if pld is None else compose_for_delta(at, delta, self._delta_error, self._rel_error, self._eps_error)

    def get_epsilon_bounds(self, target_delta: float) -> Bounds:
        """Certified bounds on epsilon at ``target_delta``.

        Parameters
        ----------
        target_delta : float
            In ``(0, 1]``.

        Returns
        -------
        Bounds
            ``(lower, estimate, upper)`` floats; all ``inf`` after a
            ``NonPrivateDpEvent``, all 0 when nothing private was composed.
        """
        d = V.probability("target_delta", target_delta, open_low=True)
        if self._non_private:
            return Bounds(math.inf, math.inf, math.inf)
        pld = self._pld_at(d)
        if pld is None:
            return Bounds(0.0, 0.0, 0.0)
        return pld.epsilon(d)

    def get_delta_bounds(self, target_epsilon: float) -> Bounds:
        """Certified bounds on delta at ``target_epsilon``.

        Parameters
        ----------
        target_epsilon : float
            ``>= 0`` and finite.

        Returns
        -------
        Bounds
            ``(lower, estimate, upper)`` floats; all 1 after a
            ``NonPrivateDpEvent``, all 0 when nothing private was composed.
        """
        e = V.nonnegative_float("target_epsilon", target_epsilon)
        if self._non_private:
            return Bounds(1.0, 1.0, 1.0)
        pld = self.get_pld()
        if pld is None:
            return Bounds(0.0, 0.0, 0.0)
        return pld.delta(e)

    def get_epsilon(self, target_delta: float) -> float:
        """Certified upper bound on epsilon at ``target_delta`` (see :meth:`get_epsilon_bounds`).

        Parameters
        ----------
        target_delta : float
            In ``(0, 1]``.

        Returns
        -------
        float
            The upper bound; ``inf`` after a ``NonPrivateDpEvent``.
        """
        return float(self.get_epsilon_bounds(target_delta).upper)

    def get_delta(self, target_epsilon: float) -> float:
        """Certified upper bound on delta at ``target_epsilon`` (see :meth:`get_delta_bounds`).

        Parameters
        ----------
        target_epsilon : float
            ``>= 0``.

        Returns
        -------
        float
            The upper bound; 1 after a ``NonPrivateDpEvent``.
        """
        return float(self.get_delta_bounds(target_epsilon).upper)


    # ---- attack-based answers (fastpld.fdp) ---------------------------------------------
    # dp_accounting 0.6's PLD accountant has no true-positive-rate query; these follow the name later
    # dp_accounting releases use (get_true_positive_rates) and add the certified bounds.
    def get_tpr_bounds(self, fpr) -> Bounds:
        """Certified bounds on the best membership-inference attack's TPR at false-positive rate(s) ``fpr``.

        Parameters
        ----------
        fpr : float or array_like
            In ``[0, 1]``.

        Returns
        -------
        Bounds
            Floats or arrays shaped like ``fpr``; TPR 1 after a
            ``NonPrivateDpEvent``, TPR = FPR when nothing private was composed.
        """
        import numpy as np

        a = V.query_array("fpr", fpr, lo=0.0, hi=1.0)
        if self._non_private or self.get_pld() is None:
            t = np.ones(a.shape) if self._non_private else a.copy()
            t = float(t) if np.ndim(fpr) == 0 else t
            return Bounds(t, t, t)
        return self.get_pld().tpr(fpr)

    def get_true_positive_rates(self, fprs) -> "np.ndarray":
        """Certified upper bounds on the attack TPR at each false-positive rate in ``fprs`` (an array)."""
        import numpy as np

        return np.atleast_1d(np.asarray(self.get_tpr_bounds(np.atleast_1d(np.asarray(fprs, dtype=float))).upper))

    def get_gdp_mu(self, alpha_range: Optional[tuple] = None):
        """Certified Gaussian-DP mu as a :class:`fastpld.fdp.GDPResult` (``None`` if nothing private was composed).

        Raises ``ValueError`` after a ``NonPrivateDpEvent`` (no finite mu).
        """
        if self._non_private:
            raise ValueError("a NonPrivateDpEvent was composed: no finite Gaussian-DP mu exists")
        pld = self.get_pld()
        return None if pld is None else pld.gdp_mu(alpha_range)
