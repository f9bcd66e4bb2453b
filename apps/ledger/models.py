"""The conversation ledger of the Agent Client Runtime, and memory notes.

A Conversation is one local conversation of one agent session on one route; its Messages are
the visible text of both sides, numbered in order; a Run is one frozen turn (request hash,
context snapshot, revisions) and, later, its completion. MemoryNotes belong to one principal
(`on_behalf_of`) on one route or one project and are never shown to another principal. A
RagQuery is one question an operator asked a route's knowledge, with its answer, evidence and the
feedback it got.

Rows here change only in `apps.ledger.services`.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.core.validators import MaxLengthValidator
from django.db import models
from django.db.models import Q

from apps.agent_auth.models import AgentSession
from apps.core.models import BaseModel
from apps.core.validators import CLIENT_ID_MAX_CHARS
from apps.projects.models import Project
from apps.routes.models import Route

# A message is found by the terms of this many of its first characters: 32,000 CJK characters give
# about 37,000 distinct terms (170 KB, 30 ms to cut); a turn's whole 512 KiB would give several
# times that, for a search no one makes.
MESSAGE_TERMS_CHARS = 32_000


class Conversation(BaseModel):
    """One `client_conversation_id` of one session on one route."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="conversations")
    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="conversations")
    client_conversation_id = models.CharField(max_length=CLIENT_ID_MAX_CHARS)
    # Copied from the session so the ledger lists by principal without joining it.
    principal_id = models.CharField(max_length=128, db_index=True)
    on_behalf_of = models.CharField(max_length=191, db_index=True)
    message_count = models.PositiveIntegerField(default=0, help_text="Sequence number of the newest message.")
    last_message_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["session", "route", "client_conversation_id"],
                                    name="ledger_conversation_unique_client_id"),
        ]
        indexes = [
            models.Index(fields=["route", "on_behalf_of", "-created_at"]),
            # The operators' message search matches a conversation id or on-behalf-of exactly, in
            # every route they can see (selectors.message_search).
            models.Index(fields=["client_conversation_id"], name="ledger_conversation_client_id"),
            models.Index(fields=["on_behalf_of"], name="ledger_conversation_on_behalf"),
        ]

    def __str__(self) -> str:
        return f"{self.client_conversation_id} ({self.on_behalf_of})"


class Message(BaseModel):
    """A visible message; `content` is exactly what the client sent, never normalised."""

    class Role(models.TextChoices):
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"

    class Kind(models.TextChoices):
        TEXT = "text", "Text"
        # Recognised only in assistant messages (never in user text that imitates the marker).
        EXECUTION_SUMMARY = "authorization_execution_summary", "Authorization execution summary"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    sequence = models.PositiveIntegerField(help_text="1, 2, 3… in the conversation.")
    role = models.CharField(max_length=16, choices=Role.choices)
    kind = models.CharField(max_length=40, choices=Kind.choices, default=Kind.TEXT)
    client_message_id = models.CharField(
        max_length=CLIENT_ID_MAX_CHARS, help_text="user_message_id or assistant_message_id."
    )
    content = models.TextField(blank=True)
    run = models.ForeignKey("Run", on_delete=models.CASCADE, related_name="messages")
    # The distinct keyword terms of the content's first MESSAGE_TERMS_CHARS characters (words, CJK
    # characters and bigrams: knowledge.pipeline.terms), written with the message: the operators'
    # message search reads them through a GIN index (selectors.message_search). A substring match
    # of `content` read every message in the operator's projects, 1 to 2 s at 200,000 messages.
    search_terms = ArrayField(models.TextField(), default=list, db_default=[], blank=True, editable=False)

    class Meta:
        ordering = ["conversation", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "sequence"], name="ledger_message_unique_sequence"),
            models.UniqueConstraint(fields=["conversation", "role", "client_message_id"],
                                    name="ledger_message_unique_client_id"),
        ]
        indexes = [
            GinIndex(fields=["search_terms"], name="ledger_message_search_terms"),
            # The message search matches a client message id exactly (the unique constraint's index
            # leads with the conversation).
            models.Index(fields=["client_message_id"], name="ledger_message_client_id"),
        ]

    def __str__(self) -> str:
        return f"#{self.sequence} {self.role}"


