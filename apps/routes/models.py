"""A Route is one agent-facing workspace with typed, validated settings.

Settings the spec groups as `target_config`, `agent_client`, `tools.agent_direct`, knowledge and
memory are real columns with defaults and validators here, so a bad value is refused when an
operator saves it, never discovered at request time.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Lower

from apps.core.models import BaseModel
from apps.core.validators import validate_shown_name
from apps.projects.models import Project
from apps.routes.validators import (
    BoundedListValidator,
    validate_audiences,
    validate_route_key,
    validate_tool_names,
)

SYSTEM_PROMPT_MAX_CHARS = 79_000
AGENT_INSTRUCTIONS_MAX_CHARS = 20_000


def _tool_list(help_text: str, *, null: bool = False) -> ArrayField:
    return ArrayField(
        models.CharField(max_length=64),
        default=None if null else list,
        null=null,
        blank=True,
        size=256,
        validators=[validate_tool_names],
        help_text=help_text,
    )


ROUTE_KEY_TAKEN = "A route with this key already exists in this project."
ROUTE_KEY_CONSTRAINT = "route_unique_key_per_project"
ROUTE_NAME_TAKEN = "Another route of this project already has this name (names are compared ignoring case)."
ROUTE_NAME_CONSTRAINT = "route_unique_name_per_project_ci"
ROUTE_NAME_MAX = 256


class Route(BaseModel):
    class AudiencePolicy(models.TextChoices):
        ANY = "any", "Any principal"
        LISTED = "listed", "Only the listed audiences"

    class KnowledgeMode(models.TextChoices):
        CHUNK = "chunk", "Chunks (sections around the hits)"
        DOCUMENT = "document", "Whole documents (up to the budget)"

    class Permission(models.TextChoices):
        FULL = "full", "Full"
        READ_ONLY = "read_only", "Read only"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="routes")
    key = models.CharField(
        max_length=64,
        validators=[validate_route_key],
        help_text="The workspace key agents use, e.g. 'store-assistant'. Never 'auto'.",
    )
    name = models.CharField(max_length=ROUTE_NAME_MAX, validators=[validate_shown_name])
    description = models.TextField(blank=True, max_length=2000, validators=[MaxLengthValidator(2000)])
    enabled = models.BooleanField(default=True)

    audience_policy = models.CharField(max_length=16, choices=AudiencePolicy.choices, default=AudiencePolicy.ANY)
    allowed_audiences = ArrayField(
        models.CharField(max_length=64), default=list, blank=True, size=64, validators=[validate_audiences],
        help_text="With 'only the listed audiences': the principal audiences admitted.",
    )

    # target_config
    system_prompt = models.TextField(
        blank=True, max_length=SYSTEM_PROMPT_MAX_CHARS, validators=[MaxLengthValidator(SYSTEM_PROMPT_MAX_CHARS)]
    )

    # agent_client
    agent_client_enabled = models.BooleanField(
        default=False, help_text="Open this route to local agents (Agent Client Runtime)."
    )
    agent_client_instructions = models.TextField(
        blank=True,
        max_length=AGENT_INSTRUCTIONS_MAX_CHARS,
        validators=[MaxLengthValidator(AGENT_INSTRUCTIONS_MAX_CHARS)],
    )
    agent_client_active_tool_limit = models.PositiveSmallIntegerField(
        default=8, validators=[MinValueValidator(1), MaxValueValidator(12)]
    )
    system_info_name = models.CharField(max_length=120, blank=True)
    system_info_summary = models.CharField(max_length=400, blank=True)
    system_info_domains = ArrayField(
        models.CharField(max_length=120), default=list, blank=True,
        validators=[BoundedListValidator(max_items=6, max_chars=120)],
    )
    system_info_boundaries = ArrayField(
        models.CharField(max_length=160), default=list, blank=True,
        validators=[BoundedListValidator(max_items=6, max_chars=160)],
    )

    # tools.agent_direct
    tools_direct_enabled = models.BooleanField(default=False, help_text="Let agents call business tools directly.")
    write_tools = _tool_list("Write tools agents may call: exact operationIds, no '*'.")
    force_approval_tools = _tool_list("Tools that always need approval on this route, beyond the ACC rules.")
    unattended_write_tools = _tool_list(
        "Legacy: write tools that run without approval. Cannot be combined with force approval tools.",
        null=True,
    )
    max_tool_calls = models.PositiveSmallIntegerField(
        default=5, validators=[MaxValueValidator(50)],
        help_text="The most tool calls one agent run may make (0–50); a call past it is refused before dispatch.")
    permission = models.CharField(max_length=16, choices=Permission.choices, default=Permission.FULL)

    # knowledge
    knowledge_enabled = models.BooleanField(default=False)
    knowledge_mode = models.CharField(max_length=16, choices=KnowledgeMode.choices, default=KnowledgeMode.CHUNK)
    knowledge_top_k = models.PositiveSmallIntegerField(
        default=5, validators=[MinValueValidator(1), MaxValueValidator(50)]
    )
    knowledge_max_docs = models.PositiveSmallIntegerField(
        default=4, validators=[MinValueValidator(1), MaxValueValidator(20)]
    )
    knowledge_page_boost = models.BooleanField(default=False)
    knowledge_score_threshold = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Hits scoring below this are dropped (0–1); empty keeps every hit. With the local e5 model a "
                  "hit's score includes how likely the knowledge bases answer the question at all: 0.2 keeps "
                  "nearly every answerable question and drops about half of the off-topic ones; 0.5 drops most "
                  "off-topic ones and some answerable ones (README, Search).",
    )

    # memory
    memory_recent_messages = models.PositiveSmallIntegerField(default=12, validators=[MaxValueValidator(100)])
    memory_recent_budget_chars = models.PositiveIntegerField(default=8000, validators=[MaxValueValidator(64000)])
    memory_per_message_chars = models.PositiveIntegerField(
        default=2000, validators=[MinValueValidator(1), MaxValueValidator(64000)]
    )
    memory_summary_enabled = models.BooleanField(default=False)
    memory_summary_max_chars = models.PositiveIntegerField(default=1200, validators=[MaxValueValidator(8000)])

    class Meta:
        ordering = ["project__name", "key"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "key"],
                name=ROUTE_KEY_CONSTRAINT,
                violation_error_code="route_key_taken",
                violation_error_message=ROUTE_KEY_TAKEN,
            ),
            # The agent's workspace list and the sign-in page tell a project's routes apart by name:
            # two "Audit Desk" were two entries nobody could pick between (migration 0006 renamed
            # the duplicates made before).
            models.UniqueConstraint(
                models.F("project"), Lower("name"),
                name=ROUTE_NAME_CONSTRAINT,
                violation_error_code="route_name_taken",
                violation_error_message=ROUTE_NAME_TAKEN,
            ),
        ]
        indexes = [models.Index(fields=["key"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.key})"

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if self.unattended_write_tools is not None and self.force_approval_tools:
            errors.setdefault("unattended_write_tools", []).append(
                "The legacy unattended write tools cannot be combined with force approval tools. "
                "Clear the unattended write tools (a blank field; null in the API) and list the write tools that "
                "need approval in force approval tools instead."
            )
        if self.unattended_write_tools:
            stray = sorted(set(self.unattended_write_tools) - set(self.write_tools or []))
            if stray:
                errors.setdefault("unattended_write_tools", []).append(
                    "Every unattended write tool must also be a write tool; not in write tools: "
                    + ", ".join(stray)
                    + "."
                )
        if self.audience_policy == self.AudiencePolicy.LISTED and not self.allowed_audiences:
            errors.setdefault("allowed_audiences", []).append(
                "List at least one audience, or admit any principal."
            )
        has_system_info = any(
            [self.system_info_name, self.system_info_summary, self.system_info_domains, self.system_info_boundaries]
        )
        if has_system_info and not self.system_info_name:
            errors.setdefault("system_info_name", []).append("System info needs a name.")
        if has_system_info and not self.system_info_summary:
            errors.setdefault("system_info_summary", []).append("System info needs a summary.")
        if self.memory_per_message_chars and self.memory_recent_budget_chars and (
            self.memory_per_message_chars > self.memory_recent_budget_chars
        ):
            errors.setdefault("memory_per_message_chars", []).append(
                "Characters per message cannot exceed the recent-messages budget."
            )
        if errors:
            raise ValidationError(errors)

    @property
    def system_info_configured(self) -> bool:
        return bool(self.system_info_name and self.system_info_summary)
