"""Many independent accounting questions at once: serially, over local processes, or on Dask.

Questions and answers are plain JSON (see :mod:`fastpld.questions` for the schema)::

    >>> from fastpld import batch
    >>> questions = [{"id": "user-17", "ask": "epsilon", "delta": 1e-5,
    ...               "schedule": [{"mechanism": {"name": "poisson_subsampled_gaussian", "sigma": 1.1,
    ...                                           "sampling_probability": 0.01}, "count": 300}]}]
    >>> for record in batch.run(questions):            # local processes  # doctest: +SKIP
    ...     print(record["id"], record["upper"])
    >>> records = batch.answer_many(questions, client=dask_client)   # a Dask cluster  # doctest: +SKIP

How the work is spread: questions are read lazily, a window of ``chunk_size x workers`` at a time;
in a window, questions with the same schedule and accuracy options are grouped to share one
composition (answered from one :class:`~fastpld.PrivacyLossDistribution`), and the groups are
shipped in chunks of ``chunk_size``; each worker process keeps
fastpld's per-mechanism caches (privacy-loss objects, their moments and MGF grids) across all the
chunks it receives.  An answer is bitwise the answer of :func:`answer` on that question alone:
fastpld's compositions do not depend on caches, threads or call order.  A worker that dies (killed,
out of memory) costs nothing but time: its unanswered chunks are sent again (by Dask's scheduler,
or once by the local pool), and the questions of a chunk that fails again are asked one at a time
with nothing else running, so that only a question that kills its worker by itself is reported
failed (in its record).
"""
from __future__ import annotations

import concurrent.futures
import itertools
import math
import multiprocessing
import os
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence

from . import _validation as V
from .questions import ASKS, MECHANISMS, RECORD_FIELDS, _answer, _record, _safe_id, answer, parse_question, read_jsonl

__all__ = ["run", "answer_many", "answer", "parse_question", "read_jsonl", "MECHANISMS", "ASKS", "RECORD_FIELDS"]


def _answer_chunk(items):
    """Worker entry point: the records of ``[(index, question), ...]``, compositions shared by key."""
    memo = {}
    return [_answer(i, q, memo) for i, q in items]


#: what a worker needs before its first question: imported once by the fork server, so that each
#: worker starts by a fork (~1.3 s of CPU per worker when spawned: numpy, scipy, pyfftw, fastpld)
_PRELOAD = ("fastpld", "fastpld.batch", "fastpld.questions", "fastpld.composition.api", "fastpld._native",
            "scipy.special")


def _preload_forkserver(ctx):
    """Add :data:`_PRELOAD` to the fork server's preloaded modules (keeping any the program set; no
    effect once the fork server runs)."""
    try:
        import multiprocessing.forkserver as fs
        have = list(getattr(fs._forkserver, "_preload_modules", []) or [])
    except (ImportError, AttributeError):  # pragma: no cover - another Python's internals
        have = []
    ctx.set_forkserver_preload(have + [m for m in _PRELOAD if m not in have])


def _init_worker(threads):
    # every worker process is one of ``workers`` busy processes: fastpld's own second thread
    # would only compete with the other workers for the cores
    os.environ["FASTPLD_NUM_THREADS"] = str(threads)


# --------------------------------------------------------------------------------------
# Drivers: where chunks run
# --------------------------------------------------------------------------------------
class _Serial:
    slots = 1
    resubmit = 0  # a chunk is answered here: nothing can die

    def __init__(self):
        self._done = {}
        self._ids = itertools.count()

    def submit(self, items):
        h = next(self._ids)
        self._done[h] = _answer_chunk(items)
        return h

    def wait(self, handles):
        return [(h, self._done.pop(h), None) for h in handles]

    def close(self):
        self._done.clear()


