"""The builder API's routes: a route's tools (sources, permission, agent_direct) and knowledge
bindings read and changed through route_tools_set, its dry-run, scoping, and every refusal
changing nothing."""

import pytest

from apps.knowledge.models import KnowledgeBase, RouteKnowledgeBinding
from apps.projects.models import Membership
from apps.routes.models import Route
from apps.tools.builder import route_dry_run
from apps.tools.models import RouteToolSource
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory
from tests.routes.factories import RouteFactory
from tests.tools.builder_helpers import BASE, error, snapshot, token_client
from tests.tools.factories import ToolProviderFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(api_client, owner):
    api_client.force_login(owner.user)
    return api_client


@pytest.fixture
def route(owner):
    return RouteFactory(project=owner.project, key="store-assistant", tools_direct_enabled=True)


@pytest.fixture
def provider(owner):
    return ToolProviderFactory(project=owner.project, name="store")


def _patch(client, body, key="store-assistant"):
    return client.patch(f"{BASE}/routes/{key}", body, format="json")


def _sources(provider, *names):
    return [{"provider_id": str(provider.pk), "allowed_tools": list(names)}]


def _configure(client, provider, route):
    return _patch(client, {"tools": {
        "sources": _sources(provider, "product_lookup", "stock_adjust", "order_refund"),
        "permission": "full",
        "agent_direct": {"enabled": True, "write_tools": ["stock_adjust", "order_refund"],
                         "force_approval_tools": ["stock_adjust"]}}})


# Read


def test_get_answers_tools_and_bindings(client, route, provider):
    kb = KnowledgeBaseFactory(project=route.project)
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=kb)
    _configure(client, provider, route)
    data = client.get(f"{BASE}/routes/store-assistant").json()["data"]
    assert data["tools"] == {
        "sources": [{"provider_id": str(provider.pk), "provider": "store",
                     "allowed_tools": ["product_lookup", "stock_adjust", "order_refund"]}],
        "permission": "full",
        "agent_direct": {"enabled": True, "write_tools": ["stock_adjust", "order_refund"],
                         "force_approval_tools": ["stock_adjust"], "unattended_write_tools": None,
                         "max_tool_calls": 5},
    }
    assert data["bindings"] == {"knowledge_base_ids": [str(kb.pk)]}


def test_get_another_projects_route_is_404(client):
    RouteFactory(key="foreign")
    error(client.get(f"{BASE}/routes/foreign"), 404, "route_not_found")


@pytest.mark.parametrize("path", ["routes/store%00assistant", "routes/store%00assistant/dry-run"])
def test_a_key_no_route_can_have_is_404(client, route, path):
    error(client.get(f"{BASE}/{path}"), 404, "route_not_found")


def test_patching_a_key_no_route_can_have_is_404_and_changes_nothing(client, route):
    before = snapshot()
    error(_patch(client, {"tools": {"permission": "read_only"}}, key="store%00assistant"), 404, "route_not_found")
    assert snapshot() == before


def test_get_a_key_two_of_the_callers_projects_have_needs_project_id(client, owner, route):
    second = MembershipFactory(user=owner.user, role=Membership.Role.OWNER)
    RouteFactory(project=second.project, key="store-assistant")
    body = error(client.get(f"{BASE}/routes/store-assistant"), 400, "invalid_request")
    assert "project_id" in body["fields"]
    chosen = client.get(f"{BASE}/routes/store-assistant?project_id={second.project_id}").json()["data"]
    assert chosen["project_id"] == str(second.project_id)


def test_a_tools_token_may_read_a_route(api_client, owner, route):
    response = token_client(api_client, owner, ["tools:write"]).get(f"{BASE}/routes/store-assistant")
    assert response.status_code == 200


def test_a_knowledge_token_may_not_read_a_route(api_client, owner, route):
    response = token_client(api_client, owner, ["knowledge:create"]).get(f"{BASE}/routes/store-assistant")
    error(response, 403, "insufficient_scope")


