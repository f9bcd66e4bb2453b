import json
from datetime import UTC, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.agent_auth.models import AgentAuthorization, AgentRefreshToken, AgentSession
from apps.agent_auth.selectors import session_live_q
from apps.projects.models import Membership
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, bearer, session_for
from tests.projects.factories import MembershipFactory

SESSION_URL = "/agent-auth/v1/session"
REVOKE_URL = "/agent-auth/v1/revoke"


def _iso(value):
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def issued(agent_client):
    return session_for(agent_client)


def test_session_describes_the_bearers_session(api_client, agent_client, issued):
    response = api_client.get(SESSION_URL, **bearer(issued.access_token))
    assert response.status_code == 200
    session = AgentSession.objects.get()
    assert response.json() == {
        "session_id": str(session.pk),
        "client_app_id": agent_client.app_id,
        "device_label": "Ada's laptop",
        "principal": PRINCIPAL,
        "on_behalf_of": "ada@example.com",
        "allowed_routes": ["store-assistant", "hr-helpdesk"],
        "created_at": _iso(session.created_at),
        "expires_at": _iso(session.access_expires_at),
        "refresh_expires_at": _iso(session.refresh_expires_at),
        "subject_display_status": "missing",
    }
    assert response.json()["refresh_expires_at"] > response.json()["expires_at"]
    assert response["Cache-Control"] == "no-store"


def test_session_lists_only_the_routes_its_client_still_allows(api_client, agent_client, issued):
    agent_client.allowed_routes = ["hr-helpdesk"]
    agent_client.save()
    response = api_client.get(SESSION_URL, **bearer(issued.access_token))
    assert response.status_code == 200
    assert response.json()["allowed_routes"] == ["hr-helpdesk"]
    # The grant itself is kept: allowing the route again gives it back, as to every endpoint.
    assert AgentSession.objects.get().allowed_routes == ["store-assistant", "hr-helpdesk"]
    agent_client.allowed_routes = ["hr-helpdesk", "store-assistant"]
    agent_client.save()
    response = api_client.get(SESSION_URL, **bearer(issued.access_token))
    assert response.json()["allowed_routes"] == ["store-assistant", "hr-helpdesk"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_AUTHORIZATION": "Bearer"},
        {"HTTP_AUTHORIZATION": "Bearer bha_unknown"},
        {"HTTP_AUTHORIZATION": "Bearer a b"},
        {"HTTP_AUTHORIZATION": "Token bha_x"},
    ],
)
def test_session_without_a_valid_bearer_is_401(api_client, issued, headers):
    response = api_client.get(SESSION_URL, **headers)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response["WWW-Authenticate"] == "Bearer"
    assert response["Cache-Control"] == "no-store"


def test_a_refresh_token_is_not_an_access_token(api_client, issued):
    assert api_client.get(SESSION_URL, **bearer(issued.refresh_token)).status_code == 401


def test_an_expired_access_token_is_401(api_client, issued):
    AgentSession.objects.update(access_expires_at=timezone.now() - timedelta(seconds=1))
    assert api_client.get(SESSION_URL, **bearer(issued.access_token)).status_code == 401


def test_a_disabled_client_ends_its_sessions_at_once(api_client, agent_client, issued):
    agent_client.enabled = False
    agent_client.save()
    response = api_client.get(SESSION_URL, **bearer(issued.access_token))
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"


def test_last_used_is_updated_at_most_once_a_minute(api_client, issued, django_assert_num_queries):
    stale = timezone.now() - timedelta(minutes=5)
    AgentSession.objects.update(last_used_at=stale)
    api_client.get(SESSION_URL, **bearer(issued.access_token))
    touched = AgentSession.objects.get().last_used_at
    assert touched > stale
    with django_assert_num_queries(1):  # the session lookup; no UPDATE within the minute
        api_client.get(SESSION_URL, **bearer(issued.access_token))
    assert AgentSession.objects.get().last_used_at == touched


def test_revoke_with_the_bearer(api_client, issued):
    response = api_client.post(REVOKE_URL, **bearer(issued.access_token))
    assert response.status_code == 200
    assert response.json() == {"revoked": True}
    session = AgentSession.objects.get()
    assert session.revoked_at is not None and session.revoked_by == "agent"
    assert api_client.get(SESSION_URL, **bearer(issued.access_token)).status_code == 401


