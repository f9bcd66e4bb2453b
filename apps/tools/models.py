from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.validators import RegexValidator
from django.db import models
from pgvector.django import VectorField

from apps.core.models import BaseModel
from apps.projects.models import Project

provider_name_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9_-]{1,63}$",
    "Use 2–64 lower-case letters, digits, hyphens or underscores, starting with a letter or digit.",
)


TOOL_PROVIDER_NAME_CONSTRAINT = "tool_provider_unique_name"


class ToolProvider(BaseModel):
    """A business system whose OpenAPI spec is compiled into tools. The signing secret is stored only
    encrypted (apps.tools.crypto); the spec is kept byte for byte as uploaded."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tool_providers")
    name = models.CharField(max_length=64, validators=[provider_name_validator])
    base_url = models.URLField("base URL", max_length=2000)
    secret_encrypted = models.TextField(editable=False)
    enabled = models.BooleanField(default=True)
    spec = models.BinaryField(editable=False)
    spec_sha256 = models.CharField(max_length=64, editable=False)
    spec_filename = models.CharField(max_length=255, blank=True, editable=False)
    openapi_version = models.CharField(max_length=32, editable=False)
    title = models.CharField(max_length=500, blank=True, editable=False)
    compile_report = models.JSONField(default=dict, editable=False)
    compiled_at = models.DateTimeField(editable=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name=TOOL_PROVIDER_NAME_CONSTRAINT)]
        ordering = ["project__name", "name"]

    def __str__(self) -> str:
        return self.name


class Tool(BaseModel):
    """One compiled operation of a provider. ``compiled`` is the compiler's whole output for it;
    the columns beside it are copies for listing and filtering. ``enabled`` is the operator's switch."""

    class Risk(models.TextChoices):
        LOW = "low", "low"
        MEDIUM = "medium", "medium"
        HIGH = "high", "high"

    provider = models.ForeignKey(ToolProvider, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=64)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=2000)
    description = models.TextField(blank=True)
    scope = models.CharField(max_length=256)
    risk = models.CharField(max_length=8, choices=Risk.choices)
    readonly = models.BooleanField()
    approval_required = models.BooleanField()
    has_acc = models.BooleanField("declares ACC", help_text="Whether the operation declares x-agent-capability.")
    enabled = models.BooleanField(default=False)
    # Why the spec holds the tool off, whatever the operator's switch says: its ACC declares
    # governance the hub could not read (a rate limit), and it would run without it. Empty: not held.
    held_reason = models.CharField("held off by its spec", max_length=500, blank=True, default="", editable=False)
    # The operator's switch when the hold began, given back when it ends (None: held since its import).
    enabled_before_hold = models.BooleanField(null=True, blank=True, editable=False)
    compiled = models.JSONField()
    position = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "name"], name="tool_unique_name_per_provider")]
        ordering = ["provider", "position"]

    def __str__(self) -> str:
        return self.name


class RouteToolSource(BaseModel):
    """One provider a route draws tools from, with the exact operationIds it allows. The route's
    tool policy (permission, ``tools.agent_direct``) lives on Route and is set with the source list
    through ``apps.tools.route_tools.route_tools_set``, which checks the two together."""

    route = models.ForeignKey("routes.Route", on_delete=models.CASCADE, related_name="tool_sources")
    provider = models.ForeignKey(ToolProvider, on_delete=models.CASCADE, related_name="route_sources")
    allowed_tools = ArrayField(models.CharField(max_length=64), default=list, blank=True, size=256)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["route", "provider"], name="route_tool_source_unique_provider")]
        ordering = ["route", "position"]

    def __str__(self) -> str:
        return f"{self.provider} → {self.route}"


class ToolEmbedding(BaseModel):
    """A tool's vector for semantic capability search. ``text_sha256`` is the hash of the index text
    it was built from and ``model`` names the embedder (provider, name, dimension): a row whose hash
    or model differs from what the tool would index today is stale. The dimension is not fixed in
    the column so that the embedder can change without a migration; a search only compares vectors
    of one ``model``. A surface is small (hundreds of tools), so the cosine scan needs no index."""

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="embeddings")
    model = models.CharField(max_length=200)
    text_sha256 = models.CharField(max_length=64)
    embedding = VectorField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tool", "model"], name="tool_embedding_unique_model")]

    def __str__(self) -> str:
        return f"{self.tool} [{self.model}]"


