"""An Opacus accountant backed by fastpld, registered as ``"fastpld"``.

Importing this module imports ``opacus`` (and so ``torch``) and registers
:class:`FastPLDAccountant` in Opacus's accountant registry, after which::

    import fastpld.compat.opacus  # registers "fastpld"
    from opacus import PrivacyEngine
    from opacus.accountants.utils import get_noise_multiplier

    engine = PrivacyEngine(accountant="fastpld")
    sigma = get_noise_multiplier(target_epsilon=3.0, target_delta=1e-5, sample_rate=0.01,
                                 steps=10_000, accountant="fastpld")

Opacus has no plug-in discovery, so the import above is required; it is
idempotent.  Each ``(noise_multiplier, sample_rate)`` segment of ``history`` is
one ``PoissonSubsampledGaussian(noise_multiplier, sample_rate)`` (both
neighbouring directions, the maximum taken: add/remove adjacency) composed
``steps`` times; the segments are composed heterogeneously.  ``get_epsilon``
returns the certified upper bound, like Opacus's ``PRVAccountant``.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from opacus.accountants import IAccountant, register_accountant

from .. import _validation as V
from ._accuracy import accuracy, compose
from ..curve import Bounds, PrivacyLossDistribution
from ..allocation import RandomAllocation
from ..mechanisms import Mechanism, PoissonSubsampledGaussian

__all__ = ["FastPLDAccountant", "register", "MECHANISM"]

#: Name under which the accountant is registered in Opacus.
MECHANISM = "fastpld"


class FastPLDAccountant(IAccountant):
    """Opacus ``IAccountant`` with certified bounds.

    Parameters
    ----------
    eps_error : float, optional
        Certified epsilon error of the composition (Opacus's ``PRVAccountant``
        uses 0.01); the upper bound is at most about ``2 * eps_error``
        above the true epsilon.  By default (neither ``eps_error`` nor ``rel_error``):
        ``rel_error=1e-3``, and ``eps_error=0.01`` for a composition the dominance
        certificate refuses.
    delta_error : float, optional
        Certified delta error; default ``delta / 1000`` at each query (as
        Opacus's ``PRVAccountant``).
    rel_error : float, optional
        Instead of ``eps_error``: the accuracy relative to epsilon (see :func:`fastpld.compose`;
        ``1e-3``: the certified interval within 0.1% of epsilon, by the dominance certificate).
    sampler : callable, optional
        ``(noise_multiplier, sample_rate) -> Mechanism``: the mechanism of one step for the
        batches actually drawn, e.g. fixed-size batches of ``b`` from ``n`` records,
        ``lambda s, q: fastpld.SubsampledWithoutReplacement(fastpld.Gaussian(s), b, n)``.
        Default: Poisson sampling, ``PoissonSubsampledGaussian(noise_multiplier, sample_rate)``.
        A :class:`fastpld.RandomAllocation` (shuffling into epochs: each record in exactly one step
        of an epoch), e.g. ``lambda s, q: fastpld.RandomAllocation(fastpld.Gaussian(s), round(1 / q))``,
        is one mechanism per ``num_steps`` steps: the steps recorded with it are certified as whole
        epochs, the upper bound for the epochs begun (a partial epoch releases a part of what the
        whole one does) and the lower bound for the epochs completed.

    Attributes
    ----------
    history : list of tuple
        ``(noise_multiplier, sample_rate, num_steps)`` segments, Opacus's format.
        It may be assigned directly (``get_noise_multiplier`` does).
    """

    def __init__(self, eps_error: Optional[float] = None, delta_error: Optional[float] = None,
                 sampler: Optional[Callable[[float, float], Mechanism]] = None, *, rel_error: Optional[float] = None):
        super().__init__()
        if sampler is not None and not callable(sampler):
            raise ValueError(f"sampler must be callable (noise_multiplier, sample_rate) -> Mechanism, got {sampler!r}")
        self.sampler = sampler
        # by default: 0.1% of epsilon (the dominance certificate), eps_error 0.01 where it refuses
        self._fallback, self.rel_error, self.eps_error = accuracy(eps_error, rel_error)
        self.delta_error = None if delta_error is None else V.delta_error(delta_error)
        self._cache: dict = {}

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Record one optimisation step.

        Parameters
        ----------
        noise_multiplier : float
            Noise standard deviation divided by the clipping norm (>= 0).
        sample_rate : float
            Poisson sampling rate in ``[0, 1]``.
        """
        V.nonnegative_float("noise_multiplier", noise_multiplier)
        V.probability("sample_rate", sample_rate)
        if self.history and self.history[-1][0] == noise_multiplier and self.history[-1][1] == sample_rate:
            s, q, n = self.history[-1]
            self.history[-1] = (s, q, n + 1)
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def _events(self, side: str = "upper"):
        """Mechanisms and counts of ``history``; ``None`` if a step was non-private.  A mechanism that
        covers several steps (:class:`fastpld.RandomAllocation`, one per epoch) counts the epochs
        begun (``side="upper"``) or completed (``"lower"``) by its steps."""
        steps: dict = {}
        for i, seg in enumerate(self.history):
            if len(seg) != 3:
                raise ValueError(f"history[{i}] must be (noise_multiplier, sample_rate, num_steps), got {seg!r}")
            s, q, n = seg
            s = V.nonnegative_float(f"history[{i}] noise_multiplier", s)
            q = V.probability(f"history[{i}] sample_rate", q)
            n = 0 if n == 0 else V.positive_int(f"history[{i}] num_steps", n)
            if n == 0 or q == 0:
                continue
            if s == 0:
                return None
            mech = PoissonSubsampledGaussian(s, q) if self.sampler is None else self.sampler(s, q)
            if not isinstance(mech, Mechanism):
                raise ValueError(f"sampler({s!r}, {q!r}) returned {mech!r}, not a fastpld Mechanism")
            steps[mech] = steps.get(mech, 0) + n
        counts = []
        for mech, n in steps.items():
            per = mech.num_steps if isinstance(mech, RandomAllocation) else 1
            c = -(-n // per) if side == "upper" else n // per
            if c:
                counts.append((mech, c))
        return counts

    def get_pld(self, delta_error: float, eps_error: Optional[float] = None,
                side: str = "upper") -> Optional[PrivacyLossDistribution]:
        """The composed privacy loss distribution of ``history`` (cached).

        Parameters
        ----------
        delta_error : float
            Certified delta error of the composition.
        eps_error : float, optional
            Certified epsilon error (default: the accountant's ``eps_error``).
        side : {"upper", "lower"}
            For a per-epoch sampler (see ``sampler``): the epochs begun (the composition whose upper
            bounds hold) or completed (whose lower bounds hold); the same for per-step samplers.

        Returns
        -------
        fastpld.PrivacyLossDistribution or None
            ``None`` if no private step was taken.
        """
        if side not in ("upper", "lower"):
            raise ValueError(f"side must be 'upper' or 'lower', got {side!r}")
        return self._pld(self._events(side), delta_error, eps_error)

    def _pld(self, events, delta_error: float, eps_error: Optional[float]) -> Optional[PrivacyLossDistribution]:
        """:meth:`get_pld` of ``events`` (of :meth:`_events`)."""
        default = self._fallback and eps_error is None  # (an eps_error given here overrides)
        rel = self.rel_error if eps_error is None else None
        eps_error = self.eps_error if eps_error is None else V.eps_error(eps_error)
        if not events:
            return None
        key = (tuple(events), rel, eps_error, delta_error)
        pld = self._cache.get(key)
        if pld is None:
            pld = compose(events, rel, eps_error, default, delta_error=delta_error)
            # keep the last two (the upper and lower compositions of a per-epoch sampler): histories
            # grow step by step
            self._cache = {**dict(list(self._cache.items())[-1:]), key: pld}
        return pld

    def get_epsilon_bounds(self, delta: float, *, eps_error: Optional[float] = None,
                           delta_error: Optional[float] = None) -> Bounds:
        """Certified bounds on epsilon at ``delta``.

        Parameters
        ----------
        delta : float
            In ``(0, 1]``.
        eps_error : float, optional
            Overrides the accountant's ``eps_error``.
        delta_error : float, optional
            Overrides the accountant's ``delta_error`` (default ``delta / 1000``).

        Returns
        -------
        Bounds
            ``(lower, estimate, upper)``; all ``inf`` if a step had no noise,
            all 0 before any private step.
        """
        delta = V.probability("delta", delta, open_low=True)
        events = self._events()
        if events is None:
            return Bounds(math.inf, math.inf, math.inf)
        if delta_error is None:
            delta_error = self.delta_error if self.delta_error is not None else delta / 1000
        delta_error = V.delta_error(delta_error)
        pld = self._pld(events, delta_error, eps_error)
        if pld is None:
            return Bounds(0.0, 0.0, 0.0)
        b = pld.epsilon(delta)
        lower_events = self._events("lower")
        if lower_events != events:  # a per-epoch sampler with an epoch under way
            low = self._pld(lower_events, delta_error, eps_error)
            b = Bounds(0.0 if low is None else min(low.epsilon(delta).lower, b.lower), b.estimate, b.upper)
        return b

    def get_epsilon(self, delta: float, *, eps_error: Optional[float] = None, delta_error: Optional[float] = None,
                    **kwargs) -> float:
        """Certified upper bound on the epsilon spent so far.

        Parameters
        ----------
        delta : float
            Target delta in ``(0, 1]``.
        eps_error : float, optional
            Overrides the accountant's ``eps_error`` for this query (Opacus's
            ``get_noise_multiplier`` forwards keyword arguments here).
        delta_error : float, optional
            Default ``delta / 1000``.
        **kwargs
            Ignored (other accountants' options), as Opacus's accountants do.

        Returns
        -------
        float
        """
        return float(self.get_epsilon_bounds(delta, eps_error=eps_error, delta_error=delta_error).upper)

    def __len__(self) -> int:
        """Number of ``history`` segments (as every Opacus accountant counts)."""
        return len(self.history)

    @classmethod
    def mechanism(cls) -> str:
        """The registry name, ``"fastpld"``."""
        return MECHANISM


def register() -> None:
    """Register :class:`FastPLDAccountant` as ``"fastpld"`` in Opacus's registry (idempotent)."""
    register_accountant(MECHANISM, FastPLDAccountant, force=True)


register()
