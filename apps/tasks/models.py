"""Task control (contracts-beyond-seeds §5): one piece of agent work spanning turns, tools and
sessions, with a shared cumulative write budget and a pause button. Only an operator creates one.

Members and policy are frozen at creation (``scope_hash`` covers them). A session that is a member
of any task is task-enforced for good: its turns and invocations must carry the binding."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from apps.core.models import BaseModel
from apps.core.validators import validate_shown_name
from apps.projects.models import Project


class Task(BaseModel):
    class State(models.TextChoices):
        ACTIVE = "active", "active"
        PAUSED = "paused", "paused"
        BLOCKED = "blocked", "blocked"
        CANCELLED = "cancelled", "cancelled"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tasks")
    name = models.CharField(max_length=200, blank=True, validators=[validate_shown_name])
    request_id = models.CharField(max_length=128)
    request_hash = models.CharField(max_length=64, editable=False)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE, db_index=True)
    revision = models.PositiveIntegerField(default=1)
    ledger_sequence = models.PositiveBigIntegerField(default=0)
    scope_hash = models.CharField(max_length=64, editable=False)
    max_write_calls = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: unlimited; 0: read only.")
    max_concurrent = models.PositiveIntegerField(default=1)
    expires_at = models.DateTimeField(null=True, blank=True)
    write_reserved = models.PositiveIntegerField(default=0)
    write_consumed = models.PositiveIntegerField(default=0)
    active_permits = models.PositiveIntegerField(default=0)
    blocked_reason = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "request_id"], name="task_unique_request_id"),
            models.CheckConstraint(condition=models.Q(max_concurrent__gte=1), name="task_max_concurrent_positive"),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name or f"task {self.pk}"


class TaskMember(BaseModel):
    """One session's membership, frozen with the identity it had when the task was created: if the
    session is revoked or its identity changes, the whole task is blocked."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="members")
    session = models.ForeignKey("agent_auth.AgentSession", on_delete=models.PROTECT, related_name="task_memberships")
    client_app_id = models.CharField(max_length=128)
    workspace = models.CharField(max_length=64)
    client_conversation_id = models.CharField(max_length=255)
    allowed_tools = ArrayField(models.CharField(max_length=64), default=list, blank=True, size=256)
    principal_id = models.CharField(max_length=128)
    on_behalf_of = models.CharField(max_length=191)
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "session", "workspace", "client_conversation_id"],
                                               name="task_member_unique_binding")]
        ordering = ["task", "position"]

    def __str__(self) -> str:
        return f"{self.client_app_id} · {self.workspace} · {self.client_conversation_id}"


class TaskRun(models.Model):
    """A run pinned to the task its turn was bound to."""

    run = models.OneToOneField("ledger.Run", on_delete=models.CASCADE, primary_key=True, related_name="task_link")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="runs")
    member = models.ForeignKey(TaskMember, on_delete=models.CASCADE, related_name="runs")
    binding = models.JSONField()

    def __str__(self) -> str:
        return f"run {self.run_id} · task {self.task_id}"


class TaskLedgerEntry(models.Model):
    """Append-only: every control action, block and budget movement, numbered per task."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="ledger")
    sequence = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=32)
    actor = models.CharField(max_length=191, blank=True)
    request_id = models.CharField(max_length=128, blank=True)
    revision = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=Task.State.choices)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "sequence"], name="task_ledger_unique_sequence"),
            models.UniqueConstraint(fields=["task", "request_id"], condition=~models.Q(request_id=""),
                                    name="task_ledger_unique_request_id"),
        ]
        ordering = ["task", "sequence"]

    def __str__(self) -> str:
        return f"#{self.sequence} {self.kind}"


class TaskCharge(BaseModel):
    """What one invocation holds of its task's budget: a write reservation, a dispatch permit, or a
    consumed write. The invocation is named by its primary key only (tools sits below tasks)."""

    class Outcome(models.TextChoices):
        OPEN = "open", "open"
        TRUSTED = "trusted", "a trusted answer"
        RELEASED = "released", "released (not sent)"
        UNCERTAIN = "uncertain", "uncertain (kept)"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="charges")
    invocation_pk = models.UUIDField(unique=True)
    tool_name = models.CharField(max_length=64)
    write = models.BooleanField()
    reserved = models.BooleanField(default=False)
    permit = models.BooleanField(default=False)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.OPEN)

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.outcome})"
