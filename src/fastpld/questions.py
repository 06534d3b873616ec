"""Accounting questions as plain JSON, and their answers as flat records (see :mod:`fastpld.batch`).

A *question* is a plain JSON object (a ``dict``), so that a batch is a JSON-lines file::

    {"id": "user-17", "ask": "epsilon", "delta": 1e-5,
     "schedule": [{"mechanism": {"name": "poisson_subsampled_gaussian", "sigma": 1.1,
                                 "sampling_probability": 0.01}, "count": 300},
                  {"mechanism": {"name": "gaussian", "sigma": 4.0}, "count": 2}]}
    {"id": "u2", "ask": "delta", "epsilon": 1.0, "schedule": [...], "eps_error": 0.05}
    {"id": "c1", "ask": "noise_multiplier", "target_epsilon": 3.0, "target_delta": 1e-5,
     "sampling_probability": 0.01, "steps": 10000}

``ask`` is one of

* ``"epsilon"`` (needs ``schedule``, ``delta``): bounds on ``epsilon(delta)`` of the composition;
* ``"delta"`` (needs ``schedule``, ``epsilon``): bounds on ``delta(epsilon)``;
* ``"noise_multiplier"`` (``target_epsilon``, ``target_delta``, ``sampling_probability``, ``steps``):
  :func:`fastpld.find_noise_multiplier`;
* ``"sampling_probability"`` (``target_epsilon``, ``target_delta``, ``noise_multiplier``, ``steps``):
  :func:`fastpld.find_sampling_probability`;
* ``"steps"`` (``target_epsilon``, ``target_delta``, ``mechanism``): :func:`fastpld.find_steps`.

A schedule is a non-empty list of ``{"mechanism": {...}, "count": n}``; a mechanism is
``{"name": ..., parameters}`` with the names and parameters of :data:`MECHANISMS`.  Optional
accuracy fields (by default the library's, ``rel_error`` 1e-3): ``eps_error`` or ``rel_error``,
``delta_error``, ``method``, ``max_buckets`` (epsilon/delta, as in :func:`fastpld.compose`; an epsilon question's
``delta_error`` by default 1e-10, or its ``delta`` over 1000 where that is smaller);
``eps_error`` or ``rel_error``, ``delta_error``, ``rtol``, ``max_buckets`` and
``neighboring`` or ``max_steps`` (calibrations, as in :mod:`fastpld.calibrate`).  ``id`` (a string
or an integer) is echoed in the answer.

Every answer is a flat record (:data:`RECORD_FIELDS`), ready for ``json.dumps`` or
``pandas.DataFrame(records)``: ``lower``/``estimate``/``upper`` are the certified
:class:`~fastpld.Bounds` (of epsilon or delta; for a calibration, of epsilon at ``target_delta``
at the returned ``value``, composed again with the calibration's errors, so ``upper <=
target_epsilon``), ``error`` holds the message of a question that failed (``error_type`` its
exception class) and the other questions go on.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

from . import _validation as V
from .calibrate import _accuracy as _calibration_accuracy
from .calibrate import _compose_widening, find_noise_multiplier, find_sampling_probability, find_steps
from .composition.api import DEFAULT_MAX_BUCKETS, METHODS, compose, compose_for_delta
from .mechanisms import (
    ApproxDP,
    CustomPMF,
    Gaussian,
    Laplace,
    PoissonSubsampledGaussian,
    PoissonSubsampledLaplace,
    PureDP,
    RandomizedResponse,
)

__all__ = ["answer", "parse_question", "read_jsonl", "MECHANISMS", "ASKS", "RECORD_FIELDS"]

#: JSON mechanism name -> (class, required parameters, optional parameters)
MECHANISMS = {
    "gaussian": (Gaussian, ("sigma",), ("sensitivity",)),
    "laplace": (Laplace, ("scale",), ("sensitivity",)),
    "poisson_subsampled_gaussian": (PoissonSubsampledGaussian, ("sigma", "sampling_probability"),
                                    ("sensitivity", "neighboring")),
    "poisson_subsampled_laplace": (PoissonSubsampledLaplace, ("scale", "sampling_probability"),
                                   ("sensitivity", "neighboring")),
    "pure_dp": (PureDP, ("epsilon",), ()),
    "randomized_response": (RandomizedResponse, ("epsilon",), ("num_categories",)),
    "approx_dp": (ApproxDP, ("epsilon", "delta"), ()),
    "custom_pmf": (CustomPMF, ("values", "probabilities"), ("p_inf",)),
}

_COMPOSE_OPTIONS = ("eps_error", "rel_error", "delta_error", "method", "max_buckets")
_CALIBRATION_OPTIONS = ("eps_error", "rel_error", "delta_error", "rtol", "max_buckets")
#: ask -> (required fields, optional fields), besides "id" and "ask"
ASKS = {
    "epsilon": (("schedule", "delta"), _COMPOSE_OPTIONS),
    "delta": (("schedule", "epsilon"), _COMPOSE_OPTIONS),
    "noise_multiplier": (("target_epsilon", "target_delta", "sampling_probability", "steps"),
                         _CALIBRATION_OPTIONS + ("neighboring",)),
    "sampling_probability": (("target_epsilon", "target_delta", "noise_multiplier", "steps"),
                             _CALIBRATION_OPTIONS + ("neighboring",)),
    "steps": (("target_epsilon", "target_delta", "mechanism"), _CALIBRATION_OPTIONS + ("max_steps",)),
}

#: Keys of every answer record, in this order.
RECORD_FIELDS = ("index", "id", "ask", "ok", "value", "lower", "estimate", "upper", "method", "error",
                 "error_type", "time", "worker")


# --------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Parsed:
    id: object
    ask: str
    events: tuple  # ((mechanism, count), ...) for epsilon/delta, else ()
    fields: dict  # the question's other fields, validated
    key: object  # questions with equal keys share a composition; None: never shared


class _BadInput:
    """Stands for an input item that is not a question at all (e.g. a line that is not JSON)."""

    def __init__(self, message: str, id=None):
        self.message = message
        self.id = id


def _mechanism(spec, where):
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where} must be an object {{\"name\": ..., parameters}}, got {spec!r}")
    name = spec.get("name")
    if name not in MECHANISMS:
        known = ", ".join(MECHANISMS)
        raise ValueError(f"{where}.name must be one of {known}, got {name!r}")
    cls, required, optional = MECHANISMS[name]
    params = {k: v for k, v in spec.items() if k != "name"}
    for k in params:
        if k not in required and k not in optional:
            raise ValueError(f"{where}: unknown parameter {k!r} for {name!r} (expected {', '.join(required + optional)})")
    for k in required:
        if k not in params:
            raise ValueError(f"{where}: {name!r} needs the parameter {k!r}")
    try:
        return cls(**params)
    except (ValueError, TypeError) as exc:  # the constructors name the parameter
        raise ValueError(f"{where}.{_named(exc, params)}") from None


def _named(exc, params):
    """``"sigma must be > 0, got -1"``, or the message prefixed by ``": "`` if it names no parameter."""
    msg = str(exc)
    return msg if any(msg.startswith(k) for k in params) else f": {msg}"


def _mechanism_key(mech):
    if isinstance(mech, CustomPMF):
        return ("custom_pmf", mech._key)
    return (type(mech).__name__, dataclasses.astuple(mech))


def parse_question(question) -> _Parsed:
    """Validate one question (see the module docstring) and build its mechanisms.

    Parameters
    ----------
    question : dict
        A question.

    Returns
    -------
    object
        The validated question (an internal value: pass the question itself to
        :func:`answer` or :func:`run`).

    Raises
    ------
    ValueError
        Naming the field, e.g. ``schedule[2].mechanism.sigma must be > 0, got -1``.
    """
    if isinstance(question, _BadInput):
        raise ValueError(question.message)
    if not isinstance(question, Mapping):
        raise ValueError(f"a question must be a JSON object (dict), got {type(question).__name__}: {question!r:.80}")
    qid = _question_id(question)
    ask = question.get("ask")
    if ask not in ASKS:
        raise ValueError(f"ask must be one of {', '.join(ASKS)}, got {ask!r}")
    required, optional = ASKS[ask]
    for k in question:
        if k not in ("id", "ask") and k not in required and k not in optional:
            raise ValueError(f"unknown field {k!r} for ask={ask!r} (expected {', '.join(required + optional)})")
    for k in required:
        if k not in question:
            raise ValueError(f"ask={ask!r} needs the field {k!r}")
    fields = {k: v for k, v in question.items() if k not in ("id", "ask", "schedule", "mechanism")}
    events = ()
    key = None
    if ask in ("epsilon", "delta"):
        sched = question["schedule"]
        if isinstance(sched, (str, bytes, Mapping)) or not isinstance(sched, Sequence) or not sched:
            raise ValueError(f"schedule must be a non-empty list of {{\"mechanism\": ..., \"count\": ...}}, got {sched!r:.80}")
        ev = []
        for i, item in enumerate(sched):
            where = f"schedule[{i}]"
            if not isinstance(item, Mapping):
                raise ValueError(f"{where} must be an object {{\"mechanism\": ..., \"count\": ...}}, got {item!r:.80}")
            extra = set(item) - {"mechanism", "count"}
            if extra:
                raise ValueError(f"{where}: unknown field {sorted(extra)[0]!r} (expected mechanism, count)")
            if "mechanism" not in item or "count" not in item:
                missing = "mechanism" if "mechanism" not in item else "count"
                raise ValueError(f"{where} needs the field {missing!r}")
            mech = _mechanism(item["mechanism"], f"{where}.mechanism")
            ev.append((mech, V.positive_int(f"{where}.count", item["count"])))
        events = tuple(ev)
        if ask == "epsilon":
            fields["delta"] = V.probability("delta", question["delta"], open_low=True)
        else:
            fields["epsilon"] = V.nonnegative_float("epsilon", question["epsilon"])
        # (an epsilon question's composition: at its delta / 1000 where that is below 1e-10, unless one is given,
        # composition.api.compose_for_delta; its key holds the ladder it tries)
        given = question.get("delta_error")
        fields["delta_error"] = None if given is None else V.delta_error(given)
        ladder = (V.delta_errors_at(fields["delta"], fields["delta_error"]) if ask == "epsilon"
                  else (V.delta_error_or_default(fields["delta_error"]),))
        method = question.get("method", "auto")
        if not isinstance(method, str) or method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        fields["method"] = method
        # (neither accuracy given: None, None, compose's default)
        rel, eps, default = V.accuracy(question.get("rel_error"), question.get("eps_error"), method)
        fields["eps_error"], fields["rel_error"] = (None, None) if default else (eps, rel)
        fields["max_buckets"] = V.positive_int("max_buckets", question.get("max_buckets", DEFAULT_MAX_BUCKETS))
        key = (tuple((_mechanism_key(m), c) for m, c in events), fields["eps_error"], fields["rel_error"],
               ladder, fields["method"], fields["max_buckets"])
    else:
        fields["target_epsilon"] = V.positive_float("target_epsilon", question["target_epsilon"])
        fields["target_delta"] = V.probability("target_delta", question["target_delta"], open_low=True,
                                               open_high=True)
        for k, check in (("eps_error", V.eps_error), ("rel_error", V.rel_error), ("delta_error", V.delta_error)):
            if question.get(k) is not None:
                fields[k] = check(question[k])
        if "rtol" in question:
            fields["rtol"] = V.positive_float("rtol", question["rtol"])
        if "max_buckets" in question:
            fields["max_buckets"] = V.positive_int("max_buckets", question["max_buckets"])
        if ask == "noise_multiplier":
            fields["sampling_probability"] = V.probability("sampling_probability", question["sampling_probability"],
                                                           open_low=True)
        if ask == "sampling_probability":
            fields["noise_multiplier"] = V.positive_float("noise_multiplier", question["noise_multiplier"])
        if ask in ("noise_multiplier", "sampling_probability"):
            fields["steps"] = V.positive_int("steps", question["steps"])
            nb = question.get("neighboring", "add_or_remove")
            if nb not in ("add_or_remove", "remove", "add"):
                raise ValueError(f"neighboring must be one of add_or_remove, remove, add, got {nb!r}")
        else:
            fields["mechanism"] = _mechanism(question["mechanism"], "mechanism")
            if "max_steps" in question:
                fields["max_steps"] = V.positive_int("max_steps", question["max_steps"])
    return _Parsed(qid, ask, events, fields, key)


def _question_id(question):
    qid = question.get("id")
    if qid is not None and (isinstance(qid, bool) or not isinstance(qid, (str, int))):
        raise ValueError(f"id must be a string or an integer, got {qid!r:.80}")
    return qid


def _safe_id(question):
    """The question's id for an error record, when it has a usable one."""
    if isinstance(question, _BadInput):
        return question.id
    try:
        return _question_id(question) if isinstance(question, Mapping) else None
    except ValueError:
        return None


