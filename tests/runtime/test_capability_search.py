import json

import pytest

from apps.routes.services import route_update
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_reimport
from tests.agent_auth.helpers import session_for
from tests.ledger.helpers import open_turn
from tests.runtime.tool_api_helpers import refused, search, stored_rows
from tests.tools.surface_helpers import store_spec_with

pytest_plugins = ["tests.tools.surface_fixtures"]

DEFINITION_KEYS = {"name", "description", "scope", "risk", "approval_required", "readonly", "idempotent",
                   "input_schema"}


def _names(response):
    return [tool["name"] for tool in response.json()["tools"]]


def test_a_search_answers_the_ranked_surface_with_discovery(api_client, issued, tool_route):
    response = search(api_client, issued.access_token, {"query": "refund an order", "limit": 2})
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert list(body) == ["schema_version", "route", "capability_revision", "query", "tools", "discovery"]
    assert body["schema_version"] == "bailing.agent-capability-search.v1"
    assert (body["route"], body["query"]) == ("store-assistant", "refund an order")
    assert _names(response) == ["order_refund", "order_status"]
    assert body["discovery"] == {
        "mode": "ranked_candidates", "scope": "current_authorization", "returned_count": 2, "authorized_total": 4,
        "matched_total": None, "matched_total_exact": False, "limit": 2, "truncated": True, "has_more": True,
        "truncation_scope": "authorized_catalog", "pagination": "unsupported", "ranking": "lexical",
    }


def test_search_tools_are_full_definitions(api_client, issued, tool_route):
    tools = search(api_client, issued.access_token, {"query": "product"}).json()["tools"]
    assert all(set(tool) >= DEFINITION_KEYS for tool in tools)
    assert tools[0]["name"] == "product_lookup" and tools[0]["input_schema"]["type"] == "object"


def test_the_revision_is_the_bootstraps(api_client, issued, tool_route):
    body = search(api_client, issued.access_token, {"query": "stock"}).json()
    bootstrap = api_client.get("/agent-api/v1/workspaces/store-assistant/bootstrap",
                               HTTP_AUTHORIZATION=f"Bearer {issued.access_token}").json()
    assert body["capability_revision"] == bootstrap["capabilities"]["revision"]


def test_the_default_limit_is_8_and_zero_scores_are_kept(api_client, issued, tool_route):
    body = search(api_client, issued.access_token, {"query": "weather forecast"}).json()
    assert body["discovery"]["limit"] == 8
    assert sorted(_names_of(body)) == sorted(["product_lookup", "order_status", "stock_adjust", "order_refund"])
    assert body["discovery"]["truncated"] is False and body["discovery"]["returned_count"] == 4


def _names_of(body):
    return [tool["name"] for tool in body["tools"]]


def test_a_chinese_query_ranks_by_bigrams(api_client, issued, tool_route, store_provider):
    provider_reimport(provider=store_provider, spec=store_spec_with("summary: Adjust stock", "summary: 调整库存数量"))
    assert _names(search(api_client, issued.access_token, {"query": "帮我调整一下库存"}))[0] == "stock_adjust"


def test_the_runs_user_input_is_the_query(api_client, issued, tool_route):
    run_id = open_turn(api_client, issued.access_token, "store-assistant", user_input="Refund order 42").json()[
        "run_id"]
    body = search(api_client, issued.access_token, {"run_id": run_id}).json()
    assert body["query"] == "Refund order 42"
    assert _names_of(body)[0] == "order_refund"


def test_a_query_wins_over_the_runs_input(api_client, issued, tool_route):
    run_id = open_turn(api_client, issued.access_token, "store-assistant", user_input="Refund order 42").json()[
        "run_id"]
    body = search(api_client, issued.access_token, {"run_id": run_id, "query": "product"}).json()
    assert (body["query"], _names_of(body)[0]) == ("product", "product_lookup")


def test_control_characters_are_removed_from_the_query(api_client, issued, tool_route):
    body = search(api_client, issued.access_token, {"query": "stock\u0000 adjust\u0007"}).json()
    assert body["query"] == "stock adjust"


def test_an_empty_surface_answers_zero_counts(api_client, issued, route, store_provider):
    body = search(api_client, issued.access_token, {"query": "anything"}).json()
    assert body["tools"] == []
    assert (body["discovery"]["returned_count"], body["discovery"]["authorized_total"],
            body["discovery"]["truncated"]) == (0, 0, False)


