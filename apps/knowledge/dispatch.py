"""The one place that hands pipeline work to Celery, after the transaction commits.

Tasks are sent by name, so services and the pipeline (apps.knowledge.ingest, rebuild, watchdog)
enqueue without importing apps.knowledge.tasks, which imports the pipeline. If the process dies
before a message is sent, the row keeps its state and the watchdog sends it again once its lease
has run out (apps.knowledge.watchdog.knowledge_watchdog); if the broker refuses it, the row's lease is given
back, so the watchdog sends it again at its next pass (a minute, not the lease's five) — for a
queued document, once its queue holds no other message (watchdog.knowledge_watchdog).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app, current_task
from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.core.broker import BROKER_ERRORS
from apps.knowledge.leases import lease_expire

logger = logging.getLogger("bailinghub.knowledge")

DOCUMENT_INGEST = "knowledge.document_ingest"
KB_REBUILD = "knowledge.kb_rebuild"
WATCHDOG = "knowledge.watchdog"


def document_queue(*, size: int) -> str | None:
    """The queue a document of `size` bytes is ingested on: the large-document queue from
    KNOWLEDGE_LARGE_DOCUMENT_BYTES up, else None (the default queue)."""
    if size >= settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES:
        return settings.KNOWLEDGE_LARGE_TASK_QUEUE
    return None


def queue_length(queue: str) -> int | None:
    """How many messages wait on Celery queue `queue` (its Redis list); None when that cannot be
    told (a broker other than Redis, or one that does not answer)."""
    if not str(current_app.conf.broker_url or "").startswith(("redis", "rediss", "redis+socket")):
        return None
    try:
        with current_app.connection_for_read() as connection:
            return int(connection.default_channel.client.llen(queue))
    except BROKER_ERRORS:
        return None


def task_rows(name: str) -> QuerySet[Any]:
    """The rows whose work the pipeline task `name` does while they are in progress."""
    from apps.knowledge.models import Document, IndexGeneration

    if name == DOCUMENT_INGEST:
        return Document.objects.filter(status__in=Document.IN_PROGRESS)
    if name == KB_REBUILD:
        return IndexGeneration.objects.filter(status=IndexGeneration.Status.BUILDING)
    raise ValueError(f"not a pipeline task: {name}")


def _send(name: str, object_id, *, run_token=None, countdown: float | None = None, connection_lost: bool = False,
          queue: str | None = None) -> bool:
    """Send task `name` for `object_id`; False when the broker failed it (the row is then left to
    the watchdog's next pass)."""
    options = {"countdown": countdown} if countdown else {}
    kwargs: dict[str, Any] = {"run_token": str(run_token) if run_token else None}
    if connection_lost:
        kwargs["connection_lost"] = True
    # ignore_result: sent by name, Celery cannot know the task ignores its result, and with a Redis
    # result backend it would subscribe this process to the task's result channel — for good (no
    # one reads it), and with Redis down it retries that subscription for 20 s before sending.
    try:
        current_app.send_task(name, args=[str(object_id)], kwargs=kwargs,
                              queue=queue or settings.KNOWLEDGE_TASK_QUEUE, ignore_result=True, **options)
    except BROKER_ERRORS:  # the broker is down or refused it; anything else is a bug, robust on_commit logs it
        logger.warning("Could not send %s for %s to the task queue; the watchdog sends it again.",
                       name, object_id, exc_info=True)
        _watchdog_next_pass(name, object_id, run_token)
        return False
    return True


def _watchdog_next_pass(name: str, object_id, run_token) -> None:
    """Give the row's lease back: the watchdog sends its work again on its next pass, instead of
    once the lease a live run would hold has run out (the work waited five minutes after the
    broker was back, and the console said no worker was running). Only while the row is held by
    the run this message continued (`run_token`), or by none: a task that found another run's
    lease live and failed to send its retry leaves that run alone (given back, its live lease was
    taken from it, and on its last attempt it was failed as stalled)."""
    try:
        lease_expire(task_rows(name), pk=object_id, held_by=[run_token])
    except DatabaseError:  # the database is down too: the lease runs out as before
        logger.warning("Could not mark %s for the watchdog.", object_id, exc_info=True)


def run_send_on(name: str, object_id, *, run_token, countdown: float) -> None:
    """A run of pipeline task `name` whose database is down sends itself on: at once (on_commit
    would need the database), marked so that its claim counts the lost connection, and on the
    queue this task came from (the router reads the database to choose one)."""
    delivery = getattr(getattr(current_task, "request", None), "delivery_info", None) or {}
    _send(name, object_id, run_token=run_token, countdown=countdown, connection_lost=True,
          queue=settings.KNOWLEDGE_TASK_QUEUE or delivery.get("routing_key"))


def document_send(document_id, *, run_token=None, countdown: float | None = None) -> None:
    """After commit: (re)run a document's pipeline; with `run_token`, as that run continuing."""
    transaction.on_commit(lambda: _send(DOCUMENT_INGEST, document_id, run_token=run_token, countdown=countdown),
                          robust=True)


def documents_enqueue(document_ids: list) -> None:
    """After commit: mark new (pending) documents queued and send each. Once a send fails, the
    others are not tried: against a hung broker each waited its timeouts out (an upload of twenty
    files held its web thread two minutes); they are left to the watchdog's next pass, as the failed
    one is."""
    from apps.knowledge.models import Document

    def send() -> None:
        now = timezone.now()
        Document.objects.filter(pk__in=document_ids, status=Document.Status.PENDING).update(
            status=Document.Status.QUEUED, queued_at=now, heartbeat_at=now
        )
        for index, document_id in enumerate(document_ids):
            if not _send(DOCUMENT_INGEST, document_id):
                for left in document_ids[index + 1:]:
                    _watchdog_next_pass(DOCUMENT_INGEST, left, None)
                if document_ids[index + 1:]:
                    logger.warning("%d more documents of this upload were not sent; the watchdog sends them.",
                                   len(document_ids) - index - 1)
                return

    if document_ids:
        transaction.on_commit(send, robust=True)


def generation_send(generation_id, *, run_token=None, countdown: float | None = None) -> None:
    """After commit: (re)run building a generation; with `run_token`, as that run continuing."""
    transaction.on_commit(lambda: _send(KB_REBUILD, generation_id, run_token=run_token, countdown=countdown),
                          robust=True)
