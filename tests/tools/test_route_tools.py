import pytest

from apps.routes.models import Route
from apps.tools.errors import RouteToolsInvalid
from apps.tools.models import RouteToolSource
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.routes.factories import RouteFactory
from tests.tools.factories import ToolProviderFactory
from tests.tools.surface_helpers import STORE_TOOLS

pytest_plugins = ["tests.tools.surface_fixtures"]


@pytest.fixture
def route(db):
    return RouteFactory(key="store-assistant", tools_direct_enabled=True)


def _state(route):
    route = Route.objects.get(pk=route.pk)
    sources = [(s.provider.name, list(s.allowed_tools)) for s in RouteToolSource.objects.filter(route=route)]
    return (route.permission, route.tools_direct_enabled, route.write_tools, route.force_approval_tools,
            route.unattended_write_tools, route.max_tool_calls, sources)


def _refused(route, field, message, **kwargs):
    before = _state(route)
    with pytest.raises(RouteToolsInvalid) as caught:
        route_tools_set(route=route, **kwargs)
    assert caught.value.status == 400 and caught.value.code == "invalid_request"
    assert caught.value.extra["field"] == field
    assert caught.value.message == message
    assert _state(route) == before


def test_sources_and_policy_are_set_together(tool_route, store_provider):
    route_tools_set(route=tool_route, permission="read_only", force_approval_tools=["customer_note"],
                    write_tools=["stock_adjust", "customer_note"], max_tool_calls=9)
    assert _state(tool_route) == ("read_only", True, ["stock_adjust", "customer_note"], ["customer_note"], None, 9,
                                  [("store", STORE_TOOLS)])


def test_sources_keep_their_order(route, store_provider):
    other = ToolProviderFactory(project=route.project, name="crm")
    route_tools_set(route=route, sources=[SourceSpec(provider=other, allowed_tools=[]),
                                          SourceSpec(provider=store_provider, allowed_tools=["order_status"])])
    assert _state(route)[-1] == [("crm", []), ("store", ["order_status"])]


def test_a_write_tool_that_no_source_allows_is_refused(route, store_provider):
    _refused(route, "write_tools", "write_tools: 'order_refund' is not a tool of this route's sources.",
             sources=[SourceSpec(provider=store_provider, allowed_tools=["product_lookup"])],
             write_tools=["order_refund"])


def test_a_read_only_tool_is_not_a_write_tool(tool_route):
    _refused(tool_route, "write_tools", "write_tools: 'product_lookup' is a read-only tool, not a write tool.",
             write_tools=["product_lookup"])


def test_a_forced_approval_must_be_a_compiled_write_tool(tool_route):
    _refused(tool_route, "force_approval_tools",
             "force_approval_tools: 'order_status' is a read-only tool, not a write tool.",
             force_approval_tools=["order_status"])


def test_an_unknown_forced_approval_is_refused(tool_route):
    _refused(tool_route, "force_approval_tools", "force_approval_tools: 'refund_all' is not a tool of this route's "
             "sources.", force_approval_tools=["refund_all"])


def test_dropping_a_source_a_write_tool_needs_is_refused(tool_route, store_provider):
    _refused(tool_route, "write_tools", "write_tools: 'stock_adjust' is not a tool of this route's sources.",
             sources=[SourceSpec(provider=store_provider, allowed_tools=["product_lookup", "order_refund"])])


def test_an_allow_list_name_the_provider_has_not_compiled_is_refused(route, store_provider):
    _refused(route, "sources", "sources: provider 'store' has no compiled tool named 'order_cancel'.",
             sources=[SourceSpec(provider=store_provider, allowed_tools=["order_status", "order_cancel"])])


def test_a_wildcard_in_an_allow_list_is_refused(route, store_provider):
    _refused(route, "sources", "sources: Wildcards are not allowed: list exact operationIds (found 'order_*').",
             sources=[SourceSpec(provider=store_provider, allowed_tools=["order_*"])])


def test_a_provider_of_another_project_is_refused(route, tool_keys):
    stranger = ToolProviderFactory(name="elsewhere")
    _refused(route, "sources", "sources: provider 'elsewhere' belongs to another project.",
             sources=[SourceSpec(provider=stranger, allowed_tools=["order_status"])])


def test_one_tool_name_from_two_providers_is_refused(route, store_provider):
    twin = ToolProviderFactory(project=route.project, name="store-two")
    _refused(route, "sources", "sources: tool 'order_status' is allowed from two providers; a route's tool names "
             "must be unique.",
             sources=[SourceSpec(provider=store_provider, allowed_tools=["order_status"]),
                      SourceSpec(provider=twin, allowed_tools=["order_status"])])


def test_a_provider_listed_twice_is_refused(route, store_provider):
    _refused(route, "sources", "sources: provider 'store' is listed twice.",
             sources=[SourceSpec(provider=store_provider, allowed_tools=[]),
                      SourceSpec(provider=store_provider, allowed_tools=[])])


def test_legacy_unattended_tools_cannot_join_forced_approvals(tool_route):
    _refused(tool_route, "unattended_write_tools",
             "unattended_write_tools: The legacy unattended write tools cannot be combined with force approval "
             "tools. Clear the unattended write tools (a blank field; null in the API) and list the write tools that "
             "need approval in force approval tools instead.",
             unattended_write_tools=["stock_adjust"], force_approval_tools=["order_refund"])


def test_legacy_unattended_tools_must_be_compiled_write_tools(tool_route):
    _refused(tool_route, "unattended_write_tools",
             "unattended_write_tools: 'order_status' is a read-only tool, not a write tool.",
             unattended_write_tools=["order_status"])


def test_an_unknown_policy_field_is_a_programming_error(tool_route):
    with pytest.raises(TypeError):
        route_tools_set(route=tool_route, name="renamed")
