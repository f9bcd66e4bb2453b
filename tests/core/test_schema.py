"""The published OpenAPI 3.1 schema: generated without a warning, valid, served at /api/schema/,
covering the agent and builder APIs only, and naming each operation's error codes."""

from __future__ import annotations

import json

import pytest
import yaml
from django.core.management import call_command

from bailinghub.openapi import ERRORS, OPERATIONS, Generator, error_codes


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    with django_db_blocker.unblock():
        from django.test import Client

        response = Client().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    return json.loads(response.content)


def test_schema_generation_validates_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert yaml.safe_load(out.read_text())["openapi"] == "3.1.0"


def test_schema_is_json_by_default_as_the_readme_says(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="*/*")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert json.loads(response.content)["openapi"].startswith("3.1")


def test_schema_is_served_as_yaml_too(client):
    response = client.get("/api/schema/", {"format": "yaml"})
    assert response.status_code == 200
    assert yaml.safe_load(response.content)["info"]["title"] == "BailingHub API"


def test_schema_covers_the_agent_and_builder_apis_only(schema):
    prefixes = {path.split("/")[1] + "/" + path.split("/")[2] for path in schema["paths"]}
    assert prefixes == {"agent-auth/v1", "agent-api/v1", "api/v1"}
    assert all(not path.startswith(("/admin", "/demo-business", "/agent-auth/authorize")) for path in schema["paths"])
    operations = [op for item in schema["paths"].values() for op in item.values()]
    assert len(operations) >= 44
    assert len({op["operationId"] for op in operations}) == len(operations)


def test_every_described_view_is_in_the_schema(schema):
    described = {op["operationId"] for item in schema["paths"].values() for op in item.values()}
    assert {"token", "turn_open", "knowledge_read", "tool_detail", "document_upload", "knowledge_base_search",
            "route_memories_get", "route_memories_post"} <= described


def test_each_operation_lists_its_error_codes_under_their_status(schema):
    read = schema["paths"]["/agent-api/v1/workspaces/{route}/knowledge/read"]["post"]["responses"]
    codes_410 = read["410"]["content"]["application/json"]["schema"]["allOf"][1]["properties"]["error"]["enum"]
    assert codes_410 == ["knowledge_reference_expired"]
    codes_409 = read["409"]["content"]["application/json"]["schema"]["allOf"][1]["properties"]["error"]["enum"]
    assert codes_409 == ["TASK_CANCELLED", "TASK_EXPIRED", "TASK_SCOPE_BLOCKED", "knowledge_changed",
                         "knowledge_scope_changed", "run_not_active"]
    assert read["401"]["content"]["application/json"]["schema"]["allOf"][0] == {"$ref": "#/components/schemas/Error"}


def test_a_body_less_operation_lists_no_body_errors(schema):
    responses = schema["paths"]["/agent-api/v1/workspaces"]["get"]["responses"]
    assert set(responses) == {"200", "304", "401", "503"}


def _codes(response):
    return response["content"]["application/json"]["schema"]["allOf"][1]["properties"]["error"]["enum"]


def test_resume_lists_the_errors_of_the_body_it_reads(schema):
    # resume reads an optional `{}` of at most 1 KiB: 413 past it, 415 for another media type
    operation = schema["paths"]["/agent-api/v1/tool-invocations/{invocation_id}/resume"]["post"]
    assert {"413", "415"} <= set(operation["responses"])
    assert _codes(operation["responses"]["413"]) == ["request_too_large"]
    assert _codes(operation["responses"]["415"]) == ["unsupported_media_type"]
    assert operation["requestBody"].get("required", False) is False  # no body is `{}` too


def test_the_error_component_enumerates_every_code(schema):
    error = schema["components"]["schemas"]["Error"]
    assert error["required"] == ["error", "message"]
    every = {code for view in ERRORS for codes in error_codes(view).values() for code in codes} | {"not_found"}
    assert set(error["properties"]["error"]["enum"]) == every
    assert {"invalid_grant", "turn_conflict", "document_not_found", "capability_changed",
            "unsupported_media_type"} <= every


def test_operations_carry_their_security_scheme(schema):
    schemes = schema["components"]["securitySchemes"]
    assert {"agentBearer", "clientToken", "operatorToken"} <= set(schemes)
    assert schema["paths"]["/agent-auth/v1/token"]["post"].get("security") in (None, [], [{}])
    assert {"operatorToken": []} in schema["paths"]["/api/v1/builder/knowledge-bases"]["get"]["security"]


def test_every_published_view_declares_its_errors_and_shapes():
    generator = Generator()
    generator._initialise_endpoints()
    views = {f"{callback.cls.__module__}.{callback.cls.__qualname__}" for *_, callback in generator.endpoints}
    assert views == set(ERRORS) == set(OPERATIONS)


@pytest.mark.parametrize("path, method", [("/agent-auth/v1/token", "post"), ("/agent-auth/v1/authorizations", "post"),
                                          ("/agent-api/v1/workspaces/{route}/capabilities/search", "post"),
                                          ("/agent-api/v1/workspaces/{route}/turns", "post"),
                                          ("/agent-api/v1/runs/{run_id}/complete", "post")])
def test_operations_that_call_an_unreadable_body_invalid_request_do_not_list_invalid_json(schema, path, method):
    codes_400 = schema["paths"][path][method]["responses"]["400"]["content"]["application/json"]["schema"][
        "allOf"][1]["properties"]["error"]["enum"]
    assert "invalid_request" in codes_400 and "invalid_json" not in codes_400


def _every_operation(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            yield f"{method.upper()} {path}", operation


def test_no_operation_is_described_by_how_its_views_are_built(schema):
    """A base class's docstring ("`self.route` is checked by `tool_route_get`…", "Base of every
    builder API view…") described 60 operations; an operation says only what it does, or nothing."""
    described = {name: operation.get("description", "") for name, operation in _every_operation(schema)}
    leaked = {name: text[:60] for name, text in described.items()
              if "self." in text or "request.auth" in text or "Base of every" in text or "An endpoint" in text}
    assert leaked == {}
    # an operation's own words stay
    assert described["POST /agent-auth/v1/revoke"].startswith("With the access token as bearer")
    assert [name for name, text in described.items() if text.startswith("Search one KB as an agent would")] == [
        "POST /api/v1/builder/knowledge-bases/{kb_id}/search"]


def test_the_revoke_body_is_optional_as_the_bearer_form_sends_none(schema):
    operation = schema["paths"]["/agent-auth/v1/revoke"]["post"]
    assert operation["requestBody"].get("required", False) is False
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RevokeRequest"}
