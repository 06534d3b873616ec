"""A node's precision and spectra: the rules :func:`fastpld.composition.node._run_node` applies,
and the planner's predictions of them.

Every node charges its own measured round-off bound (:mod:`.roundoff`); these rules only decide which
arithmetic it runs (float64 or long double, plain FFT powers, the low-frequency series of
:mod:`.series`, direct DFTs or the lattice spectra of :mod:`.lattice`) and what the planner
(:mod:`.cost`) expects it to charge.  docs/roundoff.md, section 3, has the model.
"""
from __future__ import annotations

import math

import numpy as np

from ..mechanisms import DiscreteLoss
from .plan import _Leaf
from .roundoff import _U64


_MIXED_MIN_POWER = 256  # planner: powers from which the float64 forward pass is predicted to hold


def _predicted_precision(inst, msum, mmax, lg, node, allowance, node_allowance, u64=None):
    """The planner's guess of a node's precision: ``(est64, est_ser, ld, mixed)``.

    ``est64``/``est_ser``: predicted float64 charges, plain and with the low-frequency series
    (the series, and the lattice test, only where the plain charge matters); ``ld``: long double,
    since _run_node tries float64 up to the node's share of the round-off budget and the measured
    charge is typically a few times the estimate, so the try is predicted to hold up to half of it;
    ``mixed``: a long double node with the series (large powers) takes float64 forward FFTs
    (docs/roundoff.md 3c).  ``u64``: float64's ``u`` if not the (patchable) ``_U64``.
    """
    est64 = _predicted_fp_plain(inst, msum, lg, u64)
    if est64 <= 0.25 * allowance:
        return est64, est64, False, False
    est_ser = _predicted_fp_series(inst, msum, lg, mmax, _has_atoms(node), u64)
    ld = est_ser > 0.5 * node_allowance
    return est64, est_ser, ld, ld and est_ser < est64 and msum >= _MIXED_MIN_POWER


def _has_atoms(o):
    """Whether a node convolves leaf PMFs of a loss with point masses (lattice-like inputs).

    Such PMFs have spectral peaks far from frequency 0 where ``|X| ~ 1`` again; there the
    low-frequency series does not apply and the plain ``m g`` estimate stands.  Only direct
    leaf children count: re-discretised onto a coarser mesh, the lattice is smeared (measured:
    the roots of Laplace plans fit float64 with the series).
    """
    r = getattr(o, "_atoms", None)
    if r is None:
        r = any(isinstance(c, _Leaf) and (bool(getattr(c.loss, "atoms", ())) or isinstance(c.loss, DiscreteLoss))
                for c, _ in getattr(o, "children", ()))
        o._atoms = r
    return r


def _predicted_fp_plain(inst, msum, lg, u=None):
    """Predicted round-off charge of a node with plain FFT powers: the ``m``-fold amplification
    of the FFT error ``12 u log2 N``, per instance (``u``: float64's unless given)."""
    u = _U64 if u is None else u  # read at call time (tests patch _U64)
    return inst * (2.0 * msum * 12 * u * lg + 4 * u)


# Planning only: a node raising lattice-like leaves (two large atoms) charges ~5.4x the plain
# estimate's m g per instance (the spectral peaks; measured 4.1-6.3x on Laplace at k = 2^30); with
# direct DFTs g is ~12 u (two atoms of ~1/2, _kernels.dft_order) plus the power's 2 u.
_LATTICE_FP = 5.4
_G_DFT = 14.0


def _predicted_fp_dft(inst, msum, u, N=None, delta=None, mmax=None):
    """Predicted round-off charge of a node whose lattice-like inputs take direct DFTs.  Where
    :func:`_use_lattice` takes the lattice spectra of section 3f (``N`` and ``delta`` given), the inverse
    FFT's ``12 u log2 N ||P||_2``, with ``||P||_2 ~ 3 sqrt(N / sqrt(pi m))`` (a two-atom power of width
    ~sqrt(m) on a sub-lattice; measured 2-3x that on Laplace at k = 2^30), which is what is left of it."""
    plain = inst * (2.0 * msum * _LATTICE_FP * _G_DFT * u + 4 * u)
    if N is not None and delta is not None and _use_lattice(plain, msum if mmax is None else mmax, delta):
        return inst * (12.0 * math.ceil(math.log2(max(N, 2))) * u * 3.0 * math.sqrt(N / math.sqrt(math.pi * msum))
                       + 4 * u)
    return plain


# the lattice spectra cost more time than the DFT path (docs/performance.md): taken only where the DFT
# path's predicted charge would take more than this share of delta_error
_LATTICE_MIN_SHARE = 0.1


def _use_lattice(dft_charge, mmax, delta):
    """Whether a node of few-bucket inputs takes the lattice spectra (section 3f of docs/roundoff.md)."""
    return _LATTICE_SPECTRA and mmax >= 8 and dft_charge > _LATTICE_MIN_SHARE * delta


def _dft_leaves(o, sizes):
    """Whether the planner expects node ``o``'s inputs to take direct DFTs: all children leaves
    of losses with atoms, with at most ``_DFT_MAX_N`` buckets predicted (or as many atoms, split
    onto two buckets each, for discrete losses)."""
    for c, _ in o.children:
        if not isinstance(c, _Leaf):
            return False
        loss = c.loss
        if isinstance(loss, DiscreteLoss):
            if 2 * np.asarray(loss.values).size > _DFT_MAX_N and sizes[id(c)] > _DFT_MAX_N:
                return False
        elif not getattr(loss, "atoms", ()) or sizes[id(c)] > _DFT_MAX_N:
            return False
    return True


def _predicted_fp_series(inst, msum, lg, mmax, lattice=False, u=None):
    """Predicted float64 round-off charge of a node with the low-frequency series (at most the plain one).

    Near frequency 0 the error no longer grows with ``m``; what is left is the inverse FFT
    (``~ 3 g``) and, for moderate ``m``, the frequencies past the series' range
    (``|X|^m ~ e^(-m / 32)`` there for inputs up to ~16 standard deviations wide).
    ``u``: another precision's (long double: the same shape, measured ~5 g per instance at ``k = 2^30``).
    """
    u = _U64 if u is None else u
    plain = _predicted_fp_plain(inst, msum, lg, u)
    if mmax < 8 or lattice:  # _run_node uses the series only where some power is >= 8
        return plain
    g = 12 * u * lg
    return min(plain, inst * (2.0 * (3.0 + msum * math.exp(-msum / 32.0)) * g + 4 * u))


# direct DFTs for inputs with at most this many non-zero buckets (n (N/2 + 1) products, against the
# FFT's ~N log2 N: measured no slower up to here; Laplace leaves at k = 2^30 have ~21, pure DP 2-4)
_DFT_MAX_N = 32


def _few_buckets(ins):
    """Whether every input ``(p, cen, m)`` of a node has few enough non-zero buckets for direct DFTs."""
    return all(np.count_nonzero(p) <= _DFT_MAX_N for p, _, _ in ins)

# large powers of few-bucket inputs take the lattice spectra of section 3f (off: the DFT spectra go
# through the plain polar bound, and the low-frequency series; kept switchable for tests and A/B runs)
_LATTICE_SPECTRA = True
