from apps.routes.services import route_update
from apps.tools.surface import route_surface
from tests.runtime.tool_api_helpers import catalog, refused, stored_rows

pytest_plugins = ["tests.tools.surface_fixtures"]


def test_the_legacy_catalog_lists_the_surface(api_client, issued, tool_route):
    response = catalog(api_client, issued.access_token, route="store-assistant")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert list(body) == ["schema_version", "route", "capability_revision", "tools"]
    assert (body["schema_version"], body["route"]) == ("bailing.agent-tool-catalog.v1", "store-assistant")
    assert body["capability_revision"] == route_surface(route=tool_route, session=issued.session).revision
    assert [tool["name"] for tool in body["tools"]] == ["product_lookup", "order_status", "stock_adjust",
                                                       "order_refund"]


def test_the_catalog_stays_open_with_the_runtime_switch_off(api_client, issued, tool_route):
    route_update(route=tool_route, agent_client_enabled=False)
    assert catalog(api_client, issued.access_token, route="store-assistant").status_code == 200


def test_the_catalog_writes_nothing(api_client, issued, tool_route):
    before = stored_rows()
    catalog(api_client, issued.access_token, route="store-assistant")
    assert stored_rows() == before


def test_an_unknown_query_parameter_is_invalid_request(api_client, issued, tool_route):
    refused(catalog(api_client, issued.access_token, route="store-assistant", page="2"), 400, "invalid_request")


def test_a_repeated_route_parameter_is_invalid_route(api_client, issued, tool_route):
    response = api_client.get("/agent-api/v1/tools?route=store-assistant&route=hr-helpdesk",
                              HTTP_AUTHORIZATION=f"Bearer {issued.access_token}")
    refused(response, 400, "invalid_route")
