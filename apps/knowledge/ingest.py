"""The pipeline's services: ingest a document, build a generation (rebuild), watch for dead work.

Tasks (apps.knowledge.tasks) only call these. Every run is safe to repeat:

- A run *claims* its document (or generation) with a lease (apps.knowledge.leases): a fresh
  `run_token` and a heartbeat; every write checks the token, so a run that lost its claim
  (document deleted, watchdog handed the work to another worker) stops without writing. A task
  that finds another run's live lease (a redelivered message while the dead run's heartbeat is
  still fresh) sends itself again for when that lease runs out, rather than dropping the work.
  When the worker's main process sees the process running a task die, it gives that run's lease
  back at once (pipeline_run_lost): the message Celery hands out again claims the work now.
- Nothing stays running past its lease, whatever died: the watchdog (on beat, and once when each
  worker starts) hands stale work, and documents whose message never reached or left the broker,
  to a new task.
- A document's chunks in a generation are created once, under the document's row lock, with
  deterministic ids and positions (unique per generation, document, kind, index): a repeated
  stage finds them and goes on. Operators' chunk overrides are re-applied in that same
  transaction (apps.knowledge.chunk_overrides), before anything is embedded. Vectors go to the
  embedding cache batch by batch (the progress), then onto the chunks — with their keyword
  tsvector — in the one transaction that completes the document, so searches never see half a
  document.
- Ingestion writes to every *live* generation (active, and building during a rebuild); the
  rebuild adds completed documents to its generation and switches in one transaction that
  waits for (locks out) documents being completed. Lock order: knowledge base, then document.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import math
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from apps.knowledge import dispatch, generation_indexes
from apps.knowledge.chunk_overrides import override_apply
from apps.knowledge.leases import (
    Claim,
    LeaseLost,
    lease_claim,
    lease_expire,
    lease_heartbeat,
    lease_live,
    lease_release,
    lease_stale_before,
    task_claim_token,
)
from apps.knowledge.models import Chunk, Document, DocumentContent, IndexGeneration, KnowledgeBase
from apps.knowledge.pipeline import fetch, parsers
from apps.knowledge.pipeline.chunkers import TooManyChunks, document_chunk
from apps.knowledge.pipeline.embedders import Embedder, EmbeddingFailed, embedder_for
from apps.knowledge.pipeline.index import (
    cache_missing,
    cache_store,
    child_texts,
    chunks_create,
    chunks_exist,
    vectors_missing,
    vectors_write,
)
from apps.knowledge.pipeline.strategy import strategy_from_snapshot
from apps.knowledge.selectors import document_lane_filter, document_queue_lanes
from apps.knowledge.services import chunks_delete

logger = logging.getLogger("bailinghub.knowledge")

# Completing a document re-checks the generations it must be in; a rebuild starting meanwhile
# sends it round again. More rounds than this means something is wrong.
MAX_ROUNDS = 5


class DocumentEmpty(Exception):
    pass


class PipelineError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _retry_countdown(busy_until: datetime) -> float:
    """Seconds until another run's lease runs out (and a moment more), at most one lease."""
    remaining = (busy_until - timezone.now()).total_seconds()
    return min(max(remaining, 0.0), float(settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS)) + 1.0


def _deadline() -> float:
    return time.monotonic() + settings.KNOWLEDGE_TASK_SLICE_SECONDS


def _batches(items: list, size: int):
    for start in range(0, len(items), max(1, size)):
        yield items[start : start + size]


class TooLargeAfterConversion(PipelineError):
    def __init__(self, message: str):
        super().__init__("document_too_large_after_conversion", f"Document too large after conversion: {message}")


def text_cap(size: int) -> int:
    """The most text a document of `size` bytes may convert to."""
    return min(settings.KNOWLEDGE_MAX_TEXT_RATIO * size, settings.KNOWLEDGE_MAX_TEXT_CHARS)


def _heartbeat_seconds() -> float:
    return max(0.2, min(10.0, settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS / 4))


def _parse(document: Document, *, heartbeat=None) -> parsers.ParsedDocument:
    """Convert within the document's text cap (TooLargeAfterConversion as soon as it is spent),
    calling `heartbeat` now and then while a long conversion runs."""
    data = bytes(DocumentContent.objects.values_list("data", flat=True).get(document_id=document.pk))
    budget = parsers.TextBudget(max_chars=text_cap(len(data)), on_progress=heartbeat,
                                progress_seconds=_heartbeat_seconds())
    try:
        return parsers.document_parse(file_type=document.file_type, data=data, budget=budget)
    except parsers.DocumentTooLarge as exc:
        raise TooLargeAfterConversion(
            f"its text exceeds {exc.max_chars:,} characters, the cap for a file of {len(data):,} bytes "
            f"(KNOWLEDGE_MAX_TEXT_RATIO = {settings.KNOWLEDGE_MAX_TEXT_RATIO} times its size, at most "
            f"KNOWLEDGE_MAX_TEXT_CHARS = {settings.KNOWLEDGE_MAX_TEXT_CHARS:,}). Split the document."
        ) from exc


