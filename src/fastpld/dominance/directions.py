"""Which directions of a dominance composition run at once, which are deferred and which run on coarser meshes
(``docs/dominance.md``: "Deferred dominated chains", "The other direction on coarser meshes", "The reversed direction,
deferred"), from the normal approximation of each direction's composed loss."""
from __future__ import annotations

import math

from .result import _REL_FLOOR


def _quantized(scale: float) -> float:
    """``scale`` rounded down to a power of 2^(1/8) (finer meshes by at most 9%): the answer's meshes then
    do not depend on the last bits of the measured width, which differ between backends and SIMD levels."""
    return 2.0 ** (math.floor(8.0 * math.log2(scale) + 1e-9) / 8.0)


def _normal_moments(dir_parts) -> list | None:
    """Per direction, the mean and standard deviation of its composed loss (sums over its parts' copies), or
    ``None`` where a loss has no finite moments."""
    out = []
    for _, parts in dir_parts:
        try:
            mu = sum(c * float(loss.mean()) for loss, c in parts)
            sd = math.sqrt(sum(c * float(loss.std()) ** 2 for loss, c in parts))
        except (NotImplementedError, AttributeError, TypeError, ValueError):
            return None
        if not (math.isfinite(mu) and math.isfinite(sd)):
            return None
        out.append((mu, sd))
    return out


def _predicted_epsilons(dir_parts) -> list | None:
    """Per direction, a rough epsilon at delta ~1e-5: its composed loss's mean plus four standard deviations (the
    normal approximation, :func:`_normal_moments`), or ``None`` where a loss has no moments."""
    moments = _normal_moments(dir_parts)
    return None if moments is None else [mu + 4 * sd for mu, sd in moments]


def _relative_width(eps_error: float, rel_error: float | None, eps: float) -> float:
    """The width asked, relative to a predicted epsilon ``eps``: ``rel_error``, else ``2 eps_error`` against it."""
    return rel_error if rel_error is not None else 2.0 * eps_error / max(eps, 0.0, _REL_FLOOR)


def _epsilon_guess(dir_parts) -> float:
    """A rough epsilon at delta ~1e-5 for the planner's first meshes: the largest of
    :func:`_predicted_epsilons` (1 where a loss has no moments)."""
    e = _predicted_epsilons(dir_parts)
    return 1.0 if e is None else max([0.0] + e)


# the other directions' dominated chains are deferred where their predicted epsilon lies this many times the
# relative width asked below the eager one's (the normal approximation's gap measured 1.5-5x smaller than the
# true one on subsampled Gaussians; a deferred chain that is needed after all runs at once, costing time only)
_DEFER_GAP = 2.0
_DEFER_REVERSED = True  # (the eager direction's reverse: both its chains deferred, not only the dominated one)
# ... where the reversal bound is predicted to settle epsilon at _REVERSAL_DELTA: its excess over the reversed curve,
# e^eps times the eager chain's charges (~delta_error) and its masses' rounding as total variation (measured
# 1.5-2.6e-13 a copy on subsampled Gaussians, k = 300 .. 1e7), at most _REVERSAL_SLACK of that delta.  Elsewhere (a
# large epsilon: q = 0.01 x 1e5, e^25) a query would run the deferred chains after the others, on one thread
_REVERSAL_DELTA = 1e-5
_REVERSAL_SLACK = 0.5
_REVERSAL_TV_COPY = 3e-13


def _reversal_settles(dir_parts, eager, delta_error: float) -> bool:
    """Whether the eager direction's upper curve reversed is predicted to bound the other direction's below its
    own at ``_REVERSAL_DELTA`` (:data:`_REVERSAL_SLACK`; epsilon from :func:`_predicted_epsilons`)."""
    eps = _predicted_epsilons(dir_parts)
    if eps is None:
        return False
    i = [name for name, _ in dir_parts].index(eager)
    copies = sum(c for _, c in dir_parts[i][1])
    return eps[i] < 700 and (math.exp(eps[i]) * (copies * _REVERSAL_TV_COPY + delta_error)
                             <= _REVERSAL_SLACK * _REVERSAL_DELTA)


