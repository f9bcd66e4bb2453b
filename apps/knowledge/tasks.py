"""Thin Celery wrappers around apps.knowledge.ingest. Each takes ids and is safe to run twice.

`task_route` (settings.CELERY_TASK_ROUTES) sends large documents and rebuilds to their own queue,
which its own worker consumes: a small upload never waits behind them for a free process.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from apps.knowledge import ingest

DOCUMENT_INGEST = "knowledge.document_ingest"
KB_REBUILD = "knowledge.kb_rebuild"


@shared_task(name=DOCUMENT_INGEST, ignore_result=True)
def document_ingest_task(document_id: str, run_token: str | None = None) -> str:
    return ingest.document_ingest(document_id=document_id, run_token=run_token)


@shared_task(name=KB_REBUILD, ignore_result=True)
def kb_rebuild_task(generation_id: str, run_token: str | None = None) -> str:
    return ingest.generation_build(generation_id=generation_id, run_token=run_token)


@shared_task(name="knowledge.watchdog", ignore_result=True)
def watchdog_task() -> dict:
    return ingest.knowledge_watchdog()


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