def _chunk(parsed: parsers.ParsedDocument, generation: IndexGeneration, *, size: int):
    """The document's chunks in the generation's strategy. Each child is embedded and indexed
    with its heading path in front (index.embedding_text), so the paths are spent from the text
    cap of a file of `size` bytes as the text was: a short file of long headings over many small
    chunks would otherwise index many times its cap."""
    try:
        chunked = document_chunk(parsed=parsed, strategy=strategy_from_snapshot(generation.chunk_strategy),
                                 max_children=settings.KNOWLEDGE_MAX_CHUNKS)
    except TooManyChunks as exc:
        raise TooLargeAfterConversion(
            f"it makes more than {exc.max_children:,} chunks, the cap per document (KNOWLEDGE_MAX_CHUNKS). "
            "Split the document or use larger chunks."
        ) from exc
    cap = text_cap(size)
    text = sum(len(block.text) for section in parsed.sections for block in section.blocks)
    paths = sum(len(child.chapter_path) + 1 for child in chunked.children if child.chapter_path)
    if text + paths > cap:
        raise TooLargeAfterConversion(
            f"its heading paths, repeated in each of its {len(chunked.children):,} chunks, add {paths:,} "
            f"characters to its {text:,}: more than {cap:,}, the cap for a file of {size:,} bytes "
            f"(KNOWLEDGE_MAX_TEXT_RATIO = {settings.KNOWLEDGE_MAX_TEXT_RATIO} times its size). Shorten its "
            "headings or use larger chunks."
        )
    return chunked


def _live_generations(kb_id) -> list[IndexGeneration]:
    return list(IndexGeneration.objects.filter(knowledge_base_id=kb_id, status__in=IndexGeneration.LIVE)
                .order_by("number"))


def _lock_kb_shared(kb_id) -> None:
    """FOR SHARE on the KB row: a generation switch (FOR NO KEY UPDATE) waits for us, and we for it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM knowledge_knowledgebase WHERE id = %s FOR SHARE", [kb_id])


def _embed_missing(*, texts: dict[str, str], model, embedder: Embedder, on_batch) -> None:
    """Embed the texts whose vectors are not cached, batch by batch; `on_batch(done_count)`
    after each (heartbeat and progress)."""
    missing = sorted(cache_missing(model=model, hashes=texts.keys()))
    done = len(texts) - len(missing)
    on_batch(done)
    for batch in _batches(missing, embedder.batch_size):
        vectors = embedder.embed_documents([texts[digest] for digest in batch])
        cache_store(model=model, vectors=dict(zip(batch, vectors, strict=True)))
        done += len(batch)
        on_batch(done)


# Documents


def _document_touch(document_id, token, **fields) -> None:
    """Heartbeat (and other fields) for the run holding the document; LeaseLost otherwise."""
    lease_heartbeat(Document.objects, pk=document_id, token=token, **fields)


def _document_claim(document_id, run_token: str | None, task_id: str | None, connection_lost: bool = False) -> Claim:
    with transaction.atomic():
        document = Document.objects.select_for_update(of=("self",)).filter(pk=document_id).first()
        if document is None or document.status not in Document.IN_PROGRESS:
            return Claim()
        held = run_token and document.run_token and str(document.run_token) == run_token
        if not held and document.attempts >= settings.KNOWLEDGE_MAX_ATTEMPTS and not lease_live(document):
            _document_mark_failed(document, "ingest_attempts_exhausted", _attempts_spent(document.attempts))
            return Claim()
        if held and connection_lost and _connection_loss_counted(document, _document_connections_lost):
            return Claim()
        if document.status == Document.Status.PENDING:
            document.status = Document.Status.QUEUED
            document.queued_at = timezone.now()
        return lease_claim(document, run_token=run_token, task_id=task_id,
                           update_fields=("status", "queued_at", "connection_losses"))


def _attempts_spent(attempts: int) -> str:
    """Why a document ran out of attempts, for the operator: a run is only counted when a worker
    takes the document, so each one ended with its worker gone — the document that crashes its
    worker (a file that exhausts its memory) fails this way, and retrying it as it is crashes again."""
    return (f"The pipeline did not finish in {attempts} attempts: each time, the worker running it stopped before "
            "it was done (it was killed, for instance out of memory, or lost the database); the worker's log says "
            "which. If this file is what stops the worker, split it before retrying it.")


def _document_mark_failed(document: Document, code: str, message: str) -> None:
    document.status = Document.Status.FAILED
    document.error_code = code
    document.error_message = message[:2000]
    document.failed_at = timezone.now()
    document.run_token = None
    document.save(update_fields=["status", "error_code", "error_message", "failed_at", "run_token",
                                 "connection_losses", "updated_at"])


def _url_shown(document_id) -> str:
    url = Document.objects.filter(pk=document_id).values_list("source_url", flat=True).first() or "the URL"
    return url[:300]


def _document_fail(document_id, token, code: str, message: str) -> None:
    with transaction.atomic():
        document = Document.objects.select_for_update(of=("self",)).filter(pk=document_id, run_token=token).first()
        if document is not None:
            _document_mark_failed(document, code, message)


def _document_chunks_ensure(document: Document, token, parsed: parsers.ParsedDocument | None,
                            generations: list[IndexGeneration]) -> parsers.ParsedDocument | None:
    """Create the document's chunks in each of `generations` that lacks them."""
    needed = [generation for generation in generations if not chunks_exist(generation=generation, document=document)]
    if not needed:
        return parsed
    parsed = parsed or _parse(document, heartbeat=lambda: _document_touch(document.pk, token))
    pieces = {generation.pk: _chunk(parsed, generation, size=document.size) for generation in needed}
    if any(not chunked.children for chunked in pieces.values()):
        raise DocumentEmpty()
    with transaction.atomic():
        locked = Document.objects.select_for_update(of=("self",)).filter(pk=document.pk, run_token=token).first()
        if locked is None:
            raise LeaseLost()
        for generation in needed:
            if not chunks_exist(generation=generation, document=locked):
                chunks_create(generation=generation, document=locked, chunked=pieces[generation.pk])
                override_apply(generation=generation, document=locked)
    return parsed


