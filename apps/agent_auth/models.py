"""Agent Auth v1: registered agent apps, pending PKCE authorizations and approved sessions.

Every secret (client token, code, access and refresh tokens) is stored as its SHA-256 hex
digest only. Sessions and authorizations change only in `apps.agent_auth.services`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from apps.agent_auth.validators import validate_agent_authorize_url, validate_app_id, validate_route_keys
from apps.core.models import BaseModel
from apps.core.validators import validate_shown_name
from apps.projects.models import Project

AUTHORIZATION_TTL = timedelta(seconds=600)
CODE_TTL = timedelta(seconds=120)
ACCESS_TOKEN_TTL = timedelta(seconds=900)
REFRESH_TTL = timedelta(days=30)

# Prefixes, not secrets: they let log redaction and secret scanners recognise our tokens.
CLIENT_TOKEN_PREFIX = "bhk_"  # noqa: S105
CODE_PREFIX = "bhc_"
ACCESS_TOKEN_PREFIX = "bha_"  # noqa: S105
REFRESH_TOKEN_PREFIX = "bhr_"  # noqa: S105

ROUTE_LIST_MAX = 128


def _route_list(help_text: str, *, size: int = ROUTE_LIST_MAX) -> ArrayField[list[str], list[str]]:
    return ArrayField(
        models.CharField(max_length=64), default=list, blank=True, size=size,
        validators=[validate_route_keys], help_text=help_text,
    )


# Keys given as a client's allowed routes that are not routes of its project.
ROUTES_NOT_IN_PROJECT = "No route with these keys in the project: %(value)s."


class AgentClient(BaseModel):
    """A registered agent app: public app id, hashed client token for its business backend."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="agent_clients")
    app_id = models.CharField(
        "app id", max_length=64, unique=True, validators=[validate_app_id],
        help_text="Public identifier the local agent sends as client_app_id, e.g. 'store-desktop'.",
    )
    name = models.CharField(max_length=200, validators=[validate_shown_name])
    # NULL (not "") until a token is issued, so rows without one never collide on the unique index.
    client_token_hash = models.CharField(max_length=64, null=True, unique=True, editable=False)  # noqa: DJ001
    client_token_rotated_at = models.DateTimeField(null=True, editable=False)
    allowed_routes = _route_list("Route keys of this project the app may ask for.")
    agent_authorize_url = models.CharField(
        "authorization page URL", max_length=2048, validators=[validate_agent_authorize_url],
        help_text="The business authorization page (https), or BailingHub's own …/agent-auth/authorize. "
                  "BailingHub appends ?authorization_id=.",
    )
    enabled = models.BooleanField(default=True)
    authorization_rate_limit = models.PositiveSmallIntegerField(
        default=10, validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text="Authorization requests a minute, per client and IP address.",
    )

    class Meta:
        ordering = ["app_id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.app_id})"

    def clean(self) -> None:
        if not self.project_id or not self.allowed_routes:
            return
        from apps.routes.models import Route

        known = set(Route.objects.filter(project_id=self.project_id, key__in=self.allowed_routes)
                    .values_list("key", flat=True))
        unknown = [key for key in self.allowed_routes if key not in known]
        if unknown:
            raise ValidationError({"allowed_routes": ROUTES_NOT_IN_PROJECT % {"value": ", ".join(unknown)}})


class AgentAuthorization(BaseModel):
    """One pending PKCE request of a local agent; lives 600 s, decided once, exchanged once."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        EXCHANGED = "exchanged", "Exchanged"

    client = models.ForeignKey(AgentClient, on_delete=models.CASCADE, related_name="authorizations")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    redirect_uri = models.TextField()
    state = models.CharField(max_length=512)
    requested_routes = _route_list("", size=64)
    device_label = models.CharField(max_length=128)
    code_challenge = models.CharField(max_length=43)
    code_challenge_method = models.CharField(max_length=8, default="S256")
    requester_ip = models.GenericIPAddressField(null=True, blank=True)
    expires_at = models.DateTimeField()

    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+", help_text="Set when approved on BailingHub's own page.")
    # Kept when `decided_by` is emptied by the account's deletion: a session approved on the page
    # ends with its approving account, deleted included.
    decided_on_page = models.BooleanField(default=False, help_text="Decided by a BailingHub account on the hub's "
                                                                   "own authorization page.")
    principal = models.JSONField(null=True, blank=True)
    on_behalf_of = models.CharField(max_length=191, blank=True)
    # The name the business shows for the end user or shop ("signed in for …"); it grants nothing.
    subject_display_name = models.CharField(max_length=240, blank=True)
    allowed_routes = _route_list("", size=64)
    code_hash = models.CharField(max_length=64, null=True, unique=True, editable=False)  # noqa: DJ001 (as above)
    code_expires_at = models.DateTimeField(null=True, blank=True)
    code_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.client.app_id} · {self.device_label} ({self.status})"

    def is_expired(self, now: datetime) -> bool:
        return self.status == self.Status.PENDING and now >= self.expires_at

    def status_at(self, now: datetime) -> str:
        return "expired" if self.is_expired(now) else self.status


class AgentSession(BaseModel):
    """An approved session: who the agent acts for, which routes, and its current tokens."""

    class RevokedBy(models.TextChoices):
        AGENT = "agent", "The agent"
        CLIENT = "client", "The business backend"
        OPERATOR = "operator", "An operator"
        SYSTEM = "system", "BailingHub (token reuse)"

    client = models.ForeignKey(AgentClient, on_delete=models.CASCADE, related_name="sessions")
    authorization = models.OneToOneField(AgentAuthorization, on_delete=models.SET_NULL, null=True, blank=True,
                                         related_name="session")
    principal = models.JSONField()
    principal_id = models.CharField(max_length=128, db_index=True)
    audience = models.CharField(max_length=64, blank=True)
    on_behalf_of = models.CharField(max_length=191)
    subject_display_name = models.CharField(max_length=240, blank=True)
    allowed_routes = _route_list("", size=64)
    device_label = models.CharField(max_length=128)

    access_token_hash = models.CharField(max_length=64, unique=True, editable=False)
    access_expires_at = models.DateTimeField()
    refresh_expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)

    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=16, choices=RevokedBy.choices, blank=True)
    revoked_reason = models.CharField(max_length=500, blank=True)
    revoked_by_name = models.CharField(max_length=150, blank=True,
                                       help_text="The operator's username, when an operator revoked the session.")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.device_label} · {self.principal_id}"

    def is_active(self, now: datetime) -> bool:
        return self.revoked_at is None and now < self.refresh_expires_at


class AgentRefreshToken(BaseModel):
    """One refresh token of a session's rotation lineage. Only the newest, unrotated one works;
    presenting a rotated one means it leaked (or was replayed) and kills the session."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="refresh_tokens")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    generation = models.PositiveIntegerField()
    rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["generation"]
        constraints = [
            models.UniqueConstraint(fields=["session", "generation"], name="refresh_token_unique_generation"),
        ]

    def __str__(self) -> str:
        return f"refresh #{self.generation} of {self.session_id}"
