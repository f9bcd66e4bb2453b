from django.conf import settings
from django.core.validators import MaxLengthValidator, RegexValidator
from django.db import models

from apps.core.models import BaseModel

slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9-]{1,63}$",
    "Use 2–64 lower-case letters, digits or hyphens, starting with a letter or digit.",
)


class Project(BaseModel):
    """Owner of routes, knowledge bases and tool providers; operators are members with roles."""

    name = models.CharField(max_length=200)
    slug = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    description = models.TextField(blank=True, max_length=2000, validators=[MaxLengthValidator(2000)])
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")

    class Meta:
        ordering = ["name"]

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
