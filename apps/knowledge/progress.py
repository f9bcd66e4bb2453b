"""Where ingestion stands, in figures and in words: a knowledge base's and a document's report
(the builder API, the KB page), and the live progress the KB page polls — each document's place
in its queue, its stage, and why it is not moving when it is not (no worker, a stalled queue, the
broker down). Plain reads of knowledge rows are apps.knowledge.selectors'."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Min, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.core.timefmt import short_duration
from apps.core.workers import (
    WORKER_SILENT_SECONDS,
    broker_down_text,
    queue_activity,
    queue_halt,
    queue_stall,
    worker_reading,
)
from apps.knowledge.leases import lease_expires_at
from apps.knowledge.models import Chunk, Document, IndexGeneration, KnowledgeBase
from apps.knowledge.selectors import (
    document_list,
    generation_active,
    generation_latest,
    generation_searchable_chunk_count,
)

# Reports


def _status_counts(queryset: QuerySet[Document]) -> dict[str, int]:
    counts = {status: 0 for status in Document.Status.values}
    for row in queryset.values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    return counts


def document_status_summary(counts: dict[str, int]) -> str:
    """"1998 completed · 2 failed": the KB page's line over its documents, in the statuses' order."""
    return " · ".join(f"{counts[status]} {label.lower()}" for status, label in Document.Status.choices
                      if counts.get(status))


def knowledge_base_report(*, kb: KnowledgeBase, failures_limit: int = 50) -> dict[str, Any]:
    documents = Document.objects.filter(knowledge_base=kb)
    counts = _status_counts(documents)
    failures = [
        {"document_id": str(row["id"]), "filename": row["filename"], "error_code": row["error_code"],
         "error_message": row["error_message"], "attempts": row["attempts"], "failed_at": row["failed_at"]}
        for row in documents.filter(status=Document.Status.FAILED)
        .order_by("-failed_at", "id")
        .values("id", "filename", "error_code", "error_message", "attempts", "failed_at")[:failures_limit]
    ]
    active = generation_active(kb=kb)
    chunks = (
        Chunk.objects.filter(generation=active).aggregate(
            children=Count("id", filter=Q(kind=Chunk.Kind.CHILD)),
            parents=Count("id", filter=Q(kind=Chunk.Kind.PARENT)),
        )
        if active else {"children": 0, "parents": 0}
    )
    return {
        "knowledge_base_id": str(kb.pk),
        "documents": {"total": sum(counts.values()), "by_status": counts},
        "failures": failures,
        "chunks": chunks,
    }


def document_same_content(*, documents: list[Document]) -> dict[Any, str]:
    """For each of `documents` whose content another document of its KB already has (or an
    earlier one of the list), that document's filename: searches would find its passages twice."""
    if not documents:
        return {}
    others = Document.objects.filter(knowledge_base_id=documents[0].knowledge_base_id,
                                     content_hash__in={d.content_hash for d in documents})
    earlier = dict(others.exclude(pk__in=[d.pk for d in documents]).order_by("-created_at")
                   .values_list("content_hash", "filename"))
    found: dict[Any, str] = {}
    for document in documents:
        if document.content_hash in earlier:
            found[document.pk] = earlier[document.content_hash]
        else:
            earlier[document.content_hash] = document.filename
    return found


DOCUMENT_STAGE_FIELDS = ("created_at", "queued_at", "parsing_started_at", "chunking_started_at",
                         "awaiting_confirmation_at", "confirmed_at", "embedding_started_at", "completed_at",
                         "failed_at")


def document_state(document: Document) -> dict[str, Any]:
    """Where a document's ingestion is, as the API and the KB page's poll show it."""
    return {
        "status": document.status,
        "error_code": document.error_code or None,
        "error_message": document.error_message or None,
        "attempts": document.attempts,
        "progress": {"embedded": document.progress_done, "total": document.progress_total,
                     "percent": document_progress_percent(document=document)},
    }


def document_stage_times(document: Document) -> dict[str, Any]:
    """When the document entered each stage of ingestion (None for stages not reached)."""
    return {name: getattr(document, name) for name in DOCUMENT_STAGE_FIELDS}


