"""The planner's array passes for many distinct parts give bitwise the per-part values.

(MGF grids of many subsampled losses in one pass, the moment-free Gaussian test, the windows and
sums of a whole plan: each against the straightforward per-loss / per-node computation.)
"""
import math

import numpy as np
import pytest

import fastpld
from fastpld import mechanisms as M
from fastpld.composition import api, budget, planner, precision, roundoff
from fastpld.composition import cost as cost_mod, grids as grids_mod, plan as plan_mod, series as series_mod


def _same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


def _mechanisms(seed=3):
    r = np.random.default_rng(seed)
    out = [fastpld.PoissonSubsampledGaussian(float(r.uniform(0.5, 5)), float(r.uniform(1e-4, 0.5))) for _ in range(12)]
    # huge noise: Gaussian at s = 512, where _gauss_extend does extend the grids
    out += [fastpld.PoissonSubsampledGaussian(s, q) for s in (30.0, 300.0, 3000.0) for q in (1e-3, 0.3)]
    out += [fastpld.PoissonSubsampledLaplace(float(r.uniform(0.5, 5)), float(r.uniform(1e-3, 0.5))) for _ in range(4)]
    out += [fastpld.PoissonSubsampledGaussian(1.0, float(q)) for q in np.linspace(0.005, 0.02, 6)]
    return out


def _losses(mechs):
    return [m.privacy_losses()[d] for m in mechs for d in ("remove", "add")]


@pytest.mark.parametrize("native", [True, False])
def test_log_mgf_rows_equal_per_loss(native):
    s = grids_mod._S_GRID
    sc = np.where(s <= 512, s, np.nan)
    grid = np.concatenate([sc, -sc, [0.0, -0.5, -1.0, 1e4, -1e4]])
    M._LOSS_CACHE.clear()
    with np.errstate(over="ignore", invalid="ignore"):
        rows = M.subsampled_log_mgf_rows(_losses(_mechanisms()), grid, native=native)
    M._LOSS_CACHE.clear()  # fresh losses and memos: nothing shared with the batch
    with np.errstate(over="ignore", invalid="ignore"):
        ref = np.stack([loss.log_mgf(grid, native=native) for loss in _losses(_mechanisms())])
    assert _same(rows, ref)


def _reference_grid(loss, native):
    """_k_grid as before the batch: per loss, moments always computed (no far test)."""
    native = bool(native) and isinstance(loss, M.SubsampledLoss)
    s = grids_mod._S_GRID
    lmgf = (lambda x: loss.log_mgf(x, native=True)) if native else loss.log_mgf
    with np.errstate(over="ignore", invalid="ignore"):
        sc = np.where(s <= 512, s, np.nan)
        both = np.asarray(lmgf(np.concatenate([sc, -sc])), dtype=np.float64)
    kp, kn = both[:s.size], both[s.size:]
    kp = np.where(np.isnan(kp), np.inf, kp)
    kn = np.where(np.isnan(kn), np.inf, kn)
    return grids_mod._gauss_extend(loss, kp, kn, far=False)


@pytest.mark.parametrize("native", [True, False])
def test_k_grids_equal_reference(native):
    M._LOSS_CACHE.clear()
    mechs = _mechanisms() + [fastpld.Gaussian(7.0), fastpld.Laplace(30.0)]
    grids = grids_mod._cumulant_grids(_losses(mechs), native)
    M._LOSS_CACHE.clear()
    ref = [_reference_grid(loss, native) for loss in _losses(mechs)]
    extended = 0
    for (a, b), (x, y) in zip(grids, ref):
        assert _same(a, x) and _same(b, y)
        extended += bool(np.isfinite(x[-1]))
    assert extended >= 2  # the sweep includes grids that _gauss_extend extends past s = 512
    # the per-loss path (with the far test) agrees too
    M._LOSS_CACHE.clear()
    for loss, (x, y) in zip(_losses(mechs), ref):
        a, b = grids_mod._cumulant_grid(loss, native)
        assert _same(a, x) and _same(b, y)


