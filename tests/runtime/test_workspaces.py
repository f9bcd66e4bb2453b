from datetime import timedelta

import pytest
from django.utils import timezone

from apps.agent_auth.models import AgentSession
from apps.agent_auth.services import session_revoke
from apps.routes.services import route_update
from tests.agent_auth.helpers import PRINCIPAL, bearer, session_for
from tests.routes.factories import RouteFactory

URL = "/agent-api/v1/workspaces"


def _keys(response):
    return [workspace["route"] for workspace in response.json()["workspaces"]]


def test_lists_the_routes_the_session_may_use(api_client, issued, route, hr_route):
    response = api_client.get(URL, **bearer(issued.access_token))
    assert response.status_code == 200
    assert response.json() == {
        "schema_version": "bailing.agent-workspaces.v1",
        "workspaces": [
            {"route": "hr-helpdesk", "name": "HR Helpdesk", "description": "A test workspace."},
            {"route": "store-assistant", "name": "门店助手", "description": "门店店员助手。"},
        ],
    }
    assert response["Cache-Control"] == "no-store"


def test_only_routes_granted_to_the_session(api_client, agent_client):
    issued = session_for(agent_client, granted=["store-assistant"])
    assert _keys(api_client.get(URL, **bearer(issued.access_token))) == ["store-assistant"]


def test_a_route_dropped_from_the_client_allowlist_disappears_at_once(api_client, agent_client, issued):
    agent_client.allowed_routes = ["hr-helpdesk"]
    agent_client.save()
    assert _keys(api_client.get(URL, **bearer(issued.access_token))) == ["hr-helpdesk"]


def test_a_disabled_route_is_not_listed(api_client, issued, hr_route):
    route_update(route=hr_route, enabled=False)
    assert _keys(api_client.get(URL, **bearer(issued.access_token))) == ["store-assistant"]


def test_a_route_with_local_agents_off_is_not_listed(api_client, issued, hr_route):
    route_update(route=hr_route, agent_client_enabled=False)
    assert _keys(api_client.get(URL, **bearer(issued.access_token))) == ["store-assistant"]


def test_a_route_not_admitting_the_audience_is_not_listed(api_client, agent_client):
    issued = session_for(agent_client, principal={**PRINCIPAL, "audience": "customer"})
    assert _keys(api_client.get(URL, **bearer(issued.access_token))) == ["store-assistant"]


def test_a_principal_without_audience_sees_only_open_routes(api_client, agent_client):
    principal = {key: value for key, value in PRINCIPAL.items() if key != "audience"}
    issued = session_for(agent_client, principal=principal)
    assert _keys(api_client.get(URL, **bearer(issued.access_token))) == ["store-assistant"]


def test_the_same_key_in_another_project_is_never_listed(api_client, issued, route):
    route_update(route=route, enabled=False)
    RouteFactory(key="store-assistant", name="Other project's route")
    assert _keys(api_client.get(URL, **bearer(issued.access_token))) == ["hr-helpdesk"]


def test_an_etag_is_sent_and_if_none_match_answers_304(api_client, issued):
    first = api_client.get(URL, **bearer(issued.access_token))
    etag = first["ETag"]
    assert etag.startswith('"') and len(etag) == 66
    again = api_client.get(URL, HTTP_IF_NONE_MATCH=etag, **bearer(issued.access_token))
    assert again.status_code == 304
    assert again.content == b""
    assert again["ETag"] == etag
    assert again["Cache-Control"] == "no-store"


def test_a_stale_etag_gets_the_new_list(api_client, issued, route):
    etag = api_client.get(URL, **bearer(issued.access_token))["ETag"]
    route_update(route=route, name="门店助手 2")
    response = api_client.get(URL, HTTP_IF_NONE_MATCH=etag, **bearer(issued.access_token))
    assert response.status_code == 200
    assert response["ETag"] != etag


@pytest.mark.parametrize("headers", [{}, {"HTTP_AUTHORIZATION": "Bearer bha_nope"}])
def test_without_a_valid_bearer_is_401(api_client, issued, headers):
    response = api_client.get(URL, **headers)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response["Cache-Control"] == "no-store"


def test_a_revoked_session_is_401_at_once(api_client, issued):
    session_revoke(session=issued.session, revoked_by="operator", reason="test")
    assert api_client.get(URL, **bearer(issued.access_token)).status_code == 401


def test_a_session_past_its_30_days_is_401(api_client, issued):
    AgentSession.objects.update(refresh_expires_at=timezone.now() - timedelta(seconds=1))
    assert api_client.get(URL, **bearer(issued.access_token)).status_code == 401


def test_listing_takes_two_queries_whatever_the_number_of_routes(api_client, agent_client, route,
                                                                   django_assert_num_queries):
    keys = [f"extra-{i}" for i in range(10)]
    for key in keys:
        RouteFactory(project=route.project, key=key)
    agent_client.allowed_routes = [*agent_client.allowed_routes, *keys]
    agent_client.save()
    issued = session_for(agent_client, routes=agent_client.allowed_routes)
    with django_assert_num_queries(2):  # session (with client) + routes; last_used_at is fresh
        response = api_client.get(URL, **bearer(issued.access_token))
    assert len(response.json()["workspaces"]) == 12


def test_no_trailing_slash_redirect(api_client, issued):
    response = api_client.get(URL + "/", **bearer(issued.access_token))
    assert response.status_code == 404
    assert "Location" not in response