def document_report(*, document: Document) -> dict[str, Any]:
    chunks = (
        Chunk.objects.filter(document=document, generation__status=IndexGeneration.Status.ACTIVE).aggregate(
            children=Count("id", filter=Q(kind=Chunk.Kind.CHILD)),
            parents=Count("id", filter=Q(kind=Chunk.Kind.PARENT)),
            embedded=Count("id", filter=Q(kind=Chunk.Kind.CHILD, embedding__isnull=False)),
        )
    )
    return {
        "document_id": str(document.pk),
        **document_state(document),
        "chunks": chunks,
        "stages": document_stage_times(document),
    }


# Ingestion progress (the KB page polls it)

# How far along each stage is, out of 100: parsing and chunking are quick next to embedding,
# which fills the rest of the bar chunk by chunk.
STAGE_PERCENT: dict[str, int] = {
    Document.Status.PENDING: 0,
    Document.Status.QUEUED: 0,
    Document.Status.PARSING: 10,
    Document.Status.CHUNKING: 25,
    Document.Status.AWAITING_CONFIRMATION: 40,
    Document.Status.EMBEDDING: 40,
    Document.Status.COMPLETED: 100,
    Document.Status.FAILED: 0,
}
# A document in one of these needs nobody but a person (or nothing at all) to move on.
SETTLED_STATUSES = (Document.Status.COMPLETED, Document.Status.FAILED, Document.Status.AWAITING_CONFIRMATION)
WORKING_STATUSES = (Document.Status.PARSING, Document.Status.CHUNKING, Document.Status.EMBEDDING)


def document_queue_lane(*, size: int) -> str:
    """The queue a document waits in, as `tasks.task_route` sends it: "large" from
    KNOWLEDGE_LARGE_DOCUMENT_BYTES up (beside rebuilds), else "default"; one lane when
    KNOWLEDGE_TASK_QUEUE pins every ingestion task to one queue."""
    if not settings.KNOWLEDGE_TASK_QUEUE and size >= settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES:
        return "large"
    return "default"


def document_queue_lanes() -> dict[str, str]:
    """Each ingestion lane and the Celery queue its documents are sent to (tasks.task_route): the
    small documents' "default" lane on KNOWLEDGE_TASK_QUEUE, else on the default queue — where tool
    calls are dispatched too, unless TOOL_DISPATCH_QUEUE is set — and the "large" one on
    KNOWLEDGE_LARGE_TASK_QUEUE."""
    if settings.KNOWLEDGE_TASK_QUEUE:
        return {"default": settings.KNOWLEDGE_TASK_QUEUE}
    return {"default": settings.CELERY_TASK_DEFAULT_QUEUE, "large": settings.KNOWLEDGE_LARGE_TASK_QUEUE}


def document_lane_filter(lane: str) -> Q:
    """The documents of ingestion lane `lane` (document_queue_lane), as a filter."""
    if settings.KNOWLEDGE_TASK_QUEUE:
        return Q()
    limit = settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES
    return Q(size__gte=limit) if lane == "large" else Q(size__lt=limit)


def document_queue_positions(*, documents: Iterable[Document]) -> dict:
    """Each queued document's place in its ingestion queue (1 = next), among the queued
    documents of every KB in the same lane — the workers are shared — by queue time, then id.
    One statement per lane."""
    lanes: dict[str, list] = {}
    for document in documents:
        if document.status == Document.Status.QUEUED:
            lanes.setdefault(document_queue_lane(size=document.size), []).append(document.pk)
    positions = {}
    for lane, ids in lanes.items():
        ahead = (
            Document.objects.filter(document_lane_filter(lane), status=Document.Status.QUEUED)
            .filter(Q(queued_at__lt=OuterRef("queued_at")) | Q(queued_at=OuterRef("queued_at"), pk__lt=OuterRef("pk")))
            .order_by()
            .values("status")
            .annotate(n=Count("id"))
            .values("n")
        )
        rows = (
            Document.objects.filter(pk__in=ids, status=Document.Status.QUEUED)
            .annotate(ahead=Coalesce(Subquery(ahead[:1]), 0))
            .values_list("pk", "ahead")
        )
        positions.update({pk: ahead + 1 for pk, ahead in rows})
    return positions


def document_working_counts(*, lanes: Iterable[str]) -> dict[str, dict[str, Any]]:
    """How many documents the workers of each lane are parsing, chunking or embedding now
    (`count`), and the newest heartbeat among them (`heartbeat_at`): whether that lane moves."""
    return {lane: worker_reading(("documents", lane), functools.partial(_working_count, lane)) for lane in set(lanes)}


