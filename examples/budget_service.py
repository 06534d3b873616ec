"""A small HTTP JSON privacy-budget service on fastpld (standard library only).

One :class:`fastpld.PrivacyAccountant` per tenant, persisted in SQLite.  A step
is accepted only if the *certified upper bound* on epsilon at the tenant's
delta, with the step included, stays within the tenant's epsilon budget.

Run::

    PYTHONPATH=src python examples/budget_service.py --db budgets.sqlite --port 8080

API (JSON bodies and answers; errors are ``{"error": "..."}`` with 400, 404 or 409)::

    POST /tenants                 {"tenant": "a", "epsilon": 3.0, "delta": 1e-5}           -> 201
                                  (optional "rel_error" or "eps_error", "delta_error" of the accountant;
                                   by default the library's accuracy, 0.1% of epsilon)
    GET  /tenants/a               budget, steps recorded, certified epsilon at the budget's delta
    POST /tenants/a/steps         {"mechanism": {"type": "PoissonSubsampledGaussian", "sigma": 1.0,
                                   "sampling_probability": 0.01}, "count": 1, "request_id": "uuid"}
                                  -> 200 {"accepted": true, ...} or 409 {"accepted": false, ...}
    GET  /tenants/a/epsilon?delta=1e-6     certified bounds {"lower", "estimate", "upper"}
    GET  /tenants/a/delta?epsilon=1.0      certified bounds

Storage (plain SQL, so another database can take SQLite's place)::

    tenants(tenant TEXT PRIMARY KEY, budget_epsilon REAL, budget_delta REAL,
            accountant TEXT  -- PrivacyAccountant.to_json()
            , version INTEGER)
    requests(tenant TEXT, request_id TEXT, accepted INTEGER, response TEXT, PRIMARY KEY (tenant, request_id))

Why there is no double spend.  A step is decided against the stored state of
version ``v`` and written with ``UPDATE ... WHERE version = v`` inside one
``BEGIN IMMEDIATE`` transaction, together with the request's outcome; if another
writer (thread or process) got there first the step is decided again on the
new state.  So every accepted step was checked against exactly the history it
extends, and a step is stored if and only if its acceptance is.  A client that
retries with the same ``request_id`` (e.g. after a crash of the server) gets the
stored outcome instead of spending twice.  Within one process a per-tenant lock
keeps concurrent steps of one tenant from composing in vain.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import sqlite3
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import fastpld

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    tenant TEXT PRIMARY KEY,
    budget_epsilon REAL NOT NULL,
    budget_delta REAL NOT NULL,
    accountant TEXT NOT NULL,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    tenant TEXT NOT NULL,
    request_id TEXT NOT NULL,
    accepted INTEGER NOT NULL,
    response TEXT NOT NULL,
    PRIMARY KEY (tenant, request_id)
);
"""

MECHANISMS = {name: getattr(fastpld, name) for name in (
    "Gaussian", "Laplace", "PoissonSubsampledGaussian", "PoissonSubsampledLaplace", "PureDP",
    "RandomizedResponse", "ApproxDP")}


