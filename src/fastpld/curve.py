"""The composed result: privacy curve queries with certified bounds.

For one neighbouring direction the composed privacy loss is ``+inf`` with
probability ``p_inf`` and otherwise has finite part ``Y``; we hold a grid PMF
``Z`` with ``|Y - Z| <=_{delta_s} eps_s``.  Then, writing
``d(eps) = E[(1 - e^(eps - Z))_+]``,

    delta(eps) <= p_inf + (1 - p_inf) (d(eps - eps_s) + delta_s)
    delta(eps) >= p_inf + (1 - p_inf) (d(eps + eps_s) - delta_s)

(coupling lemma, Section 2.2 of the paper).  ``epsilon(delta)`` inverts these
monotone bounds.  With both directions (add/remove neighbouring) every bound is
the maximum over directions.  Sums are evaluated with a stable recursion on the
uniform grid (no ``e^eps`` overflow at eps ~ 1000) and padded by their
round-off.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import _kernels
from . import _validation as V
from ._lazy import lazy_module

signal = lazy_module("scipy.signal")

__all__ = ["Bounds", "PrivacyLossDistribution", "StageInfo", "DirectionResult"]

_U = np.finfo(np.float64).eps / 2


class Bounds(NamedTuple):
    """Certified ``lower <= true <= upper`` and a point ``estimate`` between them."""

    lower: np.ndarray | float
    estimate: np.ndarray | float
    upper: np.ndarray | float


class StageInfo(NamedTuple):
    """One step of a plan: a leaf (discretisation) or a node (FFT convolution)."""

    kind: str  #: "leaf" or the node's label
    compositions: int  #: number of mechanism copies this step represents
    mesh: float  #: bucket width h
    window: tuple  #: (lowest, highest) value held
    buckets: int  #: buckets discretised (leaf) or FFT length (node)
    instances: int  #: how often the step's output occurs in the final composition
    delta_truncation_or_wrap: float  #: total variation charged (truncation for leaves, wrap-around for nodes)
    delta_roundoff: float  #: total variation charged for round-off
    variance_proxy: float  #: sum of squared coupling ranges contributed (leaves)
    precision: str  #: "float64" or "longdouble"


@dataclass(frozen=True)
class DirectionResult:
    pmf: object  # GridPMF (float64)
    p_inf: float
    eps_spent: float
    delta_spent: float
    stages: tuple
    certificate: dict
    method: str


class _Query:
    """Stable evaluation of ``d(eps) = sum_{v_i > eps} p_i (1 - e^(eps - v_i))`` and its inverse."""

    def __init__(self, pmf, native=False):
        p = np.asarray(pmf.probs, dtype=np.float64)
        if (p < 0).any():  # (else a view: kept answers hold one copy of the masses)
            p = np.maximum(p, 0.0)
        # (the first and last non-zero entries: two argmax passes over a mask, ~3x faster than flatnonzero)
        nzm = p != 0
        first, last = int(nzm.argmax()), p.size - 1 - int(nzm[::-1].argmax())
        if not nzm[first]:
            raise ValueError("the composed PMF holds no mass")
        p = p[first: last + 1]
        self.h = float(pmf.mesh)
        self.v0 = float(pmf.offset) + first * self.h
        self.n = p.size
        self.p = p
        # S1[j] = sum_{i >= j} p_i ; T[j] = sum_{i >= j} p_i e^{-(i-j) h}; index n is the empty sum
        # (dgrid: d at grid points v_j, sum_{i > j}); native: one pass of the compiled kernel
        self.native = native
        if native:
            self.S1, self.T, self.dgrid = _kernels.query_tables(p, math.exp(-self.h))
        else:  # the numpy reference (same recursions)
            f = math.exp(-self.h)
            self.S1 = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
            self.T = np.concatenate([signal.lfilter([1.0], [1.0, -f], p[::-1])[::-1], [0.0]])
            self.dgrid = np.maximum(self.S1[1:] - f * self.T[1:], 0.0)
        # -dgrid is non-decreasing, the order searchsorted needs; made once, not per query
        # (negating ~1e5 buckets was most of an epsilon query's cost)
        self.neg_dgrid = -self.dgrid
        self.pad = 4 * (self.n + 4) * _U

    def values(self, j):
        return self.v0 + self.h * j

    def delta(self, eps):
        """``d(eps)`` and a round-off pad, vectorised."""
        eps = np.asarray(eps, dtype=np.float64)
        if self.native and _kernels._core is not None:
            # (the same operations per element, compiled: a numpy query of two points took ~18 us, most of the
            # reversal bound's cost in an epsilon query, DominancePLD._epsilon_deferred)
            d, pad = np.empty(eps.shape), np.empty(eps.shape)
            _kernels._core.query_delta(np.ascontiguousarray(self.p), self.S1, self.T, self.v0, self.h, self.pad,
                                       np.ascontiguousarray(eps).reshape(-1), d.reshape(-1), pad.reshape(-1))
            return d, pad
        # J = first index with v_J > eps (clipped as a float first: a huge eps must not wrap the int cast)
        with np.errstate(over="ignore"):  # (an eps beyond the float range of a fine grid: clipped to n)
            J = np.clip(np.floor((eps - self.v0) / self.h), -1, self.n).astype(np.int64) + 1
        J = np.minimum(J, self.n)
        vJ = self.values(J)
        with np.errstate(over="ignore", under="ignore"):
            w = np.exp(np.minimum(eps - vJ, 0.0))
        d = self.S1[J] - w * self.T[J]
        d = np.maximum(d, 0.0)
        # cumulative-sum round-off, plus the absolute error ~u(|eps| + |v|) of the exponent
        # eps - v_J and of the bucket boundary J (a term p_j (1 - e^(eps - v_j)) of that size
        # may be misclassified); it matters at eps ~ 1000 on short grids
        err = 8 * _U * (np.abs(eps) + abs(self.v0) + self.h * self.n + 1.0)
        pp = self.__dict__.get("_pp")
        if pp is None:  # (kept: a copy of the whole grid per query otherwise)
            pp = self._pp = np.concatenate([[0.0], self.p, [0.0]])  # pp[j + 1] = p_j, zero outside the grid
        near = pp[J] * (eps - self.values(J - 1) <= err) + pp[J + 1] * (vJ - eps <= err)
        pad = self.pad * self.S1[J] + err * (w * self.T[J] + near)
        return d, pad

    def eps_pad(self, sol):
        """Bound on the absolute round-off of a solution of :meth:`epsilon` (grid values, log, sum)."""
        sol = np.where(np.isfinite(sol), np.abs(sol), 0.0)
        return 8 * _U * (sol + abs(self.v0) + self.h * self.n + 2.0)

    def bracket_pad(self, x):
        """Round-off pad of ``d`` on the grid interval where ``d = x`` (and above it).

        The cumulative sums have error relative to their own value, so the pad
        is ``4 (n + 4) u S1[j - 1]`` for the bracket ``(v_{j-1}, v_j]`` of the
        solution; for any smaller ``x`` the bracket only moves up, where
        ``S1`` is smaller, so the pad stays valid.
        """
        x = np.asarray(x, dtype=np.float64)
        if self.native and _kernels._core is not None:  # (the same operations, compiled: one call, no temporaries)
            out = np.empty(x.shape, dtype=np.float64)
            _kernels._core.query_bracket_pad(self.neg_dgrid, self.S1, self.pad, np.ascontiguousarray(x).reshape(-1),
                                             out.reshape(-1))
            return out
        j = np.searchsorted(self.neg_dgrid, -x, side="left")
        jj = np.clip(j - 1, 0, self.n - 1)
        return self.pad * self.S1[jj]

    def lower_pad(self, x):
        """Pad ``P`` for a lower bound: the computed ``d`` is within ``P`` of the exact one at the
        solution of ``d = x + P`` (so the exact ``d`` there is at least ``x``).

        :meth:`bracket_pad` bounds the round-off of ``d`` on the bracket of a solution by the
        tail mass ``S1`` there (relative error of the suffix sums, docs/roundoff.md section 5);
        solving for the larger ``x + P`` moves the bracket down, to a larger ``S1``, so ``P`` is
        the fixed point ``P >= bracket_pad(x + P)``, reached in a step or two (``P`` is relative
        ``~1e-11`` to ``x``).  Where it is not reached, the whole mass's pad ``pad * S1[0]``
        (which bounds every bracket's) is used.
        """
        x = np.asarray(x, dtype=np.float64)
        P = self.bracket_pad(x)
        ok = np.zeros(x.shape, dtype=bool)
        for _ in range(4):
            # (x + P) rounds up at most by u relative: one more u x on the pad covers it
            P2 = self.bracket_pad(x + P) + 2 * _U * np.abs(x)
            ok = P2 <= P
            if ok.all():
                break
            P = np.where(ok, P, P2)
        return np.where(ok, P, np.maximum(P, self.pad * max(1.0, float(self.S1[0])) + 2 * _U * np.abs(x)))

    def upper_solution(self, x):
        """``(x', u)``: ``x' = x - bracket_pad(max(x, 0))`` and ``u = e + eps_pad(e)``, ``e = epsilon(x')``: an upper
        bound's solution (:meth:`fastpld.dominance.DominancePLD.epsilon`; the caller checks ``x' > 0``).  Compiled
        in one call (``_core.query_upper``, the same operations per element); these methods are its reference."""
        x = np.asarray(x, dtype=np.float64)
        if self.native and _kernels._core is not None:
            x2, u = np.empty(x.shape, dtype=np.float64), np.empty(x.shape, dtype=np.float64)
            _kernels._core.query_upper(self.neg_dgrid, self.S1, self.T, self.v0, self.h, self.pad,
                                       np.ascontiguousarray(x).reshape(-1), x2.reshape(-1), u.reshape(-1))
            return x2, u
        x2 = x - self.bracket_pad(np.maximum(x, 0.0))
        u = self.epsilon(x2)
        return x2, u + self.eps_pad(u)

    def lower_solution(self, x):
        """``l - eps_pad(l)``, ``l = epsilon(min(x + lower_pad(x), 2))``: a lower bound's solution
        (:meth:`fastpld.dominance.DominancePLD.epsilon`).  Compiled in one call (``_core.query_lower``, the same
        operations per element); these methods are its reference."""
        x = np.asarray(x, dtype=np.float64)
        if self.native and _kernels._core is not None:
            out = np.empty(x.shape, dtype=np.float64)
            _kernels._core.query_lower(self.neg_dgrid, self.S1, self.T, self.v0, self.h, self.pad,
                                       np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
            return out
        l = self.epsilon(np.minimum(x + self.lower_pad(x), 2.0))
        return l - self.eps_pad(l)

    def epsilon(self, x):
        """Smallest ``eps`` with ``d(eps) <= x`` (``-inf`` if ``x >= 1``)."""
        x = np.asarray(x, dtype=np.float64)
        out = np.empty(x.shape, dtype=np.float64)
        if self.native and _kernels._core is not None:
            # (the same operations per element, compiled: ~40 us of numpy temporaries and error states a query
            # otherwise, six queries an answer at rel_error, on the calling thread after the chains)
            _kernels._core.query_epsilon(self.neg_dgrid, self.S1, self.T, self.v0, self.h,
                                         np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
            return out
        # d is non-increasing along the grid; dgrid[j] = d(v_j)
        j = np.searchsorted(self.neg_dgrid, -x, side="left")  # first j with d(v_j) <= x
        # eps lies in (v_{j-1}, v_j] (or below v_0 when j == 0); solve S1_j - e^{eps - v_j} T_j = x
        jj = np.clip(j, 0, self.n - 1)
        S1 = self.S1[jj]
        T = self.T[jj]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (S1 - x) / T
            sol = self.values(jj) + np.log(ratio)
        lo_edge = np.where(jj > 0, self.values(jj - 1), -np.inf)
        sol = np.where(np.isfinite(sol), sol, self.values(jj))
        sol = np.clip(sol, lo_edge, self.values(jj))
        out[...] = sol
        out = np.where(x >= self.S1[0], -np.inf, out)
        out = np.where(x <= 0, self.values(self.n - 1), out)
        return out


class PrivacyLossDistribution:
    """A composed privacy loss distribution with certified bounds.

    Attributes
    ----------
    eps_error, delta_error : float
        The requested error budget.
    directions : dict
        Per neighbouring direction (``"remove"``, and ``"add"`` when the
        mechanisms are asymmetric): the grid PMF, mass at infinity, the eps and
        delta errors actually spent, the plan's stages and the certificate.
    """

    _LOWER_CHAIN = False  # (a dominance composition: its lower chain composes dominated_loss)

    def __init__(self, directions, eps_error, delta_error, events, backend, queries=None):
        self.directions = directions
        self.eps_error = eps_error
        self.delta_error = delta_error
        self.events = events
        self._sides = _certified_sides((loss for m, _ in events for loss in m.privacy_losses().values()),
                                       self._LOWER_CHAIN)
        self.backend = backend
        # the native backend answers queries with the compiled kernels, the numpy backend with numpy
        # (``queries``: tables already built for these results, by name -- those the composition built where the
        # chain ran; the same tables)
        queries = queries or {}
        self._q = {name: queries.get(name) or _Query(d.pmf, backend == "native") for name, d in directions.items()}

    # diagnostics ---------------------------------------------------------------------
    @property
    def num_buckets(self) -> int:
        """Total buckets processed (discretised points plus FFT lengths), all directions."""
        return int(sum(s.buckets for d in self.directions.values() for s in d.stages))

    @property
    def stages(self) -> tuple:
        """Stages of the plan of the first direction (see :class:`StageInfo`)."""
        return next(iter(self.directions.values())).stages

    @property
    def method(self) -> str:
        """Name of the plan that ran for the first direction (e.g. ``"two_stage"``, ``"recursive(16)"``)."""
        return next(iter(self.directions.values())).method

    @property
    def eps_spent(self) -> float:
        """The epsilon error the certificate spent (at most ``eps_error``), the maximum over directions."""
        return max(d.eps_spent for d in self.directions.values())

    @property
    def delta_spent(self) -> float:
        """The delta error the certificate spent (at most ``delta_error``), the maximum over directions."""
        return max(d.delta_spent for d in self.directions.values())

    def __repr__(self):
        return (f"PrivacyLossDistribution(method={self.method!r}, directions={tuple(self.directions)}, "
                f"eps_spent={self.eps_spent:.3g}, delta_spent={self.delta_spent:.3g}, buckets={self.num_buckets})")

    # queries -------------------------------------------------------------------------
    def delta(self, epsilon: float | np.ndarray) -> Bounds:
        """Certified bounds on the privacy curve ``delta(epsilon)`` of the composition.

        With ``Z`` the composed grid PMF of a direction, ``p_inf`` its mass at infinity and
        ``d_Z(eps) = E[(1 - e^(eps - Z))_+]``, the bounds are
        ``p_inf + (1 - p_inf) (d_Z(eps + eps_spent) - delta_spent) <= delta(eps) <=
        p_inf + (1 - p_inf) (d_Z(eps - eps_spent) + delta_spent)``, padded outward by the round-off
        of the sums, and the maximum over the neighbouring directions is taken.

        Parameters
        ----------
        epsilon : float or array_like of float
            One or more finite values ``>= 0``.

        Returns
        -------
        Bounds
            ``lower <= delta(epsilon) <= upper`` and an ``estimate`` between them (``d_Z(epsilon)``);
            floats for a scalar ``epsilon``, arrays of its shape otherwise.

        Raises
        ------
        ValueError
            If ``epsilon`` is negative, infinite, NaN or not a number.

        Examples
        --------
        >>> import fastpld
        >>> pld = fastpld.compose(fastpld.Gaussian(2.0), 10)
        >>> b = pld.delta(1.0)
        >>> b.lower <= b.estimate <= b.upper
        True
        """
        eps = V.query_array("epsilon", epsilon, lo=0.0)
        if np.isinf(eps).any():
            raise ValueError("epsilon must be finite")
        lo = est = up = None
        for name, d in self.directions.items():
            q = self._q[name]
            es, ds, pinf = d.eps_spent, d.delta_spent, d.p_inf
            if q.native:  # the same bounds in one compiled pass
                l, e, u = (x.reshape(eps.shape) for x in _kernels.delta_bounds(
                    q.p, q.v0, q.h, q.S1, q.T, q.pad, es, ds, pinf, eps.ravel()))
                lo = l if lo is None else np.maximum(lo, l)
                up = u if up is None else np.maximum(up, u)
                est = e if est is None else np.maximum(est, e)
                continue
            du, pu = q.delta(eps - es)
            dl, pl = q.delta(eps + es)
            de, _ = q.delta(eps)
            # (1 +- 8u): rounding of the p_inf combination, outward
            u = np.minimum(1.0, (pinf + (1 - pinf) * np.minimum(1.0, du + pu + ds)) * (1 + 8 * _U))
            l = (pinf + (1 - pinf) * np.maximum(0.0, dl - pl - ds)) * (1 - 8 * _U)
            e = np.clip(pinf + (1 - pinf) * de, l, u)
            lo = l if lo is None else np.maximum(lo, l)
            up = u if up is None else np.maximum(up, u)
            est = e if est is None else np.maximum(est, e)
        est = np.clip(est, lo, up)
        return self._sided(_pack(lo, est, up, np.ndim(epsilon) == 0), 0.0, 1.0)

    def epsilon(self, delta: float | np.ndarray) -> Bounds:
        """Certified bounds on ``epsilon(delta)``, the smallest ``eps >= 0`` with ``delta(eps) <= delta``.

        The bounds invert the monotone bounds of :meth:`delta`: ``upper`` is where the upper curve
        falls to ``delta``, ``lower`` where the lower curve does (both clipped at 0; ``epsilon(1)`` is
        0).  The ``upper`` bound is the number to quote as the privacy guarantee.

        Parameters
        ----------
        delta : float or array_like of float
            One or more values in ``(0, 1]``.

        Returns
        -------
        Bounds
            ``lower <= epsilon(delta) <= upper`` and an ``estimate`` between them; floats for a scalar
            ``delta``, arrays of its shape otherwise.

        Raises
        ------
        ValueError
            If ``delta`` is outside ``(0, 1]`` or not a number, or too small to certify a finite upper
            bound: at or below the mass at infinity, or not above it by more than the delta error the
            composition spent (compose with a smaller ``delta_error``).

        Examples
        --------
        >>> import fastpld
        >>> pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.01), 1000)
        >>> b = pld.epsilon(1e-5)
        >>> 0 < b.lower <= b.estimate <= b.upper
        True
        """
        dq = V.query_array("delta", delta, lo=0.0, hi=1.0, lo_open=True)
        # delta(eps) <= 1 for every eps: epsilon(1) = 0 exactly, whatever the distribution
        one = dq >= 1.0
        lo = est = up = None
        for name, d in self.directions.items():
            q = self._q[name]
            es, ds, pinf = d.eps_spent, d.delta_spent, d.p_inf
            if (dq[~one] <= pinf).any():
                raise ValueError(
                    f"delta={float(np.min(dq[~one])):.3g} is at or below the probability of an infinite privacy "
                    f"loss ({pinf:.3g}): no finite epsilon exists"
                )
            if pinf >= 1.0:  # only delta = 1 queries remain (answered 0 below)
                z = np.zeros(dq.shape)
                lo, est, up = (z if a is None else a for a in (lo, est, up))
                continue
            base = (dq - pinf) / (1 - pinf)
            x_up = base - ds
            x_up = x_up - q.bracket_pad(np.maximum(x_up, 0.0))
            if (x_up[~one] <= 0).any():
                raise ValueError(
                    f"delta={float(np.min(dq[~one])):.3g} is too small to certify: the composition spent a delta error of "
                    f"{ds:.3g}; compose with a smaller delta_error"
                )
            u = q.epsilon(x_up)
            u = u + es + q.eps_pad(u)
            # (a pad relative to the tail mass at the solution, not to the whole mass: at tiny delta
            # an absolute pad of 4 (n + 4) u is larger than delta itself)
            x_lo = base + ds
            l = q.epsilon(x_lo + q.lower_pad(x_lo))
            l = l - es - q.eps_pad(l)
            e = q.epsilon(base)
            lo = l if lo is None else np.maximum(lo, l)
            up = u if up is None else np.maximum(up, u)
            est = e if est is None else np.maximum(est, e)
        lo = np.where(one, 0.0, np.maximum(lo, 0.0))
        up = np.where(one, 0.0, np.maximum(up, 0.0))
        est = np.clip(est, lo, up)
        return self._sided(_pack(lo, est, up, np.ndim(delta) == 0), 0.0, np.inf)


    # the same answers in the terms of attacks (fastpld.fdp; derivations in docs/fdp.md) -------------
    def tradeoff(self, alpha) -> Bounds:
        """Certified bounds on the trade-off curve ``beta(alpha)`` (f-DP), vectorised.

        ``beta(alpha)`` is the smallest type-II error (1 - true-positive rate) of
        any test telling the outputs on two neighbouring datasets apart at
        type-I error (false-positive rate) ``alpha``, minimised over the
        neighbouring directions.  ``alpha`` is a float or array in ``[0, 1]``.
        See :mod:`fastpld.fdp`.
        """
        from . import fdp
        b = fdp.tradeoff(self, alpha)
        # (beta falls as the privacy loss grows: its upper bound is the optimistic side; beta <= 1 - alpha)
        return self._sided(b, 0.0, 1.0 - np.asarray(alpha, dtype=np.float64), reverse=True)

    def tpr(self, fpr) -> Bounds:
        """Certified bounds on the best attack's true-positive rate ``1 - beta(fpr)`` at false-positive rate ``fpr``."""
        from . import fdp
        return self._sided(fdp.tpr(self, fpr), np.asarray(fpr, dtype=np.float64), 1.0)  # (TPR >= FPR)

    def advantage(self) -> Bounds:
        """Certified bounds on the attack advantage ``max (TPR - FPR)`` over all tests (= ``delta(0)``)."""
        from . import fdp
        return self._sided(fdp.advantage(self), 0.0, 1.0)

    def gdp_mu(self, alpha_range: tuple | None = None):
        """The smallest Gaussian-DP ``mu`` the curve certifies, as a :class:`fastpld.fdp.GDPResult`.

        ``alpha_range=(lo, hi)`` takes mu over type-I errors in ``[lo, hi]``
        (``(0, 1)``: all alpha, finite only if the composition spent no delta
        error); the default range starts where the certificate resolves the
        curve (``1000 x`` the delta spent, at least ``1e-12``, at most ``1e-2``).
        The result says which range it used.
        """
        from . import fdp
        g = fdp.gdp_mu(self, alpha_range)
        return g._replace(mu=self._sided(g.mu, 0.0, np.inf)) if self._sides != (True, True) else g

    def renyi(self, order) -> Bounds:
        """Certified bounds on the Renyi divergence of order ``order > 1`` (max over directions), vectorised.

        The upper bound adds the mechanisms' log-MGFs (exact for Gaussian and
        discrete mechanisms and for the subsampled Gaussian at integer orders);
        the lower bound comes from the composed PMF with its coupling charges.
        """
        from . import fdp
        return self._sided(fdp.renyi(self, order), 0.0, np.inf)

    def _sided(self, b: Bounds, trivial_lower, trivial_upper, reverse: bool = False) -> Bounds:
        """``b`` with the side its mechanisms do not certify replaced by the trivial bound (see
        :func:`_certified_sides`); ``reverse``: a quantity that falls as the privacy loss grows."""
        lower_ok, upper_ok = self._sides
        if reverse:
            lower_ok, upper_ok = upper_ok, lower_ok
        if lower_ok and upper_ok:
            return b
        scalar = np.ndim(b.lower) == 0
        lo, est, up = (np.asarray(x, dtype=np.float64) for x in b)
        if not lower_ok:
            lo = np.broadcast_to(np.asarray(trivial_lower, dtype=np.float64), lo.shape).copy()
        if not upper_ok:
            up = np.broadcast_to(np.asarray(trivial_upper, dtype=np.float64), up.shape).copy()
        return _pack(lo, np.clip(est, lo, up), up, scalar)

def _certified_sides(losses, lower_chain: bool = False) -> tuple[bool, bool]:
    """``(lower_ok, upper_ok)``: whether lower and upper bounds computed from ``losses`` hold for
    the true mechanisms.  A loss computed as a one-sided bound of its mechanism's own (it
    says so in ``loss.dominated``: random allocation's lattice losses) certifies one side only: a
    dominating one (``dominated`` False) upper bounds, a dominated one lower bounds.  ``lower_chain``:
    a dominance composition, whose lower chain composes a dominating loss's ``dominated_loss``."""
    lower_ok = upper_ok = True
    for loss in losses:
        d = getattr(loss, "dominated", None)
        if d is None:
            continue
        if d:
            upper_ok = False
        elif not (lower_chain and getattr(loss, "dominated_loss", None) is not None):
            lower_ok = False
    return lower_ok, upper_ok


def _pack(lo, est, up, scalar):
    if scalar:
        return Bounds(float(lo), float(est), float(up))
    return Bounds(lo, est, up)
