"""The CLI's small commands: what `status` shows (never a token), `serve` before any login."""

from __future__ import annotations

import os
import subprocess

import pytest
from bailinghub_mcp.auth import LoginError, login
from bailinghub_mcp.credentials import Credentials, TokenStore

from tests.mcp.conftest import CLI


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