def _eager_direction(dir_parts, eps_error: float, rel_error: float | None):
    """The direction whose dominated chain runs at once: where epsilon is predicted to come from (the largest
    of :func:`_predicted_epsilons`, as :func:`_epsilon_guess`); ``None`` (all at once) for a single direction,
    losses without moments, or directions whose predicted epsilons lie within ``_DEFER_GAP`` relative widths of
    each other (the reference widths would need the other chains).  The relative width asked:
    :func:`_relative_width` against the largest predicted epsilon."""
    if len(dir_parts) < 2:
        return None
    e = _predicted_epsilons(dir_parts)
    if e is None:
        return None
    i = max(range(len(e)), key=lambda j: e[j])
    width_rel = _relative_width(eps_error, rel_error, e[i])
    if not all(j == i or e[j] < e[i] * (1 - _DEFER_GAP * width_rel) for j in range(len(e))):
        return None
    return dir_parts[i][0]


# the other directions' meshes are at most this many times the eager one's (measured with the dominated chain shared
# out to the thread that ends its dominating chain first: x3 took PSG(1, 0.01) x 1e5 from 5.5 to 4.5 ms, PSG(0.8,
# 0.001) x 1e5 from 13.9 to 9.4 ms, x2 less; x3.7 from 3.29 to 3.13 ms (x5.2, its gap's, 3.05), the add chain 1.08
# -> 0.94 ms; on two threads the eager direction's two chains set the time once the other's is short; where the
# directions meet, delta(eps) near eps = 0 and the trade-off views, the factor squared widens the bounds)
_COARSE_MAX = 4.0
# ... where the predicted gap is at least this many relative widths asked per unit of factor squared (a factor f
# widens the direction's bounds ~f^2 times, to ~0.7 f^2 of the width asked: f^2 <= gap / (_COARSE_GAP w) keeps its
# upper bound under the eager direction's lower bound, on a gap the normal approximation puts 1.2-5x below the true
# one on subsampled Gaussians: PSG(1, 0.01) x 1e5's add direction, predicted 3.0% below, has its upper bound 4.0% below
# the remove direction's lower bound at delta 1e-5 with f = 5.2, 3.3-4.9% at 1e-3 .. 1e-9.  A miss is measured
# by the width check, which then composes every direction on the model's meshes)
_COARSE_GAP = 1.0


def _coarse_factors(dir_parts, eager, eps_error: float, rel_error: float | None) -> dict:
    """Per direction other than ``eager``: the factor (>= 1, at most ``_COARSE_MAX``, a power of 2^(1/8)) by which
    its meshes may be coarser than the model's.  Its epsilon is predicted (:func:`_predicted_epsilons`, as
    :func:`_eager_direction`) to lie a relative gap ``g`` below the eager direction's; its bounds widen ~f^2 times,
    and with ``f^2 <= g / (_COARSE_GAP w)`` (``w`` the relative width asked) its upper bound stays below the eager
    direction's lower bound, so the answer's bounds are the eager direction's: the same width, a cheaper chain.
    Any meshes give certified bounds; a width that misses after all drops the factors (:func:`_compose_dominance`).
    Where the directions meet (``delta(eps)`` near ``eps = 0``, the trade-off views) the coarser direction's bounds
    can be the wider ones.  Empty without an eager direction."""
    if eager is None:
        return {}
    eps = _predicted_epsilons(dir_parts)
    if eps is None:
        return {}
    e = {name: x for (name, _), x in zip(dir_parts, eps)}
    top = e[eager]
    width_rel = _relative_width(eps_error, rel_error, top)
    out = {}
    for name, _ in dir_parts:
        if name == eager or not top > 0:
            continue
        gap = 1.0 - e[name] / top
        f2 = gap / (_COARSE_GAP * width_rel)
        if f2 > 1.0 and math.isfinite(f2):
            out[name] = _quantized(min(math.sqrt(f2), _COARSE_MAX))
    return out
