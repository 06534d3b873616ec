"""The masses of a continuous loss's atoms and their error bounds, as the dominance leaves take them
(``docs/dominance.md``, "Anchored lattices"): a CDF evaluated through a subsampling map rounds across an atom, so
the losses built from a pair's closed forms (subsampled, symmetric subsampled, revealed mixtures of them) take
their atoms' masses from those forms; any other loss from its CDF's and survival function's jumps."""
from __future__ import annotations

import numpy as np

from .. import _kernels
from ..mechanisms import ContinuousLoss, SubsampledLoss
from ..mechanisms.subsampled import SymmetricSubsampledLoss
from ..samplers import MixtureLoss

_U = np.finfo(np.float64).eps / 2


def _atom_masses(loss: ContinuousLoss, atoms):
    """Masses of the atoms of a continuous loss and an error bound of each: the jumps of its CDF (a
    right-continuous closed form; the leaves check that atoms and density fill the window), or, for
    a subsampled loss, a symmetric subsampled loss and a revealed mixture of losses, from the pair's closed
    forms (the components', weighted, for a mixture)."""
    if not atoms:
        return np.zeros(0), np.zeros(0)
    if isinstance(loss, SubsampledLoss) and tuple(atoms) == tuple(loss.atoms):
        closed = _subsampled_masses(loss)
        if closed is not None:
            m = closed[1]
            return m, 16 * _U * m + 1e-300
    if isinstance(loss, MixtureLoss):
        # a revealed mixture (truncated Poisson batches): its components' masses, weighted as its CDF weighs them
        # (their CDFs through g^-1 round across their atoms, and so did the mixture's: a truncated Poisson batch of a
        # Laplace mechanism read 0 at all four atoms and its leaf refused, 0.115 of the window's mass held)
        y = np.asarray(atoms, dtype=np.float64)
        m, err = np.zeros(y.size), np.full(y.size, 1e-300)
        for part, w in zip(loss.parts, loss.w):
            own = list(part.atoms)
            if not own or w == 0:
                continue
            pm, pe = _atom_masses(part, own)
            at = {float(x): i for i, x in enumerate(own)}
            for i, x in enumerate(y):
                j = at.get(float(x))
                if j is not None:
                    m[i] += w * pm[j]
                    err[i] += w * pe[j]
        return m, err + 4 * _U * m
    m, err = _jump_masses(loss, atoms)
    if isinstance(loss, SymmetricSubsampledLoss):
        # its atoms +-g(x) (and 0, above): at g(x) > 0 the remove loss's mass there, at -g(x) the pair's P-mass of
        # L = x (the law of Y under P, mirrored), both from the pair's closed forms; its CDF goes through g^-1, which
        # rounds across them (a fixed-size batch of a Laplace mechanism: both read 0, and the leaf refused, the
        # density and atoms holding 0.68 of the window's mass)
        closed = _subsampled_masses(loss.rem)
        if closed is not None:
            jp, rm = closed
            img = np.asarray(loss.rem.atoms, dtype=np.float64)
            for i, y in enumerate(atoms):
                hit = np.flatnonzero((img == abs(y)) & (img > 0))
                if y != 0 and hit.size:
                    m[i] = rm[hit[0]] if y > 0 else jp[hit[0]]
                    err[i] = 16 * _U * m[i] + 1e-300
    return m, err


def _subsampled_masses(loss: SubsampledLoss):
    """``(P-masses, masses)`` of a subsampled loss's atoms (the images of its pair's, in their order) from the pair's
    closed forms, where the loss's CDF through g^-1 may round across them; ``None`` where they are not its pair's.
    Kept on the loss (a function of it alone): a composition's leaves, their anchor and the dominated leaf ask for
    them again (three times an answer of a subsampled Laplace)."""
    memo = loss.__dict__.get("_subsampled_masses_memo")
    if memo is None:
        memo = loss.__dict__["_subsampled_masses_memo"] = (_subsampled_masses_of(loss),)
    return None if memo[0] is None else tuple(a.copy() for a in memo[0])  # (copies: callers may write them)


