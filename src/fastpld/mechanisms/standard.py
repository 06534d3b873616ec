"""The standard mechanisms: Gaussian, Laplace, their Poisson-subsampled versions, pure and approximate DP."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .. import _validation as V
from .._lazy import lazy_module
from .base import DiscreteLoss, Mechanism, PrivacyLoss
from .cache import _cached
from .losses import GaussianLoss, LaplaceLoss
from .pairs import _GaussPair, _LaplacePair
from .subsampled import SubsampledLoss

special = lazy_module("scipy.special")

__all__ = [
    "Gaussian",
    "Laplace",
    "PoissonSubsampledGaussian",
    "PoissonSubsampledLaplace",
    "PureDP",
    "RandomizedResponse",
    "ApproxDP",
]


@dataclass(frozen=True)
class Gaussian(Mechanism):
    """Gaussian mechanism ``f(x) + N(0, sigma^2)`` with L2 sensitivity ``sensitivity``.

    Parameters
    ----------
    sigma : float
        Standard deviation of the noise (> 0).
    sensitivity : float, default 1.0
        L2 sensitivity of ``f`` (> 0).

    Raises
    ------
    ValueError
        If ``sigma`` or ``sensitivity`` is not a finite positive number, or ``sigma / sensitivity``
        lies outside ``[1e-100, 1e100]`` (the privacy loss is not representable in float64).
    """

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", V.positive_float("sigma", self.sigma))
        object.__setattr__(self, "sensitivity", V.positive_float("sensitivity", self.sensitivity))
        _check_noise_ratio("sigma", self.sigma, self.sensitivity)

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        loss = _cached(self, lambda: GaussianLoss(self.sensitivity / self.sigma))
        return {"add": loss, "remove": loss}


@dataclass(frozen=True)
class Laplace(Mechanism):
    """Laplace mechanism ``f(x) + Lap(0, scale)`` with L1 sensitivity ``sensitivity``.

    Its privacy loss takes values in ``[-eps0, eps0]`` with ``eps0 = sensitivity / scale``, with
    atoms at both ends, so one use is ``eps0``-DP; composition is far tighter than ``k eps0``.

    Parameters
    ----------
    scale : float
        Scale ``b`` of the Laplace noise (density ``exp(-|x| / b) / (2 b)``; > 0).
    sensitivity : float, default 1.0
        L1 sensitivity of ``f`` (> 0).

    Raises
    ------
    ValueError
        If ``scale`` or ``sensitivity`` is not a finite positive number, or ``scale / sensitivity``
        lies outside ``[1e-100, 1e100]``.

    Examples
    --------
    >>> import fastpld
    >>> pld = fastpld.compose(fastpld.Laplace(scale=2.0), 100)
    >>> bounds = pld.epsilon(1e-6)  # certified: lower <= true epsilon <= upper
    >>> bounds.upper < 100 * 0.5  # tighter than the pure-DP sum of 100 times eps0 = 0.5
    True
    """

    scale: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", V.positive_float("scale", self.scale))
        object.__setattr__(self, "sensitivity", V.positive_float("sensitivity", self.sensitivity))
        _check_noise_ratio("scale", self.scale, self.sensitivity)

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        loss = _cached(self, lambda: LaplaceLoss(self.sensitivity / self.scale))
        return {"add": loss, "remove": loss}


_NEIGHBOURING = ("add_or_remove", "remove", "add")
_NOISE_RANGE = (1e-100, 1e100)


def _check_noise_ratio(name, noise, sensitivity):
    """Refuse noise/sensitivity ratios whose privacy losses overflow or underflow float64."""
    r = noise / sensitivity
    if not (_NOISE_RANGE[0] <= r <= _NOISE_RANGE[1]):
        raise ValueError(
            f"{name} / sensitivity must be in [{_NOISE_RANGE[0]:g}, {_NOISE_RANGE[1]:g}] (its privacy loss is not "
            f"representable in float64 otherwise), got {name}={noise!r}, sensitivity={sensitivity!r}"
        )


def _validate_subsampled(mech, noise_name):
    """Shared checks of the Poisson-subsampled mechanisms (frozen dataclasses)."""
    object.__setattr__(mech, noise_name, V.positive_float(noise_name, getattr(mech, noise_name)))
    object.__setattr__(mech, "sampling_probability", V.probability("sampling_probability", mech.sampling_probability))
    object.__setattr__(mech, "sensitivity", V.positive_float("sensitivity", mech.sensitivity))
    _check_noise_ratio(noise_name, getattr(mech, noise_name), mech.sensitivity)
    if mech.neighboring not in _NEIGHBOURING:
        raise ValueError(f"neighboring must be one of {_NEIGHBOURING}, got {mech.neighboring!r}")


def _subsampled_losses(mech, pair_factory, full_loss_factory):
    q = mech.sampling_probability
    if q == 0.0:
        loss = _cached(mech, lambda: DiscreteLoss([0.0], [1.0]))
        return {"add": loss, "remove": loss}
    if q == 1.0:
        loss = _cached(mech, full_loss_factory)
        return {"add": loss, "remove": loss}

    def build():
        pair = pair_factory()
        return {"remove": SubsampledLoss(pair, q, "remove"), "add": SubsampledLoss(pair, q, "add")}

    losses = _cached(mech, build)
    if mech.neighboring == "add_or_remove":
        return losses
    one = losses[mech.neighboring]
    return {"add": one, "remove": one}


@dataclass(frozen=True)
class PoissonSubsampledGaussian(Mechanism):
    """Gaussian mechanism on a Poisson subsample (the DP-SGD step).

    Parameters
    ----------
    sigma : float
        Noise standard deviation in units of the sensitivity is ``sigma / sensitivity``.
    sampling_probability : float
        Probability ``q`` in ``[0, 1]`` that each record is in the subsample.
    sensitivity : float, default 1.0
        L2 sensitivity of the query on the subsample (> 0).
    neighboring : {"add_or_remove", "remove", "add"}, default "add_or_remove"
        ``"add_or_remove"`` gives the maximum over both directions (as
        ``dp_accounting``); ``"remove"`` selects the single direction that
        ``prv_accountant`` uses.

    Raises
    ------
    ValueError
        If ``sigma`` or ``sensitivity`` is not a finite positive number, ``sigma / sensitivity``
        lies outside ``[1e-100, 1e100]``, ``sampling_probability`` is not in ``[0, 1]``, or
        ``neighboring`` is not one of the three names; and when the privacy losses are built (by
        ``compose``) for ``0 < q < 1`` with ``sigma / sensitivity < 1e-3``.
    """

    sigma: float
    sampling_probability: float
    sensitivity: float = 1.0
    neighboring: str = "add_or_remove"

    def __post_init__(self) -> None:
        _validate_subsampled(self, "sigma")

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        s = self.sigma / self.sensitivity
        return _subsampled_losses(self, lambda: _GaussPair(s), lambda: GaussianLoss(1.0 / s))


@dataclass(frozen=True)
class PoissonSubsampledLaplace(Mechanism):
    """Laplace mechanism on a Poisson subsample; see :class:`PoissonSubsampledGaussian`.

    Parameters
    ----------
    scale : float
        Scale of the Laplace noise (> 0); the privacy loss depends on ``scale / sensitivity``.
    sampling_probability : float
        Probability ``q`` in ``[0, 1]`` that each record is in the subsample (``q = 0``: no privacy
        loss; ``q = 1``: the :class:`Laplace` mechanism).
    sensitivity : float, default 1.0
        L1 sensitivity of the query on the subsample (> 0).
    neighboring : {"add_or_remove", "remove", "add"}, default "add_or_remove"
        ``"add_or_remove"`` gives the maximum over both directions; ``"remove"`` or ``"add"``
        selects one.

    Raises
    ------
    ValueError
        If ``scale`` or ``sensitivity`` is not a finite positive number, ``scale / sensitivity``
        lies outside ``[1e-100, 1e100]``, ``sampling_probability`` is not in ``[0, 1]``, or
        ``neighboring`` is not one of the three names.

    Examples
    --------
    >>> import fastpld
    >>> mech = fastpld.PoissonSubsampledLaplace(scale=2.0, sampling_probability=0.01)
    >>> pld = fastpld.compose(mech, 1000)
    >>> pld.epsilon(1e-6).upper < 1.0
    True
    """

    scale: float
    sampling_probability: float
    sensitivity: float = 1.0
    neighboring: str = "add_or_remove"

    def __post_init__(self) -> None:
        _validate_subsampled(self, "scale")

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        e0 = self.sensitivity / self.scale
        return _subsampled_losses(self, lambda: _LaplacePair(e0), lambda: LaplaceLoss(e0))


@dataclass(frozen=True)
class PureDP(Mechanism):
    """An ``epsilon``-DP mechanism, composed as its worst case (binary randomized response).

    Every ``epsilon``-DP mechanism is dominated by binary randomized response, whose privacy loss
    is ``+epsilon`` with probability ``e^epsilon / (1 + e^epsilon)`` and ``-epsilon`` otherwise, so
    the bounds hold for any ``epsilon``-DP mechanism (and are exact for randomized response).

    Parameters
    ----------
    epsilon : float
        The pure-DP parameter (>= 0).

    Raises
    ------
    ValueError
        If ``epsilon`` is not a finite non-negative number.

    Examples
    --------
    >>> import fastpld
    >>> pld = fastpld.compose(fastpld.PureDP(epsilon=0.1), 100)
    >>> pld.epsilon(1e-6).upper < 100 * 0.1
    True
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", V.nonnegative_float("epsilon", self.epsilon))

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        e = self.epsilon
        loss = _cached(self, lambda: DiscreteLoss([e, -e], [special.expit(e), special.expit(-e)], p_minf=0.0))
        return {"add": loss, "remove": loss}


