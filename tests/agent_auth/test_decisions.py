from datetime import UTC, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from apps.agent_auth.models import AgentAuthorization
from apps.agent_auth.services import agent_client_token_rotate
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, authorization_for, bearer, session_for


@pytest.fixture
def authorization(agent_client):
    return authorization_for(agent_client, routes=["store-assistant", "hr-helpdesk"])


def _url(authorization, action=""):
    return f"/agent-auth/v1/authorizations/{authorization.pk}" + (f"/{action}" if action else "")


def _approve_body(**changes):
    body = {"principal": dict(PRINCIPAL), "on_behalf_of": "ada@example.com", "allowed_routes": ["store-assistant"]}
    body.update(changes)
    return body


def _snapshot(authorization):
    authorization.refresh_from_db()
    return (authorization.status, authorization.code_hash, authorization.decided_at, authorization.principal)


def test_context_describes_the_request(api_client, agent_client, authorization):
    response = api_client.get(_url(authorization), **bearer(agent_client.token))
    assert response.status_code == 200
    assert response.json() == {
        "authorization_id": str(authorization.pk),
        "client": {"app_id": agent_client.app_id, "name": agent_client.name},
        "device": {"name": "Ada's laptop"},
        "requested_routes": ["store-assistant", "hr-helpdesk"],
        "status": "pending",
        "expires_at": authorization.expires_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    assert response["Cache-Control"] == "no-store"


def test_context_of_an_expired_request_says_expired(api_client, agent_client, authorization):
    AgentAuthorization.objects.filter(pk=authorization.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api_client.get(_url(authorization), **bearer(agent_client.token)).json()["status"] == "expired"


@pytest.mark.parametrize("headers", [{}, {"HTTP_AUTHORIZATION": "Bearer bhk_not-a-real-token"},
                                     {"HTTP_AUTHORIZATION": "Basic dXNlcjpwdw=="}])
def test_context_without_a_valid_client_token_is_401(api_client, authorization, headers):
    response = api_client.get(_url(authorization), **headers)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response["WWW-Authenticate"] == "Bearer"


def test_an_agent_access_token_is_not_a_client_token(api_client, agent_client, authorization):
    issued = session_for(agent_client)
    response = api_client.get(_url(authorization), **bearer(issued.access_token))
    assert response.status_code == 401


def test_a_rotated_client_token_stops_working(api_client, agent_client, authorization):
    old = agent_client.token
    new = agent_client_token_rotate(client=agent_client)
    assert api_client.get(_url(authorization), **bearer(old)).status_code == 401
    assert api_client.get(_url(authorization), **bearer(new)).status_code == 200


def test_a_disabled_client_token_is_401(api_client, agent_client, authorization):
    agent_client.enabled = False
    agent_client.save()
    assert api_client.get(_url(authorization), **bearer(agent_client.token)).status_code == 401


def test_another_clients_authorization_is_404(api_client, route, authorization):
    other = AgentClientFactory(project=route.project, allowed_routes=[route.key])
    before = _snapshot(authorization)
    for response in (
        api_client.get(_url(authorization), **bearer(other.token)),
        api_client.post(_url(authorization, "approve"), _approve_body(), format="json", **bearer(other.token)),
        api_client.post(_url(authorization, "deny"), {}, format="json", **bearer(other.token)),
    ):
        assert response.status_code == 404
        assert response.json()["error"] == "not_found"
    assert _snapshot(authorization) == before


def test_approve_returns_the_loopback_url_with_code_and_state(api_client, agent_client, authorization):
    response = api_client.post(_url(authorization, "approve"), _approve_body(), format="json",
                               **bearer(agent_client.token))
    assert response.status_code == 200
    redirect = urlsplit(response.json()["redirect_uri"])
    assert (redirect.scheme, redirect.netloc, redirect.path) == ("http", "127.0.0.1:53682", "/callback")
    query = parse_qs(redirect.query)
    assert query["state"] == ["state-12345678"]
    assert query["code"][0].startswith("bhc_") and len(query["code"][0]) == 47
    authorization.refresh_from_db()
    assert authorization.status == "approved"
    assert authorization.allowed_routes == ["store-assistant"]
    assert authorization.principal == PRINCIPAL
    assert authorization.code_hash != query["code"][0]
    assert authorization.code_expires_at - authorization.decided_at == timedelta(seconds=120)


def test_approve_keeps_an_existing_query_on_the_redirect_uri(api_client, agent_client):
    authorization = authorization_for(agent_client, redirect_uri="http://[::1]:9000/cb?session=x")
    response = api_client.post(_url(authorization, "approve"), _approve_body(), format="json",
                               **bearer(agent_client.token))
    assert response.json()["redirect_uri"].startswith("http://[::1]:9000/cb?session=x&code=bhc_")


def test_deny_returns_access_denied_with_state(api_client, agent_client, authorization):
    response = api_client.post(_url(authorization, "deny"), {}, format="json", **bearer(agent_client.token))
    assert response.status_code == 200
    assert response.json() == {"redirect_uri": "http://127.0.0.1:53682/callback?error=access_denied&state=state-12345678"}
    authorization.refresh_from_db()
    assert authorization.status == "denied"
    assert authorization.code_hash is None


def test_deny_with_an_empty_body_is_accepted(api_client, agent_client, authorization):
    response = api_client.post(_url(authorization, "deny"), **bearer(agent_client.token))
    assert response.status_code == 200


def test_deny_refuses_unknown_fields(api_client, agent_client, authorization):
    before = _snapshot(authorization)
    response = api_client.post(_url(authorization, "deny"), {"why": "no"}, format="json", **bearer(agent_client.token))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert _snapshot(authorization) == before


@pytest.mark.parametrize("first", ["approve", "deny"])
@pytest.mark.parametrize("second", ["approve", "deny"])
def test_a_second_decision_is_409(api_client, agent_client, authorization, first, second):
    bodies = {"approve": _approve_body(), "deny": {}}
    api_client.post(_url(authorization, first), bodies[first], format="json", **bearer(agent_client.token))
    before = _snapshot(authorization)
    response = api_client.post(_url(authorization, second), bodies[second], format="json",
                               **bearer(agent_client.token))
    assert response.status_code == 409
    assert response.json()["error"] == "already_processed"
    assert _snapshot(authorization) == before


@pytest.mark.parametrize("action", ["approve", "deny"])
def test_deciding_an_expired_request_is_410(api_client, agent_client, authorization, action):
    AgentAuthorization.objects.filter(pk=authorization.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    before = _snapshot(authorization)
    body = _approve_body() if action == "approve" else {}
    response = api_client.post(_url(authorization, action), body, format="json", **bearer(agent_client.token))
    assert response.status_code == 410
    assert response.json()["error"] == "expired"
    assert _snapshot(authorization) == before


def test_approving_a_route_not_requested_is_403_route_not_allowed(api_client, agent_client):
    authorization = authorization_for(agent_client, routes=["store-assistant"])
    before = _snapshot(authorization)
    response = api_client.post(_url(authorization, "approve"), _approve_body(allowed_routes=["hr-helpdesk"]),
                               format="json", **bearer(agent_client.token))
    assert response.status_code == 403
    assert response.json()["error"] == "route_not_allowed"
    assert _snapshot(authorization) == before


def test_approving_a_route_removed_from_the_client_allowlist_is_403(api_client, agent_client, authorization):
    agent_client.allowed_routes = ["store-assistant"]
    agent_client.save()
    before = _snapshot(authorization)
    response = api_client.post(_url(authorization, "approve"), _approve_body(allowed_routes=["hr-helpdesk"]),
                               format="json", **bearer(agent_client.token))
    assert response.status_code == 403
    assert response.json()["error"] == "route_not_allowed"
    assert _snapshot(authorization) == before


def _principal(**changes):
    principal = dict(PRINCIPAL)
    principal.update(changes)
    return principal


@pytest.mark.parametrize(
    "body",
    [
        _approve_body(principal=_principal(id="i" * 129)),
        _approve_body(principal=_principal(id="")),
        _approve_body(principal=_principal(tenant="t" * 129)),
        _approve_body(principal=_principal(audience="a" * 65)),
        _approve_body(principal=_principal(audience="two words")),
        _approve_body(principal=_principal(channel="c" * 129)),
        _approve_body(principal=_principal(roles=[f"r{i}" for i in range(65)])),
        _approve_body(principal=_principal(roles=["r" * 65])),
        _approve_body(principal=_principal(roles="clerk")),
        _approve_body(principal=_principal(admin=True)),
        _approve_body(principal={k: v for k, v in PRINCIPAL.items() if k != "id"}),
        _approve_body(on_behalf_of="o" * 192),
        _approve_body(allowed_routes=[]),
        _approve_body(allowed_routes=["auto"]),
        _approve_body(allowed_routes=["store-assistant", "store-assistant"]),
        _approve_body(extra="field"),
        {"principal": PRINCIPAL, "allowed_routes": ["store-assistant"]},
    ],
)
def test_approve_limits_are_400_invalid_request(api_client, agent_client, authorization, body):
    before = _snapshot(authorization)
    response = api_client.post(_url(authorization, "approve"), body, format="json", **bearer(agent_client.token))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert _snapshot(authorization) == before


def test_approve_accepts_the_limits_exactly(api_client, agent_client, authorization):
    body = _approve_body(
        principal={"id": "i" * 128, "tenant": "t" * 128, "audience": "a" * 64, "channel": "c" * 128,
                   "roles": ["r" * 64] * 64},
        on_behalf_of="o" * 191,
    )
    response = api_client.post(_url(authorization, "approve"), body, format="json", **bearer(agent_client.token))
    assert response.status_code == 200


def test_optional_principal_fields_may_be_left_out(api_client, agent_client, authorization):
    body = _approve_body(principal={"id": "u-1"})
    response = api_client.post(_url(authorization, "approve"), body, format="json", **bearer(agent_client.token))
    assert response.status_code == 200
    authorization.refresh_from_db()
    assert authorization.principal == {"id": "u-1", "roles": []}


def test_unknown_authorization_id_is_404(api_client, agent_client):
    response = api_client.get("/agent-auth/v1/authorizations/00000000-0000-0000-0000-000000000000",
                              **bearer(agent_client.token))
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