def test_far_from_gauss_only_where_the_test_fails():
    """Wherever _far_from_gauss says so, _gauss_extend's moment test fails (so skipping it is exact)."""
    M._LOSS_CACHE.clear()
    losses = _losses(_mechanisms(7)) + [fastpld.Gaussian(3.0).privacy_losses()["add"]]
    grids = [_reference_grid(loss, True) for loss in losses]
    raw = []
    for loss in losses:
        s = grids_mod._S_GRID
        with np.errstate(over="ignore", invalid="ignore"):
            sc = np.where(s <= 512, s, np.nan)
            lm = loss.log_mgf(np.concatenate([sc, -sc]), native=True) if isinstance(loss, M.SubsampledLoss) \
                else loss.log_mgf(np.concatenate([sc, -sc]))
        raw.append((np.where(np.isnan(lm[:s.size]), np.inf, lm[:s.size]),
                    np.where(np.isnan(lm[s.size:]), np.inf, lm[s.size:])))
    far = grids_mod._far_from_gauss(np.array([r[0] for r in raw]), np.array([r[1] for r in raw]))
    assert far.sum() >= len(losses) // 2  # it spares most subsampled losses their moments
    i = grids_mod._IDX_S512
    for f, loss, (kp, kn), g in zip(far, losses, raw, grids):
        if not f:
            continue
        assert _same(g[0], kp) and _same(g[1], kn)
        mu, sd = loss.mean(), loss.std()
        for k, sign in ((kp, 1.0), (kn, -1.0)):
            g0 = sign * grids_mod._S_GRID[i] * mu + 0.5 * (grids_mod._S_GRID[i] * sd) ** 2
            assert not (math.isfinite(k[i]) and g0 > 0) or abs(k[i] - g0) / g0 > 1.0001e-3


def test_sequential_row_sums():
    """_agg_windows adds the children's grids row by row; the in-place adds equal the Python fold."""
    r = np.random.default_rng(0)
    a = r.standard_normal((7, 5, 361)) * np.exp(r.uniform(-30, 30, (7, 5, 361)))
    a[r.random(a.shape) < 0.02] = np.inf
    acc = a[:, 0].copy()
    for j in range(1, 5):
        np.add(acc, a[:, j], out=acc)
    for b in range(7):
        ref = a[b, 0]
        for j in range(1, 5):
            ref = ref + a[b, j]
        assert _same(acc[b], ref)


