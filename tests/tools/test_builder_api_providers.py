"""The builder API's tool providers: create, list, read, delete and re-import, with project scoping,
scopes, and every refusal changing nothing."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.projects.models import Membership
from apps.tools import services
from apps.tools.compiler.loader import MAX_SPEC_BYTES
from apps.tools.models import Tool, ToolProvider
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.projects.factories import MembershipFactory, ProjectFactory
from tests.routes.factories import RouteFactory
from tests.tools.builder_helpers import BASE, STORE_TEXT, error, snapshot, token_client
from tests.tools.factories import ToolProviderFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(api_client, owner):
    api_client.force_login(owner.user)
    return api_client

STORE_NAMES = ["product_lookup", "order_status", "stock_adjust", "order_refund", "customer_note"]


def _body(owner, **overrides):
    return {"project_id": str(owner.project_id), "name": "store", "base_url": "https://shop.example/api",
            "secret": "a-signing-secret", "spec": STORE_TEXT, **overrides}


def _create(client, owner, **overrides):
    return client.post(f"{BASE}/tool-providers", _body(owner, **overrides), format="json")


def _spec(**changes):
    """A small OpenAPI 3.1 document with one readonly tool per name in ``changes`` (name → summary)."""
    paths = {f"/{name}": {"get": {"operationId": name, "summary": summary,
                                   "x-agent-capability": {"version": 1, "scope": "s.read"},
                                   "responses": {"200": {"description": "ok"}}}}
             for name, summary in changes.items()}
    return {"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": paths}


# Create


def test_create_compiles_the_spec_and_answers_its_tools(client, owner):
    response = _create(client, owner)
    assert response.status_code == 201
    data = response.json()["data"]
    assert (data["name"], data["project_id"], data["openapi_version"], data["tool_count"]) == (
        "store", str(owner.project_id), "3.0.3", 5)
    assert [tool["name"] for tool in data["tools"]] == STORE_NAMES
    assert data["compile_report"]["tools"] == STORE_NAMES


def test_create_never_answers_a_given_secret(client, owner):
    response = _create(client, owner)
    assert "a-signing-secret" not in response.content.decode()
    assert "signing_secret" not in response.json()["data"]


def test_create_without_a_secret_generates_one_shown_once(client, owner):
    body = _body(owner)
    del body["secret"]
    data = client.post(f"{BASE}/tool-providers", body, format="json").json()["data"]
    provider = ToolProvider.objects.get(pk=data["id"])
    assert len(data["signing_secret"]) >= 32
    assert client.get(f"{BASE}/tool-providers/{provider.pk}").json()["data"].get("signing_secret") is None


def test_builder_answers_are_never_cached(client, owner):
    """The answer with a generated signing secret went out cacheable: a shared cache or the browser's
    disk kept the secret shown once."""
    body = _body(owner)
    del body["secret"]
    created = client.post(f"{BASE}/tool-providers", body, format="json")
    refused = client.post(f"{BASE}/tool-providers", {}, format="json")
    listed = client.get(f"{BASE}/tool-providers")
    assert [(r.status_code, r["Cache-Control"], r["Pragma"]) for r in (created, refused, listed)] == [
        (201, "no-store", "no-cache"), (422, "no-store", "no-cache"), (200, "no-store", "no-cache")]


def test_create_takes_the_spec_as_a_json_object(client, owner):
    response = _create(client, owner, spec=_spec(ping="Ping the shop"))
    assert [tool["name"] for tool in response.json()["data"]["tools"]] == ["ping"]


def test_create_with_a_name_taken_in_the_project_is_409(client, owner):
    ToolProviderFactory(project=owner.project, name="store")
    before = snapshot()
    error(_create(client, owner), 409, "provider_name_taken")
    assert snapshot() == before


@pytest.mark.parametrize("base_url", [
    "http://169.254.169.254/latest", "http://[fe80::1]/api", "http://100.100.100.200/api", "http://0.0.0.0:8080/api",
    "http://[::ffff:169.254.169.254]/api", "http://[fd00:ec2::254]/api", "http://224.0.0.1/api",
])
def test_a_base_url_at_a_cloud_metadata_or_link_local_address_is_refused(client, owner, base_url):
    """A project's operator pointed a provider at the cloud's metadata service: an agent's GET tool
    then returned the machine's credentials as the call's text."""
    before = snapshot()
    body = error(_create(client, owner, base_url=base_url), 422, "invalid_tool_provider")
    assert "TOOL_PROVIDER_DENIED_NETWORKS" in body["fields"]["base_url"][0]
    assert snapshot() == before


def test_a_business_system_on_the_deployments_own_network_is_taken(client, owner):
    for name, base_url in (("loopback", "http://localhost:8080/api"), ("intranet", "http://10.20.0.7/api")):
        assert _create(client, owner, name=name, base_url=base_url).status_code == 201
    assert sorted(ToolProvider.objects.values_list("name", flat=True)) == ["intranet", "loopback"]


@pytest.mark.parametrize(("field", "value", "path"), [
    ("name", "Not A Name", "name"),
    ("base_url", "ftp://shop.example", "base_url"),
    ("base_url", "https://user:pw@shop.example", "base_url"),
    # A URL urlsplit refuses answered 500; a port out of range or a space was saved, never callable.
    ("base_url", "http://[::1", "base_url"),
    ("base_url", "https://[shop]/", "base_url"),
    ("base_url", "https://shop.example:999999", "base_url"),
    ("base_url", "https://shop.example:http", "base_url"),
    ("base_url", "https://shop .example", "base_url"),
    ("enabled", "yes", "enabled"),
    ("spec", 12, "spec"),
    ("color", "red", "color"),
    ("project_id", "not-a-uuid", "project_id"),
])
def test_create_with_an_invalid_field_is_422_naming_it(client, owner, field, value, path):
    before = snapshot()
    body = error(_create(client, owner, **{field: value}), 422, "invalid_tool_provider")
    assert path in body["fields"]
    assert snapshot() == before


@pytest.mark.parametrize(("spec", "reason"), [
    ('{"swagger": "2.0", "info": {"title": "t", "version": "1"}, "paths": {}}', "spec_not_openapi3"),
    ("openapi: [3.0.0\n  : :", "spec_not_parseable"),
    ("just some words", "spec_not_openapi"),
    ("", "spec_empty"),
    (json.dumps({"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {}}), "spec_no_operations"),
    (json.dumps({"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {},
                 "components": {"schemas": {"A": {"$ref": "#/components/schemas/B"},
                                            "B": {"$ref": "#/components/schemas/A"}}}}), "ref_loop"),
    # A NUL (a JSON \u0000 or a YAML \0 escape), which PostgreSQL cannot store, reached the
    # provider's compile report and its tools: 500.
    (json.dumps({"openapi": "3.0.3", "info": {"title": "t", "version": "1"},
                 "paths": {"/a\u0000": {"get": {"operationId": "a", "responses": {"200": {"description": "ok"}}}}}}),
     "spec_not_parseable"),
    ('openapi: 3.0.3\ninfo: {title: t, version: "1"}\npaths:\n  "/a\\0":\n    get:\n      operationId: a\n'
     '      responses: {"200": {description: ok}}\n', "spec_not_parseable"),
])
def test_create_with_a_refused_spec_is_422_with_the_reason(client, owner, spec, reason):
    before = snapshot()
    body = error(_create(client, owner, spec=spec), 422, "spec_refused")
    assert body["reason"] == reason
    assert "spec" in body["fields"]
    assert snapshot() == before


def test_create_with_a_spec_over_the_limit_is_413_spec_too_large(client, owner):
    before = snapshot()
    body = error(_create(client, owner, spec="openapi: 3.0.3\n#" + "x" * MAX_SPEC_BYTES), 413, "spec_refused")
    assert body["reason"] == "spec_too_large"
    assert snapshot() == before


def test_create_in_a_project_the_caller_is_not_in_is_404(client, owner):
    other = ProjectFactory()
    before = snapshot()
    error(_create(client, owner, project_id=str(other.pk)), 404, "project_not_found")
    assert snapshot() == before


def test_create_as_a_viewer_is_403(api_client):
    viewer = MembershipFactory(role=Membership.Role.VIEWER)
    api_client.force_login(viewer.user)
    before = snapshot()
    error(_create(api_client, viewer), 403, "forbidden")
    assert snapshot() == before


# Scopes


def test_a_token_with_tools_write_may_create(api_client, owner):
    response = _create(token_client(api_client, owner, ["tools:write"]), owner)
    assert response.status_code == 201


def test_a_token_without_tools_write_may_not_create(api_client, owner):
    before = snapshot()
    body = error(_create(token_client(api_client, owner, ["routes:write"]), owner), 403, "insufficient_scope")
    assert body["required_scope"] == "tools:write"
    assert snapshot() == before


def test_a_routes_token_may_read_providers(api_client, owner):
    ToolProviderFactory(project=owner.project)
    response = token_client(api_client, owner, ["routes:write"]).get(f"{BASE}/tool-providers")
    assert (response.status_code, response.json()["meta"]["total"]) == (200, 1)


def test_a_knowledge_token_may_not_read_providers(api_client, owner):
    response = token_client(api_client, owner, ["knowledge:query"]).get(f"{BASE}/tool-providers")
    error(response, 403, "insufficient_scope")


def test_an_anonymous_caller_is_401(api_client):
    error(api_client.get(f"{BASE}/tool-providers"), 401, "unauthorized")


# Read


def test_list_shows_only_the_callers_projects(client, owner):
    mine = ToolProviderFactory(project=owner.project)
    ToolProviderFactory()
    data = client.get(f"{BASE}/tool-providers").json()
    assert ([p["id"] for p in data["data"]], data["meta"]["total"]) == ([str(mine.pk)], 1)
    assert (data["data"][0]["tool_count"], data["data"][0]["enabled_tool_count"]) == (5, 5)


def test_list_with_a_bad_limit_is_400(client):
    error(client.get(f"{BASE}/tool-providers?limit=0"), 400, "invalid_request")


@pytest.mark.parametrize("query", ["limit=1&limit=2", "offset=0&offset=0", "project_id=x&project_id=y"])
def test_list_with_a_repeated_parameter_is_400_naming_it_as_the_agent_api_does(client, query):
    body = error(client.get(f"{BASE}/tool-providers?{query}"), 400, "invalid_request")
    name = query.split("=", 1)[0]
    assert (body["field"], list(body["fields"])) == (name, [name])


def test_a_write_with_a_repeated_parameter_is_refused_and_changes_nothing(client, owner):
    before = snapshot()
    response = client.post(f"{BASE}/tool-providers?a=1&a=2", _body(owner), format="json")
    assert error(response, 400, "invalid_request")["field"] == "a"
    assert snapshot() == before


def test_get_answers_the_tools_and_compile_report(client, owner):
    provider = ToolProviderFactory(project=owner.project)
    data = client.get(f"{BASE}/tool-providers/{provider.pk}").json()["data"]
    assert [(t["name"], t["readonly"]) for t in data["tools"]][:3] == [
        ("product_lookup", True), ("order_status", True), ("stock_adjust", False)]
    assert data["compile_report"]["openapi_version"] == "3.0.3"


def test_get_another_projects_provider_is_404(client):
    provider = ToolProviderFactory()
    error(client.get(f"{BASE}/tool-providers/{provider.pk}"), 404, "tool_provider_not_found")


# Delete


def test_delete_removes_the_provider_and_its_tools(client, owner):
    provider = ToolProviderFactory(project=owner.project)
    response = client.delete(f"{BASE}/tool-providers/{provider.pk}")
    assert response.status_code == 204
    assert (ToolProvider.objects.filter(pk=provider.pk).exists(), Tool.objects.filter(provider=provider).count()) == (
        False, 0)


def test_delete_another_projects_provider_is_404_and_keeps_it(client):
    provider = ToolProviderFactory()
    before = snapshot()
    error(client.delete(f"{BASE}/tool-providers/{provider.pk}"), 404, "tool_provider_not_found")
    assert snapshot() == before


def test_delete_without_tools_write_is_403_and_keeps_it(api_client, owner):
    provider = ToolProviderFactory(project=owner.project)
    before = snapshot()
    error(token_client(api_client, owner, ["routes:write"]).delete(f"{BASE}/tool-providers/{provider.pk}"),
          403, "insufficient_scope")
    assert snapshot() == before


# Re-import


def _reimport(client, provider, spec):
    return client.put(f"{BASE}/tool-providers/{provider.pk}/spec", {"spec": spec}, format="json")


def test_reimport_answers_added_removed_and_changed_tools(client, owner):
    provider = services.provider_create(project=owner.project, name="mini", base_url="https://x.example",
                                        secret="s3cret-of-16-chars",
                                        spec=json.dumps(_spec(a="A", b="B", c="C")).encode()
                                        ).provider
    data = _reimport(client, provider, _spec(a="A", b="B changed", d="D")).json()["data"]
    assert data["diff"] == {"added": ["d"], "removed": ["c"], "changed": ["b"], "switched_off": [], "switched_on": [],
                            "routes_losing_tools": {}}
    assert [tool["name"] for tool in data["provider"]["tools"]] == ["a", "b", "d"]


def test_reimport_names_the_routes_whose_capability_revision_changes(client, owner):
    provider = ToolProviderFactory(project=owner.project)
    drawing = RouteFactory(project=owner.project, key="drawing", tools_direct_enabled=True)
    RouteFactory(project=owner.project, key="elsewhere", tools_direct_enabled=True)
    route_tools_set(route=drawing, sources=[SourceSpec(provider=provider, allowed_tools=["product_lookup"])])
    before = client.get(f"{BASE}/routes/drawing/dry-run").json()["data"]["capabilities"]["revision"]
    data = _reimport(client, provider, _spec(product_lookup="Now another summary")).json()["data"]
    after = client.get(f"{BASE}/routes/drawing/dry-run").json()["data"]["capabilities"]["revision"]
    assert data["capability_revisions_changed"] == [{"route_key": "drawing", "before": before, "after": after}]
    assert before != after


def test_reimport_reports_the_allowed_tools_a_route_loses(client, owner):
    provider = ToolProviderFactory(project=owner.project)
    route = RouteFactory(project=owner.project, key="losing")
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["order_status"])])
    data = _reimport(client, provider, _spec(product_lookup="P")).json()["data"]
    assert data["diff"]["routes_losing_tools"] == {"losing": ["order_status"]}


def test_reimport_of_a_refused_spec_is_422_and_changes_nothing(client, owner):
    provider = ToolProviderFactory(project=owner.project)
    before = snapshot()
    body = error(_reimport(client, provider, 'openapi: "2.0"\ninfo: {}\n'), 422, "spec_refused")
    assert body["reason"] == "spec_not_openapi3"
    assert snapshot() == before


def test_reimport_of_a_spec_without_operations_is_422_and_changes_nothing(client, owner):
    provider = ToolProviderFactory(project=owner.project)
    before = snapshot()
    body = error(_reimport(client, provider, _spec()), 422, "spec_refused")
    assert (body["reason"], body["message"], body["fields"]) == (
        "spec_no_operations", "The spec has no operations: nothing to import.",
        {"spec": ["The spec has no operations: nothing to import."]})
    assert snapshot() == before


def test_reimport_with_an_unknown_field_is_422_naming_it(client, owner):
    provider = ToolProviderFactory(project=owner.project)
    before = snapshot()
    response = client.put(f"{BASE}/tool-providers/{provider.pk}/spec", {"spec": STORE_TEXT, "name": "x"},
                          format="json")
    assert error(response, 422, "invalid_tool_provider")["fields"] == {"name": ["Unknown field."]}
    assert snapshot() == before


def test_reimport_of_another_projects_provider_is_404(client):
    provider = ToolProviderFactory()
    before = snapshot()
    error(_reimport(client, provider, STORE_TEXT), 404, "tool_provider_not_found")
    assert snapshot() == before


def test_a_value_json_cannot_hold_is_422_naming_the_field(client, owner):
    before = snapshot()
    response = client.post(f"{BASE}/tool-providers", data=b'{"spec": 1e999}', content_type="application/json")
    assert "spec" in error(response, 422, "invalid_tool_provider")["fields"]
    assert snapshot() == before


def test_the_list_reads_in_a_fixed_number_of_queries(client, owner):
    ToolProviderFactory(project=owner.project)
    with CaptureQueriesContext(connection) as one:
        client.get(f"{BASE}/tool-providers")
    ToolProviderFactory.create_batch(3, project=owner.project)
    with CaptureQueriesContext(connection) as four:
        assert client.get(f"{BASE}/tool-providers").json()["meta"]["total"] == 4
    assert len(four.captured_queries) == len(one.captured_queries)


def test_a_body_over_the_spec_body_limit_is_413_spec_too_large(client, owner, monkeypatch):
    from apps.tools.api.views import ToolProviderCreateApi

    monkeypatch.setattr(ToolProviderCreateApi, "body_max_bytes", 4096)
    before = snapshot()
    body = error(_create(client, owner, spec="x" * 8192), 413, "spec_refused")
    assert (body["reason"], body["fields"]["spec"][0].startswith("The request is")) == ("spec_too_large", True)
    assert snapshot() == before