def _working_count(lane: str) -> dict[str, Any]:
    return Document.objects.filter(document_lane_filter(lane), status__in=WORKING_STATUSES).aggregate(
        count=Count("id"), heartbeat_at=Max("heartbeat_at"))


def document_queue_work(queue: str) -> list[dict[str, Any]]:
    """What the ingestion workers hold on a Celery queue: the working counts of each lane sent to
    it, none for a queue no lane uses (one statement per such lane). KnowledgeConfig.ready names it
    to apps.core.workers, whose queue_activity counts it for the tool calls dispatched on the same
    queue."""
    lanes = [lane for lane, lane_queue in document_queue_lanes().items() if lane_queue == queue]
    return list(document_working_counts(lanes=lanes).values())


def _lane_activity(lane: str, working: dict[str, Any]) -> dict[str, Any]:
    """A lane's queue as it moves: its documents being worked on (`working`) and every other kind of
    work on the same Celery queue (by default the small documents' lane shares the default queue
    with tool calls: workers busy on slow sends within their deadline move it)."""
    return queue_activity(document_queue_lanes()[lane], kind="documents", held=[working])


def documents_waiting_for_a_worker(*, project_ids: Iterable[Any]) -> dict[Any, dict[str, Any]]:
    """Per project, its queued documents that wait in a lane whose queue no worker moves, as the KB
    page judges each (apps.core.workers.queue_halt): {project_id: {"documents": n, "since": the
    oldest one's queue time, "held": how many of them wait behind workers that hold work on their
    queue but went silent, "silent": the longest such silence in seconds (None when none)}}.
    Empty while every lane moves. Two statements per lane at most, one more for the tool calls
    sent on the lane's queue, whatever the number of projects: the dashboard's sign that the
    workers are down or stuck (each KB page says it per document; the landing page said the KBs
    were ready)."""
    now = timezone.now()
    stalled = Q(pk__in=[])
    halts = {}
    for lane, activity in document_working_counts(lanes=document_queue_lanes()).items():
        halt = queue_halt(_lane_activity(lane, activity), now=now)
        if halt is not None:
            halts[lane] = halt
            stalled |= document_lane_filter(lane) & Q(queued_at__lte=halt.stalled_before)
    # One lane alone (KNOWLEDGE_TASK_QUEUE) has no filter: all the stalled documents are its own.
    held = {f"held_{lane}": Count("id", filter=document_lane_filter(lane) or None)
            for lane, halt in halts.items() if halt.holding}
    rows = (Document.objects.filter(stalled, knowledge_base__project_id__in=list(project_ids),
                                    status=Document.Status.QUEUED)
            .values("knowledge_base__project_id").annotate(documents=Count("id"), since=Min("queued_at"), **held))
    waiting = {}
    for row in rows:
        silences = [halts[lane].silent for lane in halts if row.get(f"held_{lane}")]
        waiting[row["knowledge_base__project_id"]] = {
            "documents": row["documents"], "since": row["since"], "held": sum(row.get(key, 0) for key in held),
            "silent": max(silences, default=None)}
    return waiting


def document_progress_percent(*, document: Document) -> int:
    """Stage progress: where the document is in parse → chunk → embed, embedding by chunks."""
    if document.status == Document.Status.EMBEDDING and document.progress_total:
        share = min(document.progress_done, document.progress_total) / document.progress_total
        return STAGE_PERCENT[Document.Status.EMBEDDING] + int(share * (100 - STAGE_PERCENT[Document.Status.EMBEDDING]))
    return STAGE_PERCENT.get(document.status, 0)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _generation_text(generation: IndexGeneration) -> str:
    if generation.status == IndexGeneration.Status.BUILDING:
        return (f"{generation.progress_done}/{generation.progress_total} documents — searches keep using the "
                "active generation until this one is complete" + _joined("; ", _worker_silence(generation)))
    if generation.status == IndexGeneration.Status.ACTIVE:
        return "serving searches"
    if generation.status == IndexGeneration.Status.FAILED:
        return "the active generation is unchanged"
    return "retired"


def _joined(separator: str, clause: str) -> str:
    return separator + clause if clause else ""