@dataclass(frozen=True)
class RandomizedResponse(Mechanism):
    """k-ary randomized response: the true category w.p. ``e^eps / (e^eps + c - 1)``, each other one
    w.p. ``1 / (e^eps + c - 1)``.

    Its privacy loss is ``+epsilon``, ``-epsilon`` or (with ``c > 2`` categories) ``0``.

    Parameters
    ----------
    epsilon : float
        The pure-DP parameter of one report (>= 0).
    num_categories : int, default 2
        Number ``c`` of categories (>= 2; ``c = 2`` is :class:`PureDP`'s worst case).

    Raises
    ------
    ValueError
        If ``epsilon`` is not a finite non-negative number or ``num_categories`` is not an integer
        >= 2.

    Examples
    --------
    >>> import fastpld
    >>> pld = fastpld.compose(fastpld.RandomizedResponse(epsilon=1.0, num_categories=4), 50)
    >>> bounds = pld.epsilon(1e-6)
    >>> bounds.lower <= bounds.upper < 50 * 1.0
    True
    """

    epsilon: float
    num_categories: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", V.nonnegative_float("epsilon", self.epsilon))
        c = V.positive_int("num_categories", self.num_categories)
        if c < 2:
            raise ValueError(f"num_categories must be >= 2, got {self.num_categories!r}")
        object.__setattr__(self, "num_categories", c)

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        e, c = self.epsilon, self.num_categories

        def build():
            # probabilities via logs: p = e^e/(e^e + c - 1), r = 1/(e^e + c - 1)
            logden = np.logaddexp(e, math.log(c - 1))
            p, r = math.exp(e - logden), math.exp(-logden)
            return DiscreteLoss([e, -e, 0.0], [p, r, (c - 2) * r], p_minf=0.0)

        loss = _cached(self, build)
        return {"add": loss, "remove": loss}


