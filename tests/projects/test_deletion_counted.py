"""The console's delete pages count what a delete takes (apps.projects.admin.deletion_counted) instead
of listing it: the counts, the permissions needed and the refusals must be Django's own, on a whole
project as operators meet it."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.admin.utils import get_deleted_objects
from django.test import RequestFactory

from apps.agent_auth.models import AgentClient
from apps.knowledge.models import Document, KnowledgeBase
from apps.projects import admin as projects_admin
from apps.projects.models import Project
from apps.tasks.services import MemberSpec, PolicySpec, task_create
from tests.projects.factories import UserFactory
from tests.projects.helpers import World, project_world

pytestmark = pytest.mark.django_db(transaction=True)


def _request(user):
    request = RequestFactory().get("/admin/")
    request.user = user
    return request


def _both(obj, user):
    model_admin = admin.site.get_model_admin(type(obj))
    request = _request(user)
    ours = projects_admin.deletion_counted(model_admin, [obj], request)
    django = get_deleted_objects([obj], request, model_admin.admin_site)
    return ours, django


def _same(ours, django) -> None:
    _, counts, perms, protected = ours
    _, django_counts, django_perms, django_protected = django
    assert counts == {str(name): n for name, n in django_counts.items()}
    assert perms == {str(name) for name in django_perms}
    assert bool(protected) == bool(django_protected)


@pytest.fixture
def world() -> World:
    return project_world("alpha")


@pytest.mark.parametrize("model", [KnowledgeBase, Document, AgentClient])
def test_an_owner_deleting_a_row_sees_djangos_counts_and_permissions(world, model):
    obj = model.objects.filter(**({"project": world.project} if model is not Document
                                  else {"knowledge_base": world.kb})).first()
    _same(*_both(obj, world.user))


def test_a_superuser_deleting_a_project_sees_djangos_counts_and_refusals(world):
    _same(*_both(Project.objects.get(pk=world.project.pk), UserFactory(is_staff=True, is_superuser=True)))


def test_a_client_whose_session_is_a_task_member_is_refused_as_django_refuses_it(world):
    task_create(project=world.project, user=world.user, request_id="t-1", members=[MemberSpec(
        session_id=str(world.session.pk), workspace=world.route.key, client_conversation_id="c-1")],
        policy=PolicySpec())
    ours, django = _both(AgentClient.objects.get(pk=world.agent_client.pk), world.user)
    _same(ours, django)
    assert ours[3]


def test_past_the_depth_it_follows_djangos_own_list_is_made(world, monkeypatch):
    monkeypatch.setattr(projects_admin, "DELETION_DEPTH", 1)
    ours, django = _both(KnowledgeBase.objects.get(pk=world.kb.pk), world.user)
    assert ours == django
