"""A refused agent is told why, so its host knows whether to refresh or to sign in again: the
status and code stay 401 `unauthorized` (or 400 `invalid_grant`), the message names the cause.
Nothing in them is secret to the token's holder; an operator's reason for a revocation stays in
the console."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.agent_auth.authentication import REFUSED_CLIENT_DISABLED, REFUSED_EXPIRED, REFUSED_UNKNOWN
from apps.agent_auth.models import AgentAuthorization, AgentSession
from apps.agent_auth.services import session_refresh, session_revoke
from tests.agent_auth.helpers import approved_code, bearer, session_for
from tests.projects.factories import UserFactory

pytestmark = pytest.mark.django_db

SESSION_URL = "/agent-auth/v1/session"
TOKEN_URL = "/agent-auth/v1/token"


def _refused(api_client, token: str | None) -> tuple[int, str, str]:
    response = api_client.get(SESSION_URL, **(bearer(token) if token else {}))
    assert response["WWW-Authenticate"] == "Bearer"
    return response.status_code, response.json()["error"], response.json()["message"]


def test_no_token_and_an_unknown_one_are_told_apart(api_client, agent_client):
    assert _refused(api_client, None) == (401, "unauthorized", "Authentication is required.")
    assert _refused(api_client, "bha_" + "x" * 43) == (401, "unauthorized", REFUSED_UNKNOWN)


def test_an_access_token_a_refresh_replaced_says_to_refresh_or_sign_in(api_client, agent_client):
    issued = session_for(agent_client)
    renewed = session_refresh(client_app_id=agent_client.app_id, refresh_token=issued.refresh_token)
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_UNKNOWN)
    assert api_client.get(SESSION_URL, **bearer(renewed.access_token)).status_code == 200


def test_an_expired_access_token_says_to_refresh(api_client, agent_client):
    issued = session_for(agent_client)
    AgentSession.objects.update(access_expires_at=timezone.now() - timedelta(seconds=1))
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_EXPIRED)


def test_a_disabled_client_is_named(api_client, agent_client):
    issued = session_for(agent_client)
    agent_client.enabled = False
    agent_client.save(update_fields=["enabled"])
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_CLIENT_DISABLED)


def test_a_session_an_operator_revoked_says_so_without_the_operators_reason(api_client, agent_client):
    issued = session_for(agent_client)
    session_revoke(session=AgentSession.objects.get(), revoked_by=AgentSession.RevokedBy.OPERATOR,
                   reason="laptop stolen from the car", revoked_by_name="ops")
    status, code, message = _refused(api_client, issued.access_token)
    assert (status, code, message) == (401, "unauthorized", "This session was revoked by an operator: sign in again.")
    refreshed = api_client.post(TOKEN_URL, {"grant_type": "refresh_token", "client_app_id": agent_client.app_id,
                                            "refresh_token": issued.refresh_token}, format="json")
    assert (refreshed.status_code, refreshed.json()["error"], refreshed.json()["message"]) == (
        400, "invalid_grant", "This session was revoked by an operator: sign in again.")


def test_a_session_past_its_thirty_days_says_to_sign_in_again(api_client, agent_client):
    issued = session_for(agent_client)
    AgentSession.objects.update(refresh_expires_at=timezone.now() - timedelta(seconds=1))
    message = "This session has expired (a session lasts 30 days from its sign-in): sign in again."
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", message)


def test_a_replayed_code_says_its_session_is_revoked_and_the_next_refresh_says_why(api_client, agent_client):
    authorization, code = approved_code(agent_client)
    exchange = {"grant_type": "authorization_code", "client_app_id": agent_client.app_id, "code": code,
                "redirect_uri": authorization.redirect_uri, "code_verifier": authorization.verifier}
    first = api_client.post(TOKEN_URL, exchange, format="json").json()
    replay = api_client.post(TOKEN_URL, exchange, format="json")
    assert (replay.status_code, replay.json()["error"]) == (400, "invalid_grant")
    assert replay.json()["message"] == ("The code has already been used; the session it was exchanged for is revoked "
                                        "(a used code presented again may have leaked): sign in again.")
    refreshed = api_client.post(TOKEN_URL, {"grant_type": "refresh_token", "client_app_id": agent_client.app_id,
                                            "refresh_token": first["refresh_token"]}, format="json")
    assert (refreshed.status_code, refreshed.json()["message"]) == (
        400, "This session was revoked by BailingHub (authorization code reused): sign in again.")
    assert AgentSession.objects.get().revoked_by == AgentSession.RevokedBy.SYSTEM


def test_a_session_whose_approver_left_the_project_says_how_to_restore_it(api_client, agent_client):
    issued = session_for(agent_client)
    approver = UserFactory()
    AgentAuthorization.objects.update(decided_by=approver, decided_on_page=True)
    status, code, message = _refused(api_client, issued.access_token)
    assert (status, code) == (401, "unauthorized")
    assert message.startswith("The BailingHub account that approved this session is no longer a member")