# Change


def test_patch_sets_sources_and_policy_through_route_tools_set(client, route, provider):
    response = _configure(client, provider, route)
    assert response.status_code == 200, response.json()
    route.refresh_from_db()
    assert (route.write_tools, route.force_approval_tools) == (["stock_adjust", "order_refund"], ["stock_adjust"])
    assert list(RouteToolSource.objects.filter(route=route).values_list("allowed_tools", flat=True)) == [
        ["product_lookup", "stock_adjust", "order_refund"]]


def test_patch_changes_the_dry_run_counts(client, route, provider):
    before = client.get(f"{BASE}/routes/store-assistant/dry-run").json()["data"]["capabilities"]
    _configure(client, provider, route)
    after = client.get(f"{BASE}/routes/store-assistant/dry-run").json()["data"]["capabilities"]
    assert (before["authorized_total"], before["writes"], before["approval_required"]) == (0, 0, 0)
    assert (after["authorized_total"], after["readonly"], after["writes"], after["approval_required"]) == (3, 1, 2, 2)
    assert before["revision"] != after["revision"]


def test_patch_omitting_a_setting_keeps_it(client, route, provider):
    _configure(client, provider, route)
    _patch(client, {"tools": {"agent_direct": {"max_tool_calls": 9}}})
    route.refresh_from_db()
    assert (route.max_tool_calls, route.write_tools) == (9, ["stock_adjust", "order_refund"])


def test_patch_binds_and_unbinds_knowledge_bases(client, route):
    first, second = KnowledgeBaseFactory(project=route.project), KnowledgeBaseFactory(project=route.project)
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=first)
    data = _patch(client, {"bindings": {"knowledge_base_ids": [str(second.pk)]}}).json()["data"]
    assert data["bindings"] == {"knowledge_base_ids": [str(second.pk)]}
    assert client.get(f"{BASE}/routes/store-assistant/dry-run").json()["data"]["kb_count"] == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"tools": {"agent_direct": {"write_tools": ["product_lookup"]}}}, "tools.agent_direct.write_tools"),
    ({"tools": {"agent_direct": {"write_tools": ["customer_note"]}}}, "tools.agent_direct.write_tools"),
    ({"tools": {"agent_direct": {"force_approval_tools": ["no_such_tool"]}}},
     "tools.agent_direct.force_approval_tools"),
    ({"tools": {"agent_direct": {"write_tools": ["stock_*"]}}}, "tools.agent_direct.write_tools"),
    ({"tools": {"agent_direct": {"unattended_write_tools": ["order_refund"]}}},
     "tools.agent_direct.unattended_write_tools"),
    ({"tools": {"sources": [{"provider_id": "00000000-0000-0000-0000-000000000001", "allowed_tools": []}]}},
     "tools.sources[0].provider_id"),
    ({"tools": {"agent_direct": {"enabled": "yes"}}}, "tools.agent_direct.enabled"),
    ({"tools": {"permission": "admin"}}, "tools.permission"),
    ({"tools": {"agent_direct": {"max_tool_calls": 51}}}, "tools.agent_direct.max_tool_calls"),
    ({"tools": {"agent_direct": {"colour": "red"}}}, "tools.agent_direct.colour"),
    ({"name": "renamed"}, "name"),
    ({"bindings": {"knowledge_base_ids": ["00000000-0000-0000-0000-000000000002"]}},
     "bindings.knowledge_base_ids"),
])
def test_patch_with_an_invalid_field_is_422_naming_it_and_changes_nothing(client, route, provider, body, field):
    _configure(client, provider, route)
    before = snapshot()
    response = error(_patch(client, body), 422, "invalid_route_settings")
    assert field in response["fields"], response
    assert snapshot() == before


