"""Bootstrap `capabilities` and a turn's `capability_revision` and `active_tools`, from the route's surface."""

from apps.knowledge.services import route_knowledge_bind
from apps.ledger.models import Run
from apps.routes.services import route_update
from apps.tools.builder import route_dry_run
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_reimport
from apps.tools.surface import route_surface
from tests.agent_auth.helpers import bearer
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.ledger.helpers import open_turn
from tests.tools.surface_helpers import store_spec_with

pytest_plugins = ["tests.tools.surface_fixtures"]


def _bootstrap(api_client, issued):
    return api_client.get("/agent-api/v1/workspaces/store-assistant/bootstrap", **bearer(issued.access_token)).json()


def _names(tools):
    return [tool["name"] for tool in tools]


def test_bootstrap_counts_the_authorized_surface(api_client, issued, tool_route):
    assert _bootstrap(api_client, issued)["capabilities"] == {
        "revision": route_surface(route=tool_route, session=issued.session).revision,
        "authorized_total": 4, "active_limit": 8, "readonly": 2, "writes": 2, "approval_required": 2,
    }


def test_bootstrap_counts_forced_approvals_and_the_active_limit(api_client, issued, tool_route):
    route_tools_set(route=tool_route, write_tools=["stock_adjust", "order_refund", "customer_note"],
                    force_approval_tools=["customer_note"])
    route_update(route=tool_route, agent_client_active_tool_limit=3)
    capabilities = _bootstrap(api_client, issued)["capabilities"]
    assert (capabilities["authorized_total"], capabilities["writes"], capabilities["approval_required"],
            capabilities["active_limit"]) == (5, 3, 3, 3)


def test_bootstrap_carries_the_first_active_limit_tools_of_the_surface(api_client, issued, tool_route):
    """contracts-beyond-seeds §6: "Tool definitions (bootstrap `active_tools`, capability search
    `tools`)": the bootstrap has them, before any turn; with no user input yet, the surface's own
    order (the route's sources and allow lists, then the built-in tools)."""
    route_update(route=tool_route, agent_client_active_tool_limit=3)
    body = _bootstrap(api_client, issued)
    surface = route_surface(route=tool_route, session=issued.session)
    assert body["active_tools"] == [tool.definition for tool in surface.tools[:3]]
    assert len(surface.tools) > 3


def test_bootstrap_active_tools_are_empty_while_direct_tools_are_off(api_client, issued, tool_route):
    route_tools_set(route=tool_route, tools_direct_enabled=False)
    assert _bootstrap(api_client, issued)["active_tools"] == []


def test_the_dry_run_names_the_built_in_tools_its_counts_include(api_client, issued, tool_route):
    route_update(route=tool_route, knowledge_enabled=True)
    route_knowledge_bind(route=tool_route, knowledge_base=KnowledgeBaseFactory(project=tool_route.project))
    dry_run = route_dry_run(route=tool_route)
    assert (dry_run["capabilities"]["authorized_total"], dry_run["builtin_tools"]) == (6, ["kb_search", "kb_read"])


def test_a_route_without_knowledge_has_no_built_in_tools(api_client, issued, tool_route):
    assert route_dry_run(route=tool_route)["builtin_tools"] == []


def test_bootstrap_is_empty_while_direct_tools_are_off(api_client, issued, tool_route):
    route_tools_set(route=tool_route, tools_direct_enabled=False)
    capabilities = _bootstrap(api_client, issued)["capabilities"]
    assert (capabilities["authorized_total"], capabilities["readonly"], capabilities["writes"]) == (0, 0, 0)


def test_bootstrap_revision_and_etag_change_with_the_catalog(api_client, issued, tool_route, store_provider):
    response = api_client.get("/agent-api/v1/workspaces/store-assistant/bootstrap", **bearer(issued.access_token))
    provider_reimport(provider=store_provider, spec=store_spec_with("summary: Order status", "summary: Order state"))
    again = api_client.get("/agent-api/v1/workspaces/store-assistant/bootstrap", **bearer(issued.access_token))
    assert again.json()["capabilities"]["revision"] != response.json()["capabilities"]["revision"]
    assert again["ETag"] != response["ETag"]


def test_bootstrap_takes_five_queries_with_tools(api_client, issued, tool_route, django_assert_num_queries):
    _bootstrap(api_client, issued)  # this process reads each compiled tool version once
    # session + route + knowledge bindings count + tool sources + their tools, whatever their number
    with django_assert_num_queries(5):
        _bootstrap(api_client, issued)


def test_a_turn_carries_the_best_tools_for_its_input(api_client, issued, tool_route):
    route_update(route=tool_route, agent_client_active_tool_limit=2)
    body = open_turn(api_client, issued.access_token, "store-assistant", user_input="Refund order 42").json()
    assert _names(body["active_tools"]) == ["order_refund", "order_status"]
    assert body["capability_revision"] == route_surface(route=tool_route, session=issued.session).revision
    assert body["active_tools"][0] == route_surface(route=tool_route, session=None).get("order_refund").definition


def test_active_tools_are_unique_and_at_most_the_limit(api_client, issued, tool_route):
    route_update(route=tool_route, knowledge_enabled=True)
    route_knowledge_bind(route=tool_route, knowledge_base=KnowledgeBaseFactory(project=tool_route.project))
    body = open_turn(api_client, issued.access_token, "store-assistant", user_input="anything").json()
    names = _names(body["active_tools"])
    assert len(names) == 6 == len(set(names))
    assert {"kb_search", "kb_read"} <= set(names)


def test_a_turn_without_direct_tools_has_none(api_client, issued, tool_route):
    route_tools_set(route=tool_route, tools_direct_enabled=False)
    assert open_turn(api_client, issued.access_token, "store-assistant").json()["active_tools"] == []


def test_a_replayed_turn_answers_the_frozen_tools_after_the_catalog_changed(api_client, issued, tool_route,
                                                                           store_provider):
    first = open_turn(api_client, issued.access_token, "store-assistant", user_input="Refund order 42").json()
    route_tools_set(route=tool_route, write_tools=[], sources=[SourceSpec(provider=store_provider,
                                                                          allowed_tools=["product_lookup"])])
    replay = open_turn(api_client, issued.access_token, "store-assistant", user_input="Refund order 42").json()
    assert replay == first
    assert Run.objects.count() == 1
    assert "order_refund" in _names(replay["active_tools"])


def test_the_run_keeps_the_tools_it_answered(api_client, issued, tool_route):
    body = open_turn(api_client, issued.access_token, "store-assistant", user_input="adjust stock").json()
    run = Run.objects.get()
    assert run.active_tools == body["active_tools"]
    assert run.capability_revision == body["capability_revision"]
    assert _names(run.active_tools)[0] == "stock_adjust"
