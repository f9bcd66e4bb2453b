"""The route checks of every tool endpoint, in the tool contract's order: invalid_route,
route_not_allowed, route_unavailable, (agent_client_disabled,) agent_direct_disabled,
audience_not_allowed — each refusal writes nothing."""

import pytest

from apps.routes.services import route_update
from apps.tools.route_tools import route_tools_set
from tests.agent_auth.helpers import PRINCIPAL, bearer, session_for
from tests.routes.factories import RouteFactory
from tests.runtime.tool_api_helpers import catalog, detail, refused, search, stored_rows

pytest_plugins = ["tests.tools.surface_fixtures"]
REVISION = "0" * 64


def _call(api_client, token, endpoint, key):
    if endpoint == "search":
        return search(api_client, token, {"query": "stock"}, key)
    if endpoint == "detail":
        return detail(api_client, token, "order_status", route=key, capability_revision=REVISION)
    return catalog(api_client, token, route=key)


ENDPOINTS = ["search", "detail", "catalog"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("key", ["Store", "auto", "a", "store assistant"])
def test_a_malformed_route_is_invalid_route(api_client, issued, tool_route, endpoint, key):
    before = stored_rows()
    refused(_call(api_client, issued.access_token, endpoint, key), 400, "invalid_route")
    assert stored_rows() == before


@pytest.mark.parametrize("endpoint", ["detail", "catalog"])
def test_a_missing_route_parameter_is_invalid_route(api_client, issued, tool_route, endpoint):
    response = (detail(api_client, issued.access_token, "order_status", capability_revision=REVISION)
                if endpoint == "detail" else catalog(api_client, issued.access_token))
    refused(response, 400, "invalid_route")
    assert response.json()["message"] == "route is missing: name the workspace (its route key)."


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_route_outside_the_grant_is_route_not_allowed(api_client, issued, tool_route, endpoint):
    RouteFactory(project=tool_route.project, key="back-office", tools_direct_enabled=True)
    before = stored_rows()
    refused(_call(api_client, issued.access_token, endpoint, "back-office"), 403, "route_not_allowed")
    assert stored_rows() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_route_that_does_not_exist_outside_the_grant_is_route_not_allowed(api_client, issued, tool_route,
                                                                           endpoint):
    refused(_call(api_client, issued.access_token, endpoint, "ghost-route"), 403, "route_not_allowed")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_disabled_route_is_route_unavailable(api_client, issued, tool_route, endpoint):
    route_update(route=tool_route, enabled=False)
    refused(_call(api_client, issued.access_token, endpoint, "store-assistant"), 404, "route_unavailable")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_direct_tools_off_is_agent_direct_disabled(api_client, issued, tool_route, endpoint):
    route_tools_set(route=tool_route, tools_direct_enabled=False)
    before = stored_rows()
    refused(_call(api_client, issued.access_token, endpoint, "store-assistant"), 403, "agent_direct_disabled")
    assert stored_rows() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_an_audience_the_route_does_not_admit_is_audience_not_allowed(api_client, agent_client, hr_route, endpoint):
    route_tools_set(route=hr_route, tools_direct_enabled=True)
    outsider = session_for(agent_client, principal={**PRINCIPAL, "audience": "customer"})
    refused(_call(api_client, outsider.access_token, endpoint, "hr-helpdesk"), 403, "audience_not_allowed")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_direct_tools_are_checked_before_the_audience(api_client, agent_client, hr_route, endpoint):
    outsider = session_for(agent_client, principal={**PRINCIPAL, "audience": "customer"})
    refused(_call(api_client, outsider.access_token, endpoint, "hr-helpdesk"), 403, "agent_direct_disabled")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_the_grant_is_checked_before_the_routes_state(api_client, issued, tool_route, endpoint):
    RouteFactory(project=tool_route.project, key="back-office", enabled=False)
    refused(_call(api_client, issued.access_token, endpoint, "back-office"), 403, "route_not_allowed")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_without_a_token_is_401(api_client, tool_route, endpoint):
    response = _call(api_client, "not-a-token", endpoint, "store-assistant")
    assert response.status_code == 401
    assert response["Cache-Control"] == "no-store"


def test_the_route_is_checked_before_the_body(api_client, issued, tool_route):
    route_tools_set(route=tool_route, tools_direct_enabled=False)
    response = api_client.generic("POST", "/agent-api/v1/workspaces/store-assistant/capabilities/search", "{}",
                                  content_type="application/json", **bearer(issued.access_token))
    refused(response, 403, "agent_direct_disabled")
