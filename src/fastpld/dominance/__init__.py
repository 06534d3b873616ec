"""The dominance certificate: pessimistic and optimistic PLDs carried through evolving grids.

The coupling certificate of :mod:`fastpld.composition` shifts epsilon by an Azuma-Hoeffding term over
every leaf copy, which forces leaf meshes of ``eps_error / sqrt(k)``.  This module certifies the
same evolving-discretisation plans without any epsilon shift (``docs/dominance.md``):

* **upper bound**: every leaf is replaced by a PLD that *dominates* it (its privacy curve is at
  least as high at every epsilon) and every re-discretisation by a dominating one.  Dominance is
  kept by composition with anything, so the composed PMF's curve lies above the true one; the only
  charges are the delta charges of the nodes (wrap-around, round-off) and of the truncated tails,
  as in the coupling certificate.  Both steps are *connect-the-dots* (Doroshenko et al. 2022): an
  atom at ``y`` between grid points ``lo < y < hi`` is replaced by atoms at ``lo`` and ``hi`` with
  the same mass under both distributions of the pair, i.e. ``(1 - e^(lo - y)) / (1 - e^(lo - hi))``
  of its mass at ``hi``.  Its error is second order in the mesh.
* **lower bound**: the same plan on *dominated* PLDs (curves at most the true one everywhere):
  each atom moves to the grid point at or below it (monotone coupling: lowering a loss can only
  lower the curve).  This rounding is first order in the mesh; the optimistic PMF runs on the
  same plan and meshes.

Both PMFs are exact compositions of their (dominating, dominated) leaves up to the node charges;
the floating-point error of a leaf's masses is charged as total variation per copy (a curve
perturbation of at most that much, by linearity of the composed curve in each factor).
"""
from __future__ import annotations

from .leaves import (  # noqa: F401  (the names the tests and the docs reach)
    _BLOCK, _BLOCK_SHARE, _atom_masses, _check_window, _continuous_grid, _leaf_data, _tail_blocks, ctd_leaf,
    dominated_leaf,
)
from .quadrature import _integrals, _panels  # noqa: F401
from .planner import _compose_dominance, _epsilon_guess, compose_dominance, dominance_meshes, leaf_mesh  # noqa: F401
from .result import _REFERENCE_DELTAS, _allowed_width, DominancePLD  # noqa: F401
from .splits import _MARGIN, _balanced_split, _balanced_split_py, _dom, ctd_split, dominated_split  # noqa: F401
from .. import _kernels  # noqa: F401

__all__ = ["DominancePLD", "compose_dominance", "ctd_leaf", "dominated_leaf", "ctd_split", "dominated_split",
           "dominance_meshes", "leaf_mesh"]
