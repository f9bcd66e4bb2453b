"""Where `bailinghub-mcp` keeps its credentials: a directory of its own is 0700, one given to it
keeps its mode (a shared one stays shared), the file is 0600 either way."""

from __future__ import annotations

import stat
import time

from bailinghub_mcp.credentials import Credentials, TokenStore

CREDENTIALS = Credentials(hub="http://127.0.0.1:8000", client_app_id="app-1", workspace="shop", session_id="s-1",
                          access_token="bha_x", access_expires_at=time.time() + 900, refresh_token="bhr_x",
                          refresh_expires_at=time.time() + 86400)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_directory_it_makes_is_its_own(tmp_path):
    store = TokenStore(tmp_path / "made" / "bailinghub-mcp")
    store.save(CREDENTIALS)
    assert (_mode(store.directory), _mode(store.path)) == (0o700, 0o600)


def test_a_shared_directory_it_is_given_keeps_its_mode(tmp_path):
    # `--config-dir /tmp`, run as root, made /tmp 0700 for every user.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    store = TokenStore(shared)
    store.save(CREDENTIALS)
    with store.locked():
        pass
    assert store.delete() is True
    assert _mode(shared) == 0o1777
