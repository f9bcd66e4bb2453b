from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Value
from django.db.models.functions import Lower

from apps.projects.models import PROJECT_NAME_MAX, Membership, Project

logger = logging.getLogger("bailinghub.projects")


@transaction.atomic
def project_create(*, name: str, slug: str, description: str = "", owner=None) -> Project:
    """Create a project; the creating operator becomes its owner."""
    project = Project(name=name, slug=slug, description=description)
    project.full_clean()
    project.save()
    if owner is not None:
        Membership.objects.create(project=project, user=owner, role=Membership.Role.OWNER)
    return project


def project_name_free(name: str) -> str:
    """`name`, or when another project holds it (ignoring case, as the unique index compares them)
    the first of "Name (2)", "Name (3)", … that none holds, within the field's length."""
    candidate, number = name, 1
    while Project.objects.annotate(folded=Lower("name")).filter(folded=Lower(Value(candidate))).exists():
        number += 1
        suffix = f" ({number})"
        candidate = name[:PROJECT_NAME_MAX - len(suffix)].rstrip() + suffix
    return candidate


@transaction.atomic
def membership_set(*, project: Project, user, role: str) -> Membership:
    """Give `user` this role in `project`; writes nothing when they already have it."""
    membership, created = Membership.objects.select_for_update().get_or_create(
        project=project, user=user, defaults={"role": role})
    if not created and membership.role != role:
        membership.role = role
        membership.save(update_fields=["role", "updated_at"])
    return membership


@transaction.atomic
def project_tool_execution_set(*, project: Project, paused: bool, actor=None) -> Project:
    """Pause or resume the dispatch of agents' tool calls in `project` (the operator's emergency
    switch; the invocation engine reads the flag on every invoke and resume). Setting the value it
    already has writes nothing."""
    locked = Project.objects.select_for_update().get(pk=project.pk)
    if locked.tool_execution_paused != paused:
        locked.tool_execution_paused = paused
        locked.save(update_fields=["tool_execution_paused", "updated_at"])
        logger.warning("project %s: tool execution %s by %s", locked.slug, "paused" if paused else "resumed",
                       getattr(actor, "username", None) or "system")
    project.tool_execution_paused = locked.tool_execution_paused
    return locked
