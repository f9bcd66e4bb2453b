import json

import pytest

from apps.agent_auth.models import AgentSession
from apps.knowledge.services import route_knowledge_bind
from apps.routes.services import route_update
from apps.routes.validators import TOOL_NAME_RE
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_reimport, provider_update, tool_set_enabled
from apps.tools.surface import INPUT_SCHEMA_KEYWORDS, route_surface
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.routes.factories import RouteFactory
from tests.tools.factories import ToolProviderFactory
from tests.tools.surface_helpers import STORE_TOOLS, store_spec_with

pytest_plugins = ["tests.tools.surface_fixtures"]


@pytest.fixture
def route(db):
    return RouteFactory(key="store-assistant", tools_direct_enabled=True)


def _names(route, session=None):
    return [tool.name for tool in route_surface(route=route, session=session).tools]


def _definition(route, name):
    return route_surface(route=route, session=None).get(name).definition


def test_the_surface_is_read_only_tools_and_the_listed_writes(tool_route):
    assert _names(tool_route) == ["product_lookup", "order_status", "stock_adjust", "order_refund"]


def test_a_write_tool_needs_the_full_permission(tool_route):
    route_tools_set(route=tool_route, permission="read_only")
    assert _names(tool_route) == ["product_lookup", "order_status"]


def test_only_allowed_tools_are_on_the_surface(route, store_provider):
    route_tools_set(route=route, sources=[SourceSpec(provider=store_provider, allowed_tools=["order_status"])])
    assert _names(route) == ["order_status"]


def test_a_disabled_provider_takes_its_tools_away(tool_route, store_provider):
    provider_update(provider=store_provider, enabled=False)
    assert _names(tool_route) == []


def test_a_disabled_tool_is_not_on_the_surface(tool_route, store_provider):
    tool_set_enabled(tool=store_provider.tools.get(name="order_status"), enabled=False)
    assert "order_status" not in _names(tool_route)


def test_nothing_while_direct_tools_are_off(tool_route):
    route_tools_set(route=tool_route, tools_direct_enabled=False)
    assert _names(tool_route) == []


def test_a_subject_tool_needs_a_principal_acting_on_someone(tool_route):
    anonymous = AgentSession(on_behalf_of="")
    assert "order_status" not in _names(tool_route, anonymous)
    assert "order_status" in _names(tool_route, AgentSession(on_behalf_of="ada@example.com"))


def test_approval_follows_the_acc_rules(tool_route):
    flags = {t.name: t.definition["approval_required"] for t in route_surface(route=tool_route, session=None).tools}
    assert flags == {"product_lookup": False, "order_status": False, "stock_adjust": True, "order_refund": True}


def test_the_route_can_force_an_approval(tool_route):
    route_tools_set(route=tool_route, write_tools=["stock_adjust", "customer_note"],
                    force_approval_tools=["customer_note"])
    assert _definition(tool_route, "customer_note")["approval_required"] is True


def test_the_legacy_rule_forces_approval_on_writes_not_left_unattended(tool_route):
    route_tools_set(route=tool_route, write_tools=["stock_adjust", "customer_note"],
                    unattended_write_tools=["stock_adjust"])
    assert _definition(tool_route, "customer_note")["approval_required"] is True


def test_a_definition_has_the_contract_shape(tool_route):
    assert _definition(tool_route, "product_lookup") == {
        "name": "product_lookup",
        "description": "Look up a product by SKU",
        "scope": "catalog.read",
        "risk": "low",
        "approval_required": False,
        "readonly": True,
        "idempotent": True,
        "input_schema": {
            "type": "object",
            "properties": {"X-Store-Id": {"type": "string"},
                           "sku": {"description": "The product's stock-keeping unit.", "pattern": "^[A-Z0-9-]{3,32}$",
                                   "type": "string"}},
            "required": ["sku"],
        },
        "usage_guidance_available": True,
    }


