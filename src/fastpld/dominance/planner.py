"""Plans, meshes and the composition of the dominance certificate: both chains for every direction, on
meshes from a width model (smooth losses) or scaled from a pilot on coarser meshes that measures the width
(the others), every answer's width checked (``docs/dominance.md``, "Meshes")."""
from __future__ import annotations

import functools
import math

import numpy as np

from ..composition.budget import _BudgetError, _Budgets
from ..composition.plan import _Leaf, _Node, _Plan, _build_plan, _merge_order as _plan_merge_order
from ..composition.roundoff import _ULD
from ..composition.threads import _PARALLEL_MIN_US, _run_jobs, _run_shared
from ..mechanisms import DiscreteLoss
from ..mechanisms.base import ContinuousLoss
from .alignment import aligned_mesh
from .arities import (  # noqa: F401  (all but _arities: reached here by the tests)
    _ARITIES, _arities, _least_work_arity, _least_work_near, _nearby_arity, _plan_work)
from .chains import _DeferredChain
from .leaves import WINDOWS, window
from .deferred import _DeferredDirection, _deferred_chains, _retry_args
from .directions import (  # noqa: F401  (_COARSE_MAX, _epsilon_guess: reached here by the tests and the api)
    _COARSE_MAX, _DEFER_REVERSED, _coarse_factors, _eager_direction, _epsilon_guess, _normal_moments, _quantized,
    _reversal_settles,
)
from .result import DominancePLD, _LazyChains, _REL_FLOOR, _reversed_directions

# --------------------------------------------------------------------------------------
# Plans and execution
# --------------------------------------------------------------------------------------
def dominance_meshes(plan, h1: float) -> dict:
    """Mesh per group: ``h1`` times the power of two nearest ``(K / copies_g)^_MESH_GROWTH``.

    A re-discretisation at mesh ``H`` moves each copy's loss by ``O(H^2)`` (connect-the-dots and
    the balanced split are second order), and its copies enter the final composition ``copies_g``
    times: group ``g`` adds ``~copies_g H_g^2`` to the width at a cost of ``~span_g / H_g`` buckets.
    Equal shares (``H_g ~ copies_g^-1/2``) give every stage about the same number of buckets; the
    least buckets for a given width are at ``H_g ~ copies_g^-1/3`` (Lagrange, spans alike), which gives
    the leaf's lattice -- the largest nodes, in long double -- a coarser mesh and the later ones finer
    ones (``_MESH_GROWTH``).  Powers of two keep every lattice nested in the next (the balanced split is
    exact on nested lattices; on incommensurate ones its cells drift).
    """
    copies = plan.copies_per_group()
    K = max(copies.values())
    return {g: h1 * 2.0 ** round(_MESH_GROWTH * math.log2(K / max(c, 1))) for g, c in copies.items()}


def resolved_meshes(plan, h1: float, eps_error: float) -> dict:
    """:func:`dominance_meshes` with a group's mesh at most ``1 / _RESOLVE`` of the standard deviation of each PMF
    discretised onto it -- a leaf of a loss without atoms, a node's output split onto it -- (halved as often as that
    takes, so the lattices stay nested; every child's group then at most as coarse as its parent's), where such PMFs
    narrower than that could cost the lower bound more than ``_RESOLVE_SHARE`` of ``eps_error``: up to a mesh in
    each of their copies.  A part much narrower than the mesh the mix's width model gives it (a small ``q`` beside a
    heavy part) is otherwise first order in its dominated leaf on any lattice, the widths do not follow ``h^2`` and
    the rescalings go far finer than the other parts need (PSG(5.99, 1.46e-4) x 565 in a three-part mix: sd 2.5e-5 at
    mesh 3.2e-5, the lower bound 13 widths low; docs/dominance.md, "Meshes").  A group is refined at most
    ``_RESOLVE_MAX`` times: a narrow part of a few copies enters its parent's group as its leaf, and refined there
    it refines every part (PSG(2.07, 5e-4) x 1 beside three parts of epsilon 114: every mesh 7.8e-5, 2.9-3.4 s).
    Execution only: the width model keeps the copies' ratios."""
    meshes = dominance_meshes(plan, h1)
    sd = {}
    for o in plan.order:
        if isinstance(o, _Leaf):
            try:
                v = float(o.loss.std()) if not getattr(o.loss, "atoms", ()) else math.nan
            except (NotImplementedError, AttributeError, TypeError, ValueError):
                v = math.nan
        else:
            v = math.sqrt(sum(m * sd[id(c)] ** 2 for c, m in o.children))  # (NaN where a leaf has none)
        sd[id(o)] = v
    cap, narrow = {}, {}
    for o in plan.order:
        entering = ([(o.group, sd[id(o)], plan.instances[id(o)])] if isinstance(o, _Leaf)
                    else [(o.group, sd[id(c)], plan.instances[id(o)] * m) for c, m in o.children if c.group != o.group])
        for g, v, copies in entering:
            if math.isfinite(v) and v > 0 and meshes[g] > v / _RESOLVE:
                cap[g] = min(cap.get(g, math.inf), v / _RESOLVE)
                narrow[g] = narrow.get(g, 0) + copies
    cap = {g: c for g, c in cap.items()
           if narrow[g] * meshes[g] > _RESOLVE_SHARE * eps_error and c * _RESOLVE_MAX >= meshes[g]}
    if not cap:
        return meshes
    out = dict(meshes)
    for g, c in cap.items():
        while out[g] > c:
            out[g] /= 2
    for o in reversed(plan.order):  # (parents first: a split goes onto a lattice at least as coarse)
        if isinstance(o, _Node):
            for c, _ in o.children:
                while out[c.group] > out[o.group]:
                    out[c.group] /= 2
    return out