def _document_fetch(document: Document, token) -> Document:
    """Fetch an external source's content (pipeline.fetch) and keep it as the document's bytes;
    content that changed since the last fetch replaces the document's chunks."""
    _document_touch(document.pk, token)
    fetched = fetch.url_fetch(document.source_url)
    data = fetched.data
    extension = {"markdown": "md"}.get(fetched.file_type, fetched.file_type)
    try:  # the content must be what its type says, as an upload's must (a "text/plain" binary is refused)
        parsers.file_type_detect(filename=f"source.{extension}", data=data)
    except parsers.UnsupportedFileType as exc:
        raise fetch.FetchRefused("url_content_type_refused",
                                 f"The URL's content is not {fetched.content_type}.") from exc
    parsers.document_check(file_type=fetched.file_type, data=data)
    digest = hashlib.sha256(data).hexdigest()
    with transaction.atomic():
        locked = Document.objects.select_for_update(of=("self",)).filter(pk=document.pk, run_token=token).first()
        if locked is None:
            raise LeaseLost()
        if locked.content_hash and locked.content_hash != digest:
            chunks_delete(document_id=locked.pk)
            # New text is new content: a KB that confirms its documents confirms this one again.
            locked.confirmed_at = None
        DocumentContent.objects.update_or_create(document=locked, defaults={"data": data})
        locked.size, locked.content_hash, locked.file_type = len(data), digest, fetched.file_type
        locked.fetched_at = locked.heartbeat_at = timezone.now()
        locked.save(update_fields=["size", "content_hash", "file_type", "fetched_at", "heartbeat_at", "confirmed_at",
                                   "updated_at"])
    return Document.objects.select_related("knowledge_base__embedding_model").get(pk=document.pk)


def _document_run(document_id, token) -> str:
    document = Document.objects.select_related("knowledge_base__embedding_model").get(pk=document_id)
    kb = document.knowledge_base
    deadline = _deadline()
    parsed = None
    if document.source_url and document.fetched_at is None:
        document = _document_fetch(document, token)
    if document.status in (Document.Status.PENDING, Document.Status.QUEUED, Document.Status.PARSING,
                           Document.Status.CHUNKING):
        _document_touch(document_id, token, status=Document.Status.PARSING, parsing_started_at=timezone.now())
        parsed = _parse(document, heartbeat=lambda: _document_touch(document_id, token))
        if parsed.is_empty:
            raise DocumentEmpty()
        _document_touch(document_id, token, status=Document.Status.CHUNKING, chunking_started_at=timezone.now())
        parsed = _document_chunks_ensure(document, token, parsed, _live_generations(kb.pk))
        if kb.require_confirmation and document.confirmed_at is None:
            _document_touch(document_id, token, status=Document.Status.AWAITING_CONFIRMATION,
                            awaiting_confirmation_at=timezone.now(), run_token=None)
            return "awaiting_confirmation"
        _document_touch(document_id, token, status=Document.Status.EMBEDDING, embedding_started_at=timezone.now())
    elif document.embedding_started_at is None:
        _document_touch(document_id, token, embedding_started_at=timezone.now())

    model = kb.embedding_model
    embedder = embedder_for(model)
    for _round in range(MAX_ROUNDS):
        generations = _live_generations(kb.pk)
        parsed = _document_chunks_ensure(document, token, parsed, generations)
        generation_ids = [generation.pk for generation in generations]
        texts = child_texts(document_id=document_id, generation_ids=generation_ids)

        def progress(done: int, total: int = len(texts)) -> None:
            _document_touch(document_id, token, progress_done=done, progress_total=total)
            if time.monotonic() > deadline:
                raise _SliceOver()

        try:
            _embed_missing(texts=texts, model=model, embedder=embedder, on_batch=progress)
        except _SliceOver:
            dispatch.document_send(document_id, run_token=token)
            return "continued"
        with transaction.atomic():
            _lock_kb_shared(kb.pk)
            locked = Document.objects.select_for_update(of=("self",)).filter(pk=document_id, run_token=token).first()
            if locked is None:
                raise LeaseLost()
            now_live = [generation.pk for generation in _live_generations(kb.pk)]
            if set(now_live) != set(generation_ids):
                continue  # a rebuild started or switched meanwhile: cover its generation too
            vectors_write(document_id=document_id, generation_ids=now_live, model=model)
            if vectors_missing(document_id=document_id, generation_ids=now_live):
                continue
            now = timezone.now()
            locked.status = Document.Status.COMPLETED
            locked.completed_at = now
            locked.heartbeat_at = now
            locked.progress_done = locked.progress_total = len(texts)
            locked.run_token = None
            locked.error_code = locked.error_message = ""
            locked.save(update_fields=["status", "completed_at", "heartbeat_at", "progress_done", "progress_total",
                                       "run_token", "error_code", "error_message", "updated_at"])
            return "completed"
    raise PipelineError("ingest_error", "The index kept changing while this document was completed; retry it.")


