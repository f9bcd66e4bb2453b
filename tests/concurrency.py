"""Requests released together: each on its own thread and database connection (as the web
server's threads would), started by one threading.Barrier."""

from __future__ import annotations

import threading

from django.db import connection
from rest_framework.test import APIClient


def at_once(calls, *, timeout: float = 120):
    """Runs each call(client) on its own thread, released together; [(status, json|exc)] in order."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def worker(index, call):
        try:
            client = APIClient()
            barrier.wait(timeout=30)
            response = call(client)
            try:
                body = response.json()
            except ValueError:
                body = response.content[:300]
            results[index] = (response.status_code, body)
        except Exception as exc:  # the test client re-raises a view's exception: that is a 500
            results[index] = (500, repr(exc)[:500])
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return results
