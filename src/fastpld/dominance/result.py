"""The result of a dominance composition: :class:`DominancePLD`, its bounds from the two chains, and the
width it is asked to reach (:func:`_allowed_width`)."""
from __future__ import annotations

import math

import numpy as np

from .. import _validation as V
from ..curve import Bounds, PrivacyLossDistribution, _pack, _Query

_U = np.finfo(np.float64).eps / 2  # unit roundoff

_REFERENCE_DELTAS = (1e-3, 1e-5, 1e-7, 1e-9)  # where compose_dominance checks the width it reached


def _allowed_width(eps_error: float, rel_error: float | None, eps_lower: float) -> float:
    """The certified width of ``epsilon(delta)`` asked for where its lower bound is ``eps_lower``:
    ``2 eps_error`` (each bound within ``eps_error`` of the estimate), or ``rel_error`` times epsilon
    (each bound within ``rel_error`` of the truth, relative), epsilon taken at least ``_REL_FLOOR``
    (a relative accuracy of an epsilon near 0 asks nothing meaningful)."""
    if rel_error is None:
        return 2.0 * eps_error
    return rel_error * max(eps_lower, _REL_FLOOR)


_REL_FLOOR = 0.01  # epsilons below this are held to rel_error * _REL_FLOOR, absolute


def _rel_factor(d) -> float:
    """``e^r`` of a dominating chain's result ``d`` (its masses' relative rounding), rounded up."""
    return math.exp(d.certificate["log_rel"]) * (1 + 8 * _U)


def _kept_mass(dl) -> float:
    """``M``, the mass a dominated chain's result ``dl`` kept (its PMF is normalised), rounded down."""
    return math.exp(dl.certificate["log_mass"]) * (1 - 8 * _U)


