"""`bailinghub-mcp login` / `logout` against the live hub: PKCE with a loopback callback, tokens
kept 0600 in the user's config directory, the callback's state checked, revocation on logout."""

from __future__ import annotations

import stat
import subprocess
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from apps.agent_auth.models import AgentAuthorization, AgentSession
from tests.mcp.conftest import CLI, WORKSPACE, cli_env, decide, finish, http_json, start_login, stored_tokens

pytestmark = pytest.mark.django_db(transaction=True)


def test_login_keeps_the_tokens_of_the_approved_session_readable_by_the_user_only(hub_url, agent_client,
                                                                                  config_home):
    login = start_login(hub_url, agent_client, config_home)
    decide(hub_url, agent_client, login)
    returncode, output = finish(login)

    assert returncode == 0, output
    directory = config_home / "bailinghub-mcp"
    path = directory / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    tokens = stored_tokens(config_home)
    session = AgentSession.objects.get()
    assert (tokens["session_id"], tokens["client_app_id"], tokens["workspace"], tokens["hub"]) == (
        str(session.pk), agent_client.app_id, WORKSPACE, hub_url)
    assert tokens["access_token"].startswith("bha_") and tokens["refresh_token"].startswith("bhr_")
    assert session.device_label.startswith("bailinghub-mcp on ")
    assert tokens["access_token"] not in output and tokens["refresh_token"] not in output


def test_login_asks_with_pkce_s256_for_the_one_workspace_and_a_loopback_redirect(hub_url, agent_client,
                                                                                 config_home):
    login = start_login(hub_url, agent_client, config_home)
    authorization = AgentAuthorization.objects.get(pk=login.authorization_id)
    decide(hub_url, agent_client, login, approve=False)
    finish(login)

    parts = urlsplit(authorization.redirect_uri)
    assert (parts.scheme, parts.hostname, parts.path) == ("http", "127.0.0.1", "/callback")
    assert parts.port and parts.port > 0
    assert authorization.requested_routes == [WORKSPACE]
    assert authorization.code_challenge_method == "S256" and len(authorization.code_challenge) == 43


def test_a_denied_login_fails_and_stores_nothing(hub_url, agent_client, config_home):
    login = start_login(hub_url, agent_client, config_home)
    decide(hub_url, agent_client, login, approve=False)
    returncode, output = finish(login)

    assert returncode == 1
    assert "not approved (access_denied)" in output
    assert not (config_home / "bailinghub-mcp" / "credentials.json").exists()
    assert AgentSession.objects.count() == 0


# A non-ASCII state once made the listener's compare_digest raise: no answer, a traceback.
@pytest.mark.parametrize("state", ["someone-elses-state", "état-étranger"])
def test_a_callback_with_another_state_is_refused_and_the_real_one_still_signs_in(hub_url, agent_client,
                                                                                  config_home, state):
    login = start_login(hub_url, agent_client, config_home)
    redirect_uri = AgentAuthorization.objects.get(pk=login.authorization_id).redirect_uri
    forged = f"{redirect_uri}?{urlencode({'code': 'bhc_forged', 'state': state})}"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(forged, timeout=15)
    assert refused.value.code == 400

    followed = decide(hub_url, agent_client, login)
    returncode, output = finish(login)
    assert returncode == 0, output
    assert parse_qs(urlsplit(followed).query)["state"] != [state]
    assert AgentSession.objects.count() == 1


def test_logout_revokes_the_session_on_the_hub_and_deletes_the_tokens(signed_in, hub_url):
    refresh_token = stored_tokens(signed_in)["refresh_token"]
    done = subprocess.run([CLI, "logout"], env=cli_env(signed_in), capture_output=True, text=True, timeout=30,
                          check=False)

    assert done.returncode == 0, done.stderr
    assert "revoked on the hub; local tokens deleted" in done.stderr
    assert not (signed_in / "bailinghub-mcp" / "credentials.json").exists()
    session = AgentSession.objects.get()
    assert session.revoked_at is not None
    status, body = http_json("POST", f"{hub_url}/agent-auth/v1/token", {
        "grant_type": "refresh_token", "client_app_id": session.client.app_id, "refresh_token": refresh_token})
    assert (status, body["error"]) == (400, "invalid_grant")