class _Local:
    resubmit = 1  # a chunk whose worker died is sent again once before its questions are isolated

    def __init__(self, workers, mp_context, threads):
        self.slots = workers
        if mp_context is None:  # the default: a fork server that has imported fastpld once
            mp_context = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        self._ctx = multiprocessing.get_context(mp_context) if isinstance(mp_context, str) else mp_context
        if mp_context == "forkserver":
            _preload_forkserver(self._ctx)
        self._threads = threads
        self._pool = None
        self._owner = {}  # future -> the pool it was submitted to

    def submit(self, items):
        for _ in range(2):
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self.slots, mp_context=self._ctx, initializer=_init_worker, initargs=(self._threads,))
            try:
                f = self._pool.submit(_answer_chunk, items)
            except concurrent.futures.process.BrokenProcessPool:
                # a worker died since the last wait (its chunks fail there); this chunk goes to a new pool
                self._pool.shutdown(wait=True)
                self._pool = None
                continue
            self._owner[f] = self._pool
            return f
        raise RuntimeError("could not start a pool of worker processes")

    def wait(self, handles):
        done, _ = concurrent.futures.wait(handles, return_when=concurrent.futures.FIRST_COMPLETED)
        out = []
        for f in done:
            pool = self._owner.pop(f)
            exc = f.exception()
            if isinstance(exc, concurrent.futures.process.BrokenProcessPool) and pool is self._pool:
                # a worker died: this pool is finished (all its futures fail); the next submit starts a new one
                self._pool.shutdown(wait=True)
                self._pool = None
            out.append((f, None if exc else f.result(), exc))
        return out

    def close(self):
        self._owner.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class _Dask:
    resubmit = 0  # the scheduler has already resent a chunk whose worker died (allowed-failures)

    def __init__(self, client, retries, owned):
        import distributed

        self._distributed = distributed
        self._client = client
        self._retries = retries
        self._owned = owned
        self._token = uuid.uuid4().hex[:12]
        self._n = itertools.count()
        self.slots = max(1, sum(client.nthreads().values()))

    def submit(self, items):
        return self._client.submit(_answer_chunk, items, key=f"fastpld-batch-{self._token}-{next(self._n)}",
                                   pure=False, retries=self._retries)

    def wait(self, handles):
        self._distributed.wait(handles, return_when="FIRST_COMPLETED")
        out = []
        for f in handles:
            if not f.done():
                continue
            try:
                out.append((f, f.result(), None))
            except Exception as exc:  # KilledWorker, a lost scheduler, ...: the chunk is retried alone
                out.append((f, None, exc))
        return out

    def close(self, pending=()):
        if pending:
            self._client.cancel(list(pending))
        if self._owned:
            self._client.close()


def _default_workers():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _dask_client(client):
    """``client`` as a ``distributed.Client`` and whether we made it (an address string)."""
    try:
        import distributed
    except ImportError:
        raise ImportError("running a batch on Dask needs dask.distributed: pip install 'fastpld[dask]'") from None
    if isinstance(client, str):
        return distributed.Client(client), True
    if not isinstance(client, distributed.Client):
        raise ValueError(f"client must be a dask.distributed.Client or a scheduler address, got {client!r}")
    return client, False


# --------------------------------------------------------------------------------------
# The batch loop
# --------------------------------------------------------------------------------------
def _chunks(window, chunk_size):
    """Group ``[(index, question, key)]`` by key (first appearance order) and pack the groups.

    A group (questions sharing one composition) is never split; a chunk holds up to
    ``chunk_size`` groups.
    """
    groups = {}
    for index, question, key in window:
        groups.setdefault(key if key is not None else ("single", index), []).append((index, question))
    out, cur, n = [], [], 0
    for items in groups.values():
        cur.extend(items)
        n += 1
        if n >= chunk_size:
            out.append(cur)
            cur, n = [], 0
    if cur:
        out.append(cur)
    return out


