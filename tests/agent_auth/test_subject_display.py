"""Optional subject display: approve may carry `subject_display: {name}` (≤120 UTF-16 code units, no
control characters); token answers and the session then carry it with `subject_display_status`."""

import json

import pytest

from apps.agent_auth.models import AgentAuthorization
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, authorization_for, bearer
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


def _approve(api_client, client, authorization, **extra):
    body = {"principal": PRINCIPAL, "on_behalf_of": "ada@example.com",
            "allowed_routes": list(authorization.requested_routes), **extra}
    return api_client.post(f"/agent-auth/v1/authorizations/{authorization.pk}/approve",
                           json.dumps(body, ensure_ascii=False), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {client.token}")


def _exchange(api_client, client, authorization, redirect_uri):
    from urllib.parse import parse_qs, urlsplit

    code = parse_qs(urlsplit(redirect_uri).query)["code"][0]
    return api_client.post("/agent-auth/v1/token", {
        "grant_type": "authorization_code", "client_app_id": client.app_id, "code": code,
        "redirect_uri": authorization.redirect_uri, "code_verifier": authorization.verifier}, format="json").json()


@pytest.fixture
def client_app():
    route = RouteFactory(key="store-assistant")
    return AgentClientFactory(project=route.project, allowed_routes=["store-assistant"])


def test_a_named_subject_is_carried_by_the_token_refresh_and_session(api_client, client_app):
    authorization = authorization_for(client_app)
    approved = _approve(api_client, client_app, authorization, subject_display={"name": "百灵旗舰店 · Ada"})
    assert approved.status_code == 200, approved.content
    tokens = _exchange(api_client, client_app, authorization, approved.json()["redirect_uri"])
    assert (tokens["subject_display"], tokens["subject_display_status"]) == ({"name": "百灵旗舰店 · Ada"}, "provided")
    session = api_client.get("/agent-auth/v1/session", **bearer(tokens["access_token"])).json()
    assert (session["subject_display"], session["subject_display_status"]) == ({"name": "百灵旗舰店 · Ada"}, "provided")
    refreshed = api_client.post("/agent-auth/v1/token", {
        "grant_type": "refresh_token", "client_app_id": client_app.app_id,
        "refresh_token": tokens["refresh_token"]}, format="json").json()
    assert refreshed["subject_display"] == {"name": "百灵旗舰店 · Ada"}


def test_without_it_the_status_is_missing(api_client, client_app):
    authorization = authorization_for(client_app)
    tokens = _exchange(api_client, client_app, authorization,
                       _approve(api_client, client_app, authorization).json()["redirect_uri"])
    assert tokens["subject_display_status"] == "missing"
    assert "subject_display" not in tokens


@pytest.mark.parametrize("value", [
    {"name": "a" * 121}, {"name": "😀" * 61}, {"name": "bad\x07name"}, {"name": ""}, {"name": 5},
    {"name": "Ada\u202eniamod"}, {"name": "\u2067Ada"},  # bidirectional controls: read other than they are
    {"name": "Shop\u200f (verified)"}, {"name": "Shop\u200e"}, {"name": "Shop \u2029 second"},
    {"name": "ok", "extra": 1}, "Ada", {},
])
def test_a_bad_subject_display_is_refused_and_nothing_is_approved(api_client, client_app, value):
    authorization = authorization_for(client_app)
    response = _approve(api_client, client_app, authorization, subject_display=value)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    authorization.refresh_from_db()
    assert authorization.status == AgentAuthorization.Status.PENDING


def test_120_utf16_units_are_accepted(api_client, client_app):
    authorization = authorization_for(client_app)
    response = _approve(api_client, client_app, authorization, subject_display={"name": "😀" * 60})
    assert response.status_code == 200