def test_a_search_writes_nothing(api_client, issued, tool_route):
    before = stored_rows()
    search(api_client, issued.access_token, {"query": "stock"})
    assert stored_rows() == before


@pytest.mark.parametrize("body", [
    {"query": "stock", "page": 2},
    {"query": "stock", "limit": 0},
    {"query": "stock", "limit": 13},
    {"query": "stock", "limit": "3"},
    {"query": "stock", "limit": 2.5},
    {"query": "stock", "limit": True},
    {"query": "x" * 2001},
    {},
    {"query": ""},
    {"query": "  \u0000 "},
    {"query": 42},
    {"run_id": "not-a-uuid"},
    ["query", "stock"],
], ids=["unknown_field", "limit_0", "limit_13", "limit_string", "limit_float", "limit_bool", "query_2001",
        "neither", "empty_query", "blank_after_cleaning", "query_number", "run_id_malformed", "not_an_object"])
def test_a_bad_body_is_invalid_request(api_client, issued, tool_route, body):
    before = stored_rows()
    refused(search(api_client, issued.access_token, body), 400, "invalid_request")
    assert stored_rows() == before


def test_malformed_json_is_invalid_request(api_client, issued, tool_route):
    refused(search(api_client, issued.access_token, b"{not json"), 400, "invalid_request")


def test_a_query_of_2000_characters_is_accepted(api_client, issued, tool_route):
    assert search(api_client, issued.access_token, {"query": "库" * 2000}).status_code == 200


def test_another_sessions_run_is_not_found(api_client, agent_client, issued, tool_route):
    other = session_for(agent_client)
    run_id = open_turn(api_client, other.access_token, "store-assistant").json()["run_id"]
    before = stored_rows()
    refused(search(api_client, issued.access_token, {"run_id": run_id}), 404, "run_not_found")
    assert stored_rows() == before


def test_a_run_of_another_route_is_not_found(api_client, issued, tool_route, hr_route):
    route_tools_set(route=hr_route, tools_direct_enabled=True)
    run_id = open_turn(api_client, issued.access_token, "hr-helpdesk").json()["run_id"]
    refused(search(api_client, issued.access_token, {"run_id": run_id}, "store-assistant"), 404, "run_not_found")


def test_an_unknown_run_is_not_found(api_client, issued, tool_route):
    refused(search(api_client, issued.access_token, {"run_id": "6b1d2c55-8a55-4b49-9a36-0d3c3f3c0a11"}), 404,
            "run_not_found")


def test_a_write_left_out_of_write_tools_is_never_found(api_client, issued, tool_route):
    assert "customer_note" not in _names(search(api_client, issued.access_token, {"query": "customer_note"}))


def test_search_follows_the_allow_list_change_at_once(api_client, issued, tool_route, store_provider):
    route_tools_set(route=tool_route, write_tools=[], sources=[SourceSpec(provider=store_provider,
                                                                          allowed_tools=["order_status"])])
    assert _names(search(api_client, issued.access_token, {"query": "stock"})) == ["order_status"]


def test_the_body_is_limited(api_client, issued, tool_route):
    body = json.dumps({"query": "a", "pad": "x" * 40000})
    response = search(api_client, issued.access_token, body)
    assert response.status_code == 413


def test_search_needs_the_runtime_switch(api_client, issued, tool_route):
    route_update(route=tool_route, agent_client_enabled=False)
    refused(search(api_client, issued.access_token, {"query": "stock"}), 403, "agent_client_disabled")


def test_a_tool_switched_off_leaves_the_next_search_and_a_provider_switched_off_takes_all_its_tools(
        api_client, issued, tool_route, store_provider):
    from apps.tools.services import provider_update, tool_set_enabled

    before = search(api_client, issued.access_token, {"query": "refund an order", "limit": 12}).json()
    assert "order_refund" in [tool["name"] for tool in before["tools"]]
    tool_set_enabled(tool=store_provider.tools.get(name="order_refund"), enabled=False)
    after = search(api_client, issued.access_token, {"query": "refund an order", "limit": 12})
    assert "order_refund" not in _names(after)
    assert after.json()["discovery"]["authorized_total"] == before["discovery"]["authorized_total"] - 1
    assert after.json()["capability_revision"] != before["capability_revision"]
    provider_update(provider=store_provider, enabled=False)
    assert _names(search(api_client, issued.access_token, {"query": "refund an order", "limit": 12})) == []
