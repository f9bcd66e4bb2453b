"""Writes an operator (builder API or admin) makes: embedding models, knowledge bases, documents,
rebuilds, route bindings. The pipeline's own writes are in apps.knowledge.ingest and rebuild."""

from __future__ import annotations

import hashlib
import logging
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from apps.core.errors import ApiError
from apps.core.integrity import unique_race
from apps.core.names import name_taken, names_lock
from apps.knowledge import dispatch, errors
from apps.knowledge.default_models import DEFAULT_EMBEDDING_MODELS
from apps.knowledge.models import (
    EMBEDDING_MAX_DIMENSION,
    KNOWLEDGE_BASE_NAME_CONSTRAINT,
    Document,
    DocumentContent,
    EmbeddingModel,
    Fusion,
    IndexGeneration,
    KnowledgeBase,
    RouteKnowledgeBinding,
)
from apps.knowledge.pipeline import fetch, index, parsers
from apps.knowledge.pipeline.embedders import EmbeddingFailed, embedder_class
from apps.knowledge.pipeline.rerank import RerankConfigInvalid, reranker_validate
from apps.knowledge.pipeline.strategy import StrategyInvalid, strategy_parse
from apps.knowledge.pipeline.terms import ANALYZER as KEYWORD_ANALYZER
from apps.projects.models import Project
from apps.routes.models import Route

logger = logging.getLogger("bailinghub.knowledge")


# Embedding models


_SECRET_NAME = re.compile(r"key|token|secret|password|passwd|auth|credential", re.IGNORECASE)


def embedding_model_check(*, name: str, provider: str, dimension: int, options: Any) -> None:
    """What registration refuses: an unknown provider, a dimension out of range or not the
    provider's own, and options its embedder does not take (not a JSON object, an option it does
    not read — a key typed in as one is told where keys go —, a number option that is not a
    number, an openai model without an http(s) base_url). Building the embedder
    checks them as its first use would, so a model cannot be registered only to fail every
    ingestion and search later."""
    try:
        embedder = embedder_class(provider)
    except EmbeddingFailed as exc:
        raise errors.KnowledgeBaseInvalid(str(exc), code="unknown_embedding_provider") from exc
    if not 1 <= dimension <= EMBEDDING_MAX_DIMENSION:
        raise errors.EmbeddingDimensionMismatch(f"dimension must be between 1 and {EMBEDDING_MAX_DIMENSION}.")
    native = embedder.native_dimension
    if native is not None and dimension != native:
        raise errors.EmbeddingDimensionMismatch(f"The {provider} provider embeds in {native} dimensions.")
    try:
        embedder(name=name, dimension=dimension, options=options)
    except EmbeddingFailed as exc:
        raise errors.EmbeddingOptionsInvalid(str(exc)) from exc
    problem = embedder.registration_problem(options or {})
    if problem is not None:
        raise errors.EmbeddingOptionsInvalid(problem)
    names = embedder.option_names
    unknown = sorted(set(options or {}) - names if names is not None else
                     {key for key in options or {} if _SECRET_NAME.search(key)})
    if unknown:
        message = f"Unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}" + (
            f": the {provider} provider takes {', '.join(sorted(names))}." if names is not None else ".")
        if any(_SECRET_NAME.search(key) for key in unknown):
            message += (" A key is never stored here, where every operator can read it: put it in an environment "
                        "variable of the web server and the workers, and name that variable in api_key_env.")
        raise errors.EmbeddingOptionsInvalid(message)


@transaction.atomic
def embedding_model_register(*, name: str, provider: str, dimension: int, options: dict | None = None
                             ) -> EmbeddingModel:
    """Register a model (its KBs' generations get their vector indexes as they grow: generation_indexes)."""
    embedding_model_check(name=name, provider=provider, dimension=dimension, options=options)
    return EmbeddingModel.objects.create(name=name, provider=provider, dimension=dimension, options=options or {})