class ServiceError(Exception):
    """An error answered to the client with an HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _bounds(b) -> dict:
    return {"lower": float(b.lower), "estimate": float(b.estimate), "upper": float(b.upper)}


def _number(body, name):
    v = body.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ServiceError(400, f"{name} must be a finite number > 0, got {v!r}")
    return float(v)


def _mechanism(spec):
    if not isinstance(spec, dict) or spec.get("type") not in MECHANISMS:
        raise ServiceError(400, f"mechanism must be an object with a type in {sorted(MECHANISMS)}, got {spec!r}")
    params = {k: v for k, v in spec.items() if k != "type"}
    try:
        return MECHANISMS[spec["type"]](**params)
    except (TypeError, ValueError) as exc:
        raise ServiceError(400, f"mechanism: {exc}") from None


class BudgetService:
    """The budget logic over one SQLite file; thread-safe (one connection per call)."""

    def __init__(self, path: str):
        self.path = path
        self._locks: dict = {}
        self._locks_guard = threading.Lock()
        self._live: dict = {}  # tenant -> (version, accountant): saves re-reading and recomposing
        with self._connect() as db:
            db.executescript(SCHEMA)

    @contextlib.contextmanager
    def _connect(self):
        # autocommit mode: transactions are explicit (BEGIN IMMEDIATE) where they matter
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # an acknowledged step survives a crash of the machine
            yield db
        finally:
            db.close()

    def _lock(self, tenant):
        with self._locks_guard:
            return self._locks.setdefault(tenant, threading.Lock())

    def _row(self, db, tenant):
        row = db.execute("SELECT budget_epsilon, budget_delta, accountant, version FROM tenants WHERE tenant = ?",
                         (tenant,)).fetchone()
        if row is None:
            raise ServiceError(404, f"unknown tenant {tenant!r}")
        return row

    def _accountant(self, tenant, state, version):
        live = self._live.get(tenant)
        if live is not None and live[0] == version:
            return live[1]
        acc = fastpld.PrivacyAccountant.from_json(state)
        self._live[tenant] = (version, acc)
        return acc

    # operations ----------------------------------------------------------------------
    def create(self, body) -> dict:
        tenant = body.get("tenant") if isinstance(body, dict) else None
        if not isinstance(tenant, str) or not tenant or "/" in tenant:
            raise ServiceError(400, f"tenant must be a non-empty string without '/', got {tenant!r}")
        eps, delta = _number(body, "epsilon"), _number(body, "delta")
        if not 0 < delta < 1:
            raise ServiceError(400, f"delta must be in (0, 1), got {delta!r}")
        try:
            acc = fastpld.PrivacyAccountant(eps_error=body.get("eps_error"), rel_error=body.get("rel_error"),
                                            delta_error=body.get("delta_error", 1e-10))
        except ValueError as exc:
            raise ServiceError(400, str(exc)) from None
        with self._connect() as db:
            try:
                db.execute("INSERT INTO tenants VALUES (?, ?, ?, ?, 0)", (tenant, eps, delta, acc.to_json()))
            except sqlite3.IntegrityError:
                raise ServiceError(409, f"tenant {tenant!r} exists") from None
        return {"tenant": tenant, "budget": {"epsilon": eps, "delta": delta}}

    def summary(self, tenant) -> dict:
        with self._connect() as db:
            eps, delta, state, version = self._row(db, tenant)
        with self._lock(tenant):
            acc = self._accountant(tenant, state, version)
            spent = acc.get_epsilon(delta)
        return {"tenant": tenant, "budget": {"epsilon": eps, "delta": delta}, "steps": acc.num_compositions,
                "epsilon": _bounds(spent), "version": version}

    def query(self, tenant, kind, value) -> dict:
        with self._connect() as db:
            _, _, state, version = self._row(db, tenant)
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise ServiceError(400, f"{'delta' if kind == 'epsilon' else 'epsilon'} must be a number, "
                                    f"got {value!r}") from None
        with self._lock(tenant):
            acc = self._accountant(tenant, state, version)
            try:
                b = acc.get_epsilon(x) if kind == "epsilon" else acc.get_delta(x)
            except ValueError as exc:
                raise ServiceError(400, str(exc)) from None
        return {"tenant": tenant, kind: _bounds(b)}

    def step(self, tenant, body) -> tuple[int, dict]:
        if not isinstance(body, dict):
            raise ServiceError(400, "the body must be a JSON object")
        mech = _mechanism(body.get("mechanism"))
        count = body.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ServiceError(400, f"count must be a positive integer, got {count!r}")
        rid = body.get("request_id")
        if rid is not None and not isinstance(rid, str):
            raise ServiceError(400, f"request_id must be a string, got {rid!r}")
        with self._lock(tenant):
            while True:
                with self._connect() as db:
                    if rid is not None:
                        done = db.execute("SELECT accepted, response FROM requests WHERE tenant = ? AND "
                                          "request_id = ?", (tenant, rid)).fetchone()
                        if done is not None:
                            return (200 if done[0] else 409), {**json.loads(done[1]), "replayed": True}
                    eps, delta, state, version = self._row(db, tenant)
                    acc = self._accountant(tenant, state, version)
                    self._live.pop(tenant, None)  # acc is changed below; kept again only if stored
                    acc.compose(mech, count)
                    try:
                        b = acc.get_epsilon(delta)
                        accepted = b.upper <= eps
                        spent = _bounds(b)
                    except ValueError as exc:  # e.g. delta below what the composition can certify
                        accepted, spent = False, {"error": str(exc)}
                    answer = {"tenant": tenant, "accepted": accepted, "count": count,
                              "budget": {"epsilon": eps, "delta": delta},
                              "epsilon" if accepted else "epsilon_if_accepted": spent,
                              "steps": acc.num_compositions if accepted else acc.num_compositions - count}
                    db.execute("BEGIN IMMEDIATE")
                    try:
                        # another writer (thread or process) stored a step, or answered this request, first:
                        # decide again on the new state (or replay that answer)
                        moved = db.execute("SELECT version FROM tenants WHERE tenant = ?",
                                           (tenant,)).fetchone()[0] != version
                        if moved or rid is not None and db.execute(
                                "SELECT 1 FROM requests WHERE tenant = ? AND request_id = ?",
                                (tenant, rid)).fetchone() is not None:
                            db.execute("ROLLBACK")
                            continue
                        if accepted:
                            db.execute("UPDATE tenants SET accountant = ?, version = version + 1 "
                                       "WHERE tenant = ? AND version = ?", (acc.to_json(), tenant, version))
                        if rid is not None:
                            db.execute("INSERT INTO requests VALUES (?, ?, ?, ?)",
                                       (tenant, rid, int(accepted), json.dumps(answer)))
                        db.execute("COMMIT")
                    except BaseException:
                        db.execute("ROLLBACK")
                        raise
                if accepted:
                    self._live[tenant] = (version + 1, acc)
                return (200 if accepted else 409), answer


class _Handler(BaseHTTPRequestHandler):
    service: BudgetService  # set by make_server

    def log_message(self, *args):  # quiet: a load test makes thousands of requests
        pass

    def _send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method):
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        try:
            body = None
            if method == "POST":
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"null")
                except ValueError:
                    raise ServiceError(400, "the body is not valid JSON") from None
            svc = self.service
            if parts == ["tenants"] and method == "POST":
                return self._send(201, svc.create(body))
            if len(parts) == 2 and parts[0] == "tenants" and method == "GET":
                return self._send(200, svc.summary(parts[1]))
            if len(parts) == 3 and parts[0] == "tenants" and parts[2] == "steps" and method == "POST":
                return self._send(*svc.step(parts[1], body))
            if len(parts) == 3 and parts[0] == "tenants" and parts[2] in ("epsilon", "delta") and method == "GET":
                arg = "delta" if parts[2] == "epsilon" else "epsilon"
                value = parse_qs(url.query).get(arg, [None])[0]
                if value is None:
                    raise ServiceError(400, f"query parameter {arg} is required")
                return self._send(200, svc.query(parts[1], parts[2], value))
            raise ServiceError(404, f"no route {method} {url.path}")
        except ServiceError as exc:
            self._send(exc.status, {"error": str(exc)})

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")


def make_server(db_path: str, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A threading HTTP server for the budget service (``port=0``: an ephemeral port)."""
    handler = type("Handler", (_Handler,), {"service": BudgetService(db_path)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="fastpld privacy-budget service")
    ap.add_argument("--db", required=True, help="SQLite file (created if absent)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    args = ap.parse_args(argv)
    server = make_server(args.db, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