class _SliceOver(Exception):
    """This task has run its time slice; a new task continues the same run."""


# The database went away under a run (a restart, a failover, a connection dropped between them):
# nothing is wrong with the document or the rebuild, so it is not failed — an operator would find
# a sound document failed with "an unexpected error" after every database restart. The run gives
# its attempt back and the work is sent again: attempts count runs whose worker went away, and a
# database restart ends every run in flight at once, so charging them would fail sound documents
# with advice about the file. Losses have their own bound (KNOWLEDGE_MAX_CONNECTION_LOSSES), so a
# database that keeps dropping connections (or a document whose query crashes the server) still
# ends, failed with a message that names the database. With the database still down, nothing can
# be recorded, so the run first waits for it, with a growing pause, up to
# KNOWLEDGE_DATABASE_WAIT_SECONDS: a restart shorter than that costs nothing (the attempt is given
# back and the work sent again at once); a longer outage is left to the lease, which runs out, and
# to the watchdog, which sends the work as for a worker that died. The wait writes only under the
# run's token, so a run the watchdog handed over meanwhile stops without writing. A task delivered
# while the database is down waits the same way before it claims its work (its message is gone
# once it fails, and the work with it until the watchdog sends it again).
# Only the connection breaking counts (no SQLSTATE: the client lost it; class 08; the server
# shutting down or starting) and a deadlock or serialization failure: other OperationalErrors (a
# statement timeout, a value PostgreSQL cannot store) would fail the same way every time.
_TRANSIENT_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "40P01", "40001"})


def _connection_broke(exc: BaseException) -> bool:
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES


def _connections_lost_message(losses: int, work: str, then: str) -> str:
    return (f"The database connection was lost {losses} times while {work} (a database restart, a failover, or a "
            f"connection pooler or network dropping connections; a deadlock the database broke counts too); the "
            f"worker's log has each one. {then}")


_T = TypeVar("_T")


def _database_retried(write: Callable[[], _T]) -> _T:
    """`write()`, and again on a new connection after a growing pause (0.25 s, doubling, at most
    5 s) while the connection keeps breaking, for up to KNOWLEDGE_DATABASE_WAIT_SECONDS; the last
    error once they are spent, and at once any error that is not the connection breaking."""
    deadline = time.monotonic() + settings.KNOWLEDGE_DATABASE_WAIT_SECONDS
    pause = 0.25
    while True:
        try:
            return write()
        except DatabaseError as exc:
            left = deadline - time.monotonic()
            if not _connection_broke(exc) or left <= 0:
                raise
        connection.close()  # the broken one is not reused; the next query connects again
        time.sleep(min(pause, left))
        pause = min(pause * 2, 5.0)


def _connection_lost(task_name: str, pk, token, send, fail) -> None:
    """Let go of the run's lease, giving its attempt back, and send the work again shortly, on a
    new connection, waiting for the database up to KNOWLEDGE_DATABASE_WAIT_SECONDS; `fail(row,
    losses)` once it has lost KNOWLEDGE_MAX_CONNECTION_LOSSES. With the database down for longer
    (a failover), the run sends itself on for as long again (task `task_name`, its token: it goes
    on as this run, and waits for the database that long once more before it claims); down past
    that, the lease runs out and the watchdog sends the work once it is back. (It left the work
    to the watchdog at once: a minute's failover cost each document five minutes and an attempt.)"""
    queryset = dispatch.task_rows(task_name)

    @transaction.atomic
    def give_back() -> None:
        row = queryset.select_for_update(of=("self",)).filter(pk=pk, run_token=token).first()
        if row is None:  # handed over meanwhile (the wait outlasted the lease), or gone
            return
        if _connection_loss_counted(row, fail):
            return
        row.attempts = max(0, row.attempts - 1)
        lease_release(row)
        row.save(update_fields=["run_token", "heartbeat_at", "attempts", "connection_losses", "updated_at"])
        send(pk, countdown=_heartbeat_seconds())

    connection.close()  # the broken one; the next query connects again
    wait = settings.KNOWLEDGE_DATABASE_WAIT_SECONDS
    try:
        _database_retried(give_back)
    except DatabaseError as exc:
        if not _connection_broke(exc) or wait <= 0:
            logger.warning("Giving back %s after its lost connection failed; the watchdog hands it over once its "
                           "lease runs out.", pk, exc_info=True)
            return
        logger.warning("The database is still unavailable after %s s; %s goes on in %s s, or is handed over by the "
                       "watchdog once it is back.", wait, pk, wait)
        dispatch.run_send_on(task_name, pk, run_token=token, countdown=wait)


