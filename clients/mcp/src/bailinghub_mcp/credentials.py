"""The session's tokens on disk: one JSON file in the user's config directory, readable by the
user only (directory 0700, file 0600), replaced atomically so a crash never leaves half a file.

A refresh rotates the refresh token and presenting a rotated one ends the session on the hub, so
two processes (a desktop host may start several servers) must never refresh with the same token:
refreshes take an exclusive lock on a file beside the tokens and re-read them under it."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; a single server per user is assumed there
    fcntl = None  # type: ignore[assignment]

APP_DIR = "bailinghub-mcp"
FILE_NAME = "credentials.json"


def config_dir() -> Path:
    """$BAILINGHUB_MCP_CONFIG_DIR, else $XDG_CONFIG_HOME/bailinghub-mcp, else the platform's
    per-user config directory (as platformdirs would choose it)."""
    explicit = os.environ.get("BAILINGHUB_MCP_CONFIG_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / APP_DIR
    if os.name == "nt":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming") / APP_DIR
    if os.uname().sysname == "Darwin":
        return Path.home() / "Library" / "Application Support" / APP_DIR
    return Path.home() / ".config" / APP_DIR


@dataclass
class Credentials:
    hub: str
    client_app_id: str
    workspace: str
    session_id: str
    access_token: str
    access_expires_at: float
    refresh_token: str
    refresh_expires_at: float

    def __repr__(self) -> str:  # tokens never reach a log line or a traceback
        return (f"Credentials(hub={self.hub!r}, client_app_id={self.client_app_id!r}, "
                f"workspace={self.workspace!r}, session_id={self.session_id!r})")


class CredentialsError(Exception):
    pass


class TokenStore:
    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or config_dir()
        self.path = self.directory / FILE_NAME
        self.lock_path = self.directory / ".lock"

    def load(self) -> Credentials:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CredentialsError(f"Not signed in: no {self.path}. Run `bailinghub-mcp login` first.") from None
        try:
            data = json.loads(raw)
            return Credentials(**{f.name: data[f.name] for f in fields(Credentials)})
        except (ValueError, KeyError, TypeError):
            raise CredentialsError(f"{self.path} is not a credentials file of this version; "
                                   "run `bailinghub-mcp login` again.") from None

    def save(self, credentials: Credentials) -> None:
        self._ensure_directory()
        fd, temporary = tempfile.mkstemp(prefix=".credentials-", dir=self.directory)  # created 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(asdict(credentials), handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temporary, 0o600)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise

    def delete(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self._ensure_directory()
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _ensure_directory(self) -> None:
        """Our directory, made 0700 when we make it. One that exists keeps its mode (`--config-dir
        /tmp` made /tmp 0700 for every user) and is refused when others may write in it: they
        could put their own sign-in in place of ours, or a link where the lock is opened."""
        try:
            self.directory.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            found = self.directory.stat()
            if os.name != "nt" and (found.st_mode & 0o022 or found.st_uid != os.getuid()):
                raise CredentialsError(f"{self.directory} is not a private directory (another user owns it or may "
                                       "write in it): choose one of your own with --config-dir.") from None
            return
        if os.name != "nt":
            os.chmod(self.directory, 0o700)  # mkdir's mode passes through the umask
