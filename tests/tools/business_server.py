"""A real business backend for invocation tests: a ThreadingHTTPServer in a thread that verifies
every request's signature with apps.demo_business.verify (401 when it fails), records every
request it receives, and answers as the test tells it to per path."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from apps.demo_business.verify import InvalidSignature, verify_request
from tests.local_server import SHUTDOWN_POLL_SECONDS

SECRET = "business-signing-secret-for-tests"


@dataclass
class Received:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    signature_valid: bool

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Behaviour:
    status: int = 200
    body: bytes = b'{"ok":true}'
    delay: float = 0.0
    garbage: bool = False
    huge_bytes: int = 0
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


class BusinessServer:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.behaviours: dict[str, Behaviour] = {}
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {key: value for key, value in self.headers.items()}
                try:
                    verify_request(secret=SECRET, method=self.command, path_with_query=self.path, body=body,
                                   headers=headers, now=time.time())
                    valid = True
                except InvalidSignature:
                    valid = False
                with server.lock:
                    server.received.append(Received(self.command, self.path, headers, body, valid))
                if not valid:
                    self._send(401, b'{"error":"invalid_signature"}', "application/json")
                    return
                behaviour = server.behaviour_for(self.path)
                if behaviour.delay:  # counted while the answer is held back: calls in flight at once
                    with server.lock:
                        server.in_flight += 1
                        server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.release.wait(behaviour.delay)
                    with server.lock:
                        server.in_flight -= 1
                if behaviour.garbage:
                    self.wfile.write(b"\x00\x01 this is not HTTP at all\r\n\r\n")
                    self.close_connection = True
                    return
                if behaviour.huge_bytes:
                    self.send_response(behaviour.status)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(behaviour.huge_bytes))
                    self.end_headers()
                    chunk = b"x" * 65536
                    sent = 0
                    try:
                        while sent < behaviour.huge_bytes:
                            self.wfile.write(chunk)
                            sent += len(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    self.close_connection = True
                    return
                self._send(behaviour.status, behaviour.body, behaviour.content_type, behaviour.headers)

            def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    for key, value in (extra or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                       kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS})

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/api"

    def behaviour_for(self, target: str) -> Behaviour:
        path = target.split("?", 1)[0]
        for prefix, behaviour in sorted(self.behaviours.items(), key=lambda item: -len(item[0])):
            if path.startswith(prefix):
                return behaviour
        return Behaviour()

    def respond(self, prefix: str, **kwargs: Any) -> None:
        self.behaviours[prefix] = Behaviour(**kwargs)

    def requests_to(self, prefix: str) -> list[Received]:
        with self.lock:
            return [item for item in self.received if item.target.startswith(prefix)]

    def start(self) -> BusinessServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port_refusing() -> str:
    """A base URL where nothing listens (the connection is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/api"
