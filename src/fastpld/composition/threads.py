"""The worker threads: the second direction of a composition on a process-wide pool.

A composition has at most two independent parts (the add and remove directions); the second runs on
a worker thread when a compute slot is free (:mod:`fastpld.resources`), else on the calling thread.
The results do not depend on the threading.
"""
from __future__ import annotations

import concurrent.futures
import os
import threading

from .. import _validation as V
from .. import resources


_PARALLEL_MIN_US = 2000.0  # predicted cost (µs) below which the second direction stays on the calling thread


_pool_lock = threading.Lock()
_pool: list = [None, None]  # (executor, pid), made on first use
_POOL_MAX = 64  # worker threads at most (each job holds a compute slot: as many run as resources.thread_limit)


def _after_fork_in_child():
    """A forked child's pool starts afresh (the parent's threads do not exist in it)."""
    # the parent's lock may have been held by another thread at the fork, and the executor's
    # threads do not exist here: start afresh
    global _pool_lock
    _pool_lock = threading.Lock()
    _pool[:] = [None, None]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def default_threads() -> int:
    """Threads a composition uses when ``compose`` is not told (``threads=None``).

    The environment variable ``FASTPLD_NUM_THREADS`` (a positive integer) sets it for every
    caller, calibration and the accountant included (``1``: everything on the calling thread,
    e.g. in a server that runs many compositions at once); otherwise 2 when this process may run
    on more than one CPU, else 1.  A composition has at most two independent parts (the add and
    remove directions of an asymmetric mechanism such as the subsampled Gaussian), so more
    threads would idle.  The second thread is used only while fewer than
    :func:`fastpld.thread_limit` threads compose in the whole process.
    """
    env = os.environ.get("FASTPLD_NUM_THREADS")
    if env is not None and env.strip():
        try:
            return V.positive_int("FASTPLD_NUM_THREADS", int(env))
        except ValueError:
            raise ValueError(f"FASTPLD_NUM_THREADS must be a positive integer, got {env!r}") from None
    return 2 if resources._affinity() > 1 else 1


def _try_submit(fn):
    """``fn`` started on a worker thread (a Future) if a compute slot is free
    (:func:`fastpld.resources.try_acquire_slot`), else ``None``: under a server's load a composition
    runs on its own thread instead of oversubscribing the cores.

    The worker threads live as long as the process; the job holds the slot (and uses its
    workspace: plans and scratch arrays) until it ends.
    """
    ws = resources.try_acquire_slot()
    if ws is None:
        return None
    with _pool_lock:
        # (a forked child inherits the executor but not its threads: work sent there would never
        # run, so a child makes its own pool)
        if _pool[0] is None or _pool[1] != os.getpid():
            _pool[0] = concurrent.futures.ThreadPoolExecutor(max_workers=_POOL_MAX, thread_name_prefix="fastpld")
            _pool[1] = os.getpid()
    executor = _pool[0]
    try:
        return executor.submit(resources.run_in_slot, ws, fn)
    except RuntimeError:  # interpreter shutting down
        resources._slots.release(ws)
        return None


def _run_jobs(jobs, threads, predicted_us):
    """Results of ``jobs`` (callables), the first on a worker thread when that pays (:func:`_try_submit`).

    Every job finishes before this returns or raises (no work outlives the call), and the first
    job's error wins, as when they run in turn; the results do not depend on the threading.
    """
    fut = None
    if len(jobs) > 1 and threads > 1 and predicted_us >= _PARALLEL_MIN_US:
        fut = _try_submit(jobs[0])
    if fut is None:
        return [job() for job in jobs]
    try:
        rest = [job() for job in jobs[1:]]
    finally:
        head = fut.result()  # waits; its error (if any) takes precedence, as if it had run first
    return [head] + rest


def _run_shared(tasks, threads, predicted_us):
    """Results of ``tasks`` (callables, in this order), the calling thread and one worker each taking the next
    one left whenever it is free (:func:`_try_submit`; only where that pays, as in :func:`_run_jobs`).

    For more tasks than threads: the dominance certificate's three chains (two dominating, one dominated) on
    two threads end when the shorter dominating chain and the dominated one do, not when one thread has run
    two of them.  No task outlives the call; the error of the first task (in this order) that failed wins, as
    when they run in turn (shared out, those after it have run too); the results do not depend on the
    threading (each task is a pure function of its arguments).
    """
    if len(tasks) < 2 or threads < 2 or predicted_us < _PARALLEL_MIN_US:
        return [t() for t in tasks]
    lock = threading.Lock()
    nxt = [0]
    out = [None] * len(tasks)
    err = [None] * len(tasks)

    def runner():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(tasks):
                return
            try:
                out[i] = tasks[i]()
            except Exception as e:  # (raised below in the tasks' order)
                err[i] = e

    fut = _try_submit(runner)
    try:
        runner()
    finally:
        if fut is not None:
            fut.result()
    for e in err:
        if e is not None:
            raise e
    return out