def run(questions: Iterable, *, client=None, workers: int | None = None, serial: bool = False,
        ordered: bool = True, chunk_size: int | None = None, progress: bool = False, retries: int = 2,
        mp_context=None, threads: int = 1) -> Iterator[dict]:
    """Answer many questions; yield one record per question.

    Parameters
    ----------
    questions : iterable of dict
        Questions (see :mod:`fastpld.batch`), read lazily (a generator over a large file is fine).
    client : dask.distributed.Client or str, optional
        Run on this Dask cluster (or on a new client of this scheduler address, closed at the end).
        Workers need fastpld installed.  Default: local processes.
    workers : int, optional
        Local worker processes (default: the CPUs this process may use).  Ignored with ``client``.
    serial : bool
        Answer in this process, one chunk after another (no workers).
    ordered : bool
        ``True``: records in input order; ``False``: as they complete (each exactly once).
    chunk_size : int, optional
        Distinct compositions per chunk sent to a worker (questions sharing a composition
        travel together).  Default: from the number of questions and workers, at most 32.
    progress : bool
        Show a progress bar on stderr (needs ``tqdm``).
    retries : int
        Dask: how often a chunk whose task raised is resubmitted (``Client.submit(retries=)``);
        a chunk whose worker died is resubmitted by the scheduler (its ``allowed-failures``
        setting).  Either way, questions of a chunk that still failed are then asked again one
        at a time with nothing else running; only a question that fails this way too gets an
        error record.
    mp_context : str or multiprocessing context, optional
        Start method of local workers.  Default: ``"forkserver"`` where the platform has it, with
        fastpld and what it imports preloaded in the fork server (each worker then starts by a fork
        instead of importing them: ~1.3 s of CPU per worker), else ``"spawn"``.  ``"fork"`` works on
        Linux too (fastpld restarts its thread pool in a forked child).
    threads : int
        ``FASTPLD_NUM_THREADS`` of local worker processes (see :func:`fastpld.default_threads`);
        Dask workers keep their own environment (e.g. ``LocalCluster(env={"FASTPLD_NUM_THREADS": "1"})``).

    Yields
    ------
    dict
        One record per question (keys :data:`RECORD_FIELDS`), bitwise equal to
        :func:`answer` on that question apart from ``time`` and ``worker``.

    Raises
    ------
    ValueError
        For bad arguments (before any work starts).
    ImportError
        ``client`` given but dask.distributed (``pip install 'fastpld[dask]'``) or
        ``progress=True`` but tqdm is not installed.
    """
    if isinstance(questions, (str, bytes, Mapping)) or not isinstance(questions, Iterable):
        raise ValueError(f"questions must be an iterable of questions (dicts), got {type(questions).__name__}")
    if workers is not None:
        workers = V.positive_int("workers", workers)
    if chunk_size is not None:
        chunk_size = V.positive_int("chunk_size", chunk_size)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
    threads = V.positive_int("threads", threads)
    if serial and client is not None:
        raise ValueError("give either serial=True or client, not both")
    if isinstance(mp_context, str) and mp_context not in multiprocessing.get_all_start_methods() or (
            mp_context is not None and not isinstance(mp_context, (str, multiprocessing.context.BaseContext))):
        raise ValueError(f"mp_context must be one of {multiprocessing.get_all_start_methods()}, got {mp_context!r}")
    bar = None
    if progress:
        try:
            import tqdm
        except ImportError:
            raise ImportError("progress=True needs tqdm: pip install tqdm") from None
        bar = tqdm.tqdm
    dask_client = None
    if client is not None:
        dask_client = _dask_client(client)  # ImportError / ValueError now, not at the first next()
    total = len(questions) if isinstance(questions, Sequence) else None
    return _stream(questions, total, dask_client, workers, serial, ordered, chunk_size, bar, retries, mp_context,
                   threads)


