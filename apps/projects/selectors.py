"""Which projects an operator may see or change: the one place that scopes operator access."""

from __future__ import annotations

from django.db.models import QuerySet

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


def project_role(*, user, project: Project) -> str | None:
    if user.is_superuser:
        return Membership.Role.OWNER
    return (
        Membership.objects.filter(user=user, project=project).values_list("role", flat=True).first()
    )