def _connection_loss_counted(row, fail) -> bool:
    """One more connection lost by `row`'s run (counted by its continuation when the database was
    down at the loss); True when it was the last one allowed, and `fail(row, losses)` has failed
    the row. Without the count, work that takes its own database down (an index build that runs
    the server out of memory, say) went round for ever."""
    row.connection_losses += 1
    if row.connection_losses >= settings.KNOWLEDGE_MAX_CONNECTION_LOSSES:
        fail(row, row.connection_losses)
        return True
    return False


def _document_connections_lost(document: Document, losses: int) -> None:
    _document_mark_failed(document, "ingest_connection_lost", _connections_lost_message(
        losses, "this document was ingested", "Retry the document once the database is stable."))


def _generation_connections_lost(generation: IndexGeneration, losses: int) -> None:
    _generation_mark_failed(generation, "rebuild_connection_lost", _connections_lost_message(
        losses, "the index was rebuilt", "The active index is unchanged; start the rebuild again once the "
        "database is stable."))


# A task that runs past CELERY_TASK_SOFT_TIME_LIMIT is interrupted (SoftTimeLimitExceeded) wherever
# it is. Taken for an unexpected error, the document failed with "retry the document, and report
# it": retried, it ran into the same limit again, as long later. It fails saying which limit, and where.
_TIME_LIMIT_DOING: dict[str | None, str] = {
    Document.Status.PARSING: "converting its text",
    Document.Status.CHUNKING: "splitting it into chunks",
    Document.Status.EMBEDDING: "embedding it",
}


@dataclass(frozen=True)
class _TimeLimit:
    name: str  # "its task's time limit (SETTING = N s)"
    note: str = ""  # a sentence more, or none
    raise_it: str = "raise the limit (and CELERY_TASK_TIME_LIMIT)"


def _soft_time_limit() -> _TimeLimit:
    return _TimeLimit(
        f"its task's time limit (CELERY_TASK_SOFT_TIME_LIMIT = {settings.CELERY_TASK_SOFT_TIME_LIMIT:,} s)")


def _hard_time_limit(seconds: float) -> _TimeLimit:
    return _TimeLimit(f"its task's hard time limit (CELERY_TASK_TIME_LIMIT = {round(seconds):,} s)",
                      "Its worker process was stopped: the soft limit (CELERY_TASK_SOFT_TIME_LIMIT) is not set below "
                      "that one, or could not interrupt the run (stuck inside one call). ",
                      "raise the limit, with CELERY_TASK_SOFT_TIME_LIMIT below it")


def _document_time_limit_message(document_id, time_limit: _TimeLimit) -> str:
    status = Document.objects.filter(pk=document_id).values_list("status", flat=True).first()
    limit = (f"The pipeline ran past {time_limit.name} while {_TIME_LIMIT_DOING.get(status, 'fetching it')}. "
             f"{time_limit.note}")
    if status == Document.Status.EMBEDDING:
        return limit + (f"Embedding goes on in a new task every KNOWLEDGE_TASK_SLICE_SECONDS "
                        f"({settings.KNOWLEDGE_TASK_SLICE_SECONDS:,} s), which must be well under the limit; if it "
                        "is, one batch took this long: the embedding model is too slow or does not answer.")
    return limit + f"Retried as it is, it stops there again: split the document, or {time_limit.raise_it}."


