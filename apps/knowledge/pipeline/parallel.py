"""Running one search channel beside the other, on a second database connection.

A hybrid search waits on two independent pieces of work (the keyword channel: SQL and Python
scoring; the query's embedding, then the vector channel: an HNSW or exact scan inside PostgreSQL).
One worker thread per process runs the embedding and the vector channel while the calling thread
runs the keyword channel; the thread keeps its own Django connection open between searches (Django
connections are per thread).

Only when the caller is not inside a transaction: another connection cannot see the caller's
uncommitted writes, so inside `atomic` (a turn's transaction, a test's) the channels run one after
the other, exactly as before. The results are the same either way; only the wall time differs.
The worker's SQL runs under the lock and statement timeouts of the caller's `dblimits.limited`
block (the server's defaults outside one); an HTTP embedder's call is
bounded by its own timeout and retries, and while it runs, other searches of this process find the
worker busy and run their channels themselves.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from apps.core import dblimits

_lock = threading.Lock()
# One job at a time: a search that finds the worker busy (concurrent requests in this process)
# runs its channels itself rather than queue behind another search.
_free = threading.Semaphore(1)
_executor: ThreadPoolExecutor | None = None
_executor_pid: int | None = None


def _pool() -> ThreadPoolExecutor:
    """The process's executor (a fork — Celery prefork, gunicorn — gets its own)."""
    global _executor, _executor_pid
    with _lock:
        if _executor is None or _executor_pid != os.getpid():
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bailinghub-search")
            _executor_pid = os.getpid()
        return _executor


# Settings a worker connection's session keeps between jobs, each kind under its own attribute:
# (the driver's connection, the values set on it). The same values on the same driver connection
# are not set again (a reconnect is a new driver connection). Only the worker's own jobs change
# its session, and only through these two (a job must not open a `dblimits.limited` block: its
# reset would leave the limits' record wrong).
_LIMITS_SET = "bailing_worker_limits"
_SESSION_SET = "bailing_worker_session"


def _held(attribute: str, values: Any) -> bool:
    held = getattr(connection, attribute, None)
    return (connection.connection is not None and held is not None and held[0] is connection.connection
            and held[1] == values)


def _take_limits(limits: list[str] | None) -> None:
    """Give this thread's connection the caller's limits, those of its `dblimits.limited` block
    (None outside one: the server's defaults), unless it has them: in one statement, which saved
    the vector channel's path a round trip (~1–2 ms at 100k chunks, the caller's thread busy
    beside it). No health check of its own either (Django's, CONN_HEALTH_CHECKS, cost another
    round trip: bench/README.md, stop 22): a connection that died while the worker was idle is
    found by the job's first statement (_on_own_connection). One that fails the limits statement
    is opened again, once."""
    connection.close_if_unusable_or_obsolete()  # the maximum age, errors, autocommit left off
    # Django's flag (4.1+) for "checked since the last close_if_unusable_or_obsolete".
    connection.health_check_done = True  # type: ignore[attr-defined]
    if _held(_LIMITS_SET, limits):
        return
    try:
        _set_limits(limits)
    except (OperationalError, InterfaceError):
        connection.close()
        _set_limits(limits)
    setattr(connection, _LIMITS_SET, (connection.connection, limits))


def _set_limits(limits: list[str] | None) -> None:
    if limits is None:
        dblimits.reset()
    else:
        dblimits.apply(limits)


_worker = threading.local()


def on_worker() -> bool:
    """Whether this thread is the search worker, running a job on its own connection."""
    return getattr(_worker, "running", False)


def session_settings(values: dict[str, str]) -> None:
    """On the worker's own connection, outside a transaction: give its session these settings
    unless it has them, in one statement. They stay for the worker's next jobs, which set the same
    ones (the vector channel's walk settings): a search spends no round trip on them, and its walk
    no transaction (BEGIN, SET LOCAL, COMMIT: three round trips on the critical path)."""
    if not on_worker() or connection.in_atomic_block:
        raise RuntimeError("session settings are for the search worker's own connection, outside a transaction")
    if _held(_SESSION_SET, values):
        return
    dblimits.set_settings(values)
    setattr(connection, _SESSION_SET, (connection.connection, dict(values)))


# A statement that fails this soon after it was sent never ran: the connection was gone already (a
# closed socket answers at once; a statement killed while it ran had been out longer: a timeout or
# an operator's kill comes hundreds of milliseconds in). 10 ms was too tight on a loaded 2-core
# machine, where the answer of a terminated backend took longer to be read (a fresh clone's run
# beside other tests failed the dead-connection search test); a search's statements only read, so
# one killed within this time and run again costs a repeat, not a second write.
_DEAD_ON_ARRIVAL_S = 0.1


class _FirstStatement:
    """Watches a job's statements (connection.execute_wrapper): whether one completed, and how long
    the one that failed had been out."""

    def __init__(self) -> None:
        self.completed = 0
        self.failed_after: float | None = None

    def __call__(self, execute: Callable, sql: str, params: Any, many: bool, context: dict) -> Any:
        sent = time.perf_counter()
        try:
            result = execute(sql, params, many, context)
        except Exception:
            self.failed_after = time.perf_counter() - sent
            raise
        self.completed += 1
        return result

    @property
    def died_before_it_ran(self) -> bool:
        return self.completed == 0 and self.failed_after is not None and self.failed_after < _DEAD_ON_ARRIVAL_S


def _on_own_connection(fn: Callable, args: tuple, kwargs: dict, limits: list[str] | None) -> Any:
    _worker.running = True
    try:
        _take_limits(limits)
        watch = _FirstStatement()
        try:
            with connection.execute_wrapper(watch):
                return fn(*args, **kwargs)
        except (OperationalError, InterfaceError):
            # Only a connection that had died while the worker was idle (a server restart, a
            # terminated backend) is worth another try: the job's first statement failed at once,
            # and the connection is unusable. A timeout, a backend terminated while it ran, or a
            # failure after a statement completed (and may have written) is the job's own error.
            if not watch.died_before_it_ran or connection.is_usable():
                raise
            connection.close()
            _take_limits(limits)
            return fn(*args, **kwargs)
    except Exception:
        connection.close()  # never leave a broken connection for the next search
        raise
    finally:
        _worker.running = False
        _free.release()


def enabled() -> bool:
    return bool(getattr(settings, "KNOWLEDGE_SEARCH_PARALLEL", True)) and not connection.in_atomic_block


def run_beside(fn: Callable, *args: Any, **kwargs: Any) -> Future | None:
    """Start `fn` on the worker thread and return its future, or None when the caller must run it
    itself (inside a transaction, disabled, or the worker busy with another search). `fn` runs a
    second time when its first statement found the worker's kept connection dead (before it did
    anything in the database): what it does before that must bear being done twice."""
    if not enabled() or not _free.acquire(blocking=False):
        return None
    try:
        return _pool().submit(_on_own_connection, fn, args, kwargs, dblimits.in_force())
    except BaseException:
        _free.release()
        raise


def _close_own_connection() -> None:
    connection.close()  # looked up on the worker thread: its own connection


def shutdown() -> None:
    """Close the worker's connection and stop the worker (tests call this before the test
    database is dropped: an open connection would block DROP DATABASE)."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
    if executor is not None and _executor_pid == os.getpid():
        executor.submit(_close_own_connection).result()
        executor.shutdown(wait=True)
