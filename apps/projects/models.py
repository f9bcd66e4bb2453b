from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxLengthValidator, RegexValidator
from django.db import models
from django.db.models.functions import Lower

from apps.core.models import BaseModel
from apps.core.validators import validate_shown_name

if TYPE_CHECKING:
    from django.contrib.auth.models import User

slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9-]{1,63}$",
    "Use 2–64 lower-case letters, digits or hyphens, starting with a letter or digit.",
)

PROJECT_NAME_TAKEN = "Another project already has this name (names are compared ignoring case)."
PROJECT_NAME_CONSTRAINT = "project_unique_name_ci"
PROJECT_NAME_MAX = 200


class Project(BaseModel):
    """Owner of routes, knowledge bases and tool providers; operators are members with roles."""

    name = models.CharField(max_length=PROJECT_NAME_MAX, validators=[validate_shown_name])
    slug = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    description = models.TextField(blank=True, max_length=2000, validators=[MaxLengthValidator(2000)])
    members: models.ManyToManyField[User, Membership] = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects")
    tool_execution_paused = models.BooleanField(
        default=False, help_text="While on, agents' tool calls of this project dispatch nothing (receipts still work).")

    class Meta:
        ordering = ["name"]
        # Operators tell projects apart by name: every project select, filter and breadcrumb shows the
        # name alone, so two "Bailing Retail" (or "Bailing retail") were two identical choices.
        constraints = [models.UniqueConstraint(
            Lower("name"), name=PROJECT_NAME_CONSTRAINT,
            violation_error_message=PROJECT_NAME_TAKEN)]

    def __str__(self) -> str:
        return self.name


class Membership(BaseModel):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        EDITOR = "editor", "Editor"
        VIEWER = "viewer", "Viewer"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_unique_user")]
        ordering = ["project__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} · {self.project} ({self.role})"


# knowledge: operator personal API tokens for the builder API (apps.projects.authentication)
class OperatorToken(BaseModel):
    """A personal API token of an operator, limited to scopes. Only its SHA-256 hash is stored;
    the token itself is shown once, when it is created (apps.projects.tokens.operator_token_create)."""

    class Scope(models.TextChoices):
        KNOWLEDGE_CREATE = "knowledge:create", "knowledge:create"
        KNOWLEDGE_INGEST = "knowledge:ingest", "knowledge:ingest"
        KNOWLEDGE_DEBUG = "knowledge:debug", "knowledge:debug"
        KNOWLEDGE_REBUILD = "knowledge:rebuild", "knowledge:rebuild"
        KNOWLEDGE_QUERY = "knowledge:query", "knowledge:query"
        TOOLS_WRITE = "tools:write", "tools:write"
        ROUTES_WRITE = "routes:write", "routes:write"
        APPROVALS_DECIDE = "approvals:decide", "approvals:decide"
        TASKS_WRITE = "tasks:write", "tasks:write"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="operator_tokens")
    name = models.CharField(max_length=120, validators=[validate_shown_name])
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=16, editable=False, help_text="The first characters, to recognise it.")
    scopes = ArrayField(models.CharField(max_length=32, choices=Scope.choices), default=list, size=16)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["user__username", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
