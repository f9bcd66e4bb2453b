"""Errors from the URL router and the method check on the agent prefixes are JSON with `error`."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.core.hostile import bearer

pytestmark = pytest.mark.django_db


def _json_error(response) -> tuple[int, str, str]:
    return response.status_code, response["Content-Type"], response.json()["error"]


@pytest.mark.parametrize("path", [
    "/agent-auth/v1/nothing", "/agent-auth/v2/token", "/agent-auth/v1/authorizations/not-a-uuid",
    "/agent-auth/v1/authorizations/not-a-uuid/approve", "/agent-auth/v1/token/", "/agent-api/v1/nothing",
    "/agent-api/v1/workspaces/", "/agent-api/v1/runs//complete", "/agent-api/v9", "/agent-api/",
    "/agent-auth/", "/api/v1/builder/nothing", "/api/v1/builder/documents/not-a-uuid",
])
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_an_unknown_path_is_404_json(db, path, method):
    response = APIClient().generic(method, path)
    assert _json_error(response) == (404, "application/json", "not_found")


# The prefixes themselves without their trailing slash, and unknown paths beside the browser
# pages of Agent Auth (which alone answer HTML, at their exact paths).
BARE_PATHS = ["/agent-auth", "/agent-api", "/agent-api/v1", "/agent-auth/v1", "/agent-auth/authorize/",
              "/agent-auth/authorize/x", "/agent-auth/authorizex", "/agent-auth/login/", "/agent-auth/login/x"]
EVERY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"]


@pytest.mark.parametrize("path", BARE_PATHS)
@pytest.mark.parametrize("method", EVERY_METHOD)
def test_a_prefix_without_its_slash_or_an_unknown_path_beside_the_pages_is_404_json_no_store(db, path, method):
    response = APIClient().generic(method, path, b'{"a": 1}', content_type="application/json")
    assert _json_error(response) == (404, "application/json", "not_found")
    assert (response["Cache-Control"], response["Pragma"]) == ("no-store", "no-cache")


@pytest.mark.parametrize("path", BARE_PATHS)
def test_head_on_a_prefix_without_its_slash_is_404_json_no_store(db, path):
    response = APIClient().head(path)
    assert (response.status_code, response["Content-Type"]) == (404, "application/json")
    assert response["Cache-Control"] == "no-store"


@pytest.mark.urls("tests.core.urls")
@pytest.mark.parametrize("path", ["/agent-api/test/slashed", "/agent-auth/test/slashed"])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_append_slash_never_redirects_on_the_agent_prefixes(db, path, method):
    # `<path>/` is a view (tests.core.urls): APPEND_SLASH would answer 301 to it elsewhere.
    response = APIClient().generic(method, path)
    assert _json_error(response) == (404, "application/json", "not_found")
    assert "Location" not in response
    assert response["Cache-Control"] == "no-store"


@pytest.mark.urls("tests.core.urls")
def test_append_slash_still_redirects_outside_the_agent_prefixes(db):
    response = APIClient().get("/plain/slashed")
    assert (response.status_code, response["Location"]) == (301, "/plain/slashed/")


@pytest.mark.parametrize("method,path,allowed", [
    ("GET", "/agent-auth/v1/token", "POST"),
    ("PUT", "/agent-auth/v1/authorizations", "POST"),
    ("DELETE", "/agent-auth/v1/revoke", "POST"),
    ("PATCH", "/agent-auth/v1/token", "POST"),
])
def test_a_wrong_method_on_agent_auth_is_405_json_with_allow(db, method, path, allowed):
    response = APIClient().generic(method, path)
    assert _json_error(response) == (405, "application/json", "method_not_allowed")
    assert allowed in response["Allow"]


@pytest.mark.parametrize("method,suffix", [
    ("POST", ""), ("DELETE", "/bootstrap"), ("PUT", "/turns"), ("GET", "/knowledge/search"), ("PUT", "/memories"),
])
def test_a_wrong_method_on_agent_api_is_405_json(world, method, suffix):
    url = f"/agent-api/v1/workspaces{'/' + world.route_key if suffix else ''}{suffix}"
    response = APIClient().generic(method, url, **bearer(world.access_token))
    assert _json_error(response) == (405, "application/json", "method_not_allowed")


def test_a_wrong_method_without_credentials_is_still_json(db):
    response = APIClient().generic("PUT", "/agent-api/v1/workspaces/store-assistant/turns")
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"] in {"unauthorized", "method_not_allowed"}


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE"])
def test_unusual_methods_on_the_agent_prefixes_never_answer_html(db, method):
    response = APIClient().generic(method, "/agent-auth/v1/token")
    assert response.status_code < 500
    assert not response.get("Content-Type", "").startswith("text/html")


@pytest.mark.urls("tests.core.urls")
@pytest.mark.parametrize("prefix", ["/agent-auth/test", "/agent-api/test"])
@pytest.mark.parametrize("view", ["broken", "plain-broken"])
def test_an_unhandled_error_on_either_agent_prefix_is_a_json_500(db, prefix, view):
    client = APIClient()
    client.raise_request_exception = False
    response = client.get(f"{prefix}/{view}")
    assert _json_error(response) == (500, "application/json", "internal_error")
    assert response.json() == {"error": "internal_error", "message": "Internal server error."}
