"""The dispatcher keeps a business call to its timeout_ms as a whole: a backend that trickles its
answer a byte at a time, each byte well within the timeout, is cut at the deadline. (httpx's own
timeouts are per read: such a backend held a dispatcher for as long as it kept trickling.)"""

from __future__ import annotations

from apps.tools.dispatch import OutboundRequest, request_send
from tests.local_server import HANDLED_WAIT_SECONDS, TricklingServer

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"
# The calls' whole timeout: it covers the connection and the request too, and on a loaded machine (a
# CI run beside other work) a thread's first call — its pooled client made — spent 400 ms before a
# byte was sent ("not_sent"). The answers trickle for 2.9 s (82 bytes 35 ms apart) or 3.3 s.
TIMEOUT_MS = 1500


def _request(server: TricklingServer) -> OutboundRequest:
    return OutboundRequest(method="POST", url=f"http://127.0.0.1:{server.port}/api/notes", target="/api/notes",
                           headers={"Content-Type": "application/json"}, body=b"{}")


def test_a_status_line_trickled_past_the_deadline_is_uncertain():
    # 80 bytes 35 ms apart: each read within the timeout, the whole answer far over it.
    with TricklingServer(ANSWER) as server:
        outcome = request_send(_request(server), timeout_ms=TIMEOUT_MS, max_bytes=1024)
        assert server.handled.wait(HANDLED_WAIT_SECONDS)
    assert (outcome.kind, outcome.status) == ("uncertain", None)
    assert outcome.reason.startswith("timeout")
    assert server.outcomes == ["cut"]


def test_a_body_trickled_past_the_deadline_is_a_cut_answer():
    with TricklingServer(ANSWER, head=ANSWER.index(b"{"), gap=0.3) as server:
        outcome = request_send(_request(server), timeout_ms=TIMEOUT_MS, max_bytes=1024)
    assert (outcome.kind, outcome.status, outcome.truncated, outcome.reason) == (
        "response", 200, True, "response_incomplete")


def test_the_next_call_on_the_thread_has_its_own_deadline():
    with TricklingServer(ANSWER) as slow:
        assert request_send(_request(slow), timeout_ms=TIMEOUT_MS, max_bytes=1024).kind == "uncertain"
    # The same thread's pooled client; a backend that answers within its (longer) timeout.
    with TricklingServer(ANSWER, head=len(ANSWER) - 3, gap=0.05) as prompt:
        outcome = request_send(_request(prompt), timeout_ms=5000, max_bytes=1024)
    assert (outcome.kind, outcome.status, outcome.body, outcome.truncated) == ("response", 200, b'{"ok":true}', False)
    assert prompt.outcomes == ["whole"]


def test_connections_are_pooled_per_host_name_not_per_address():
    """Requests name the address they checked: one pool for every origin reused the connection made
    for one host name (its TLS verified for that name) for another host at the same address."""
    from http.server import BaseHTTPRequestHandler

    from tests.local_server import LocalServer

    seen: list[tuple[str, int]] = []

    class KeepAlive(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.headers["Host"].split(":")[0], self.client_address[1]))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    with LocalServer(KeepAlive) as server:
        for host in ("localhost", "127.0.0.1", "localhost", "127.0.0.1"):
            request = OutboundRequest(method="POST", url=f"http://{host}:{server.port}/api/notes", target="/api/notes",
                                      headers={"Content-Type": "application/json"}, body=b"{}")
            assert request_send(request, timeout_ms=5000, max_bytes=1024).status == 200
    ports = {host: {port for name, port in seen if name == host} for host in ("localhost", "127.0.0.1")}
    assert [name for name, _ in seen] == ["localhost", "127.0.0.1", "localhost", "127.0.0.1"]
    assert (len(ports["localhost"]), len(ports["127.0.0.1"])) == (1, 1)  # each name kept its connection
    assert ports["localhost"] != ports["127.0.0.1"]