def test_patch_a_source_naming_a_tool_the_provider_lacks_is_422(client, route, provider):
    before = snapshot()
    body = error(_patch(client, {"tools": {"sources": _sources(provider, "product_lookup", "fly_away")}}),
                 422, "invalid_route_settings")
    assert "fly_away" in body["fields"]["tools.sources"][0]
    assert snapshot() == before


def test_patch_a_provider_of_another_project_is_422(client, route):
    foreign = ToolProviderFactory()
    before = snapshot()
    error(_patch(client, {"tools": {"sources": _sources(foreign, "product_lookup")}}), 422, "invalid_route_settings")
    assert snapshot() == before


def test_patch_a_knowledge_base_of_another_project_is_422(client, route):
    foreign = KnowledgeBaseFactory()
    before = snapshot()
    error(_patch(client, {"bindings": {"knowledge_base_ids": [str(foreign.pk)]}}), 422, "invalid_route_settings")
    assert snapshot() == before


def test_patch_refused_tools_keeps_the_bindings_change_out_too(client, route):
    kb = KnowledgeBaseFactory(project=route.project)
    before = snapshot()
    error(_patch(client, {"bindings": {"knowledge_base_ids": [str(kb.pk)]},
                          "tools": {"agent_direct": {"write_tools": ["ghost"]}}}), 422, "invalid_route_settings")
    assert snapshot() == before


def test_patch_another_projects_route_is_404(client):
    RouteFactory(key="foreign")
    before = snapshot()
    error(_patch(client, {"tools": {"permission": "read_only"}}, key="foreign"), 404, "route_not_found")
    assert snapshot() == before


def test_patch_as_a_viewer_is_403(api_client, route):
    viewer = MembershipFactory(project=route.project, role=Membership.Role.VIEWER)
    api_client.force_login(viewer.user)
    before = snapshot()
    error(_patch(api_client, {"tools": {"permission": "read_only"}}), 403, "forbidden")
    assert snapshot() == before


def test_patch_without_routes_write_is_403(api_client, owner, route):
    before = snapshot()
    body = error(_patch(token_client(api_client, owner, ["tools:write"]), {"tools": {"permission": "read_only"}}),
                 403, "insufficient_scope")
    assert body["required_scope"] == "routes:write"
    assert snapshot() == before


def test_a_routes_token_may_patch(api_client, owner, route):
    response = _patch(token_client(api_client, owner, ["routes:write"]), {"tools": {"permission": "read_only"}})
    assert response.json()["data"]["tools"]["permission"] == "read_only"


# Dry-run


def test_dry_run_is_what_the_console_shows(client, route, provider):
    _configure(client, provider, route)
    data = client.get(f"{BASE}/routes/store-assistant/dry-run").json()["data"]
    route.refresh_from_db()
    assert data == {"route_key": "store-assistant", **route_dry_run(route=route)}


def test_dry_run_counts_bound_knowledge_bases(client, route):
    kb = KnowledgeBaseFactory(project=route.project)
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=kb)
    assert client.get(f"{BASE}/routes/store-assistant/dry-run").json()["data"]["kb_count"] == 1
    KnowledgeBase.objects.filter(pk=kb.pk).update(enabled=False)  # bound, but agents no longer read it
    assert client.get(f"{BASE}/routes/store-assistant/dry-run").json()["data"]["kb_count"] == 0


def test_dry_run_of_another_projects_route_is_404(client):
    RouteFactory(key="foreign")
    error(client.get(f"{BASE}/routes/foreign/dry-run"), 404, "route_not_found")


def test_patch_changes_the_tools_of_a_route_named_before_names_refused_bidi_controls(client, route, provider):
    """validate_shown_name came after such names were stored; the builder API cannot rename a route."""
    Route.objects.filter(pk=route.pk).update(name="Shop\u202eA")
    response = _patch(client, {"tools": {"sources": _sources(provider, "product_lookup")}})
    assert response.status_code == 200, response.json()
    assert list(RouteToolSource.objects.filter(route=route).values_list("allowed_tools", flat=True)) == [
        ["product_lookup"]]
