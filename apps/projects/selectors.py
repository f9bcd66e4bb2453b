"""Which projects an operator may see or change: the one place that scopes operator access."""

from __future__ import annotations

from django.db.models import QuerySet

from apps.projects.errors import ProjectForbidden, ProjectNotFound
from apps.projects.models import Membership, Project

WRITE_ROLES = (Membership.Role.OWNER, Membership.Role.EDITOR)


def project_list_visible(*, user) -> QuerySet[Project]:
    if not user.is_authenticated or not user.is_active:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user).distinct()


def project_list_editable(*, user) -> QuerySet[Project]:
    if not user.is_authenticated or not user.is_active:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user, memberships__role__in=WRITE_ROLES).distinct()


def project_get_editable(*, user, project_id) -> Project:
    """The project a new KB or tool provider goes into: 404 when the operator cannot see it, 403 when
    they only view it."""
    project = project_list_visible(user=user).filter(pk=project_id).first()
    if project is None:
        raise ProjectNotFound()
    if not project_list_editable(user=user).filter(pk=project.pk).exists():
        raise ProjectForbidden()
    return project


def project_role(*, user, project: Project) -> str | None:
    if user.is_superuser:
        return Membership.Role.OWNER
    return (
        Membership.objects.filter(user=user, project=project).values_list("role", flat=True).first()
    )
