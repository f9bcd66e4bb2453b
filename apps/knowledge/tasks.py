"""Thin Celery wrappers around apps.knowledge.ingest. Each takes ids and is safe to run twice.

`task_route` (settings.CELERY_TASK_ROUTES) sends large documents and rebuilds to their own queue,
which its own worker consumes: a small upload never waits behind them for a free process.
"""

from __future__ import annotations

import logging
import threading

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import DatabaseError, connection

from apps.knowledge import ingest
from apps.knowledge.dispatch import DOCUMENT_INGEST, KB_REBUILD, WATCHDOG

__all__ = ["DOCUMENT_INGEST", "KB_REBUILD", "document_ingest_task", "document_queue", "kb_rebuild_task",
           "task_route", "watchdog_task"]

logger = logging.getLogger("bailinghub.knowledge")


@shared_task(name=DOCUMENT_INGEST, ignore_result=True)
def document_ingest_task(document_id: str, run_token: str | None = None) -> str:
    return ingest.document_ingest(document_id=document_id, run_token=run_token)


@shared_task(name=KB_REBUILD, ignore_result=True)
def kb_rebuild_task(generation_id: str, run_token: str | None = None) -> str:
    return ingest.generation_build(generation_id=generation_id, run_token=run_token)


@shared_task(name=WATCHDOG, ignore_result=True)
def watchdog_task() -> dict:
    return ingest.knowledge_watchdog()


def _watchdog_run(when: str) -> None:
    try:
        outcome = ingest.knowledge_watchdog()
    except DatabaseError:
        logger.warning("The knowledge watchdog could not run %s; it will try again.", when, exc_info=True)
        return
    finally:
        connection.close()  # this thread's own connection; never held between runs
    if outcome.get("requeued") or outcome.get("failed"):
        logger.info("Knowledge watchdog %s: %s", when, outcome)


class WatchdogTimer(threading.Thread):
    """Runs the watchdog every KNOWLEDGE_WATCHDOG_INTERVAL_SECONDS inside a worker's main process,
    so stale work is handed over while any worker lives — with beat dead too. The watchdog only
    reads and writes rows (it never embeds), so the pool's parent may run it."""

    def __init__(self, interval: float):
        super().__init__(name="knowledge-watchdog", daemon=True)
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            _watchdog_run("on its timer")

    def stop(self) -> None:
        self.stopped.set()


@worker_ready.connect(dispatch_uid="knowledge.watchdog_on_worker_start")
def watchdog_on_worker_start(**_kwargs) -> WatchdogTimer:
    """A worker starting runs the watchdog once — with beat dead (or not started yet), work that a
    dead worker held, or whose message a broker restart lost, is handed over all the same — and
    then on its own timer for as long as it runs."""
    _watchdog_run("at worker start")
    timer = WatchdogTimer(settings.KNOWLEDGE_WATCHDOG_INTERVAL_SECONDS)
    timer.start()
    return timer


def document_queue(*, size: int) -> str | None:
    """The queue a document of `size` bytes is ingested on: the large-document queue from
    KNOWLEDGE_LARGE_DOCUMENT_BYTES up, else None (the default queue)."""
    if size >= settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES:
        return settings.KNOWLEDGE_LARGE_TASK_QUEUE
    return None


def task_route(name, args, kwargs, options, task=None, **kw) -> dict | None:
    """Celery router. A queue given to apply_async (KNOWLEDGE_TASK_QUEUE) still wins."""
    if name == KB_REBUILD:
        return {"queue": settings.KNOWLEDGE_LARGE_TASK_QUEUE}
    if name == DOCUMENT_INGEST and args:
        from apps.knowledge.models import Document

        size = Document.objects.filter(pk=args[0]).values_list("size", flat=True).first()
        queue = document_queue(size=size) if size is not None else None
        return {"queue": queue} if queue else None
    return None
