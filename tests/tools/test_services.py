"""Provider create / re-import / update and the tool switch, on the real database."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from apps.tools import services
from apps.tools.crypto import secret_decrypt
from apps.tools.errors import InvalidProvider, ProviderNameTaken, SpecRefusedError
from apps.tools.models import Tool, ToolProvider
from apps.tools.selectors import provider_list, provider_secret
from tests.projects.factories import ProjectFactory

from .factories import STORE_SPEC, ToolProviderFactory

pytestmark = pytest.mark.django_db

STORE_TOOLS = ["product_lookup", "order_status", "stock_adjust", "order_refund", "customer_note"]


def store_spec_with(change) -> bytes:
    document = yaml.safe_load(STORE_SPEC)
    change(document)
    return yaml.safe_dump(document, sort_keys=False).encode()


def create(**overrides):
    arguments = {"project": ProjectFactory(), "name": "store", "base_url": "https://store.example/api",
                 "secret": "s3cret-value-of-16-chars", "spec": STORE_SPEC, "spec_filename": "store.yaml"}
    arguments.update(overrides)
    return services.provider_create(**arguments)


def test_create_stores_the_spec_as_uploaded_with_its_sha256():
    provider = create().provider
    provider.refresh_from_db()
    assert bytes(provider.spec) == STORE_SPEC
    assert provider.spec_sha256 == hashlib.sha256(STORE_SPEC).hexdigest()
    assert (provider.openapi_version, provider.title, provider.spec_filename) == ("3.0.3", "Demo store", "store.yaml")


def test_create_makes_one_tool_per_compiled_operation_in_order():
    provider = create().provider
    assert list(provider.tools.values_list("name", flat=True)) == STORE_TOOLS
    refund = provider.tools.get(name="order_refund")
    assert (refund.method, refund.path, refund.risk, refund.readonly, refund.approval_required, refund.enabled) == (
        "POST", "/orders/{order_id}/refund", "high", False, True, True)
    assert refund.compiled["input_schema"]["required"] == ["order_id", "amount"]


def test_create_keeps_the_compile_report():
    report = create().provider.compile_report
    assert report["tools"] == STORE_TOOLS and report["acc_present"] is True
    assert report["warning_counts"] == {} and report["operations_skipped"] == 0


@pytest.mark.parametrize("secret", ["x", "   ", " " * 20, "fifteen-chars-x", "tab\tinside-a-secret"])
def test_a_weak_or_unprintable_signing_secret_is_refused(secret):
    """One character or three spaces were taken: the calls' HMAC then proved nothing."""
    with pytest.raises(InvalidProvider) as refused:
        create(secret=secret)
    assert refused.value.extra["field"] == "secret" and "16–512 printable characters" in refused.value.message
    assert not ToolProvider.objects.exists()


def test_a_signing_secret_of_sixteen_characters_is_taken():
    assert create(secret="sixteen-chars-xx").provider.secret_encrypted


def test_secret_is_encrypted_at_rest():
    provider = create(secret="s3cret-value-of-16-chars").provider
    provider.refresh_from_db()
    assert "s3cret-value-of-16-chars" not in provider.secret_encrypted
    assert provider_secret(provider=provider) == "s3cret-value-of-16-chars"


def test_secret_is_nowhere_in_the_row_in_clear():
    provider = create(secret="visible-if-leaked").provider
    row = ToolProvider.objects.filter(pk=provider.pk).values().get()
    assert not any("visible-if-leaked" in str(value) for value in row.values())


def test_spec_without_acc_imports_every_tool_disabled():
    spec = store_spec_with(lambda doc: [op.pop("x-agent-capability") for item in doc["paths"].values()
                                        for op in item.values()])
    outcome = create(spec=spec)
    tools = list(outcome.provider.tools.values_list("name", "enabled", "readonly"))
    assert tools == [("product_lookup", False, True), ("order_status", False, True), ("stock_adjust", False, False),
                     ("order_refund", False, False), ("customer_note", False, False)]
    assert outcome.provider.compile_report["acc_present"] is False


