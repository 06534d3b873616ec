"""Argument checks shared by the public API.

Every check raises ``ValueError`` naming the offending parameter, so that a bad
input never reaches numerical code (where it would become a NaN, a hang or a
silently wrong privacy bound).
"""
from __future__ import annotations

import math
import numbers

import numpy as np


def show(value) -> str:
    """``repr`` for error messages, with numpy scalars as the plain numbers they stand for.

    (``repr(np.float64(0.0))`` is ``np.float64(0.0)`` under numpy 2; a message should say ``0.0``.)
    """
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def positive_float(name: str, value, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float, requiring it to be finite and > 0."""
    v = real_float(name, value, allow_inf=allow_inf)
    if not v > 0:
        raise ValueError(f"{name} must be > 0, got {show(value)}")
    return v


def nonnegative_float(name: str, value) -> float:
    v = real_float(name, value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {show(value)}")
    return v


def _unwrap_0d(value):
    """A 0-d numpy array stands for its scalar (``np.array(2.0)`` is a float)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


def real_float(name: str, value, *, allow_inf: bool = False) -> float:
    value = _unwrap_0d(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise ValueError(f"{name} must be a real number, got {show(value)}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} must not be NaN")
    if math.isinf(v) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {show(value)}")
    return v


def probability(name: str, value, *, open_low: bool = False, open_high: bool = False) -> float:
    v = real_float(name, value)
    lo_ok = v > 0 if open_low else v >= 0
    hi_ok = v < 1 if open_high else v <= 1
    if not (lo_ok and hi_ok):
        lo = "(0" if open_low else "[0"
        hi = "1)" if open_high else "1]"
        raise ValueError(f"{name} must be in {lo}, {hi}, got {show(value)}")
    return v


def positive_int(name: str, value) -> int:
    value = _unwrap_0d(value)
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a positive integer, got {show(value)}")
    if isinstance(value, (numbers.Integral, np.integer)):
        v = int(value)
    elif isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        v = int(value)
    else:
        raise ValueError(f"{name} must be a positive integer, got {show(value)}")
    if v <= 0:
        raise ValueError(f"{name} must be a positive integer, got {show(value)}")
    return v


def eps_error(value) -> float:
    v = positive_float("eps_error", value)
    if v > 10:
        raise ValueError(f"eps_error must be in (0, 10], got {show(value)}")
    return v


def rel_error(value) -> float:
    v = positive_float("rel_error", value)
    if v >= 1:
        raise ValueError(f"rel_error must be in (0, 1), got {show(value)}")
    return v


# The accuracy asked when none is given, the same at every entry point (compose, the accountant,
# calibration, the CLI, the adapters): the certified interval of epsilon(delta) within 0.1% of epsilon
# (the dominance certificate), and where that certificate refuses a composition (or a coupling method
# is asked for, which cannot take a relative accuracy) the coupling certificate at this eps_error.
DEFAULT_REL_ERROR = 1e-3
DEFAULT_EPS_ERROR = 0.01


def accuracy(rel, eps, method=None) -> tuple:
    """``(rel_error, eps_error, default)`` of the accuracy arguments: one of them validated (the
    other ``None``), or neither given (``default``): ``(DEFAULT_REL_ERROR, DEFAULT_EPS_ERROR, True)``,
    the second for refusals of the first (``(None, DEFAULT_EPS_ERROR, True)`` for a coupling method)."""
    rel = relative_accuracy(rel, eps, method)
    if rel is not None:
        return rel, None, False
    if eps is not None:
        return None, eps_error(eps), False
    coupling = method is not None and method not in ("auto", "dominance")
    return (None if coupling else DEFAULT_REL_ERROR), DEFAULT_EPS_ERROR, True


def relative_accuracy(rel, eps_error, method=None):
    """The relative accuracy asked (``rel_error`` validated), or ``None``: refused beside an absolute
    ``eps_error`` and, given ``method``, with a method other than the dominance certificate's."""
    if rel is None:
        return None
    rel = rel_error(rel)
    if eps_error is not None:
        raise ValueError("give eps_error or rel_error, not both")
    if method is not None and method not in ("auto", "dominance"):
        raise ValueError(f"rel_error applies to methods 'auto' and 'dominance' (the dominance certificate); "
                         f"method {method!r} takes an absolute eps_error")
    return rel


def delta_error(value) -> float:
    v = real_float("delta_error", value)
    if not (0 < v < 0.1):
        raise ValueError(f"delta_error must be in (0, 0.1), got {show(value)}")
    if v < 1e-250:
        raise ValueError(f"delta_error must be >= 1e-250, got {show(value)}")
    return v


DEFAULT_DELTA_ERROR = 1e-10
# A relative accuracy holds for deltas at least this many times delta_error: the delta charges (at most delta_error)
# then move delta by at most 0.1% of it.  Closer, they widen epsilon(delta)'s interval past the accuracy asked (the
# README's DP-SGD rows at delta 1e-9 and delta_error 1e-10: 1.2-4.8 times the 0.1% asked; docs/performance.md)
DELTA_ERROR_MARGIN = 1e3


def delta_error_or_default(value=None) -> float:
    """``value`` as a ``delta_error`` (checked), or ``DEFAULT_DELTA_ERROR`` where it is ``None``."""
    return DEFAULT_DELTA_ERROR if value is None else delta_error(value)


def delta_errors_at(delta: float, value=None) -> tuple:
    """The delta errors a composition queried at ``delta`` tries in turn, the first not refused for its budget and
    within the accuracy asked there (:func:`fastpld.composition.api.compose_for_delta`): ``(value,)`` where given
    (checked); else :func:`delta_error_at`'s, then ten and a hundred times it while below ``DEFAULT_DELTA_ERROR``,
    then the default where it is at most ``delta / 10`` -- a delta too small for ``delta / 1000`` (round-off at that
    budget) gets a certified answer wider than asked, as with the default before, rather than a refusal."""
    first = delta_error_at(delta, value)
    if value is not None or first == DEFAULT_DELTA_ERROR:
        return (first,)
    out = [first]
    for f in (10.0, 100.0):
        d = first * f
        if d < DEFAULT_DELTA_ERROR * (1 - 1e-12):
            out.append(d)
    if DEFAULT_DELTA_ERROR <= float(delta) / 10:
        out.append(DEFAULT_DELTA_ERROR)
    return tuple(out)


def delta_error_at(delta: float, value=None) -> float:
    """The ``delta_error`` of a composition queried at ``delta``: ``value`` where given (checked), else
    ``DEFAULT_DELTA_ERROR`` or ``delta / DELTA_ERROR_MARGIN`` where that is smaller (at least 1e-250), so that the
    accuracy asked holds at ``delta`` (the first of :func:`delta_errors_at`, which the entry points that know the
    delta before they compose try: the command line's ``epsilon``, ``PrivacyAccountant.get_epsilon``, the
    dp_accounting adapter's ``get_epsilon``, ``fastpld batch``'s epsilon questions, ``plot.epsilon_vs_steps``)."""
    if value is not None:
        return delta_error(value)
    d = float(delta) / DELTA_ERROR_MARGIN
    # (within a few ulps of the default it is the default: 1e-7 / 1000 rounds below 1e-10, a composition apart)
    return DEFAULT_DELTA_ERROR if d >= DEFAULT_DELTA_ERROR * (1 - 1e-12) else max(d, 1e-250)


def query_array(name: str, value, *, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False) -> np.ndarray:
    """Validate a scalar or array query argument; returns a float64 array."""
    if type(value) is float and value == value and (lo is None or (value > lo if lo_open else value >= lo)) and (
            hi is None or value <= hi):
        return np.array(value)  # (a valid Python float, the common query: the checks below in Python, ~3x less)
    try:
        raw = np.asarray(value)
        # bools and complex numbers are not silently reinterpreted as real queries
        if raw.dtype.kind not in "iuf" and raw.dtype != object:
            raise TypeError
        if raw.dtype == object and any(isinstance(x, (bool, np.bool_, complex, np.complexfloating))
                                       for x in raw.ravel()):
            raise TypeError
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number or an array of real numbers, got {show(value)}") from None
    if np.isnan(arr).any():
        raise ValueError(f"{name} must not contain NaN")
    if lo is not None:
        bad = (arr <= lo) if lo_open else (arr < lo)
        if bad.any():
            op = ">" if lo_open else ">="
            raise ValueError(f"{name} must be {op} {lo}, got {show(arr[bad].ravel()[0])}")
    if hi is not None and (arr > hi).any():
        raise ValueError(f"{name} must be <= {hi}, got {show(arr[arr > hi].ravel()[0])}")
    return arr