def test_revoke_with_the_refresh_token(api_client, agent_client, issued):
    body = {"client_app_id": agent_client.app_id, "refresh_token": issued.refresh_token}
    response = api_client.post(REVOKE_URL, body, format="json")
    assert response.status_code == 200
    assert response.json() == {"revoked": True}
    assert AgentSession.objects.get().revoked_by == "agent"
    assert api_client.get(SESSION_URL, **bearer(issued.access_token)).status_code == 401


def test_revoke_with_an_unknown_refresh_token_changes_nothing(api_client, agent_client, issued):
    body = {"client_app_id": agent_client.app_id, "refresh_token": "bhr_" + "z" * 43}
    response = api_client.post(REVOKE_URL, body, format="json")
    assert response.status_code == 200
    assert AgentSession.objects.get().revoked_at is None


def test_revoke_with_another_clients_refresh_token_changes_nothing(api_client, route, issued):
    other = AgentClientFactory(project=route.project, allowed_routes=[route.key])
    api_client.post(REVOKE_URL, {"client_app_id": other.app_id, "refresh_token": issued.refresh_token}, format="json")
    assert AgentSession.objects.get().revoked_at is None


def test_revoke_with_an_unknown_client_is_invalid_client(api_client, issued):
    response = api_client.post(REVOKE_URL, {"client_app_id": "nobody", "refresh_token": issued.refresh_token},
                               format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client"
    assert AgentSession.objects.get().revoked_at is None


@pytest.mark.parametrize("body", [{}, {"client_app_id": "x"}, {"refresh_token": "bhr_x"}])
def test_revoke_without_bearer_or_refresh_token_is_invalid_request(api_client, issued, body):
    response = api_client.post(REVOKE_URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert AgentSession.objects.get().revoked_at is None


def test_revoke_with_an_invalid_bearer_is_401(api_client, issued):
    response = api_client.post(REVOKE_URL, **bearer("bha_nope"))
    assert response.status_code == 401
    assert AgentSession.objects.get().revoked_at is None


def test_the_client_revokes_one_of_its_sessions(api_client, agent_client, issued):
    response = api_client.post(f"/agent-auth/v1/sessions/{issued.session.pk}/revoke", **bearer(agent_client.token))
    assert response.status_code == 200
    assert response.json() == {"revoked": True}
    assert AgentSession.objects.get().revoked_by == "client"
    assert api_client.get(SESSION_URL, **bearer(issued.access_token)).status_code == 401


def test_revoking_twice_is_still_200_and_keeps_the_first_revocation(api_client, agent_client, issued):
    url = f"/agent-auth/v1/sessions/{issued.session.pk}/revoke"
    api_client.post(url, **bearer(agent_client.token))
    first = AgentSession.objects.get().revoked_at
    assert api_client.post(url, **bearer(agent_client.token)).status_code == 200
    assert AgentSession.objects.get().revoked_at == first


def test_a_client_cannot_revoke_another_clients_session(api_client, route, issued):
    other = AgentClientFactory(project=route.project, allowed_routes=[route.key])
    response = api_client.post(f"/agent-auth/v1/sessions/{issued.session.pk}/revoke", **bearer(other.token))
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert AgentSession.objects.get().revoked_at is None


def test_client_revoke_needs_the_client_token(api_client, issued):
    response = api_client.post(f"/agent-auth/v1/sessions/{issued.session.pk}/revoke", **bearer(issued.access_token))
    assert response.status_code == 401
    assert AgentSession.objects.get().revoked_at is None


@pytest.mark.parametrize("content_type", ["*/*", "application/*", "*/json"])
def test_revoke_with_a_media_range_as_content_type_is_invalid_request_and_revokes_nothing(
        api_client, agent_client, issued, content_type):
    body = json.dumps({"client_app_id": agent_client.app_id, "refresh_token": issued.refresh_token})
    response = api_client.generic("POST", REVOKE_URL, body, content_type=content_type)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert content_type in response.json()["message"]
    assert response["Cache-Control"] == "no-store"
    assert AgentSession.objects.get().revoked_at is None
    assert api_client.get(SESSION_URL, **bearer(issued.access_token)).status_code == 200


# Bodies no revoke takes: not JSON, not an object, fields of the wrong type, unknown fields.
BAD_BODIES = ["{not json", "[]", "null", '"bhr_x"', "1", '{"reason": "lost laptop"}', '{"session_id": null}',
              '{"client_app_id": 5, "refresh_token": "bhr_x"}', '{"client_app_id": "a", "refresh_token": ["bhr_x"]}']


def _assert_invalid_request_and_nothing_revoked(api_client, response, issued):
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert response.json()["message"]
    assert response["Cache-Control"] == "no-store"
    assert AgentSession.objects.get().revoked_at is None
    assert api_client.get(SESSION_URL, **bearer(issued.access_token)).status_code == 200


@pytest.mark.parametrize("body", [*BAD_BODIES, '{"client_app_id": "x"}', '{"refresh_token": "bhr_x"}'])
def test_revoke_with_the_bearer_and_a_body_of_another_shape_is_invalid_request(api_client, issued, body):
    response = api_client.generic("POST", REVOKE_URL, body, content_type="application/json",
                                  **bearer(issued.access_token))
    _assert_invalid_request_and_nothing_revoked(api_client, response, issued)


def test_revoke_with_the_bearer_and_its_refresh_token_with_an_unknown_field_is_invalid_request(
        api_client, agent_client, issued):
    body = {"client_app_id": agent_client.app_id, "refresh_token": issued.refresh_token, "everywhere": True}
    response = api_client.post(REVOKE_URL, body, format="json", **bearer(issued.access_token))
    _assert_invalid_request_and_nothing_revoked(api_client, response, issued)
    assert response.json()["fields"] == {"everywhere": ["Unknown field."]}


def test_revoke_with_the_bearer_and_an_empty_object(api_client, issued):
    response = api_client.post(REVOKE_URL, {}, format="json", **bearer(issued.access_token))
    assert (response.status_code, response.json()) == (200, {"revoked": True})
    assert AgentSession.objects.get().revoked_by == "agent"


def test_revoke_with_the_bearer_and_the_refresh_token_body(api_client, agent_client, issued):
    body = {"client_app_id": agent_client.app_id, "refresh_token": issued.refresh_token}
    response = api_client.post(REVOKE_URL, body, format="json", **bearer(issued.access_token))
    assert (response.status_code, response.json()) == (200, {"revoked": True})
    assert AgentSession.objects.get().revoked_by == "agent"


@pytest.mark.parametrize("body", BAD_BODIES)
def test_revoke_by_refresh_token_with_a_body_of_another_shape_is_invalid_request(api_client, issued, body):
    response = api_client.generic("POST", REVOKE_URL, body, content_type="application/json")
    _assert_invalid_request_and_nothing_revoked(api_client, response, issued)


def test_revoke_by_refresh_token_with_an_unknown_field_is_invalid_request(api_client, agent_client, issued):
    body = {"client_app_id": agent_client.app_id, "refresh_token": issued.refresh_token, "reason": "lost laptop"}
    response = api_client.post(REVOKE_URL, body, format="json")
    _assert_invalid_request_and_nothing_revoked(api_client, response, issued)
    assert response.json()["fields"] == {"reason": ["Unknown field."]}


@pytest.mark.parametrize("body", [*BAD_BODIES, '{"session_id": "00000000-0000-0000-0000-000000000000"}'])
def test_the_clients_revoke_with_a_body_other_than_an_empty_object_is_invalid_request(
        api_client, agent_client, issued, body):
    response = api_client.generic("POST", f"/agent-auth/v1/sessions/{issued.session.pk}/revoke", body,
                                  content_type="application/json", **bearer(agent_client.token))
    _assert_invalid_request_and_nothing_revoked(api_client, response, issued)


def test_the_clients_revoke_with_an_empty_object(api_client, agent_client, issued):
    response = api_client.post(f"/agent-auth/v1/sessions/{issued.session.pk}/revoke", {}, format="json",
                               **bearer(agent_client.token))
    assert (response.status_code, response.json()) == (200, {"revoked": True})
    assert AgentSession.objects.get().revoked_by == "client"


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "text/html;q=0.9, image/*"])
def test_an_accept_header_without_json_still_gets_json(api_client, issued, accept):
    """JSON is the only representation; DRF answered such requests 406 not_acceptable."""
    ok = api_client.get(SESSION_URL, HTTP_ACCEPT=accept, **bearer(issued.access_token))
    assert (ok.status_code, ok["Content-Type"]) == (200, "application/json")
    assert ok.json()["session_id"] == str(issued.session.pk)
    refused = api_client.get(SESSION_URL, HTTP_ACCEPT=accept)
    assert (refused.status_code, refused.json()["error"]) == (401, "unauthorized")
    workspaces = api_client.get("/agent-api/v1/workspaces", HTTP_ACCEPT=accept, **bearer(issued.access_token))
    assert (workspaces.status_code, workspaces["Content-Type"]) == (200, "application/json")


