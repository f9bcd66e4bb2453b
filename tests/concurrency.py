"""Requests released together: each on its own thread and database connection (as the web
server's threads would), started by one threading.Barrier."""

from __future__ import annotations

import threading
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
    answers: list[tuple[int, Any]] = []
    for result in _run_at_once(calls, timeout=timeout):
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