def embedding_models_restore_defaults(*, model: Any = EmbeddingModel, using: str = "default") -> None:
    """Register the local models again when the database has no embedding model at all: a flushed
    database (`manage.py flush`, a transactional test's teardown) keeps its schema but loses the
    rows migration 0002 wrote. A database with any model is left as it is (an operator may have
    deleted a default on purpose). Runs after every migrate and flush (post_migrate), with the
    model class as the migrations have made it so far (`model`)."""
    if model.objects.using(using).exists():
        return
    for values in DEFAULT_EMBEDDING_MODELS:
        model.objects.using(using).create(options={}, **values)


@transaction.atomic
def embedding_model_delete(*, model: EmbeddingModel) -> None:
    """Delete an unused model (a model with knowledge bases is protected)."""
    model.delete()


# Knowledge bases


def _strategy(value: Any) -> dict:
    try:
        return strategy_parse(value, defaults=settings.KNOWLEDGE_DEFAULT_CHUNK_STRATEGY,
                              parent_max_chars=settings.KNOWLEDGE_PARENT_MAX_CHARS).public()
    except StrategyInvalid as exc:
        raise errors.KnowledgeBaseInvalid(str(exc), fields=exc.fields) from exc


def generation_snapshot(chunk_strategy: dict) -> dict:
    return strategy_parse(chunk_strategy, defaults=settings.KNOWLEDGE_DEFAULT_CHUNK_STRATEGY,
                          parent_max_chars=settings.KNOWLEDGE_PARENT_MAX_CHARS,
                          window_chars=settings.KNOWLEDGE_WINDOW_CHARS).snapshot()


RERANK_FIELDS = ("rerank_base_url", "rerank_model", "rerank_api_key_env", "rerank_candidates", "rerank_timeout_ms")


def _fusion(value: Any) -> None:
    if value not in Fusion.values:
        raise errors.KnowledgeBaseInvalid(f"fusion: one of {', '.join(Fusion.values)} is required.",
                                          fields={"fusion": [f"One of {', '.join(Fusion.values)} is required."]})


def _reranker(value: Any) -> dict:
    """KnowledgeBase field values for a reranker setting (null turns it off)."""
    try:
        return reranker_validate(value)
    except RerankConfigInvalid as exc:
        raise errors.KnowledgeBaseInvalid(f"reranker: {exc}", fields=exc.fields) from exc


RERANK_KEY_SUPERUSER = ("Only a superuser may name a key variable for a reranker, or point a reranker that "
                        "sends one elsewhere: the key is the deployment's, and the base URL receives it.")


def reranker_key_check(*, kb: KnowledgeBase | None, fields: dict, user: Any) -> None:
    """A key variable names a secret of the whole deployment, sent to the reranker's base URL: a
    project's operator who could set both had any RERANK_ key sent to a host of their own. Others
    than superusers keep a keyed reranker as a superuser set it (the same variable, the same base
    URL), or have none. `user` None: a caller of the code itself (seeds, commands)."""
    if user is None or user.is_superuser or not fields["rerank_api_key_env"]:
        return
    if kb is not None and (kb.rerank_api_key_env, kb.rerank_base_url) == (
            fields["rerank_api_key_env"], fields["rerank_base_url"]):
        return
    raise errors.KnowledgeBaseInvalid(f"reranker.api_key_env: {RERANK_KEY_SUPERUSER}",
                                      fields={"reranker.api_key_env": [RERANK_KEY_SUPERUSER]})


