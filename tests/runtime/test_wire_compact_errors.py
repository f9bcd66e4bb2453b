"""Errors answered before any view runs (an unknown path, a body over its budget, a charset
refused by the middleware) are compact JSON on /agent-api/, like every answer an agent view renders."""

from __future__ import annotations

import json

import pytest

from apps.tools.invocation_errors import REQUEST_BODY_MAX_BYTES

URL = "/agent-api/v1/tool-invocations"


def _compact(response) -> dict:
    body = json.loads(response.content)
    assert response.content == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    return body


def test_an_unknown_agent_path_is_compact_json(client):
    response = client.post(f"{URL}/", "{}", content_type="application/json")
    assert response.status_code == 404
    assert _compact(response)["error"] == "not_found"


def test_an_invocation_body_over_its_budget_is_compact_json(client):
    response = client.generic("POST", URL, b"x" * (REQUEST_BODY_MAX_BYTES + 1), content_type="application/json")
    assert response.status_code == 413
    body = _compact(response)
    assert (body["error"], body["limit_scope"], body["max_bytes"]) == (
        "arguments_too_large", "request_body", REQUEST_BODY_MAX_BYTES)


@pytest.mark.django_db
def test_a_charset_refused_before_the_view_is_compact_json(client):
    response = client.generic("POST", URL, b"{}", content_type="application/json; charset=latin-1")
    assert response.status_code == 415
    assert _compact(response)["error"] == "unsupported_media_type"
