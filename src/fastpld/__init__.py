"""fastpld: certified privacy accounting by evolving discretisation.

Compose privacy loss distributions of DP mechanisms (DP-SGD steps, Laplace or
Gaussian releases, randomized response, ...) and query ``delta(epsilon)`` and
``epsilon(delta)`` with certified lower and upper bounds.

>>> import fastpld
>>> pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(sigma=1.0, sampling_probability=0.01), 10_000)
>>> pld.epsilon(1e-5)  # doctest: +SKIP
Bounds(lower=..., estimate=..., upper=...)
"""
from ._fft import available_backends, get_backend, set_backend
from .accountant import PrivacyAccountant
from .batch import answer_many
from .calibrate import calibrate, find_noise_multiplier, find_sampling_probability, find_steps
from .calibrate import CalibrationWarning
from .composition.api import compose
from .composition.threads import default_threads
from .curve import Bounds, PrivacyLossDistribution, StageInfo
from .resources import cache_info, cache_limit, clear_caches, set_cache_limit, set_thread_limit, thread_limit
from .mechanisms import (
    ApproxDP,
    CustomCDF,
    CustomPMF,
    Gaussian,
    Laplace,
    Mechanism,
    PoissonSubsampledGaussian,
    PoissonSubsampledLaplace,
    PureDP,
    RandomizedResponse,
)
from .samplers import PoissonSubsampled, SubsampledWithoutReplacement, TruncatedPoissonSubsampled
from .allocation import RandomAllocation

__version__ = "0.1.0"

__all__ = [
    "compose",
    "default_threads",
    "PrivacyAccountant",
    "answer_many",
    "calibrate",
    "find_noise_multiplier",
    "find_sampling_probability",
    "find_steps",
    "CalibrationWarning",
    "Bounds",
    "PrivacyLossDistribution",
    "StageInfo",
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
    "PoissonSubsampled",
    "RandomAllocation",
    "SubsampledWithoutReplacement",
    "TruncatedPoissonSubsampled",
    "set_backend",
    "get_backend",
    "available_backends",
    "set_cache_limit",
    "cache_limit",
    "clear_caches",
    "cache_info",
    "set_thread_limit",
    "thread_limit",
]
