"""The hub's wire rules held on the client side, against a real HTTP server that breaks them."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from bailinghub_mcp import wire

from tests.local_server import SHUTDOWN_POLL_SECONDS


class MisbehavingHub:
    """Answers every request with the scripted (status, headers, body, delay); counts the paths asked."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.answer: tuple[int, dict[str, str], bytes, float] = (200, {}, b"{}", 0.0)
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self) -> None:
                hub.paths.append(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                status, headers, body, delay = hub.answer
                time.sleep(delay)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if "Transfer-Encoding" in headers:
                    self.end_headers()
                    for start in range(0, len(body), 65536):
                        piece = body[start:start + 65536]
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _reply

            def log_message(self, *args) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address) -> None:
                pass  # the client hanging up on an oversized or slow answer is what these tests cause

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
                         daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_hub():
    hub = MisbehavingHub()
    yield hub
    hub.close()


def send(hub: MisbehavingHub, **kwargs) -> wire.Answer:
    with wire.new_client(hub.url) as client:
        return wire.send(client, "POST", "/agent-api/v1/tool-invocations", json_body={"x": 1}, **kwargs)


def test_a_redirect_is_refused_and_not_followed(fake_hub):
    fake_hub.answer = (307, {"Location": f"{fake_hub.url}/elsewhere", "Content-Type": "application/json"}, b"{}", 0)
    with pytest.raises(wire.WireError) as refused:
        send(fake_hub)
    assert (refused.value.reason, refused.value.sent) == ("redirect_refused", True)
    assert fake_hub.paths == ["/agent-api/v1/tool-invocations"]


def test_an_answer_declared_over_one_mib_is_refused(fake_hub):
    fake_hub.answer = (200, {}, b'{"a":"' + b"x" * wire.MAX_ANSWER_BYTES + b'"}', 0)
    with pytest.raises(wire.WireError) as refused:
        send(fake_hub)
    assert refused.value.reason == "answer_too_large"


def test_a_streamed_answer_over_one_mib_is_cut_off_and_refused(fake_hub):
    fake_hub.answer = (200, {"Transfer-Encoding": "chunked"}, b'{"a":"' + b"x" * wire.MAX_ANSWER_BYTES + b'"}', 0)
    with pytest.raises(wire.WireError) as refused:
        send(fake_hub)
    assert refused.value.reason == "answer_too_large"


def test_an_answer_of_exactly_one_mib_is_read(fake_hub):
    body = b'{"schema_version":"s","a":"' + b"x" * (wire.MAX_ANSWER_BYTES - 29) + b'"}'
    assert len(body) == wire.MAX_ANSWER_BYTES
    fake_hub.answer = (200, {}, body, 0)
    assert send(fake_hub, schema="s").body["schema_version"] == "s"


def test_a_wrong_schema_marker_is_refused(fake_hub):
    fake_hub.answer = (200, {}, json.dumps({"schema_version": "bailing.agent-tool-invocation.v2"}).encode(), 0)
    with pytest.raises(wire.WireError) as refused:
        send(fake_hub, schema="bailing.agent-tool-invocation.v1")
    assert refused.value.reason == "schema_mismatch"


def test_a_success_status_other_than_the_contracts_is_refused(fake_hub):
    fake_hub.answer = (202, {}, b"{}", 0)
    with pytest.raises(wire.WireError) as refused:
        send(fake_hub)
    assert refused.value.reason == "unexpected_status"


def test_an_error_is_read_by_its_code(fake_hub):
    fake_hub.answer = (409, {}, json.dumps({"error": "invocation_conflict", "message": "Same id."}).encode(), 0)
    with pytest.raises(wire.HubError) as refused:
        send(fake_hub)
    assert (refused.value.status, refused.value.code, refused.value.message) == (409, "invocation_conflict",
                                                                                 "Same id.")


def test_a_body_that_is_not_json_is_refused(fake_hub):
    fake_hub.answer = (200, {"Content-Type": "text/html"}, b"<html>proxy login</html>", 0)
    with pytest.raises(wire.WireError) as refused:
        send(fake_hub)
    assert refused.value.reason == "not_json"


def test_a_hub_slower_than_the_timeout_is_given_up_and_the_request_counted_as_sent(fake_hub, monkeypatch):
    monkeypatch.setattr(wire, "TIMEOUT_SECONDS", 0.3)
    fake_hub.answer = (200, {}, b"{}", 1.5)  # it answers, later: "timeout" says the bridge did not wait for it
    with pytest.raises(wire.WireError) as refused:
        send(fake_hub)
    assert (refused.value.reason, refused.value.sent) == ("timeout", True)


def test_a_body_its_content_encoding_cannot_decode_is_refused_and_counted_as_sent(fake_hub):
    """httpx's DecodingError went past every rule: a governed call whose answer came back so was
    not recorded as unknown, and the model was not told to inspect it rather than call again."""
    fake_hub.answer = (200, {"Content-Encoding": "gzip"}, b'{"schema_version": "not gzip"}', 0)
    with pytest.raises(wire.WireError) as refused:
        send(fake_hub)
    assert (refused.value.reason, refused.value.sent) == ("undecodable", True)


def test_a_body_nested_past_the_parsers_stack_is_refused_as_not_json(fake_hub):
    """json's RecursionError went past every rule, as a DecodingError did."""
    fake_hub.answer = (200, {}, b"[" * 200_000 + b"]" * 200_000, 0)
    with pytest.raises(wire.WireError) as refused:
        send(fake_hub)
    assert (refused.value.reason, refused.value.sent) == ("not_json", True)
