"""A database outage for one worker: a Unix-socket forwarder in front of the test PostgreSQL.

Stopping the embedded PostgreSQL itself would stop it for every test running beside this one, so a
worker started with `DatabaseOutage.url` reaches the test database through this forwarder instead.
`down()` does to that worker what a stopped postmaster does: its connections end and its socket file
is gone (a new connection fails at once); `up()` is the server back. The test process keeps its own
direct connection.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path
from urllib.parse import quote

from django.conf import settings


class DatabaseOutage:
    def __init__(self, directory: Path):
        db = settings.DATABASES["default"]
        if not str(db.get("HOST") or "").startswith("/"):
            raise RuntimeError("DatabaseOutage forwards a Unix-socket PostgreSQL (the embedded one)")
        port = db.get("PORT") or 5432
        self.target = f"{db['HOST']}/.s.PGSQL.{port}"
        self.path = str(directory / f".s.PGSQL.{port}")
        password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
        self.url = (f"postgres://{quote(db.get('USER') or '')}{password}@/{db['NAME']}"
                    f"?host={quote(str(directory))}&port={port}")
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def up(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(32)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in its thread
            listener.close()
            os.unlink(self.path)
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            _end(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.target)
            except OSError:
                _end(client)
                continue
            with self._lock:
                self._open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    _end(source)
    _end(sink)


def _end(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
