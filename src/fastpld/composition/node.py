"""One node of a plan: its wrap-around window, its precision and its convolution.

:func:`_chernoff_window` bounds the window of the inputs' index sum from their exact MGFs (the
wrap-around charge); :func:`_run_node` chooses the FFT length and precision, runs the power on the
backend and trims and normalises the result, charging its measured round-off.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _fft, _kernels, _lowdft
from .._limits import BucketLimitError
from ..discretize import GridPMF
from .lattice import _lattice_spectrum
from .precision import (_MIXED_MIN_POWER, _few_buckets, _has_atoms, _predicted_fp_dft, _predicted_fp_plain,
                        _predicted_fp_series, _use_lattice)
from .roundoff import _U64, _ULD, _dyadic_error, _dyadic_sum, _node_tv, _rounded
from .series import _SERIES_R, _series_amp, _series_spectrum, _split_choice, _split_series_spectrum


# long double nodes with the low-frequency series take float64 forward FFTs (docs/roundoff.md, 3c)
_MIXED_FORWARD = True


# Chernoff s-grid (in units of 1/sd of the index sum): a coarse grid, then a refinement around
# the optimum of each side.  s -> (K(s) + c) / s is unimodal (its derivative's numerator
# s K'(s) - K(s) - c increases, K being convex), so the optimum lies between the coarse
# neighbours of the best coarse point, and the refinement reaches the spacing of a 56-point
# grid over the same range with ~13 MGF evaluations per side instead of 56.  Any s > 0 gives a
# valid bound: the grid only decides how tight the window and the wrap charge are.
_S_REL = np.geomspace(0.02, 80.0, 12)
_S_REFINE = (_S_REL[1] / _S_REL[0]) ** (np.array([-4, -3, -2, -1, 1, 2, 3, 4]) / 5.0)


def _chernoff_window(inputs, w, native=False):
    """Window of the linear index sum and helpers for exact tail bounds.

    ``inputs``: list of (probs, centre_index, m).  Returns (lo, hi, tailfun) where
    ``tailfun(x, upper)`` bounds ``Pr[I >= x]`` / ``Pr[I <= x]``.  ``native``: the
    moments and the log-MGF grid come from the compiled kernels (same sums), and the whole
    search below runs in one compiled call when the core is built (same steps, same result).
    """
    if native:
        r = _kernels.chernoff_window([p for p, _, _ in inputs], [cen for _, cen, _ in inputs],
                                     [m for _, _, m in inputs], _S_REL, _S_REFINE, w)
        if r is not None:
            lo_n, hi_n, sp_n, Kp_n, sn_n, Kn_n = r
            ctail = _kernels._core.chernoff_tail  # (the numpy tail below, compiled: the same operations)

            def tail_n(x, upper):
                return ctail(Kp_n, sp_n, x) if upper else ctail(Kn_n, sn_n, x)

            return lo_n, hi_n, tail_n
    sd2 = 0.0
    ks = []
    for p, cen, m in inputs:
        pf = np.asarray(p, dtype=np.float64)
        if native:
            sd2 += m * _kernels.pmf_moments(pf, cen)[2]
            ks.append((pf, cen, m))
            continue
        idx = np.arange(pf.size, dtype=np.float64) - cen
        tot = pf.sum()
        mu = float(np.dot(idx, pf) / tot)
        sd2 += m * float(np.dot((idx - mu) ** 2, pf) / tot)
        with np.errstate(divide="ignore"):
            logp = np.log(pf)
        ks.append((logp, idx, m))
    sd = math.sqrt(sd2) if sd2 > 0 else 1.0

    def log_mgf(s_all):
        """Exact log-MGF of the index sum at ``s_all`` (plus a round-off margin)."""
        K = np.zeros_like(s_all)
        for a, idx, m in ks:
            if native:
                _kernels.log_mgf_grid(a, idx, s_all, m, K)
                continue
            M = s_all[:, None] * idx[None, :] + a[None, :]
            mx = M.max(axis=1)
            K += m * (mx + np.log(np.exp(M - mx[:, None]).sum(axis=1)))
        return K + 1e-9 * (1 + np.abs(K))  # round-off margin on the log-MGF

    lw = math.log(2.0 / w)
    s = _S_REL / sd
    last = s.size - 1
    # coarse points first around the optimum of a Gaussian sum (s sd = sqrt(2 log(2/w))), then
    # outwards on a side while its best point is at the edge of what was evaluated (unimodal)
    k0 = int(round(math.log(math.sqrt(2 * lw) / _S_REL[0]) / math.log(_S_REL[1] / _S_REL[0])))
    k0 = min(max(k0, 2), last - 2)
    Kp_d, Kn_d = {}, {}
    need_u = need_l = list(range(k0 - 2, k0 + 3))
    while need_u or need_l:
        K = log_mgf(np.concatenate([s[need_u], -s[need_l]]))
        Kp_d.update(zip(need_u, K[: len(need_u)]))
        Kn_d.update(zip(need_l, K[len(need_u):]))
        iu = min(Kp_d, key=lambda i: (Kp_d[i] + lw) / s[i])
        il = max(Kn_d, key=lambda i: (Kn_d[i] + lw) / -s[i])
        need_u = ([j for j in (iu - 1, iu - 2) if j >= 0 and j not in Kp_d]
                  + [j for j in (iu + 1, iu + 2) if j <= last and j not in Kp_d])
        need_l = ([j for j in (il - 1, il - 2) if j >= 0 and j not in Kn_d]
                  + [j for j in (il + 1, il + 2) if j <= last and j not in Kn_d])
        if iu - 1 in Kp_d or iu == 0:
            need_u = [j for j in need_u if j > iu]
        if iu + 1 in Kp_d or iu == last:
            need_u = [j for j in need_u if j < iu]
        if il - 1 in Kn_d or il == 0:
            need_l = [j for j in need_l if j > il]
        if il + 1 in Kn_d or il == last:
            need_l = [j for j in need_l if j < il]
    ku, kl = sorted(Kp_d), sorted(Kn_d)
    Kp = np.array([Kp_d[i] for i in ku])
    Kn = np.array([Kn_d[i] for i in kl])
    s_u, s_l = s[ku], s[kl]
    # refine each side around its best coarse point (staying between its coarse neighbours)
    ru = s[iu] * _S_REFINE[(4 if iu == 0 else 0):(4 if iu == last else 8)]
    rl = s[il] * _S_REFINE[(4 if il == 0 else 0):(4 if il == last else 8)]
    Kr = log_mgf(np.concatenate([ru, -rl]))
    sp = np.concatenate([s_u, ru])
    sn = -np.concatenate([s_l, rl])
    Kp = np.concatenate([Kp, Kr[: ru.size]])
    Kn = np.concatenate([Kn, Kr[ru.size:]])

    def tail(x, upper):
        if upper:
            e = Kp - sp * x
        else:
            e = Kn - sn * x
        return float(min(1.0, math.exp(min(0.0, float(e.min())))))

    u_star = float(np.min((Kp + lw) / sp))
    l_star = float(np.max((Kn + lw) / sn))
    return math.floor(l_star) + 1, math.ceil(u_star) - 1, tail


# nodes whose series covers fewer frequencies than this try the split series (docs/roundoff.md, 3g)
_SPLIT_BELOW = 64
_SPLIT_FACTOR = 4.0
# a float64 node with the split series is tried where this times its predicted charge fits the node's allowance
# (the charge measured 1.9-2.3 times the prediction on x50 and x125 nodes of subsampled Gaussian leaves)
_SPLIT64_MARGIN = 2.5
# a long double node without the split whose measured charge exceeds this share of delta_error is redone with the
# split (a thin tail makes the plain charge up to ~12x its prediction: PSG(0.5, 1e-4) x 1e6, x125 over 8,000
# instances, 2.7e-10 against 2.3e-11 predicted, refused at every arity; with the split 8.8e-12)
_SPLIT_RETRY = 0.75
# ... and only from this FFT length: the split's fixed cost (its choice, the bulk's moments and series, ~1 ms)
# exceeds the long double node's below it (x50 and x125 nodes of 7,000-14,000 buckets: 1.03-1.1x the time)
_SPLIT64_MIN_N = 1 << 15

# the directly summed low frequencies (docs/roundoff.md, 3i) where their predicted charge is at most this many times
# the series' (the x50 nodes of subsampled Gaussian leaves: 0.25x; a GLW plan's x1000 node: 3.7x, measured 5x)
_LOWDFT_CHARGE = 1.0
# ... and where they alone make a float64 try of a node headed for long double, its measured charge at most this many
# times the prediction (measured 0.85-1.4x on the x50, x100 and x125 nodes of subsampled Gaussian leaves)
_LOWDFT_HOLD = 2.0

_DIRECT_MAX_POWER = 1 << 20  # direct powers' bound assumes M u <= 1e-10 (see powers._direct_power)
# a long double node's direct power takes a float64 inverse FFT where its charge with it is at most this share of the
# node's allowance (0: never); the long double inverse FFT is 10-20x the float64 one's time (docs/performance.md)
_INV64_SHARE = 0.5


def _common_stride(inputs) -> int:
    """The largest ``g`` such that every input's non-zero entries lie ``g`` apart (a multiple of it), at least 1;
    an input with one non-zero entry fits any ``g``.  (A discrete loss's leaf on a lattice fine enough for the
    coarser levels -- pure DP: its two atoms 64 or 128 points apart -- and its powers are such inputs.)"""
    g = 0
    for pmf, _ in inputs:
        p = np.asarray(pmf.probs)
        k = p.size // 2
        if p.size >= 2 and p[k - 1] != 0 and p[k] != 0:
            return 1  # (two neighbours non-zero: no stride of 2 or more; a dense input known in O(1))
        if p.size >= 2:
            # (else beside the largest entry: a leaf's middle may fall in its thin tail's cells, whose inner
            # points are empty, while its bulk is dense)
            k = int(np.argmax(p))
            if (k > 0 and p[k - 1] != 0) or (k + 1 < p.size and p[k + 1] != 0):
                return 1
        nnz = int(np.count_nonzero(p))
        if 2 * nnz > p.size + 1:
            return 1  # (more than every other entry non-zero: no stride of 2 or more)
        if nnz > 1:
            g = math.gcd(g, int(np.gcd.reduce(np.diff(np.flatnonzero(p)))))
            if g == 1:
                return 1
    return max(g, 1)


def _run_strided(node, inputs, inst, g, budgets, n_objects, backend, max_buckets, n_nodes, position):
    """:func:`_run_node` on inputs whose non-zero entries lie ``g`` apart: on the coarser lattice of mesh ``g h``
    (each input from its first non-zero entry, its exact offset moved there), the output spread back onto mesh
    ``h`` (every ``g``-th entry).  The same convolution on relabelled points: a ``g`` times shorter transform, and
    none of the spectral peaks an input on a sublattice has at multiples of ``N / g`` (each raised to the power:
    2.4e-10 of round-off over the 40,000 instances of PureDP(0.1)'s first node at k = 1e7, leaf atoms 128 apart)."""
    h = inputs[0][0].mesh
    packed = []
    for pmf, m in inputs:
        p = np.asarray(pmf.probs)
        nz = np.flatnonzero(p)
        first, last = int(nz[0]), int(nz[-1])
        origin = _dyadic_sum([(1, pmf.origin), (first, h)])
        packed.append((GridPMF(np.ascontiguousarray(p[first:last + 1:g]), _rounded(origin, position), g * h,
                               origin=origin), m))
    out, info = _run_node(node, packed, inst, budgets, n_objects, backend, max_buckets, n_nodes, position, stride=False)
    q = np.asarray(out.probs)
    size = (q.size - 1) * g + 1
    if size > max_buckets:  # (the result on the node's lattice, as the plan's next steps read it)
        raise BucketLimitError(
            f"composition needs {size} buckets at mesh {h:.3g} (node {node.label}), more than "
            f"max_buckets={max_buckets}; increase eps_error or max_buckets", size)
    full = np.zeros(size, dtype=q.dtype)
    full[::g] = q
    return GridPMF(full, out.offset, h, origin=out.origin), dict(info, stride=g)


def _run_node(node, inputs, inst, budgets, n_objects, backend, max_buckets, n_nodes=None, position=0, stride=True):
    """Convolve the node's inputs; returns (GridPMF, info dict).

    ``position``: the output's offset, the exact sum of its inputs' positions, rounded up (``> 0``: every atom
    at or above its exact position, for a dominating chain), down (``< 0``: a dominated chain) or computed in
    floating point (``0``).  Rounded to nearest, every instance of a node would carry its offset's rounding: a
    common shift of the composed loss (measured 8e-14 per instance of the x250 node at q = 1e-4 x 1e7, 3e-9 over
    its 40,000 instances, with the float sums); rounded one way, it only moves the atoms the safe way.
    ``stride``: inputs of the dominance chains (exact offsets) whose non-zero entries lie ``g > 1`` apart run on
    the lattice of mesh ``g h`` (:func:`_run_strided`)."""
    if stride and position and all(pmf.origin is not None for pmf, _ in inputs):
        g = _common_stride(inputs)
        if g > 1:
            out, info = _run_strided(node, inputs, inst, g, budgets, n_objects, backend, max_buckets, n_nodes,
                                     position)
            out.anchor = _anchor_sum(inputs)
            return out, info
    h = inputs[0][0].mesh
    # centre each input at its mean index (keeps phases small in the powers)
    ins = []
    base_val = 0.0
    full = 1
    for pmf, m in inputs:
        p = np.asarray(pmf.probs)
        pf = np.asarray(p, dtype=np.float64)  # (a copy only for long double inputs)
        cen = int(round(_kernels.mean_index(pf, backend.native)))
        ins.append((p, cen, m))
        base_val += m * (pmf.offset + cen * h)
        full += m * (p.size - 1)
    w_per = budgets.wrap / (n_objects * inst)
    if len(ins) == 1 and ins[0][2] == 1:
        p, cen, m = ins[0]
        info = {"N": p.size, "wrap": 0.0, "fp": 0.0, "dtype": p.dtype, "pos_err": 0.0, "window": (0, p.size - 1),
                "series": 0, "dft": False, "lattice": False, "lowdft": False}
        return GridPMF(p, inputs[0][0].offset, h, origin=inputs[0][0].origin, anchor=inputs[0][0].anchor), info
    lo_full = -sum(m * cen for _, cen, m in ins)
    lo, hi, tail = _chernoff_window(ins, w_per, backend.native)
    need = hi - lo + 1

    def place(length):
        # FFT length, window start and wrap-around bound for FFT lengths from `length`
        if need >= full:
            return length(full), lo_full, 0.0
        n_fft = length(need)
        if n_fft >= full:
            return length(full), lo_full, 0.0
        start = lo - (n_fft - need) // 2
        return n_fft, start, tail(start + n_fft, True) + tail(start - 1, False)

    N, c, wrap = place(_fft.fast_length)
    if N > max_buckets:
        raise BucketLimitError(
            f"composition needs an FFT of {N} buckets at mesh {h:.3g} (node {node.label}), more than "
            f"max_buckets={max_buckets}; increase eps_error or max_buckets", N)
    # precision: long double where the float64 round-off charge would not fit.  Nodes whose
    # predicted float64 charge is small run in float64, and those within the node's share of the
    # round-off budget (budgets.fp / nodes: leaves and re-discretisations charge ~u per copy)
    # try float64; either is redone in long double only if the measured charge exceeds that share.
    # (The precision only decides how much is charged; every node charges its own measured bound.)
    allowance = budgets.fp / n_objects
    node_allowance = budgets.fp / n_nodes if n_nodes else allowance
    msum = sum(m for _, _, m in ins)
    mmax = max(m for _, _, m in ins)
    lg = math.ceil(math.log2(N))
    est64 = _predicted_fp_plain(inst, msum, lg)
    # accurate low-frequency spectra (use_series, below) at FFT length n
    series_ok = lambda n: (est64 > 0.25 * allowance and mmax >= 8  # noqa: E731
                           and sum(p.size for p, _, _ in ins) * (_SERIES_R + 3) <= 2 * n * math.log2(n))
    dft_ok = est64 > 0.25 * allowance and _few_buckets(ins)
    # (docs/roundoff.md, section 3g: one large power of an input with a narrow bulk and a wide thin tail;
    # only where long double's plain charge, measured at up to ~4x its prediction on such nodes, could
    # exceed delta_error by itself: the split costs a long double FFT more)
    # (and where the plain node's measured charge turns out to take most of delta_error: see _SPLIT_RETRY)
    split_any = len(ins) == 1 and mmax >= 8 and not dft_ok
    pred_ld = _predicted_fp_plain(inst, msum, lg, _ULD)
    split_ok = split_any and _SPLIT_FACTOR * pred_ld > budgets.delta
    # a float64 try whose large powers need accurate low frequencies: where few of them matter (a narrow input, a
    # moderate power) they are summed directly, cheaper than the series' moments (docs/roundoff.md, section 3i)
    # (not where its charge is predicted larger than the series': the summed values' error, ~1.5 u, grows M-fold,
    # the series' does not -- a GLW plan's single x1000 node, charged 4e-13 against 8e-14)
    pred_series = _predicted_fp_series(inst, msum, lg, mmax, _has_atoms(node)) if est64 > 0.25 * allowance else None
    pred_low = (_lowdft.predicted_charge(inst, ins, N) if est64 > 0.25 * allowance and mmax >= 8 and not dft_ok
                and not split_ok else None)
    # (not where every float64 prediction exceeds the node's share: it runs in long double whatever the plan says, and
    # the plan's variance and check frequency cost 20-50 us a node on the wide leaves of q = 0.01 x 1e5 and
    # q = 0.001 x 1e6, whose first nodes stay long double.  Where only the summed frequencies' prediction fits, the
    # node tries float64 with them: PSG(1, 0.01) x 1e5's second x50 node, 40 instances, predicted 4.9e-12 against
    # the series' 1.9e-11 and a share of 1.3e-11, charged 2.6e-12 in float64 (1.8e-12 in long double), its long
    # double forward FFT and power 0.13 ms more)
    lowp = (_lowdft.plan(ins, N, backend.native)
            if pred_low is not None and pred_low <= _LOWDFT_CHARGE * pred_series
            and min(est64, pred_series, pred_low) <= node_allowance else None)
    # (a float64 try that only the summed frequencies make: without them the node would run in long double at once.
    # Its measured charge must be near its prediction, else long double after all: a spectrum that decays slower
    # than the plan's check saw would be charged its amplified FFT error there -- a Gaussian subsampled without
    # replacement, before that check, 5-8x the prediction, epsilon at delta 1e-9 1.95x wider)
    low_for_ld = lowp is not None and est64 > node_allowance and not (series_ok(N) or dft_ok or split_ok)
    bulk64 = None
    if est64 <= 0.25 * allowance:
        dtypes = (np.float64,)
    # (a float64 try is predicted by the summed frequencies' charge where they have a plan, else by the
    # series' where the series, the DFTs or the split can run, else by the plain one (measured at 1.6x its
    # prediction on x125 nodes of subsampled Gaussian leaves): a node of inputs too wide for the series whose plain
    # charge does not fit goes to long double at once)
    elif (pred_low if lowp is not None
          else pred_series if (series_ok(N) or dft_ok or split_ok) else est64) <= node_allowance:
        dtypes = (np.float64, np.longdouble)
    else:
        dtypes = (np.longdouble,)
    # a single wide input headed for long double, or for a plain float64 try: float64 with the split series
    # where its predicted charge fits (docs/roundoff.md, 3g), long double after it only if the measured one
    # does not (the inverse FFT's and the series' rounding at frequency 0 alone, g + 16 u per
    # instance, must fit first: else the prediction's own FFT would be wasted)
    if (split_any and N >= _SPLIT64_MIN_N and dtypes != (np.float64,) and not series_ok(N)
            and inst * _SPLIT64_MARGIN * (12.0 * lg + 16.0) * _U64 <= node_allowance):
        bulk64, pred = _split_choice(ins[0][0], ins[0][1], mmax, N, 12.0 * _U64 * lg, backend, predict_u=_U64)
        if bulk64 is not None and inst * _SPLIT64_MARGIN * pred <= node_allowance:
            dtypes = (np.float64, np.longdouble)
        else:
            bulk64 = None
    if dtypes == (np.longdouble,):
        # the long double FFT is fastest on 2^a 3^b lengths (docs/performance.md): worth up to 8%
        # more points
        N2, c2, wrap2 = place(_fft.fast_length_23)
        if N2 <= 1.08 * N and N2 <= max_buckets:
            N, c, wrap = N2, c2, wrap2
    # accurate low-frequency spectra where a power's round-off amplification matters: only where
    # some power is large (with small powers the plain bound has no m-fold growth) and the inputs'
    # moments cost less than a few FFTs (a block of many wide children with small powers would pay
    # (R + 3) n per child for nothing: a quarter of a 200 x 10 heterogeneous composition, docs/performance.md)
    use_series = series_ok(N)
    tries = list(dtypes)
    retry = False
    while tries:
        dtype = tries.pop(0)
        u = _U64 if dtype is np.float64 else _ULD
        low = None
        # (not where the lattice spectra below take every frequency: few-bucket inputs, large powers and
        # a charge that matters)
        want_lat = dft_ok and _use_lattice(_predicted_fp_dft(inst, msum, u), mmax, budgets.delta)
        # (a long double node whose plain charge is small anyway and that takes no float64 forward FFTs gains
        # nothing from the series but a smaller charge: 0.36 ms a node at 50 x 5,832 buckets, skipped)
        ld_plain = dtype is np.longdouble and msum < _MIXED_MIN_POWER and pred_ld <= 0.25 * allowance
        low_here = dtype is np.float64 and lowp is not None and bulk64 is None and not want_lat
        ser = (_series_spectrum(ins, N, dtype, backend.native)
               if use_series and not want_lat and not ld_plain and not low_here else None)
        split = False
        if dtype is np.float64 and bulk64 is not None:
            ser = _split_series_spectrum(ins, N, dtype, backend, 12.0 * u * lg, backend.native, bulk=bulk64)
            if ser is None:  # (the bulk's series reaches too little: long double at once)
                continue
            split = True
        elif (split_ok or retry) and (ser is None or ser[0] < _SPLIT_BELOW):
            # a thin tail to the window's end leaves the series few frequencies: bulk by moments, tail by an FFT
            sp = _split_series_spectrum(ins, N, dtype, backend, 12.0 * u * lg, backend.native,
                                        0 if ser is None else ser[0])
            if sp is not None and (ser is None or sp[0] > ser[0]):
                ser, split = sp, True
        if ser is not None:
            lp_low, amp_low = _series_amp(ser, u)
            low = (ser[0], lp_low, amp_low)
        # a long double node whose large powers come from the series near frequency 0 takes float64
        # forward FFTs: elsewhere |X|^m is negligible, so the float64 forward error barely counts
        # (docs/roundoff.md, section 3c; the whole node falls back to long double where it does)
        # (not for lattice-like inputs, whose spectral peaks past the series' range make it fall back)
        # (not after a split: past its reach |X|^m still matters, measured to fall back every time)
        # (not for powers below _MIXED_MIN_POWER, as the planner predicts: measured to fall back every time at 50,
        # 100 and 125 -- the dominance chains of subsampled Gaussians -- the long double power then computed twice)
        fdt = (np.float64 if (dtype is np.longdouble and ser is not None and _MIXED_FORWARD and not _has_atoms(node)
                              and not split and msum >= _MIXED_MIN_POWER) else dtype)
        # inputs of a few buckets (the leaves of lattice-like losses at large k): direct DFTs, whose
        # error does not grow with log N and whose ascending sums keep it near the largest masses'
        # (docs/roundoff.md, section 3e); only where the round-off matters and the bound is at most
        # half the FFT's (the forward transforms then run in the node's precision)
        dft = None
        if dft_ok:
            dft = [_kernels.dft_order(p, cen, N, dtype) for p, cen, _ in ins]
            if not want_lat and max(e for _, _, e in dft) > 6.0 * lg:  # (the lattice spectra need no such gain)
                dft = None
            else:
                fdt = dtype
        # (native) frequencies whose product is below e^(10 - T) are skipped and charged 2 e^(10 - T)
        # each (see convolve): T such that all N/2 + 1 such charges, over the node's copies (x inst)
        # and into total variation (x 4), stay below 1e-6 of the node's round-off allowance
        dead_log = min(800.0, max(40.0, 10.0 + math.log(4.0 * (N // 2 + 1) * inst / (1e-6 * allowance))))
        # large powers of such inputs: accurate log-magnitudes and phases at every frequency (section 3f),
        # in place of the low-frequency series
        lat = None
        if dft is not None and want_lat:
            lat = _lattice_spectrum(ins, dft, N, dtype, backend.native, dead_log, backend.abs_rfft, scratch=True)
            ser, low = None, None
        # without the series: powers as products (cheaper than the polar form, same size of bound; in long
        # double no logl, atan2l, expl and sincosl per frequency, most of the polar power's time)
        direct = ser is None and lat is None and msum <= _DIRECT_MAX_POWER
        # the power and its round-off bound: the backend's (native: cached plans and compiled kernels; numpy:
        # the reference code of composition.powers; the same arithmetic)
        # a long double node's direct power may take a float64 inverse FFT where that bound takes at most
        # _INV64_SHARE of the node's allowance (docs/roundoff.md, section 3h): ~0.1 of a long double inverse's time
        inv64 = ((lambda l1: inst * _node_tv(l1, N, _U64) <= _INV64_SHARE * node_allowance)
                 if direct and dtype is np.longdouble and _INV64_SHARE > 0 else None)
        used_low = low_here and direct
        out, fp_l1, fp_linf = backend.convolve(ins, N, dtype, u, ser=ser, low=low, dead_log=dead_log, fwd_dtype=fdt,
                                               direct=direct, dft=dft, lat=lat, raw=True, inv64=inv64,
                                               low_dft=lowp if used_low else None)
        u_out = _U64 if out.dtype == np.float64 else u  # (the output's precision: its normalisation's rounding)
        if ser is not None:  # the series' common scale, removed by the normalisation below
            fp_l1 *= 1 + 2 * ser[6]
            fp_linf *= 1 + 2 * ser[6]
        if (dtype is np.longdouble and split_any and not split and not retry
                and inst * _node_tv(fp_l1, N, u_out) > _SPLIT_RETRY * budgets.delta):
            retry = True  # (the split's bound where the plain one took most of delta_error)
            tries = [np.longdouble]
            continue
        charge = inst * _node_tv(fp_l1, N, u)
        if dtype is np.longdouble or (charge <= node_allowance
                                      and not (used_low and low_for_ld and charge > _LOWDFT_HOLD * pred_low)):
            break
        if not tries:
            # (a node predicted far below its share, float64 only, whose measured charge exceeds the share: long
            # double after all -- PSG(0.1, 0.01) x 100, its PLD ~700 wide, charged 44x the plain prediction)
            tries = [np.longdouble]
    # removed = l1 bound on what clipping, trimming and dropping leave between lin and the exact
    # (unnormalised) result; the charge follows from it after the normalisation (_node_tv)
    removed = fp_l1
    # drop round-off-level entries where the charge fits (keeps next windows tight); the
    # charge is N * floor >= the mass removed, not the mass itself, so that it does not depend
    # on which backend's noise happens to fall below the floor (bounds agree across backends)
    floor = fp_linf
    trim_charge = N * floor
    trim = inst * trim_charge <= 0.25 * allowance
    if trim:
        removed += trim_charge
    # rolled to the window, clipped at 0, trimmed, cut and normalised by the backend (native: one compiled pass
    # over the plan's unscaled buffer, raw=True); the entries below 1e-300 it dropped are charged
    lin, a, dropped = backend.finish_node(out, c % N, floor, trim, N)
    removed += dropped
    tv_fp = _node_tv(removed, N, u_out)
    # base_val = sum m_c (offset_c + cen_c h); entry j of lin is the index sum I' = c + a + j
    # (exactly: sum m_c offset_c + (sum m_c cen_c + c + a) h, each input's exact offset where it has one)
    exact = ([(m, pmf.origin if pmf.origin is not None else pmf.offset) for pmf, m in inputs]
             + [(sum(m * cen for _, cen, m in ins) + c + a, h)])
    origin = None
    if position:  # (rounded the safe way; the exact offset kept)
        origin = _dyadic_sum(exact)
        offset, pos_err = _rounded(origin, position), 0.0
    else:  # (the float sums, as before; their exact error goes to the coupling certificate's bias, per instance)
        offset = base_val + (c + a) * h
        pos_err = _dyadic_error(exact, offset)
    info = {"N": N, "wrap": wrap, "fp": tv_fp, "dtype": dtype, "window": (c, c + N - 1), "pos_err": pos_err,
            "series": ser[0] if ser is not None else 0, "dft": dft is not None, "lattice": lat is not None,
            "lowdft": used_low}
    return GridPMF(lin, offset, h, origin=origin, anchor=_anchor_sum(inputs) if position else None), info


def _anchor_sum(inputs):
    """The output's lattice anchor (:attr:`fastpld.discretize.GridPMF.anchor`): the exact sum of the inputs'
    anchors times their powers (``None``: 0)."""
    terms = [(m, pmf.anchor) for pmf, m in inputs if pmf.anchor is not None]
    return _dyadic_sum(terms) if terms else None
