"""``prv_accountant``'s API backed by fastpld.

Change ``from prv_accountant import ...`` to ``from fastpld.compat.prv_accountant import ...``::

    from fastpld.compat.prv_accountant import PRVAccountant, PoissonSubsampledGaussianMechanism

    prv = PoissonSubsampledGaussianMechanism(sampling_probability=0.01, noise_multiplier=1.0)
    acc = PRVAccountant(prvs=[prv], max_self_compositions=[10_000], eps_error=0.1, delta_error=1e-10)
    eps_low, eps_est, eps_up = acc.compute_epsilon(delta=1e-5, num_self_compositions=[10_000])

The mechanism classes take ``prv_accountant``'s names and arguments; instances
of the real ``prv_accountant`` classes are accepted too.  Like
``prv_accountant``, ``PoissonSubsampledGaussianMechanism`` accounts for the
single "remove" neighbouring direction (``PoissonSubsampledGaussian(...,
neighboring="remove")``), so numbers agree like for like; use
:func:`fastpld.compose` with the default ``neighboring="add_or_remove"`` for
add/remove adjacency.

Differences from ``prv_accountant`` (all in the user's favour): the bounds are
certified (truncation, wrap-around and round-off are charged, not assumed
away); ``eps_max`` is accepted but not needed (windows are sized from tail
bounds); there is no "Discrete mean differs" failure.  Custom
``PrivacyRandomVariable`` subclasses are not translated: use
:class:`fastpld.CustomCDF`, which needs a tail bound besides the CDF.

This module does not import ``prv_accountant`` (it is pure Python and only
needed to recognise its instances, which is done by class name).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

from .. import _validation as V
from ..composition.api import compose as _compose
from ..curve import PrivacyLossDistribution
from ..mechanisms import ApproxDP, Gaussian, Laplace, Mechanism, PoissonSubsampledGaussian, PureDP

__all__ = [
    "PRVAccountant",
    "Accountant",
    "DPSGDAccountant",
    "PrivacyRandomVariable",
    "PoissonSubsampledGaussianMechanism",
    "GaussianMechanism",
    "LaplaceMechanism",
    "PureDPMechanism",
    "ApproximateDPMechanism",
    "to_fastpld",
]


class PrivacyRandomVariable:
    """Base class of the mechanism classes here (``prv_accountant``'s name).

    Subclasses implement :meth:`to_fastpld`.
    """

    def to_fastpld(self) -> Mechanism:
        """The equivalent fastpld mechanism.

        Returns
        -------
        fastpld.Mechanism
        """
        raise NotImplementedError


@dataclass(frozen=True)
class PoissonSubsampledGaussianMechanism(PrivacyRandomVariable):
    """DP-SGD step: Gaussian noise ``noise_multiplier`` on a Poisson sample (remove direction).

    Parameters
    ----------
    sampling_probability : float
        Poisson sampling probability in ``[0, 1]``.
    noise_multiplier : float
        Noise standard deviation divided by the L2 sensitivity (> 0).
    """

    sampling_probability: float
    noise_multiplier: float

    def __post_init__(self):
        object.__setattr__(self, "sampling_probability",
                           V.probability("sampling_probability", self.sampling_probability))
        object.__setattr__(self, "noise_multiplier", V.positive_float("noise_multiplier", self.noise_multiplier))

    def to_fastpld(self) -> Mechanism:
        """``PoissonSubsampledGaussian(noise_multiplier, sampling_probability, neighboring="remove")``."""
        return PoissonSubsampledGaussian(self.noise_multiplier, self.sampling_probability, neighboring="remove")


@dataclass(frozen=True)
class GaussianMechanism(PrivacyRandomVariable):
    """Gaussian mechanism.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation (> 0).
    l2_sensitivity : float, default 1.0
        L2 sensitivity (> 0).
    """

    noise_multiplier: float
    l2_sensitivity: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "noise_multiplier", V.positive_float("noise_multiplier", self.noise_multiplier))
        object.__setattr__(self, "l2_sensitivity", V.positive_float("l2_sensitivity", self.l2_sensitivity))

    def to_fastpld(self) -> Mechanism:
        """``Gaussian(noise_multiplier, sensitivity=l2_sensitivity)``."""
        return Gaussian(self.noise_multiplier, sensitivity=self.l2_sensitivity)


@dataclass(frozen=True)
class LaplaceMechanism(PrivacyRandomVariable):
    """Laplace mechanism given by ``mu = sensitivity / scale`` (its pure-DP epsilon), as in ``prv_accountant``.

    Parameters
    ----------
    mu : float
        Sensitivity divided by the Laplace scale (> 0); *not* the scale.
    """

    mu: float

    def __post_init__(self):
        object.__setattr__(self, "mu", V.positive_float("mu", self.mu))

    def to_fastpld(self) -> Mechanism:
        """``Laplace(scale=1 / mu)``."""
        return Laplace(1.0 / self.mu)


@dataclass(frozen=True)
class PureDPMechanism(PrivacyRandomVariable):
    """An ``eps``-DP mechanism (worst case: randomized response).

    Parameters
    ----------
    eps : float
        ``>= 0``.
    """

    eps: float

    def __post_init__(self):
        object.__setattr__(self, "eps", V.nonnegative_float("eps", self.eps))

    def to_fastpld(self) -> Mechanism:
        """``PureDP(eps)``."""
        return PureDP(self.eps)


@dataclass(frozen=True)
class ApproximateDPMechanism(PrivacyRandomVariable):
    """An ``(epsilon, delta)``-DP mechanism.

    Parameters
    ----------
    epsilon : float
        ``>= 0``.
    delta : float
        In ``[0, 1)``.
    """

    epsilon: float
    delta: float

    def __post_init__(self):
        object.__setattr__(self, "epsilon", V.nonnegative_float("epsilon", self.epsilon))
        object.__setattr__(self, "delta", V.probability("delta", self.delta, open_high=True))

    def to_fastpld(self) -> Mechanism:
        """``ApproxDP(epsilon, delta)``."""
        return ApproxDP(self.epsilon, self.delta)


def to_fastpld(prv) -> Mechanism:
    """Translate a mechanism of this module, of ``prv_accountant``, or a fastpld mechanism.

    Parameters
    ----------
    prv : PrivacyRandomVariable, prv_accountant PRV or fastpld.Mechanism

    Returns
    -------
    fastpld.Mechanism

    Raises
    ------
    ValueError
        For custom ``prv_accountant`` PRVs (only the built-in five are known).
    """
    if isinstance(prv, Mechanism):
        return prv
    if isinstance(prv, PrivacyRandomVariable):
        return prv.to_fastpld()
    # Instances of the real prv_accountant classes, recognised by module and name so that
    # this adapter does not import prv_accountant.  Their attributes are set in __init__.
    mod = type(prv).__module__ or ""
    name = type(prv).__name__
    if mod.startswith("prv_accountant"):
        if name == "PoissonSubsampledGaussianMechanism":
            return PoissonSubsampledGaussian(float(prv.sigma), float(prv.p), neighboring="remove")
        if name == "GaussianMechanism":
            return Gaussian(1.0 / float(prv.mu))
        if name == "LaplaceMechanism":
            return Laplace(1.0 / V.positive_float("mu", float(prv.mu)))
        if name == "PureDPMechanism":
            return PureDP(float(prv.eps))
        if name == "ApproximateDPMechanism":
            return ApproxDP(float(prv.pure_dp.eps), float(prv.delta))
    raise ValueError(
        f"prvs: cannot translate {prv!r}; use PoissonSubsampledGaussianMechanism, GaussianMechanism, "
        "LaplaceMechanism, PureDPMechanism, ApproximateDPMechanism, or a fastpld mechanism (fastpld.CustomCDF "
        "for a custom privacy loss)")


def _as_list(name, value, n):
    """Compositions per PRV as a list of ints >= 0 (an int is allowed for a single PRV)."""
    seq = isinstance(value, (list, tuple, np.ndarray))
    vals = list(value) if seq else [value]
    out = []
    for i, v in enumerate(vals):
        label = f"{name}[{i}]" if seq else name
        is_zero = isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, (bool, np.bool_)) and v == 0
        out.append(0 if is_zero else V.positive_int(label, v))
    if len(out) != n:
        raise ValueError(f"{name} must have one entry per PRV ({n}), got {len(out)}")
    return out


class PRVAccountant:
    """Heterogeneous composition with ``prv_accountant``'s interface and certified bounds.

    Parameters
    ----------
    prvs : PrivacyRandomVariable or sequence of them
        Mechanisms (classes of this module, real ``prv_accountant`` ones, or
        fastpld mechanisms).
    eps_error : float
        Certified epsilon error (``prv_accountant``'s meaning: the returned
        bounds are at most about ``eps_error`` from the estimate).
    delta_error : float
        Certified delta error.
    max_self_compositions : int or sequence of int, optional
        Largest ``num_self_compositions`` allowed per PRV (default 1 each), as
        in ``prv_accountant``.
    eps_max : float, optional
        Accepted for compatibility and ignored: fastpld sizes its windows from
        certified tail bounds.

    Notes
    -----
    Each distinct ``num_self_compositions`` is composed once (exactly that many
    copies, not the maximum) and cached.
    """

    def __init__(self, prvs: Union[object, Sequence[object]], eps_error: float, delta_error: float,
                 max_self_compositions: Union[int, Sequence[int], None] = None, eps_max: float | None = None):
        if isinstance(prvs, (list, tuple)):
            prvs = list(prvs)
        else:
            prvs = [prvs]
        if not prvs:
            raise ValueError("prvs must not be empty")
        self.prvs = prvs
        self.mechanisms = [to_fastpld(p) for p in prvs]
        self.eps_error = V.eps_error(eps_error)
        self.delta_error = V.delta_error(delta_error)
        if max_self_compositions is None:
            max_self_compositions = [1] * len(prvs)
        self.max_self_compositions = _as_list("max_self_compositions", max_self_compositions, len(prvs))
        if eps_max is not None:
            V.positive_float("eps_max", eps_max)
        self.eps_max = eps_max
        self._cache: dict[tuple, PrivacyLossDistribution] = {}

    def compute_composition(self, num_self_compositions: Union[int, Sequence[int], None] = None
                            ) -> PrivacyLossDistribution:
        """Compose every PRV with itself ``num_self_compositions[i]`` times.

        Parameters
        ----------
        num_self_compositions : int or sequence of int, optional
            Default: 1 per PRV.  Must not exceed ``max_self_compositions``.

        Returns
        -------
        fastpld.PrivacyLossDistribution
        """
        if num_self_compositions is None:
            num_self_compositions = [1] * len(self.prvs)
        ks = _as_list("num_self_compositions", num_self_compositions, len(self.prvs))
        if any(k > m for k, m in zip(ks, self.max_self_compositions)):
            raise ValueError("num_self_compositions: requested number of compositions exceeds max_self_compositions")
        key = tuple(ks)
        if key not in self._cache:
            events = [(m, k) for m, k in zip(self.mechanisms, ks) if k > 0]
            if not events:
                raise ValueError("num_self_compositions must not be all zero")
            self._cache[key] = _compose(events, eps_error=self.eps_error, delta_error=self.delta_error)
        return self._cache[key]

    def compute_delta(self, epsilon: float, num_self_compositions: Union[int, Sequence[int]]
                      ) -> tuple[float, float, float]:
        """Bounds on delta at ``epsilon``.

        Parameters
        ----------
        epsilon : float
            ``>= 0``.
        num_self_compositions : int or sequence of int
            Compositions per PRV.

        Returns
        -------
        tuple of float
            ``(delta_lower, delta_estimate, delta_upper)``, certified.
        """
        b = self.compute_composition(num_self_compositions).delta(V.nonnegative_float("epsilon", epsilon))
        return float(b.lower), float(b.estimate), float(b.upper)

    def compute_epsilon(self, delta: float, num_self_compositions: Union[int, Sequence[int]]
                        ) -> tuple[float, float, float]:
        """Bounds on epsilon at ``delta``.

        Parameters
        ----------
        delta : float
            In ``(0, 1]``, well above ``delta_error``.
        num_self_compositions : int or sequence of int
            Compositions per PRV.

        Returns
        -------
        tuple of float
            ``(eps_lower, eps_estimate, eps_upper)``, certified.
        """
        d = V.probability("delta", delta, open_low=True)
        b = self.compute_composition(num_self_compositions).epsilon(d)
        return float(b.lower), float(b.estimate), float(b.upper)


class DPSGDAccountant(PRVAccountant):
    """``prv_accountant.dpsgd.DPSGDAccountant``: one Poisson-subsampled Gaussian.

    Parameters
    ----------
    noise_multiplier : float
    sampling_probability : float
    max_steps : int
    eps_error : float, default 0.1
    delta_error : float, default 1e-9
    """

    def __init__(self, noise_multiplier: float, sampling_probability: float, max_steps: int,
                 eps_error: float = 0.1, delta_error: float = 1e-9):
        super().__init__(PoissonSubsampledGaussianMechanism(sampling_probability, noise_multiplier),
                         eps_error=eps_error, delta_error=delta_error, max_self_compositions=[max_steps])

    def compute_epsilon(self, delta: float, num_steps: int) -> tuple[float, float, float]:
        """Bounds ``(lower, estimate, upper)`` on epsilon after ``num_steps`` steps.

        Parameters
        ----------
        delta : float
        num_steps : int

        Returns
        -------
        tuple of float
        """
        return super().compute_epsilon(delta, [num_steps])


class Accountant:
    """``prv_accountant.Accountant`` (deprecated there): DP-SGD epsilon at a fixed delta.

    Parameters
    ----------
    noise_multiplier, sampling_probability : float
    delta : float
        The target delta; ``delta_error = delta / 1000`` as in ``prv_accountant``.
    max_compositions : int
    eps_error : float, optional
        Default 0.1 (``prv_accountant`` requires it).
    mesh_size : None
        Must be ``None`` (as in ``prv_accountant``).
    verbose : bool
        Ignored.
    """

    def __init__(self, noise_multiplier: float, sampling_probability: float, delta: float, max_compositions: int,
                 eps_error: float | None = None, mesh_size: float | None = None, verbose: bool = False):
        if mesh_size is not None:
            raise ValueError("mesh_size must be None (the mesh follows from eps_error)")
        self.delta = V.probability("delta", delta, open_low=True)
        self.accountant = PRVAccountant(
            PoissonSubsampledGaussianMechanism(sampling_probability, noise_multiplier),
            eps_error=0.1 if eps_error is None else eps_error, delta_error=self.delta / 1000,
            max_self_compositions=[max_compositions])

    def compute_epsilon(self, num_compositions: int) -> tuple[float, float, float]:
        """Bounds ``(lower, estimate, upper)`` on epsilon after ``num_compositions`` steps.

        Parameters
        ----------
        num_compositions : int

        Returns
        -------
        tuple of float
        """
        return self.accountant.compute_epsilon(self.delta, [num_compositions])