def document_ingest(*, document_id, run_token: str | None = None, task_id: str | None = None,
                    connection_lost: bool = False) -> str:
    """Run a document's pipeline from where it stands (as the Celery task `task_id`, when one runs
    it; `connection_lost`: run `run_token` sent itself on while its database was down). Returns
    what happened: completed, awaiting_confirmation, continued (in a new task), failed, skipped,
    lease_lost, connection_lost (the database went away: sent again), or rescheduled (another
    run's lease is live: this task comes back when it runs out)."""
    claim = _database_retried(lambda: _document_claim(document_id, run_token, task_id, connection_lost))
    if claim.busy_until is not None:
        dispatch.document_send(document_id, countdown=_retry_countdown(claim.busy_until))
        return "rescheduled"
    token = claim.token
    if token is None:
        return "skipped"
    try:
        outcome = _document_run(document_id, token)
    except LeaseLost:
        return "lease_lost"
    except parsers.ConversionFailed as exc:
        _document_fail(document_id, token, "document_conversion_failed", f"Document conversion failed: {exc}")
    except fetch.FetchRefused as exc:
        _document_fail(document_id, token, exc.code, f"Fetching {_url_shown(document_id)} failed: {exc.message}")
    except DocumentEmpty:
        _document_fail(document_id, token, "document_empty", "The document has no text to index.")
    except EmbeddingFailed as exc:
        _document_fail(document_id, token, "embedding_failed", str(exc))
    except PipelineError as exc:
        _document_fail(document_id, token, exc.code, exc.message)
    except SoftTimeLimitExceeded:
        logger.warning("Ingesting document %s ran past its task's time limit", document_id, exc_info=True)
        connection.close()  # the limit may have interrupted a query: record the failure on a new connection
        _document_fail(document_id, token, "ingest_time_limit",
                       _document_time_limit_message(document_id, _soft_time_limit()))
    except Exception as exc:
        if _connection_broke(exc):
            logger.warning("Ingesting document %s lost its database connection; it is tried again.", document_id,
                           exc_info=True)
            _connection_lost(dispatch.DOCUMENT_INGEST, document_id, token, dispatch.document_send,
                             _document_connections_lost)
            return "connection_lost"
        # The task boundary: record the failure so the document is not stuck, keep the details in the log.
        logger.exception("Ingesting document %s failed", document_id)
        _document_fail(document_id, token, "ingest_error",
                       "An unexpected error stopped the pipeline; retry the document, and report it if it recurs.")
    else:
        if outcome == "completed":
            _generation_indexes_ensure(document_id)
        return outcome
    return "failed"


def _generation_indexes_ensure(document_id) -> None:
    """Give the document's KB's active generation the indexes of its own it has outgrown the
    shared ones for. The document is complete already: a failure here is logged and left to the
    watchdog."""
    try:
        generation_indexes.active_generations_index(
            knowledge_base_ids=Document.objects.filter(pk=document_id).values("knowledge_base_id"))
    except DatabaseError:
        logger.warning("Building a generation index after document %s failed; the watchdog will retry.",
                       document_id, exc_info=True)


# Generations (rebuild)


def _generation_touch(generation_id, token, **fields) -> None:
    lease_heartbeat(IndexGeneration.objects.filter(status=IndexGeneration.Status.BUILDING), pk=generation_id,
                    token=token, **fields)


def _generation_claim(generation_id, run_token: str | None, task_id: str | None,
                      connection_lost: bool = False) -> Claim:
    with transaction.atomic():
        generation = IndexGeneration.objects.select_for_update(of=("self",)).filter(
            pk=generation_id, status=IndexGeneration.Status.BUILDING
        ).first()
        if generation is None:
            return Claim()
        held = run_token and generation.run_token and str(generation.run_token) == run_token
        if not held and generation.attempts >= settings.KNOWLEDGE_MAX_ATTEMPTS and not lease_live(generation):
            _generation_mark_failed(generation, "rebuild_attempts_exhausted",
                                    f"The rebuild did not finish in {generation.attempts} attempts; start it again.")
            return Claim()
        if held and connection_lost and _connection_loss_counted(generation, _generation_connections_lost):
            return Claim()
        return lease_claim(generation, run_token=run_token, task_id=task_id, update_fields=("connection_losses",))


def _generation_mark_failed(generation: IndexGeneration, code: str, message: str) -> None:
    generation.status = IndexGeneration.Status.FAILED
    generation.error_code = code
    generation.error_message = message[:2000]
    generation.failed_at = timezone.now()
    generation.run_token = None
    generation.save(update_fields=["status", "error_code", "error_message", "failed_at", "run_token",
                                   "connection_losses", "updated_at"])
    chunks_delete(generation_id=generation.pk)


def _generation_fail(generation_id, token, code: str, message: str) -> None:
    with transaction.atomic():
        generation = IndexGeneration.objects.select_for_update(of=("self",)).filter(
            pk=generation_id, run_token=token, status=IndexGeneration.Status.BUILDING
        ).first()
        if generation is not None:
            _generation_mark_failed(generation, code, message)


def _generation_missing(generation: IndexGeneration) -> list:
    """Completed documents of the KB not (fully) in this generation."""
    in_generation = Chunk.objects.filter(generation=generation, document=OuterRef("pk"))
    return list(
        Document.objects.filter(knowledge_base_id=generation.knowledge_base_id, status=Document.Status.COMPLETED)
        .filter(~Exists(in_generation) | Exists(in_generation.filter(kind=Chunk.Kind.CHILD, embedding__isnull=True)))
        .order_by("created_at", "id")
        .values_list("pk", flat=True)
    )


