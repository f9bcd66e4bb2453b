import json
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.agent_auth.models import AgentAuthorization, AgentRefreshToken, AgentSession
from apps.core.tokens import token_hash
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import approved_code, bearer, session_for

URL = "/agent-auth/v1/token"


def _code_body(authorization, the_code, **changes):
    body = {"grant_type": "authorization_code", "client_app_id": authorization.client.app_id, "code": the_code,
            "redirect_uri": authorization.redirect_uri, "code_verifier": authorization.verifier}
    body.update(changes)
    return body


def _refresh_body(client, token, **changes):
    body = {"grant_type": "refresh_token", "client_app_id": client.app_id, "refresh_token": token}
    body.update(changes)
    return body


def _counts():
    return AgentSession.objects.count(), AgentRefreshToken.objects.count()


def _assert_refused(response, status, error):
    assert response.status_code == status
    assert response.json()["error"] == error
    assert response["Cache-Control"] == "no-store"
    assert response["Pragma"] == "no-cache"
    assert "access_token" not in response.json()


def test_code_exchange_issues_a_session(api_client, agent_client):
    authorization, code = approved_code(agent_client)
    response = api_client.post(URL, _code_body(authorization, code), format="json")
    assert response.status_code == 200
    body = response.json()
    session = AgentSession.objects.get()
    assert set(body) == {"token_type", "access_token", "expires_in", "refresh_token", "refresh_expires_in",
                         "session_id", "client_app_id", "subject_display_status"}
    assert body["token_type"] == "Bearer"
    assert body["access_token"].startswith("bha_") and len(body["access_token"]) == 47
    assert body["refresh_token"].startswith("bhr_") and len(body["refresh_token"]) == 47
    # §4: "Access token 900 s; refresh session 30 days from the first exchange" — counted from the
    # issue, not from the answer a few milliseconds later (it read 899 and 2,591,999).
    assert (type(body["expires_in"]), body["expires_in"]) == (int, 900)
    assert (type(body["refresh_expires_in"]), body["refresh_expires_in"]) == (int, 30 * 86400)
    assert body["session_id"] == str(session.pk)
    assert body["client_app_id"] == agent_client.app_id
    assert response["Cache-Control"] == "no-store"
    assert response["Pragma"] == "no-cache"
    assert session.access_token_hash == token_hash(body["access_token"])
    assert session.refresh_tokens.get().token_hash == token_hash(body["refresh_token"])
    assert session.refresh_expires_at - session.created_at < timedelta(days=30, seconds=1)
    assert session.allowed_routes == ["store-assistant", "hr-helpdesk"]
    assert session.principal_id == "u-1001" and session.audience == "employee"
    authorization.refresh_from_db()
    assert authorization.status == "exchanged"


def test_no_token_is_stored_in_clear(api_client, agent_client):
    authorization, code = approved_code(agent_client)
    body = api_client.post(URL, _code_body(authorization, code), format="json").json()
    session = AgentSession.objects.get()
    stored = [session.access_token_hash, session.refresh_tokens.get().token_hash,
              authorization.client.client_token_hash]
    for secret in (body["access_token"], body["refresh_token"], code, agent_client.token):
        assert secret not in stored
        assert not AgentSession.objects.filter(principal__icontains=secret).exists()


@pytest.mark.parametrize(
    "changes",
    [
        {"code_verifier": "A" * 43},
        {"redirect_uri": "http://127.0.0.1:53683/callback"},
        {"code": "bhc_" + "x" * 43},
    ],
)
def test_a_mismatched_exchange_is_invalid_grant_and_issues_nothing(api_client, agent_client, changes):
    authorization, code = approved_code(agent_client)
    response = api_client.post(URL, _code_body(authorization, code, **changes), format="json")
    _assert_refused(response, 400, "invalid_grant")
    assert _counts() == (0, 0)
    authorization.refresh_from_db()
    assert authorization.status == "approved"


def test_an_expired_code_is_invalid_grant(api_client, agent_client):
    authorization, code = approved_code(agent_client)
    AgentAuthorization.objects.filter(pk=authorization.pk).update(code_expires_at=timezone.now() - timedelta(seconds=1))
    _assert_refused(api_client.post(URL, _code_body(authorization, code), format="json"), 400, "invalid_grant")
    assert _counts() == (0, 0)


def test_a_code_of_another_client_is_invalid_grant(api_client, agent_client, route):
    authorization, code = approved_code(agent_client)
    other = AgentClientFactory(project=route.project, allowed_routes=[route.key])
    body = _code_body(authorization, code, client_app_id=other.app_id)
    _assert_refused(api_client.post(URL, body, format="json"), 400, "invalid_grant")
    assert _counts() == (0, 0)