# --------------------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------------------
_WORKER = None


def _worker_name():
    global _WORKER
    if _WORKER is None or not _WORKER.endswith(f":{os.getpid()}"):
        _WORKER = f"{socket.gethostname()}:{os.getpid()}"
    return _WORKER


def _record(index, qid, ask, **kw):
    rec = dict.fromkeys(RECORD_FIELDS)
    rec.update(index=index, id=index if qid is None else qid, ask=ask, ok=kw.get("error") is None,
               worker=_worker_name())
    rec.update(kw)
    return rec


def _bounds(rec, b):
    rec.update(lower=float(b.lower), estimate=float(b.estimate), upper=float(b.upper))


def _compute(p: _Parsed, memo):
    f = p.fields
    out = {}
    if p.ask in ("epsilon", "delta"):
        got = memo.get(p.key) if memo is not None else None
        if got is None:
            try:
                def compose_at(de):
                    return compose(list(p.events), eps_error=f["eps_error"], rel_error=f["rel_error"], delta_error=de,
                                   method=f["method"], max_buckets=f["max_buckets"])

                if p.ask == "epsilon":
                    got = compose_for_delta(compose_at, f["delta"], f["delta_error"], f["rel_error"], f["eps_error"])
                else:
                    got = compose_at(V.delta_error_or_default(f["delta_error"]))
            except Exception as exc:  # a shared composition fails the same way for each question
                got = exc
            if memo is not None:
                memo[p.key] = got
        if isinstance(got, Exception):
            raise got
        _bounds(out, got.epsilon(f["delta"]) if p.ask == "epsilon" else got.delta(f["epsilon"]))
        out["method"] = got.method
        return out
    te, td = f["target_epsilon"], f["target_delta"]
    common = {k: f[k] for k in ("eps_error", "rel_error", "delta_error", "rtol", "max_buckets") if k in f}
    mb = f.get("max_buckets", DEFAULT_MAX_BUCKETS)
    nb = f.get("neighboring", "add_or_remove")
    if p.ask == "noise_multiplier":
        q = f["sampling_probability"]
        value = find_noise_multiplier(te, td, q, f["steps"], neighboring=nb, **common)
        mech, count = PoissonSubsampledGaussian(value, q, neighboring=nb), f["steps"]
    elif p.ask == "sampling_probability":
        s = f["noise_multiplier"]
        value = find_sampling_probability(te, td, s, f["steps"], neighboring=nb, **common)
        mech, count = PoissonSubsampledGaussian(s, value, neighboring=nb), f["steps"]
    else:
        extra = {"max_steps": f["max_steps"]} if "max_steps" in f else {}
        value = find_steps(te, td, f["mechanism"], **common, **extra)
        mech, count = f["mechanism"], value
    # the certified epsilon at the answer, with the errors the calibration used (its own last check)
    acc, _, des, _ = _calibration_accuracy(te, td, f.get("rel_error"), f.get("eps_error"), f.get("delta_error"), None)
    pld = _compose_widening(mech, count, acc, des, mb)
    _bounds(out, pld.epsilon(td))
    out["value"] = value
    out["method"] = pld.method
    return out