_RESOLVE = 2.0  # a group's mesh at most this many times finer than the spread of what is discretised onto it
_RESOLVE_SHARE = 0.1  # ... where its narrow PMFs' copies times the mesh exceed this share of eps_error
# ... and at most this many times finer than the model's mesh: a part of a few copies enters its parent's group as
# its leaf (composition.plan._chain), and a far finer root lattice costs all the other parts (PSG(5.77, 2.2e-4) x 5
# beside two heavy parts: every mesh 500x finer, 4.6 s)
_RESOLVE_MAX = 8.0


# measured against 1/2 (equal shares) on subsampled Gaussians at rel_error 1e-3: 0.80-0.85x the time at
# q = 0.001-0.004 (k 1e5, 1e6), 0.9-1.0x at q = 0.01 and 0.1; 1/4 is slower (the root's lattice grows past the leaf's)
_MESH_GROWTH = 1.0 / 3.0


def _model_weight(plan) -> float:
    """``sum_g copies_g (H_g / h1)^2`` of :func:`dominance_meshes`: the leaf-mesh units of the width."""
    copies = plan.copies_per_group()
    r = dominance_meshes(plan, 1.0)
    return sum(c * r[g] ** 2 for g, c in copies.items())


def leaf_mesh(parts, plan, eps_error: float, scale: float = 1.0, far: bool = True) -> float:
    """Leaf mesh ``h1`` for an absolute epsilon error of about ``eps_error`` per bound.

    Each group's re-discretisations (and the leaves) move the composed loss by about
    ``copies_g H_g^2 / 12`` (the mean shift of connect-the-dots; the balanced split's is of the
    same size): with :func:`dominance_meshes` the shifts add up to ``h1^2 / 12 sum_g copies_g (H_g / h1)^2``
    (:func:`_model_weight`), which moves epsilon by as much.
    ``scale`` multiplies the result (a second attempt, see :func:`compose_dominance`).  A single
    part with one or two atoms takes the largest mesh below that on whose lattice, and on
    every coarser lattice of the plan, its atoms lie (their splits are then exact).  ``far``: several parts may
    take a spacing of their atoms far below the planner's mesh (:func:`fastpld.dominance.alignment.aligned_mesh`).
    """
    # (a plan whose pass-through root :func:`_plan_at` dropped takes the mesh of the plan with it: the model's
    # weights and the atoms' alignment were measured with that root's lattice, and without its re-discretisation the
    # width is only narrower -- from the model's weight alone, Laplace(2) x 2^16 took a mesh 1.33x as coarse and
    # missed its width, 1.6 times the width asked, composing twice)
    plan = getattr(plan, "mesh_plan", plan)
    h1 = scale * math.sqrt(12.0 * eps_error / (_SHIFT_FACTOR * _model_weight(plan)))
    # (the coarsest lattice's ratio to the leaf's: the atoms are aligned on every lattice of the plan)
    R = max(dominance_meshes(plan, 1.0).values())
    return aligned_mesh(parts, R, h1, eps_error * scale ** 2, far)


# the composed shift of each chain, measured at 1.2-2.2 times the sum of the groups' mean shifts
# (Gaussian, Laplace, subsampled Gaussian): eps_error then bounds each side's error in most cases
_SHIFT_FACTOR = 3.0