@transaction.atomic
def knowledge_base_create(
    *,
    project: Project,
    name: str,
    embedding_model: EmbeddingModel,
    embedding_dim: int,
    description: str = "",
    chunk_strategy: dict | None = None,
    require_confirmation: bool = False,
    fusion: str = "convex",
    reranker: dict | None = None,
    enabled: bool = True,
    user=None,
) -> KnowledgeBase:
    """Create a KB with its first (empty, active) index generation. The model and dimension are
    frozen from here on; the dimension must be the model's."""
    if embedding_dim != embedding_model.dimension:
        raise errors.EmbeddingDimensionMismatch(
            f"embedding_dim must be {embedding_model.dimension} for {embedding_model.name}; got {embedding_dim}."
        )
    strategy = _strategy(chunk_strategy)
    rerank_fields = _reranker(reranker)
    reranker_key_check(kb=None, fields=rerank_fields, user=user)
    _fusion(fusion)
    names_lock("knowledge_base", project.pk)
    if name_taken(KnowledgeBase.objects.filter(project=project), name):
        raise errors.KnowledgeBaseNameTaken()
    with _name_race():
        kb = KnowledgeBase.objects.create(
            project=project, name=name, description=description, embedding_model=embedding_model,
            embedding_dim=embedding_dim, chunk_strategy=strategy, require_confirmation=require_confirmation,
            fusion=fusion, enabled=enabled, created_by=user, **rerank_fields,
        )
    now = timezone.now()
    IndexGeneration.objects.create(knowledge_base=kb, number=1, status=IndexGeneration.Status.ACTIVE,
                                   chunk_strategy=generation_snapshot(strategy), started_at=now, activated_at=now)
    return kb


@transaction.atomic
def knowledge_base_update(*, kb: KnowledgeBase, user: Any = None, **changes: Any) -> KnowledgeBase:
    """Change name, description, enabled, chunk_strategy (used by the next rebuild),
    require_confirmation, fusion or the reranker (a key variable: reranker_key_check, for `user`).
    The embedding model and dimension cannot change."""
    kb = KnowledgeBase.objects.select_for_update(of=("self",)).get(pk=kb.pk)
    model_id = changes.pop("embedding_model_id", None)
    if model_id is not None and str(model_id) != str(kb.embedding_model_id):
        raise errors.EmbeddingModelFrozen()
    dim = changes.pop("embedding_dim", None)
    if dim is not None and dim != kb.embedding_dim:
        raise errors.EmbeddingModelFrozen()
    if "chunk_strategy" in changes:
        value = changes["chunk_strategy"]
        # A partial strategy changes the fields it names and keeps the KB's others: a fixed KB
        # given only max_chars stays fixed (it became auto, the default, without a word).
        changes["chunk_strategy"] = _strategy({**kb.chunk_strategy, **value} if isinstance(value, dict) else value)
    if "fusion" in changes:
        _fusion(changes["fusion"])
    if "reranker" in changes:
        rerank_fields = _reranker(changes.pop("reranker"))
        reranker_key_check(kb=kb, fields=rerank_fields, user=user)
        changes.update(rerank_fields)
    # A name kept as it was is not checked: one saved before names were compared as they read stays.
    if "name" in changes and changes["name"] != kb.name:
        names_lock("knowledge_base", kb.project_id)
        if name_taken(KnowledgeBase.objects.filter(project=kb.project_id).exclude(pk=kb.pk), changes["name"]):
            raise errors.KnowledgeBaseNameTaken()
    allowed = {"name", "description", "enabled", "chunk_strategy", "require_confirmation", "fusion", *RERANK_FIELDS}
    for field, value in changes.items():
        if field not in allowed:
            raise errors.KnowledgeBaseInvalid(f"{field} cannot be changed.", fields={field: ["Cannot be changed."]})
        setattr(kb, field, value)
    with _name_race():
        kb.save()
    return kb


def _name_race() -> AbstractContextManager[None]:
    """A KB write in its own savepoint: another save that took the name since this one's check
    (two at once) is the check's error, not an IntegrityError (a 500)."""
    return unique_race(KNOWLEDGE_BASE_NAME_CONSTRAINT, errors.KnowledgeBaseNameTaken)


# Documents


def _read_upload(upload) -> bytes:
    upload.seek(0)
    return upload.read()


def upload_body_max_bytes() -> int:
    """The largest multipart body an upload may send: a full batch of files at the per-file
    limit plus room for the form's other fields. Each file is then held to its own limit."""
    return settings.KNOWLEDGE_UPLOAD_MAX_BYTES * settings.KNOWLEDGE_UPLOAD_MAX_FILES + 1024 * 1024


@dataclass(frozen=True)
class UploadRefusal:
    """A file of a batch refused: its error's code and message (the API's), its size, and the
    parser's own words (`detail`) for an unsupported or unreadable file, for the console's message."""

    filename: str
    code: str
    message: str
    size: int = 0
    detail: str = ""


