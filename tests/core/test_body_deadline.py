"""A request that stops arriving, under the real web server (gunicorn as `make run` starts it,
two threads, the read deadline lowered to 1.5 s): the read ends at the deadline and the thread
serves others; a body's client gets 408, a head's connection closes. gunicorn reads both with no
timeout: two clients announcing a body and never sending it, or sending half a request head, held
both threads for good, and the next request was never answered."""

from __future__ import annotations

import concurrent.futures
import json
import secrets
import socket
import time

import pytest

from apps.knowledge.models import Document
from apps.projects.models import Membership, OperatorToken
from apps.projects.tokens import operator_token_create
from tests.gunicorn_server import gunicorn_start
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory

DEADLINE = 1.5
TIMED_OUT = ("The request body stopped arriving: nothing came for 1.5 seconds. Nothing was saved; "
             "send the request again.")


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    log = tmp_path_factory.mktemp("gunicorn") / "access.log"
    process, port = gunicorn_start("bailinghub.gunicorn", log=log,
                                   extra_env={"BAILING_REQUEST_READ_TIMEOUT_SECONDS": str(DEADLINE)})
    try:
        yield port
    finally:
        process.terminate()
        process.wait(30)


def _answer(port: int, request: bytes, *, half_close: bool = False) -> tuple[str, dict[str, str], bytes]:
    """Send `request` and read the answer to the connection's end. Our side stays open (a client
    that stopped sending but waits) unless `half_close`."""
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


def _stalled_json(path: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 5000\r\n\r\n{").encode()


@pytest.mark.django_db
def test_bodies_that_stop_arriving_are_408_and_free_the_threads_they_held(server):
    port = server
    # As many stalled requests as the worker has threads: without the deadline, the health check
    # behind them waited for ever (here: the test's 20 s socket timeout).
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        stalled = [pool.submit(_answer, port, _stalled_json("/agent-api/v1/tool-invocations")),
                   pool.submit(_answer, port, _stalled_json("/agent-auth/v1/authorizations"))]
        health = _answer(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        (api_status, api_headers, api_body), (auth_status, auth_headers, auth_body) = [s.result() for s in stalled]
    assert health[0] == "HTTP/1.1 200 OK"
    assert (api_status, api_headers["content-type"], api_headers["cache-control"], api_headers["connection"]) == (
        "HTTP/1.1 408 Request Timeout", "application/json", "no-store", "close")
    assert json.loads(api_body) == {"error": "request_timeout", "message": TIMED_OUT}
    # Agent Auth's error list is closed: invalid_request, with the same words.
    assert (auth_status, auth_headers["connection"]) == ("HTTP/1.1 400 Bad Request", "close")
    assert json.loads(auth_body) == {"error": "invalid_request", "message": TIMED_OUT}


def _half_a_head(port: int) -> bytes:
    """Half a request's head, then wait: what the server sends before it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Waiting: ")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


@pytest.mark.django_db
def test_request_heads_that_stop_arriving_close_and_free_the_threads_they_held(server):
    port = server
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        stalled = [pool.submit(_half_a_head, port) for _ in range(2)]
        time.sleep(0.3)  # both hold a thread before the health check asks for one
        health = _answer(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        closed = [s.result() for s in stalled]
    assert health[0] == "HTTP/1.1 200 OK"
    # Closed without a word: there is no request to answer yet.
    assert closed == [b"", b""]


@pytest.mark.django_db
def test_a_console_form_whose_body_stops_arriving_is_a_408_page_not_a_csrf_failure(server):
    # A multipart form is not read by the body limit (it streams to disk): CSRF reads it for its
    # token, meets the deadline and refuses; that refusal is the 408, not "CSRF token missing".
    port = server
    cookie = secrets.token_hex(16)
    status, headers, body = _answer(port, (
        "POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b0und\r\n"
        f"Cookie: csrftoken={cookie}\r\nContent-Length: 5000\r\n\r\n--b0und\r\n"
        'Content-Disposition: form-data; name="username"\r\n\r\noper').encode())
    assert (status, headers["content-type"], headers["connection"]) == (
        "HTTP/1.1 408 Request Timeout", "text/html; charset=utf-8", "close")
    page = body.decode()
    assert "Request timed out" in page and "nothing came for 1.5 seconds" in page and "CSRF" not in page


def _upload(token: str, kb_id: object, *, announced: int, sent: bytes) -> bytes:
    return (f"POST /api/v1/builder/knowledge-bases/{kb_id}/documents HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: multipart/form-data; boundary=b0und\r\n"
            f"Content-Length: {announced}\r\n\r\n").encode() + sent


_PART = (b'--b0und\r\nContent-Disposition: form-data; name="files"; filename="notes.txt"\r\n'
         b"Content-Type: text/plain\r\n\r\nThe first lines of a document whose rest never comes")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("half_close", "status", "error", "message"), [
    (False, "HTTP/1.1 408 Request Timeout", "request_timeout", TIMED_OUT),
    # The client closed its side instead: the body ended before its length (a 500 before).
    (True, "HTTP/1.1 400 Bad Request", "invalid_request",
     f"The request body ended after {len(_PART)} of the 50000 bytes its Content-Length announced."),
], ids=["stopped", "cut_off"])
def test_a_builder_upload_whose_body_stops_is_refused_and_saves_nothing(server, half_close, status, error, message):
    port = server
    owner = MembershipFactory(role=Membership.Role.OWNER)
    kb = KnowledgeBaseFactory(project=owner.project)
    _, token = operator_token_create(user=owner.user, name="uploads", scopes=[OperatorToken.Scope.KNOWLEDGE_INGEST])
    answer_status, headers, body = _answer(port, _upload(token, kb.pk, announced=50_000, sent=_PART),
                                           half_close=half_close)
    assert (answer_status, headers["content-type"], headers["connection"]) == (status, "application/json", "close")
    assert json.loads(body) == {"error": error, "message": message}
    assert not Document.objects.filter(knowledge_base=kb).exists()
