"""Every response under /agent-auth/ and /agent-api/ — success and error — is Cache-Control: no-store,
with Pragma: no-cache (the token endpoint must send it, RFC 6749 §5.1)."""

import pytest

from tests.agent_auth.helpers import approved_code, authorization_for, bearer, session_for


@pytest.fixture
def world(agent_client):
    issued = session_for(agent_client)
    pending = authorization_for(agent_client)
    authorization, code = approved_code(agent_client)
    return {"client": agent_client, "issued": issued, "pending": pending, "approved": (authorization, code)}


def _requests(world):
    client, issued, pending = world["client"], world["issued"], world["pending"]
    authorization, code = world["approved"]
    access, client_token = bearer(issued.access_token), bearer(client.token)
    base = f"/agent-auth/v1/authorizations/{pending.pk}"
    create = {"client_app_id": client.app_id, "redirect_uri": "http://127.0.0.1:5000/cb", "state": "12345678",
              "requested_routes": ["store-assistant"], "device_label": "d", "code_challenge": "a" * 43,
              "code_challenge_method": "S256"}
    approve = {"principal": {"id": "u"}, "on_behalf_of": "u", "allowed_routes": ["store-assistant"]}
    exchange = {"grant_type": "authorization_code", "client_app_id": client.app_id, "code": code,
                "redirect_uri": authorization.redirect_uri, "code_verifier": authorization.verifier}
    return [
        # (method, path, body, headers, expected status)
        ("post", "/agent-auth/v1/authorizations", create, {}, 201),
        ("post", "/agent-auth/v1/authorizations", {}, {}, 400),
        ("get", base, None, client_token, 200),
        ("get", base, None, {}, 401),
        ("post", base + "/approve", {}, client_token, 400),
        ("post", base + "/approve", approve, client_token, 200),
        ("post", base + "/deny", {}, client_token, 409),
        ("post", "/agent-auth/v1/token", exchange, {}, 200),
        ("post", "/agent-auth/v1/token", exchange, {}, 400),
        ("get", "/agent-auth/v1/token", None, {}, 405),
        ("get", "/agent-auth/v1/session", None, access, 200),
        ("get", "/agent-auth/v1/session", None, {}, 401),
        ("get", "/agent-api/v1/workspaces", None, access, 200),
        ("get", "/agent-api/v1/workspaces", None, {}, 401),
        ("get", "/agent-api/v1/workspaces/store-assistant/system-info", None, access, 200),
        ("get", "/agent-api/v1/workspaces/auto/system-info", None, access, 400),
        ("get", "/agent-api/v1/workspaces/store-assistant/bootstrap", None, access, 200),
        ("get", "/agent-api/v1/workspaces/nowhere/bootstrap", None, access, 404),
        ("get", "/agent-api/v1/no-such-endpoint", None, access, 404),
        ("post", f"/agent-auth/v1/sessions/{issued.session.pk}/revoke", None, access, 401),
        ("post", "/agent-auth/v1/revoke", None, access, 200),
        ("post", f"/agent-auth/v1/sessions/{issued.session.pk}/revoke", None, client_token, 200),
    ]


def test_every_agent_response_is_no_store(api_client, world):
    seen = []
    for method, path, body, headers, _status in _requests(world):
        response = getattr(api_client, method)(path, body, format="json", **headers)
        seen.append((method, path, response.status_code, response.get("Cache-Control")))
        assert response["Pragma"] == "no-cache", (method, path, response.status_code)
    expected = [(method, path, status, "no-store") for method, path, _, _, status in _requests(world)]
    assert seen == expected


@pytest.mark.parametrize(("content_type", "body", "status"), [
    ("application/json; charset=latin-1", b'{"grant_type": "refresh_token"}', 400),  # refused by a middleware
    ("application/json", b'{"grant_type": "' + b"a" * 2000 + b'"}', 400),  # over the body limit, unread
])
def test_the_token_endpoint_sends_pragma_on_answers_given_before_its_view(api_client, settings, content_type, body,
                                                                          status):
    settings.BAILING_JSON_BODY_MAX_BYTES = 1000
    response = api_client.generic("POST", "/agent-auth/v1/token", body, content_type=content_type)
    assert (response.status_code, response.json()["error"]) == (status, "invalid_request")
    assert (response["Cache-Control"], response["Pragma"]) == ("no-store", "no-cache")