def _worker_silence(row: Document | IndexGeneration) -> str:
    """For a document or generation a run holds: nothing while its worker reports; once it has been
    silent for a while (a killed worker, or one stuck in a long parse), for how long, and when the
    watchdog hands the row to another worker (when its lease runs out)."""
    expires = lease_expires_at(row)
    now = timezone.now()
    if row.run_token is None:
        # No run holds it: handed back to the queue (by the watchdog, or by a run that lost its
        # database connection), or a rebuild no worker has claimed yet. A minute with nobody
        # taking it means nobody consumes its queue (a large-queue worker down, say): it read as
        # progressing ("Building 4/15 documents") for as long as that lasted. Counted from when the
        # row was handed back (its last save): a lease given back at once has its heartbeat set
        # back past the lease, and read from it, a row handed back a second ago waited "5 min".
        waiting = (now - row.updated_at).total_seconds()
        if waiting < WORKER_SILENT_SECONDS:
            return ""
        return (f"waiting {short_duration(waiting)} for a worker to take it (again); if this goes on, check that the "
                "Celery workers are running")
    if expires is None or row.heartbeat_at is None:  # for the type checker: a held row has both
        return ""
    silent = (now - row.heartbeat_at).total_seconds()
    if silent < WORKER_SILENT_SECONDS:
        return ""
    left = (expires - now).total_seconds()
    interval = settings.KNOWLEDGE_WATCHDOG_INTERVAL_SECONDS
    if left <= -2 * interval:
        # Two watchdog runs should have handed it over by now: no worker (or no beat) runs one.
        return (f"no word from its worker for {short_duration(silent)}; no worker has taken it over "
                f"{short_duration(-left)} after it could: check that the Celery workers and their beat are running")
    handover = (f"another worker takes it over in {short_duration(left)} if it stays silent" if left > 0 else
                f"another worker takes it over when a worker's watchdog next runs (every {short_duration(interval)})")
    return f"no word from its worker for {short_duration(silent)}; {handover}"


def _document_stage(document: Document, *, position: int | None, working: dict[str, dict[str, Any]],
                    queues: dict[str, dict[str, Any]]) -> str:
    return _document_stage_text(document, position=position, working=working, queues=queues) + (
        _joined(" — ", _worker_silence(document)) if document.status in WORKING_STATUSES else "")


def _queue_stalled(document: Document, *, lane: dict[str, Any], queue: dict[str, Any]) -> str:
    """For a document in a lane whose queue does not move (`queue`: _lane_activity) — what is worked
    on there silent for a minute (workers killed: said at once), or nothing worked on and the
    document queued a minute (workers never started) — how long, and what to check; nothing while
    the queue moves. Without it the row read "1st in line" (and "2 documents ingesting now") for as
    long as no worker ran."""
    stall = queue_stall(queue, queued_at=document.queued_at, now=timezone.now())
    if stall is None:
        return ""
    if broker_down := broker_down_text():
        return f"waiting {short_duration(stall.seconds)}: {broker_down}"
    if stall.holding:
        held = "ingesting them" if lane.get("count") else "busy with other work on its queue"
        return (f"no word from the workers {held} for {short_duration(stall.seconds)}; "
                "if this goes on, check that the Celery workers are running")
    return (f"no worker has started on it in {short_duration(stall.seconds)}; "
            "if this goes on, check that the Celery workers are running")


def _document_stage_text(document: Document, *, position: int | None, working: dict[str, dict[str, Any]],
                         queues: dict[str, dict[str, Any]]) -> str:
    status = document.status
    if status == Document.Status.QUEUED:
        if position is None:
            return "queued"
        lane = document_queue_lane(size=document.size)
        activity = working.get(lane, {})
        busy = activity.get("count", 0)
        line = "in line for large documents" if lane == "large" else "in line"
        ingesting = f"; {_count(busy, 'document')} ingesting now" if busy else ""
        stalled = _joined(" — ", _queue_stalled(document, lane=activity, queue=queues.get(lane, {})))
        return f"queued — {_ordinal(position)} {line}{ingesting}{stalled}"
    if status == Document.Status.PENDING:
        return "waiting to be queued"
    # Counted in passages, what the embedder reads: the chunks and their sentence windows (a
    # document of one chunk may embed four passages; its page lists the one chunk).
    if status == Document.Status.EMBEDDING:
        if not document.progress_total:  # the passages are not counted yet
            return "embedding"
        return f"embedding {document.progress_done}/{document.progress_total} passages"
    if status == Document.Status.AWAITING_CONFIRMATION:
        return f"{_count(document.progress_total, 'passage')} ready; waiting for confirmation"
    if status == Document.Status.COMPLETED:
        return f"{_count(document.progress_total, 'passage')} embedded"
    if status == Document.Status.FAILED:
        # Lost connections are not attempts (runs.connection_loss_recover): a document failed by them
        # read "failed after 1 attempt", naming neither.
        losses = f" and {_count(document.connection_losses, 'lost database connection')}"
        return f"failed after {_count(document.attempts, 'attempt')}" + (losses if document.connection_losses else "")
    return status