def _keywords(schema, found):
    found.update(schema)
    children = list(schema.get("properties", {}).values())
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            children.append(schema[key])
    for key in ("oneOf", "anyOf", "allOf"):
        children.extend(schema.get(key, []))
    for child in children:
        _keywords(child, found)
    return found


def test_input_schemas_keep_only_the_whitelisted_keywords(tool_route):
    for tool in route_surface(route=tool_route, session=None).tools:
        schema = tool.definition["input_schema"]
        assert schema["type"] == "object"
        assert _keywords(schema, set()) <= INPUT_SCHEMA_KEYWORDS


def test_knowledge_tools_join_when_knowledge_is_bound(tool_route):
    route_update(route=tool_route, knowledge_enabled=True)
    route_knowledge_bind(route=tool_route, knowledge_base=KnowledgeBaseFactory(project=tool_route.project))
    surface = route_surface(route=tool_route, session=None)
    assert [tool.name for tool in surface.tools][-2:] == ["kb_search", "kb_read"]
    assert {(t.definition["readonly"], t.definition["risk"], t.definition["approval_required"])
            for t in surface.tools[-2:]} == {(True, "low", False)}


def test_knowledge_tools_need_the_routes_knowledge_on(tool_route):
    route_knowledge_bind(route=tool_route, knowledge_base=KnowledgeBaseFactory(project=tool_route.project))
    assert "kb_search" not in _names(tool_route)


def test_the_surface_takes_three_queries_when_its_tools_are_new_to_the_process(tool_route, store_provider,
                                                                              django_assert_num_queries):
    provider_reimport(provider=store_provider, spec=store_spec_with('version: "2.1"', 'version: "2.5"'))
    with django_assert_num_queries(3):
        route_surface(route=tool_route, session=None)


def test_the_surface_takes_two_queries_once_its_tools_were_read(tool_route, django_assert_num_queries):
    route_surface(route=tool_route, session=None)
    with django_assert_num_queries(2):
        route_surface(route=tool_route, session=None)


def test_a_recompiled_tool_is_read_again(tool_route, store_provider):
    route_surface(route=tool_route, session=None)
    provider_reimport(provider=store_provider, spec=store_spec_with("summary: Order status", "summary: Order state"))
    assert _definition(tool_route, "order_status")["description"] == "Order state"


def test_the_summary_counts_the_surface(tool_route):
    summary = route_surface(route=tool_route, session=None).summary()
    assert {k: v for k, v in summary.items() if k != "revision"} == {
        "authorized_total": 4, "readonly": 2, "writes": 2, "approval_required": 2}


# capability_revision: changes with everything it covers, and with nothing else


def _revision(route):
    route.refresh_from_db()
    return route_surface(route=route, session=None).revision


COVERED = {
    "permission": lambda r, p: route_tools_set(route=r, permission="read_only"),
    "audience": lambda r, p: route_update(route=r, audience_policy="listed", allowed_audiences=["employee"]),
    "agent_direct": lambda r, p: route_tools_set(route=r, tools_direct_enabled=False),
    "write_tools": lambda r, p: route_tools_set(route=r, write_tools=["stock_adjust"]),
    "force_approval_tools": lambda r, p: route_tools_set(route=r, force_approval_tools=["stock_adjust"]),
    "unattended_write_tools": lambda r, p: route_tools_set(route=r, unattended_write_tools=["stock_adjust"]),
    "allow_list": lambda r, p: route_tools_set(route=r, sources=[SourceSpec(provider=p,
                                                                            allowed_tools=STORE_TOOLS[:4])]),
    "provider_enabled": lambda r, p: provider_update(provider=p, enabled=False),
    "base_url": lambda r, p: provider_update(provider=p, base_url="http://127.0.0.1:9/store-v2"),
    "tool_enabled": lambda r, p: tool_set_enabled(tool=p.tools.get(name="customer_note"), enabled=False),
    "spec_only": lambda r, p: provider_reimport(provider=p, spec=store_spec_with('version: "2.1"', 'version: "2.2"')),
    "risk": lambda r, p: provider_reimport(provider=p, spec=store_spec_with("risk: {level: high}",
                                                                            "risk: {level: medium}")),
    "approval_rule": lambda r, p: provider_reimport(provider=p, spec=store_spec_with("value: 100", "value: 50")),
    "input_schema": lambda r, p: provider_reimport(provider=p, spec=store_spec_with("maxLength: 500",
                                                                                    "maxLength: 400")),
    "description": lambda r, p: provider_reimport(provider=p, spec=store_spec_with("summary: Order status",
                                                                                  "summary: Status of an order")),
    "guidance": lambda r, p: provider_reimport(provider=p, spec=store_spec_with(
        "returns: The product's name", "returns: The product's full name")),
    "new_source": lambda r, p: route_tools_set(route=r, sources=[
        SourceSpec(provider=p, allowed_tools=STORE_TOOLS), SourceSpec(provider=ToolProviderFactory(
            project=r.project, name="crm"), allowed_tools=[])]),
}


