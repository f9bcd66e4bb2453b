"""Where `bailinghub-mcp` keeps its credentials: a directory of its own is 0700, one given to it
keeps its mode and is refused when others may write in it, the file is 0600 either way."""

from __future__ import annotations

import stat
import time

import pytest
from bailinghub_mcp.credentials import Credentials, CredentialsError, TokenStore

CREDENTIALS = Credentials(hub="http://127.0.0.1:8000", client_app_id="app-1", workspace="shop", session_id="s-1",
                          access_token="bha_x", access_expires_at=time.time() + 900, refresh_token="bhr_x",
                          refresh_expires_at=time.time() + 86400)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_directory_it_makes_is_its_own(tmp_path):
    store = TokenStore(tmp_path / "made" / "bailinghub-mcp")
    store.save(CREDENTIALS)
    assert (_mode(store.directory), _mode(store.path)) == (0o700, 0o600)


def test_a_shared_directory_it_is_given_is_refused_and_keeps_its_mode(tmp_path):
    # `--config-dir /tmp`, run as root, made /tmp 0700 for every user; run as another user, others
    # could put their own sign-in in its place.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    store = TokenStore(shared)
    with pytest.raises(CredentialsError, match="is not a private directory"):
        store.save(CREDENTIALS)
    assert _mode(shared) == 0o1777 and not store.path.exists()


def test_a_private_directory_it_is_given_is_used_as_it_is(tmp_path):
    given = tmp_path / "given"
    given.mkdir()
    given.chmod(0o755)  # others may list it, not write in it: the file itself is 0600
    store = TokenStore(given)
    store.save(CREDENTIALS)
    with store.locked():
        pass
    assert (_mode(given), _mode(store.path)) == (0o755, 0o600)
