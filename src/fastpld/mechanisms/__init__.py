"""Mechanisms and their privacy loss random variables (PRVs).

A mechanism with output distributions ``P`` (on a dataset) and ``Q`` (on a
neighbour) has the privacy loss ``Y = log(Q(w) / P(w))`` with ``w ~ Q``; its
privacy curve is ``delta(eps) = E[(1 - e^(eps - Y))_+]`` (mass of ``Y`` at
``+inf`` counts fully).  Composition adds independent PRVs.

Each mechanism exposes its PRV per neighbouring direction through
:meth:`Mechanism.privacy_losses`, a mapping ``{"add": loss, "remove": loss}``.
Symmetric mechanisms (Gaussian, Laplace, pure DP) return the same object for
both directions, so it is composed once.

A :class:`PrivacyLoss` describes the *finite part* of ``Y`` (a probability
distribution) plus ``p_inf``, the mass at ``+inf``.  Continuous losses give a
CDF and a survival function that stay accurate deep in the tails (they are
evaluated separately, never as ``1 - cdf``), a density for the round-off
certificate, partial first moments for the mean correction of Algorithm 1, and
an upper bound on the cumulant generating function ``log E[e^(sY)]`` for
Chernoff tail bounds of any number of self-compositions.  Discrete losses give
their atoms exactly.

Modules, in the order they depend on one another:

- :mod:`~fastpld.mechanisms.quadrature`: Gauss-Legendre panels for partial moments and expectations;
- :mod:`~fastpld.mechanisms.tails`: Chernoff tail bounds and the truncation ladder;
- :mod:`~fastpld.mechanisms.base`: :class:`PrivacyLoss`, :class:`DiscreteLoss`, :class:`ContinuousLoss`,
  :class:`Mechanism`;
- :mod:`~fastpld.mechanisms.losses`: the Gaussian and Laplace losses (closed forms);
- :mod:`~fastpld.mechanisms.pairs`: Poisson subsampling's dominating pairs and binomial moments;
- :mod:`~fastpld.mechanisms.subsampled`: :class:`SubsampledLoss` (one direction of a subsampled mechanism);
- :mod:`~fastpld.mechanisms.cache`: one loss object per mechanism value (process-wide, bounded);
- :mod:`~fastpld.mechanisms.standard`: the public mechanisms;
- :mod:`~fastpld.mechanisms.custom`: :class:`CustomCDF` and :class:`CustomPMF`.
"""
from __future__ import annotations

from .base import ContinuousLoss, DiscreteLoss, Mechanism, PrivacyLoss, special
from .cache import _LOSS_CACHE, _cached, _loss_key, _refresh_sizes
from .custom import CustomCDF, CustomPMF
from .losses import GaussianLoss, LaplaceLoss
from .pairs import _GaussPair, _LaplacePair, _log_binomial_moment
from .quadrature import _cdf_moments
from .standard import (
    ApproxDP,
    Gaussian,
    Laplace,
    PoissonSubsampledGaussian,
    PoissonSubsampledLaplace,
    PureDP,
    RandomizedResponse,
)
from .subsampled import SubsampledLoss, subsampled_log_mgf_rows
from .tails import _LADDER_BASE, _generic_window, ladder

__all__ = [
    "PrivacyLoss",
    "DiscreteLoss",
    "ContinuousLoss",
    "Mechanism",
    "Gaussian",
    "Laplace",
    "PoissonSubsampledGaussian",
    "PoissonSubsampledLaplace",
    "PureDP",
    "RandomizedResponse",
    "ApproxDP",
    "CustomCDF",
    "CustomPMF",
]