def test_refused_spec_saves_nothing():
    project = ProjectFactory()
    with pytest.raises(SpecRefusedError) as caught:
        create(project=project, spec=b'{"swagger": "2.0"}')
    assert caught.value.extra["reason"] == "spec_not_openapi3" and caught.value.status == 400
    assert not ToolProvider.objects.filter(project=project).exists() and not Tool.objects.exists()


def test_duplicate_name_in_a_project_is_refused():
    first = create().provider
    with pytest.raises(ProviderNameTaken):
        create(project=first.project, name=first.name)
    assert ToolProvider.objects.filter(project=first.project).count() == 1


def test_same_name_in_another_project_is_allowed():
    first = create().provider
    second = create(name=first.name).provider
    assert second.project_id != first.project_id


@pytest.mark.parametrize(("field", "value"), [
    ("base_url", "ftp://store.example"), ("base_url", "https://user:pw@store.example"),
    ("base_url", "store.example/api"), ("base_url", "https://store.example/api?x=1"),
    ("name", "Store Name"), ("name", "x"), ("secret", ""), ("secret", "line\nbreak"),
])
def test_invalid_provider_fields_are_refused_and_nothing_is_saved(field, value):
    project = ProjectFactory()
    with pytest.raises(InvalidProvider) as caught:
        create(project=project, **{field: value})
    assert caught.value.extra["field"] == field and caught.value.code == "invalid_request"
    assert not ToolProvider.objects.filter(project=project).exists()


def test_reimport_reports_added_removed_and_changed_tools():
    provider = create().provider

    def change(doc):
        doc["paths"].pop("/customers/{customer_id}/notes")
        doc["paths"]["/orders/{order_id}"]["get"]["summary"] = "Order status and history"
        doc["paths"]["/ping"] = {"get": {"operationId": "ping", "x-agent-capability": {"version": 1, "scope": "ops"},
                                         "responses": {"200": {"description": "ok"}}}}

    diff = services.provider_reimport(provider=provider, spec=store_spec_with(change)).diff
    assert diff.as_dict() == {"added": ["ping"], "removed": ["customer_note"], "changed": ["order_status"],
                              "unchanged": ["product_lookup", "stock_adjust", "order_refund"],
                              "routes": [], "routes_losing": {}, "switched_off": [], "switched_on": []}
    assert list(provider.tools.values_list("name", flat=True)) == [
        "product_lookup", "order_status", "stock_adjust", "order_refund", "ping"]
    assert provider.tools.get(name="order_status").description == "Order status and history"


def test_reimport_keeps_the_operator_switch():
    provider = create().provider
    services.tool_set_enabled(tool=provider.tools.get(name="product_lookup"), enabled=False)
    services.provider_reimport(provider=provider, spec=STORE_SPEC)
    assert provider.tools.get(name="product_lookup").enabled is False


def test_reimport_switches_off_a_tool_whose_acc_disables_it():
    provider = create().provider
    spec = store_spec_with(lambda doc: doc["paths"]["/orders/{order_id}"]["get"]["x-agent-capability"].update(
        enabled=False))
    services.provider_reimport(provider=provider, spec=spec)
    assert provider.tools.get(name="order_status").enabled is False


def test_reimport_replaces_spec_hash_and_report():
    provider = create().provider
    spec = store_spec_with(lambda doc: doc["info"].update(title="Store v2"))
    services.provider_reimport(provider=provider, spec=spec, spec_filename="v2.yaml")
    provider.refresh_from_db()
    assert (bytes(provider.spec), provider.spec_sha256, provider.title, provider.spec_filename) == (
        spec, hashlib.sha256(spec).hexdigest(), "Store v2", "v2.yaml")


def test_refused_reimport_changes_nothing():
    provider = create().provider
    before = list(provider.tools.values_list("name", "compiled", "enabled"))
    with pytest.raises(SpecRefusedError):
        services.provider_reimport(provider=provider, spec=b"openapi: 3.0.0\npaths: {}\n")
    provider.refresh_from_db()
    assert bytes(provider.spec) == STORE_SPEC
    assert list(provider.tools.values_list("name", "compiled", "enabled")) == before


