"""Base classes: privacy losses (discrete and continuous) and mechanisms.

What a privacy loss and a mechanism are, and what each must give: the package docstring
(:mod:`fastpld.mechanisms`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping

import numpy as np

from .. import _validation as V
from .._lazy import lazy_module
from .quadrature import _GL_CACHE, _gl_panels, _gl_panels_16_8
from .tails import chernoff_tail_bound, chernoff_tail_quantile

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

special = lazy_module("scipy.special")

__all__ = ["PrivacyLoss", "DiscreteLoss", "ContinuousLoss", "Mechanism"]

_U = np.finfo(np.float64).eps / 2  # unit round-off of float64
_EXACT_PAIR_ATOMS = 64  # (DiscreteLoss.minus_inf_mass: at 60 digits for at most this many atoms)


# --------------------------------------------------------------------------------------
# Privacy losses
# --------------------------------------------------------------------------------------
class PrivacyLoss:
    """Distribution of a privacy loss random variable (one direction).

    Attributes
    ----------
    p_inf : float
        Probability that the loss is ``+inf`` (e.g. the ``delta`` of an
        (eps, delta)-DP mechanism).  Every other method describes the finite
        part, conditioned on being finite.
    support : tuple of float
        Bounds ``(lo, hi)`` of the finite part (may be infinite).
    psg_params : tuple or None
        ``(q, v, sd, remove)`` when the loss is one direction of a Poisson-subsampled
        Gaussian (:attr:`SubsampledLoss.psg_params`): the arguments of the compiled
        subsampled-Gaussian kernels (``fastpld._kernels.psg_*``) that discretize it;
        ``None`` for every other loss.
    """

    p_inf: float = 0.0
    support: tuple = (-math.inf, math.inf)
    is_discrete: bool = False
    psg_params: tuple[float, float, float, bool] | None = None

    def log_mgf(self, s: np.ndarray) -> np.ndarray:
        """Upper bound on ``log E[exp(s Y)]`` of the finite part (``+inf`` if unknown)."""
        raise NotImplementedError

    def mean(self) -> float:
        raise NotImplementedError

    def std(self) -> float:
        raise NotImplementedError
    # Chernoff tail bounds ------------------------------------------------------------
    def tail_bound(self, count: int, x: float, *, upper: bool = True) -> float:
        """Rigorous bound on ``Pr[Y_1 + ... + Y_count >= x]`` (or ``<= x`` if ``upper=False``).

        See :func:`fastpld.mechanisms.tails.chernoff_tail_bound`.
        """
        return chernoff_tail_bound(self, count, x, upper=upper)

    def tail_quantile(self, count: int, tail: float, *, upper: bool = True) -> float:
        """Smallest ``x`` (largest if ``upper=False``) with ``tail_bound(count, x) <= tail``.

        See :func:`fastpld.mechanisms.tails.chernoff_tail_quantile`.
        """
        return chernoff_tail_quantile(self, count, tail, upper=upper)


def _real_vector(name, value):
    """``value`` as a flat float64 array, or ``ValueError`` naming ``name``."""
    try:
        raw = np.asarray(value)
        if raw.dtype.kind not in "iufO":  # no bools, complex numbers or strings
            raise TypeError
        return np.asarray(raw, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of real numbers, got {value!r}") from None


class DiscreteLoss(PrivacyLoss):
    """A privacy loss with finitely many finite values (plus mass at ``+inf``).

    ``p_minf``: the canonical pair's ``P``-mass at ``L = -inf``, ``1 - E[e^-L]``, where the mechanism knows it
    exactly (pure DP and randomized response: 0, approximate DP: ``delta``); ``None``: computed from the floats
    (:meth:`minus_inf_mass`), whose rounding of the mechanism's masses leaves ~1e-16 of it where there is none.
    """

    is_discrete = True
    p_minf = None
    _minf = None  # (minus_inf_mass, computed once)

    def __init__(self, values: ArrayLike, probabilities: ArrayLike, p_inf: float = 0.0,
                 p_minf: float | None = None) -> None:
        v = _real_vector("values", values)
        p = _real_vector("probabilities", probabilities)
        if v.size == 0 or v.shape != p.shape:
            raise ValueError("values and probabilities must be non-empty arrays of the same length")
        if not np.all(np.isfinite(v)):
            raise ValueError("values must be finite (put mass at +infinity into p_inf)")
        if not np.all(np.isfinite(p)):
            raise ValueError("probabilities must be finite (not NaN or infinite)")
        if (p < 0).any():
            raise ValueError("probabilities must be >= 0")
        total = p.sum()
        if not (abs(total - 1.0) <= 1e-9 or (p_inf > 0 and abs(total + p_inf - 1.0) <= 1e-9)):
            raise ValueError(f"probabilities must sum to 1 (or to 1 - p_inf), got {V.show(total)}")
        keep = p > 0
        v, p = v[keep], p[keep]
        order = np.argsort(v, kind="stable")
        self.values = v[order]
        self.probs = p[order] / p.sum()
        self.p_inf = float(p_inf)
        if p_minf is not None:
            self.p_minf = float(p_minf)
        self.support = (float(self.values[0]), float(self.values[-1]))

    def minus_inf_mass(self) -> float:
        """The canonical pair's ``P``-mass at ``L = -inf``, ``1 - (1 - p_inf) sum p e^-v``: :attr:`p_minf` where the
        mechanism knows it, else at 60 digits (``decimal``: the floats exactly, ``exp`` correctly rounded), rounded
        once, for up to ``_EXACT_PAIR_ATOMS`` atoms (in float64 the difference cancels to ~u absolute: a mass of 0
        came out 1.1e-16 -- an atom the mechanism has not, which a lower bound counted -- and one of 1e-12 3e-6
        relative low, which an upper bound lost; both found by the exact-oracle audit of the subsampled discrete
        losses), by ``logsumexp`` above.  Negative: the values and masses are no pair's loss (``-inf`` where
        ``E[e^-L]`` overflows)."""
        if self.p_minf is not None:
            return self.p_minf
        if self._minf is None:
            if self.values.size <= _EXACT_PAIR_ATOMS:
                import decimal

                with decimal.localcontext() as ctx:
                    ctx.prec = 60
                    try:
                        tot = sum((decimal.Decimal(float(p)) * (-decimal.Decimal(float(x))).exp()
                                   for x, p in zip(self.values, self.probs) if p > 0), decimal.Decimal(0))
                        self._minf = float(1 - (1 - decimal.Decimal(self.p_inf)) * tot)
                    except decimal.Overflow:  # (e^-v past decimal's range: far more than 1)
                        self._minf = -math.inf
            else:
                with np.errstate(divide="ignore"):
                    lq = np.log(self.probs) + math.log1p(-self.p_inf)
                self._minf = 1.0 - float(np.exp(special.logsumexp(lq - self.values)))
        return self._minf

    def log_mgf(self, s):
        s = np.asarray(s, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):  # s v beyond the float range: +-inf, the right limit
            out = special.logsumexp(np.multiply.outer(s, self.values), b=self.probs, axis=-1)
        return np.where(np.isnan(out), np.inf, out)  # (inf - inf inside: unknown, so no bound)

    def mean(self) -> float:
        return float(np.dot(self.values, self.probs))

    def std(self) -> float:
        m = self.mean()
        return float(math.sqrt(max(np.dot((self.values - m) ** 2, self.probs), 0.0)))

    def __repr__(self):
        return f"DiscreteLoss(n={self.values.size}, p_inf={self.p_inf})"


def _rel_of_log(x):
    """A relative error from a bound ``x`` on the log of a ratio (first-order error terms summed, times
    ``1 + 1e-6``): ``x (1 + x)`` for ``x < 1/2``, else ``inf``."""
    x = np.asarray(x, dtype=np.float64) * (1 + 1e-6)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(x < 0.5, x * (1 + x), np.inf)


class ContinuousLoss(PrivacyLoss):
    """A privacy loss given by its CDF (possibly with atoms).

    Subclasses implement :meth:`cdf`, :meth:`sf`, :meth:`pdf` (density of the
    continuous part, used only for the round-off certificate) and
    :meth:`log_mgf`; they may override :meth:`partial_mean` with a closed form.
    ``atoms`` lists the locations of point masses.
    """

    atoms: tuple = ()
    #: Relative accuracy of ``cdf``/``sf`` (in the tail region that matters),
    #: used by the round-off certificate of the discretisation.
    cdf_rel_error: float = 1e-12

    def cdf(self, t):
        raise NotImplementedError

    def sf(self, t):
        raise NotImplementedError

    def pdf(self, t):
        raise NotImplementedError

    def pdf_error(self, t, dt):
        """A bound on the relative error of :meth:`pdf` at the points ``t``, against the exact density at any point
        within ``dt`` of each (``dt``: how far the dominance leaf's quadrature nodes lie from the exact ones;
        docs/dominance.md, "The density's rounding").  The library's losses derive it from their formulas; this
        default, for a custom density, is its declared ``cdf_rel_error`` (its nodes' shifts are not charged)."""
        return np.full(np.shape(t), float(self.cdf_rel_error))

    def cdf_shift(self, tmax: float) -> float:
        """Bound on the *position* error of :meth:`cdf`/:meth:`sf` for ``|t| <= tmax`` (certificate).

        The computed values at ``t`` are within ``cdf_rel_error`` (relative) of the exact ones at
        some point within this distance of ``t``.  0 for losses whose argument is used as given;
        losses that transform ``t`` first (the subsampled ones) round it, and near a steep CDF (a
        near-atom) that rounding is not a small relative error of the value.
        """
        return 0.0

    def atom_mass(self, y: float):
        """``(mass, error bound)`` of the atom at ``y`` from the loss's own closed forms, or ``None`` (the leaves then
        take the jump of :meth:`cdf` and :meth:`sf`, whose error is ``cdf_rel_error`` of the smaller tails)."""
        return None

    def end_mass(self, t, side: int):
        """The continuous part's mass between ``t`` and the support's end on ``side`` (0: the lower end,
        ``Pr[lo < Y < t]``; 1: the upper one, ``Pr[t < Y < hi]``), atoms excluded, with the relative accuracy of
        :meth:`cdf` for ``t`` inside the support; ``None`` where the loss does not provide it (its leaves then
        count an atom at that end into the mass near it, only more pessimistic).  Losses with an atom at an end
        of their support implement it (Laplace: its CDF minus the atom would lose the small mass next to it)."""
        return None

    def partial_mean(self, edges: np.ndarray) -> tuple[float, float]:
        """``E[Y; edges[0] < Y <= edges[-1]]`` and an error bound.

        Generic version: Stieltjes integration by parts
        ``int t dF = b F(b) - a F(a) - int_a^b F(t) dt`` with Gauss-Legendre on
        the panels given by ``edges`` (the discretisation's own buckets, so the
        panels are fine where the mass is).  Panels whose 8- and 16-point rules
        disagree are split adaptively; the remaining disagreement, inflated
        tenfold, is the error bound.
        """
        return self._partial_moments(edges)[:2]

    def _partial_moments(self, edges, second=False):
        """:meth:`partial_mean` and, if ``second``, ``int_a^b t F(t) dt`` on the panels ``edges``.

        The second integral reuses the 16-point CDF values of the first level
        (same nodes, same arithmetic as a separate Gauss-Legendre pass); it is
        ``None`` when atoms split the panels.
        """
        edges = np.asarray(edges, dtype=np.float64)
        a, b = float(edges[0]), float(edges[-1])
        # split panels at atoms and at finite support ends, so that F is analytic on each panel:
        # across a support end (e.g. log(1-q) of a subsampled loss) F is C-infinity but not
        # analytic, and the 8- and 16-point rules can agree on a wrong value (error under-estimated)
        breaks = [x for x in (*self.atoms, *self.support) if math.isfinite(x) and a < x < b]
        pts = np.unique(np.concatenate([edges, breaks]))
        lo, hi = pts[:-1], pts[1:]
        total = 0.0
        err = 0.0
        tol = 1e-15
        tf = None
        for level in range(8):
            if level == 0 and second and pts.size == edges.size:
                i16, nodes, vals = _gl_panels(self.cdf, lo, hi, 16, keep=True)
                half = 0.5 * (hi - lo)
                tf = float(np.sum(half * ((nodes * vals) @ _GL_CACHE[16][1])))
                i8 = _gl_panels(self.cdf, lo, hi, 8)
            else:
                i16, i8 = _gl_panels_16_8(self.cdf, lo, hi)
            d = np.abs(i16 - i8)
            # (absolute tolerance per unit length once b - a > 1: a fixed total would ask for accuracy
            # below the round-off of the sum, 16 u (|a| + |b| + (b - a)), and split every panel)
            bad = d > tol * np.maximum(hi - lo, 1e-300) / min(max(b - a, 1e-300), 1.0) * 1e3
            if level == 7 or not bad.any():
                total += float(i16.sum())
                err += float(d.sum())
                break
            total += float(i16[~bad].sum())
            err += float(d[~bad].sum())
            lo, hi = lo[bad], hi[bad]
            sub = np.linspace(0.0, 1.0, 5)
            pts2 = lo[:, None] + (hi - lo)[:, None] * sub[None, :]
            lo, hi = pts2[:, :-1].ravel(), pts2[:, 1:].ravel()
        fa, fb = float(self.cdf(np.array([a]))[0]), float(self.cdf(np.array([b]))[0])
        val = b * fb - a * fa - total
        err = 10.0 * err + 16 * _U * (abs(b) + abs(a) + abs(total) + (b - a))
        return float(val), float(err), tf

    def mean(self) -> float:
        raise NotImplementedError

    def std(self) -> float:
        raise NotImplementedError


class Mechanism:
    """Base class: a mechanism knows its privacy losses per neighbouring direction."""

    def privacy_losses(self) -> Mapping[str, PrivacyLoss]:
        """The privacy loss per neighbouring direction, ``{"add": loss, "remove": loss}``.

        Symmetric mechanisms return the same object for both (it is then composed once); equal
        mechanisms (frozen dataclasses, by value) share one loss object through the loss cache.
        """
        raise NotImplementedError

    def _components(self):
        """``None``, or the ``(mechanism, count)`` events whose composition this mechanism stands for
        (:func:`fastpld.compose` composes those instead; :class:`fastpld.RandomAllocation` with
        ``num_selected > 1``)."""
        return None

    # frozen dataclass subclasses provide __eq__/__hash__ for merging identical events
