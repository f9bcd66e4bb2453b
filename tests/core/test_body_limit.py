import json
import socket
from urllib.parse import urlparse

import pytest

pytestmark = [pytest.mark.urls("tests.core.urls")]


def _json_body(size: int) -> bytes:
    prefix = b'{"name":"ab","pad":"'
    suffix = b'"}'
    return prefix + b"x" * (size - len(prefix) - len(suffix)) + suffix


def test_body_at_the_view_limit_is_accepted(client):
    response = client.post("/agent-api/test/small-echo", _json_body(1024), content_type="application/json")
    assert response.status_code == 200
    assert response.json() == {"bytes": 1024, "name": "ab"}


def test_body_over_the_view_limit_is_413_with_sizes(client):
    response = client.post("/agent-api/test/small-echo", _json_body(1025), content_type="application/json")
    assert response.status_code == 413
    body = response.json()
    assert body["error"] == "request_too_large"
    assert body["max_bytes"] == 1024
    assert body["observed_bytes"] == 1025


@pytest.mark.parametrize("method", ["GET", "OPTIONS"])
def test_a_body_on_a_get_or_options_is_held_to_the_same_limit(client, method):
    response = client.generic(method, "/agent-api/test/small-echo", _json_body(1025),
                              content_type="application/json")
    assert (response.status_code, response.json()["error"]) == (413, "request_too_large")
    assert response.json()["observed_bytes"] == 1025


def test_agent_auth_answers_a_body_over_the_limit_with_its_own_code(client):
    # Agent Auth's error list is closed: request_too_large is not in it.
    response = client.post("/agent-auth/test/small-echo", _json_body(1025), content_type="application/json")
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert (response.json()["max_bytes"], response.json()["observed_bytes"]) == (1024, 1025)
    assert response["Cache-Control"] == "no-store"


def test_global_limit_applies_without_a_view_override(client, settings):
    settings.BAILING_JSON_BODY_MAX_BYTES = 2048
    ok = client.post("/agent-api/test/echo", _json_body(2048), content_type="application/json")
    too_big = client.post("/agent-api/test/echo", _json_body(2049), content_type="application/json")
    assert ok.status_code == 200
    assert too_big.status_code == 413
    assert too_big.json()["max_bytes"] == 2048


def test_the_default_global_limit_is_one_mebibyte(client):
    ok = client.post("/agent-api/test/echo", _json_body(1_048_576), content_type="application/json")
    too_big = client.post("/agent-api/test/echo", _json_body(1_048_577), content_type="application/json")
    assert ok.status_code == 200
    assert (too_big.status_code, too_big.json()["max_bytes"]) == (413, 1_048_576)


def test_streamed_oversized_body_is_refused_before_it_is_all_sent(live_server):
    """The server answers 413 after reading just past the limit, not after the whole body."""
    declared = 10 * 1024 * 1024
    address = urlparse(live_server.url)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    head = (
        "POST /agent-api/test/small-echo HTTP/1.1\r\n"
        f"Host: {address.hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\nConnection: close\r\n\r\n"
    ).encode()
    sock.sendall(head)
    sent = 0
    chunk = b"x" * 4096
    for _ in range(16):  # 64 KiB, far less than the declared 10 MiB
        sock.sendall(chunk)
        sent += len(chunk)
    response = b""
    while b"\r\n\r\n" not in response or not response.rstrip().endswith(b"}"):
        data = sock.recv(65536)
        if not data:
            break
        response += data
    sock.close()
    status_line, _, rest = response.partition(b"\r\n")
    assert b" 413 " in status_line
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert body["error"] == "request_too_large"
    assert body["max_bytes"] == 1024
    assert 1024 < body["observed_bytes"] <= sent
    assert sent < declared


def test_a_chunked_body_the_server_does_not_end_is_411_and_reaches_no_view(client):
    # Django's own server (and the test client) do not end a chunked stream: refuse, do not read nothing.
    response = client.generic("POST", "/agent-api/test/echo", b'{"name": "x"}',
                              content_type="application/json", HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="")
    assert (response.status_code, response.json()["error"]) == (411, "length_required")
    assert response.json()["message"] == "Send the body with a Content-Length: a chunked body is not read here."


def test_agent_auth_answers_a_chunked_body_it_cannot_read_with_its_own_code(client):
    response = client.generic("POST", "/agent-auth/test/echo", b"{}", content_type="application/json",
                              HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="")
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert response["Cache-Control"] == "no-store"


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "identity, gzip"])
def test_a_body_in_a_content_coding_is_415_and_reaches_no_view(client, coding):
    # Nothing here decodes one: a plain body labelled gzip was read as if unlabelled, a gzip one
    # was "not valid UTF-8 (byte 1)".
    response = client.generic("POST", "/agent-api/test/echo", b'{"name": "x"}', content_type="application/json",
                              HTTP_CONTENT_ENCODING=coding)
    assert (response.status_code, response.json()["error"]) == (415, "unsupported_media_type")
    assert response.json()["message"] == "Send the body without a Content-Encoding: none is decoded here."


def test_agent_auth_answers_a_content_coding_with_its_own_code(client):
    response = client.generic("POST", "/agent-auth/test/echo", b'{"name": "x"}', content_type="application/json",
                              HTTP_CONTENT_ENCODING="gzip")
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert response.json()["message"] == "Send the body without a Content-Encoding: none is decoded here."
    assert response["Cache-Control"] == "no-store"


@pytest.mark.parametrize("coding", ["identity", "Identity", ""])
def test_the_identity_content_coding_is_read(client, coding):
    response = client.generic("POST", "/agent-api/test/echo", b'{"name": "x"}', content_type="application/json",
                              HTTP_CONTENT_ENCODING=coding)
    assert (response.status_code, response.json()["name"]) == (200, "x")