@dataclass(frozen=True)
class UploadBatch:
    documents: list[Document]
    refused: list[UploadRefusal]


def _upload_name(upload) -> str:
    return (upload.name or "").rsplit("/", 1)[-1][:255]


def _upload_check(upload, *, refuse_blank: bool = False) -> tuple[str, str]:
    """(filename, file_type) of an acceptable file: size, type (extension and content agree) and
    the cheap part of conversion; raises the file's error otherwise. With `refuse_blank`, a text
    or Markdown file of only white space is refused too (document_empty)."""
    name = _upload_name(upload)
    limit = settings.KNOWLEDGE_UPLOAD_MAX_BYTES
    if upload.size > limit:
        raise errors.FileTooLarge(f"File too large: {name} is {upload.size} bytes; the limit is {limit}.",
                                  filename=name, max_bytes=limit)
    data = _read_upload(upload)
    try:
        file_type = parsers.file_type_detect(filename=name, data=data)
    except parsers.UnsupportedFileType as exc:
        raise errors.UnsupportedFileType(f"Unsupported file type: {exc}", filename=name) from exc
    try:
        has_text = parsers.document_check(file_type=file_type, data=data)
    except parsers.ConversionFailed as exc:
        raise errors.DocumentConversionFailed(f"Document conversion failed: {name}: {exc}",
                                              filename=name) from exc
    if refuse_blank and not has_text:
        raise errors.DocumentBlank(f"{name} has no text: only white space.", filename=name)
    return name, file_type


def _upload_count_check(files: list) -> None:
    if not files:
        raise errors.FileRequired()
    if len(files) > settings.KNOWLEDGE_UPLOAD_MAX_FILES:
        raise errors.TooManyFiles(f"At most {settings.KNOWLEDGE_UPLOAD_MAX_FILES} files per upload.")


def _documents_create(*, kb: KnowledgeBase, checked: list[tuple[object, str, str]], user) -> list[Document]:
    documents = []
    with transaction.atomic():
        for upload, name, file_type in checked:
            data = _read_upload(upload)
            document = Document.objects.create(
                knowledge_base=kb, filename=name, file_type=file_type, size=len(data),
                content_hash=hashlib.sha256(data).hexdigest(), uploaded_by=user,
            )
            DocumentContent.objects.create(document=document, data=data)
            documents.append(document)
        dispatch.documents_enqueue([document.pk for document in documents])
    # Queued (or left to the watchdog) once committed: the upload's answer said "pending" with no
    # queued_at, for rows already queued. Read back in one query (still pending inside a caller's
    # transaction: they are queued when it commits).
    fields = ("status", "queued_at", "heartbeat_at")
    fresh = Document.objects.only(*fields).in_bulk([document.pk for document in documents])
    for document in documents:
        for field in fields if document.pk in fresh else ():  # deleted since the commit: as it was made
            setattr(document, field, getattr(fresh[document.pk], field))
    return documents


def document_upload(*, kb: KnowledgeBase, files: list, user=None) -> list[Document]:
    """Accept uploaded files into a KB, all or none. Each file is checked first: size, type
    (extension and content agree) and the cheap part of conversion; then the documents are
    created `pending` and queued for the pipeline after commit. Files are read one at a time
    (Django keeps large uploads on disk), so memory holds one file, not the whole upload."""
    _upload_count_check(files)
    checked = [(upload, *_upload_check(upload)) for upload in files]
    return _documents_create(kb=kb, checked=checked, user=user)


def document_upload_batch(*, kb: KnowledgeBase, files: list, user=None) -> UploadBatch:
    """Accept the good files of a batch and name each refused one with its reason (empty, too
    large, unsupported type, cannot be converted); a refused file changes nothing for the others.
    Too many files, or none, refuses the whole batch."""
    _upload_count_check(files)
    checked: list[tuple[object, str, str]] = []
    refused: list[UploadRefusal] = []
    for upload in files:
        name = _upload_name(upload)
        if not upload.size:
            # An empty file would only fail later in the pipeline; at upload it is plainly a mistake.
            refused.append(UploadRefusal(name, "document_empty", f"{name} is empty (0 bytes).", size=0))
            continue
        try:  # the console's upload: a blank file is as plainly a mistake as an empty one
            checked.append((upload, *_upload_check(upload, refuse_blank=True)))
        except ApiError as exc:
            refused.append(UploadRefusal(name, exc.code, exc.message, size=upload.size,
                                         detail=str(exc.__cause__ or "")))
    documents = _documents_create(kb=kb, checked=checked, user=user) if checked else []
    return UploadBatch(documents=documents, refused=refused)


