"""The dispatcher keeps a business call to its timeout_ms as a whole: a backend that trickles its
answer a byte at a time, each byte well within the timeout, is cut at the deadline. (httpx's own
timeouts are per read: such a backend held a dispatcher for as long as it kept trickling.)"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from apps.tools.dispatch import OutboundRequest, request_send

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"


class TricklingServer:
    """A real socket server: reads one request, then sends `head` bytes of ANSWER at once and the
    rest one byte every `gap` seconds (about three seconds of trickle for the whole answer)."""

    def __init__(self, *, head: int, gap: float) -> None:
        self.head, self.gap = head, gap
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/api/notes"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                try:
                    conn.sendall(ANSWER[:self.head])
                    for byte in ANSWER[self.head:]:
                        time.sleep(self.gap)
                        conn.sendall(bytes([byte]))
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def trickling(request):
    servers: list[TricklingServer] = []

    def start(**kwargs) -> TricklingServer:
        servers.append(TricklingServer(**kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _request(url: str) -> OutboundRequest:
    return OutboundRequest(method="POST", url=url, target="/api/notes", headers={"Content-Type": "application/json"},
                           body=b"{}")


def test_a_status_line_trickled_past_the_deadline_is_uncertain(trickling):
    # 80 header bytes, 35 ms apart: each read within the 400 ms timeout, the whole over it.
    server = trickling(head=0, gap=0.035)
    outcome = request_send(_request(server.url), timeout_ms=400, max_bytes=1024)
    assert (outcome.kind, outcome.status) == ("uncertain", None)
    assert outcome.reason.startswith("timeout")


def test_a_body_trickled_past_the_deadline_is_a_cut_answer(trickling):
    server = trickling(head=ANSWER.index(b"{"), gap=0.3)
    outcome = request_send(_request(server.url), timeout_ms=400, max_bytes=1024)
    assert (outcome.kind, outcome.status, outcome.truncated, outcome.reason) == (
        "response", 200, True, "response_incomplete")


def test_the_next_call_on_the_thread_has_its_own_deadline(trickling):
    slow = trickling(head=0, gap=0.035)
    assert request_send(_request(slow.url), timeout_ms=400, max_bytes=1024).kind == "uncertain"
    # The same thread's pooled client, a backend that answers within its (longer) timeout.
    prompt = trickling(head=len(ANSWER) - 3, gap=0.05)
    outcome = request_send(_request(prompt.url), timeout_ms=5000, max_bytes=1024)
    assert (outcome.kind, outcome.status, outcome.body, outcome.truncated) == ("response", 200, b'{"ok":true}', False)
