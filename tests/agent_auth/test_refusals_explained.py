"""A refused agent is told what to do, so its host knows whether to refresh or to sign in again: the
status and code stay 401 `unauthorized` (or 400 `invalid_grant`). An access token's refusal says
only that (refresh, or sign in again); what ended the session is told to the refresh token's holder,
on the token endpoint. An operator's reason for a revocation stays in the console."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.agent_auth.authentication import (
    REFUSED_ENDED,
    REFUSED_EXPIRED,
    REFUSED_MALFORMED,
    REFUSED_MISSING,
    REFUSED_MISSING_CLIENT,
    REFUSED_UNKNOWN,
)
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
    assert _refused(api_client, None) == (401, "unauthorized", REFUSED_MISSING)
    assert _refused(api_client, "bha_" + "x" * 43) == (401, "unauthorized", REFUSED_UNKNOWN)


@pytest.mark.parametrize("url", ["/agent-auth/v1/session", "/agent-api/v1/workspaces", "/agent-api/v1/tools"])
@pytest.mark.parametrize(("header", "message"), [
    (None, REFUSED_MISSING),
    ("bha_" + "x" * 43, REFUSED_MALFORMED),  # the token without the word Bearer
    ("Token bha_x", REFUSED_MALFORMED),
    ("Bearer a b", REFUSED_MALFORMED),
])
def test_a_request_without_a_bearer_is_told_how_to_send_one(api_client, agent_client, url, header, message):
    response = api_client.get(url, **({"HTTP_AUTHORIZATION": header} if header else {}))
    assert (response.status_code, response.json()["error"], response.json()["message"]) == (
        401, "unauthorized", message)
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_business_backend_without_its_client_token_is_told_how_to_send_it(api_client, agent_client):
    response = api_client.post("/agent-auth/v1/authorizations/00000000-0000-0000-0000-000000000000/approve", {},
                               format="json")
    assert (response.status_code, response.json()["error"], response.json()["message"]) == (
        401, "unauthorized", REFUSED_MISSING_CLIENT)
    assert response["WWW-Authenticate"] == "Bearer"


def test_an_access_token_a_refresh_replaced_says_to_refresh_or_sign_in(api_client, agent_client):
    issued = session_for(agent_client)
    renewed = session_refresh(client_app_id=agent_client.app_id, refresh_token=issued.refresh_token)
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_UNKNOWN)
    assert api_client.get(SESSION_URL, **bearer(renewed.access_token)).status_code == 200


def test_an_expired_access_token_says_to_refresh(api_client, agent_client):
    issued = session_for(agent_client)
    AgentSession.objects.update(access_expires_at=timezone.now() - timedelta(seconds=1))
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_EXPIRED)


def _refresh(api_client, agent_client, refresh_token: str) -> tuple[int, str, str]:
    response = api_client.post(TOKEN_URL, {"grant_type": "refresh_token", "client_app_id": agent_client.app_id,
                                           "refresh_token": refresh_token}, format="json")
    return response.status_code, response.json()["error"], response.json()["message"]


def test_an_expired_access_token_of_an_ended_session_says_to_refresh_and_the_refresh_says_why(api_client,
                                                                                              agent_client):
    issued = session_for(agent_client)
    session_revoke(session=AgentSession.objects.get(), revoked_by=AgentSession.RevokedBy.AGENT)
    AgentSession.objects.update(access_expires_at=timezone.now() - timedelta(seconds=1))
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_EXPIRED)
    assert _refresh(api_client, agent_client, issued.refresh_token) == (
        400, "invalid_grant", "This session was revoked by the agent: sign in again.")


def test_a_disabled_clients_session_says_it_ended_and_its_refresh_names_the_client(api_client, agent_client):
    issued = session_for(agent_client)
    agent_client.enabled = False
    agent_client.save(update_fields=["enabled"])
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_ENDED)
    assert _refresh(api_client, agent_client, issued.refresh_token) == (
        400, "invalid_client", "Unknown or disabled client_app_id.")


def test_a_session_an_operator_revoked_says_so_to_its_refresh_token_without_the_operators_reason(api_client,
                                                                                                 agent_client):
    issued = session_for(agent_client)
    session_revoke(session=AgentSession.objects.get(), revoked_by=AgentSession.RevokedBy.OPERATOR,
                   reason="laptop stolen from the car", revoked_by_name="ops")
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_ENDED)
    assert _refresh(api_client, agent_client, issued.refresh_token) == (
        400, "invalid_grant", "This session was revoked by an operator: sign in again.")


def test_a_session_past_its_thirty_days_says_to_sign_in_again(api_client, agent_client):
    issued = session_for(agent_client)
    AgentSession.objects.update(refresh_expires_at=timezone.now() - timedelta(seconds=1))
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_ENDED)
    assert _refresh(api_client, agent_client, issued.refresh_token) == (
        400, "invalid_grant", "This session has expired (a session lasts 30 days from its sign-in): sign in again.")


def test_a_replayed_code_says_its_session_is_revoked_and_the_next_refresh_says_why(api_client, agent_client):
    authorization, code = approved_code(agent_client)
    exchange = {"grant_type": "authorization_code", "client_app_id": agent_client.app_id, "code": code,
                "redirect_uri": authorization.redirect_uri, "code_verifier": authorization.verifier}
    first = api_client.post(TOKEN_URL, exchange, format="json").json()
    replay = api_client.post(TOKEN_URL, exchange, format="json")
    assert (replay.status_code, replay.json()["error"]) == (400, "invalid_grant")
    assert replay.json()["message"] == ("The code has already been used; the session it was exchanged for is revoked "
                                        "(a used code presented again may have leaked): sign in again.")
    assert _refresh(api_client, agent_client, first["refresh_token"]) == (
        400, "invalid_grant", "This session was revoked by BailingHub (authorization code reused): sign in again.")
    assert AgentSession.objects.get().revoked_by == AgentSession.RevokedBy.SYSTEM


def test_a_session_whose_approver_left_the_project_says_so_to_its_refresh_token(api_client, agent_client):
    issued = session_for(agent_client)
    AgentAuthorization.objects.update(decided_by=UserFactory(), decided_on_page=True)
    assert _refused(api_client, issued.access_token) == (401, "unauthorized", REFUSED_ENDED)
    assert _refresh(api_client, agent_client, issued.refresh_token) == (
        400, "invalid_grant", "The BailingHub account that approved this session can no longer approve it (it "
        "left the project, or was deactivated or deleted): sign in again.")