# --------------------------------------------------------------------------------------
# Composition and the result
# --------------------------------------------------------------------------------------
_PILOT_SCALE = 3.0  # the pilot's meshes against the planner's (see _compose_dominance)
# ... where the parts are composed themselves (no proxy) and some loss has a continuous part: the planner's own
# meshes.  Three times coarser, the first width of a subsampled Laplace was 10-1,800 times the width asked, and one or
# two rescalings followed; on the planner's meshes the first answer is the answer more often (docs/performance.md,
# thirty-seventh session)
_PILOT_SCALE_PARTS = 1.0
_SCALE_MARGIN = 0.9  # the answer's meshes aim at 0.81 of the width asked for
# the width's model for smooth losses (_model_scale): at the planner's meshes it is c (lambda + 1) times the
# width asked, lambda the tilt of the composed loss at epsilon.  With 0.55 the first answer landed at 0.56-0.78 of
# the width asked on 16 subsampled Gaussians (q 1e-3 .. 0.25, sigma 0.6 .. 5, k 100 .. 1.2e5), 0.57-0.74 on 4
# Gaussians, 0.70-0.77 on heterogeneous schedules of 5-8 parts and 0.64-0.67 on grouped ones (50 x 100, 20 x 3,000)
_MODEL_C = 0.55
# ... but where every direction is one copy of one loss (a merged Gaussian schedule, a single release) the width
# is no sum over copies and the model's first meshes missed 40% of the time (39 Gaussians, mu 0.2-200, rel_error
# 1e-2 .. 1e-4, and 8 merged schedules: 67 compositions for 47 questions, 47.5 ms in all; at 2^-0.5 48 and 40.4 ms,
# at 2^-0.25 56 and 43.9 ms, at 2^-0.625 48 and 40.2 ms)
_ONE_COPY_SCALE = 2.0 ** -0.5
# the directions run on two threads from this many leaf buckets in all (subsampled Gaussians at rel_error 1e-3, with
# the leaves' integrals compiled without the GIL and the other direction's chain coarser: 8,000 -> 3,000 took
# PSG(1, 0.01) x 1e4 from 3.85 to 3.40 ms, PSG(5, 0.1) x 1e3 from 2.50 to 2.39; 1,000 lost 1.1x on PSG(2, 0.05) x 300)
_PARALLEL_LEAF_BUCKETS = 3000
# ... but where one direction runs (the others deferred) its two chains on two threads from this many only: its
# dominated chain waits on the dominating one's leaf integrals, and the GIL between the kernels (alternating in one
# process, medians of 7 x 4: PSG(1, 0.01) x 1e4, 5,486 leaf buckets, 1.78 against 2.03 ms on one thread, 3,036:
# 1.53 against 1.74; from ~8,000 two threads win: 7,774 2.04 against 2.35, 14,274 4.11 against 5.51)
_PARALLEL_ONE_DIRECTION = 7000
# ... and from this many, the chains are shared out as the threads come free (the dominated chain to whichever
# finishes its dominating chain first) instead of one job per direction: with the leaves' integrals compiled
# without the GIL and the FFT plans kept, 0.93x and 0.96x the time at q = 0.001 (x 1e5 and 1e6, 50,000-75,000 leaf
# buckets), 1.02-1.03x at q = 0.01 (10,000-14,000: the stolen chain's cold caches cost what the imbalance does)
_SHARED_LEAF_BUCKETS = 30000
_MODEL_OFF = 8.0  # a first width this many times the width asked is not the model's error (see the rescale loop)
_RESCALES = 4  # answers after the pilot at most (each one's width measured), before a miss is refused
_MAX_REFINE = 8.0  # the largest factor by which one rescaling refines the meshes
_PINNED_STEPS = 200  # steps of 2^(1/8) a rescaling may go on for until some mesh changes (2^-25 at most)
_DIRECT_COPIES = 4  # (50 parts of 100-3000 copies: 0.6-0.9x the time of chains; 10 parts of 30,000: 1.3x)
# block size of heterogeneous plans (parts as leaves of their blocks, the pilot on a proxy: against 8, measured
# 0.85x the time for 50 x 100 and 300 x 10 subsampled Gaussians, 0.81-0.87x for 20 x 3,000 and 1,000 x 10;
# 32 is slower for 20 x 3,000)
_MERGE = 16


def _dominated_p_inf(loss) -> float:
    """The mass at ``+inf`` of the loss the dominated chain composes for ``loss`` (:func:`dominated_leaf`'s)."""
    return float((getattr(loss, "dominated_loss", None) or loss).p_inf)


class _DoomedArity(_BudgetError):
    """An arity not tried: its first node's round-off is predicted not to fit (:func:`_first_node_floor`)."""


class _WidthError(_BudgetError):
    """The certified width did not reach the accuracy asked at meshes the charges allow.

    ``narrowest``: the attempt of smallest width (a certified answer, only wider than asked), or ``None``."""

    def __init__(self, message: str, narrowest=None):
        super().__init__(message)
        self.narrowest = narrowest


# a relative accuracy of at least _RETRY_MIN_REL whose width the rescalings miss is asked again _RETRY_FACTOR times
# finer once: the rescalings' path depends on the first meshes (atoms off the lattices make the width erratic in the
# mesh), and mixes of subsampled Laplace mechanisms refused at 1e-3 were answered at 1e-4 (PSL(5.815, 0.0028) x 1,338
# + PS(Laplace(9.551), 0.084) x 49 in 0.34 s, width 3.3e-6 of epsilon; 1.5x the width asked at 1e-3)
_RETRY_MIN_REL = 5e-4
_RETRY_FACTOR = 10.0


def compose_dominance(dir_parts, events, eps_error: float, delta_error: float, backend, arity: int | None,
                      max_buckets: int, threads: int, rel_error: float | None = None,
                      retry: bool = True) -> "DominancePLD":
    """Both chains (dominating, dominated) for every direction (``dir_parts``: the grouped parts of
    ``events`` per direction); see :func:`fastpld.compose`.  ``rel_error``: the accuracy asked is
    relative (the certified width of ``epsilon(delta)`` at most ``rel_error`` times it, see
    :func:`_allowed_width`); ``eps_error`` is then only the planner's first guess.  A relative accuracy whose
    width is missed is asked once more ``_RETRY_FACTOR`` times finer (at least ``_RETRY_MIN_REL``; ``retry``:
    :func:`compose_finer`)."""
    if arity is None:
        # (a Gaussian composed k times is one Gaussian: one leaf, no chain; an arity asked keeps the chain)
        from ..composition.api import _single_gaussians
        dir_parts = _single_gaussians(dir_parts)
    try:
        return _compose_arities(dir_parts, events, eps_error, delta_error, backend, arity, max_buckets, threads,
                                rel_error)
    except _WidthError as exc:
        if not retry or rel_error is None:
            raise
        try:
            return compose_finer(dir_parts, events, eps_error, delta_error, backend, arity, max_buckets, threads,
                                 rel_error)
        except ValueError:  # (a refusal of the finer one too -- its FFTs, its charges: the first one's says more)
            raise exc from None


