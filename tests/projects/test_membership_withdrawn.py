"""An operator taken out of a project, or lowered to viewer, loses what that gave at their next
request: their personal API tokens (scoped by the token, not by the project) and their console pages
read the membership as it is now — and what they keep elsewhere still works."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.knowledge.models import KnowledgeBase
from apps.projects.models import Membership
from apps.projects.services import membership_set
from apps.projects.tokens import operator_token_create
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory, ProjectFactory
from tests.projects.helpers import admin_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def member() -> Membership:
    return MembershipFactory(role=Membership.Role.EDITOR)


@pytest.fixture
def kb(member) -> KnowledgeBase:
    return KnowledgeBaseFactory(project=member.project, name="Returns")


@pytest.fixture
def other_kb(member) -> KnowledgeBase:
    """A KB of another project the same operator stays an editor of."""
    elsewhere = ProjectFactory()
    membership_set(project=elsewhere, user=member.user, role=Membership.Role.EDITOR)
    return KnowledgeBaseFactory(project=elsewhere, name="Elsewhere")


@pytest.fixture
def api(member) -> APIClient:
    _, token = operator_token_create(user=member.user, name="script", scopes=["knowledge:create"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _names(api: APIClient) -> list[str]:
    response = api.get("/api/v1/builder/knowledge-bases")
    assert response.status_code == 200
    return [row["name"] for row in response.json()["data"]]


def _switch_off(api: APIClient, kb: KnowledgeBase):
    return api.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"enabled": False}, format="json")


def test_a_token_of_an_operator_taken_out_of_the_project_no_longer_reaches_it(api, member, kb, other_kb):
    assert sorted(_names(api)) == ["Elsewhere", "Returns"]
    Membership.objects.filter(pk=member.pk).delete()

    assert _names(api) == ["Elsewhere"]
    assert api.get(f"/api/v1/builder/knowledge-bases/{kb.pk}").json()["error"] == "knowledge_base_not_found"
    refused = _switch_off(api, kb)
    assert (refused.status_code, refused.json()["error"]) == (404, "knowledge_base_not_found")
    kb.refresh_from_db()
    assert kb.enabled is True
    # The project the operator is still an editor of is not touched by the withdrawal.
    assert _switch_off(api, other_kb).status_code == 200


def test_a_token_of_an_operator_lowered_to_viewer_reads_but_no_longer_writes(api, member, kb):
    membership_set(project=member.project, user=member.user, role=Membership.Role.VIEWER)

    assert _names(api) == ["Returns"]
    refused = _switch_off(api, kb)
    assert (refused.status_code, refused.json()["error"]) == (403, "forbidden")
    kb.refresh_from_db()
    assert kb.enabled is True


def test_the_console_of_an_operator_taken_out_of_the_project_no_longer_shows_its_rows(member, kb):
    member.user.is_staff = True
    member.user.save()
    console = admin_client(member.user)
    path = f"/admin/knowledge/knowledgebase/{kb.pk}/change/"
    assert console.get(path).status_code == 200
    Membership.objects.filter(pk=member.pk).delete()

    assert console.get(path).status_code == 403
    assert console.get("/admin/knowledge/knowledgebase/").status_code == 403


def test_the_console_of_an_operator_lowered_to_viewer_shows_the_row_but_saves_nothing(member, kb):
    member.user.is_staff = True
    member.user.save()
    console = admin_client(member.user)
    membership_set(project=member.project, user=member.user, role=Membership.Role.VIEWER)
    path = f"/admin/knowledge/knowledgebase/{kb.pk}/change/"
    page = console.get(path)
    assert page.status_code == 200
    assert page.context["has_change_permission"] is False
    assert console.post(path, {"name": "Renamed", "enabled": ""}).status_code == 403
    kb.refresh_from_db()
    assert (kb.name, kb.enabled) == ("Returns", True)
