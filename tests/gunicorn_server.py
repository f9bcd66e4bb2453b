"""gunicorn as `make run` and the container start it, for the tests that need the real web
server's own behaviour (its request line limit, its handling of a refused body, its signals):
a config's settings around bailinghub.wsgi on this test run's database, one worker, listening."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gunicorn_start(config: str, *, log: Path, stderr: object = subprocess.PIPE,
                   extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    """gunicorn with `config` around bailinghub.wsgi on this run's database, one worker, listening."""
    database = urlsplit(settings.DATABASE_URL)._replace(path="/" + connection.settings_dict["NAME"])
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": urlunsplit(database), "REDIS_URL": settings.REDIS_URL,
           "DJANGO_SETTINGS_MODULE": "bailinghub.settings", **(extra_env or {})}
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", f"python:{config}", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--threads", "2", "--access-logfile", str(log), "bailinghub.wsgi:application"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, port
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError("gunicorn did not listen") from None
            time.sleep(0.2)


@contextmanager
def gunicorn_served(config: str, folder: Path, *,
                    extra_env: dict[str, str] | None = None) -> Iterator[tuple[int, Path]]:
    """gunicorn_start, its own log (stderr) in `folder`/server.log: (port, that log); stopped after."""
    with open(folder / "server.log", "wb") as errors:
        process, port = gunicorn_start(config, log=folder / "access.log", stderr=errors, extra_env=extra_env)
        try:
            yield port, folder / "server.log"
        finally:
            process.terminate()
            process.wait(30)


def served_with_deadline(config: str, seconds: float) -> Any:
    """A module's fixture: gunicorn with `config`, BAILING_REQUEST_READ_TIMEOUT_SECONDS lowered to
    `seconds`, for the module's tests; it gives (port, the server's own log)."""

    @pytest.fixture(scope="module")
    def served(django_db_setup, django_db_blocker, tmp_path_factory):  # type: ignore[no-untyped-def]
        deadline = {"BAILING_REQUEST_READ_TIMEOUT_SECONDS": str(seconds)}
        with gunicorn_served(config, tmp_path_factory.mktemp("gunicorn"), extra_env=deadline) as port_and_log:
            yield port_and_log

    return served


def exchange(port: int, request: bytes, *, half_close: bool = False) -> tuple[str, dict[str, str], bytes]:
    """Send `request` as raw bytes and read the answer to the connection's end: its status line,
    headers (lower-cased names) and body (a chunked one's first chunk). Our side stays open (a
    client that stopped sending but waits) unless `half_close`: a body cut short for good."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
    if headers.get("transfer-encoding") == "chunked":
        size, _, rest = body.partition(b"\r\n")
        body = rest[: int(size, 16)]
    return status, headers, body
