"""Contract audit, the wire rules (contracts-beyond-seeds §6): agent hosts follow no redirect, so a
deployment that sends its browsers from HTTP to HTTPS (SECURE_SSL_REDIRECT) must not answer an
agent request with one. It refuses it in JSON instead, unread, and serves the console as before."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from tests.agent_auth.helpers import bearer
from tests.tools.invocation_helpers import URL, stored

pytest_plugins = ["tests.tools.invocation_fixtures"]

NOTHING = {"invocations": 0, "approvals": 0, "journal": 0}


@pytest.fixture
def https_only(settings):
    settings.SECURE_SSL_REDIRECT = True
    return APIClient()  # a new client loads the middleware with the setting in force


def test_a_plain_http_tool_call_is_refused_in_json_not_redirected(shop, https_only):
    response = https_only.generic("POST", URL, json.dumps(shop.body("item_read", {"item_id": "1"})),
                                  content_type="application/json", **bearer(shop.token))
    assert (response.status_code, response.json()["error"]) == (403, "https_required")
    assert "Location" not in response
    assert response["Cache-Control"] == "no-store"
    assert stored() == NOTHING
    assert shop.server.received == []


def test_a_plain_http_agent_auth_request_is_refused_with_its_closed_lists_code(db, https_only):
    response = https_only.post("/agent-auth/v1/token", {}, format="json")
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert "Location" not in response
    assert response["Cache-Control"] == "no-store"


def test_an_https_tool_request_is_served(shop, https_only):
    response = https_only.get(URL + "/inspection-capabilities", secure=True, **bearer(shop.token))
    assert (response.status_code, response.json()["read_only"]) == (200, True)


def test_the_sign_in_page_still_goes_to_https(db, https_only):
    response = https_only.get("/agent-auth/login")
    assert (response.status_code, response["Location"]) == (301, "https://testserver/agent-auth/login")
