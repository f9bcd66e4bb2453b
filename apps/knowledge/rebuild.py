"""Rebuild a knowledge base's index: fill a building generation from every completed document
with its frozen strategy, then switch it active in one transaction that waits for (locks out)
documents being completed (apps.knowledge.ingest writes to it meanwhile, as to the active one);
purge retired generations. A failure leaves the active generation untouched. The run's lease,
slices and recovery are apps.knowledge.runs'."""

from __future__ import annotations

import itertools
import logging
import math
import time
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from apps.knowledge import dispatch, generation_indexes
from apps.knowledge.chunk_overrides import override_apply
from apps.knowledge.leases import Claim, LeaseLost, lease_claim, lease_heartbeat, lease_live
from apps.knowledge.models import Chunk, Document, IndexGeneration, KnowledgeBase
from apps.knowledge.pipeline import parsers
from apps.knowledge.pipeline.embedders import Embedder, EmbeddingFailed, embedder_for
from apps.knowledge.pipeline.index import child_texts, chunks_create, chunks_exist, vectors_write
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
    heartbeat_seconds,
    retry_countdown,
    slice_deadline,
    soft_time_limit,
    work_mark_failed,
)
from apps.knowledge.services import chunks_delete

logger = logging.getLogger("bailinghub.knowledge")


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
            generation_mark_failed(generation, "rebuild_attempts_exhausted",
                                   f"The rebuild did not finish in {generation.attempts} attempts; start it again.")
            return Claim()
        if held and connection_lost and connection_loss_counted(generation, _generation_connections_lost):
            return Claim()
        return lease_claim(generation, run_token=run_token, task_id=task_id, update_fields=("connection_losses",))


def generation_mark_failed(generation: IndexGeneration, code: str, message: str) -> None:
    """Fail the rebuild; the chunks it wrote go with it (the active generation is untouched)."""
    work_mark_failed(generation, code, message)
    chunks_delete(generation_id=generation.pk)


def generation_fail(generation_id, token, code: str, message: str) -> None:
    with transaction.atomic():
        generation = IndexGeneration.objects.select_for_update(of=("self",)).filter(
            pk=generation_id, run_token=token, status=IndexGeneration.Status.BUILDING
        ).first()
        if generation is not None:
            generation_mark_failed(generation, code, message)




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
    """Put a completed document into the generation; SliceOver once the task's slice has run out
    after a batch (a new task goes on from the embedding cache), as a document's own run does: a
    large document on a slow model outlasts the task's time limit."""
    document = Document.objects.filter(pk=document_id).first()
    if document is None:
        return
    if not chunks_exist(generation=generation, document=document):
        # One document failing fails the rebuild: the operator is told which one.
        try:
            parsed = text_parse(document, heartbeat=lambda: _generation_touch(generation.pk, token))
            chunked = chunks_cut(parsed, generation, size=document.size)
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
            raise SliceOver()

    embeddings_fill(texts=texts, model=model, embedder=embedder, on_batch=progress)
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
    started, deadline = time.monotonic(), slice_deadline()
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
                    heartbeat_seconds=heartbeat_seconds()) == "busy"):
                _generation_touch(generation_id, token)
                if time.monotonic() >= deadline:
                    logger.warning("Rebuild %s switches without its own indexes: another session held their build "
                                   "for the whole of its slice; the watchdog builds them once it is done.",
                                   generation_id)
                    break
                time.sleep(heartbeat_seconds())
            _generation_touch(generation_id, token)
            if _generation_switch(generation, token):
                if settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS <= 0:
                    generation_purge()
                return "activated"
            continue
        for done, document_id in enumerate(missing, start=1):
            try:
                _generation_document(generation, token, document_id, model, embedder, deadline)
            except SliceOver:
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
    claim = database_retried(lambda: _generation_claim(generation_id, run_token, task_id, connection_lost))
    if claim.busy_until is not None:
        dispatch.generation_send(generation_id, countdown=retry_countdown(claim.busy_until))
        return "rescheduled"
    token = claim.token
    if token is None:
        return "skipped"
    try:
        return _generation_run(generation_id, token)
    except LeaseLost:
        return "lease_lost"
    except parsers.ConversionFailed as exc:
        generation_fail(generation_id, token, "document_conversion_failed", f"A document failed to convert: {exc}")
    except PipelineError as exc:
        generation_fail(generation_id, token, exc.code, exc.message)
    except EmbeddingFailed as exc:
        generation_fail(generation_id, token, "embedding_failed", str(exc))
    except SoftTimeLimitExceeded:
        logger.warning("Rebuilding generation %s ran past its task's time limit", generation_id, exc_info=True)
        connection.close()
        generation_fail(generation_id, token, "rebuild_time_limit", generation_time_limit_message(soft_time_limit()))
    except Exception as exc:
        if connection_broke(exc):
            logger.warning("Rebuilding generation %s lost its database connection; it is tried again.", generation_id,
                           exc_info=True)
            connection_loss_recover(dispatch.KB_REBUILD, generation_id,
                                    token, dispatch.generation_send, _generation_connections_lost)
            return "connection_lost"
        logger.exception("Rebuilding generation %s failed", generation_id)
        generation_fail(generation_id, token, "rebuild_error",
                        "An unexpected error stopped the rebuild; the active index is unchanged. Start it again.")
    return "failed"


def generation_time_limit_message(time_limit: TimeLimit) -> str:
    return (f"The rebuild ran past {time_limit.name}; the active index is unchanged. {time_limit.note}"
            "Embedding goes on in a new task every "
            f"KNOWLEDGE_TASK_SLICE_SECONDS ({settings.KNOWLEDGE_TASK_SLICE_SECONDS:,} s), which must be well under the "
            f"limit; otherwise a document took this long to convert, or its index to build: {time_limit.raise_it}, "
            "then start the rebuild again.")


def _generation_connections_lost(generation: IndexGeneration, losses: int) -> None:
    generation_mark_failed(generation, "rebuild_connection_lost", connections_lost_message(
        losses, "the index was rebuilt", "The active index is unchanged; start the rebuild again once the "
        "database is stable."))


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