def test_a_spec_without_operations_is_refused_with_its_reason():
    with pytest.raises(SpecRefusedError) as caught:
        services.spec_compile(spec=b'{"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {}}')
    assert (caught.value.message, caught.value.extra) == (
        "The spec has no operations: nothing to import.", {"reason": "spec_no_operations", "pointer": "/paths"})


def test_a_reimport_without_operations_changes_nothing():
    provider = create().provider
    before = list(provider.tools.values_list("name", "compiled", "enabled"))
    with pytest.raises(SpecRefusedError):
        services.provider_reimport(provider=provider, spec=b"openapi: 3.0.3\ninfo: {title: t, version: '1'}\n"
                                                            b"paths: {}\n")
    provider.refresh_from_db()
    assert bytes(provider.spec) == STORE_SPEC
    assert list(provider.tools.values_list("name", "compiled", "enabled")) == before


def test_tool_set_enabled_switches_one_tool():
    provider = create().provider
    tool = services.tool_set_enabled(tool=provider.tools.get(name="stock_adjust"), enabled=False)
    assert Tool.objects.get(pk=tool.pk).enabled is False
    assert provider.tools.filter(enabled=True).count() == 4


def test_provider_update_replaces_the_secret_encrypted():
    provider = create().provider
    services.provider_update(provider=provider, secret="new-secret-of-16-chars", base_url="https://other.example")
    provider.refresh_from_db()
    assert secret_decrypt(provider.secret_encrypted) == "new-secret-of-16-chars" and provider.base_url == "https://other.example"


def test_provider_list_counts_tools_in_one_query(django_assert_num_queries):
    project = ProjectFactory()
    ToolProviderFactory(project=project)
    ToolProviderFactory(project=project)
    with django_assert_num_queries(1):
        rows = [(p.name, p.tool_count, p.enabled_tool_count) for p in provider_list(projects=[project])]
    assert [count for _, count, _ in rows] == [5, 5] and [enabled for _, _, enabled in rows] == [5, 5]


def test_reimport_diff_names_the_routes_whose_revision_changes_and_the_tools_they_lose():
    from apps.tools.route_tools import SourceSpec, route_tools_set
    from tests.routes.factories import RouteFactory

    provider = create().provider
    route = RouteFactory(project=provider.project, key="shop-desk", tools_direct_enabled=True)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["order_status",
                                                                                       "customer_note"])])
    spec = store_spec_with(lambda doc: doc["paths"].pop("/customers/{customer_id}/notes"))
    diff = services.tool_diff(provider=provider, result=services.spec_compile(spec=spec))
    assert diff.routes == ("shop-desk",) and diff.routes_losing == {"shop-desk": ("customer_note",)}


def test_reimport_diff_leaves_out_routes_with_direct_tools_off_but_names_what_they_lose():
    from apps.tools.route_tools import SourceSpec, route_tools_set
    from apps.tools.surface import route_surface
    from tests.routes.factories import RouteFactory

    provider = create().provider
    route = RouteFactory(project=provider.project, key="switched-off", tools_direct_enabled=False)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["customer_note"])])
    before = route_surface(route=route, session=None).revision
    spec = store_spec_with(lambda doc: doc["paths"].pop("/customers/{customer_id}/notes"))
    diff = services.tool_diff(provider=provider, result=services.spec_compile(spec=spec))
    services.provider_reimport(provider=provider, spec=spec)
    assert (diff.routes, diff.routes_losing) == ((), {"switched-off": ("customer_note",)})
    assert route_surface(route=route, session=None).revision == before


def test_reimport_of_the_same_spec_changes_no_route_revision():
    from apps.tools.route_tools import SourceSpec, route_tools_set
    from tests.routes.factories import RouteFactory

    provider = create().provider
    route_tools_set(route=RouteFactory(project=provider.project),
                    sources=[SourceSpec(provider=provider, allowed_tools=["order_status"])])
    diff = services.tool_diff(provider=provider, result=services.spec_compile(spec=STORE_SPEC))
    assert (diff.routes, diff.routes_losing, diff.changed) == ((), {}, ())
