"""Thin Celery wrappers around apps.knowledge.ingest, rebuild and watchdog. Each takes ids and is safe to run twice.

`task_route` (settings.CELERY_TASK_ROUTES) sends large documents and rebuilds to their own queue,
which its own worker consumes: a small upload never waits behind them for a free process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from billiard.einfo import ExceptionWithTraceback
from billiard.exceptions import WorkerLostError
from celery import shared_task
from celery.signals import worker_ready
from celery.worker import state as worker_state
from celery.worker.request import Request
from django.conf import settings
from django.db import DatabaseError, connection

from apps.knowledge import ingest, rebuild, watchdog
from apps.knowledge.dispatch import DOCUMENT_INGEST, KB_REBUILD, WATCHDOG, document_queue

__all__ = ["DOCUMENT_INGEST", "KB_REBUILD", "PipelineRequest", "document_ingest_task", "document_queue",
           "kb_rebuild_task", "task_route", "watchdog_task"]

logger = logging.getLogger("bailinghub.knowledge")


class PipelineRequest(Request):
    """A pipeline task as the worker's main process handles it. When the child process running it
    dies (kill -9, out of memory) Celery hands its message out again at once, and the new task met
    the dead run's lease, live for up to KNOWLEDGE_HEARTBEAT_STALE_SECONDS more, and waited it
    out; when the child is killed at the hard time limit, the message is acknowledged and the work
    was left to the lease. The main process now gives the lease back, or fails the work naming
    the limit (apps.knowledge.watchdog.pipeline_run_lost, pipeline_run_killed)."""

    def on_failure(self, exc_info, send_failed_event=True, return_ok=False):
        try:
            if self._child_lost(exc_info.exception):
                self._tell(watchdog.pipeline_run_lost)  # before Celery hands the message out again
        finally:
            super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)

    def on_timeout(self, soft, timeout):
        try:
            if not soft and not worker_state.should_terminate:
                self._tell(lambda **task: watchdog.pipeline_run_killed(**task, seconds=timeout))
        finally:
            super().on_timeout(soft, timeout)

    def _child_lost(self, exc: BaseException) -> bool:
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        if isinstance(exc, WorkerLostError):
            return True
        # billiard may report a child's exit before it is gone: Celery takes it for a lost worker
        # unless it cancelled or revoked the task itself (Request.on_failure).
        return isinstance(exc, (SystemExit, KeyboardInterrupt)) and not (
            getattr(self, "_already_cancelled", False) or getattr(self, "_already_revoked", False))

    def _tell(self, handler: Callable[..., bool]) -> None:
        if not self.args:
            return
        try:
            handler(task_name=self.name, object_id=self.args[0], task_id=self.id)
        except Exception:  # whatever it is, Celery's own handling of the task goes on; the lease runs out as before
            logger.warning("Could not give back what %s[%s] held; the watchdog hands it over once its lease runs "
                           "out.", self.name, self.id, exc_info=True)
        finally:
            connection.close()  # the main process holds no connection between tasks (children fork from it)


@shared_task(name=DOCUMENT_INGEST, ignore_result=True, bind=True, Request=PipelineRequest)
def document_ingest_task(self, document_id: str, run_token: str | None = None, connection_lost: bool = False) -> str:
    return ingest.document_ingest(document_id=document_id, run_token=run_token, task_id=self.request.id,
                                  connection_lost=connection_lost)


@shared_task(name=KB_REBUILD, ignore_result=True, bind=True, Request=PipelineRequest)
def kb_rebuild_task(self, generation_id: str, run_token: str | None = None, connection_lost: bool = False) -> str:
    return rebuild.generation_build(generation_id=generation_id, run_token=run_token, task_id=self.request.id,
                                   connection_lost=connection_lost)


@shared_task(name=WATCHDOG, ignore_result=True)
def watchdog_task() -> dict:
    return watchdog.knowledge_watchdog()


def _watchdog_run(when: str) -> None:
    try:
        outcome = watchdog.knowledge_watchdog()
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


def task_route(name, args, kwargs, options, task=None, **kw) -> dict | None:
    """Celery router. A queue given to the send (KNOWLEDGE_TASK_QUEUE, or run_send_on's) wins, and
    then nothing is read: Celery asks the router all the same, and a continuation sent because the
    database is down waited for a connection here and logged that its document went to the default
    queue, while it went to the queue it named."""
    if options.get("queue"):
        return None
    if name == KB_REBUILD:
        return {"queue": settings.KNOWLEDGE_LARGE_TASK_QUEUE}
    if name == DOCUMENT_INGEST and args:
        from apps.knowledge.models import Document

        try:
            size = Document.objects.filter(pk=args[0]).values_list("size", flat=True).first()
        except DatabaseError:  # a send while the database is down (run_send_on names its queue): the default
            logger.warning("Could not read the size of document %s to route it; it goes to the default queue.",
                           args[0])
            return None
        queue = document_queue(size=size) if size is not None else None
        return {"queue": queue} if queue else None
    return None
