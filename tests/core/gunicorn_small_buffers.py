"""bailinghub.gunicorn with small send buffers, for tests of a client that stops reading
(tests/core/test_answer_timeout.py): an answer
of a few hundred KB fills them (with the kernel's own, grown to megabytes on loopback, it takes
several MB). Accepted connections inherit the listening socket's SO_SNDBUF (Linux)."""

from __future__ import annotations

import socket
from typing import Any

from bailinghub.gunicorn import *  # noqa: F403  (the settings `make run` serves with)

SEND_BUFFER_BYTES = 8192


def when_ready(server: Any) -> None:
    for listener in server.LISTENERS:
        listener.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
