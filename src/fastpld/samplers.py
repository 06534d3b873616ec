"""Samplers: Poisson subsampling of any mechanism, fixed-size batches, truncated Poisson batches.

Each sampler wraps a *base* mechanism and is itself a :class:`~fastpld.Mechanism`, so it
composes with ``count`` and with everything else.  The base mechanism is read in the
add/remove relation (one record added to or removed from the batch it sees: for DP-SGD,
``Gaussian(sigma)`` with clipping norm 1); samplers that need the base under replace-one
(fixed-size batches, where two neighbouring batches differ in one record) derive it
(:func:`replace_one_mechanism`).  Which pair each sampler certifies, and why it dominates the
*composed* mechanism, is in ``docs/samplers.md``.

Conventions (those of :mod:`fastpld.mechanisms`): a loss is the law of ``L = log(Q/P)`` under
``Q``; the base's ``"remove"`` loss has ``Q`` = output on the batch with the record, ``P`` =
without.  That law alone determines the pair up to equivalence (``P`` has density ``e^-l``
with respect to ``Q`` on the finite values, and the remaining mass at ``L = -inf``): the
*canonical pair* used below for bases without a closed form.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import _validation as V
from .mechanisms import (
    ApproxDP,
    ContinuousLoss,
    CustomPMF,
    DiscreteLoss,
    Gaussian,
    Laplace,
    Mechanism,
    PoissonSubsampledGaussian,
    PoissonSubsampledLaplace,
    PrivacyLoss,
    PureDP,
    RandomizedResponse,
    _cached,
    _GaussPair,
    _generic_window,
    _LaplacePair,
)
from .mechanisms.base import _U, _rel_of_log
from .mechanisms.subsampled import SymmetricSubsampledLoss

from ._lazy import lazy_module

special = lazy_module("scipy.special")
stats = lazy_module("scipy.stats")

__all__ = [
    "PoissonSubsampled",
    "SubsampledWithoutReplacement",
    "TruncatedPoissonSubsampled",
    "replace_one_mechanism",
]

_NEIGHBOURING = ("add_or_remove", "remove", "add")
# atoms of the dominating discretisation of a continuous base without a closed-form pair
_BASE_ATOMS = 1 << 16
_BASE_TAIL = 1e-18


def _check_mechanism(mech):
    if not isinstance(mech, Mechanism):
        raise ValueError(f"mechanism must be a fastpld Mechanism, got {mech!r}")
    return mech


def _check_neighboring(value, allowed):
    if value not in allowed:
        raise ValueError(f"neighboring must be one of {allowed}, got {value!r}")
    return value


def _select(losses, neighboring):
    """``{"add", "remove"}`` losses for a neighbouring option of :data:`_NEIGHBOURING`."""
    if neighboring == "add_or_remove":
        return losses
    one = losses[neighboring]
    return {"add": one, "remove": one}


# --------------------------------------------------------------------------------------
# The canonical pair of a discrete loss, and its exact Poisson subsampling
# --------------------------------------------------------------------------------------
def _discrete_pair(loss: DiscreteLoss):
    """``(values, log Q masses, log P masses, Q mass at +inf, P mass at -inf)`` of the canonical pair."""
    v = loss.values
    with np.errstate(divide="ignore"):
        lq = np.log(loss.probs) + math.log1p(-loss.p_inf)
    lp = lq - v  # P(l) = e^-l Q(l), in logs (no overflow for very negative l)
    p_minf = loss.minus_inf_mass()
    total_p = 1.0 - p_minf
    if p_minf < -1e-9:
        raise ValueError(
            f"the base privacy loss is not the loss of any pair of distributions: E[exp(-L)] = {total_p:.12g} "
            "> 1 (a privacy loss distribution has E[exp(-L)] <= 1)")
    return v, lq, lp, float(loss.p_inf), max(p_minf, 0.0)


def _subsample_discrete(loss: DiscreteLoss, q: float):
    """Exact ``{"remove", "add"}`` losses of the Poisson-subsampled canonical pair of ``loss``.

    remove: ``Y = log(1 - q + q e^L)`` under ``M = (1-q) P + q Q``; add: ``-log(1 - q + q e^L)`` under ``P``.
    """
    v, lq, lp, q_inf, p_minf = _discrete_pair(loss)
    lq1, lqq = math.log1p(-q), math.log(q)
    # (log1p(q expm1(L)) where e^L does not overflow: exactly 0 at L = 0, where logaddexp gave 2.8e-17 -- an atom
    # a hair off 0, which the planner took for a lattice quantum of 7e-18)
    with np.errstate(over="ignore"):
        y = np.where(v < 700.0, np.log1p(q * np.expm1(np.minimum(v, 700.0))), np.logaddexp(lq1, lqq + v))
    lm = np.logaddexp(lq1 + lp, lqq + lq)  # log M masses
    rem_v, rem_p = [y], [np.exp(lm)]
    add_v, add_p = [-y], [np.exp(lp)]
    if p_minf > 0:  # L = -inf: Y = log(1 - q) under M (mass (1-q) p_minf), -log(1 - q) under P
        rem_v.append([lq1])
        rem_p.append([(1 - q) * p_minf])
        add_v.append([-lq1])
        add_p.append([p_minf])
    remove = _discrete_loss(np.concatenate(rem_v), np.concatenate(rem_p), q * q_inf)
    add = _discrete_loss(np.concatenate(add_v), np.concatenate(add_p), 0.0)
    return {"remove": remove, "add": add}


class _ManyAtomLoss(DiscreteLoss):
    """A :class:`DiscreteLoss` with many atoms whose log-MGF bound is evaluated on 2048 buckets.

    The planner evaluates ``log_mgf`` on hundreds of points; over ``2^16`` atoms the exact sum
    costs seconds.  Any upper bound is valid there (it sizes windows and Chernoff tails): each
    atom is moved to the upper end of its bucket for ``s >= 0`` and to the lower end for
    ``s < 0``, which can only increase ``E[e^(sY)]``.
    """

    _BUCKETS = 2048

    def _coarse(self):
        c = self.__dict__.get("_coarse_cache")
        if c is None:
            lo, hi = float(self.values[0]), float(self.values[-1])
            h = max(hi - lo, 1e-300) / self._BUCKETS
            i = np.floor((self.values - lo) / h).astype(np.int64)
            w = np.bincount(i, weights=self.probs)
            keep = w > 0
            idx = np.nonzero(keep)[0]
            # bucket ends, widened by a few ulps so that rounding cannot move an atom across them
            slack = 8 * np.finfo(np.float64).eps * (abs(lo) + abs(hi) + h)
            up = lo + (idx + 1) * h + slack
            down = lo + idx * h - slack
            c = self._coarse_cache = (up, down, w[keep])
        return c

    def log_mgf(self, s):
        s = np.asarray(s, dtype=np.float64)
        up, down, w = self._coarse()
        pos = s >= 0
        out = np.empty(s.shape)
        if pos.any():
            out[pos] = special.logsumexp(np.multiply.outer(s[pos], up), b=w, axis=-1)
        if (~pos).any():
            out[~pos] = special.logsumexp(np.multiply.outer(s[~pos], down), b=w, axis=-1)
        return out + 1e-14  # (the sums' round-off: at s = 0 the bound must not fall below log(1))


def _discrete_loss(values, masses, p_inf):
    """A :class:`DiscreteLoss` from unnormalised finite masses (renormalised to ``1 - p_inf``)."""
    masses = np.asarray(masses, dtype=np.float64)
    total = masses.sum()
    if not total > 0:
        raise ValueError("the privacy loss has no finite part")
    cls = _ManyAtomLoss if masses.size > 4 * _ManyAtomLoss._BUCKETS else DiscreteLoss
    return cls(values, masses / total, p_inf=p_inf)


def _dominating_discretisation(loss: ContinuousLoss) -> DiscreteLoss:
    """A discrete loss that dominates ``loss`` at every real epsilon (values rounded up).

    On a grid ``x_0 < ... < x_n`` over the window where the tails are below ``1e-18``, the atom
    ``x_i`` takes the mass of ``(x_{i-1}, x_i]`` (all mass below ``x_0`` at ``x_0``) and the mass
    above ``x_n`` goes to ``+inf``.  The CDF values used are *lower* bounds of the true CDF (the
    declared relative error ``cdf_rel_error`` of ``cdf`` and ``sf`` taken off, then a running
    maximum), so the discrete law is stochastically larger than the true one and its privacy
    curve ``E[(1 - e^(eps - Y))_+]`` (non-decreasing in ``Y``) is above the true curve at every
    ``eps``: a dominating pair (and a valid one: ``E[e^-Y]`` only decreases).
    """
    a, b = _generic_window(loss, _BASE_TAIL, float(loss.mean()), float(loss.std()))
    if not (math.isfinite(a) and math.isfinite(b) and b > a):
        raise ValueError(f"the base privacy loss has no finite window for discretisation (got [{a}, {b}])")
    x = np.linspace(a, b, _BASE_ATOMS + 1)
    x = np.unique(np.concatenate([x, [t for t in loss.atoms if a < t < b]]))
    rel = float(loss.cdf_rel_error)
    lo_cdf = np.asarray(loss.cdf(x), dtype=np.float64) * (1 - rel)
    lo_sf = 1.0 - np.asarray(loss.sf(x), dtype=np.float64) * (1 + rel)
    c = np.maximum.accumulate(np.clip(np.maximum(lo_cdf, lo_sf), 0.0, 1.0))
    masses = np.diff(np.concatenate([[0.0], c])) * (1 - loss.p_inf)
    finite = float(masses.sum())
    p_inf = max(0.0, 1.0 - finite)
    keep = masses > 0
    return DiscreteLoss(x[keep], masses[keep], p_inf=p_inf)


def _one_sided(out, base_loss):
    """Mark the losses built from a continuous base's dominating discretisation as dominating only
    (``dominated = False``): compositions of them certify upper bounds only (``curve._certified_sides``)."""
    if not isinstance(base_loss, DiscreteLoss):
        for loss in (out.values() if isinstance(out, dict) else (out,)):
            loss.dominated = False
    return out


def _as_discrete(loss: PrivacyLoss) -> DiscreteLoss:
    if isinstance(loss, DiscreteLoss):
        return loss
    if isinstance(loss, ContinuousLoss):
        return _dominating_discretisation(loss)
    raise ValueError(f"unsupported privacy loss {loss!r}")


def _closed_pair(mech):
    """The base pair with closed forms for a Gaussian or Laplace base (else ``None``)."""
    if isinstance(mech, Gaussian):
        return _GaussPair(mech.sigma / mech.sensitivity)
    if isinstance(mech, Laplace):
        return _LaplacePair(mech.sensitivity / mech.scale)
    return None


# --------------------------------------------------------------------------------------
# Poisson subsampling of any mechanism
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PoissonSubsampled(Mechanism):
    """Any mechanism on a Poisson subsample (each record in the batch independently w.p. ``q``).

    The dominating pair, for a base pair ``(P, Q)`` (``Q`` with the record): ``M = (1-q) P + q Q``
    against ``P`` (remove) and ``P`` against ``M`` (add) (Balle, Barthe, Gaboardi 2018; Zhu,
    Dong, Wang 2022).  Gaussian and Laplace bases give exactly
    :class:`~fastpld.PoissonSubsampledGaussian` / :class:`~fastpld.PoissonSubsampledLaplace`
    (the same loss objects); discrete bases (``PureDP``, ``RandomizedResponse``, ``ApproxDP``,
    ``CustomPMF``) give the exact discrete loss; other continuous bases (``CustomCDF``) are first
    replaced by a dominating discretisation (values rounded up on ``2^16`` buckets; see
    ``docs/samplers.md``: the upper bounds are certified, and the lower bounds are reported as the
    trivial ones, 0).

    Parameters
    ----------
    mechanism : Mechanism
        The base mechanism, in the add/remove relation; its ``"remove"`` loss is used.
    sampling_probability : float
        ``q`` in ``[0, 1]``.
    neighboring : {"add_or_remove", "remove", "add"}, default "add_or_remove"
        As for :class:`~fastpld.PoissonSubsampledGaussian`.
    """

    mechanism: Mechanism
    sampling_probability: float
    neighboring: str = "add_or_remove"

    def __post_init__(self):
        _check_mechanism(self.mechanism)
        object.__setattr__(self, "sampling_probability",
                           V.probability("sampling_probability", self.sampling_probability))
        _check_neighboring(self.neighboring, _NEIGHBOURING)

    def _fast(self):
        """The existing closed-form mechanism this one equals, or ``None``."""
        m, q = self.mechanism, self.sampling_probability
        if isinstance(m, Gaussian):
            return PoissonSubsampledGaussian(m.sigma, q, m.sensitivity, self.neighboring)
        if isinstance(m, Laplace):
            return PoissonSubsampledLaplace(m.scale, q, m.sensitivity, self.neighboring)
        # subsampling a Poisson subsample is Poisson subsampling at the product of the rates
        if isinstance(m, PoissonSubsampledGaussian):
            return PoissonSubsampledGaussian(m.sigma, q * m.sampling_probability, m.sensitivity, self.neighboring)
        if isinstance(m, PoissonSubsampledLaplace):
            return PoissonSubsampledLaplace(m.scale, q * m.sampling_probability, m.sensitivity, self.neighboring)
        if isinstance(m, PoissonSubsampled):
            return PoissonSubsampled(m.mechanism, q * m.sampling_probability, self.neighboring)
        return None

    def privacy_losses(self):
        fast = self._fast()
        if fast is not None:
            return fast.privacy_losses()
        q = self.sampling_probability
        base = self.mechanism.privacy_losses()
        if q == 1.0:
            return _select(base, self.neighboring)
        if q == 0.0:
            loss = _cached(self, lambda: DiscreteLoss([0.0], [1.0]))
            return {"add": loss, "remove": loss}
        losses = _cached(self, lambda: _one_sided(_subsample_discrete(_as_discrete(base["remove"]), q),
                                                  base["remove"]))
        return _select(losses, self.neighboring)


# --------------------------------------------------------------------------------------
# The base under replace-one
# --------------------------------------------------------------------------------------
def replace_one_mechanism(mechanism: Mechanism) -> Mechanism:
    """A mechanism whose (symmetric) pair dominates ``mechanism`` under replace-one.

    ``mechanism`` is read in the add/remove relation; replacing a record is removing it and
    adding another, so:

    * ``Gaussian(sigma, s)`` -> ``Gaussian(sigma, 2 s)`` and ``Laplace(b, s)`` ->
      ``Laplace(b, 2 s)`` (triangle inequality: the L2 / L1 sensitivity at most doubles; for
      DP-SGD with clipping norm 1 the two clipped gradients can be opposite, so 2 is attained);
    * ``PureDP(e)`` and ``RandomizedResponse(e, k)`` -> ``PureDP(2 e)``, ``ApproxDP(e, d)`` ->
      ``ApproxDP(2 e, (1 + e^e) d)`` (group privacy of size 2; the randomized-response pair of
      ``PureDP`` / ``ApproxDP`` dominates every mechanism with that guarantee, Kairouz, Oh,
      Viswanath 2015).

    Parameters
    ----------
    mechanism : Mechanism

    Returns
    -------
    Mechanism

    Raises
    ------
    ValueError
        For other mechanisms (pass ``replace_one_mechanism=`` to the sampler instead).
    """
    m = _check_mechanism(mechanism)
    if isinstance(m, Gaussian):
        return Gaussian(m.sigma, 2.0 * m.sensitivity)
    if isinstance(m, Laplace):
        return Laplace(m.scale, 2.0 * m.sensitivity)
    if isinstance(m, (PureDP, RandomizedResponse)):
        return PureDP(2.0 * m.epsilon)
    if isinstance(m, ApproxDP):
        d = m.delta * (1.0 + math.exp(m.epsilon)) if m.epsilon < 700 else math.inf
        if not d < 1:
            raise ValueError(
                f"ApproxDP(epsilon={m.epsilon!r}, delta={m.delta!r}) under replace-one is (2 epsilon, "
                f"(1 + e^epsilon) delta) = ({2 * m.epsilon:.4g}, {d:.4g})-DP: not private")
        return ApproxDP(2.0 * m.epsilon, d)
    raise ValueError(
        f"no replace-one pair is known for {m!r}; pass replace_one_mechanism= (a mechanism that "
        "dominates the base under replace-one: Gaussian, Laplace, PureDP, RandomizedResponse, ApproxDP "
        "or a symmetric CustomPMF)")


def _check_symmetric(mech: Mechanism) -> Mechanism:
    """``mech`` if its pair is symmetric (needed by the without-replacement bound), else ``ValueError``."""
    if isinstance(mech, (Gaussian, Laplace, PureDP, RandomizedResponse, ApproxDP)):
        return mech
    if isinstance(mech, CustomPMF):
        v, lq, lp, q_inf, p_minf = _discrete_pair(mech.privacy_losses()["remove"])
        # symmetric: the law of L under Q is the law of -L under P
        a = sorted(zip(v.tolist(), np.exp(lq).tolist()))
        b = sorted(zip((-v).tolist(), np.exp(lp).tolist()))
        ok = len(a) == len(b) and abs(q_inf - p_minf) <= 1e-12 and all(
            abs(x1 - x2) <= 1e-12 * max(1.0, abs(x1)) and abs(w1 - w2) <= 1e-9 * max(w1, w2, 1e-300)
            for (x1, w1), (x2, w2) in zip(a, b))
        if ok:
            return mech
        raise ValueError("replace_one_mechanism must have a symmetric privacy loss (the law of L under Q "
                         "equal to the law of -L under P)")
    raise ValueError(
        f"replace_one_mechanism must be a Gaussian, Laplace, PureDP, RandomizedResponse, ApproxDP or "
        f"symmetric CustomPMF, got {mech!r}")


# --------------------------------------------------------------------------------------
# The symmetrised subsampled loss of a discrete base (the continuous one: mechanisms.subsampled)
# --------------------------------------------------------------------------------------
def _symmetric_discrete(loss: DiscreteLoss, g: float) -> DiscreteLoss:
    """:class:`SymmetricSubsampledLoss` of the canonical pair of a symmetric discrete loss (exact)."""
    v, lq, lp, q_inf, p_minf = _discrete_pair(loss)
    lq1, lgg = math.log1p(-g), math.log(g)
    y = np.logaddexp(lq1, lgg + v)
    m_mass = np.exp(np.logaddexp(lq1 + lp, lgg + lq))
    p_mass = np.exp(lp)
    pos = y > 0
    vals = np.concatenate([y[pos], -y[pos], [0.0]])
    p_inf = g * q_inf
    m0 = 1.0 - p_inf - float(m_mass[pos].sum()) - float(p_mass[pos].sum())
    if m0 < -1e-9:
        raise ValueError("the replace-one base pair is not symmetric (negative mass at 0 in the symmetrised loss)")
    masses = np.concatenate([m_mass[pos], p_mass[pos], [max(m0, 0.0)]])
    return _discrete_loss(vals, masses, p_inf)


# --------------------------------------------------------------------------------------
# Fixed-size batches (sampling without replacement)
# --------------------------------------------------------------------------------------
_WOR_RELATIONS = ("replace_one", "add_or_remove")


@dataclass(frozen=True)
class SubsampledWithoutReplacement(Mechanism):
    """The mechanism on a batch of ``batch_size`` records drawn uniformly without replacement.

    Both relations compare batches of the same size, so the base enters through its
    replace-one pair ``(P, Q)`` (:func:`replace_one_mechanism`: for ``Gaussian(sigma)`` with
    clipping norm 1 the shift is 2), with ``g = batch_size / dataset_size``:

    * ``"add_or_remove"``: the batch of the larger dataset contains the record with probability
      ``<= g``, else it is a batch of the smaller one; the pairs ``(M, P)`` (remove) and
      ``(P, M)`` (add), ``M = (1-g) P + g Q``, compose per direction (the mixture is always on
      the larger dataset's side) -- :class:`PoissonSubsampled` of the replace-one base at ``g``.
    * ``"replace_one"``: a step can put the mixture on either side (the other records' outputs
      can equal either of the two differing records'), so neither ``(M, P)`` nor ``(P, M)``
      dominates the composition; the symmetric pair of :class:`SymmetricSubsampledLoss`
      dominates both orderings of every step (Dong, Roth, Su 2022, subsampling theorem; Lebeda, Regehr,
      Kamath, Steinke 2024).

    Parameters
    ----------
    mechanism : Mechanism
        Base mechanism in the add/remove relation.
    batch_size : int
        ``b >= 1``.
    dataset_size : int
        ``n >= b`` (``n > b`` under add/remove).  Under add/remove, ``n`` must not exceed the
        size of the larger of the two neighbouring datasets (the size of the dataset trained on
        qualifies: its neighbours have ``n - 1`` and ``n + 1`` records).
    neighboring : {"replace_one", "add_or_remove"}, default "replace_one"
        ``"add_remove"`` is accepted for ``"add_or_remove"``.
    replace_one_mechanism : Mechanism, optional
        A mechanism with a symmetric pair dominating the base under replace-one (default:
        :func:`replace_one_mechanism` of ``mechanism``).
    """

    mechanism: Mechanism
    batch_size: int
    dataset_size: int
    neighboring: str = "replace_one"
    replace_one_mechanism: Mechanism | None = field(default=None)

    def __post_init__(self):
        _check_mechanism(self.mechanism)
        b = V.positive_int("batch_size", self.batch_size)
        n = V.positive_int("dataset_size", self.dataset_size)
        nb = "add_or_remove" if self.neighboring == "add_remove" else self.neighboring
        _check_neighboring(nb, _WOR_RELATIONS)
        if b > n or (nb == "add_or_remove" and b >= n):
            rel = "<" if nb == "add_or_remove" else "<="
            raise ValueError(f"batch_size must be {rel} dataset_size under {nb}, got batch_size={b}, dataset_size={n}")
        object.__setattr__(self, "batch_size", b)
        object.__setattr__(self, "dataset_size", n)
        object.__setattr__(self, "neighboring", nb)
        r1 = self.replace_one_mechanism
        r1 = replace_one_mechanism(self.mechanism) if r1 is None else _check_symmetric(_check_mechanism(r1))
        object.__setattr__(self, "replace_one_mechanism", r1)

    @property
    def gamma(self) -> float:
        """``batch_size / dataset_size``: the probability that a given record is in the batch."""
        return self.batch_size / self.dataset_size

    def privacy_losses(self):
        g = self.gamma
        base = self.replace_one_mechanism
        if self.neighboring == "add_or_remove":
            return PoissonSubsampled(base, g).privacy_losses()
        if g == 1.0:
            return base.privacy_losses()

        def build():
            pair = _closed_pair(base)
            if pair is not None:
                return SymmetricSubsampledLoss(pair, g)
            rem = base.privacy_losses()["remove"]
            return _one_sided(_symmetric_discrete(_as_discrete(rem), g), rem)

        loss = _cached(self, build)
        return {"add": loss, "remove": loss}


# --------------------------------------------------------------------------------------
# Truncated Poisson batches
# --------------------------------------------------------------------------------------
def _with_p_inf(loss: PrivacyLoss, t: float) -> PrivacyLoss:
    """``loss`` with probability ``t`` more at ``+inf``: the mixture ``(1-t) loss + t (+inf)``."""
    import copy

    new = copy.copy(loss)
    new.p_inf = 1.0 - (1.0 - t) * (1.0 - loss.p_inf)
    return new


class MixtureLoss(ContinuousLoss):
    """The privacy loss of a revealed mixture of pairs: ``Y_1`` w.p. ``1 - t``, ``Y_2`` w.p. ``t``.

    (The pair that runs pair 1 or pair 2 by a public coin.)  CDF, survival function, density and
    partial means are the weighted sums of the components' (over their finite parts, weighted by
    ``(1 - t)(1 - p_inf_1)`` and ``t (1 - p_inf_2)``); the log-MGF bound is the log of the weighted
    sum of the components' bounds.
    """

    def __init__(self, first: ContinuousLoss, second: ContinuousLoss, t: float):
        self.parts = (first, second)
        w1 = (1.0 - t) * (1.0 - first.p_inf)
        w2 = t * (1.0 - second.p_inf)
        self.p_inf = 1.0 - w1 - w2
        self.w = (w1 / (w1 + w2), w2 / (w1 + w2))
        self.atoms = tuple(sorted({*first.atoms, *second.atoms}))
        self.support = (min(first.support[0], second.support[0]), max(first.support[1], second.support[1]))
        self.cdf_rel_error = max(first.cdf_rel_error, second.cdf_rel_error)
        self._mean = None
        self._std = None

    def _mix(self, name, t):
        (a, b), (w1, w2) = self.parts, self.w
        return w1 * np.asarray(getattr(a, name)(t), dtype=np.float64) + w2 * np.asarray(getattr(b, name)(t),
                                                                                        dtype=np.float64)

    def cdf(self, t):
        return self._mix("cdf", t)

    def sf(self, t):
        return self._mix("sf", t)

    def pdf(self, t):
        return self._mix("pdf", t)

    def pdf_error(self, t, dt):
        # (the parts' worst, and the weighted sum's 3 u)
        ea, eb = (np.asarray(part.pdf_error(t, dt), dtype=np.float64) for part in self.parts)
        return _rel_of_log(np.maximum(ea, eb) + 3 * _U)

    def partial_mean(self, edges):
        (a, b), (w1, w2) = self.parts, self.w
        m1, e1 = a.partial_mean(edges)
        m2, e2 = b.partial_mean(edges)
        return w1 * m1 + w2 * m2, w1 * e1 + w2 * e2 + 4 * np.finfo(np.float64).eps * (abs(m1) + abs(m2))

    def log_mgf(self, s):
        (a, b), (w1, w2) = self.parts, self.w
        with np.errstate(divide="ignore"):
            return np.logaddexp(math.log(w1) + np.asarray(a.log_mgf(s), dtype=np.float64),
                                (math.log(w2) if w2 > 0 else -np.inf) + np.asarray(b.log_mgf(s), dtype=np.float64))

    def mean(self):
        (a, b), (w1, w2) = self.parts, self.w
        return w1 * a.mean() + w2 * b.mean()

    def std(self):
        (a, b), (w1, w2) = self.parts, self.w
        m = self.mean()
        m2 = w1 * (a.std() ** 2 + a.mean() ** 2) + w2 * (b.std() ** 2 + b.mean() ** 2)
        return float(math.sqrt(max(m2 - m * m, 0.0)))

    def __repr__(self):
        return f"MixtureLoss({self.parts[0]!r}, {self.parts[1]!r}, weights={self.w})"


def _mixture(first: PrivacyLoss, second: PrivacyLoss, t: float) -> PrivacyLoss:
    """The loss of ``first`` w.p. ``1 - t`` and ``second`` w.p. ``t`` (discrete when both are)."""
    if isinstance(first, DiscreteLoss) and isinstance(second, DiscreteLoss):
        w1 = (1.0 - t) * (1.0 - first.p_inf)
        w2 = t * (1.0 - second.p_inf)
        return _discrete_loss(np.concatenate([first.values, second.values]),
                              np.concatenate([w1 * first.probs, w2 * second.probs]), 1.0 - w1 - w2)
    if isinstance(first, ContinuousLoss) and isinstance(second, ContinuousLoss):
        return MixtureLoss(first, second, t)
    raise ValueError(f"replace_one_mechanism must give a privacy loss of the same kind (discrete or continuous) "
                     f"as the base mechanism, got {first!r} and {second!r}")


@dataclass(frozen=True)
class TruncatedPoissonSubsampled(Mechanism):
    """Poisson batches capped at ``max_batch_size`` records (a uniformly random subset kept when larger).

    Certified as a mixture revealed to the adversary: let ``E`` be the event that the *other*
    records alone fill the cap, ``t = Pr[Binomial(dataset_size, q) >= max_batch_size]`` (an upper
    bound on ``Pr[E]``).  Off ``E`` the batch is never truncated, with or without the record:
    the step is exactly Poisson subsampling (:class:`PoissonSubsampled`).  On ``E`` the record,
    when sampled and kept, takes the place of another one (for a uniformly random kept subset, or
    the first ``max_batch_size`` in a data-independent order): a replace-one step, dominated by
    :class:`PoissonSubsampled` of the replace-one base (:func:`replace_one_mechanism`) at the
    same ``q``.  That pair also dominates the Poisson pair, so any upper bound on ``t`` is sound.
    Bases without a known replace-one pair (and no ``replace_one_mechanism=``) are charged an
    infinite loss on ``E`` instead.  ``E`` depends only on the other records, so revealing it
    can only help the adversary.  See ``docs/samplers.md``.

    Parameters
    ----------
    mechanism : Mechanism
        Base mechanism (add/remove relation).
    sampling_probability : float
        ``q`` in ``[0, 1]``.
    dataset_size : int
        Upper bound on the number of records (``>= 1``).
    max_batch_size : int
        The cap ``B >= 1``.
    neighboring : {"add_or_remove", "remove", "add"}, default "add_or_remove"
    replace_one_mechanism : Mechanism, optional
        As for :class:`SubsampledWithoutReplacement`; it must also dominate ``mechanism``
        itself (true of the default, :func:`replace_one_mechanism`), so that the bound is
        monotone in ``t``.
    """

    mechanism: Mechanism
    sampling_probability: float
    dataset_size: int
    max_batch_size: int
    neighboring: str = "add_or_remove"
    replace_one_mechanism: Mechanism | None = field(default=None)

    def __post_init__(self):
        _check_mechanism(self.mechanism)
        object.__setattr__(self, "sampling_probability",
                           V.probability("sampling_probability", self.sampling_probability))
        object.__setattr__(self, "dataset_size", V.positive_int("dataset_size", self.dataset_size))
        object.__setattr__(self, "max_batch_size", V.positive_int("max_batch_size", self.max_batch_size))
        _check_neighboring(self.neighboring, _NEIGHBOURING)
        r1 = self.replace_one_mechanism
        if r1 is None:
            try:
                r1 = replace_one_mechanism(self.mechanism)
            except ValueError:
                r1 = None  # no replace-one pair known: the truncation event is charged as +inf
        else:
            r1 = _check_symmetric(_check_mechanism(r1))
        object.__setattr__(self, "replace_one_mechanism", r1)

    @property
    def truncation_probability(self) -> float:
        """Upper bound on ``Pr[Binomial(dataset_size, q) >= max_batch_size]``."""
        q, n, b = self.sampling_probability, self.dataset_size, self.max_batch_size
        if b > n or q == 0.0:
            return 0.0
        # scipy's binomial tail (regularised incomplete beta) to ~1e-14 relative: inflated by 1e-9
        t = float(stats.binom.sf(b - 1, n, q))
        return min(1.0, t * (1 + 1e-9) + 1e-300) if t > 0 else 0.0

    def privacy_losses(self):
        q = self.sampling_probability
        inner = PoissonSubsampled(self.mechanism, q, self.neighboring).privacy_losses()
        t = self.truncation_probability
        if t == 0.0:
            return inner
        if self.replace_one_mechanism is None and t >= 1.0:
            raise ValueError("max_batch_size is reached with probability 1 and the base has no replace-one pair: "
                             "pass replace_one_mechanism=")

        def build():
            if self.replace_one_mechanism is None:
                mix = lambda d: _with_p_inf(inner[d], t)  # noqa: E731
            else:
                trunc = PoissonSubsampled(self.replace_one_mechanism, q, self.neighboring).privacy_losses()
                mix = lambda d: trunc[d] if t >= 1.0 else _mixture(inner[d], trunc[d], t)  # noqa: E731
            rem = mix("remove")
            add = rem if inner["add"] is inner["remove"] else mix("add")
            return {"remove": rem, "add": add}

        return _cached(self, build)
