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


def _caller_limits() -> list[str] | None:
    """The caller's limits on waiting, for the work done on its behalf: those of the
    `dblimits.limited` block it is in (apps.runtime.knowledge sets them around agent searches;
    read without a round trip), or None outside one: the server's defaults, which every
    connection of the process starts with."""
    return dblimits.in_force()


# On the worker's connection: (the driver's connection, the limits set on it). The same limits on
# the same connection are not set again: a round trip on the vector channel's path saved (~1–2 ms
# at 100k chunks, the caller's thread busy beside it).
_LIMITS_SET = "bailing_worker_limits"


def _take_limits(limits: list[str] | None) -> bool:
    """Give this thread's connection the caller's limits (None: the server's defaults) unless it
    has them. Returns whether a statement ran: it is also the connection's health check (Django's
    own, CONN_HEALTH_CHECKS, spent a round trip of its own before it on every search: the vector
    walk started ~2 ms later, p50, at 100k chunks: bench/README.md, stop 22). A connection that
    fails it (the server restarted, the backend was terminated) is opened again, once."""
    connection.close_if_unusable_or_obsolete()  # the maximum age, errors, autocommit left off
    # Django's flag (4.1+) for "checked since the last close_if_unusable_or_obsolete".
    connection.health_check_done = True  # type: ignore[attr-defined]
    held = getattr(connection, _LIMITS_SET, None)
    if connection.connection is not None and held is not None and held[0] is connection.connection \
            and held[1] == limits:
        return False
    try:
        _set_limits(limits)
    except (OperationalError, InterfaceError):
        connection.close()
        _set_limits(limits)
    setattr(connection, _LIMITS_SET, (connection.connection, limits))
    return True


def _set_limits(limits: list[str] | None) -> None:
    if limits is None:
        dblimits.reset()
    else:
        dblimits.apply(limits)


# On the worker's connection: (the driver's connection, {setting: value} set on its session).
_SESSION_SET = "bailing_worker_session"
_worker = threading.local()


def on_worker() -> bool:
    """Whether this thread is the search worker, running a job on its own connection."""
    return getattr(_worker, "running", False)


def session_settings(values: dict[str, str]) -> None:
    """On the worker's own connection (on_worker), outside a transaction: give its session these
    settings unless it has them, in one statement. They stay for the worker's next jobs, which
    set the same ones (the vector channel's walk settings): a search spends no round trip on them,
    and its walk no transaction (BEGIN, SET LOCAL, COMMIT: three round trips on the critical
    path)."""
    held = getattr(connection, _SESSION_SET, None)
    if connection.connection is not None and held is not None and held[0] is connection.connection \
            and held[1] == values:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join("set_config(%s, %s, false)" for _ in values),
                       [item for pair in values.items() for item in pair])
    setattr(connection, _SESSION_SET, (connection.connection, dict(values)))


def _on_own_connection(fn: Callable, args: tuple, kwargs: dict, limits: list[str] | None) -> Any:
    _worker.running = True
    try:
        checked = _take_limits(limits)
        try:
            return fn(*args, **kwargs)
        except (OperationalError, InterfaceError):
            if checked or connection.is_usable():
                raise  # the work's own failure (a timeout, say), on a connection that works
            # Reused without a statement first, it had died since (a server restart, a terminated
            # backend): the work runs again, once, on a new connection.
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
    itself (inside a transaction, disabled, or the worker busy with another search)."""
    if not enabled() or not _free.acquire(blocking=False):
        return None
    try:
        return _pool().submit(_on_own_connection, fn, args, kwargs, _caller_limits())
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