class Invocation(BaseModel):
    """One governed tool call of an agent, keyed by ``idempotency_key`` (SHA-256 over a domain tag,
    the session id and the agent's ``invocation_id``). Changed only by ``apps.tools.invocations``
    (and its ``approvals`` and ``delivery``, through ``invocation_transitions``): each transition
    updates this row and appends its journal entry in one transaction.

    ``state`` is the contract's result state; ``journal_state`` is where the dispatch stands
    (``absent`` until the dispatcher claims it: proven not sent). ``frozen_arguments`` is the
    exact argument JSON, Fernet-encrypted, kept only until the result is stable."""

    class State(models.TextChoices):
        IN_PROGRESS = "in_progress", "in progress"
        AWAITING_APPROVAL = "awaiting_approval", "awaiting approval"
        EXECUTED = "executed", "executed"
        BUSINESS_REJECTED = "business_rejected", "business rejected"
        DENIED = "denied", "denied"
        REJECTED_BEFORE_DISPATCH = "rejected_before_dispatch", "rejected before dispatch"
        RECONCILIATION_REQUIRED = "reconciliation_required", "reconciliation required"

    class JournalState(models.TextChoices):
        ABSENT = "absent", "absent"
        DISPATCHING = "dispatching", "dispatching"
        RESPONSE_RECORDED = "response_recorded", "response recorded"
        COMPLETED = "completed", "completed"
        UNCERTAIN = "uncertain", "uncertain"

    idempotency_key = models.CharField(max_length=64, unique=True)
    invocation_id = models.CharField(max_length=64)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="invocations")
    session = models.ForeignKey("agent_auth.AgentSession", on_delete=models.CASCADE, related_name="invocations")
    route = models.ForeignKey("routes.Route", on_delete=models.CASCADE, related_name="invocations")
    run = models.ForeignKey("ledger.Run", on_delete=models.CASCADE, related_name="invocations")
    tool_name = models.CharField(max_length=64)
    provider = models.ForeignKey(ToolProvider, on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="invocations")
    provider_name = models.CharField(max_length=64, blank=True, help_text="Empty for a built-in tool.")
    principal_id = models.CharField(max_length=128, blank=True)
    on_behalf_of = models.CharField(max_length=191, blank=True)
    arguments_sha256 = models.CharField(max_length=64)
    arguments_bytes = models.PositiveIntegerField()
    capability_revision = models.CharField(max_length=64)
    execution_fingerprint = models.CharField(max_length=64)
    readonly = models.BooleanField()
    risk = models.CharField(max_length=8, choices=Tool.Risk.choices)
    state = models.CharField(max_length=32, choices=State.choices, db_index=True)
    journal_state = models.CharField(max_length=32, choices=JournalState.choices, default=JournalState.ABSENT)
    result = models.JSONField(null=True, blank=True)
    business_status = models.PositiveSmallIntegerField(null=True, blank=True)
    frozen_arguments = models.TextField(blank=True, editable=False)
    dispatch_deadline = models.DateTimeField(null=True, blank=True,
                                             help_text="Past it, a dispatch without an answer is uncertain.")
    # When it was last handed to the dispatcher (a call proven not sent); a re-send of the same
    # message (the watchdog's, a resume's) keeps it: how long the call has waited for a worker.
    queued_at = models.DateTimeField(null=True, blank=True)
    # How often the watchdog or a resume sent it again since queued_at (its message lost, or a
    # worker failing on it before claiming it): the page tells one re-send from many. Queued
    # afresh (a resume after a refusal for now), it starts again at 0.
    resends = models.PositiveIntegerField(default=0, db_default=0)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    responded_at = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["run", "created_at"], name="invocation_run_created"),
            # The invocation list's filter by tool walks its names down this index (invocation_tool_names).
            models.Index(fields=["project", "tool_name"], name="invocation_project_tool"),
            # How far down the dispatch queue its workers have come (selectors.dispatch_reached): the
            # newest claimed call's queue time, read off the top of this index by every queued call's page.
            models.Index(fields=["queued_at"], name="invocation_claimed_queued",
                         condition=models.Q(dispatched_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} [{self.state}]"


class Approval(BaseModel):
    """The approval one invocation waits for: it refers to the frozen tool and arguments (the
    invocation's hash), is decided once (``decision_id`` is the decision's idempotency key) and
    consumed once (``used_at``). A pending approval past ``expires_at`` reads as denied."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        APPROVED = "approved", "approved"
        DENIED = "denied", "denied"
        EXPIRED = "expired", "expired"

    invocation = models.OneToOneField(Invocation, on_delete=models.CASCADE, related_name="approval")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="approvals")
    tool_name = models.CharField(max_length=64)
    arguments_sha256 = models.CharField(max_length=64)
    risk = models.CharField(max_length=8, choices=Tool.Risk.choices)
    prompt = models.CharField(max_length=200, blank=True)
    reasons = models.JSONField(default=list, blank=True, help_text="Why approval is needed (rule names).")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    decision_id = models.CharField(max_length=128, blank=True)
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="tool_approvals")
    approver_label = models.CharField(max_length=191, blank=True)
    comment = models.TextField(blank=True, max_length=2000)
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True, help_text="When a resume consumed the approval.")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.tool_name} [{self.status}]"


class InvocationJournalEntry(BaseModel):
    """One step of an invocation's execution journal, written in the transaction that changes the
    invocation: ``dispatching`` before the request leaves, then ``response_recorded`` and
    ``completed``, or ``uncertain`` when the answer is lost."""

    invocation = models.ForeignKey(Invocation, on_delete=models.CASCADE, related_name="journal")
    state = models.CharField(max_length=32, choices=Invocation.JournalState.choices)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["invocation", "created_at"]

    def __str__(self) -> str:
        return f"{self.invocation_id}: {self.state}"