def _session_written():
    session = AgentSession.objects.values_list("access_token_hash", "access_expires_at", "last_used_at", "revoked_at",
                                               "updated_at").get()
    return session, list(AgentRefreshToken.objects.values_list("token_hash", "generation", "rotated_at"))


def test_a_session_whose_authorization_row_is_gone_is_refused_and_nothing_is_written(api_client, agent_client,
                                                                                     issued):
    """Every session is made from its authorization, and the product never deletes one: a session
    whose row is gone (a database's delete; the FK is SET_NULL) has nothing left to say who
    approved it, so it fails closed rather than passing for one a business backend approved."""
    AgentSession.objects.update(last_used_at=timezone.now() - timedelta(minutes=5))  # a use would write it
    AgentAuthorization.objects.filter(pk=issued.session.authorization_id).delete()
    assert AgentSession.objects.get().authorization_id is None
    before = _session_written()

    response = api_client.get(SESSION_URL, **bearer(issued.access_token))
    assert (response.status_code, response.json()["error"]) == (401, "unauthorized")
    refreshed = api_client.post("/agent-auth/v1/token", {
        "grant_type": "refresh_token", "client_app_id": agent_client.app_id, "refresh_token": issued.refresh_token,
    }, format="json")
    assert (refreshed.status_code, refreshed.json()["error"]) == (400, "invalid_grant")
    assert _session_written() == before
    assert not AgentSession.objects.filter(session_live_q(timezone.now())).exists()


