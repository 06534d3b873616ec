"""Shared pieces of the paper-figure benchmark: mechanisms, one run of each accountant, exact Gaussian.

Every ``run_*`` function builds the accountant from scratch (mechanism -> discretisation ->
composition -> one ``delta(1.0)`` query), so the measured time is the whole pipeline, as in
the paper's Figures 1 and 2.  For fastpld that means clearing its per-mechanism cache
(privacy-loss objects, their moments and MGF grids, shared by equal mechanisms) before the
run, as ``bench_speed.py`` and ``bench_heterogeneous.py`` do; ``run_fastpld(..., warm=True)``
keeps it (a repeated composition of an equal mechanism).  They return plain dicts of
floats/ints (JSON-ready).
"""
from __future__ import annotations

import math
import time

import numpy as np
from scipy.stats import norm

import fastpld
from fastpld import mechanisms as _mechanisms

# the figures time compositions: a repeated question must compose again, not return the kept answer
if hasattr(fastpld, "set_cache_limit"):
    fastpld.set_cache_limit(results=0)

Q = 0.2  #: Poisson sampling probability of the subsampled Gaussian
EPS = 1.0  #: the epsilon at which delta is queried and calibrated
TARGET_DELTA = 1e-6  #: calibration target delta(EPS)
EPS_ERROR = 0.1
DELTA_ERROR = 1e-10
DPA_INTERVAL = 1e-4  #: dp_accounting value_discretization_interval of the paper's comparison

MECHANISMS = ("laplace", "psg")
LABEL = {"laplace": "Laplace mechanism", "psg": f"Poisson-subsampled Gaussian (q = {Q})",
         "gaussian": "Gaussian mechanism"}
PARAM = {"laplace": "b", "psg": "sigma", "gaussian": "sigma"}


# ------------------------------------------------------------------------------------------
# fastpld
# ------------------------------------------------------------------------------------------
def fastpld_mechanism(mech: str, noise: float):
    if mech == "laplace":
        return fastpld.Laplace(noise)
    if mech == "psg":
        return fastpld.PoissonSubsampledGaussian(noise, Q)
    if mech == "gaussian":
        return fastpld.Gaussian(noise)
    raise ValueError(f"mech must be one of laplace, psg, gaussian, got {mech!r}")


def run_fastpld(mech, noise, k, method="auto", backend=None, eps_error=EPS_ERROR, delta_error=DELTA_ERROR,
                eps=EPS, warm=False):
    if not warm:
        _mechanisms._LOSS_CACHE.clear()  # from scratch: nothing cached from an equal mechanism
    m = fastpld_mechanism(mech, noise)
    t0 = time.perf_counter()
    pld = fastpld.compose(m, k, eps_error=eps_error, delta_error=delta_error, method=method, backend=backend)
    b = pld.delta(eps)
    t = time.perf_counter() - t0
    stages = [s.buckets for s in pld.stages]
    return {"time": t, "buckets": int(pld.num_buckets), "max_stage_buckets": int(max(stages)),
            "stage_buckets": [int(x) for x in stages], "plan": pld.method, "directions": len(pld.directions),
            "lower": float(b.lower), "estimate": float(b.estimate), "upper": float(b.upper)}


# ------------------------------------------------------------------------------------------
# prv_accountant (Gopi, Lee, Wutschitz)
# ------------------------------------------------------------------------------------------
def run_prv(mech, noise, k, eps_error=EPS_ERROR, delta_error=DELTA_ERROR, eps=EPS):
    import prv_accountant as pa

    t0 = time.perf_counter()
    if mech == "laplace":
        prv = pa.LaplaceMechanism(mu=1.0 / noise)  # prv_accountant's mu is sensitivity / b
    elif mech == "psg":
        prv = pa.PoissonSubsampledGaussianMechanism(sampling_probability=Q, noise_multiplier=noise)
    elif mech == "gaussian":
        prv = pa.GaussianMechanism(noise_multiplier=noise)
    else:
        raise ValueError(mech)
    acc = pa.PRVAccountant(prvs=[prv], eps_error=eps_error, delta_error=delta_error, max_self_compositions=[k])
    lo, est, up = acc.compute_delta(eps, [k])
    t = time.perf_counter() - t0
    # The grid every PRV is discretised on (Domain.create_aligned(-L, L, mesh)); the FFT has this length.
    size = len(acc.composer.prvs[0].domain)
    return {"time": t, "buckets": int(size), "max_stage_buckets": int(size),
            "lower": float(lo), "estimate": float(est), "upper": float(up)}


# ------------------------------------------------------------------------------------------
# dp_accounting PLD (Google)
# ------------------------------------------------------------------------------------------
def dpa_pld(mech, noise, interval=DPA_INTERVAL):
    from dp_accounting.pld import privacy_loss_distribution as pld_mod

    if mech == "laplace":
        return pld_mod.from_laplace_mechanism(noise, value_discretization_interval=interval)
    if mech == "psg":
        return pld_mod.from_gaussian_mechanism(noise, sampling_prob=Q, value_discretization_interval=interval)
    if mech == "gaussian":
        return pld_mod.from_gaussian_mechanism(noise, value_discretization_interval=interval)
    raise ValueError(mech)


def run_dpa(mech, noise, k, interval=DPA_INTERVAL, eps=EPS):
    t0 = time.perf_counter()
    pld = dpa_pld(mech, noise, interval).self_compose(k)
    d = float(pld.get_delta_for_epsilon(eps))
    t = time.perf_counter() - t0
    sizes = [pld._pmf_remove.size]  # noqa: SLF001 - the PMF length is only reachable here
    if not pld._symmetric:  # noqa: SLF001
        sizes.append(pld._pmf_add.size)  # noqa: SLF001
    # pessimistic estimate only: dp_accounting reports no lower/upper bounds
    return {"time": t, "buckets": int(sum(sizes)), "max_stage_buckets": int(max(sizes)),
            "lower": None, "estimate": d, "upper": None}


# ------------------------------------------------------------------------------------------
# exact Gaussian
# ------------------------------------------------------------------------------------------
def gaussian_delta(mu: float, eps: float = EPS) -> float:
    """Exact delta(eps) of a mu-GDP mechanism (k Gaussians with sigma compose to mu = sqrt(k)/sigma)."""
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))


def gaussian_mu_for(target=TARGET_DELTA, eps=EPS) -> float:
    from scipy.optimize import brentq

    return float(brentq(lambda m: math.log(gaussian_delta(m, eps)) - math.log(target), 0.05, 10.0,
                        xtol=1e-14, rtol=1e-14))


def finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def percentiles(xs):
    a = np.asarray(xs, dtype=float)
    return {"mean": float(a.mean()), "median": float(np.median(a)), "p20": float(np.percentile(a, 20)),
            "p80": float(np.percentile(a, 80)), "n": int(a.size)}
