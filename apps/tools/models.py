from django.contrib.postgres.fields import ArrayField
from django.core.validators import RegexValidator
from django.db import models

from apps.core.models import BaseModel
from apps.projects.models import Project

provider_name_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9_-]{1,63}$",
    "Use 2–64 lower-case letters, digits, hyphens or underscores, starting with a letter or digit.",
)


class ToolProvider(BaseModel):
    """A business system whose OpenAPI spec is compiled into tools. The signing secret is stored only
    encrypted (apps.tools.crypto); the spec is kept byte for byte as uploaded."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tool_providers")
    name = models.CharField(max_length=64, validators=[provider_name_validator])
    base_url = models.URLField(max_length=2000)
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
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="tool_provider_unique_name")]
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
    has_acc = models.BooleanField()
    enabled = models.BooleanField(default=False)
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