def test_a_code_works_once_and_its_reuse_revokes_the_session(api_client, agent_client):
    authorization, code = approved_code(agent_client)
    first = api_client.post(URL, _code_body(authorization, code), format="json").json()
    response = api_client.post(URL, _code_body(authorization, code), format="json")
    _assert_refused(response, 400, "invalid_grant")
    assert _counts() == (1, 1)
    session = AgentSession.objects.get()
    assert session.revoked_at is not None and session.revoked_by == "system"
    assert api_client.get("/agent-auth/v1/session", **bearer(first["access_token"])).status_code == 401


@pytest.mark.parametrize("verifier", ["a" * 42, "a" * 129, "a" * 42 + "!", "a" * 42 + " "])
def test_a_malformed_verifier_is_invalid_request(api_client, agent_client, verifier):
    authorization, code = approved_code(agent_client)
    response = api_client.post(URL, _code_body(authorization, code, code_verifier=verifier), format="json")
    _assert_refused(response, 400, "invalid_request")
    assert _counts() == (0, 0)


def test_a_verifier_of_128_characters_is_accepted(api_client, agent_client):
    import base64
    import hashlib

    from apps.agent_auth.services import authorization_approve, authorization_create

    verifier = "a-Z0._~" * 18 + "ab"
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    authorization = authorization_create(client_app_id=agent_client.app_id, redirect_uri="http://127.0.0.1:5000/c",
                                         state="12345678", requested_routes=["store-assistant"], device_label="d",
                                         code_challenge=challenge, requester_ip="127.0.0.1")
    redirect = authorization_approve(client=agent_client, authorization_id=authorization.pk,
                                     principal={"id": "u"}, on_behalf_of="u", allowed_routes=["store-assistant"])
    code = redirect.split("code=")[1].split("&")[0]
    authorization.verifier = verifier
    assert len(verifier) == 128
    assert api_client.post(URL, _code_body(authorization, code), format="json").status_code == 200


def test_an_unknown_field_is_invalid_request(api_client, agent_client):
    authorization, code = approved_code(agent_client)
    response = api_client.post(URL, _code_body(authorization, code, scope="x"), format="json")
    _assert_refused(response, 400, "invalid_request")
    assert _counts() == (0, 0)


@pytest.mark.parametrize("grant_type", ["client_credentials", "password", "", 7])
def test_an_unsupported_grant_type_is_refused(api_client, agent_client, grant_type):
    authorization, code = approved_code(agent_client)
    response = api_client.post(URL, _code_body(authorization, code, grant_type=grant_type), format="json")
    expected = "invalid_request" if grant_type == 7 else "unsupported_grant_type"
    _assert_refused(response, 400, expected)
    assert _counts() == (0, 0)


def test_a_missing_grant_type_is_invalid_request(api_client):
    _assert_refused(api_client.post(URL, {"code": "x"}, format="json"), 400, "invalid_request")


def test_an_unknown_client_is_invalid_client(api_client, agent_client):
    authorization, code = approved_code(agent_client)
    response = api_client.post(URL, _code_body(authorization, code, client_app_id="nobody"), format="json")
    _assert_refused(response, 400, "invalid_client")
    assert _counts() == (0, 0)


def test_a_disabled_client_cannot_exchange(api_client, agent_client):
    authorization, code = approved_code(agent_client)
    agent_client.enabled = False
    agent_client.save()
    _assert_refused(api_client.post(URL, _code_body(authorization, code), format="json"), 400, "invalid_client")
    assert _counts() == (0, 0)


def test_a_form_encoded_body_is_refused_as_invalid_request(api_client):
    response = api_client.post(URL, {"grant_type": "refresh_token"})
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert response.json()["message"] == ("The body must be JSON (Content-Type: application/json, in UTF-8), "
                                          "not 'multipart/form-data'.")
    assert response["Pragma"] == "no-cache"
    assert response["Cache-Control"] == "no-store"


def test_refresh_rotates_and_keeps_the_session(api_client, agent_client):
    issued = session_for(agent_client)
    response = api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["session_id"] == str(issued.session.pk)
    assert body["client_app_id"] == agent_client.app_id
    assert body["token_type"] == "Bearer"
    assert body["refresh_token"] != issued.refresh_token and body["access_token"] != issued.access_token
    assert body["expires_in"] == 900
    session = AgentSession.objects.get(pk=issued.session.pk)
    assert body["refresh_expires_in"] == int((session.refresh_expires_at - session.last_used_at).total_seconds())
    assert response["Pragma"] == "no-cache"
    lineage = list(issued.session.refresh_tokens.order_by("generation").values_list("generation", "rotated_at"))
    assert [generation for generation, _ in lineage] == [1, 2]
    assert lineage[0][1] is not None and lineage[1][1] is None
    # The old access token is replaced; the new one works.
    assert api_client.get("/agent-auth/v1/session", **bearer(issued.access_token)).status_code == 401
    assert api_client.get("/agent-auth/v1/session", **bearer(body["access_token"])).status_code == 200