def _subsampled_masses_of(loss: SubsampledLoss):
    """:func:`_subsampled_masses`, computed."""
    pair = loss.pair
    if len(pair.atoms) != len(loss.atoms):
        return None
    x = np.asarray(pair.atoms, dtype=np.float64)
    # (each jump from the smaller tails: the CDF's below 0, the survival function's above -- 1 - (1 - e^-e / 2) lost
    # all but ~u / 2 of a Laplace pair's top P-atom, e^-e / 2, to cancellation)
    up = x > 0
    f64 = lambda v: np.asarray(v, dtype=np.float64)  # noqa: E731
    jp = np.where(up, f64(pair.sf_P(x, strict=True)) - f64(pair.sf_P(x)),
                  f64(pair.cdf_P(x)) - f64(pair.cdf_P(x, strict=True)))
    if loss.direction != "remove":
        return np.maximum(jp, 0.0), np.maximum(jp, 0.0)
    below = np.nextafter(x, -np.inf)
    jq = np.where(up, f64(pair.sf_Q(below)) - f64(pair.sf_Q(x)), f64(pair.cdf_Q(x)) - f64(pair.cdf_Q(below)))
    return np.maximum(jp, 0.0), np.maximum((1 - loss.q) * jp + loss.q * jq, 0.0)


def _jump_masses(loss: ContinuousLoss, atoms):
    """The atoms' masses from the tails on each side of each, whichever are smaller (the CDF's and the survival
    function's relative errors are tau_F of their own values), or a loss's own closed form (``atom_mass``) where
    its error bound is the smaller."""
    # the jump of the CDF below the median, of the survival function above it, what both tails leave for an atom
    # across it -- one holding most of the mass, e.g. the symmetric subsampled loss's at 0 (1 - gamma of it), whose
    # CDF jump was charged 8 tau_F of its mass, 8e-11 per copy, which refused fixed-size batches at 1,000 steps; its
    # tails, ~gamma, now set it
    y = np.asarray(atoms, dtype=np.float64)
    below = np.nextafter(y, -np.inf)
    F_lo, S_lo = _cdf_sf(loss, below)  # Pr[Z < y], Pr[Z >= y]
    F_hi, S_hi = _cdf_sf(loss, y)  # Pr[Z <= y], Pr[Z > y]
    if getattr(loss, "_sf", False) is None:
        # (a custom loss given without its survival function: 1 - cdf, whose error is tau_F of the CDF, not of
        # the tail -- the CDF's jump, with the CDF's errors at both ends)
        return np.maximum(F_hi - F_lo, 0.0), 8 * loss.cdf_rel_error * (F_hi + F_lo) + 4 * _U + 1e-300
    low, high = F_hi <= 0.5, S_lo <= 0.5
    m = np.where(low, F_hi - F_lo, np.where(high, S_lo - S_hi, 1.0 - F_lo - S_hi))
    tails = np.where(low, F_hi + F_lo, np.where(high, S_lo + S_hi, F_lo + S_hi))
    m, err = np.maximum(m, 0.0), 8 * loss.cdf_rel_error * tails + 4 * _U + 1e-300
    for i, x in enumerate(y):
        # (an atom whose mass the loss knows from closed forms: the symmetric subsampled loss's at 0)
        own = loss.atom_mass(float(x))
        if own is not None and own[1] < err[i]:
            m[i], err[i] = own
    return m, err


def _cdf_sf(loss, t):
    """``(cdf(t), sf(t))`` (the subsampled Gaussian's in one compiled pass)."""
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(all="ignore"):
        psg = getattr(loss, "psg_params", None)
        if psg is not None:  # (the same values as loss.cdf and loss.sf)
            F, S, _ = _kernels.psg_eval(t, *psg, want_pdf=False)
            return np.asarray(F, dtype=np.float64), np.asarray(S, dtype=np.float64)
        return np.asarray(loss.cdf(t), dtype=np.float64), np.asarray(loss.sf(t), dtype=np.float64)
