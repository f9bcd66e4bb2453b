import json
from datetime import timedelta

import pytest
from django.test import override_settings

from apps.agent_auth.models import AgentAuthorization
from apps.core.redis import redis_client
from tests.agent_auth.factories import AgentClientFactory, pkce_pair
from tests.routes.factories import RouteFactory

URL = "/agent-auth/v1/authorizations"


@pytest.fixture
def body(agent_client):
    _, challenge = pkce_pair()
    return {
        "client_app_id": agent_client.app_id,
        "redirect_uri": "http://127.0.0.1:53682/callback",
        "state": "st-0123456789",
        "requested_routes": ["store-assistant"],
        "device_label": "Ada's laptop",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }


def _post(api_client, body, **extra):
    return api_client.post(URL, body, format="json", **extra)


def test_create_answers_201_with_the_authorization_url(api_client, body, agent_client):
    response = _post(api_client, body)
    assert response.status_code == 201
    authorization = AgentAuthorization.objects.get()
    assert response.json() == {
        "authorization_id": str(authorization.pk),
        "authorization_url": f"https://business.example.com/agent/authorize?authorization_id={authorization.pk}",
        "expires_in": 600,
    }
    assert authorization.status == "pending"
    assert authorization.requested_routes == ["store-assistant"]
    assert authorization.requester_ip == "127.0.0.1"
    assert response["Cache-Control"] == "no-store"


