"""Ingest a document: fetch (a URL source), parse, chunk, embed, and complete it in every live
generation. The run's lease, slices and recovery are apps.knowledge.runs'.

- A document's chunks in a generation are created once, under the document's row lock, with
  deterministic ids and positions (unique per generation, document, kind, index): a repeated
  stage finds them and goes on. Operators' chunk overrides are re-applied in that same
  transaction (apps.knowledge.chunk_overrides), before anything is embedded. Vectors go to the
  embedding cache batch by batch (the progress), then onto the chunks — with their keyword
  tsvector — in the one transaction that completes the document, so searches never see half a
  document.
- Ingestion writes to every *live* generation (active, and building during a rebuild: see
  apps.knowledge.rebuild); completing a document waits for (locks out) a generation switch. Lock
  order: knowledge base, then document.
"""

from __future__ import annotations

import hashlib
import logging
import time

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from apps.knowledge import dispatch, generation_indexes
from apps.knowledge.chunk_overrides import override_apply
from apps.knowledge.leases import Claim, LeaseLost, lease_claim, lease_heartbeat, lease_live
from apps.knowledge.models import Document, DocumentContent, IndexGeneration
from apps.knowledge.pipeline import fetch, parsers
from apps.knowledge.pipeline.embedders import EmbeddingFailed, embedder_for
from apps.knowledge.pipeline.index import child_texts, chunks_create, chunks_exist, vectors_missing, vectors_write
from apps.knowledge.pipeline.stages import chunks_cut, embeddings_fill, text_parse
from apps.knowledge.runs import (
    PipelineError,
    SliceOver,
    TimeLimit,
    connection_broke,
    connection_loss_counted,
    connection_loss_recover,
    connections_lost_message,
    database_retried,
    retry_countdown,
    slice_deadline,
    soft_time_limit,
    work_mark_failed,
)
from apps.knowledge.services import chunks_delete

logger = logging.getLogger("bailinghub.knowledge")


# Completing a document re-checks the generations it must be in; a rebuild starting meanwhile
# sends it round again. More rounds than this means something is wrong.
MAX_ROUNDS = 5


class DocumentEmpty(Exception):
    pass


def _live_generations(kb_id) -> list[IndexGeneration]:
    return list(IndexGeneration.objects.filter(knowledge_base_id=kb_id, status__in=IndexGeneration.LIVE)
                .order_by("number"))


def _lock_kb_shared(kb_id) -> None:
    """FOR SHARE on the KB row: a generation switch (FOR NO KEY UPDATE) waits for us, and we for it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM knowledge_knowledgebase WHERE id = %s FOR SHARE", [kb_id])


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
            document_mark_failed(document, "ingest_attempts_exhausted", attempts_spent(document.attempts))
            return Claim()
        if held and connection_lost and connection_loss_counted(document, _document_connections_lost):
            return Claim()
        if document.status == Document.Status.PENDING:
            document.status = Document.Status.QUEUED
            document.queued_at = timezone.now()
        return lease_claim(document, run_token=run_token, task_id=task_id,
                           update_fields=("status", "queued_at", "connection_losses"))


def attempts_spent(attempts: int) -> str:
    """Why a document ran out of attempts, for the operator: a run is only counted when a worker
    takes the document, so each one ended with its worker gone — the document that crashes its
    worker (a file that exhausts its memory) fails this way, and retrying it as it is crashes again."""
    return (f"The pipeline did not finish in {attempts} attempts: each time, the worker running it stopped before "
            "it was done (it was killed, for instance out of memory, or lost the database); the worker's log says "
            "which. If this file is what stops the worker, split it before retrying it.")


def document_mark_failed(document: Document, code: str, message: str) -> None:
    work_mark_failed(document, code, message)


def _url_shown(document_id) -> str:
    url = Document.objects.filter(pk=document_id).values_list("source_url", flat=True).first() or "the URL"
    return url[:300]


def document_fail(document_id, token, code: str, message: str) -> None:
    with transaction.atomic():
        document = Document.objects.select_for_update(of=("self",)).filter(pk=document_id, run_token=token).first()
        if document is not None:
            document_mark_failed(document, code, message)


def _document_chunks_ensure(document: Document, token, parsed: parsers.ParsedDocument | None,
                            generations: list[IndexGeneration]) -> parsers.ParsedDocument | None:
    """Create the document's chunks in each of `generations` that lacks them."""
    needed = [generation for generation in generations if not chunks_exist(generation=generation, document=document)]
    if not needed:
        return parsed
    parsed = parsed or text_parse(document, heartbeat=lambda: _document_touch(document.pk, token))
    pieces = {generation.pk: chunks_cut(parsed, generation, size=document.size) for generation in needed}
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
    deadline = slice_deadline()
    parsed = None
    if document.source_url and document.fetched_at is None:
        document = _document_fetch(document, token)
    if document.status in (Document.Status.PENDING, Document.Status.QUEUED, Document.Status.PARSING,
                           Document.Status.CHUNKING):
        _document_touch(document_id, token, status=Document.Status.PARSING, parsing_started_at=timezone.now())
        parsed = text_parse(document, heartbeat=lambda: _document_touch(document_id, token))
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
                raise SliceOver()

        try:
            embeddings_fill(texts=texts, model=model, embedder=embedder, on_batch=progress)
        except SliceOver:
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


