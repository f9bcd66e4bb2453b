"""Hostile builder API bodies: every field is checked by type, unknown fields are named, and a
body that is not what it claims to be is reported as what it is. Nothing changes on a refusal."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from apps.knowledge.models import KnowledgeBase
from tests.core.hostile import World, bearer, make_world, row_counts

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db) -> World:
    return make_world()


def _client(world) -> APIClient:
    client = APIClient()
    client.raise_request_exception = False
    client.credentials(**bearer(world.operator_token))
    return client


def _patch(world, body):
    data = body if isinstance(body, str) else json.dumps(body)
    return _client(world).generic("PATCH", f"/api/v1/builder/knowledge-bases/{world.kb.pk}",
                                  data.encode("utf-8", "surrogatepass"), content_type="application/json")


def _snapshot(kb: KnowledgeBase) -> tuple:
    kb.refresh_from_db()
    return kb.name, kb.description, kb.chunk_strategy, kb.require_confirmation, kb.updated_at


def _refused(response, status: int, code: str, field: str) -> dict:
    body = response.json()
    assert (response.status_code, body["error"], field in body.get("fields", {})) == (status, code, True), body
    return body


def test_an_unknown_field_in_a_patch_is_422_naming_it(world):
    before = _snapshot(world.kb)
    body = _refused(_patch(world, {"name": "新名字", "colour": "blue"}), 422, "invalid_knowledge_base", "colour")
    assert "colour" in body["message"]
    assert _snapshot(world.kb) == before


@pytest.mark.parametrize("field,value", [
    ("name", 12345), ("name", True), ("name", ["a"]), ("description", 1.5), ("description", {"a": 1}),
    ("require_confirmation", "yes"), ("require_confirmation", 1), ("embedding_dim", "32"), ("embedding_dim", 32.0),
    ("chunk_strategy", "auto"), ("chunk_strategy", 7), ("embedding_model_id", 5),
])
def test_a_field_of_the_wrong_json_type_is_422(world, field, value):
    before = _snapshot(world.kb)
    _refused(_patch(world, {field: value}), 422, "invalid_knowledge_base", field)
    assert _snapshot(world.kb) == before


@pytest.mark.parametrize("field,value", [("name", "a\ud800b"), ("description", "\udfff"), ("name", "a\x00b")])
def test_a_text_field_with_a_lone_surrogate_or_nul_is_422(world, field, value):
    before = _snapshot(world.kb)
    _refused(_patch(world, json.dumps({field: value})), 422, "invalid_knowledge_base", field)
    assert _snapshot(world.kb) == before


@pytest.mark.parametrize("strategy", [
    {"strategy": "a\ud800"}, {"strategy": "auto", "max_chars": "\udfff"}, {"strategy": "auto", "max_chars": 10**18},
    {"strategy": "auto", "max_chars": 1.5e300}, {"strategy": "auto", "nested": {"a": [1, {"b": None}]}},
])
def test_a_hostile_chunk_strategy_is_422_not_500(world, strategy):
    before = _snapshot(world.kb)
    response = _patch(world, json.dumps({"chunk_strategy": strategy}))
    assert (response.status_code, response.json()["error"]) == (422, "invalid_knowledge_base")
    assert _snapshot(world.kb) == before


def test_a_lone_surrogate_key_in_the_chunk_strategy_is_422_naming_it(world):
    before = _snapshot(world.kb)
    response = _patch(world, '{"chunk_strategy": {"\\ud800": 1}}')
    body = _refused(response, 422, "invalid_knowledge_base", "chunk_strategy.\ufffd")
    assert "lone surrogate" in body["message"]
    assert _snapshot(world.kb) == before


def test_a_number_too_large_to_represent_is_422_naming_the_field_and_nothing_is_stored(world):
    before = _snapshot(world.kb)
    response = _patch(world, '{"name": "x", "chunk_strategy": {"strategy": "auto", "max_chars": -1e999}}')
    _refused(response, 422, "invalid_knowledge_base", "chunk_strategy.max_chars")
    assert _snapshot(world.kb) == before


@pytest.mark.parametrize("value", [10**18, -1, 0, 100_000])
def test_an_absurd_embedding_dimension_on_create_is_422_not_500(world, value):
    before = row_counts()
    response = _client(world).post("/api/v1/builder/knowledge-bases", {
        "project_id": str(world.kb.project_id), "name": "new", "embedding_model_id": str(world.kb.embedding_model_id),
        "embedding_dim": value}, format="json")
    _refused(response, 422, "invalid_knowledge_base", "embedding_dim")
    assert row_counts() == before


def test_a_numeric_name_on_create_is_422(world):
    before = row_counts()
    response = _client(world).post("/api/v1/builder/knowledge-bases", {
        "project_id": str(world.kb.project_id), "name": 12345, "embedding_model_id": str(world.kb.embedding_model_id),
        "embedding_dim": world.kb.embedding_dim}, format="json")
    _refused(response, 422, "invalid_knowledge_base", "name")
    assert row_counts() == before


@pytest.mark.parametrize("body,field", [
    ({"query": 12345}, "query"), ({"query": ["退款"]}, "query"), ({"query": "退款", "top_k": "4"}, "top_k"),
    ({"query": "退款", "hybrid": "yes"}, "hybrid"), ({"query": "退款", "score_threshold": "0.5"}, "score_threshold"),
    ({"query": "a\ud800"}, "query"), ({"query": "退款", "colour": 1}, "colour"),
])
def test_a_search_field_of_the_wrong_type_is_422(world, body, field):
    response = _client(world).generic("POST", f"/api/v1/builder/knowledge-bases/{world.kb.pk}/search",
                                      json.dumps(body).encode("utf-8", "surrogatepass"),
                                      content_type="application/json")
    _refused(response, 422, "invalid_search", field)


@pytest.mark.parametrize("content_type", [
    "multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; boundary=\u00fc",
])
def test_an_unparseable_multipart_upload_is_400_invalid_multipart(world, content_type):
    before = row_counts()
    response = _client(world).generic("POST", f"/api/v1/builder/knowledge-bases/{world.kb.pk}/documents",
                                      b"--x\r\n", content_type=content_type)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_multipart")
    assert row_counts() == before


def test_an_unknown_content_type_on_upload_is_415(world):
    response = _client(world).generic("POST", f"/api/v1/builder/knowledge-bases/{world.kb.pk}/documents", b"x",
                                      content_type="application/x-unknown")
    assert (response.status_code, response.json()["error"]) == (415, "unsupported_media_type")
