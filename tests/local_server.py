"""Real HTTP servers on 127.0.0.1, each in a thread, for the tests of clients that call outside
services. `LocalServer` is the lifecycle (a context manager: started on entry, shut down and closed
on exit) around any request handler; `LocalJSONServer` answers each JSON POST in `answer`
(embeddings, rerank, chat completions), and its `url` is its base (ending in /v1)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# How often a test server's serve_forever looks whether shutdown() was asked (the standard library's
# 0.5 s made every test that stops a server wait about that long in its teardown).
SHUTDOWN_POLL_SECONDS = 0.01


class LocalServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS})

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class LocalJSONServer(LocalServer):
    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, data = owner.answer(self.path, body, dict(self.headers))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (a timeout test)
                    pass

            def log_message(self, *args):
                pass

        super().__init__(Handler)

    def answer(self, path: str, body: Any, headers: dict[str, str]) -> tuple[int, bytes]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


# How long a test waits for a peer to finish a connection: a bound for one stuck for good, not a
# timing (a fresh clone's run, on a machine at load 10, waited out 10 s once).
HANDLED_WAIT_SECONDS = 60


class TricklingServer:
    """A peer that answers too slowly as a whole but never slowly enough for one read to time out:
    on a raw socket it reads one request, sends the first `head` bytes of `answer` at once, then a
    byte every `gap` seconds up to `tail` (the end by default), and the rest at once; with `hold`, it
    sends nothing after the first `head` bytes until the test sets that event (or leaves the block),
    so what the client has read by then is the head alone, however late it was to read. `outcomes` gets
    "whole" when the answer was all sent, "cut" when the client hung up first; `handled` is set
    after each connection. A context manager; leaving it waits for the connection in hand to end,
    so `outcomes` is complete after the block (a client can read the last byte before the server
    thread has written down "whole")."""

    def __init__(self, answer: bytes, *, head: int = 0, gap: float = 0.035, tail: int | None = None,
                 hold: threading.Event | None = None) -> None:
        self.answer, self.head, self.gap, self.hold = answer, head, gap, hold
        self.tail = len(answer) if tail is None else tail
        self.outcomes: list[str] = []
        self.handled = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed on exit
                return
            with conn:
                conn.recv(65536)
                try:
                    conn.sendall(self.answer[:self.head])
                    if self.hold is not None:
                        self.hold.wait(30)
                    for byte in self.answer[self.head:self.tail]:
                        time.sleep(self.gap)
                        conn.sendall(bytes([byte]))
                    conn.sendall(self.answer[self.tail:])
                    self.outcomes.append("whole")
                except OSError:
                    self.outcomes.append("cut")
            self.handled.set()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.hold is not None:
            self.hold.set()
        # close() alone does not wake a thread blocked in accept(); shutdown() does (Linux).
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(timeout=30)
