from __future__ import annotations

from django.db import transaction

from apps.projects.models import Membership, Project


@transaction.atomic
def project_create(*, name: str, slug: str, description: str = "", owner=None) -> Project:
    """Create a project; the creating operator becomes its owner."""
    project = Project(name=name, slug=slug, description=description)
    project.full_clean()
    project.save()
    if owner is not None:
        Membership.objects.create(project=project, user=owner, role=Membership.Role.OWNER)
    return project


@transaction.atomic
def membership_set(*, project: Project, user, role: str) -> Membership:
    """Give `user` this role in `project`; writes nothing when they already have it."""
    membership, created = Membership.objects.select_for_update().get_or_create(
        project=project, user=user, defaults={"role": role})
    if not created and membership.role != role:
        membership.role = role
        membership.save(update_fields=["role", "updated_at"])
    return membership