_URL_ERRORS = {"url_invalid": errors.UrlInvalid, "url_address_refused": errors.UrlAddressRefused,
               "url_unresolvable": errors.UrlUnresolvable}


def document_register_url(*, kb: KnowledgeBase, url: str, user=None) -> Document:
    """Register an external source: a document the worker fetches from `url` (pipeline.fetch)
    before parsing. The URL is checked now (scheme, no credentials, and every address its host
    resolves to) and again at each fetch."""
    try:
        fetch.url_check(url)
    except fetch.FetchRefused as exc:
        raise _URL_ERRORS.get(exc.code, errors.UrlInvalid)(exc.message, fields={"url": [exc.message]}) from exc
    with transaction.atomic():
        document = Document.objects.create(
            knowledge_base=kb, filename=fetch.filename_for(url), file_type=fetch.file_type_guess(url), size=0,
            content_hash="", source_url=url, uploaded_by=user,
        )
        dispatch.documents_enqueue([document.pk])
    return document


def _document_locked(document: Document) -> Document:
    """The document's row again, locked until the transaction ends (DocumentNotFound once deleted)."""
    locked = Document.objects.select_for_update(of=("self",)).filter(pk=document.pk).first()
    if locked is None:
        raise errors.DocumentNotFound()
    return locked


def _document_requeue(document: Document, *changed: str) -> Document:
    """Queue a locked document's pipeline from the start, clearing its last failure; `changed`
    names other fields the caller has set."""
    now = timezone.now()
    document.status = Document.Status.QUEUED
    document.error_code = ""
    document.error_message = ""
    document.attempts = document.connection_losses = 0
    document.run_token = None
    document.queued_at = now
    document.heartbeat_at = now
    document.failed_at = None
    document.save(update_fields=["status", *changed, "error_code", "error_message", "attempts", "connection_losses",
                                 "run_token", "queued_at", "heartbeat_at", "failed_at", "updated_at"])
    dispatch.document_send(document.pk)
    return document


@transaction.atomic
def document_refetch(*, document: Document) -> Document:
    """Fetch a URL document again and re-index it if its content changed. Until it completes again
    the document is out of searches, as any document being (re)ingested is."""
    document = _document_locked(document)
    if not document.source_url:
        raise errors.NotUrlSource()
    if document.status in Document.IN_PROGRESS:
        raise errors.InvalidDocumentState(f"Invalid document state: {document.status}; the document is being "
                                          "ingested, fetch it again once it is done.", status_value=document.status)
    document.fetched_at = None
    return _document_requeue(document, "fetched_at")


@transaction.atomic
def document_confirm(*, document: Document) -> Document:
    """Let an awaiting document go on to embedding: a new run, with attempts of its own, as a retry
    starts one. The run that made the preview finished; counted on, the attempts spent getting
    there failed the document at once (ingest_attempts_exhausted) when it was the last one — with
    KNOWLEDGE_MAX_ATTEMPTS=1, every confirmed document."""
    document = _document_locked(document)
    if document.status != Document.Status.AWAITING_CONFIRMATION:
        raise errors.InvalidDocumentState(f"Invalid document state: {document.status}; only a document "
                                          "awaiting confirmation can be confirmed.", status_value=document.status)
    now = timezone.now()
    document.status = Document.Status.EMBEDDING
    document.confirmed_at = now
    document.heartbeat_at = now
    document.run_token = None
    document.attempts = document.connection_losses = 0
    document.save(update_fields=["status", "confirmed_at", "heartbeat_at", "run_token", "attempts",
                                 "connection_losses", "updated_at"])
    dispatch.document_send(document.pk)
    return document


