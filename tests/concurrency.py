"""Requests released together: each on its own thread and database connection (as the web
server's threads would), started by one threading.Barrier."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection
from django.db.models.signals import pre_save
from rest_framework.test import APIClient


def _run_at_once(calls: Sequence[Callable[[APIClient], Any]], *, timeout: float) -> list[Any]:
    """Each call(client) on its own thread, released together: its result, or the exception it
    raised (the test client re-raises a view's exception), in order."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def worker(index: int, call: Callable[[APIClient], Any]) -> None:
        try:
            client = APIClient()
            barrier.wait(timeout=30)
            results[index] = call(client)
        except Exception as exc:
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(thread.is_alive() for thread in threads), f"a request did not finish in {timeout} s"
    return results


def responses_at_once(calls: Sequence[Callable[[APIClient], Any]], *, timeout: float = 120) -> list[Any]:
    """The responses of calls released together; any exception fails the test."""
    results = _run_at_once(calls, timeout=timeout)
    errors = [result for result in results if isinstance(result, Exception)]
    assert not errors, errors
    return results


def at_once(calls: Sequence[Callable[[APIClient], Any]], *, timeout: float = 120) -> list[tuple[int, Any]]:
    """[(status, json or the first bytes)] of calls released together; a view that raised counts
    as a 500 with its exception."""
    return _answers(_run_at_once(calls, timeout=timeout))


def _answers(results: Sequence[Any]) -> list[tuple[int, Any]]:
    answers: list[tuple[int, Any]] = []
    for result in results:
        if isinstance(result, Exception):
            answers.append((500, repr(result)[:500]))
            continue
        try:
            body = result.json()
        except ValueError:
            body = result.content[:300]
        answers.append((result.status_code, body))
    return answers


def at_once_past_the_check(calls: Sequence[Callable[[APIClient], Any]], model: type) -> list[tuple[int, Any]]:
    """at_once, each call held just before its `model` row's INSERT or UPDATE until the others have
    come that far too: all have passed the service's own look for a unique value."""
    meet = threading.Barrier(len(calls), timeout=30)

    def receiver(sender: Any, **kwargs: Any) -> None:
        meet.wait()
    pre_save.connect(receiver, sender=model, weak=False)
    try:
        return at_once(calls)
    finally:
        pre_save.disconnect(receiver, sender=model)


def _advisory_lock_awaited() -> bool:
    with connection.cursor() as cursor:
        # This test's database only: a test run beside it on another database takes locks of its own.
        cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                       "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))")
        return bool(cursor.fetchone()[0])


def second_waits_for_the_first(first: Callable[[APIClient], Any], second: Callable[[APIClient], Any],
                               model: type, *, timeout: float = 60) -> list[tuple[int, Any]]:
    """[(status, json)] of `first` and `second` (second_responses_after_waiting)."""
    return _answers(_second_waits(first, second, model, timeout=timeout))


def second_responses_after_waiting(first: Callable[[APIClient], Any], second: Callable[[APIClient], Any],
                                   model: type, *, timeout: float = 60) -> list[Any]:
    """The responses of `first` and `second`: `first` held just before its `model` row's INSERT or
    UPDATE (past its own look for a unique value, inside its transaction), `second` started
    meanwhile, and `first` let go only once `second` waits for an advisory lock (pg_locks) — the
    one `first` holds. Fails when `second` never waits for one (it would have raced past the look),
    or either raised."""
    results = _second_waits(first, second, model, timeout=timeout)
    errors = [result for result in results if isinstance(result, Exception)]
    assert not errors, errors
    return results


def _second_waits(first: Callable[[APIClient], Any], second: Callable[[APIClient], Any], model: type, *,
                  timeout: float) -> list[Any]:
    held: list[int] = []
    reached, release = threading.Event(), threading.Event()
    results: list[Any] = [None, None]

    def receiver(sender: Any, **kwargs: Any) -> None:
        if held and threading.get_ident() == held[0]:
            reached.set()
            assert release.wait(timeout)

    def worker(index: int, call: Callable[[APIClient], Any]) -> None:
        try:
            if index == 0:
                held.append(threading.get_ident())
            results[index] = call(APIClient())
        except Exception as exc:
            results[index] = exc
        finally:
            connection.close()

    pre_save.connect(receiver, sender=model, weak=False)
    threads = [threading.Thread(target=worker, args=(i, call)) for i, call in enumerate((first, second))]
    try:
        threads[0].start()
        assert reached.wait(timeout), "the first request never came to its write"
        threads[1].start()
        deadline = time.monotonic() + timeout
        while not _advisory_lock_awaited() and threads[1].is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        waited = _advisory_lock_awaited()
    finally:
        release.set()
        for thread in threads:
            thread.join(timeout=timeout)
        pre_save.disconnect(receiver, sender=model)
    assert not any(thread.is_alive() for thread in threads), f"a request did not finish in {timeout} s"
    assert waited, f"the second request did not wait for the first's lock: {_answers(results)}"
    return results
