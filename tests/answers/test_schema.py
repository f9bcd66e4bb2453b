"""The RAG endpoints in the published OpenAPI schema, with their answer shape and errors."""

import json

import pytest
from django.test import Client


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/", {"format": "json"})
    return json.loads(response.content)


def _codes(operation, status):
    return operation["responses"][status]["content"]["application/json"]["schema"]["allOf"][1]["properties"][
        "error"]["enum"]


def test_rag_paths_are_published(schema):
    assert {"/api/v1/routes/{route_key}/rag/query", "/api/v1/routes/{route_key}/rag/queries",
            "/api/v1/routes/{route_key}/rag/queries/{query_id}/feedback",
            "/api/v1/routes/{route_key}/rag/report"} <= set(schema["paths"])


def test_rag_answer_requires_the_twelve_fields(schema):
    answer = schema["paths"]["/api/v1/routes/{route_key}/rag/query"]["post"]["responses"]["200"]
    required = answer["content"]["application/json"]["schema"]["required"]
    assert set(required) == {"query_id", "answer", "evidence", "confidence", "used_web_search", "trace", "grounded",
                             "useful", "missing_points", "error_code", "error_message", "interaction_mode"}


def test_rag_query_lists_its_errors(schema):
    operation = schema["paths"]["/api/v1/routes/{route_key}/rag/query"]["post"]
    assert _codes(operation, "422") == ["invalid_rag_query"]
    assert _codes(operation, "404") == ["not_found", "route_not_found"]
    assert "insufficient_scope" in _codes(operation, "403")


def test_rag_feedback_lists_its_errors(schema):
    operation = schema["paths"]["/api/v1/routes/{route_key}/rag/queries/{query_id}/feedback"]["post"]
    assert _codes(operation, "422") == ["invalid_feedback"]
    assert _codes(operation, "404") == ["not_found", "rag_query_not_found", "route_not_found"]
