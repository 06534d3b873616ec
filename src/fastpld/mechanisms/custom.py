"""Mechanisms given by the user: the CDF of a continuous privacy loss, or the PMF of a discrete one."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

from .. import _validation as V
from .base import ContinuousLoss, DiscreteLoss, Mechanism, PrivacyLoss, _real_vector

__all__ = ["CustomCDF", "CustomPMF"]


class _CustomContinuous(ContinuousLoss):
    def __init__(self, cdf, sf, pdf, log_mgf, mean, std, support, p_inf, atoms, rel_err):
        self._cdf, self._sf, self._pdf, self._lm = cdf, sf, pdf, log_mgf
        self._mean, self._std = mean, std
        self.support = support
        self.p_inf = p_inf
        self.atoms = atoms
        self.cdf_rel_error = rel_err

    def cdf(self, t):
        return np.asarray(self._cdf(np.asarray(t, dtype=np.float64)), dtype=np.float64)

    def sf(self, t):
        if self._sf is None:
            return 1.0 - self.cdf(t)
        return np.asarray(self._sf(np.asarray(t, dtype=np.float64)), dtype=np.float64)

    def pdf_error(self, t, dt):
        # (a density given: its declared accuracy, as the CDF's.  Without one, the numerical derivative below errs by
        # ~cdf_rel_error / 1e-6 of the CDF besides its step's truncation, which nothing bounds: no bound, so the
        # dominance certificate refuses such a loss and the coupling certificate, which reads the CDF, takes it)
        if self._pdf is None:
            return np.full(np.shape(t), np.inf)
        return np.full(np.shape(t), float(self.cdf_rel_error))

    def pdf(self, t):
        if self._pdf is None:
            t = np.asarray(t, dtype=np.float64)
            h = 1e-6 * np.maximum(1.0, np.abs(t))
            return np.maximum((self.cdf(t + h) - self.cdf(t - h)) / (2 * h), 0.0)
        return np.asarray(self._pdf(np.asarray(t, dtype=np.float64)), dtype=np.float64)

    def log_mgf(self, s):
        s = np.asarray(s, dtype=np.float64)
        if self._lm is None:
            return np.full(s.shape, np.inf)
        return np.asarray(self._lm(s), dtype=np.float64)

    def mean(self):
        return self._mean

    def std(self):
        return self._std


class CustomCDF(Mechanism):
    """A mechanism given by the CDF of its privacy loss and an MGF tail bound.

    Parameters
    ----------
    cdf : callable
        Vectorised CDF of the finite part of the privacy loss.
    log_mgf : callable
        Vectorised *upper bound* on ``log E[exp(s Y)]`` for real ``s`` (``inf``
        where unknown); it is the tail bound used to size grids.
    mean, std : float
        Mean and standard deviation of the finite part (used for planning; the
        mean correction uses the CDF).
    sf : callable, optional
        Survival function, accurate in the upper tail (default ``1 - cdf``).
    pdf : callable, optional
        Density of the continuous part, accurate to ``cdf_rel_error`` (relative), which the dominance certificate
        charges at every point it integrates (it needs ~1e-13 at its default accuracy; the default accuracy falls
        back to the coupling certificate, which reads the CDF only, where it does not fit).  Default: a numerical
        derivative of ``cdf``, whose error has no bound: the dominance certificate then refuses the mechanism.
    support : (float, float), optional
    p_inf : float, default 0
    atoms : tuple of float, optional
        Locations of point masses of the CDF.
    cdf_rel_error : float, default 1e-10
        Relative accuracy of ``cdf``/``sf``, charged in the certificate.

    Raises
    ------
    ValueError
        If a function is not callable, ``mean`` is not finite, ``std`` not finite and >= 0,
        ``p_inf`` not in ``[0, 1)``, ``support`` not a pair ``lo < hi`` of reals, ``atoms`` not
        finite reals, or ``cdf_rel_error`` not in ``(0, 1e-3]``.
    """

    def __init__(self, cdf: Callable, log_mgf: Callable, mean: float, std: float, *, sf: Callable | None = None,
                 pdf: Callable | None = None, support: tuple[float, float] = (-math.inf, math.inf),
                 p_inf: float = 0.0, atoms: Sequence[float] = (), cdf_rel_error: float = 1e-10) -> None:
        if not callable(cdf):
            raise ValueError("cdf must be callable")
        if not callable(log_mgf):
            raise ValueError("log_mgf must be callable (an upper bound on the log MGF, used as tail bound)")
        if sf is not None and not callable(sf):
            raise ValueError("sf must be callable or None")
        if pdf is not None and not callable(pdf):
            raise ValueError("pdf must be callable or None")
        mean = V.real_float("mean", mean)
        std = V.nonnegative_float("std", std)
        p_inf = V.probability("p_inf", p_inf, open_high=True)
        if isinstance(support, (str, bytes)) or not hasattr(support, "__len__") or len(support) != 2:
            raise ValueError(f"support must be a pair (lo, hi), got {support!r}")
        lo = V.real_float("support[0]", support[0], allow_inf=True)
        hi = V.real_float("support[1]", support[1], allow_inf=True)
        if not lo < hi:
            raise ValueError(f"support must satisfy lo < hi, got {support!r}")
        if isinstance(atoms, (str, bytes)) or not hasattr(atoms, "__iter__"):
            raise ValueError(f"atoms must be a sequence of real numbers, got {atoms!r}")
        atoms = tuple(V.real_float(f"atoms[{i}]", a) for i, a in enumerate(atoms))
        rel = V.positive_float("cdf_rel_error", cdf_rel_error)
        if rel > 1e-3:
            raise ValueError(f"cdf_rel_error must be in (0, 1e-3], got {V.show(cdf_rel_error)}")
        self._loss = _CustomContinuous(cdf, sf, pdf, log_mgf, mean, std, (lo, hi), p_inf, atoms, rel)

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        return {"add": self._loss, "remove": self._loss}


class CustomPMF(Mechanism):
    """A mechanism whose privacy loss takes finitely many values.

    Parameters
    ----------
    values : array_like
        Finite privacy-loss values.
    probabilities : array_like
        Their probabilities; they sum to ``1 - p_inf``.
    p_inf : float, default 0
        Probability of an infinite privacy loss.

    Raises
    ------
    ValueError
        If the arrays are empty, of different lengths or not real, a value is not finite, a
        probability is negative or not finite, ``p_inf`` is not in ``[0, 1)``, or the
        probabilities do not sum to ``1 - p_inf`` (within ``1e-9``), or they are no pair's privacy loss:
        ``(1 - p_inf) E[exp(-L)]`` over the finite values must not exceed 1 (within ``1e-9``).

    Examples
    --------
    >>> import fastpld
    >>> mech = fastpld.CustomPMF([1.0, -1.0], [0.75, 0.25 - 1e-6], p_inf=1e-6)
    >>> pld = fastpld.compose(mech, 10)
    """

    def __init__(self, values: ArrayLike, probabilities: ArrayLike, p_inf: float = 0.0) -> None:
        p_inf = V.probability("p_inf", p_inf, open_high=True)
        self._loss = DiscreteLoss(values, probabilities, p_inf)
        given = _real_vector("probabilities", probabilities)  # (DiscreteLoss has checked it)
        total = float(given.sum())
        # as documented: the finite masses and p_inf together make one distribution
        if not abs(total + p_inf - 1.0) <= 1e-9:
            raise ValueError(f"probabilities must sum to 1 - p_inf = {1 - p_inf!r}, got {total!r}")
        # A privacy loss L = log(Q/P) under Q has E[e^-L] = P(Q > 0) <= 1; masses above that are no pair's loss,
        # and the curve they give is no mechanism's (the samplers, the reversed pairs and the dominated chains all
        # take the pair's P for granted).  The slack 1e-9 admits a valid pair's losses and masses rounded to floats.
        minf = self._loss.minus_inf_mass()
        if minf < -1e-9:
            raise ValueError(
                f"values and probabilities are no pair's privacy loss: E[exp(-L)] = {1.0 - minf:.12g} "
                "> 1 (the loss log(Q/P) under Q has E[exp(-L)] = P(Q > 0) <= 1: a loss value below 0 needs mass "
                "above 0 to balance it)")
        self._key = (tuple(self._loss.values.tolist()), tuple(self._loss.probs.tolist()), p_inf)
        # as given, for storing: normalising the normalised masses again can move them by an ulp
        self._given = (_real_vector("values", values).tolist(), given.tolist(), p_inf)

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        return {"add": self._loss, "remove": self._loss}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CustomPMF) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)


# Loss objects are cached per mechanism value: building a subsampled loss computes moments.  They live in