def knowledge_base_ingest_status(*, kb: KnowledgeBase, limit: int = 200,
                                 counts: dict[str, int] | None = None) -> dict[str, Any]:
    """What the KB page shows of ingestion, for its first render and for its polling: each of the
    newest `limit` documents with status, stage progress and why it waits; the latest index
    generation with its progress; `settled` once nothing moves without a person, and then the
    active generation's chunk count; `summary`, the whole KB's documents by status (`counts`, or
    counted apart only when it has more than `limit`). At most nine queries and one for the tool
    calls sent on a queued lane's queue (by default the small documents'), whatever the number of
    documents."""
    documents = list(
        document_list(kb=kb).only(
            "id", "filename", "file_type", "size", "status", "enabled", "error_code", "error_message", "attempts",
            "connection_losses", "progress_done", "progress_total", "queued_at", "created_at", "run_token",
            "heartbeat_at",
        )[:limit]
    )
    positions = document_queue_positions(documents=documents)
    working = document_working_counts(
        lanes=[document_queue_lane(size=d.size) for d in documents if d.pk in positions])
    queues = {lane: _lane_activity(lane, activity) for lane, activity in working.items()}
    generation = generation_latest(kb=kb)
    rows = [
        {
            "id": str(d.pk),
            "filename": d.filename,
            "file_type": d.file_type,
            "status": d.status,
            "status_label": d.get_status_display(),
            "enabled": d.enabled,
            "percent": document_progress_percent(document=d),
            "stage": _document_stage(d, position=positions.get(d.pk), working=working, queues=queues),
            "queue_position": positions.get(d.pk),
            "error_code": d.error_code or None,
            "error_message": d.error_message or None,
            "created_at": d.created_at,
        }
        for d in documents
    ]
    if counts is None and len(documents) < limit:
        counts = Counter(d.status for d in documents)
    elif counts is None:  # the page shows the newest `limit`: its line counts them all
        counts = _status_counts(Document.objects.filter(knowledge_base=kb))
    building = generation is not None and generation.status == IndexGeneration.Status.BUILDING
    # Over every document, as the summary counts them: one retried from the documents list may be
    # older than the newest `limit`, and the page must keep watching it.
    settled = not building and all(status in SETTLED_STATUSES for status, n in counts.items() if n)
    active = None
    if settled:
        active = generation if generation and generation.status == IndexGeneration.Status.ACTIVE else (
            generation_active(kb=kb))
    return {
        "knowledge_base_id": str(kb.pk),
        "documents": rows,
        "document_total": sum(counts.values()),
        "summary": document_status_summary(counts),
        "generation": None if generation is None else {
            "number": generation.number,
            "status": generation.status,
            "status_label": generation.get_status_display(),
            "strategy": "{strategy} {min_chars}–{max_chars} characters, overlap {overlap_chars}".format_map(
                {name: generation.chunk_strategy.get(name, "?") for name in
                 ("strategy", "min_chars", "max_chars", "overlap_chars")}),
            "text": _generation_text(generation),
            "done": generation.progress_done,
            "total": generation.progress_total,
            "percent": 100 if generation.status == IndexGeneration.Status.ACTIVE else (
                generation.progress_done * 100 // generation.progress_total if generation.progress_total else 0),
            "error_code": generation.error_code or None,
            "error_message": generation.error_message or None,
        },
        # Counted once nothing moves any more (polling stops there), not on every poll.
        "active_chunks": None if active is None else generation_searchable_chunk_count(generation=active),
        "settled": settled,
    }