def compose_finer(dir_parts, events, eps_error: float, delta_error: float, backend, arity: int | None,
                  max_buckets: int, threads: int, rel_error: float) -> "DominancePLD":
    """:func:`compose_dominance` at ``rel_error`` over ``_RETRY_FACTOR``, where ``rel_error``'s width was missed
    (refused, a :class:`_WidthError`, below ``_RETRY_MIN_REL``): the answer reports ``rel_error``."""
    if rel_error < _RETRY_MIN_REL:
        raise _WidthError(f"rel_error={rel_error:g} is not asked again finer (below {_RETRY_MIN_REL:g})")
    pld = _compose_arities(dir_parts, events, eps_error, delta_error, backend, arity, max_buckets, threads,
                           rel_error / _RETRY_FACTOR)
    pld.rel_error = rel_error
    return pld


def _compose_arities(dir_parts, events, eps_error: float, delta_error: float, backend, arity: int | None,
                     max_buckets: int, threads: int, rel_error: float | None) -> "DominancePLD":
    """:func:`compose_dominance` at one accuracy: the arities in turn where the nodes' round-off does not fit."""
    if rel_error is not None:
        eps_error = rel_error * max(_epsilon_guess(dir_parts), _REL_FLOOR) / 2
    if arity is not None:
        return _compose_dominance(dir_parts, events, eps_error, delta_error, backend, arity, max_buckets, threads,
                                  rel_error)
    # the default arity first; where its nodes' round-off does not fit delta_error (many copies: the
    # first node's charge counts once per instance), larger ones: fewer instances of each node
    first = skipped = None  # (a composed arity's refusal says more than a predicted one's)
    for a, last in _arities(dir_parts):
        try:
            return _compose_dominance(dir_parts, events, eps_error, delta_error, backend, a, max_buckets, threads,
                                      rel_error, skip_doomed=not last)
        except _WidthError:  # (the meshes', not the nodes' round-off: another arity does not help)
            raise
        except _DoomedArity as exc:
            skipped = skipped or exc
        except _BudgetError as exc:
            first = first or exc
    raise first or skipped


def _merge_order(parts) -> list:
    """Order of the parts in grouped plans: by the normal approximation's upper quantile of each
    part (mean plus four standard deviations of its copies' sum), similar parts side by side.  The
    order does not affect correctness; the coupling planner's key (Chernoff quantiles from the MGF
    grids) costs ~0.6 ms a part, and the dominance certificate needs no MGF grid otherwise."""
    try:
        key = [c * float(loss.mean()) + 4 * math.sqrt(c) * float(loss.std()) for loss, c in parts]
    except (NotImplementedError, AttributeError, TypeError, ValueError):
        return _plan_merge_order(parts)
    if not all(math.isfinite(k) for k in key):
        return _plan_merge_order(parts)
    return sorted(range(len(parts)), key=lambda i: (key[i], parts[i][1]))


