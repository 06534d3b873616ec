"""Composition of privacy loss distributions by evolving discretisation.

The modules, in data-flow order (each imports only modules above it):

==============  ==================================================================================
``grids``       cumulant (log-MGF) grids of the losses, the planner's Chernoff windows
``plan``        plan trees: leaves, nodes, the shapes of ``glw``, ``two_stage``, ``recursive``
``windows``     the planner's windows of a whole plan, in array passes
``roundoff``    round-off bounds of a node's FFT power and the total variation charged for it
``precision``   a node's precision and spectra: the rules and the planner's predictions of them
``series``      the low-frequency series (accurate spectra near frequency 0)
``lattice``     the lattice spectra of few-bucket inputs, per-thread scratch arrays
``powers``      the numpy backend's node powers (references of the native backend's kernels)
``cost``        the cost model: meshes per group, the predicted time and size of a plan
``planner``     candidate plans and the search for the cheapest
``budget``      the error budget: shares of delta_error, refusals, the Azuma term with coarse tails
``node``        one node: its wrap-around window, precision and convolution
``execute``     one plan for one direction, and its certificate
``threads``     the worker pool for the second direction
``api``         the public :func:`compose`
==============  ==================================================================================

Certificate (what makes the bounds rigorous).  Let ``Y^k`` be the exact
composition of the finite parts and ``Z`` the PMF we return.  We couple them as
follows and add up what each step costs.

* Truncation: each leaf copy is ``Y`` conditioned on its window; total
  variation ``instances * (mass outside)``, computed from the CDF itself.
* Discretisation: every leaf copy (Algorithm 1, mean preserved) and every
  re-discretised copy (mean-preserving split, ``E[Y~ | Y] = Y``) adds a
  difference of conditional mean zero lying in an interval of known length
  ``r``.  Ordered leaves first, they form one martingale, so Azuma-Hoeffding
  gives ``|sum| <= sqrt(sum r^2 / 2 * log(2 / eta))`` except with probability
  ``eta``.  This is the paper's Hoeffding step applied once to all stages
  instead of once per stage.  The mesh sizes ``h_i`` are chosen to minimise the
  predicted work subject to this term equalling the eps budget.
* Wrap-around: a node instance differs from the linear convolution of its
  inputs only if the linear sum leaves the window; every node's input PMFs are
  concrete, so this probability is bounded a posteriori by a Chernoff bound on
  their exact moment generating function, and charged once per instance.
* Round-off: FFT error is bounded per node (componentwise forward error
  ``12 u log2 N``, propagated through the powers and the inverse transform)
  and charged as total variation per instance; near frequency 0, where the
  ``m``-th power would amplify that error ``m``-fold, the spectrum comes from
  the inputs' central moments with a proved error instead
  (:func:`.series._series_spectrum`); nodes whose charge would not fit run in long
  double (with float64 forward FFTs where, past the series' range, the powers
  are negligible: docs/roundoff.md, section 3c).  CDF round-off widens the leaf coupling range (see
  :mod:`fastpld.discretize`).  Mean errors add ``instances * bias`` to eps.

The resulting pair ``(eps_spent, delta_spent)`` satisfies
``|Y^k - Z| <=_{delta_spent} eps_spent``; queries use these spent values.
"""
from .api import DEFAULT_MAX_BUCKETS, METHODS, compose
from .threads import default_threads

__all__ = ["compose", "default_threads", "METHODS", "DEFAULT_MAX_BUCKETS"]
