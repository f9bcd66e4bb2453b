"""Work whose run died: nothing stays running past its lease. The worker's main process tells
these functions when the process running a task dies or is killed (apps.knowledge.tasks); the
watchdog (on beat, and once when each worker starts) hands stale work, and documents whose
message never reached or left the broker, to a new task, and fails work that has spent its
attempts."""

from __future__ import annotations

import functools
import logging
import operator
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.knowledge import dispatch, generation_indexes
from apps.knowledge.ingest import attempts_spent, document_fail, document_mark_failed, document_time_limit_message
from apps.knowledge.leases import lease_expire, lease_release, lease_stale_before, task_claim_token
from apps.knowledge.models import Document, IndexGeneration
from apps.knowledge.progress import document_lane_filter, document_queue_lanes
from apps.knowledge.rebuild import (
    generation_fail,
    generation_mark_failed,
    generation_purge,
    generation_time_limit_message,
)
from apps.knowledge.runs import hard_time_limit

logger = logging.getLogger("bailinghub.knowledge")


# Runs whose worker process died under them. The worker's main process sees the child running a
# task die (kill -9, out of memory: WorkerLostError), or kills it at CELERY_TASK_TIME_LIMIT, and
# tells these (apps.knowledge.tasks.PipelineRequest). Which row's lease the task held is known from
# its id: the token of each claim of a Celery task is named by the task and the attempt. They run
# on the loop of the worker's main process: every wait is bounded (a stuck child may hold the
# row's lock; its kill comes after this), and past it the work is left to the lease, as before.
_MAIN_PROCESS_WAIT = "2s"


def _run_token_held(rows, object_id, *, task_id: str):
    """The token of the claim task `task_id` holds `object_id` of `rows` under, if it holds it."""
    held = rows.filter(pk=object_id).values_list("run_token", "attempts").first()
    if held is None or held[0] is None:
        return None
    token, attempts = held
    return token if token == task_claim_token(task_id, attempts) else None