def _proxy_parts(parts, order, merge: int) -> list:
    """The pilot's parts of a grouped plan: part ``i`` with the loss of the middle part of its block
    of the same kind (type) and its own count (the blocks of
    :func:`fastpld.composition.plan._build_plan`'s first level: ``merge`` consecutive parts of
    ``order``, balanced).  The same order gives the same plan tree."""
    n = len(order)
    nb = -(-n // max(2, int(merge)))
    bounds = [n * j // nb for j in range(nb + 1)]
    rep = list(parts)
    for j in range(nb):
        kinds = {}
        for i in order[bounds[j]:bounds[j + 1]]:
            loss = parts[i][0]  # (a subsampled loss: the kind of its pair too)
            kinds.setdefault((type(loss), type(getattr(loss, "pair", None))), []).append(i)
        for members in kinds.values():
            mid = parts[members[(len(members) - 1) // 2]][0]
            for i in members:
                rep[i] = (mid, parts[i][1])
    return rep


def _model_scale(dir_parts) -> float | None:
    """The meshes' scale (against :func:`leaf_mesh`'s) at which the width is predicted to be
    ``_SCALE_MARGIN^2`` of the width asked, for losses with a smooth density (no atoms; ``None`` for
    others, which the pilot measures).

    Connect-the-dots of a cell of mesh ``H`` (and the balanced split) keeps the masses of ``1`` and
    ``e^-y`` and moves ``E[phi(Y)]`` by about ``H^2 / 12 E[phi'' + phi']`` per copy: for
    ``phi = e^(lambda y)`` the log-MGF by ``H^2 / 12 lambda (lambda + 1)``, hence the tail of the composed
    loss at the saddle point ``lambda`` -- epsilon -- by ``copies H^2 / 12 (lambda + 1)``.  The planner's
    model (:func:`leaf_mesh`) leaves the factor ``lambda + 1`` out; with it the width at the planner's
    meshes is ``c (lambda + 1)`` times the width asked, ``c`` measured (``_MODEL_C``).  ``lambda`` is the
    tilt of the normal approximation at its ``mu + 4 sd``: ``4 / sd``, of the direction whose ``mu + 4 sd``
    is largest (the one epsilon comes from).  The width is second order in the meshes: the scale is
    ``sqrt(_SCALE_MARGIN^2 / (c (lambda + 1)))``, times ``_ONE_COPY_SCALE`` where every direction is one copy.
    """
    for _, parts in dir_parts:
        for loss, _c in parts:
            if not isinstance(loss, ContinuousLoss) or getattr(loss, "atoms", ()):
                return None
    moments = _normal_moments(dir_parts)
    if not moments or any(sd <= 0 for _, sd in moments):
        return None
    _, sd = max(moments, key=lambda m: m[0] + 4 * m[1])
    lam = 4.0 / sd
    one = all(len(parts) == 1 and parts[0][1] == 1 for _, parts in dir_parts)
    return _quantized(math.sqrt(_SCALE_MARGIN ** 2 / (_MODEL_C * (lam + 1.0))) * (_ONE_COPY_SCALE if one else 1.0))


# an arity whose first node's predicted round-off floor (_first_node_floor) times this exceeds delta_error is
# not tried where a larger one follows (the charge measured 6.3x and 8.5x the floor at q = 1e-4, sigma 0.5 x 1e7,
# arities 256 and 100; skipping one that would have fitted costs time only: the larger arity is certified too)
_DOOMED_FACTOR = 6.0


def _first_node_floor(parts, plan, h1: float, native: bool = False, windows: dict | None = None) -> float:
    """A prediction of the round-off charged to the first node of a single part's plan (its leaf raised to
    the arity, over all its instances), from the normal approximation: the inverse FFT's ``12 u log2 N |P|``
    per instance (docs/roundoff.md, section 3) in long double, with
    ``|P|^2 = sum_k |X_k|^(2m) ~ N / (sqrt(pi m) sd)`` (``sd`` the loss's in buckets).  The least a node
    can be charged, whatever its series; 0 where it cannot be predicted.  ``native``: the loss's window by the
    compiled kernel where it has one (the same candidates and arithmetic as the numpy code); ``windows``: the
    composition's memo of windows (:func:`fastpld.dominance.leaves.window`)."""
    if len(parts) != 1:
        return 0.0
    loss, _ = parts[0]
    first = next((o for o in plan.order if not isinstance(o, _Leaf)), None)
    if first is None or len(first.children) != 1:
        return 0.0
    m = first.children[0][1]
    if m < 2:  # (a pass-through root: no power, no round-off to predict; before the window, ~70 us)
        return 0.0
    try:
        sd = float(loss.std()) / h1
        a, b = window(loss, 1e-12, native, windows)
    except (NotImplementedError, AttributeError, TypeError, ValueError, ArithmeticError):
        return 0.0
    if not (sd > 0 and math.isfinite(sd) and math.isfinite(b - a)) or m < 2:
        return 0.0
    n = (b - a) / h1 + 8.0 * math.sqrt(m) * sd
    lg = math.ceil(math.log2(max(n, 2.0)))
    return plan.instances[id(first)] * 12.0 * _ULD * lg * math.sqrt(n / (math.sqrt(math.pi * m) * sd))


def _compose_dominance(dir_parts, events, eps_error, delta_error, backend, arity, max_buckets, threads,
                       rel_error=None, skip_doomed=False):
    budgets = _Budgets(eps=eps_error, delta=delta_error, eta=delta_error, trunc=0.3 * delta_error,
                       wrap=0.3 * delta_error, fp=0.4 * delta_error)
    windows = {}  # (the truncation windows its attempts and predictions ask: leaves.window)
    # many distinct parts: grouped into blocks (one mesh group per level), as the coupling planner does
    # (a part of at most _DIRECT_COPIES arity^2 copies enters its block as its leaf: one forward transform
    # there instead of a chain of nodes and a re-discretisation, and one stage less)
    plans, proxies = [], []
    grouping = {}  # per direction: its blocks (merge, order), for the deferred chains' retries (_DeferredChain)
    for name, parts in dir_parts:
        merge = _MERGE if len(parts) > _MERGE else None
        order = _merge_order(parts) if merge else None
        grouping[name] = (merge, order)
        plans.append((name, parts, _plan_at(parts, merge, order, arity)))
        if merge:
            rep = _proxy_parts(parts, order, merge)
            proxies.append((name, rep, _plan_at(rep, merge, order, arity)))
        else:
            proxies.append(plans[-1])
    # The planner's model of the shifts (leaf_mesh) is good to a factor of a few only, so a pilot
    # composition on meshes _PILOT_SCALE times coarser measures the discretisation width, and the
    # meshes are then scaled for the target: the width is second order in the meshes (checked: it
    # follows h^2 to within ~10% over a factor of 3 in h).  The pilot costs a fraction of the answer
    # (its lattices are a third as fine); it is the answer when it already reaches the target.
    # Grouped plans (many distinct parts) run the pilot on a proxy: every part of a block takes the
    # block's middle part's loss (same plan, meshes and copies; one leaf computation per block and
    # direction instead of one per part, the leaves costing about as much on the pilot's meshes as on
    # the answer's); the pilot then only measures, and the answer is composed and measured on the parts.
    doomed = [skip_doomed]  # (checked on the first attempt's meshes only: the later ones differ by a few x)
    # (atom spacings far below the planner's meshes only once a width has missed: the model's shift is a bound, the
    # planner's first meshes may serve, and a far mesh costs G_t / a times the buckets; a precaution -- on the mixes
    # measured the first attempt is the pilot's or misses anyway, and the paths were the same)
    far = [False]

    def attempt(scale, plans):
        jobs, names = [], []
        memo = {WINDOWS: windows}  # the leaves' grids and integrals, shared by the two chains of this attempt
        meshes_of = {}
        deferred, dds = {}, {}
        for name, parts, plan in plans:
            p_inf = -math.expm1(sum(c * math.log1p(-loss.p_inf) for loss, c in parts))
            # (the dominated chain composes each loss's dominated counterpart where it has one, whose mass at +inf
            # is its own: a dominating loss's may hold rounding charges, which are no lower bound -- random
            # allocation's epoch losses)
            p_inf_lo = -math.expm1(sum(c * math.log1p(-_dominated_p_inf(loss)) for loss, c in parts))
            defer = eager is not None and name != eager
            if defer and reverse_eager:
                # (both chains deferred: the eager direction's upper curve reversed bounds this one's, and it runs
                # only where that bound does not settle the answer -- DominancePLD._deferred; its meshes are made
                # when it runs)
                rest = (budgets, backend, max_buckets)
                dds[name] = _DeferredDirection(name, functools.partial(
                    _deferred_chains, plan, parts, eps_error, scale * coarse.get(name, 1.0), rest + (p_inf,),
                    rest + (p_inf_lo,), arity, functools.partial(_plan_at, parts, *grouping[name])), memo)
                continue
            h1 = leaf_mesh(parts, plan, eps_error, scale * coarse.get(name, 1.0),
                           far=far[0] and eager in (None, name))
            if (not meshes_of and doomed[0]
                    and _DOOMED_FACTOR * _first_node_floor(parts, plan, h1, backend.native, windows) > delta_error):
                # (before any leaf: the next arity's first node has fewer instances)
                raise _DoomedArity(f"arity {arity}: the first node's round-off is predicted not to fit "
                                   f"delta_error={delta_error:g}")
            meshes = meshes_of[name] = resolved_meshes(plan, h1, eps_error)
            args = (plan, meshes, budgets, backend, max_buckets, p_inf)
            args_lo = args[:5] + (p_inf_lo,)
            # (the chains run at once build their answer's query tables where they run; a deferred one, when it runs)
            chains = [_DeferredChain((args if upper else args_lo) + (upper, arity), memo, tables=upper or not defer)
                      for upper in (True, False)]
            names.append(name)
            if defer:
                deferred[name] = chains.pop()
                build = functools.partial(_plan_at, parts, *grouping[name])
                deferred[name].retry = functools.partial(_retry_args, build, parts, arity, eps_error,
                                                         scale * coarse.get(name, 1.0), args_lo[2:])
            jobs.append(chains)  # (per direction: its dominating chain, then its dominated one unless deferred)
        # the directions on two threads where they are predicted to take long enough (the FFTs and compiled
        # kernels release the GIL: 0.63x the time at q = 0.001 x 1e5, 1e6; small ones lose by the handover)
        doomed[0] = False
        leaves = (sum(_leaf_buckets(plan, meshes_of[name], budgets, backend.native, _SHARED_LEAF_BUCKETS, windows)
                      for name, _, plan in plans if name in meshes_of) if threads > 1 and len(plans) > 1 else 0.0)
        least = _PARALLEL_LEAF_BUCKETS if len(jobs) > 1 else _PARALLEL_ONE_DIRECTION
        us = _PARALLEL_MIN_US if leaves >= least else 0.0
        if leaves >= _SHARED_LEAF_BUCKETS or (coarse and us > 0):
            # (the dominating chains first, then the dominated ones, each to the first thread free: the dominated
            # chain to the coarser direction's thread, whose dominating chain ends first)
            order = sorted((k, i) for i, c in enumerate(jobs) for k in range(len(c)))
            out = [[None] * len(c) for c in jobs]
            for (k, i), r in zip(order, _run_shared([jobs[i][k] for k, i in order], threads, us)):
                out[i][k] = r
        else:
            out = _run_jobs([lambda c=c: [x() for x in c] for c in jobs], threads, us)
        order = [name for name, _, _ in plans]
        upper = {name: r[0] for name, r in zip(names, out)}
        lower = {name: r[1] for name, r in zip(names, out) if name not in deferred}
        queries = [{name: c[i].query for name, c in zip(names, jobs) if i < len(c)} for i in (0, 1)]
        deferred.update((name, dd.lower) for name, dd in dds.items())
        pld = DominancePLD(_LazyChains(upper, {name: dd.upper for name, dd in dds.items()}, order),
                           _LazyChains(lower, deferred, order), eps_error, delta_error, tuple(events),
                           backend.name, queries=queries)
        pld.rel_error = rel_error
        for dd in dds.values():
            dd.pld = pld
        return pld

    # the dominated chain of the direction epsilon is predicted to come from (the largest mu + 4 sd of the normal
    # approximation) runs at once; the others' are deferred (DominancePLD: their lower bounds are read only where
    # their upper bounds exceed its lower one, which for the subsampled Gaussian's add direction is near epsilon 0
    # only; the reference widths run them where needed)
    def leaf_meshes(scale):
        return [leaf_mesh(parts, plan, eps_error, scale * coarse.get(name, 1.0), far=far[0] and eager in (None, name))
                for name, parts, plan in plans]

    eager = _eager_direction(dir_parts, eps_error, rel_error)
    # (the other direction the eager one's reverse: its chains deferred, DominancePLD._deferred)
    reverse_eager = (eager is not None and _DEFER_REVERSED and len(dir_parts) == 2
                     and {name for name, _ in dir_parts} == {"remove", "add"} and _reversed_directions(events)
                     and _reversal_settles(dir_parts, eager, delta_error))
    # (the other directions' dominating chains on coarser meshes, where their predicted epsilons lie far enough
    # below: see _coarse_factors; dropped for good after a width that misses)
    coarse = _coarse_factors(dir_parts, eager, eps_error, rel_error)
    proxy = any(p is not q for p, q in zip(plans, proxies))
    model = _model_scale(dir_parts)
    if model is not None:
        # smooth losses: the width's model is good to ~1.4x, so no pilot (it cost 25-35% of the time)
        scale, proxy = model, False
        pld = attempt(scale, plans)
    else:
        # (discrete losses keep the coarse pilot: their atoms sit on its lattices, and it is their answer)
        discrete = all(isinstance(loss, DiscreteLoss) for _, parts in dir_parts for loss, _ in parts)
        first = _PILOT_SCALE if proxy or discrete else _PILOT_SCALE_PARTS
        try:
            pld = attempt(first, proxies)
            scale = first
        except _BudgetError:
            if first == _PILOT_SCALE_PARTS and not proxy:
                # (the planner's meshes charged more than delta_error -- their cells' mass error bounds, over a
                # million copies of a Poisson-subsampled Laplace --: the coarse pilot, whose fewer cells may fit, and
                # the rescaling from it, which may find meshes fine enough and coarse enough)
                scale = _PILOT_SCALE
                pld = attempt(scale, proxies)
            else:
                # (the pilot's coarse lattice may be charged more round-off: a lattice-like PMF's spectral
                # peaks; the planner's meshes then, refusals of which are the caller's)
                scale, proxy = 1.0, False
                pld = attempt(scale, plans)
    if proxy:  # (the proxy's width only aims the first answer; the answers' own widths decide)
        excess = pld._reference_excess(eps_error, rel_error)
        if math.isfinite(excess):
            # (coarser than the pilot's by at most _PILOT_SCALE: the h^2 law is measured over that range)
            scale = _quantized(scale * min(_PILOT_SCALE, _SCALE_MARGIN * math.sqrt(1.0 / excess)))
        pld = attempt(scale, plans)
    # every answer's width is measured and a miss rescaled, at most _RESCALES times (the h^2 law
    # extrapolated far -- a pilot 10-30x off the target, mixed mechanisms -- can miss twice)
    excess = pld._reference_excess(eps_error, rel_error)
    if excess > 1.0 and coarse:
        # (a miss with coarser meshes for the other directions: they may be what widened it -- their upper bounds
        # above the eager one's lower bound somewhere -- so every direction takes the meshes the model gives
        # before the rescaling below judges them; not on these meshes again where the eager direction's own chains
        # already miss whatever the others' meshes: a pilot 10-100 times too coarse for a subsampled Laplace,
        # composed twice on the same meshes)
        again = pld._excess_with(eager, eps_error, rel_error, excess) <= 1.0
        coarse.clear()
        if again:
            pld = attempt(scale, plans)
            excess = pld._reference_excess(eps_error, rel_error)
    # (the widths against the eager direction's leaf mesh, which sets them: aligned meshes do not follow the scale)
    lead = next((i for i, (name, _, _) in enumerate(plans) if name == eager), None)
    seen = []
    if not excess <= 1.0:  # (the last answer's meshes, where a rescaling or the refusal needs them)
        meshes = leaf_meshes(scale)
        seen.append((meshes[lead] if lead is not None else min(meshes), excess))
    best = (excess, pld)
    while excess > 1.0 and math.isfinite(excess) and len(seen) <= _RESCALES:
        # the width follows scale^p: p = 2 (second order) until two attempts measure it (lattice-like
        # losses whose atoms miss the lattices shrink more slowly)
        p, factor = 2.0, None
        if len(seen) >= 2:
            (s1, e1), (s2, e2) = seen[-2:]  # (leaf meshes and widths)
            if e1 > 0 and e2 > 0 and s1 != s2:
                # (below 0.5: erratic -- an epsilon where the curve is nearly flat, a lattice's alignment with
                # atoms -- or a floor of the losses' own, e.g. a loss pair's gap: second order assumed, and
                # _RESCALES bounds the attempts)
                q = math.log(e1 / e2) / math.log(s1 / s2)
                p = min(q, 3.0) if q >= 0.5 else 2.0
            if e2 > e1 and s2 < s1:
                # wider on finer meshes: a lattice badly aligned with a support end, where the dominated
                # leaf's lowest cell loses its balance (a subsampled Gaussian at sigma 0.5: e^-3 of the mass
                # over 1e4 copies at some meshes, none at their neighbours 2^(1/8) apart): the next mesh
                factor = 2.0 ** -0.125
        if len(seen) == 1 and model is not None and excess > _MODEL_OFF:
            # far off a model good to ~1.4x: not the meshes' h^2 law but a lattice badly aligned with a
            # support end (as below): the next mesh first
            factor = 2.0 ** -0.125
        if factor is None:
            # (at most _MAX_REFINE finer a step: a width far off the h^p law -- the dominated chain's mass
            # lost on coarse meshes -- would otherwise send the meshes thousands of times finer than needed)
            factor = max((_SCALE_MARGIN ** 2 / excess) ** (1.0 / p), 1.0 / _MAX_REFINE)
        far[0] = True
        scale = _quantized(scale * factor)
        for _ in range(_PINNED_STEPS):
            # (meshes aligned on a loss's atoms do not follow the scale while the planner's is coarser than their
            # spacing allows -- pinned at span / R, then span / (R M) --: the scale goes on down until some mesh is
            # the factor finer, else every rescaling composed the same meshes again, or one step finer:
            # PoissonSubsampled(Laplace(34.5), 0.003) x 9 and PoissonSubsampled(Laplace(1.55), 0.0012) x 2, refused;
            # the eager direction's mesh where there is one: another's moving left the one that sets the width pinned
            # over two rescalings of a mix of parts with atoms)
            now = leaf_meshes(scale)
            if (now[lead] <= meshes[lead] * factor * (1 + 1e-9) if lead is not None
                    else any(m <= c * factor * (1 + 1e-9) for m, c in zip(now, meshes))):
                break
            scale = _quantized(scale * 2.0 ** -0.125)
        # (finer meshes whose charges do not fit delta_error: refused, as the other methods refuse
        # an eps_error they cannot reach; auto then takes a coupling plan)
        pld = attempt(scale, plans)
        excess = pld._reference_excess(eps_error, rel_error)
        meshes = leaf_meshes(scale)
        seen.append((meshes[lead] if lead is not None else min(meshes), excess))
        if excess < best[0]:
            best = (excess, pld)
    if not excess <= 1.0:
        if math.isfinite(best[0]):
            best[1].lower_directions.release()  # (it may be answered after all: _narrowest_answer)
            best[1].directions.release()
        what = f"rel_error={rel_error:g}" if rel_error is not None else f"eps_error={eps_error:g}"
        raise _WidthError(
            f"the dominance certificate did not reach {what}: its width is {excess:.3g} times the width asked "
            f"after {len(seen)} compositions (the last at meshes {scale:.3g} times the planner's); give a larger "
            f"accuracy, or eps_error for the coupling certificate",
            best[1] if math.isfinite(best[0]) else None)
    pld.lower_directions.release()  # (a deferred chain run later computes its own leaves: the same results)
    pld.directions.release()
    return pld


def _plan_at(parts, merge, order, arity: int):
    """A direction's recursive plan at ``arity`` (as :func:`_compose_dominance` builds it).  A root that would pass
    its one child through (``k = arity^t`` copies of one part) is that child: the root's own lattice would take a
    re-discretisation -- a split and its charges -- of the composed PMF for nothing but a coarser final lattice.
    The leaf's mesh stays the full plan's (:func:`leaf_mesh`), and so do the other groups' meshes
    (:func:`dominance_meshes`: the same copies per group)."""
    plan = _build_plan(parts, "recursive", arity, merge=merge, order=order, direct_max=_DIRECT_COPIES * arity ** 2)
    kids = plan.root.children
    if len(kids) == 1 and kids[0][1] == 1 and isinstance(kids[0][0], _Node):
        full, plan = plan, _Plan(kids[0][0], plan.method, plan.params, plan.n_parts)
        plan.mesh_plan = full  # (its leaf mesh: :func:`leaf_mesh`)
    return plan


def _leaf_buckets(plan, meshes, budgets, native, enough=1e5, windows=None) -> float:
    """About how many buckets the plan's leaves hold (their truncation windows over their meshes, the tails as
    :func:`fastpld.composition.execute._execute` sets them); a prediction only (a loss whose window cannot be
    had counts 0), summed until ``enough``."""
    n_objects = plan.n_nodes + plan.n_leaves
    total = 0.0
    for o in plan.order:
        if not isinstance(o, _Leaf):
            continue
        loss = o.loss
        try:
            if isinstance(loss, DiscreteLoss):
                v = np.asarray(loss.values, dtype=np.float64)
                span = float(v.max() - v.min()) if v.size else 0.0
            else:
                a, b = window(loss, budgets.trunc / (n_objects * plan.instances[id(o)] * 2), native, windows)
                span = b - a
        except (ValueError, ArithmeticError, NotImplementedError, AttributeError, TypeError):
            continue
        if math.isfinite(span):
            total += span / meshes[o.group]
        if total >= enough:
            break
    return total