class DominancePLD(PrivacyLossDistribution):
    """A composition certified by dominance: its upper curve comes from a dominating PMF, its
    lower curve from a dominated one, with no epsilon shift (see :mod:`fastpld.dominance`).

    ``directions`` holds the dominating chain's results (as for the other methods: ``stages``,
    ``method``, ``delta_spent``), ``lower_directions`` the dominated chain's.  ``eps_spent`` is 0.
    Bounds per direction, with ``d`` the curve of a finite grid PMF and ``c`` its chain's delta
    charges (truncated tails, wrap-around, round-off: total variation):

        delta(eps) <= p_inf + (1 - p_inf) e^r (d_up(eps) + c_up)
        delta(eps) >= p_inf + (1 - p_inf) (m d_lo(eps) - c_lo)

    where ``m <= 1`` is the mass the dominated chain kept (its PMF is normalised for the FFTs) and
    ``r`` the relative rounding of the dominating chain's masses (leaves and re-discretisations:
    entries within a factor ``e^(+-rel)`` of exact ones compose into such a factor on the curve).
    The estimate is the midpoint of the certified interval.
    """

    _LOWER_CHAIN = True

    def __init__(self, upper, lower, eps_error, delta_error, events, backend):
        super().__init__(upper, eps_error, delta_error, events, backend)
        self.lower_directions = lower
        self._ql = {name: _Query(d.pmf, backend == "native") for name, d in lower.items()}

    rel_error = None  #: the relative accuracy asked (``compose(..., rel_error=)``), or None

    # The hypothesis-testing views (trade-off, TPR, advantage, Gaussian-DP mu) read both chains
    # (fastpld.fdp._DominanceDirection: lower bounds from the dominating chain, upper bounds from the
    # dominated one).  The Renyi view's PMF bounds are written for the coupling certificate's PMF:
    # it is answered by a coupling composition of the same events, made once.
    def _coupling(self) -> PrivacyLossDistribution:
        pld = self.__dict__.get("_coupling_pld")
        if pld is None:
            from ..composition.api import _eps_ladder, compose
            # (at this composition's eps_error; where the coupling refuses it, e.g. an FFT past
            # max_buckets at a large k, at coarser ones: wider views, still certified)
            ladder = _eps_ladder(self.eps_error)
            for i, ee in enumerate(ladder):
                try:
                    pld = compose(list(self.events), eps_error=ee, delta_error=self.delta_error, backend=self.backend,
                                  method="coupling")
                    break
                except ValueError:
                    if i + 1 == len(ladder):
                        raise
            self._coupling_pld = pld
        return pld

    def renyi(self, order) -> Bounds:
        """See :meth:`PrivacyLossDistribution.renyi` (answered by a coupling composition)."""
        return self._coupling().renyi(order)

    def _reference_excess(self, eps_error: float, rel_error: float | None = None) -> float:
        """Largest ratio, over the reference deltas, of the width of ``epsilon(delta)`` between the two
        chains' curves alone to the width asked (:func:`_allowed_width`): the discretisation's share of
        the certified width, which the meshes control (the delta charges add to it where ``delta`` is
        within a few orders of ``delta_error``; they are what ``delta_error`` buys, not the meshes')."""
        # (every reference delta at once per chain: the same arithmetic elementwise)
        d = np.array(_REFERENCE_DELTAS, dtype=np.float64)
        live = np.ones(d.size, dtype=bool)  # (no finite epsilon where some direction's p_inf reaches d)
        up = np.full(d.size, -np.inf)
        lo = np.zeros(d.size)  # (a vacuous lower bound, -inf, is epsilon >= 0: counted as 0)
        for name, dr in self.directions.items():
            pinf = dr.p_inf
            live &= d > pinf * (1 + 1e-9)
            base = (d - pinf) / (1 - pinf) if pinf < 1 else np.zeros(d.size)
            up = np.maximum(up, self._q[name].epsilon(base))
            # (the dominated chain's lost mass is the meshes' doing too: counted)
            m = math.exp(self.lower_directions[name].certificate["log_mass"])
            with np.errstate(divide="ignore"):  # (all mass lost, m = 0: the lower curve is vacuous)
                lo = np.maximum(lo, self._ql[name].epsilon(np.minimum(base / m, 2.0)))
        excess = 0.0
        for i in np.flatnonzero(live):
            if not math.isfinite(up[i]):
                return math.inf
            excess = max(excess, (max(float(up[i]), 0.0) - float(lo[i]))
                         / _allowed_width(eps_error, rel_error, float(lo[i])))
        return excess

    def delta(self, epsilon) -> Bounds:
        """Bounds on ``delta(epsilon)``; ``epsilon`` a float >= 0 or an array of them."""
        eps = V.query_array("epsilon", epsilon, lo=0.0)
        if np.isinf(eps).any():
            raise ValueError("epsilon must be finite")
        lo = up = None
        for name, d in self.directions.items():
            dl = self.lower_directions[name]
            pinf = d.p_inf
            du, pu = self._q[name].delta(eps)
            f = _rel_factor(d)
            u = np.minimum(1.0, (pinf + (1 - pinf) * np.minimum(1.0, f * (du + pu + d.delta_spent))) * (1 + 8 * _U))
            m = _kept_mass(dl)
            dd, pl = self._ql[name].delta(eps)
            l = (pinf + (1 - pinf) * np.maximum(0.0, m * (dd - pl) - dl.delta_spent)) * (1 - 8 * _U)
            lo = l if lo is None else np.maximum(lo, l)
            up = u if up is None else np.maximum(up, u)
        return self._sided(_pack(lo, 0.5 * (lo + up), up, np.ndim(epsilon) == 0), 0.0, 1.0)

    def epsilon(self, delta) -> Bounds:
        """Bounds on ``epsilon(delta)`` (the smallest eps with ``delta(eps) <= delta``), clipped at 0.

        Raises ``ValueError`` if ``delta`` is outside ``(0, 1]`` or too small to certify a finite
        upper bound (at or below the mass at infinity plus the delta charges).
        """
        dq = V.query_array("delta", delta, lo=0.0, hi=1.0, lo_open=True)
        one = dq >= 1.0
        lo = up = None
        for name, d in self.directions.items():
            dl = self.lower_directions[name]
            q, ql = self._q[name], self._ql[name]
            pinf = d.p_inf
            if (dq[~one] <= pinf).any():
                raise ValueError(
                    f"delta={float(np.min(dq[~one])):.3g} is at or below the probability of an infinite privacy "
                    f"loss ({pinf:.3g}): no finite epsilon exists")
            if pinf >= 1.0:
                z = np.zeros(dq.shape)
                lo, up = (z if a is None else a for a in (lo, up))
                continue
            base = (dq - pinf) / (1 - pinf)
            x_up = base / _rel_factor(d) - d.delta_spent
            x_up = x_up - q.bracket_pad(np.maximum(x_up, 0.0))
            if (x_up[~one] <= 0).any():
                raise ValueError(
                    f"delta={float(np.min(dq[~one])):.3g} is too small to certify: the composition spent a delta error "
                    f"of {d.delta_spent:.3g}; compose with a smaller delta_error")
            u = q.epsilon(x_up)
            u = u + q.eps_pad(u)
            m = _kept_mass(dl)
            with np.errstate(divide="ignore"):  # (all mass lost, m = 0: the lower bound is vacuous, 0)
                l = ql.epsilon(np.minimum((base + dl.delta_spent) / m + ql.pad, 2.0))
            l = l - ql.eps_pad(l)
            lo = l if lo is None else np.maximum(lo, l)
            up = u if up is None else np.maximum(up, u)
        lo = np.where(one, 0.0, np.maximum(lo, 0.0))
        up = np.where(one, 0.0, np.maximum(up, 0.0))
        lo = np.minimum(lo, up)
        return self._sided(_pack(lo, 0.5 * (lo + up), up, np.ndim(delta) == 0), 0.0, np.inf)
