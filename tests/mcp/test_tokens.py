"""Token upkeep of `bailinghub-mcp` against the live hub: refresh 30 s before expiry with the
rotated pair saved, a 401 answered by one refresh and the same request again, two servers of one
user sharing one rotation, an ended session asking for a new login."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest
from bailinghub_mcp.auth import HubSession, SessionExpired
from bailinghub_mcp.credentials import TokenStore
from bailinghub_mcp.wire import HubError

from apps.agent_auth.models import AgentClient, AgentSession
from tests.mcp.conftest import WORKSPACE, http_json, stored_tokens

pytestmark = pytest.mark.django_db(transaction=True)


def store_of(config_home: Path) -> TokenStore:
    return TokenStore(config_home / "bailinghub-mcp")


def rewrite(config_home: Path, **changes) -> dict:
    path = config_home / "bailinghub-mcp" / "credentials.json"
    data = {**json.loads(path.read_text()), **changes}
    path.write_text(json.dumps(data))
    return data


def workspaces(session: HubSession) -> list[str]:
    body = session.call("GET", "/agent-api/v1/workspaces", schema="bailing.agent-workspaces.v1").body
    return [entry["route"] for entry in body["workspaces"]]


def test_a_token_30_seconds_from_expiry_is_refreshed_first_and_the_rotated_pair_saved(signed_in):
    before = rewrite(signed_in, access_expires_at=time.time() + 29)
    session = HubSession(store_of(signed_in))

    assert workspaces(session) == [WORKSPACE]
    after = stored_tokens(signed_in)
    assert after["refresh_token"] != before["refresh_token"] and after["access_token"] != before["access_token"]
    assert after["session_id"] == before["session_id"]
    assert after["access_expires_at"] > time.time() + 800
    assert stat.S_IMODE((signed_in / "bailinghub-mcp" / "credentials.json").stat().st_mode) == 0o600


def test_a_token_further_from_expiry_is_used_as_it_is(signed_in):
    before = rewrite(signed_in, access_expires_at=time.time() + 60)
    assert workspaces(HubSession(store_of(signed_in))) == [WORKSPACE]
    assert stored_tokens(signed_in) == before


def test_a_401_is_answered_by_one_refresh_and_the_same_request_sent_again(signed_in):
    before = rewrite(signed_in, access_token="bha_" + "A" * 43)  # the hub does not know it: 401
    session = HubSession(store_of(signed_in))

    found = session.call("POST", f"/agent-api/v1/workspaces/{WORKSPACE}/knowledge/search",
                         json_body={"query": "退款"}, schema="bailing.agent-knowledge-search.v1").body
    assert found["status"] == "ok" and found["hints"]
    after = stored_tokens(signed_in)
    assert after["refresh_token"] != before["refresh_token"]
    assert AgentSession.objects.get().revoked_at is None


def test_two_servers_of_one_user_share_one_rotation_and_the_session_survives(signed_in):
    rewrite(signed_in, access_expires_at=time.time() + 5)
    first, second = HubSession(store_of(signed_in)), HubSession(store_of(signed_in))

    assert workspaces(first) == [WORKSPACE]
    assert workspaces(second) == [WORKSPACE]  # takes the pair the first one saved; never the rotated token
    assert first.credentials.refresh_token == second.credentials.refresh_token == stored_tokens(signed_in)[
        "refresh_token"]
    assert AgentSession.objects.get().revoked_at is None


def test_a_session_ended_on_the_hub_asks_for_a_new_login(signed_in, hub_url, agent_client):
    tokens = stored_tokens(signed_in)
    status, _ = http_json("POST", f"{hub_url}/agent-auth/v1/sessions/{tokens['session_id']}/revoke", {},
                          token=agent_client.token)
    assert status == 200

    with pytest.raises(SessionExpired, match="bailinghub-mcp login"):
        workspaces(HubSession(store_of(signed_in)))
    # The dead sign-in is forgotten: `status` said "sign-in valid for: 29 day(s)" after a revoke.
    assert not (signed_in / "bailinghub-mcp" / "credentials.json").exists()


def test_a_client_disabled_on_the_hub_asks_for_a_new_login_and_nothing_runs(signed_in, agent_client):
    """The operator disables the agent client: the bridge's next call is refused (401), its refresh too
    (400 invalid_client), and it says so instead of going on with the old tokens."""
    session = HubSession(store_of(signed_in))
    assert workspaces(session) == [WORKSPACE]
    AgentClient.objects.filter(pk=agent_client.pk).update(enabled=False)

    with pytest.raises(SessionExpired, match="invalid_client"):
        workspaces(session)
    assert not (signed_in / "bailinghub-mcp" / "credentials.json").exists()


def test_a_workspace_taken_from_the_client_is_gone_at_the_next_call(signed_in, agent_client):
    session = HubSession(store_of(signed_in))
    assert workspaces(session) == [WORKSPACE]
    AgentClient.objects.filter(pk=agent_client.pk).update(allowed_routes=[])
    assert workspaces(session) == []
    with pytest.raises(HubError) as refused:
        session.call("GET", f"/agent-api/v1/workspaces/{WORKSPACE}/bootstrap")
    assert (refused.value.status, refused.value.code) == (404, "route_unavailable")
