"""The tools and routes builder API in the published OpenAPI schema, with its error codes."""

import json

import pytest


@pytest.fixture(scope="module")
def paths(django_db_blocker):
    with django_db_blocker.unblock():
        from django.test import Client

        return json.loads(Client().get("/api/schema/", {"format": "json"}).content)["paths"]


def _codes(operation, status):
    return operation["responses"][str(status)]["content"]["application/json"]["schema"]["allOf"][1][
        "properties"]["error"]["enum"]


def test_every_tools_and_routes_operation_is_published(paths):
    assert {method for method in paths["/api/v1/builder/tool-providers"]} == {"get", "post"}
    assert {method for method in paths["/api/v1/builder/tool-providers/{provider_id}"]} == {"get", "delete"}
    assert set(paths["/api/v1/builder/tool-providers/{provider_id}/spec"]) == {"put"}
    assert {method for method in paths["/api/v1/builder/routes/{route_key}"]} == {"get", "patch"}
    assert set(paths["/api/v1/builder/routes/{route_key}/dry-run"]) == {"get"}


def test_the_spec_reimport_lists_its_refusals(paths):
    put = paths["/api/v1/builder/tool-providers/{provider_id}/spec"]["put"]
    assert _codes(put, 422) == ["invalid_tool_provider", "spec_refused"]
    assert "spec_refused" in _codes(put, 413)
    assert _codes(put, 404) == ["not_found", "tool_provider_not_found"]


def test_the_route_patch_lists_its_refusals(paths):
    patch = paths["/api/v1/builder/routes/{route_key}"]["patch"]
    assert _codes(patch, 422) == ["invalid_route_settings"]
    assert _codes(patch, 403) == ["forbidden", "insufficient_scope"]
    assert _codes(paths["/api/v1/builder/tool-providers"]["post"], 409) == ["provider_name_taken"]