def test_the_console_lists_a_session_whose_authorization_row_is_gone_as_ended(agent_client, issued, route):
    AgentAuthorization.objects.filter(pk=issued.session.authorization_id).delete()
    owner = Client()
    owner.force_login(MembershipFactory(project=route.project, role=Membership.Role.OWNER).user)
    listed = owner.get("/admin/agent_auth/agentsession/").content.decode()
    assert "Ended: its authorization record was deleted, so nothing says who approved it" in listed
    assert '<td class="field-state">Active</td>' not in listed
    assert owner.get("/admin/agent_auth/agentsession/", {"state": "active"}).context["cl"].result_count == 0


def test_a_session_whose_authorization_row_is_gone_is_named_so_by_tasks_and_runs(api_client, issued, route):
    from apps.ledger.models import Run
    from apps.tasks.errors import TaskInvalid, TaskScopeBlocked
    from apps.tasks.models import Task
    from apps.tasks.services import MemberSpec, PolicySpec, task_create, task_members_verify
    from tests.ledger.helpers import open_turn

    assert open_turn(api_client, issued.access_token, route.key).status_code == 200
    owner = MembershipFactory(project=route.project, role=Membership.Role.OWNER).user
    spec = MemberSpec(session_id=str(issued.session.pk), workspace=route.key, client_conversation_id="c-1")
    task, _ = task_create(project=route.project, user=owner, request_id="t-1", members=[spec], policy=PolicySpec())

    AgentAuthorization.objects.filter(pk=issued.session.authorization_id).delete()
    with pytest.raises(TaskInvalid) as invalid:
        task_create(project=route.project, user=owner, request_id="t-2", members=[spec], policy=PolicySpec())
    assert invalid.value.message == "members[0].session_id: The session's authorization record was deleted."
    assert Task.objects.count() == 1
    with pytest.raises(TaskScopeBlocked):
        task_members_verify(task=task)
    task.refresh_from_db()
    assert (task.state, task.blocked_reason) == (
        Task.State.BLOCKED, "a member session's authorization record was deleted")
    console = Client()
    console.force_login(owner)
    run = Run.objects.get()
    assert "never completed: the session&#x27;s authorization record was deleted" in console.get(
        f"/admin/ledger/run/{run.pk}/change/").content.decode()
    assert ">authorization deleted<" in console.get(f"/admin/tasks/task/{task.pk}/change/").content.decode()
