"""The charged round-off dominates the actual round-off (see docs/roundoff.md).

* Per FFT node: the node's float64 (or long double) output against an independent
  long-double reference (rfft, powers by repeated squaring, irfft) of the exact
  convolution of the node's own inputs: ``TV <= charged round-off + wrap-around``.
* Whole compositions: the same plan run with every node in long double.
* Leaves: the computed bucket masses against mpmath CDF values at the edges
  (the "moved edges" model of :mod:`fastpld.discretize`).
* Upper bounds stay upper bounds at delta 1e-12 (Gaussian oracle, delta_error 1e-14).
"""
import math

import mpmath
import numpy as np
import pytest

import fastpld
from fastpld import _lowdft
from fastpld.composition import execute, node as node_mod, precision
from fastpld.discretize import discretize_loss, truncation_window
from oracles import gaussian_delta, gaussian_epsilon

U64 = np.finfo(np.float64).eps / 2
ULD = float(np.finfo(np.longdouble).eps) / 2

WORKLOADS = {
    "gauss-glw-m50": (fastpld.Gaussian(1.0), 50, dict(method="glw")),
    "gauss-glw-m2000": (fastpld.Gaussian(30.0), 2000, dict(method="glw", eps_error=0.2)),
    "gauss-two-stage": (fastpld.Gaussian(8.0), 97, dict(method="two_stage")),
    "dpsgd-recursive8": (fastpld.PoissonSubsampledGaussian(1.0, 0.01), 1000, dict(method="recursive", arity=8)),
    "puredp-glw-m300": (fastpld.PureDP(0.1), 300, dict(method="glw")),
    "laplace-gauss-mixed": ([(fastpld.Gaussian(3.0), 5), (fastpld.Laplace(2.0), 40)], None, dict(method="glw")),
    "dpsgd-tight-delta": (fastpld.PoissonSubsampledGaussian(2.0, 0.05), 200, dict(delta_error=1e-14)),
}