def _waits_bounded() -> None:
    """In a transaction: its lock waits and statements end after _MAIN_PROCESS_WAIT."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)",
                       [_MAIN_PROCESS_WAIT, _MAIN_PROCESS_WAIT])


def pipeline_run_lost(*, task_name: str, object_id, task_id: str) -> bool:
    """The process running task `task_id` died: give back the lease its run held at once, so the
    message Celery hands out again claims the work now, with one attempt more (a document that
    kills its worker each time fails once they are spent), rather than waiting the dead run's lease
    out (five minutes of "embedding 11 %"). Returns whether the task held the work."""
    rows = dispatch.task_rows(task_name)
    with transaction.atomic():
        _waits_bounded()
        token = _run_token_held(rows, object_id, task_id=task_id)
        given_back = token is not None and bool(lease_expire(rows, pk=object_id, held_by=[token]))
    if given_back:
        logger.info("The process running %s[%s] for %s died; its lease is given back.", task_name, task_id, object_id)
    return given_back


def pipeline_run_killed(*, task_name: str, object_id, task_id: str, seconds: float) -> bool:
    """The process running task `task_id` was killed at its hard time limit of `seconds`: fail the
    work its run held, naming the limit (it was left to the lease and, five kills later, failed as a
    document that crashes its worker). Returns whether the task held the work."""
    rows = dispatch.task_rows(task_name)
    time_limit = hard_time_limit(seconds)
    with transaction.atomic():
        _waits_bounded()
        token = _run_token_held(rows, object_id, task_id=task_id)
        if token is None:
            return False
        if task_name == dispatch.DOCUMENT_INGEST:
            document_fail(object_id, token, "ingest_time_limit", document_time_limit_message(object_id, time_limit))
        else:
            generation_fail(object_id, token, "rebuild_time_limit", generation_time_limit_message(time_limit))
    logger.warning("%s[%s] for %s was stopped at its hard time limit (%s s); it is failed.", task_name, task_id,
                   object_id, seconds)
    return True


# Watchdog

# Documents a watchdog pass looks at, at most (each kind).
WATCHDOG_BATCH = 1000
# Queued and claimed by no run.
UNCLAIMED = Q(status=Document.Status.QUEUED, run_token__isnull=True)


def _lanes_by_queue_length() -> tuple[list[Q], list[Q]]:
    """The ingestion lanes (progress.document_queue_lanes) whose Celery queue is empty, and those
    whose queue still holds messages, as filters; a lane whose queue cannot be told (a broker other
    than Redis, or one that does not answer) is in neither."""
    empty: list[Q] = []
    holding: list[Q] = []
    for lane, queue in document_queue_lanes().items():
        length = dispatch.queue_length(queue)
        if length is not None:
            (holding if length else empty).append(document_lane_filter(lane))
    return empty, holding


def _any_of(filters: list[Q]) -> Q | None:
    return functools.reduce(operator.or_, filters) if filters else None


def _lost_messages_resend(empty_lanes: Q | None) -> int:
    """Send again the queued documents whose message is gone: queued KNOWLEDGE_QUEUED_RESEND_SECONDS
    and more, claimed by no worker, in a lane whose Celery queue holds no message (a Redis restarted
    without its data lost them; a queue still holding messages is one the workers have yet to reach).
    Such a document waited its lease out — five minutes after the broker was back, idle workers
    beside it. Its heartbeat moves on, so a loss costs one send; a message a busy worker had
    reserved all the same is claimed once."""
    if empty_lanes is None:
        return 0
    since = timezone.now() - timedelta(seconds=settings.KNOWLEDGE_QUEUED_RESEND_SECONDS)
    unclaimed = UNCLAIMED & Q(heartbeat_at__lt=since) & empty_lanes
    resent = 0
    for document_id in Document.objects.filter(unclaimed).order_by("heartbeat_at").values_list(
            "pk", flat=True)[:WATCHDOG_BATCH]:
        with transaction.atomic():
            document = Document.objects.select_for_update(skip_locked=True, of=("self",)).filter(
                unclaimed, pk=document_id).first()
            if document is None:
                continue
            document.heartbeat_at = timezone.now()
            document.save(update_fields=["heartbeat_at", "updated_at"])
            dispatch.document_send(document.pk)
        resent += 1
    if resent:
        logger.info("%d queued documents whose messages were lost are sent again.", resent)
    return resent


def knowledge_watchdog() -> dict[str, int]:
    """Hand work whose heartbeat went stale (a killed worker, a lost message) to a new task, or
    fail it after KNOWLEDGE_MAX_ATTEMPTS; purge retired generations."""
    stale = lease_stale_before()
    requeued = failed = 0
    stale_documents = Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True, created_at__lt=stale)
    empty_lanes, holding_lanes = (_any_of(filters) for filters in _lanes_by_queue_length())
    if holding_lanes is not None:
        # A queued document no worker has claimed, in a lane whose queue still holds messages, waits
        # its turn: in a backlog longer than the lease each was sent again every pass (a message more
        # each five minutes), and, passed over, they took every place of a pass from work a killed
        # worker held. Once its queue is empty, _lost_messages_resend sends it if its message is gone.
        stale_documents &= ~(UNCLAIMED & holding_lanes)
    for document_id in Document.objects.filter(stale_documents, status__in=Document.IN_PROGRESS).order_by(
        "heartbeat_at"  # the longest silent first
    ).values_list("pk", flat=True)[:WATCHDOG_BATCH]:
        with transaction.atomic():
            document = Document.objects.select_for_update(skip_locked=True, of=("self",)).filter(
                stale_documents, pk=document_id, status__in=Document.IN_PROGRESS
            ).first()
            if document is None:
                continue
            if document.attempts >= settings.KNOWLEDGE_MAX_ATTEMPTS:
                document_mark_failed(document, "ingest_stalled", attempts_spent(document.attempts))
                failed += 1
                continue
            lease_release(document)
            if document.status == Document.Status.PENDING:
                document.status = Document.Status.QUEUED
                document.queued_at = document.heartbeat_at
            document.save(update_fields=["run_token", "heartbeat_at", "status", "queued_at", "updated_at"])
            dispatch.document_send(document.pk)
            requeued += 1
    requeued += _lost_messages_resend(empty_lanes)
    stale_generations = Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True)
    for generation_id in IndexGeneration.objects.filter(
        stale_generations, status=IndexGeneration.Status.BUILDING
    ).values_list("pk", flat=True):
        with transaction.atomic():
            generation = IndexGeneration.objects.select_for_update(skip_locked=True, of=("self",)).filter(
                stale_generations, pk=generation_id, status=IndexGeneration.Status.BUILDING
            ).first()
            if generation is None:
                continue
            if generation.attempts >= settings.KNOWLEDGE_MAX_ATTEMPTS:
                generation_mark_failed(generation, "rebuild_stalled",
                                       f"The rebuild stopped responding {generation.attempts} times; start it again.")
                failed += 1
                continue
            lease_release(generation)
            generation.save(update_fields=["run_token", "heartbeat_at", "updated_at"])
            dispatch.generation_send(generation.pk)
            requeued += 1
    purged = generation_purge()
    return {"requeued": requeued, "failed": failed, "purged": purged,
            "generation_indexes_built": generation_indexes.active_generations_index(),
            "generation_indexes_dropped": generation_indexes.stale_indexes_drop()}
