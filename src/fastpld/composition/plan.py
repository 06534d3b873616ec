"""Plan trees: leaves, nodes and the shapes of the three methods.

A *plan* is a tree: leaves discretise one mechanism's privacy loss (Algorithm 1) on the finest
mesh of their chain, and each node convolves its children (``m``-fold powers in the Fourier
domain, modulo its window) after re-discretising them onto the node's mesh group.  ``glw`` is one
node over one mesh, ``two_stage`` is Algorithm 2 (``k = k1 k2 + r``) and ``recursive`` is
Algorithm 3 generalised to any ``k`` by a mixed-radix expansion with carries; many distinct parts
may be grouped into blocks (Appendix B).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import resources
from .grids import _S_GRID, _cumulant_grid


class _Leaf:
    """A leaf: one copy of ``loss`` discretised (Algorithm 1) on the mesh of ``group``."""

    __slots__ = ("loss", "group", "count", "_atoms")

    def __init__(self, loss, group, count):
        self.loss, self.group, self.count = loss, group, count


class _Node:
    """A node: the convolution of its ``children`` (``(object, multiplicity)``) on the mesh of ``group``."""

    __slots__ = ("children", "group", "count", "label", "_atoms")

    def __init__(self, children, group, label):
        self.children = [(c, int(m)) for c, m in children if m > 0]
        self.group = group
        self.label = label
        self.count = sum(c.count * m for c, m in self.children)


class _Plan:
    """A plan tree: its objects in topological order (children first), each object's number of instances
    (copies in the composed result), its mesh groups and sizes."""

    def __init__(self, root, method, params, n_parts=1):
        self.root = root
        self.method = method
        self.params = params
        self.n_parts = n_parts  # distinct (loss, count) parts composed
        # topological order: children before parents
        order, seen = [], set()

        def visit(o):
            if id(o) in seen:
                return
            seen.add(id(o))
            if isinstance(o, _Node):
                for c, _ in o.children:
                    visit(c)
            order.append(o)

        visit(root)
        self.order = order
        inst = {id(root): 1}
        for o in reversed(order):
            if isinstance(o, _Node):
                for c, m in o.children:
                    inst[id(c)] = inst.get(id(c), 0) + inst[id(o)] * m
        self.instances = inst
        self.groups = sorted({o.group for o in order})
        self.n_nodes = sum(isinstance(o, _Node) for o in order)
        self.n_leaves = len(order) - self.n_nodes

    def copies_per_group(self):
        """Number of coupling differences per mesh group (leaf copies + re-discretised copies)."""
        a = {g: 0 for g in self.groups}
        for o in self.order:
            if isinstance(o, _Leaf):
                a[o.group] += self.instances[id(o)]
            else:
                for c, m in o.children:
                    if c.group != o.group:
                        a[o.group] += self.instances[id(o)] * m
        return a


def _chain(loss, count, method, arity, gid, top_group=0):
    """Top-level children (for a parent on ``top_group``) of a plan for ``loss`` composed ``count`` times.

    ``gid`` yields fresh group ids for the lower levels.
    """
    if method == "glw" or count < 4:
        return [(_Leaf(loss, top_group, 1), count)], {"levels": 1}
    if method == "two_stage":
        k1 = math.isqrt(count)
        k2, r = divmod(count, k1)
        g1 = next(gid)
        leaf = _Leaf(loss, g1, 1)
        a = _Node([(leaf, k1)], g1, f"k1={k1}")
        top = [(a, k2)]
        if r == 1:
            top.append((leaf, 1))
        elif r > 1:
            top.append((_Node([(leaf, r)], g1, f"r={r}"), 1))
        return top, {"k1": k1, "k2": k2, "r": r, "levels": 2}
    # recursive: mixed radix with constant arity; carries accumulate lower digits
    a = max(2, int(arity))
    t = 1
    while a ** t <= count // a:
        t += 1
    # levels: node_1..node_{t}; node_j = node_{j-1}^a on group g_j; top digit = count // a^t
    groups = [next(gid) for _ in range(t)]
    leaf = _Leaf(loss, groups[0], 1)
    nodes = [leaf]
    for j in range(1, t + 1):
        nodes.append(_Node([(nodes[j - 1], a)], groups[j - 1], f"x{a}"))
    digits = []
    rem = count
    for j in range(t):
        rem, d = divmod(rem, a)
        digits.append(d)
    top_digit = rem  # >= 1
    carry = None
    for j in range(t):  # carry_j combines node_0..node_j digits, lives on group of node_{j+1}
        d = digits[j]
        kids = []
        if carry is not None:
            kids.append((carry, 1))
        if d:
            kids.append((nodes[j], d))
        if not kids:
            continue
        if len(kids) == 1 and kids[0][1] == 1:
            carry = kids[0][0]
            continue
        carry = _Node(kids, groups[j], f"carry{j}")
    top = [(nodes[t], top_digit)]
    if carry is not None:
        top.append((carry, 1))
    return top, {"arity": a, "levels": t + 1}


def _build_plan(parts, method, arity, merge=None, native=False, order=None, direct_max=None):
    """Plan for the heterogeneous list ``parts`` of ``(loss, count)``.

    ``merge=None``: every part's chain feeds one root (Appendix B with one block).
    ``merge=b``: parts are grouped into blocks of about ``b``, each block convolved
    on a fine narrow grid (one mesh group per level), the block results
    re-discretised onto a coarser, wider grid and grouped again, until at most
    ``b`` remain for the root: ``n`` distinct parts then cost ``O(n / b)`` small
    convolutions per level and ``O(log_b n)`` levels instead of ``n`` inputs to
    one full-size root.  Every level is an ordinary node of the plan, so the
    certificate (leaves, re-discretisations, wrap, round-off) covers it unchanged.

    ``order``: :func:`_merge_order` of ``parts`` if already known (the candidates of one composition share it).

    ``direct_max``: in grouped plans, a part of at most this many copies enters its block as its leaf
    with that multiplicity (one forward transform in the block's node) instead of a chain of its own
    (the dominance certificate: its block lattice is then the leaves' own, see ``docs/dominance.md``).
    """
    gid = iter(range(1, 1 << 30))
    params = []
    if merge is None or len(parts) <= merge:
        top = []
        for loss, count in parts:
            t, p = _chain(loss, count, method, arity, gid)
            top.extend(t)
            params.append(p)
        root = _Node(top, 0, "root")
        return _Plan(root, method, params, len(parts))
    b = max(2, int(merge))
    if order is None:
        order = _merge_order(parts, native)
    g = next(gid)
    tops = []
    for i in order:
        loss, count = parts[i]
        if direct_max is not None and count <= direct_max:
            t, p = [(_Leaf(loss, g, 1), count)], {"arity": arity, "levels": 1}
        else:
            t, p = _chain(loss, count, method, arity, gid, top_group=g)
        tops.append(t)
        params.append(p)
    level = 1
    items = tops  # each item: a list of (object, multiplicity) to convolve on group g
    while True:
        nb = -(-len(items) // b)
        bounds = [len(items) * j // nb for j in range(nb + 1)]  # balanced blocks
        nodes = []
        for j in range(nb):
            kids = [kid for it in items[bounds[j]:bounds[j + 1]] for kid in it if kid[1] > 0]
            if len(kids) == 1 and kids[0][1] == 1:
                nodes.append(kids[0][0])  # a lone child passes through
            else:
                nodes.append(_Node(kids, g, f"block{level}"))
        if len(nodes) <= b:
            break
        g = next(gid)
        level += 1
        items = [[(o, 1)] for o in nodes]
    root = _Node([(o, 1) for o in nodes], 0, "root")
    for p in params:
        p["merge"] = b
        p["merge_levels"] = level + 1
    return _Plan(root, method, params, len(parts))


def _merge_order(parts, native=False):
    """Order of the parts in grouped plans: similar parts side by side keep the narrow blocks narrow
    (order does not affect correctness).  Key: upper Chernoff quantile of each part at a moderate
    tail, from the cached MGF grids."""
    kp = (np.array([_cumulant_grid(loss, native)[0] for loss, _ in parts])
          * np.array([float(c) for _, c in parts])[:, None])
    with np.errstate(invalid="ignore", over="ignore"):
        size = np.min((kp + 20.0) / _S_GRID, axis=1).tolist()  # (Python floats: numpy scalars sort slowly)
    return sorted(range(len(parts)), key=lambda i: (size[i], parts[i][1]))


def _leaf_parts(node):
    """``[(loss, copies)]``: the leaves' losses under ``node`` and how many copies of each it sums."""
    acc = {}
    stack = [(node, 1)]
    while stack:
        o, mult = stack.pop()
        if isinstance(o, _Leaf):
            acc[id(o.loss)] = (o.loss, acc.get(id(o.loss), (o.loss, 0))[1] + mult)
        else:
            for c, m in o.children:
                stack.append((c, mult * m))
    return list(acc.values())


def _plan_name(plan):
    """The plan's method as reported (``DirectionResult.method``)."""
    name = plan.method if plan.method != "recursive" else f"recursive(arity={plan.params[0].get('arity')})"
    if plan.params[0].get("merge"):
        name += f"+blocks({plan.params[0]['merge']})"
    return name


@functools.lru_cache(maxsize=4096)
def _chain_signature(count, method, arity):
    """Shape of the chain tree for ``count`` (multiplicities and sharing, no losses).

    Memoised: a pure function of its arguments (the same answer whoever asks first)."""
    top, _ = _chain(None, count, method, arity, iter(range(1, 1 << 30)))
    ids = {}

    def shape(o):
        if isinstance(o, _Leaf):
            return "L"
        if id(o) not in ids:
            ids[id(o)] = (len(ids), tuple((shape(c), m) for c, m in o.children))
        return ids[id(o)]

    return tuple((shape(o), m) for o, m in top if m > 0)


resources.on_clear(_chain_signature.cache_clear)
