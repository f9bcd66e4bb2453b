"""The one place that hands pipeline work to Celery, after the transaction commits.

Tasks are sent by name, so services and the pipeline (apps.knowledge.ingest) enqueue without
importing apps.knowledge.tasks, which imports the pipeline. If the broker is down or the process
dies before a message is sent, the row keeps its state and the watchdog sends it again once its
lease has run out (apps.knowledge.ingest.knowledge_watchdog).
"""

from __future__ import annotations

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

DOCUMENT_INGEST = "knowledge.document_ingest"
KB_REBUILD = "knowledge.kb_rebuild"
WATCHDOG = "knowledge.watchdog"


def _send(name: str, object_id, *, run_token=None, countdown: float | None = None) -> None:
    options = {"countdown": countdown} if countdown else {}
    # ignore_result: sent by name, Celery cannot know the task ignores its result, and with a Redis
    # result backend it would subscribe this process to the task's result channel — for good (no
    # one reads it), and with Redis down it retries that subscription for 20 s before sending.
    current_app.send_task(name, args=[str(object_id)], kwargs={"run_token": str(run_token) if run_token else None},
                          queue=settings.KNOWLEDGE_TASK_QUEUE, ignore_result=True, **options)


def document_send(document_id, *, run_token=None, countdown: float | None = None) -> None:
    """After commit: (re)run a document's pipeline; with `run_token`, as that run continuing."""
    transaction.on_commit(lambda: _send(DOCUMENT_INGEST, document_id, run_token=run_token, countdown=countdown),
                          robust=True)


def document_enqueue(document_id) -> None:
    """After commit: mark a new (pending) document queued and send it."""
    from apps.knowledge.models import Document

    def send() -> None:
        now = timezone.now()
        Document.objects.filter(pk=document_id, status=Document.Status.PENDING).update(
            status=Document.Status.QUEUED, queued_at=now, heartbeat_at=now
        )
        _send(DOCUMENT_INGEST, document_id)

    transaction.on_commit(send, robust=True)


def generation_send(generation_id, *, run_token=None, countdown: float | None = None) -> None:
    """After commit: (re)run building a generation; with `run_token`, as that run continuing."""
    transaction.on_commit(lambda: _send(KB_REBUILD, generation_id, run_token=run_token, countdown=countdown),
                          robust=True)