@transaction.atomic
def document_set_enabled(*, document: Document, enabled: bool) -> Document:
    """Turn a document on or off for every reader: searches (agents', turns', answers', the
    playground's) skip the chunks of one that is off, and a reference into it reads 409
    knowledge_changed. Its chunks and index stay, and ingestion, retries and rebuilds go on in
    any state; so turning it on again needs no work. DocumentNotFound once deleted."""
    updated_at = timezone.now()
    if not Document.objects.filter(pk=document.pk).update(enabled=enabled, updated_at=updated_at):
        raise errors.DocumentNotFound()
    document.enabled, document.updated_at = enabled, updated_at
    return document


@transaction.atomic
def document_retry(*, document: Document) -> Document:
    """Run a failed document's pipeline again from the start (its chunks and cached vectors
    are reused where they are unchanged)."""
    document = _document_locked(document)
    if document.status != Document.Status.FAILED:
        raise errors.InvalidDocumentState(f"Invalid document state: {document.status}; only a failed "
                                          "document can be retried.", status_value=document.status)
    return _document_requeue(document)


def document_delete(*, document: Document) -> None:
    """Delete a document with its chunks and vectors in every generation, in one transaction.

    The document row is locked first, so a worker indexing it either finished writing before
    (and its vectors go too) or finds it gone and writes nothing. If the vectors cannot be
    removed (a lock held too long, the database refusing), nothing is deleted: 502.
    """
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = %s", [f"{int(settings.KNOWLEDGE_DELETE_LOCK_TIMEOUT_MS)}ms"])
            locked = _document_locked(document)
            chunks_delete(document_id=locked.pk)
            locked.delete()
    except DatabaseError as exc:
        logger.warning("Removing the vectors of document %s failed: %s", document.pk, type(exc).__name__)
        raise errors.DocumentVectorsRemovalFailed(
            "Failed to remove document vectors: the index is busy or unavailable; the document was kept, "
            "try again."
        ) from exc


def chunks_delete(*, document_id=None, generation_id=None) -> int:
    """Delete chunks (and uncount their keyword terms); see pipeline.index.chunks_delete."""
    return index.chunks_delete(document_id=document_id, generation_id=generation_id)


@transaction.atomic
def knowledge_base_delete(*, kb: KnowledgeBase) -> None:
    """Delete a knowledge base with its documents, generations and chunks, in one transaction.

    The pipeline's locks are taken first, in its order (the knowledge base, then each document):
    a worker writing a document's chunks finishes before (and they go too) or finds the document
    gone. Deleting the generations first deadlocked with a worker inserting chunks (whose foreign
    key waits for the generation row while this waited for the worker's document)."""
    KnowledgeBase.objects.select_for_update(of=("self",)).filter(pk=kb.pk).first()
    list(Document.objects.select_for_update(of=("self",)).filter(knowledge_base=kb).order_by("pk")
         .values_list("pk", flat=True))
    for generation_id in IndexGeneration.objects.filter(knowledge_base=kb).values_list("pk", flat=True):
        chunks_delete(generation_id=generation_id)
    kb.delete()


# Rebuild


def knowledge_base_reindex_keywords(*, kb: KnowledgeBase, force: bool = False) -> int:
    """Rewrite the keyword index of the KB's live generations written with an older analyzer
    (pipeline.terms.ANALYZER), or of all of them with `force`, in place: no re-chunking, no
    re-embedding. Holds the KB row exclusively (document ingestion waits), so searches see the old
    index until it commits. Returns the chunks rewritten."""
    done = 0
    with transaction.atomic():
        KnowledgeBase.objects.select_for_update(no_key=True, of=("self",)).get(pk=kb.pk)
        stale = IndexGeneration.objects.select_for_update(of=("self",)).filter(
            knowledge_base=kb,
            status__in=IndexGeneration.LIVE,
        )
        if not force:
            stale = stale.exclude(keyword_analyzer=KEYWORD_ANALYZER)
        for generation in stale:
            done += index.keywords_rewrite(generation_id=generation.pk)
            generation.keyword_analyzer = KEYWORD_ANALYZER
            generation.save(update_fields=["keyword_analyzer", "updated_at"])
    return done


