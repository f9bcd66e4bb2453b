"""Project membership decides what an operator sees and may change, in every admin screen and in
the builder API: the owner of project A works with A's rows and never sees project B's."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings

from apps.knowledge import services as knowledge_services
from apps.ledger.models import Run
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import session_for
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload
from tests.projects.factories import MembershipFactory, ProjectFactory
from tests.projects.helpers import admin_client, project_world, row_counts
from tests.routes.factories import RouteFactory
from tests.tools.conftest import TEST_SECRET_KEY
from tests.tools.factories import ToolProviderFactory

pytestmark = pytest.mark.django_db

# (admin changelist, how a row of the world appears in it)
CHANGELISTS = {
    "routes/route": lambda w: w.route,
    "knowledge/knowledgebase": lambda w: w.kb,
    "knowledge/document": lambda w: w.documents[f"{w.project.slug}-refund.md"],
    "agent_auth/agentclient": lambda w: w.agent_client,
    "agent_auth/agentsession": lambda w: w.session,
    "agent_auth/agentauthorization": lambda w: w.session.authorization,
    "ledger/conversation": lambda w: w.run.conversation,
    "ledger/run": lambda w: w.run,
    "ledger/memorynote": lambda w: w.note,
    "projects/project": lambda w: w.project,
    "projects/operatortoken": lambda w: w.token,
    "tools/toolprovider": lambda w: w.provider,
    "tools/tool": lambda w: w.provider.tools.order_by("name").first(),
}
# Changelists where a world has several rows.
ALL_ROWS = {
    "knowledge/document": lambda w: set(w.documents.values()),
    "tools/tool": lambda w: set(w.provider.tools.all()),
}


@pytest.fixture(scope="module")
def worlds(django_db_setup, django_db_blocker):
    """Both projects are built once for this module (building one ingests documents and opens a
    turn); each test still runs in its own savepoint, and the whole is rolled back at the end."""
    # Tool providers' secrets are encrypted with a configured key (the tools tests' own).
    with override_settings(TOOL_SECRET_KEYS=[TEST_SECRET_KEY]), django_db_blocker.unblock(), transaction.atomic():
        worlds = project_world("alpha"), project_world("bravo")
        for world in worlds:
            world.provider = ToolProviderFactory(project=world.project, name=f"{world.project.slug}-store")
        yield worlds
        transaction.set_rollback(True)


@pytest.fixture
def a(worlds):
    return worlds[0]


@pytest.fixture
def b(worlds):
    return worlds[1]


@pytest.mark.parametrize("changelist", sorted(CHANGELISTS))
def test_a_changelist_lists_only_the_operators_project(a, b, changelist):
    response = admin_client(a.user).get(f"/admin/{changelist}/")
    assert response.status_code == 200
    expected = ALL_ROWS[changelist](a) if changelist in ALL_ROWS else {CHANGELISTS[changelist](a)}
    assert set(response.context["cl"].queryset) == expected


@pytest.mark.parametrize("changelist", sorted(CHANGELISTS))
def test_a_changelist_never_names_another_projects_rows(a, b, changelist):
    page = admin_client(a.user).get(f"/admin/{changelist}/").content.decode()
    for name in ("Project bravo", "bravo-route", "KB of bravo", "bravo-app", "bravo-refund.md", "bravo token",
                 "clerk@bravo.example.com", "bravo-store"):
        assert name not in page


@pytest.mark.parametrize("changelist", sorted(CHANGELISTS))
def test_another_projects_object_page_is_refused(a, b, changelist):
    before = row_counts()
    obj = CHANGELISTS[changelist](b)
    response = admin_client(a.user).get(f"/admin/{changelist}/{obj.pk}/change/")
    # The admin answers an object outside the queryset as "does not exist": a redirect to the index.
    assert response.status_code == 302
    assert response["Location"] == "/admin/"
    assert row_counts() == before


@pytest.mark.parametrize("changelist", sorted(CHANGELISTS))
def test_another_projects_object_cannot_be_deleted(a, b, changelist):
    before = row_counts()
    obj = CHANGELISTS[changelist](b)
    response = admin_client(a.user).post(f"/admin/{changelist}/{obj.pk}/delete/", {"post": "yes"})
    assert response.status_code in (302, 403)
    assert response.get("Location") in (None, "/admin/")
    assert row_counts() == before


def test_another_projects_route_cannot_be_changed(a, b):
    response = admin_client(a.user).post(f"/admin/routes/route/{b.route.pk}/change/",
                                         {"project": str(b.project.pk), "key": b.route.key, "name": "Hijacked"})
    assert response.status_code == 302
    b.route.refresh_from_db()
    assert b.route.name == "Route of bravo"


def test_the_run_filter_offers_only_the_operators_routes(a, b):
    page = admin_client(a.user).get("/admin/ledger/run/").content.decode()
    assert "Route of alpha" in page
    assert "Route of bravo" not in page


def _second_project_of(world):
    """Another project of the same operator, so that the project filter has something to offer."""
    charlie = ProjectFactory(name="Project charlie", slug="charlie")
    MembershipFactory(project=charlie, user=world.user)
    return charlie


@pytest.mark.parametrize("changelist, make_row", [
    ("routes/route", lambda project, world: RouteFactory(project=project)),
    ("knowledge/knowledgebase",
     lambda project, world: KnowledgeBaseFactory(project=project, embedding_model=world.kb.embedding_model)),
    ("agent_auth/agentclient", lambda project, world: AgentClientFactory(project=project)),
])
def test_the_project_filter_names_only_the_operators_projects(a, b, changelist, make_row):
    make_row(_second_project_of(a), a)
    response = admin_client(a.user).get(f"/admin/{changelist}/")
    project_filter = next(f for f in response.context["cl"].filter_specs if getattr(f, "field_path", None) == "project")
    assert sorted(label for _, label in project_filter.lookup_choices) == ["Project alpha", "Project charlie"]


@pytest.mark.parametrize("changelist", ["agent_auth/agentsession", "agent_auth/agentauthorization"])
def test_the_client_filter_names_only_the_operators_clients(a, b, changelist):
    session_for(AgentClientFactory(project=a.project, app_id="alpha-second", allowed_routes=[a.route.key]))
    response = admin_client(a.user).get(f"/admin/{changelist}/")
    client_filter = next(f for f in response.context["cl"].filter_specs if getattr(f, "field_path", None) == "client")
    assert sorted(label.split("(")[-1] for _, label in client_filter.lookup_choices) == [
        "alpha-app)", "alpha-second)"]


def test_the_knowledge_base_filter_names_only_the_operators_knowledge_bases(a, b):
    second = KnowledgeBaseFactory(project=a.project, name="Second KB of alpha", embedding_model=a.kb.embedding_model)
    knowledge_services.document_upload(kb=second, files=[upload("note.txt", "备注".encode())])
    response = admin_client(a.user).get("/admin/knowledge/document/")
    kb_filter = next(f for f in response.context["cl"].filter_specs
                     if getattr(f, "field_path", None) == "knowledge_base")
    assert sorted(label for _, label in kb_filter.lookup_choices) == ["KB of alpha", "Second KB of alpha"]


def test_a_superuser_sees_every_projects_runs(a, b):
    from tests.projects.factories import UserFactory

    root = UserFactory(is_superuser=True)
    response = admin_client(root).get("/admin/ledger/run/")
    assert set(response.context["cl"].queryset) == {a.run, b.run}


def test_builder_api_lists_only_the_operators_knowledge_bases(a, b, api_client):
    api_client.force_login(a.user)
    response = api_client.get("/api/v1/builder/knowledge-bases")
    assert response.status_code == 200
    assert [kb["name"] for kb in response.json()["data"]] == ["KB of alpha"]


def test_builder_api_token_lists_only_its_users_knowledge_bases(a, b, api_client):
    response = api_client.get("/api/v1/builder/knowledge-bases", HTTP_AUTHORIZATION=f"Bearer {a.token_secret}")
    assert response.status_code == 200
    assert [kb["name"] for kb in response.json()["data"]] == ["KB of alpha"]


@pytest.mark.parametrize("path", [
    "/api/v1/builder/knowledge-bases/{kb}", "/api/v1/builder/knowledge-bases/{kb}/documents",
    "/api/v1/builder/knowledge-bases/{kb}/documents/report", "/api/v1/builder/knowledge-bases/{kb}/rebuild",
])
def test_builder_api_answers_another_projects_kb_as_not_found(a, b, api_client, path):
    api_client.force_login(a.user)
    response = api_client.get(path.format(kb=b.kb.pk))
    assert response.status_code == 404
    assert response.json()["error"] == "knowledge_base_not_found"


@pytest.mark.parametrize("path", [
    "/api/v1/builder/documents/{doc}", "/api/v1/builder/documents/{doc}/chunks",
    "/api/v1/builder/documents/{doc}/report",
])
def test_builder_api_answers_another_projects_document_as_not_found(a, b, api_client, path):
    api_client.force_login(a.user)
    response = api_client.get(path.format(doc=b.documents["bravo-refund.md"].pk))
    assert response.status_code == 404
    assert response.json()["error"] == "document_not_found"


def test_builder_api_cannot_delete_another_projects_document(a, b, api_client):
    api_client.force_login(a.user)
    before = row_counts()
    response = api_client.delete(f"/api/v1/builder/documents/{b.documents['bravo-refund.md'].pk}")
    assert response.status_code == 404
    assert row_counts() == before


def test_builder_api_cannot_rebuild_another_projects_kb(a, b, api_client):
    api_client.force_login(a.user)
    generations = list(b.kb.generations.values_list("number", "status"))
    response = api_client.post(f"/api/v1/builder/knowledge-bases/{b.kb.pk}/rebuild")
    assert response.status_code == 404
    assert list(b.kb.generations.values_list("number", "status")) == generations
    assert Run.objects.count() == 2
