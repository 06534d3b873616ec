"""The error budget of a composition: how ``delta_error`` is shared out, and the refusals.

``delta_error`` is shared among the Azuma failure probability, truncation, wrap-around and round-off
(``_SHARE_*``, caps: the spent amounts are usually far smaller); ``eps_error`` pays the Azuma term of
the discretisation, less a reserve for mean-correction bias and CDF round-off.  A plan whose measured
charges do not fit is refused with :class:`_BudgetError` (another plan may fit).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..discretize import tail_mix_log_mgf
from .plan import _Leaf


# Shares of the delta budget (caps; the spent amounts are usually far smaller).
_SHARE_ETA = 0.4
_SHARE_TRUNC = 0.2
_SHARE_WRAP = 0.2
_SHARE_FP = 0.15
# Share of the eps budget kept for mean-correction bias and CDF round-off.
_EPS_RESERVE = 0.03


@dataclass
class _Budgets:
    """How a composition's ``eps_error`` (``eps``) and ``delta_error`` (``delta``) are to be spent: the
    caps of the Azuma failure probability ``eta``, truncation, wrap-around and round-off (``fp``); the
    planner's share of ``eps`` and the Azuma term's logarithm follow from them."""

    eps: float
    delta: float
    eta: float
    trunc: float
    wrap: float
    fp: float

    @classmethod
    def split(cls, eps, delta):
        """``delta`` shared out as :func:`compose` shares it (``_SHARE_*``)."""
        return cls(eps=eps, delta=delta, eta=_SHARE_ETA * delta, trunc=_SHARE_TRUNC * delta,
                   wrap=_SHARE_WRAP * delta, fp=_SHARE_FP * delta)

    @property
    def eps_azuma(self) -> float:
        """The part of ``eps`` the planned meshes' Azuma term may take (less ``_EPS_RESERVE``)."""
        return self.eps * (1 - _EPS_RESERVE)

    @property
    def log_term(self) -> float:
        """``log(2 / eta)``: the Azuma term's logarithm at the planned failure probability."""
        return math.log(2.0 / self.eta)


_COARSE_SHARE = 0.01  # share of eps_error the leaves' coarse tails may add to the discretisation term


def _coarse_spec(plan, budgets):
    """``(lam, budget)`` for the leaves' coarse tails (:mod:`fastpld.discretize`): ``lam`` is the
    Chernoff parameter at which the planned Azuma term is tight (``2 log(2/eta) / eps_az``), and
    each leaf copy may add ``budget`` to its log-MGF there, i.e. ``_COARSE_SHARE`` of eps_error
    over all leaf copies.  Only a heuristic for the cells: :func:`_mixed_azuma` certifies."""
    copies = sum(plan.instances[id(o)] for o in plan.order if isinstance(o, _Leaf))
    lam = 2 * budgets.log_term / budgets.eps_azuma
    return lam, _COARSE_SHARE * budgets.eps * lam / max(copies, 1)


def _mixed_azuma(V, mixes, log_term):
    """Chernoff bound on ``|sum of the coupling differences|`` at failure probability ``2 e^-log_term``
    when some leaves have coarse tails.

    ``V``: sum of squared coupling ranges of every copy (the leaves' fine ranges included);
    ``mixes``: ``(instances, fine range, regions)`` of the leaves with coarse tails, whose log-MGF
    bound (:func:`fastpld.discretize.tail_mix_log_mgf`) replaces their Hoeffding term
    ``lam^2 r^2 / 8``.  Differences ordered leaves first form a martingale, so for every
    ``lam > 0`` ``Pr[|S| >= (log_psi(lam) + log_term) / lam] <= 2 e^-log_term``; the minimum
    over a grid of ``lam`` around the uniform optimum ``sqrt(8 log_term / V)`` is returned.
    """
    plain = V - sum(inst * r * r for inst, r, _ in mixes)
    inst = np.array([float(i) for i, _, _ in mixes])[:, None]
    r_f = [r for _, r, _ in mixes]
    regions = [m for _, _, m in mixes]

    def bound(lam):
        psi = lam * lam * (max(plain, 0.0) / 8) + np.sum(inst * tail_mix_log_mgf(lam, r_f, regions), axis=0)
        return (psi + log_term) / lam

    # a coarse grid, then a finer one between the best point's neighbours (any lam is valid)
    lam0 = math.sqrt(8 * log_term / V) * np.geomspace(0.25, 1.25, 33)
    b0 = bound(lam0)
    i = int(np.argmin(b0))
    lam1 = np.linspace(lam0[max(i - 1, 0)], lam0[min(i + 1, lam0.size - 1)], 17)
    return float(min(b0[i], np.min(bound(lam1)))) * (1 + 1e-12)


class _BudgetError(ValueError):
    """The measured delta charges of a plan exceed ``delta_error`` (another plan may fit)."""


class _EtaError(_BudgetError):
    """The delta charges measured so far (``tv``) leave too little failure probability for the
    planned meshes' discretisation term to fit eps_error."""

    def __init__(self, msg, tv):
        super().__init__(msg)
        self.tv = tv


def _eta_check(budgets, tv, v_lo, eps_limit):
    """Raise :class:`_EtaError` once the final eps term is certain to exceed ``eps_limit``: the
    Azuma term is at least ``sqrt(V / 2 log(2 / eta))`` with ``V >= v_lo`` (every copy's coupling
    range is at least its mesh) and ``eta = min(budgets.eta, delta - charges)``, and charges only grow."""
    if eps_limit is None or not budgets.delta - tv > 0:  # (the latter: _check_tv's refusal, next)
        return
    eta = min(budgets.eta, budgets.delta - tv)
    if math.sqrt(v_lo / 2 * math.log(2.0 / eta)) <= eps_limit:
        return
    raise _EtaError(
        f"the delta charges ({tv:.3g}) leave {max(eta, 0.0):.3g} of delta_error={budgets.delta:.3g} for the "
        f"discretisation term, too little for eps_error={eps_limit:.4g} at the planned meshes; increase "
        f"eps_error or delta_error", tv)


def _check_tv(budgets, tv_trunc, tv_wrap, tv_fp, tv_leaf=0.0):
    """Raise :class:`_BudgetError` once the delta charges leave no failure probability for the Azuma term.

    ``tv_leaf``: the part of ``tv_fp`` that the leaves' mass error bounds charged (the message names it where it
    is most of the charge: a mechanism's discretisation, not the FFTs' round-off)."""
    if not budgets.delta - (tv_trunc + tv_wrap + tv_fp) > 0:
        if tv_leaf > 0.5 * tv_fp:
            what = (f"the leaves' mass error bounds alone cost {tv_leaf:.3g} (summed over the copies: the "
                    f"mechanism's discretisation, e.g. near an atom at an end of its support; the FFTs' round-off "
                    f"{tv_fp - tv_leaf:.3g}, wrap-around {tv_wrap:.3g}, truncation {tv_trunc:.3g}); increase "
                    f"delta_error, or give eps_error for the coupling certificate")
        else:
            what = (f"round-off alone costs {tv_fp:.3g} (wrap-around {tv_wrap:.3g}, truncation {tv_trunc:.3g}; "
                    f"round-off grows with the number of compositions); increase delta_error")
        raise _BudgetError(f"delta_error={budgets.delta:.3g} is too small for this composition: {what}")