class Run(BaseModel):
    """One turn, frozen: `id` is the `run_id` agents hold.

    The two unique constraints are the turn's idempotency keys; they are what makes N identical
    turns arriving at once create one run.
    """

    class State(models.TextChoices):
        PREPARING = "preparing", "Preparing"
        CONTEXT_READY = "context_ready", "Context ready"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    FINAL_STATES = (State.COMPLETED, State.FAILED, State.CANCELLED)

    class KnowledgeDelivery(models.TextChoices):
        INLINE = "inline", "Inline"
        ON_DEMAND = "on_demand", "On demand"

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="runs")
    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="runs")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    client_turn_id = models.CharField(max_length=CLIENT_ID_MAX_CHARS)
    user_message_id = models.CharField(max_length=CLIENT_ID_MAX_CHARS)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PREPARING, db_index=True)
    request_hash = models.CharField(max_length=64, help_text="SHA-256 of the canonical turn request.")
    knowledge_delivery = models.CharField(max_length=16, choices=KnowledgeDelivery.choices,
                                          default=KnowledgeDelivery.INLINE)
    profile_revision = models.CharField(max_length=64, blank=True)
    capability_revision = models.CharField(max_length=64, blank=True)
    # The `context` object exactly as first answered (JSON text: jsonb would reorder its keys).
    context_snapshot = models.TextField(blank=True)
    active_tools_snapshot = models.TextField(blank=True, default="[]")
    context_bytes = models.PositiveIntegerField(default=0)
    context_tokens = models.PositiveIntegerField(default=0, help_text="cl100k_base when installed, else estimated.")
    context_stats = models.JSONField(default=dict, blank=True,
                                     help_text="What budgets left out: counts only, never text.")
    prepare_ms = models.PositiveIntegerField(null=True, blank=True)
    knowledge_ms = models.PositiveIntegerField(null=True, blank=True)
    context_ready_at = models.DateTimeField(null=True, blank=True)

    assistant_message_id = models.CharField(max_length=CLIENT_ID_MAX_CHARS, blank=True)
    completion_fingerprint = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=191, blank=True)
    runtime = models.CharField(max_length=191, blank=True)
    usage = models.JSONField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["session", "route", "conversation", "client_turn_id"],
                                    name="ledger_run_unique_turn"),
            models.UniqueConstraint(fields=["conversation", "user_message_id"],
                                    name="ledger_run_unique_user_message"),
            models.UniqueConstraint(fields=["conversation", "assistant_message_id"],
                                    condition=~Q(assistant_message_id=""),
                                    name="ledger_run_unique_assistant_message"),
        ]
        indexes = [
            # The console's run search matches these exactly (selectors.run_search); the unique
            # constraints' indexes start with the session or the conversation.
            models.Index(fields=["client_turn_id"], name="ledger_run_client_turn_id"),
            models.Index(fields=["user_message_id"], name="ledger_run_user_message_id"),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.state})"

    @property
    def context(self) -> dict[str, Any]:
        return json.loads(self.context_snapshot) if self.context_snapshot else {}

    @property
    def active_tools(self) -> list[dict[str, Any]]:
        return json.loads(self.active_tools_snapshot or "[]")

    @property
    def is_final(self) -> bool:
        return self.state in self.FINAL_STATES


class MemoryNote(BaseModel):
    """A note one principal keeps on a route (route memory) or on a project (project memory).

    The principal is the session's whole identity: its tenant, its id and whom it acts for
    (`on_behalf_of`). Two tenants may use the same user ids; a note is never seen across them."""

    class Scope(models.TextChoices):
        ROUTE = "route", "Route memory"
        PROJECT = "project", "Project memory"

    scope = models.CharField(max_length=16, choices=Scope.choices)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memory_notes")
    route = models.ForeignKey(Route, on_delete=models.CASCADE, null=True, blank=True, related_name="memory_notes")
    principal_tenant = models.CharField(max_length=128, blank=True)
    principal_id = models.CharField(max_length=128, blank=True)
    on_behalf_of = models.CharField(max_length=191)
    content = models.TextField()
    created_by_session = models.ForeignKey(AgentSession, on_delete=models.SET_NULL, null=True, blank=True,
                                           related_name="+")

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(scope="route", route__isnull=False) | Q(scope="project", route__isnull=True)),
                name="ledger_memory_note_scope_route",
            ),
        ]
        indexes = [
            models.Index(fields=["route", "on_behalf_of", "principal_id", "-updated_at"],
                         name="ledger_note_route_holder_idx"),
            models.Index(fields=["project", "on_behalf_of", "principal_id", "-created_at"],
                         name="ledger_note_project_holder_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.scope} note of {self.on_behalf_of}"


RAG_QUESTION_MAX_CHARS = 2000
RAG_CONVERSATION_ID_MAX_CHARS = 255
RAG_NOTE_MAX_CHARS = 2000


class RagQuery(BaseModel):
    """One question answered from a route's knowledge: what was asked, what was answered from
    which evidence, how sure and how fast, and what the operator said about it afterwards."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rag_queries")
    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="rag_queries")
    asked_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="+")
    conversation_id = models.CharField(max_length=RAG_CONVERSATION_ID_MAX_CHARS, blank=True)
    question = models.TextField(validators=[MaxLengthValidator(RAG_QUESTION_MAX_CHARS)])
    answer = models.TextField(blank=True)
    evidence = models.JSONField(default=list, blank=True)
    confidence = models.FloatField(default=0.0)
    grounded = models.BooleanField(default=False)
    useful = models.BooleanField(default=False)
    missing_points = models.JSONField(default=list, blank=True)
    error_code = models.CharField(max_length=40, blank=True, db_index=True)
    error_message = models.CharField(max_length=500, blank=True)
    interaction_mode = models.CharField(max_length=32, default="knowledge")
    generator = models.CharField(max_length=64, blank=True)
    trace = models.JSONField(default=list, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    helpful = models.BooleanField(null=True, blank=True)
    feedback_note = models.TextField(blank=True, validators=[MaxLengthValidator(RAG_NOTE_MAX_CHARS)])
    feedback_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["route", "-created_at"], name="ledger_ragquery_route_idx")]
        verbose_name = "RAG query"
        verbose_name_plural = "RAG queries"

    def __str__(self) -> str:
        return self.question[:80]