@dataclass(frozen=True)
class ApproxDP(Mechanism):
    """An ``(epsilon, delta)``-DP mechanism: pure ``epsilon`` loss plus mass ``delta`` at infinity.

    The worst case of every ``(epsilon, delta)``-DP mechanism: with probability ``delta`` the
    output reveals the dataset (infinite privacy loss), otherwise it is :class:`PureDP`'s
    randomized response.

    Parameters
    ----------
    epsilon : float
        The pure part (>= 0).
    delta : float
        Probability of an infinite privacy loss, in ``[0, 1)``.

    Raises
    ------
    ValueError
        If ``epsilon`` is not a finite non-negative number or ``delta`` is not in ``[0, 1)``.

    Examples
    --------
    >>> import fastpld
    >>> pld = fastpld.compose(fastpld.ApproxDP(epsilon=0.1, delta=1e-7), 100)
    >>> pld.epsilon(1e-5).upper < 100 * 0.1  # while delta = 1e-5 > 100 * 1e-7
    True
    """

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", V.nonnegative_float("epsilon", self.epsilon))
        object.__setattr__(self, "delta", V.probability("delta", self.delta, open_high=True))

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        e, d = self.epsilon, self.delta
        loss = _cached(self, lambda: DiscreteLoss([e, -e], [special.expit(e), special.expit(-e)], p_inf=d,
                                                  p_minf=d))
        return {"add": loss, "remove": loss}