def _generation_document(generation: IndexGeneration, token, document_id, model, embedder: Embedder,
                         deadline: float = math.inf) -> None:
    """Put a completed document into the generation; _SliceOver once the task's slice has run out
    after a batch (a new task goes on from the embedding cache), as a document's own run does: a
    large document on a slow model outlasts the task's time limit."""
    document = Document.objects.filter(pk=document_id).first()
    if document is None:
        return
    if not chunks_exist(generation=generation, document=document):
        # One document failing fails the rebuild: the operator is told which one.
        try:
            chunked = _chunk(_parse(document, heartbeat=lambda: _generation_touch(generation.pk, token)), generation,
                             size=document.size)
        except parsers.ConversionFailed as exc:
            raise PipelineError("document_conversion_failed",
                                f"{document.filename} failed to convert: {exc}") from exc
        except PipelineError as exc:
            raise PipelineError(exc.code, f"{document.filename}: {exc.message}") from exc
        if not chunked.children:  # it had text when it completed: a parser that reads it differently now
            raise PipelineError("document_empty", f"{document.filename} has no text to index any more: it "
                                "converts to none. Delete it or upload it again, then rebuild.")
        with transaction.atomic():
            locked = Document.objects.select_for_update(of=("self",)).filter(pk=document_id).first()
            if locked is None:
                return
            if not chunks_exist(generation=generation, document=locked):
                chunks_create(generation=generation, document=locked, chunked=chunked)
                override_apply(generation=generation, document=locked)
    texts = child_texts(document_id=document_id, generation_ids=[generation.pk])
    batches = itertools.count()

    def progress(_done: int) -> None:
        _generation_touch(generation.pk, token)
        if next(batches) and time.monotonic() > deadline:  # never before this task's first batch
            raise _SliceOver()

    _embed_missing(texts=texts, model=model, embedder=embedder, on_batch=progress)
    with transaction.atomic():
        if Document.objects.select_for_update(of=("self",)).filter(pk=document_id).exists():
            vectors_write(document_id=document_id, generation_ids=[generation.pk], model=model)


def _generation_switch(generation: IndexGeneration, token) -> bool:
    """Make the generation active if every completed document is in it; False to go round again."""
    with transaction.atomic():
        KnowledgeBase.objects.select_for_update(no_key=True, of=("self",)).filter(
            pk=generation.knowledge_base_id
        ).first()
        locked = IndexGeneration.objects.select_for_update(of=("self",)).filter(
            pk=generation.pk, run_token=token, status=IndexGeneration.Status.BUILDING
        ).first()
        if locked is None:
            raise LeaseLost()
        if _generation_missing(locked):
            return False
        now = timezone.now()
        IndexGeneration.objects.filter(
            knowledge_base_id=locked.knowledge_base_id, status=IndexGeneration.Status.ACTIVE
        ).update(status=IndexGeneration.Status.RETIRED, retired_at=now, updated_at=now)
        locked.status = IndexGeneration.Status.ACTIVE
        locked.activated_at = now
        locked.heartbeat_at = now
        locked.run_token = None
        locked.progress_done = locked.progress_total
        locked.save(update_fields=["status", "activated_at", "heartbeat_at", "run_token", "progress_done",
                                   "updated_at"])
    return True


def _generation_run(generation_id, token) -> str:
    generation = IndexGeneration.objects.select_related("knowledge_base__embedding_model").get(pk=generation_id)
    model = generation.knowledge_base.embedding_model
    embedder = embedder_for(model)
    started, deadline = time.monotonic(), _deadline()
    filled = False  # whether this task wrote documents into the generation
    total = 0
    while True:
        missing = _generation_missing(generation)
        total = Document.objects.filter(knowledge_base_id=generation.knowledge_base_id,
                                        status=Document.Status.COMPLETED).count()
        _generation_touch(generation_id, token, progress_total=total, progress_done=max(0, total - len(missing)))
        if not missing:
            if filled and time.monotonic() - started > settings.KNOWLEDGE_TASK_SLICE_SECONDS / 2:
                # Building the indexes can take long: it starts a task's slice (and its soft time
                # limit), not the end of one that embedded documents.
                dispatch.generation_send(generation_id, run_token=token)
                return "continued"
            # Before the switch: the generation is never searched without the indexes it needs.
            # Another session may hold their build: an earlier run of this rebuild killed during
            # it, whose CREATE INDEX CONCURRENTLY goes on in PostgreSQL. The switch waits for it
            # for the rest of this task's slice (it switched at once, and searches scanned every
            # row until that build ended); past that, it switches without them and the watchdog
            # builds them once they are free, as for any active generation.
            while (generation_indexes.generation_index_ensure(
                    generation_id, heartbeat=lambda: _generation_touch(generation_id, token),
                    heartbeat_seconds=_heartbeat_seconds()) == "busy"):
                _generation_touch(generation_id, token)
                if time.monotonic() >= deadline:
                    logger.warning("Rebuild %s switches without its own indexes: another session held their build "
                                   "for the whole of its slice; the watchdog builds them once it is done.",
                                   generation_id)
                    break
                time.sleep(_heartbeat_seconds())
            _generation_touch(generation_id, token)
            if _generation_switch(generation, token):
                if settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS <= 0:
                    generation_purge()
                return "activated"
            continue
        for done, document_id in enumerate(missing, start=1):
            try:
                _generation_document(generation, token, document_id, model, embedder, deadline)
            except _SliceOver:
                dispatch.generation_send(generation_id, run_token=token)
                return "continued"
            _generation_touch(generation_id, token, progress_done=max(0, total - len(missing)) + done)
            filled = True
            if time.monotonic() > deadline:
                dispatch.generation_send(generation_id, run_token=token)
                return "continued"