def test_create_accepts_an_ipv6_loopback_callback(api_client, body):
    body["redirect_uri"] = "http://[::1]:8123/cb?x=1"
    assert _post(api_client, body).status_code == 201


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("redirect_uri", "https://127.0.0.1:53682/callback"),
        ("redirect_uri", "http://localhost:53682/callback"),
        ("redirect_uri", "http://127.0.0.1/callback"),
        ("redirect_uri", "http://user:pw@127.0.0.1:53682/callback"),
        ("redirect_uri", "http://127.0.0.1:53682/callback#frag"),
        ("redirect_uri", "http://127.0.0.1:99999/callback"),
        ("redirect_uri", "http://127.0.0.1:53682/" + "a" * 2030),
        ("redirect_uri", "http://[::1]/cb"),
        ("redirect_uri", "http://127.0.0.1:53682/callback?code=planted"),  # the hub adds code and state
        ("redirect_uri", "http://127.0.0.1:53682/callback?x=1&state="),
        ("redirect_uri", "http://127.0.0.1:53682/callback?error=x"),
        ("state", "short"),
        ("state", "s" * 513),
        ("device_label", "d" * 129),
        ("device_label", ""),
        ("device_label", "Ada's laptop\u202e.exe"),  # a right-to-left override: reads other than it is
        ("device_label", "laptop \u2066isolated\u2069"),
        ("device_label", "laptop\x85"),  # a C1 control
        ("device_label", "Laptop\u200f (verified)"),  # a right-to-left mark: the parenthesis is drawn on the left
        ("device_label", "Laptop\u061c"),  # the Arabic letter mark
        ("device_label", "Laptop\u2028second line"),  # a line separator
        ("requested_routes", []),
        ("requested_routes", ["auto"]),
        ("requested_routes", ["*"]),
        ("requested_routes", ["Store"]),
        ("requested_routes", ["store-assistant", "store-assistant"]),
        ("requested_routes", [f"r{i:02d}" for i in range(65)]),
        ("requested_routes", "store-assistant"),
        ("code_challenge", "x" * 42),
        ("code_challenge", "x" * 42 + "="),
        ("code_challenge_method", "plain"),
    ],
)
def test_malformed_fields_are_400_invalid_request_and_create_nothing(api_client, body, field, value):
    body[field] = value
    response = _post(api_client, body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert field in response.json()["fields"]
    assert AgentAuthorization.objects.count() == 0


def test_an_unknown_field_is_400_invalid_request(api_client, body):
    body["scope"] = "everything"
    response = _post(api_client, body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert AgentAuthorization.objects.count() == 0


@pytest.mark.parametrize("missing", ["client_app_id", "redirect_uri", "state", "requested_routes", "device_label",
                                     "code_challenge", "code_challenge_method"])
def test_every_field_is_required(api_client, body, missing):
    del body[missing]
    response = _post(api_client, body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert AgentAuthorization.objects.count() == 0


def test_state_of_exactly_8_and_512_characters_is_accepted(api_client, body):
    body["state"] = "s" * 8
    assert _post(api_client, body).status_code == 201
    body["state"] = "s" * 512
    assert _post(api_client, body).status_code == 201


def test_an_unknown_client_is_400_invalid_client(api_client, body):
    body["client_app_id"] = "no-such-app"
    response = _post(api_client, body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client"
    assert AgentAuthorization.objects.count() == 0


def test_a_disabled_client_is_400_invalid_client(api_client, body, agent_client):
    agent_client.enabled = False
    agent_client.save()
    response = _post(api_client, body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client"
    assert AgentAuthorization.objects.count() == 0


def test_a_route_outside_the_client_allowlist_is_400_invalid_client(api_client, body, route):
    body["requested_routes"] = ["store-assistant", "payroll"]
    response = _post(api_client, body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client"
    assert AgentAuthorization.objects.count() == 0


def test_a_non_object_body_is_400_invalid_request(api_client):
    response = api_client.post(URL, ["x"], format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_the_eleventh_request_in_a_minute_is_429_with_retry_after(api_client, body):
    for _ in range(10):
        assert _post(api_client, body).status_code == 201
    response = _post(api_client, body)
    assert response.status_code == 429
    assert response.json()["error"] == "rate_limited"
    assert 1 <= int(response["Retry-After"]) <= 60
    assert response["Cache-Control"] == "no-store"
    assert AgentAuthorization.objects.count() == 10


def test_the_rate_limit_is_per_ip(api_client, body):
    for _ in range(10):
        _post(api_client, body)
    assert _post(api_client, body, REMOTE_ADDR="10.1.2.3").status_code == 201


def test_the_rate_limit_is_per_client(api_client, body, route):
    for _ in range(10):
        _post(api_client, body)
    other = AgentClientFactory(project=route.project, allowed_routes=[route.key])
    body["client_app_id"] = other.app_id
    assert _post(api_client, body).status_code == 201


def test_the_rate_limit_follows_the_client_setting(api_client, body, agent_client):
    agent_client.authorization_rate_limit = 2
    agent_client.save()
    _post(api_client, body)
    _post(api_client, body)
    assert _post(api_client, body).status_code == 429
    assert AgentAuthorization.objects.count() == 2


def test_the_rate_limit_is_kept_in_redis(api_client, body, agent_client):
    _post(api_client, body)
    assert redis_client().zcard(f"bh:ratelimit:agent-authorizations:{agent_client.pk}:127.0.0.1") == 1


def test_without_redis_it_fails_closed_with_503(api_client, body):
    # A real, closed port: nothing listens on TCP port 1 here.
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        response = _post(api_client, body)
    assert response.status_code == 503
    assert response.json()["error"] == "agent_auth_unavailable"
    assert AgentAuthorization.objects.count() == 0


def test_a_trailing_slash_is_not_redirected(api_client, body):
    response = api_client.post(URL + "/", body, format="json")
    assert response.status_code == 404
    assert "Location" not in response


def test_the_upper_limits_are_accepted(api_client, body, agent_client, route):
    keys = [f"r{i:02d}" for i in range(64)]
    for key in keys:
        RouteFactory(project=route.project, key=key)
    agent_client.allowed_routes = keys
    agent_client.save()
    body.update(requested_routes=keys, device_label="d" * 128,
                redirect_uri="http://127.0.0.1:5000/" + "a" * (2048 - 22))
    response = _post(api_client, body)
    assert response.status_code == 201
    assert AgentAuthorization.objects.get().requested_routes == keys


def test_an_authorization_lives_600_seconds(api_client, body):
    _post(api_client, body)
    authorization = AgentAuthorization.objects.get()
    assert timedelta(seconds=599) < authorization.expires_at - authorization.created_at <= timedelta(seconds=600)


@pytest.mark.parametrize("content_type", ["text/plain", "application/json; charset=latin-1",
                                          "application/xml", "application/x-www-form-urlencoded"])
def test_a_body_of_another_media_type_is_400_invalid_request_and_creates_nothing(api_client, body, content_type):
    # Agent Auth's error list is closed: a body it cannot read is invalid_request, never 415.
    response = api_client.generic("POST", URL, json.dumps(body).encode("latin-1", "replace"),
                                  content_type=content_type)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert response.json()["message"]
    assert response["Cache-Control"] == "no-store"
    assert AgentAuthorization.objects.count() == 0


def test_a_body_over_the_limit_is_400_invalid_request_and_creates_nothing(api_client, body, settings):
    padded = json.dumps({**body, "device_label": "x" * settings.BAILING_JSON_BODY_MAX_BYTES}).encode()
    response = api_client.generic("POST", URL, padded, content_type="application/json")
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert response.json()["max_bytes"] == settings.BAILING_JSON_BODY_MAX_BYTES
    assert response["Cache-Control"] == "no-store"
    assert AgentAuthorization.objects.count() == 0
