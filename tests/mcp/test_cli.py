"""The CLI's small commands: what `status` shows (never a token), `serve` before any login or
after the hub has ended the sign-in."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
from bailinghub_mcp.auth import LoginError, login
from bailinghub_mcp.credentials import Credentials, TokenStore

from tests.mcp.conftest import CLI, http_json, stored_tokens


def run(config_dir, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BAILINGHUB_MCP_CONFIG_DIR": str(config_dir)}
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=60, check=False,
                          stdin=subprocess.DEVNULL)


def test_status_names_the_sign_in_and_never_a_token(tmp_path):
    TokenStore(tmp_path).save(Credentials(hub="https://hub.example.com", client_app_id="desk-app",
                                          workspace="store-assistant", session_id="s-42",
                                          access_token="bha_secret-access", access_expires_at=1e12,
                                          refresh_token="bhr_secret-refresh", refresh_expires_at=1e12))
    done = run(tmp_path, "status")
    assert done.returncode == 0
    assert "hub: https://hub.example.com" in done.stderr and "workspace: store-assistant" in done.stderr
    assert "secret" not in done.stderr + done.stdout


def test_serve_before_any_login_says_to_log_in_and_exits_1(tmp_path):
    done = run(tmp_path / "empty", "serve")
    assert done.returncode == 1
    assert "Run `bailinghub-mcp login` first." in done.stderr
    assert done.stdout == ""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}}) + "\n"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("transport", [[], ["--http", "--port", "free"]], ids=["stdio", "http"])
def test_serve_after_the_hub_ended_the_sign_in_says_to_log_in_and_exits_1(signed_in, hub_url, transport):
    """The profile read at start met the revoked refresh token: a traceback, and no answer to
    the host's initialize."""
    tokens = stored_tokens(signed_in)
    status, revoked = http_json("POST", f"{hub_url}/agent-auth/v1/revoke", {
        "client_app_id": tokens["client_app_id"], "refresh_token": tokens["refresh_token"]})
    assert (status, revoked["revoked"]) == (200, True)
    arguments = [str(free_port()) if argument == "free" else argument for argument in transport]

    env = {**os.environ, "BAILINGHUB_MCP_CONFIG_DIR": str(signed_in / "bailinghub-mcp")}
    done = subprocess.run([CLI, "serve", *arguments], env=env, input=INITIALIZE, capture_output=True, text=True,
                          timeout=60, check=False)

    assert done.returncode == 1
    assert done.stderr.startswith("The hub ended this sign-in (")
    assert done.stderr.endswith("); run `bailinghub-mcp login` again.\n")
    assert done.stderr.count("\n") == 1
    assert done.stdout == ""
    assert not (signed_in / "bailinghub-mcp" / "credentials.json").exists()


def test_login_refuses_a_plain_http_hub_that_is_not_on_this_computer(tmp_path):
    done = run(tmp_path, "login", "--hub", "http://hub.example.com", "--client-app-id", "a", "--workspace", "ws")
    assert done.returncode == 2
    assert "plain http is only for a hub on this computer" in done.stderr
    assert not (tmp_path / "credentials.json").exists()


@pytest.mark.parametrize("workspace", ["store-assistant\n", "auto", "Store"])
def test_login_refuses_what_is_not_a_workspace_route_key_before_any_request(tmp_path, workspace):
    # `$` matches before a final newline: the key must be the whole argument.
    with pytest.raises(LoginError, match="is not a workspace route key"):
        login(hub="https://hub.example.com", client_app_id="desk-app", workspace=workspace,
              store=TokenStore(tmp_path), open_url=None, announce=lambda _line: None)
    assert not (tmp_path / "credentials.json").exists()