def _reference_predict(plan, eps_az, log_term, wrap_tail, trunc_tail, wcache, budgets, native):
    """_predict_impl as it was, node by node (the oracle of the array passes)."""
    a = plan.copies_per_group()
    widths = {g: 0.0 for g in plan.groups}
    node_w, single, agg = {}, {}, {}

    def window_single(loss, copies, tail):
        lt = round(math.log(tail))
        key = (id(loss), copies, lt)
        r = wcache.get(key)
        if r is None:
            r = wcache[key] = grids_mod._est_window([(loss, copies)], math.exp(lt), native)
        return r

    hetero = plan.n_parts > 2

    def grids(loss):
        kp, kn = grids_mod._cumulant_grid(loss, native)
        if not hetero:
            return kp, kn
        if isinstance(loss, M.SubsampledLoss):  # (_hetero_stack)
            s = grids_mod._S_GRID
            quad = 1.25 * kp[grids_mod._IDX_S1] * (s * (s - 1.0) / 2.0)
            kn = np.where(np.isfinite(quad), np.minimum(kn, quad), kn)
        return kp, kn

    def get_agg(o):
        r = agg.get(id(o))
        if r is None:
            loss, copies = single[id(o)]
            kp, kn = grids(loss)
            lo, hi = loss.support
            r = (copies * kp, copies * kn, copies * lo if math.isfinite(lo) else -math.inf,
                 copies * hi if math.isfinite(hi) else math.inf)
        return r

    for o in plan.order:
        inst = plan.instances[id(o)]
        if isinstance(o, plan_mod._Leaf):
            lo, hi = window_single(o.loss, 1, trunc_tail / max(inst, 1))
            w = hi - lo
            widths[o.group] += cost_mod._LEAF_COST * w
            single[id(o)] = (o.loss, 1)
        else:
            tail = wrap_tail / max(inst, 1)
            kids = [single.get(id(c)) for c, _ in o.children]
            if all(k is not None for k in kids) and len({id(k[0]) for k in kids}) == 1:
                copies = sum(k[1] * m for k, (_, m) in zip(kids, o.children))
                single[id(o)] = (kids[0][0], copies)
                lo, hi = window_single(kids[0][0], copies, tail)
            else:
                kp = kn = None
                lo_s = hi_s = 0.0
                for c, m in o.children:
                    ckp, ckn, clo, chi = get_agg(c)
                    kp = m * ckp if kp is None else kp + m * ckp
                    kn = m * ckn if kn is None else kn + m * ckn
                    lo_s += m * clo
                    hi_s += m * chi
                agg[id(o)] = (kp, kn, lo_s, hi_s)
                lo, hi = grids_mod._window_from_grids(kp, kn, lo_s, hi_s, tail, native)
                if not (math.isfinite(lo) and math.isfinite(hi)):
                    lo, hi = grids_mod._est_window(plan_mod._leaf_parts(o), tail, native)
            w = hi - lo
            widths[o.group] += w * (len(o.children) + 1) * cost_mod._precision_weight(o, plan, budgets)
        node_w[id(o)] = w
    shape = {g: (max(widths[g], 1e-300) / max(a[g], 1)) ** (1.0 / 3.0) for g in plan.groups}
    denom = sum(a[g] * shape[g] ** 2 for g in plan.groups)
    scale = eps_az / math.sqrt(max(denom, 1e-300) * log_term / 2)
    meshes = {g: scale * shape[g] for g in plan.groups}
    cost = fp_pred = 0.0
    sizes = {}
    n_obj = plan.n_nodes + plan.n_leaves
    allowance, node_allowance = budgets.fp / n_obj, budgets.fp / max(plan.n_nodes, 1)
    for o in plan.order:
        n = node_w[id(o)] / meshes[o.group] + 1
        sizes[id(o)] = n
        if isinstance(o, plan_mod._Leaf):
            if not hetero:
                cost += cost_mod._T_LEAF + cost_mod._T_LEAF_POINT * n
            elif native and getattr(o.loss, "psg_params", None) is not None:
                cost += cost_mod._T_LEAF_PSG + cost_mod._T_LEAF_PSG_POINT * n
            else:
                cost += cost_mod._T_LEAF_H + cost_mod._T_LEAF_H_POINT * n
        else:
            nn = max(n, 2.0)
            lg = math.ceil(math.log2(nn))
            inst = plan.instances[id(o)]
            msum = sum(m for _, m in o.children)
            mmax = max(m for _, m in o.children)
            est64, est_ser, ld, mixed = precision._predicted_precision(inst, msum, mmax, lg, o, allowance, node_allowance)
            if ld:
                fp_pred += (precision._predicted_fp_series(inst, msum, lg, mmax, False, roundoff._ULD)
                            if est_ser < est64 else precision._predicted_fp_plain(inst, msum, lg, roundoff._ULD))
            elif est64 > 0.25 * allowance:
                fp_pred += 2.5 * est_ser
            per_point = cost_mod._point_cost(len(o.children), ld, mixed)
            if ld and est_ser <= node_allowance:
                per_point += cost_mod._T_POINT_64
            child_pts = sum(sizes[id(c)] for c, _ in o.children)
            series = est64 > 0.25 * allowance and mmax >= 8 and child_pts * (series_mod._SERIES_R + 3) <= 2 * nn * math.log2(nn)
            if hetero and not ld and not series:
                cost += cost_mod._T_NODE_DIRECT + cost_mod._T_CHILD_POINT * child_pts + cost_mod._T_POINT_DIRECT * nn * (len(o.children) + 1) * lg / 12
            else:
                cost += cost_mod._T_NODE + (cost_mod._T_NODE_LD if ld else 0.0) + nn * (len(o.children) + 1) * per_point * lg / 12
    if fp_pred > 0.9 * (budgets.delta - budgets.eta):
        cost = 1e15 * (1 + fp_pred / budgets.delta)
    return meshes, cost, sizes


