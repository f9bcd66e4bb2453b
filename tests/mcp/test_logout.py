"""`logout` while a server of the same user is refreshing, against a scripted hub."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from bailinghub_mcp.auth import HubSession, logout

from tests.mcp.scripted_hub import ScriptedHub, signed_in_store

TOKEN = ("POST", "/agent-auth/v1/token")


@pytest.fixture
def hub():
    scripted = ScriptedHub()
    yield scripted
    scripted.close()


def test_a_logout_during_a_refresh_leaves_no_tokens_behind(hub, tmp_path):
    """The refresh saved its rotated pair after logout had deleted the file: `status` then showed a
    sign-in that the hub had revoked."""
    store = signed_in_store(tmp_path / "config", hub)
    session = HubSession(store)
    session.credentials = replace(session.credentials, access_expires_at=time.time())
    hub.script[TOKEN] = [(1.0, 200, {"token_type": "Bearer", "access_token": "bha_second", "expires_in": 900,
                                     "refresh_token": "bhr_second", "refresh_expires_in": 86400,
                                     "session_id": "s-1", "client_app_id": "app-1"})]
    hub.script[("POST", "/agent-auth/v1/revoke")] = [(200, {"revoked": True})]
    refreshing = threading.Thread(target=session.access_token)
    refreshing.start()
    # The refresh holds the store's lock from before it sends until it has saved the rotated pair:
    # once the hub has its request, logout waits for that lock. (A fixed sleep let logout go first
    # when the thread was slow to start, and it revoked bhr_first.)
    hub.wait_for(*TOKEN)

    said = logout(store)
    refreshing.join(timeout=10)
    session.close()

    assert said == "Signed out: revoked on the hub; local tokens deleted."
    assert not store.path.exists()
    assert [body["refresh_token"] for body in hub.sent("POST", "/agent-auth/v1/revoke")] == ["bhr_second"]
