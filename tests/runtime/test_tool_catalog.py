import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.routes.services import route_update
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_create
from apps.tools.surface import route_surface
from tests.runtime.tool_api_helpers import catalog, refused, search, stored_rows
from tests.tools.factories import STORE_SPEC, ToolProviderFactory
from tests.tools.surface_helpers import STORE_TOOLS

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


def _large_spec(operations: int, properties: int, description: str = "字" * 900) -> bytes:
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "string", "description": description}
                                               for i in range(properties)}}
    paths = {f"/things/{n}": {"post": {
        "operationId": f"thing_{n:03d}", "summary": f"Thing {n}",
        "requestBody": {"content": {"application/json": {"schema": schema}}},
        "x-agent-capability": {"version": 1, "scope": "things.read", "execution": {"readonly": True}},
        "responses": {"200": {"description": "ok"}}}} for n in range(operations)}
    return json.dumps({"openapi": "3.0.3", "info": {"title": "large", "version": "1"}, "paths": paths}).encode()


# U+2028 is three bytes in UTF-8 and six as sent (DRF escapes it): 30 such tools weigh 0.8 MiB
# unescaped and 1.6 MiB on the wire.
@pytest.mark.parametrize(("description", "properties"), [("字" * 900, 20), ("a" + "\u2028" * 898 + "a", 10)],
                         ids=["hanzi", "line separators"])
def test_a_catalog_over_1_mib_ends_at_the_last_whole_tool_that_fits(api_client, issued, route, tool_keys, description,
                                                                     properties):
    provider = provider_create(project=route.project, name="large", base_url="http://127.0.0.1:9/large",
                               secret="large-secret-of-16-chars",
                               spec=_large_spec(operations=30, properties=properties, description=description)).provider
    names = [f"thing_{n:03d}" for n in range(30)]
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=names)])
    response = catalog(api_client, issued.access_token, route="store-assistant")
    body = response.json()
    assert response.status_code == 200
    assert len(response.content) <= 1024 * 1024
    assert body["truncated"] is True
    assert 0 < len(body["tools"]) < 30
    assert [tool["name"] for tool in body["tools"]] == names[:len(body["tools"])]


def test_a_catalog_that_fits_says_nothing_about_truncation(api_client, issued, tool_route):
    assert "truncated" not in catalog(api_client, issued.access_token, route="store-assistant").json()


def _queries(response_of) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert response_of().status_code == 200
    return len(queries.captured_queries)


def test_the_catalog_and_search_read_as_much_from_four_sources_as_from_one(api_client, issued, tool_route,
                                                                          store_provider):
    """A route drawing one tool from each of four providers is read in as many statements as a
    route drawing one tool from one."""
    token = issued.access_token
    listed = lambda: catalog(api_client, token, route="store-assistant")  # noqa: E731
    searched = lambda: search(api_client, token, {"query": "order"})  # noqa: E731
    route_tools_set(route=tool_route, sources=[SourceSpec(provider=store_provider, allowed_tools=STORE_TOOLS[:1])],
                    write_tools=[], tools_direct_enabled=True)
    listed()  # the session's first use also records it (last_used_at)
    with_one = (_queries(listed), _queries(searched))
    providers = [store_provider, *(ToolProviderFactory(project=tool_route.project, name=f"store-{n}",
                                                       spec=STORE_SPEC) for n in range(3))]
    route_tools_set(route=tool_route, sources=[SourceSpec(provider=provider, allowed_tools=[name])
                                               for provider, name in zip(providers, STORE_TOOLS, strict=False)],
                    write_tools=["stock_adjust", "order_refund"], tools_direct_enabled=True)
    assert len(listed().json()["tools"]) == 4
    assert (_queries(listed), _queries(searched)) == with_one
