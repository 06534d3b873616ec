"""The planner's windows of a whole plan's leaves and nodes, in array passes.

Built on :mod:`.grids`: the objects holding copies of one loss get the window of that many
copies, the other nodes the Chernoff window of their children's summed cumulant grids.  The
results are bitwise those of asking :func:`.grids._est_window` object by object (tested).
"""
from __future__ import annotations

import math

import numpy as np

from ..mechanisms import SubsampledLoss
from .grids import _IDX_S1, _S_GRID, _cumulant_grids, _est_window, _window_from_grids
from .plan import _Leaf, _leaf_parts


def _grid_stack(wcache, losses, native):
    """``(row, KP, KN, LO, HI)``: the MGF grids of ``losses`` as matrix rows (``row``: by ``id(loss)``) and
    their support ends; built once per composition (memoised in ``wcache``), extended as needed."""
    key = ("grid stack", bool(native))
    st = wcache.get(key)
    have = st[0] if st is not None else {}
    new = list({id(x): x for x in losses if id(x) not in have}.values())
    if st is not None and not new:
        return st
    grids = _cumulant_grids(new, native)
    row = dict(st[0]) if st is not None else {}
    for loss in new:
        row[id(loss)] = len(row)
    parts = [np.array([g[0] for g in grids]).reshape(len(new), _S_GRID.size),
             np.array([g[1] for g in grids]).reshape(len(new), _S_GRID.size),
             np.array([loss.support[0] for loss in new], dtype=np.float64),
             np.array([loss.support[1] for loss in new], dtype=np.float64)]
    if st is not None:
        parts = [np.concatenate([old, p]) for old, p in zip(st[1:], parts)]
    st = wcache[key] = (row, *parts)
    return st


def _single_windows(wcache, todo, native, stack=None):
    """Fill ``wcache[(id(loss), copies, lt)]`` with ``_est_window([(loss, copies)], e^lt)`` for ``todo``
    (pairs ``(loss, key)``), in one array pass per ``lt``: the same quotients and minima as the
    Chernoff kernels (bitwise); the rare keys without finite quantiles go through _est_window.
    ``stack``: :func:`_grid_stack` holding the losses, if at hand.  (Called under _predict's errstate.)"""
    todo = list({k: (loss, k) for loss, k in todo}.values())
    if len(todo) < 4:
        for loss, k in todo:
            wcache[k] = _est_window([(loss, k[1])], math.exp(k[2]), native)
        return
    st = stack if stack is not None else _grid_stack(wcache, [loss for loss, _ in todo], native)
    srow = st[0]
    by_lt = {}
    for loss, k in todo:
        by_lt.setdefault(k[2], []).append((loss, k))
    for lt_key, items in by_lt.items():
        if len(items) < 8:  # (a few: the per-key kernel costs less than the array set-up)
            for loss, k in items:
                wcache[k] = _est_window([(loss, k[1])], math.exp(k[2]), native)
            continue
        lt = math.log(math.exp(lt_key))  # as _est_window(..., math.exp(lt)) takes the log of its tail
        rows = np.array([srow[id(loss)] for loss, _ in items], dtype=np.intp)
        copies = [k[1] for _, k in items]
        kp, kn = np.take(st[1], rows, axis=0), np.take(st[2], rows, axis=0)
        if any(c != 1 for c in copies):  # (x * 1.0 == x)
            c = np.array(copies, dtype=np.float64)[:, None]
            np.multiply(c, kp, out=kp)
            np.multiply(c, kn, out=kn)
        np.subtract(kp, lt, out=kp)
        np.subtract(kn, lt, out=kn)
        up = np.minimum.reduce(np.divide(kp, _S_GRID, out=kp), axis=1).tolist()
        lo = (-np.minimum.reduce(np.divide(kn, _S_GRID, out=kn), axis=1)).tolist()
        lo_s, hi_s = st[3][rows].tolist(), st[4][rows].tolist()
        for j, (loss, k) in enumerate(items):
            lo_j, up_j = lo[j], up[j]
            if not (math.isfinite(lo_j) and math.isfinite(up_j)):  # NaN or no MGF: _est_window's fallback
                wcache[k] = _est_window([(loss, k[1])], math.exp(lt_key), native)
                continue
            # (copies >= 1: an infinite support end stays infinite, as _est_window's test for it gave)
            wcache[k] = (max(lo_j, copies[j] * lo_s[j]), min(up_j, copies[j] * hi_s[j]))


