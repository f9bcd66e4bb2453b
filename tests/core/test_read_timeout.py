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
from django.test import Client

from apps.knowledge.models import Document
from apps.projects.models import Membership, OperatorToken
from apps.projects.tokens import operator_token_create
from tests.gunicorn_server import exchange, served_with_deadline
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory

DEADLINE = 1.5
TIMED_OUT = ("The request body stopped arriving: nothing came for 1.5 seconds. Nothing was saved; "
             "send the request again.")


served = served_with_deadline("bailinghub.gunicorn", DEADLINE)  # (port, the server's own log)


@pytest.fixture
def server(served):
    return served[0]


def _stalled_json(path: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 5000\r\n\r\n{").encode()


@pytest.mark.django_db
def test_bodies_that_stop_arriving_are_408_and_free_the_threads_they_held(server):
    port = server
    # As many stalled requests as the worker has threads: without the deadline, the health check
    # behind them waited for ever (here: the test's 20 s socket timeout).
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        stalled = [pool.submit(exchange, port, _stalled_json("/agent-api/v1/tool-invocations")),
                   pool.submit(exchange, port, _stalled_json("/agent-auth/v1/authorizations"))]
        health = exchange(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
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
        health = exchange(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
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
    status, headers, body = exchange(port, (
        "POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b0und\r\n"
        f"Cookie: csrftoken={cookie}\r\nContent-Length: 5000\r\n\r\n--b0und\r\n"
        'Content-Disposition: form-data; name="username"\r\n\r\noper').encode())
    assert (status, headers["content-type"], headers["connection"]) == (
        "HTTP/1.1 408 Request Timeout", "text/html; charset=utf-8", "close")
    page = body.decode()
    assert "Request timed out" in page and "nothing came for 1.5 seconds" in page and "CSRF" not in page


_PART = (b'--b0und\r\nContent-Disposition: form-data; name="files"; filename="notes.txt"\r\n'
         b"Content-Type: text/plain\r\n\r\nThe first lines of a document whose rest never comes")


def _session_headers(user) -> str:
    """The console's session of `user` and a CSRF token, as a browser sends them."""
    browser = Client()
    browser.force_login(user)
    csrf = secrets.token_hex(16)
    return (f"Cookie: sessionid={browser.cookies['sessionid'].value}; csrftoken={csrf}\r\n"
            f"X-CSRFToken: {csrf}\r\n")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("half_close", "status", "error", "message"), [
    (False, "HTTP/1.1 408 Request Timeout", "request_timeout", TIMED_OUT),
    # The client closed its side instead: the body ended before its length (a 500 before).
    (True, "HTTP/1.1 400 Bad Request", "invalid_request",
     f"The request body ended after {len(_PART)} of the 50000 bytes its Content-Length announced."),
], ids=["stopped", "cut_off"])
@pytest.mark.parametrize("signed_in", ["operator_token", "console_session"])
def test_a_builder_upload_whose_body_stops_is_refused_and_saves_nothing(server, signed_in, half_close, status,
                                                                        error, message):
    # With the console's session, CSRF's check reads the form first and took a read that failed
    # for an empty form: 422 file_required, the connection kept alive.
    port = server
    owner = MembershipFactory(role=Membership.Role.OWNER)
    kb = KnowledgeBaseFactory(project=owner.project)
    if signed_in == "operator_token":
        _, token = operator_token_create(user=owner.user, name="uploads", scopes=[OperatorToken.Scope.KNOWLEDGE_INGEST])
        credentials = f"Authorization: Bearer {token}\r\n"
    else:
        credentials = _session_headers(owner.user)
    request = (f"POST /api/v1/builder/knowledge-bases/{kb.pk}/documents HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               f"{credentials}Content-Type: multipart/form-data; boundary=b0und\r\n"
               "Content-Length: 50000\r\n\r\n").encode() + _PART
    answer_status, headers, body = exchange(port, request, half_close=half_close)
    assert (answer_status, headers["content-type"], headers["connection"]) == (status, "application/json", "close")
    assert json.loads(body) == {"error": error, "message": message}
    assert not Document.objects.filter(knowledge_base=kb).exists()


@pytest.mark.django_db(transaction=True)
def test_a_whole_upload_through_the_server_is_taken(server):
    # The parser's check that the body came whole reads the server's own stream: a whole upload,
    # sent in pieces, is not taken for one cut off.
    owner = MembershipFactory(role=Membership.Role.OWNER)
    kb = KnowledgeBaseFactory(project=owner.project)
    _, token = operator_token_create(user=owner.user, name="uploads", scopes=[OperatorToken.Scope.KNOWLEDGE_INGEST])
    body = _PART + b" after all.\r\n--b0und--\r\n"
    head = (f"POST /api/v1/builder/knowledge-bases/{kb.pk}/documents HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: multipart/form-data; boundary=b0und\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server), timeout=20) as sock:
        sock.sendall(head + body[:40])
        time.sleep(0.3)
        sock.sendall(body[40:])
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 201 Created"), answer[:300]
    assert list(Document.objects.filter(knowledge_base=kb).values_list("filename", flat=True)) == ["notes.txt"]


@pytest.mark.django_db
@pytest.mark.parametrize("request_bytes", [b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Waiting: ",
                                           _stalled_json("/agent-api/v1/tool-invocations")], ids=["head", "body"])
def test_a_stalled_client_is_let_go_at_once(server, request_bytes):
    # gunicorn closes a connection with a linger: up to 2 s reading whatever its client still
    # sends, on the loop that accepts connections (each stalled client that stayed put held that
    # loop up for 2 s). Nothing is read from a client that timed out: what it sends after the
    # server closed is refused.
    with socket.create_connection(("127.0.0.1", server), timeout=20) as sock:
        sock.sendall(request_bytes)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        refused = False
        try:
            for _ in range(3):
                sock.sendall(b"late")
                time.sleep(0.3)
        except (BrokenPipeError, ConnectionResetError):
            refused = True
    assert answer[:28] in (b"", b"HTTP/1.1 408 Request Timeout")
    assert refused


@pytest.mark.django_db
def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_deadline(server):
    # A byte every quarter second never waits the deadline for one: the head as a whole must
    # come within it (a head of 60 bytes took 15 s, and got its 200).
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"p" * 12 + b"\r\n\r\n"
    data = b""
    with socket.create_connection(("127.0.0.1", server), timeout=20) as sock:
        try:
            for byte in head:
                sock.sendall(bytes([byte]))
                time.sleep(0.25)
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:  # the server closed: a send or a read may meet its reset
            pass
    assert data == b""


@pytest.mark.django_db
def test_each_request_of_a_kept_alive_connection_has_its_own_deadline(server):
    with socket.create_connection(("127.0.0.1", server), timeout=20) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while b"\r\n\r\n" not in first or not first.endswith(b"}"):
            first += sock.recv(65536)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Waiting: ")
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert first.startswith(b"HTTP/1.1 200 OK") and b"keep-alive" in first.lower()
    assert rest == b""


@pytest.mark.django_db
def test_a_head_that_times_out_is_no_error_in_the_servers_log(served):
    port, log = served
    assert _half_a_head(port) == b""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:  # the log is written by now
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 200 OK")
    text = log.read_text()
    assert "Traceback" not in text and "Socket error" not in text and "ERROR" not in text