def _stream(questions, total, dask_client, workers, serial, ordered, chunk_size, bar, retries, mp_context, threads):
    if serial:
        driver = _Serial()
    elif dask_client is not None:
        driver = _Dask(dask_client[0], retries, dask_client[1])
    else:
        driver = _Local(workers or _default_workers(), mp_context, threads)
    if chunk_size is None:
        # ~16 chunks per worker when the size is known: balanced ends, and chunks long enough
        # that shipping them costs little next to answering them
        chunk_size = 8 if total is None else max(1, min(32, math.ceil(total / (16 * driver.slots))))
    window = chunk_size * driver.slots  # questions read, grouped and submitted at once
    max_inflight = 3 * driver.slots if not serial else 1
    items = enumerate(questions)
    inflight = {}  # handle -> (items, isolated, attempt)
    suspects = deque()  # questions of chunks whose worker died, to be asked again one at a time
    ready = {}  # index -> record, not yet yielded
    next_out = 0  # ordered: the next index to yield
    read = 0  # questions read so far
    exhausted = False
    pbar = bar(total=total, unit="q", desc="fastpld batch", smoothing=0.05) if bar is not None else None
    try:
        while True:
            if suspects:
                # isolation: one question, nothing else running, so a failure is its own
                if not inflight:
                    item = suspects.popleft()
                    inflight[driver.submit([item])] = ([item], True, 0)
            else:
                # bounded look-ahead: the ordered buffer must not grow without limit behind a slow chunk
                while (not exhausted and len(inflight) < max_inflight
                       and (not ordered or read - next_out < 64 * window)):
                    block = list(itertools.islice(items, window))
                    read += len(block)
                    if len(block) < window:
                        exhausted = True
                    keyed = []
                    for index, question in block:
                        try:
                            keyed.append((index, question, parse_question(question).key))
                        except Exception:  # answered (as its error record) where it is cheap: here
                            ready[index] = _answer(index, question)
                            if pbar is not None:
                                pbar.update(1)
                    for chunk in _chunks(keyed, chunk_size):
                        inflight[driver.submit(chunk)] = (chunk, False, 0)
                    if not block:
                        break
            if inflight:
                for h, records, exc in driver.wait(list(inflight)):
                    chunk, isolated, attempt = inflight.pop(h)
                    if exc is None:
                        for rec in records:
                            ready[rec["index"]] = rec
                        if pbar is not None:
                            pbar.update(len(records))
                    elif not isolated and attempt < driver.resubmit:
                        # a worker died: most often not this chunk's fault (killed, out of memory); again once
                        inflight[driver.submit(chunk)] = (chunk, False, attempt + 1)
                    elif isolated:
                        index, question = chunk[0]
                        ready[index] = _record(index, _safe_id(question), question.get("ask"),
                                               error=f"the worker died answering this question alone "
                                                     f"({type(exc).__name__}: {exc})",
                                               error_type=type(exc).__name__, time=None, worker=None)
                        if pbar is not None:
                            pbar.update(1)
                    else:
                        suspects.extend(chunk)
            if ordered:
                while next_out in ready:
                    yield ready.pop(next_out)
                    next_out += 1
            else:
                while ready:
                    yield ready.pop(next(iter(ready)))
            if exhausted and not inflight and not suspects:
                break
        # every question read has been yielded exactly once
        assert not ready, f"records left unyielded: {sorted(ready)[:5]}"
    finally:
        if pbar is not None:
            pbar.close()
        if isinstance(driver, _Dask):
            driver.close(pending=list(inflight))
        else:
            driver.close()


def answer_many(questions: Iterable, **kwargs) -> list[dict]:
    """All the records of :func:`run` as a list (in input order unless ``ordered=False``).

    Parameters
    ----------
    questions : iterable of dict
        Questions (see :mod:`fastpld.batch`).
    **kwargs
        Options of :func:`run` (``client``, ``workers``, ``serial``, ``progress``, ...).

    Returns
    -------
    list of dict
        One record per question.
    """
    return list(run(questions, **kwargs))