def _tightened_grid_stack(stack, plan, wcache):
    """:func:`_grid_stack` restricted to the plan's losses, their ``K(-s)`` grids tightened.

    ``K(-s)`` of a subsampled loss is a chord between integer orders: ``0`` on ``[0, 1]`` and far
    above the truth past it, so the lower Chernoff quantile of a block of many such leaves was
    about ``-log(1/tail)``, its predicted window 2-4x too wide at the second level, and the planner
    picked small blocks.  A privacy loss has ``K(0) = K(-1) = 0`` and, near Gaussian,
    ``K(s) ~ v s (s + 1) / 2`` with ``v ~ K(1)``; the subsampled losses' left tails are lighter
    than that, so ``K(-s)`` is taken as the smaller of its grid and ``1.25 K(1) s (s - 1) / 2``.
    Planning only (execution bounds its windows from the concrete PMFs).  (Capping each leaf's
    grid past its truncation window was tried as well: no predicted cost changed.)
    """
    srow, kp, kn, s_lo, s_hi = stack
    used = {}  # the plan's losses: the returned stack has their rows only (a sample plan: a few)
    for o in plan.order:
        if isinstance(o, _Leaf):
            r = srow.get(id(o.loss))
            if r is not None:
                used[id(o.loss)] = (r, isinstance(o.loss, SubsampledLoss))
    if not any(sub for _, sub in used.values()):
        return stack
    rows = sorted(set(used.values()))
    key = ("hetero stack", np.array(rows, dtype=np.intp).tobytes())  # (the candidate plans share it)
    out = wcache.get(key)
    if out is None:
        sel = np.array([r for r, _ in rows], dtype=np.intp)
        kp2, kn2 = kp[sel], kn[sel]
        sub = np.array([i for i, (_, is_sub) in enumerate(rows) if is_sub], dtype=np.intp)
        quad = 1.25 * kp2[sub, _IDX_S1][:, None] * (_S_GRID * (_S_GRID - 1.0) / 2.0)[None, :]
        kn2[sub] = np.where(np.isfinite(quad), np.minimum(kn2[sub], quad), kn2[sub])
        out = wcache[key] = ({r: i for i, (r, _) in enumerate(rows)}, kp2, kn2, s_lo[sel], s_hi[sel])
    new_row = out[0]
    return ({i: new_row[r] for i, (r, _) in used.items()}, *out[1:])