def _reference(inputs):
    """Exact-to-long-double linear convolution of ``prod pmf_c^(*m_c)``: (probs, offset)."""
    full = 1 + sum(m * (np.asarray(p.probs).size - 1) for p, m in inputs)
    n = 1 << max(1, (full - 1).bit_length())
    P = np.ones(n // 2 + 1, dtype=np.clongdouble)
    for pmf, m in inputs:
        X = np.fft.rfft(np.asarray(pmf.probs, dtype=np.longdouble), n)
        R = np.ones_like(X)
        e = int(m)
        while e:  # powers by repeated squaring: an algorithm independent of the polar form used in compose
            if e & 1:
                R = R * X
            X = X * X
            e >>= 1
        P = P * R
    ref = np.fft.irfft(P, n)[:full]
    # the input arrays sum to 1 only up to their last rounding, (1 + theta)^m after the powers;
    # the node normalises its output, so the exact target is the normalised convolution
    ref = ref / ref.sum()
    return ref, sum(m * float(p.offset) for p, m in inputs), sum(m for _, m in inputs), n


def _tv_to_reference(out, inputs):
    ref, ref_off, msum, n = _reference(inputs)
    h = out.mesh
    shift = int(round((float(out.offset) - ref_off) / h))
    o = np.asarray(out.probs, dtype=np.longdouble)
    lo = min(0, shift)
    hi = max(ref.size, shift + o.size)
    a = np.zeros(hi - lo, dtype=np.longdouble)
    b = np.zeros(hi - lo, dtype=np.longdouble)
    a[-lo: -lo + ref.size] = ref
    b[shift - lo: shift - lo + o.size] = o
    tv = float(0.5 * np.sum(np.abs(a - b)))
    # the reference's own error: componentwise long-double FFT error amplified by the powers
    ref_err = 64 * ULD * math.log2(n) * msum
    return tv, ref_err


def _run_with_spy(monkeypatch, mech, count, kw):
    records = []
    orig = node_mod._run_node

    def spy(node, inputs, *args, **kwargs):
        out, info = orig(node, inputs, *args, **kwargs)
        records.append((list(inputs), out, dict(info)))
        return out, info

    monkeypatch.setattr(execute, "_run_node", spy)
    pld = fastpld.compose(mech, count, backend="numpy", **kw)
    monkeypatch.undo()
    return pld, records


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_node_roundoff_dominated(monkeypatch, name):
    mech, count, kw = WORKLOADS[name]
    pld, records = _run_with_spy(monkeypatch, mech, count, kw)
    assert records
    for inputs, out, info in records:
        if len(inputs) == 1 and inputs[0][1] == 1:
            continue  # pass-through
        tv, ref_err = _tv_to_reference(out, inputs)
        charged = info["fp"] + info["wrap"]
        assert tv <= charged + ref_err, (name, tv, info)


@pytest.mark.parametrize("name", ["gauss-glw-m50", "dpsgd-recursive8", "puredp-glw-m300"])
def test_whole_composition_float64_vs_long_double(monkeypatch, name):
    mech, count, kw = WORKLOADS[name]
    p64 = fastpld.compose(mech, count, backend="numpy", **kw)
    # every node's float64 charge "does not fit" (the plain, series and summed-frequency predictions): all nodes in
    # long double
    monkeypatch.setattr(precision, "_U64", 1.0)
    monkeypatch.setattr(_lowdft, "_U64", 1.0)
    pld = fastpld.compose(mech, count, backend="numpy", **kw)
    monkeypatch.undo()
    assert all(s.precision == "longdouble" for s in pld.stages if s.kind != "leaf")
    for d in p64.directions:
        a, b = p64.directions[d], pld.directions[d]
        assert a.pmf.mesh == b.pmf.mesh
        shift = int(round((b.pmf.offset - a.pmf.offset) / a.pmf.mesh))
        x, y = np.asarray(a.pmf.probs), np.asarray(b.pmf.probs)
        lo, hi = min(0, shift), max(x.size, shift + y.size)
        X = np.zeros(hi - lo)
        Y = np.zeros(hi - lo)
        X[-lo:-lo + x.size] = x
        Y[shift - lo: shift - lo + y.size] = y
        tv = 0.5 * float(np.abs(X - Y).sum())
        ca, cb = a.certificate, b.certificate
        assert tv <= ca["roundoff"] + cb["roundoff"] + ca["wrap"] + cb["wrap"], (tv, ca, cb)


def test_reference_agrees_with_mpmath_on_a_tiny_node():
    from fastpld.discretize import GridPMF
    rng = np.random.default_rng(1)
    p = rng.random(7)
    p /= p.sum()
    q = rng.random(4)
    q /= q.sum()
    inputs = [(GridPMF(p, 0.0, 1.0), 5), (GridPMF(q, 0.0, 1.0), 3)]
    ref, _, _, _ = _reference(inputs)
    mpmath.mp.dps = 40
    poly = [mpmath.mpf(1)]
    for arr, m in ((p, 5), (q, 3)):
        for _ in range(m):
            out = [mpmath.mpf(0)] * (len(poly) + arr.size - 1)
            for i, a in enumerate(poly):
                for j, b in enumerate(arr):
                    out[i + j] += a * mpmath.mpf(float(b))
            poly = out
    total = mpmath.fsum(poly)
    poly = [x / total for x in poly]
    err = max(abs(mpmath.mpf(float(r)) + mpmath.mpf(float(r - np.longdouble(float(r)))) - e) for r, e in zip(ref, poly))
    assert err < 1e-17


@pytest.mark.parametrize("mu,h", [(1.0, 0.05), (0.2, 0.004), (3.0, 0.2)])
def test_leaf_moved_edges_model(mu, h):
    """Cumulative computed masses stay within ``dev`` of the exact CDF at every edge."""
    loss = fastpld.Gaussian(1.0 / mu).privacy_losses()["remove"]
    tail = 1e-14
    pmf = discretize_loss(loss, h, tail)
    a0, b0 = truncation_window(loss, tail)
    i_lo = math.floor(a0 / h + 0.5)
    n = pmf.probs.size
    edges = (np.arange(i_lo, i_lo + n + 1) - 0.5) * h
    mpmath.mp.dps = 40
    m, s = loss.m, loss.s
    Fx = [mpmath.ncdf((mpmath.mpf(float(e)) - m) / s) for e in edges]
    Sx = [mpmath.ncdf((m - mpmath.mpf(float(e))) / s) for e in edges]
    inside = Fx[-1] - Fx[0]
    tau = 4 * (loss.cdf_rel_error + U64)
    out_lo, out_hi = float(Fx[0]), float(Sx[-1])
    probs = [mpmath.mpf(float(x)) for x in pmf.probs]
    # the array sums to 1 only up to ~log2(n) u: consumers renormalise (nodes) or pad relatively
    # (queries), so the model is about the normalised masses
    total = mpmath.fsum(probs)
    assert abs(total - 1) < 64 * U64
    probs = [x / total for x in probs]
    worst = 0.0
    cum = mpmath.mpf(0)
    for i in range(1, n):
        cum += probs[i - 1]
        F_i, S_i = Fx[i], Sx[i]
        if F_i <= 0.5:
            d = abs(Fx[0] + cum * inside - F_i)
        else:
            d = abs(Sx[-1] + (1 - cum) * inside - S_i)
        dev = tau * float(min(F_i, S_i)) + 4 * U64 * (out_lo + out_hi)
        dev0 = tau * float(min(Fx[0], Sx[0])) + tau * float(min(Fx[-1], Sx[-1]))
        worst = max(worst, float(d) / (dev + dev0 + 64 * U64 * float(min(F_i, S_i))))
    assert worst <= 1.0, worst


# delta_error as small as the round-off floor allows (that floor grows with k: ~1e-12 at k = 65539)
@pytest.mark.parametrize("sigma,k,method,delta_error", [(2.0, 10, "glw", 1e-14), (20.0, 1000, "auto", 1e-13),
                                                        (20.0, 1000, "two_stage", 1e-13)])
def test_upper_bound_at_delta_1e12(sigma, k, method, delta_error):
    pld = fastpld.compose(fastpld.Gaussian(sigma), k, eps_error=0.05, delta_error=delta_error, method=method)
    mu = math.sqrt(k) / sigma
    e = gaussian_epsilon(1e-12, mu)
    b = pld.epsilon(1e-12)
    assert b.lower <= e <= b.upper, (b, e)
    eps = np.array([e - 0.2, e, e + 0.2, e + 1.0])
    exact = gaussian_delta(eps, mu)
    d = pld.delta(eps)
    assert np.all(d.lower <= exact) and np.all(exact <= d.upper), (d, exact)


def test_directed_offsets_against_exact_rationals():
    # the nodes' and splits' offsets: exact sums of integers times floats, rounded to nearest then moved by one ulp
    # the safe way (checked against Fractions)
    from fractions import Fraction

    from fastpld.composition.roundoff import _dyadic_error, _dyadic_sum, _rounded

    def _directed(terms, direction):
        return _rounded(_dyadic_sum(terms), direction)

    rng = np.random.default_rng(7)
    for _ in range(2000):
        n = int(rng.integers(1, 4))
        terms = [(int(rng.integers(-10 ** 7, 10 ** 7)), float(rng.standard_normal() * 10.0 ** rng.integers(-8, 3)))
                 for _ in range(n)]
        exact = sum(k * Fraction(x) for k, x in terms)
        up, down = _directed(terms, 1), _directed(terms, -1)
        assert Fraction(down) <= exact <= Fraction(up)
        assert up == down or math.nextafter(down, math.inf) == up  # (adjacent: at most one ulp apart)
        near = _directed(terms, 0)
        assert near in (up, down) and abs(Fraction(near) - exact) <= abs(Fraction(up if near == down else down) - exact)
        v = float(exact) * (1 + 1e-12)
        err = _dyadic_error(terms, v)
        assert Fraction(err) >= abs(Fraction(v) - exact) and err <= abs(float(Fraction(v) - exact)) * (1 + 1e-15)


def test_node_offsets_lie_on_the_safe_side_of_the_exact_sums(monkeypatch):
    # a node's offset is the sum of its inputs' positions: rounded to nearest, every instance of the node carries the
    # same rounding (a common shift of the composed loss: 3e-9 over the 40,000 instances of a x250 node at
    # q = 1e-4 x 1e7 with the float sums).  The dominating chains round it up, the dominated ones down; the coupling
    # certificate keeps its float sum and charges its exact error to its bias, once per instance
    from fractions import Fraction

    from fastpld.composition import execute, node

    run = node._run_node
    seen = []

    def record(o, inputs, inst, *a, position=0, **k):
        out, info = run(o, inputs, inst, *a, position=position, **k)
        if not (len(inputs) == 1 and inputs[0][1] == 1):
            # (the inputs' exact offsets where they carry them: the dominance chains' leaves, nodes and splits)
            base = sum(m * (Fraction(p.origin[0], 2 ** p.origin[1]) if p.origin is not None else Fraction(p.offset))
                       for p, m in inputs)
            steps = (Fraction(out.offset) - base) / Fraction(out.mesh)
            exact = base + round(steps) * Fraction(out.mesh)
            if out.origin is not None:
                assert Fraction(out.origin[0], 2 ** out.origin[1]) == exact
            seen.append((position, Fraction(out.offset) - exact, info["pos_err"], inst))
        return out, info

    monkeypatch.setattr(execute, "_run_node", record)
    m = fastpld.PoissonSubsampledGaussian(0.8, 0.003)
    fastpld.compose(m, 30_000, rel_error=1e-3, method="dominance").delta(np.array([0.0, 1.0]))
    assert {p for p, *_ in seen} == {1, -1}
    for position, diff, pos_err, _ in seen:
        assert (diff >= 0) if position > 0 else (diff <= 0)
        assert pos_err == 0.0
    seen.clear()
    pld = fastpld.compose(m, 30_000, eps_error=0.05, method="coupling")
    assert seen and {p for p, *_ in seen} == {0}
    assert all(Fraction(pos_err) >= abs(diff) for _, diff, pos_err, _ in seen)
    charged = sum(inst * pos_err for _, _, pos_err, inst in seen)
    assert 0.0 < charged <= min(d.certificate["bias"] for d in pld.directions.values()) or charged == 0.0
