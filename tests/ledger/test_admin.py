"""The operator's read-only ledger, scoped to their projects."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.ledger.models import Conversation, MemoryNote, Run
from apps.projects.models import Membership
from tests.ledger.helpers import complete_run, ledger_counts, open_turn, post_json
from tests.projects.factories import MembershipFactory


def _admin(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def ledger(api_client, issued, route):
    run_id = open_turn(api_client, issued.access_token, route.key).json()["run_id"]
    complete_run(api_client, issued.access_token, run_id, content="答复：Ada 在三号店。")
    post_json(api_client, f"/agent-api/v1/workspaces/{route.key}/memories", {"content": "偏好简体中文"},
              issued.access_token)
    return Run.objects.get()


@pytest.fixture
def viewer(route):
    return MembershipFactory(project=route.project, role=Membership.Role.VIEWER)


@pytest.fixture
def owner(route):
    return MembershipFactory(project=route.project, role=Membership.Role.OWNER)


def test_conversations_list_by_route_and_principal(ledger, viewer):
    response = _admin(viewer.user).get("/admin/ledger/conversation/")
    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == [ledger.conversation]
    assert "ada@example.com" in response.content.decode()


def test_a_conversation_shows_its_messages_and_runs(ledger, viewer):
    page = _admin(viewer.user).get(f"/admin/ledger/conversation/{ledger.conversation_id}/change/").content.decode()
    assert "答复：Ada 在三号店。" in page
    assert "帮我查一下员工 Ada (1)" in page
    assert str(ledger.pk) in page


def test_a_run_shows_state_revisions_timings_and_the_frozen_context(ledger, viewer):
    page = _admin(viewer.user).get(f"/admin/ledger/run/{ledger.pk}/change/").content.decode()
    for text in (ledger.profile_revision, ledger.capability_revision, ledger.request_hash, "Completed",
                 "memory_refs"):
        assert text in page


def test_memory_notes_list_per_route(ledger, viewer):
    response = _admin(viewer.user).get("/admin/ledger/memorynote/")
    assert [note.content for note in response.context["cl"].queryset] == ["偏好简体中文"]


@pytest.mark.parametrize("model", ["conversation", "run", "memorynote"])
def test_an_operator_of_another_project_sees_nothing(ledger, model):
    stranger = MembershipFactory(role=Membership.Role.OWNER)
    response = _admin(stranger.user).get(f"/admin/ledger/{model}/")
    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == []


def test_an_operator_of_another_project_cannot_open_a_run(ledger):
    stranger = MembershipFactory(role=Membership.Role.OWNER)
    response = _admin(stranger.user).get(f"/admin/ledger/run/{ledger.pk}/change/")
    assert response.status_code == 302  # the admin redirects to its index for an object it hides


@pytest.mark.parametrize("path", [
    "/admin/ledger/conversation/add/", "/admin/ledger/run/add/", "/admin/ledger/memorynote/add/",
])
def test_even_an_owner_cannot_add_ledger_rows(ledger, owner, path):
    assert _admin(owner.user).get(path).status_code == 403


def test_even_an_owner_cannot_change_or_delete_a_run(ledger, owner):
    admin = _admin(owner.user)
    before = ledger_counts()
    assert admin.post(f"/admin/ledger/run/{ledger.pk}/change/", {"state": "failed"}).status_code == 403
    assert admin.post(f"/admin/ledger/run/{ledger.pk}/delete/", {"post": "yes"}).status_code == 403
    note = MemoryNote.objects.get()
    assert admin.post(f"/admin/ledger/memorynote/{note.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ledger_counts() == before
    assert Run.objects.get().state == "completed"


def test_the_run_list_does_not_grow_queries_with_rows(api_client, issued, route, viewer):
    open_turn(api_client, issued.access_token, route.key, 1)
    admin = _admin(viewer.user)
    with CaptureQueriesContext(connection) as one:
        admin.get("/admin/ledger/run/")
    for n in range(2, 7):
        open_turn(api_client, issued.access_token, route.key, n, client_conversation_id=f"c-{n}")
    with CaptureQueriesContext(connection) as many:
        admin.get("/admin/ledger/run/")
    assert len(many) == len(one)
    assert Conversation.objects.count() == 6


def test_the_route_filter_never_names_another_projects_routes(ledger, viewer):
    from tests.routes.factories import RouteFactory

    RouteFactory(key="secret-route", name="Another project's secret route")
    page = _admin(viewer.user).get("/admin/ledger/conversation/").content.decode()
    assert "门店助手" in page
    assert "secret route" not in page