def _mixed_node_windows(plan, single, keys, height, wrap_tail, stack, native):
    """Wrap windows of the nodes not holding copies of one loss (``keys`` has those): their children's
    summed MGF grids (``sum_c m_c (copies_c K_c)``) and Chernoff quantiles, as _predict_impl computed them
    node by node, here in array passes over the nodes of one height and number of children.

    The sums run child by child in child order (``acc + row``), the quotients and minima are the
    Chernoff kernels' (bitwise the same windows); a node without finite quantiles gets _est_window's.
    ``stack``: :func:`_grid_stack` of the single-loss objects' losses.  (Called under _predict's errstate.)
    """
    srow, s_kp, s_kn, s_lo, s_hi = stack
    groups = {}
    for o in plan.order:
        if id(o) not in keys:
            groups.setdefault((height[id(o)], len(o.children)), []).append(o)
    agg = {}  # id(node) -> (kp row, kn row, lo_sum, hi_sum)
    out = {}
    n_s = _S_GRID.size
    lo_l, hi_l = s_lo.tolist(), s_hi.tolist()
    for (_, k), nodes in sorted(groups.items(), key=lambda t: t[0]):
        nb = len(nodes)
        if nb * k <= 8:  # a few children: node by node, as _predict_impl did (the array set-up costs more)
            for o in nodes:
                kp = kn = None
                lo_s = hi_s = 0.0
                for c, m in o.children:
                    s = single.get(id(c))
                    if s is not None:
                        copies, r = s[1], srow[id(s[0])]
                        ckp, ckn, clo, chi = copies * s_kp[r], copies * s_kn[r], copies * lo_l[r], copies * hi_l[r]
                    else:
                        ckp, ckn, clo, chi = agg[id(c)]
                    kp = m * ckp if kp is None else kp + m * ckp
                    kn = m * ckn if kn is None else kn + m * ckn
                    lo_s += m * clo
                    hi_s += m * chi
                agg[id(o)] = (kp, kn, lo_s, hi_s)
                tail = wrap_tail / max(plan.instances[id(o)], 1)
                w = _window_from_grids(kp, kn, lo_s, hi_s, tail, native)
                if not (math.isfinite(w[0]) and math.isfinite(w[1]) and w[0] <= w[1]):
                    w = _est_window(_leaf_parts(o), tail, native)
                out[id(o)] = w
            continue
        kp_in = kn_in = None
        sel, rows, cop, mul, sups = [], [], [], [], []
        pos = 0
        for o in nodes:
            lo_s = hi_s = 0.0
            for c, m in o.children:
                s = single.get(id(c))
                if s is not None:
                    copies = s[1]
                    r = srow[id(s[0])]
                    sel.append(pos)
                    rows.append(r)
                    # (copies >= 1: an infinite end stays infinite, as _predict_impl's test for it gave)
                    clo, chi = copies * lo_l[r], copies * hi_l[r]
                else:
                    copies = 1  # x * 1.0 == x: an aggregate enters as it is
                    ckp, ckn, clo, chi = agg[id(c)]
                    if kp_in is None:
                        kp_in, kn_in = np.empty((nb * k, n_s)), np.empty((nb * k, n_s))
                    kp_in[pos] = ckp
                    kn_in[pos] = ckn
                cop.append(copies)
                mul.append(m)
                lo_s += m * clo
                hi_s += m * chi
                pos += 1
            sups.append((lo_s, hi_s))
        if kp_in is None:  # only leaf-like children: one gather
            rows = np.array(rows, dtype=np.intp)
            kp_in, kn_in = np.take(s_kp, rows, axis=0), np.take(s_kn, rows, axis=0)
        elif rows:
            kp_in[sel] = s_kp[rows]
            kn_in[sel] = s_kn[rows]
        # m (copies K), in place (the multiplication by copies skipped where all are 1: exact)
        if any(x != 1 for x in cop):
            copies = np.array(cop, dtype=np.float64)[:, None]
            np.multiply(copies, kp_in, out=kp_in)
            np.multiply(copies, kn_in, out=kn_in)
        mult = np.array(mul, dtype=np.float64)[:, None]
        np.multiply(mult, kp_in, out=kp_in)
        np.multiply(mult, kn_in, out=kn_in)
        kp_in = kp_in.reshape(nb, k, n_s)
        kn_in = kn_in.reshape(nb, k, n_s)
        kp, kn = kp_in[:, 0].copy(), kn_in[:, 0].copy()
        for j in range(1, k):  # child by child, as the sequential sum
            np.add(kp, kp_in[:, j], out=kp)
            np.add(kn, kn_in[:, j], out=kn)
        tails = [wrap_tail / max(plan.instances[id(o)], 1) for o in nodes]
        lt = np.array([math.log(t) for t in tails])[:, None]
        up = np.minimum.reduce((kp - lt) / _S_GRID, axis=1)  # (np.min without its wrapper)
        lo = -np.minimum.reduce((kn - lt) / _S_GRID, axis=1)
        for b, o in enumerate(nodes):
            agg[id(o)] = (kp[b], kn[b], sups[b][0], sups[b][1])
            lo_b, up_b = float(lo[b]), float(up[b])
            # (_chernoff_quantiles: NaN -> -inf / +inf; _window_from_grids: clipped to the supports)
            lo_b = -math.inf if math.isnan(lo_b) else lo_b
            up_b = math.inf if math.isnan(up_b) else up_b
            w = (max(lo_b, sups[b][0]), min(up_b, sups[b][1]))
            # (a quantile past the other side's support -- the summed grids of a part composed once, whose loss is
            # ~1e-4 wide, beside parts thousands of times wider -- inverts the window: a negative width, a mesh
            # of 1e-105 for its group, and every candidate plan refused blaming the mechanism's epsilon)
            if not (math.isfinite(w[0]) and math.isfinite(w[1]) and w[0] <= w[1]):
                w = _est_window(_leaf_parts(o), tails[b], native)
            out[id(o)] = w
    return out
