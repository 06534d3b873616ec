"""Drop-in adapters for users of other privacy-accounting libraries.

Each adapter lives in its own module and imports its peer package when that
module is imported, so ``import fastpld`` (and ``import fastpld.compat``) never
requires any of them:

* :mod:`fastpld.compat.dp_accounting` -- ``FastPLDAccountant``, a
  ``dp_accounting.PrivacyAccountant`` that takes ``DpEvent`` objects;
* :mod:`fastpld.compat.prv_accountant` -- ``PRVAccountant`` and the mechanism
  classes of ``prv_accountant`` with the same names and arguments;
* :mod:`fastpld.compat.opacus` -- ``FastPLDAccountant``, an Opacus
  ``IAccountant`` registered as ``"fastpld"`` (``PrivacyEngine(accountant="fastpld")``).

Switching is a one-line import change; every adapter also offers the certified
``(lower, estimate, upper)`` bounds of :class:`fastpld.Bounds`.
"""

__all__: list[str] = []