def test_refresh_does_not_extend_the_session(api_client, agent_client):
    issued = session_for(agent_client)
    before = AgentSession.objects.get().refresh_expires_at
    api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json")
    assert AgentSession.objects.get().refresh_expires_at == before


def test_reusing_a_rotated_refresh_token_fails_and_revokes_the_session(api_client, agent_client):
    issued = session_for(agent_client)
    rotated = api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json").json()
    response = api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json")
    _assert_refused(response, 400, "invalid_grant")
    session = AgentSession.objects.get()
    assert session.revoked_at is not None and session.revoked_by == "system"
    assert AgentRefreshToken.objects.count() == 2
    # Everything of the session is dead: the newest refresh token and the current access token too.
    again = api_client.post(URL, _refresh_body(agent_client, rotated["refresh_token"]), format="json")
    _assert_refused(again, 400, "invalid_grant")
    assert api_client.get("/agent-auth/v1/session", **bearer(rotated["access_token"])).status_code == 401
    assert AgentRefreshToken.objects.count() == 2


@pytest.mark.parametrize("content_type", ["*/*", "application/*", "*/json"])
def test_a_refresh_with_a_media_range_as_content_type_is_invalid_request_and_rotates_nothing(
        api_client, agent_client, content_type):
    issued = session_for(agent_client)
    body = json.dumps(_refresh_body(agent_client, issued.refresh_token))
    response = api_client.generic("POST", URL, body, content_type=content_type)
    _assert_refused(response, 400, "invalid_request")
    assert AgentRefreshToken.objects.count() == 1
    assert api_client.get("/agent-auth/v1/session", **bearer(issued.access_token)).status_code == 200
    assert api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json").status_code == 200


def test_refresh_after_30_days_is_invalid_grant(api_client, agent_client):
    issued = session_for(agent_client)
    AgentSession.objects.update(refresh_expires_at=timezone.now() - timedelta(seconds=1))
    response = api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json")
    _assert_refused(response, 400, "invalid_grant")
    assert AgentRefreshToken.objects.count() == 1


def test_refresh_of_a_revoked_session_is_invalid_grant(api_client, agent_client):
    issued = session_for(agent_client)
    api_client.post("/agent-auth/v1/revoke", **bearer(issued.access_token))
    response = api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json")
    _assert_refused(response, 400, "invalid_grant")
    assert AgentRefreshToken.objects.count() == 1


def test_refresh_with_another_clients_app_id_is_invalid_grant_and_changes_nothing(api_client, agent_client, route):
    issued = session_for(agent_client)
    other = AgentClientFactory(project=route.project, allowed_routes=[route.key])
    response = api_client.post(URL, _refresh_body(other, issued.refresh_token), format="json")
    _assert_refused(response, 400, "invalid_grant")
    assert AgentSession.objects.get().revoked_at is None
    assert AgentRefreshToken.objects.count() == 1


def test_an_unknown_refresh_token_is_invalid_grant(api_client, agent_client):
    response = api_client.post(URL, _refresh_body(agent_client, "bhr_" + "y" * 43), format="json")
    _assert_refused(response, 400, "invalid_grant")
    assert _counts() == (0, 0)


def test_refresh_for_a_disabled_client_is_invalid_client(api_client, agent_client):
    issued = session_for(agent_client)
    agent_client.enabled = False
    agent_client.save()
    response = api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json")
    _assert_refused(response, 400, "invalid_client")
    assert AgentRefreshToken.objects.count() == 1


def test_an_access_token_ends_before_its_session(api_client, agent_client):
    """Capped at the session's end, the access token ended with it: in a session's last 15 minutes
    GET /session answered expires_at == refresh_expires_at, which the wire rules want later."""
    issued = session_for(agent_client)
    end = timezone.now() + timedelta(seconds=100)
    AgentSession.objects.update(refresh_expires_at=end)
    body = api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json").json()
    assert body["expires_in"] < body["refresh_expires_in"] <= 100
    assert AgentSession.objects.get().access_expires_at == end - timedelta(seconds=1)
    session = api_client.get("/agent-auth/v1/session", **bearer(body["access_token"])).json()
    assert session["refresh_expires_at"] > session["expires_at"]


def test_refresh_in_a_sessions_last_second_is_invalid_grant(api_client, agent_client):
    issued = session_for(agent_client)
    AgentSession.objects.update(refresh_expires_at=timezone.now() + timedelta(milliseconds=900))
    response = api_client.post(URL, _refresh_body(agent_client, issued.refresh_token), format="json")
    _assert_refused(response, 400, "invalid_grant")
    assert AgentRefreshToken.objects.count() == 1