@pytest.mark.parametrize("native", [True, False])
def test_predict_equals_per_node_reference(native):
    de = 1e-9
    b = budget._Budgets.split(0.1, de)
    log_term, eps_az = math.log(2 / b.eta), 0.1 * (1 - budget._EPS_RESERVE)
    M._LOSS_CACHE.clear()
    r = np.random.default_rng(5)
    mechs = _mechanisms(11) + [fastpld.Gaussian(float(s)) for s in (9.0, 40.0)] + [fastpld.Laplace(80.0)]
    events = [(m, int(r.integers(1, 300))) for m in mechs] + [(mechs[0], 5)]
    parts = api._direction_parts(api._normalise_events(events, None))["remove"]
    for chain in (("glw", None), ("two_stage", None), ("recursive", 16)):
        for merge in (None, 2, 5, 16):
            plan = plan_mod._build_plan(parts, chain[0], chain[1], merge, native)
            n = plan.n_nodes + plan.n_leaves
            args = (plan, eps_az, log_term, b.wrap / n, b.trunc / n)
            meshes, cost, sizes = cost_mod._predict(*args, {}, b, native)
            with np.errstate(invalid="ignore", over="ignore"):
                ref = _reference_predict(*args, {}, b, native)
            assert meshes == ref[0] and cost == ref[1]
            assert [sizes[id(o)] for o in plan.order] == [ref[2][id(o)] for o in plan.order]


@pytest.mark.parametrize("n", [40, 300])
def test_choose_plan_candidates_equal_fresh_builds(n):
    """Every ranked candidate (shared grids, merge order and window memo) equals its plan built and
    predicted alone; the sampled chain ranking (many parts) and the full product (few) both."""
    de = 1e-8
    b = budget._Budgets.split(0.1, de)
    log_term, eps_az = math.log(2 / b.eta), 0.1 * (1 - budget._EPS_RESERVE)
    M._LOSS_CACHE.clear()
    r = np.random.default_rng(n)
    events = [(fastpld.PoissonSubsampledGaussian(float(r.uniform(0.7, 3)), float(r.uniform(1e-3, 0.1))),
               int(np.exp(r.uniform(0, 6)))) for _ in range(n)]
    for parts in api._direction_parts(api._normalise_events(events, None)).values():
        ranked = planner._choose_plan(parts, "auto", None, eps_az, log_term, b, True)
        assert len(ranked) >= 2
        for cost, plan, meshes in ranked:
            arity = next((p["arity"] for p in plan.params if "arity" in p), 16)  # (small counts: any)
            fresh = plan_mod._build_plan(parts, plan.method, arity, plan.params[0].get("merge"), True)
            k = fresh.n_nodes + fresh.n_leaves
            m2, c2, _ = cost_mod._predict(fresh, eps_az, log_term, b.wrap / k, b.trunc / k, {}, b, True)
            assert (c2, m2) == (cost, meshes)
            assert [(type(o).__name__, o.group, o.count) for o in fresh.order] == \
                [(type(o).__name__, o.group, o.count) for o in plan.order]


def test_psg_mean_sq_equals_psg_moments():
    """The 16-point-only kernel behind SubsampledLoss.mean/std gives psg_moments' I1, I2 bitwise."""
    from fastpld import _kernels as K
    r = np.random.default_rng(2)
    for _ in range(300):
        q = float(np.exp(r.uniform(-12, -0.01)))
        sigma = float(np.exp(r.uniform(-1.5, 4)))
        v = 1 / sigma ** 2
        remove = bool(r.integers(2))
        full = K.psg_moments(-math.inf, math.inf, q, v, math.sqrt(v), remove)
        assert _same(K.psg_mean_sq(q, v, math.sqrt(v), remove), (full[0], full[3]))