def generation_build(*, generation_id, run_token: str | None = None, task_id: str | None = None,
                     connection_lost: bool = False) -> str:
    """Fill a building generation from every completed document with its frozen strategy, then
    switch it active in one transaction (as the Celery task `task_id`, when one runs it;
    `connection_lost` as for document_ingest). A failure leaves the active generation untouched."""
    claim = _database_retried(lambda: _generation_claim(generation_id, run_token, task_id, connection_lost))
    if claim.busy_until is not None:
        dispatch.generation_send(generation_id, countdown=_retry_countdown(claim.busy_until))
        return "rescheduled"
    token = claim.token
    if token is None:
        return "skipped"
    try:
        return _generation_run(generation_id, token)
    except LeaseLost:
        return "lease_lost"
    except parsers.ConversionFailed as exc:
        _generation_fail(generation_id, token, "document_conversion_failed", f"A document failed to convert: {exc}")
    except PipelineError as exc:
        _generation_fail(generation_id, token, exc.code, exc.message)
    except EmbeddingFailed as exc:
        _generation_fail(generation_id, token, "embedding_failed", str(exc))
    except SoftTimeLimitExceeded:
        logger.warning("Rebuilding generation %s ran past its task's time limit", generation_id, exc_info=True)
        connection.close()
        _generation_fail(generation_id, token, "rebuild_time_limit", _generation_time_limit_message(_soft_time_limit()))
    except Exception as exc:
        if _connection_broke(exc):
            logger.warning("Rebuilding generation %s lost its database connection; it is tried again.", generation_id,
                           exc_info=True)
            _connection_lost(dispatch.KB_REBUILD, generation_id,
                             token, dispatch.generation_send, _generation_connections_lost)
            return "connection_lost"
        logger.exception("Rebuilding generation %s failed", generation_id)
        _generation_fail(generation_id, token, "rebuild_error",
                         "An unexpected error stopped the rebuild; the active index is unchanged. Start it again.")
    return "failed"


def _generation_time_limit_message(time_limit: _TimeLimit) -> str:
    return (f"The rebuild ran past {time_limit.name}; the active index is unchanged. {time_limit.note}"
            "Embedding goes on in a new task every "
            f"KNOWLEDGE_TASK_SLICE_SECONDS ({settings.KNOWLEDGE_TASK_SLICE_SECONDS:,} s), which must be well under the "
            f"limit; otherwise a document took this long to convert, or its index to build: {time_limit.raise_it}, "
            "then start the rebuild again.")


def generation_purge(*, older_than_seconds: int | None = None) -> int:
    """Delete retired generations (after the grace period) and the chunks of failed ones."""
    grace = settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS if older_than_seconds is None else older_than_seconds
    cutoff = timezone.now() - timedelta(seconds=max(0, grace))
    purged = 0
    for generation_id in IndexGeneration.objects.filter(
        status=IndexGeneration.Status.RETIRED, retired_at__lte=cutoff
    ).values_list("pk", flat=True):
        with transaction.atomic():
            chunks_delete(generation_id=generation_id)
            IndexGeneration.objects.filter(pk=generation_id).delete()
        purged += 1
    if purged:
        generation_indexes.stale_indexes_drop()
    return purged


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
    time_limit = _hard_time_limit(seconds)
    with transaction.atomic():
        _waits_bounded()
        token = _run_token_held(rows, object_id, task_id=task_id)
        if token is None:
            return False
        if task_name == dispatch.DOCUMENT_INGEST:
            _document_fail(object_id, token, "ingest_time_limit", _document_time_limit_message(object_id, time_limit))
        else:
            _generation_fail(object_id, token, "rebuild_time_limit", _generation_time_limit_message(time_limit))
    logger.warning("%s[%s] for %s was stopped at its hard time limit (%s s); it is failed.", task_name, task_id,
                   object_id, seconds)
    return True


# Watchdog

# Documents a watchdog pass looks at, at most (each kind).
WATCHDOG_BATCH = 1000
# Queued and claimed by no run.
UNCLAIMED = Q(status=Document.Status.QUEUED, run_token__isnull=True)


def _lanes_by_queue_length() -> tuple[list[Q], list[Q]]:
    """The ingestion lanes (selectors.document_queue_lanes) whose Celery queue is empty, and those
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
                _document_mark_failed(document, "ingest_stalled", _attempts_spent(document.attempts))
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
                _generation_mark_failed(generation, "rebuild_stalled",
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