def _document_connections_lost(document: Document, losses: int) -> None:
    document_mark_failed(document, "ingest_connection_lost", connections_lost_message(
        losses, "this document was ingested", "Retry the document once the database is stable."))


# What a run past its time limit was doing, by the document's status (runs.TimeLimit).
_TIME_LIMIT_DOING: dict[str | None, str] = {
    Document.Status.PARSING: "converting its text",
    Document.Status.CHUNKING: "splitting it into chunks",
    Document.Status.EMBEDDING: "embedding it",
}


def document_time_limit_message(document_id, time_limit: TimeLimit) -> str:
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
    claim = database_retried(lambda: _document_claim(document_id, run_token, task_id, connection_lost))
    if claim.busy_until is not None:
        dispatch.document_send(document_id, countdown=retry_countdown(claim.busy_until))
        return "rescheduled"
    token = claim.token
    if token is None:
        return "skipped"
    try:
        outcome = _document_run(document_id, token)
    except LeaseLost:
        return "lease_lost"
    except parsers.ConversionFailed as exc:
        document_fail(document_id, token, "document_conversion_failed", f"Document conversion failed: {exc}")
    except fetch.FetchRefused as exc:
        document_fail(document_id, token, exc.code, f"Fetching {_url_shown(document_id)} failed: {exc.message}")
    except DocumentEmpty:
        document_fail(document_id, token, "document_empty", "The document has no text to index.")
    except EmbeddingFailed as exc:
        document_fail(document_id, token, "embedding_failed", str(exc))
    except PipelineError as exc:
        document_fail(document_id, token, exc.code, exc.message)
    except SoftTimeLimitExceeded:
        logger.warning("Ingesting document %s ran past its task's time limit", document_id, exc_info=True)
        connection.close()  # the limit may have interrupted a query: record the failure on a new connection
        document_fail(document_id, token, "ingest_time_limit",
                      document_time_limit_message(document_id, soft_time_limit()))
    except Exception as exc:
        if connection_broke(exc):
            logger.warning("Ingesting document %s lost its database connection; it is tried again.", document_id,
                           exc_info=True)
            connection_loss_recover(dispatch.DOCUMENT_INGEST, document_id, token, dispatch.document_send,
                                    _document_connections_lost)
            return "connection_lost"
        # The task boundary: record the failure so the document is not stuck, keep the details in the log.
        logger.exception("Ingesting document %s failed", document_id)
        document_fail(document_id, token, "ingest_error",
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
