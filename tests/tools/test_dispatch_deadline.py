"""The dispatcher keeps a business call to its timeout_ms as a whole: a backend that trickles its
answer a byte at a time, each byte well within the timeout, is cut at the deadline. (httpx's own
timeouts are per read: such a backend held a dispatcher for as long as it kept trickling.)"""

from __future__ import annotations

from apps.tools.dispatch import OutboundRequest, request_send
from tests.local_server import TricklingServer

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"


def _request(server: TricklingServer) -> OutboundRequest:
    return OutboundRequest(method="POST", url=f"http://127.0.0.1:{server.port}/api/notes", target="/api/notes",
                           headers={"Content-Type": "application/json"}, body=b"{}")


def test_a_status_line_trickled_past_the_deadline_is_uncertain():
    # 80 bytes 35 ms apart: each read within the 400 ms timeout, the whole answer far over it.
    with TricklingServer(ANSWER) as server:
        outcome = request_send(_request(server), timeout_ms=400, max_bytes=1024)
        assert server.handled.wait(10)
    assert (outcome.kind, outcome.status) == ("uncertain", None)
    assert outcome.reason.startswith("timeout")
    assert server.outcomes == ["cut"]


def test_a_body_trickled_past_the_deadline_is_a_cut_answer():
    with TricklingServer(ANSWER, head=ANSWER.index(b"{"), gap=0.3) as server:
        outcome = request_send(_request(server), timeout_ms=400, max_bytes=1024)
    assert (outcome.kind, outcome.status, outcome.truncated, outcome.reason) == (
        "response", 200, True, "response_incomplete")


def test_the_next_call_on_the_thread_has_its_own_deadline():
    with TricklingServer(ANSWER) as slow:
        assert request_send(_request(slow), timeout_ms=400, max_bytes=1024).kind == "uncertain"
    # The same thread's pooled client; a backend that answers within its (longer) timeout.
    with TricklingServer(ANSWER, head=len(ANSWER) - 3, gap=0.05) as prompt:
        outcome = request_send(_request(prompt), timeout_ms=5000, max_bytes=1024)
    assert (outcome.kind, outcome.status, outcome.body, outcome.truncated) == ("response", 200, b'{"ok":true}', False)
    assert prompt.outcomes == ["whole"]
