"""Mechanisms as plain JSON-compatible dicts, for persisting accountants.

A mechanism is written as ``{"type": <class name>, <field>: <value>, ...}`` with
the fields of its frozen dataclass (floats, ints and strings; Python's ``json``
writes floats with ``repr``, so they read back bit for bit) or, for
:class:`~fastpld.CustomPMF`, its ``values``, ``probabilities`` and ``p_inf`` as
given.  Reading re-runs the mechanism's constructor, so every check of the
public API applies to stored data too; :class:`~fastpld.CustomCDF` (callables)
has no such form.
"""
from __future__ import annotations

import dataclasses

from . import mechanisms as M

__all__ = ["check_fields", "mechanism_to_dict", "mechanism_from_dict"]

_DATACLASSES = {cls.__name__: cls for cls in (M.Gaussian, M.Laplace, M.PoissonSubsampledGaussian,
                                               M.PoissonSubsampledLaplace, M.PureDP, M.RandomizedResponse,
                                               M.ApproxDP)}


def check_fields(where: str, given, allowed, required, suffix: str = "") -> None:
    """``ValueError`` naming ``where`` if ``given`` has a field outside ``allowed`` or lacks one of ``required``."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(f"{where} has unknown field(s) {unknown}{suffix}")
    missing = sorted(set(required) - set(given))
    if missing:
        raise ValueError(f"{where} lacks field(s) {missing}{suffix}")


def mechanism_to_dict(mech: M.Mechanism) -> dict:
    """``mech`` as a dict of JSON-compatible values; ``ValueError`` if it has none."""
    name = type(mech).__name__
    if _DATACLASSES.get(name) is type(mech):
        out = {"type": name}
        for f in dataclasses.fields(mech):
            v = getattr(mech, f.name)
            out[f.name] = v if isinstance(v, str) else (int(v) if isinstance(v, int) else float(v))
        return out
    if type(mech) is M.CustomPMF:
        values, probs, p_inf = mech._given  # (as given: the constructor reads them back to the same mechanism)
        return {"type": "CustomPMF", "values": list(values), "probabilities": list(probs), "p_inf": float(p_inf)}
    raise ValueError(f"{name} mechanisms cannot be stored as data (only {sorted(_DATACLASSES) + ['CustomPMF']}); "
                     "pickle the accountant instead if its callables can be pickled")


def mechanism_from_dict(data, where: str = "mechanism") -> M.Mechanism:
    """The mechanism described by ``data`` (from :func:`mechanism_to_dict`).

    Raises ``ValueError`` naming ``where`` and the offending field.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a dict, got {data!r}")
    kind = data.get("type")
    fields = {k: v for k, v in data.items() if k != "type"}
    if kind in _DATACLASSES:
        cls = _DATACLASSES[kind]
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    elif kind == "CustomPMF":
        cls = M.CustomPMF
        names = required = {"values", "probabilities", "p_inf"}
    else:
        raise ValueError(f"{where}.type must be one of {sorted(_DATACLASSES) + ['CustomPMF']}, got {kind!r}")
    check_fields(where, fields, names, required, f" for {kind}")
    for k, v in fields.items():
        # JSON gives bool, list, dict, None too: only numbers (and strings, which the constructors check) pass
        ok = (isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
              if k in ("values", "probabilities") else
              isinstance(v, str) or isinstance(v, (int, float)) and not isinstance(v, bool))
        if not ok:
            raise ValueError(f"{where}.{k} has an invalid value {v!r}")
    try:
        return cls(**fields)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