@pytest.mark.parametrize("change", sorted(COVERED))
def test_the_revision_changes_with_each_covered_field(tool_route, store_provider, change):
    before = _revision(tool_route)
    COVERED[change](tool_route, store_provider)
    assert _revision(tool_route) != before


NOT_COVERED = {
    "secret": lambda r, p: provider_update(provider=p, secret="rotated-signing-secret"),
    "route_name": lambda r, p: route_update(route=r, name="Renamed", system_prompt="新的提示。"),
    "max_tool_calls": lambda r, p: route_tools_set(route=r, max_tool_calls=9),
    "active_tool_limit": lambda r, p: route_update(route=r, agent_client_active_tool_limit=3),
    "same_spec_again": lambda r, p: provider_reimport(provider=p, spec=p.spec.tobytes()
                                                      if hasattr(p.spec, "tobytes") else bytes(p.spec)),
    "other_route": lambda r, p: RouteFactory(project=r.project, key="other-route", tools_direct_enabled=True),
    "unlisted_tool_off": lambda r, p: (route_tools_set(route=r, sources=[SourceSpec(provider=p,
                                                                                    allowed_tools=STORE_TOOLS[:4])]),
                                       r.refresh_from_db()),
}


@pytest.mark.parametrize("change", sorted(NOT_COVERED))
def test_the_revision_ignores_what_it_does_not_cover(tool_route, store_provider, change):
    if change == "unlisted_tool_off":  # the allow list itself changes the revision: compare after it
        NOT_COVERED[change](tool_route, store_provider)
        before = _revision(tool_route)
        tool_set_enabled(tool=store_provider.tools.get(name="customer_note"), enabled=False)
    else:
        before = _revision(tool_route)
        NOT_COVERED[change](tool_route, store_provider)
    assert _revision(tool_route) == before


def test_the_revision_is_64_hex(tool_route):
    revision = _revision(tool_route)
    assert len(revision) == 64 and revision == revision.lower() and int(revision, 16) >= 0


def test_every_definition_keeps_the_wire_rules(tool_route):
    route_update(route=tool_route, knowledge_enabled=True)
    route_knowledge_bind(route=tool_route, knowledge_base=KnowledgeBaseFactory(project=tool_route.project))
    for tool in route_surface(route=tool_route, session=None).tools:
        definition = tool.definition
        assert TOOL_NAME_RE.fullmatch(definition["name"])
        assert 1 <= len(definition["description"]) <= 1200 and len(definition["scope"]) <= 256
        assert definition["risk"] in ("low", "medium", "high")
        assert all(isinstance(definition[key], bool) for key in ("approval_required", "readonly", "idempotent"))
        assert definition["input_schema"]["type"] == "object"
        assert len(json.dumps(definition["input_schema"]).encode()) <= 64 * 1024
        assert "usage_guidance" not in definition