def _answer(index, question, memo=None):
    t0 = time.perf_counter()
    qid, ask = _safe_id(question), question.get("ask") if isinstance(question, Mapping) else None
    try:
        p = parse_question(question)
        res = _compute(p, memo)
    except Exception as exc:  # reported in the question's record; the batch goes on
        return _record(index, qid, ask if ask in ASKS else None, error=str(exc) or repr(exc),
                       error_type=type(exc).__name__, time=time.perf_counter() - t0)
    return _record(index, p.id, p.ask, time=time.perf_counter() - t0, **res)


def answer(question, index: int = 0) -> dict:
    """Answer one question in this process.

    Parameters
    ----------
    question : dict
        A question (see :mod:`fastpld.questions`).
    index : int
        Its position in a batch (echoed in the record; the ``id`` when the question has none).

    Returns
    -------
    dict
        The record (keys :data:`RECORD_FIELDS`); a bad question gives a record with ``ok``
        false and its ``error``, it does not raise.
    """
    return _answer(index, question)


def read_jsonl(lines: Iterable[str]) -> Iterator:
    """Questions from JSON lines, lazily; blank lines are skipped.

    A line that is not a JSON object is not fatal: it becomes a question whose record carries
    the parse error (with the line number), so the other lines are still answered.

    Parameters
    ----------
    lines : iterable of str
        E.g. an open text file.

    Yields
    ------
    dict
        One question per non-blank line (or a placeholder that answers with the line's error).
    """
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
        except ValueError as exc:
            yield _BadInput(f"line {n}: not valid JSON ({exc})")
            continue
        if not isinstance(q, dict):
            yield _BadInput(f"line {n}: a question must be a JSON object, got {type(q).__name__}")
            continue
        yield q
