import pytest

from apps.routes.services import route_update
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_create, provider_reimport
from apps.tools.surface import route_surface
from tests.runtime.tool_api_helpers import detail, refused, stored_rows
from tests.tools.surface_helpers import store_spec_with

pytest_plugins = ["tests.tools.surface_fixtures"]


def _revision(route, session):
    route.refresh_from_db()
    return route_surface(route=route, session=session).revision


def _detail(api_client, issued, name, route, **params):
    params.setdefault("route", "store-assistant")
    params.setdefault("capability_revision", _revision(route, issued.session))
    return detail(api_client, issued.access_token, name, **params)


def test_detail_answers_the_definition_and_the_guidance(api_client, issued, tool_route):
    revision = _revision(tool_route, issued.session)
    response = _detail(api_client, issued, "product_lookup", tool_route)
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert list(body) == ["schema_version", "route", "capability_revision", "tool", "usage_guidance"]
    assert (body["schema_version"], body["route"], body["capability_revision"]) == (
        "bailing.agent-tool-detail.v1", "store-assistant", revision)
    assert body["tool"]["name"] == "product_lookup" and body["tool"]["usage_guidance_available"] is True
    text = ("Look up a product by SKU\n\nReturns name, price and stock for one product.\n\nWhen to use: The user "
            "names a product or SKU and asks about it.\n\nReturns: The product's name, price and units in stock."
            "\n\nExample: {\"sku\": \"TEA-001\"}")
    assert body["usage_guidance"] == {"text": text, "truncated": False, "source_chars": len(text),
                                      "max_chars": 32768, "source_bytes": len(text.encode()), "max_bytes": 65536}


def test_detail_shows_the_routes_forced_approval(api_client, issued, tool_route):
    route_tools_set(route=tool_route, write_tools=["stock_adjust", "customer_note"],
                    force_approval_tools=["customer_note"])
    assert _detail(api_client, issued, "customer_note", tool_route).json()["tool"]["approval_required"] is True


def test_long_guidance_is_cut_at_whole_characters_within_both_limits(api_client, issued, route, tool_keys):
    long_text = "说明" * 20000  # 40000 characters, 120000 UTF-8 bytes: the byte limit comes first
    spec = store_spec_with("description: Returns name, price and stock for one product.",
                           f"description: {long_text}")
    provider = provider_create(project=route.project, name="long", base_url="http://127.0.0.1:9/x",
                               secret="s3cret-value-of-16-chars", spec=spec).provider
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["product_lookup"])])
    guidance = _detail(api_client, issued, "product_lookup", route).json()["usage_guidance"]
    assert guidance["truncated"] is True
    assert len(guidance["text"].encode()) <= 65536 and len(guidance["text"]) <= 32768
    assert len(guidance["text"].encode()) > 65536 - 3
    assert guidance["source_chars"] > 40000 and guidance["source_bytes"] > 120000
    assert guidance["text"].startswith("Look up a product by SKU\n\n说明说明")


def test_an_old_revision_is_capability_changed(api_client, issued, tool_route, store_provider):
    old = _revision(tool_route, issued.session)
    provider_reimport(provider=store_provider, spec=store_spec_with("summary: Order status", "summary: Where is it"))
    before = stored_rows()
    refused(_detail(api_client, issued, "order_status", tool_route, capability_revision=old), 409,
            "capability_changed")
    assert stored_rows() == before


def test_a_tool_outside_the_surface_is_not_found(api_client, issued, tool_route):
    before = stored_rows()
    refused(_detail(api_client, issued, "customer_note", tool_route), 404, "tool_not_found")
    assert stored_rows() == before


@pytest.mark.parametrize("name", ["order_cancel", "9lives", "a" * 65, "kb_search"])
def test_an_unknown_or_malformed_tool_name_is_not_found(api_client, issued, tool_route, name):
    refused(_detail(api_client, issued, name, tool_route), 404, "tool_not_found")


def test_a_read_only_route_hides_its_write_tools(api_client, issued, tool_route):
    route_tools_set(route=tool_route, permission="read_only")
    refused(_detail(api_client, issued, "stock_adjust", tool_route), 404, "tool_not_found")


@pytest.mark.parametrize("revision", ["", "abc", "A" * 64, "g" * 64])
def test_a_malformed_revision_is_invalid_request(api_client, issued, tool_route, revision):
    refused(_detail(api_client, issued, "order_status", tool_route, capability_revision=revision), 400,
            "invalid_request")


def test_a_missing_revision_is_invalid_request(api_client, issued, tool_route):
    refused(detail(api_client, issued.access_token, "order_status", route="store-assistant"), 400, "invalid_request")


def test_an_unknown_query_parameter_is_invalid_request(api_client, issued, tool_route):
    refused(_detail(api_client, issued, "order_status", tool_route, verbose="1"), 400, "invalid_request")


def test_detail_needs_the_runtime_switch(api_client, issued, tool_route):
    route_update(route=tool_route, agent_client_enabled=False)
    refused(_detail(api_client, issued, "order_status", tool_route), 403, "agent_client_disabled")