def knowledge_base_rebuild(*, kb: KnowledgeBase) -> IndexGeneration:
    """Start building a new generation with the KB's current strategy (in the background).
    One rebuild per KB at a time."""
    try:
        with transaction.atomic():
            kb = KnowledgeBase.objects.select_for_update(no_key=True, of=("self",)).get(pk=kb.pk)
            if IndexGeneration.objects.filter(knowledge_base=kb, status=IndexGeneration.Status.BUILDING).exists():
                raise errors.RebuildInProgress()
            number = (IndexGeneration.objects.filter(knowledge_base=kb).order_by("-number")
                      .values_list("number", flat=True).first() or 0) + 1
            now = timezone.now()
            generation = IndexGeneration.objects.create(
                knowledge_base=kb, number=number, status=IndexGeneration.Status.BUILDING,
                chunk_strategy=generation_snapshot(kb.chunk_strategy), started_at=now, heartbeat_at=now,
            )
            dispatch.generation_send(generation.pk)
            return generation
    except IntegrityError as exc:  # a concurrent start won the partial unique constraint
        raise errors.RebuildInProgress() from exc


# Route bindings


@transaction.atomic
def route_knowledge_bind(*, route: Route, knowledge_base: KnowledgeBase) -> RouteKnowledgeBinding:
    binding = RouteKnowledgeBinding(route=route, knowledge_base=knowledge_base)
    binding.full_clean(validate_unique=False, validate_constraints=False)
    binding, _ = RouteKnowledgeBinding.objects.get_or_create(route=route, knowledge_base=knowledge_base)
    return binding


@transaction.atomic
def route_knowledge_unbind(*, route: Route, knowledge_base: KnowledgeBase) -> None:
    RouteKnowledgeBinding.objects.filter(route=route, knowledge_base=knowledge_base).delete()


# Chunks (operators' overrides; see apps.knowledge.chunk_overrides)


def chunk_disable(*, chunk, user):
    """Take a child chunk out of every search and read at once (no rebuild); recorded."""
    from apps.knowledge.chunk_overrides import chunk_change

    return chunk_change(chunk=chunk, user=user, disabled=True)


def chunk_enable(*, chunk, user):
    """Put a disabled child chunk back; recorded."""
    from apps.knowledge.chunk_overrides import chunk_change

    return chunk_change(chunk=chunk, user=user, disabled=False)


def chunk_text_edit(*, chunk, text: str, user):
    """Replace a child chunk's text: only it is re-embedded and re-indexed, its section follows;
    recorded. The original text given back removes the edit."""
    from apps.knowledge.chunk_overrides import chunk_change

    return chunk_change(chunk=chunk, user=user, text=text)


# Search playground


def playground_query_record(*, user, kb: KnowledgeBase, query: str, mode: str, top_k: int,
                            score_threshold: float | None, hit_count: int) -> None:
    """Remember an operator's playground search (the same search again moves to the top); keep
    the last PlaygroundQuery.KEEP per operator and KB. Two statements whatever the history."""
    from apps.core.revisions import revision_of
    from apps.knowledge.models import PlaygroundQuery

    params_hash = revision_of({"query": query, "mode": mode, "top_k": top_k, "score_threshold": score_threshold})
    with transaction.atomic():
        PlaygroundQuery.objects.bulk_create(
            [PlaygroundQuery(user=user, knowledge_base=kb, params_hash=params_hash, query=query, mode=mode,
                             top_k=top_k, score_threshold=score_threshold, hit_count=hit_count,
                             ran_at=timezone.now())],
            update_conflicts=True, unique_fields=["user", "knowledge_base", "params_hash"],
            update_fields=["ran_at", "hit_count"],
        )
        keep = PlaygroundQuery.objects.filter(user=user, knowledge_base=kb).order_by("-ran_at", "-id").values("id")
        PlaygroundQuery.objects.filter(user=user, knowledge_base=kb).exclude(
            id__in=keep[:PlaygroundQuery.KEEP]).delete()
