"""A client that stops reading its answer, under the real web server (gunicorn as `make run`
starts it, two threads, the read deadline lowered to 1.5 s, small send buffers): the write ends
at the deadline, the connection closes and the thread serves others, while a client that reads,
however slowly within the deadline, gets the whole answer. gunicorn wrote the answer with no
timeout: two clients that stopped reading answers larger than the kernel's buffers held both
threads for good, and the next request was never answered."""

from __future__ import annotations

import json
import socket
import time

import pytest

from apps.projects.models import Membership, OperatorToken
from apps.projects.tokens import operator_token_create
from tests.gunicorn_server import exchange, gunicorn_served
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.projects.factories import MembershipFactory

DEADLINE = 1.5
SECTIONS = 120


@pytest.fixture(scope="module")
def served(django_db_setup, django_db_blocker, tmp_path_factory):
    """The server's port, and the file its own log (stderr) goes to."""
    folder, deadline = tmp_path_factory.mktemp("gunicorn"), {"BAILING_REQUEST_READ_TIMEOUT_SECONDS": str(DEADLINE)}
    with gunicorn_served("tests.core.gunicorn_small_buffers", folder, extra_env=deadline) as port_and_log:
        yield port_and_log


@pytest.fixture
def large_answer(db) -> bytes:
    """A request whose answer is a few hundred KB: a document's chunks, 500 to a page."""
    owner = MembershipFactory(role=Membership.Role.OWNER)
    kb = KnowledgeBaseFactory(project=owner.project)
    sections = (f"## 第{i}节\n\n" + f"第{i}条规定的内容，逐条列明。" * 60 for i in range(SECTIONS))
    text = "# 规章\n\n" + "\n\n".join(sections)
    document = ingest_texts(kb, {"rules.md": text})["rules.md"]
    _, token = operator_token_create(user=owner.user, name="chunks", scopes=[OperatorToken.Scope.KNOWLEDGE_DEBUG])
    return (f"GET /api/v1/builder/documents/{document.pk}/chunks?limit=500 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n").encode()


def _small_window(port: int) -> socket.socket:
    """A connection whose client takes in no more than it has read, give or take a few KB."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    return sock


def _read_all(sock: socket.socket, *, pause: float = 0.0) -> bytes:
    data = b""
    while chunk := sock.recv(16384):
        data += chunk
        time.sleep(pause)
    return data


def _body(answer: bytes) -> bytes:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" not in head.lower()
    return body


@pytest.mark.django_db(transaction=True)
def test_clients_that_stop_reading_their_answers_free_the_threads_they_held(served, large_answer):
    port, log = served
    stalled = [_small_window(port) for _ in range(2)]  # as many as the server has threads
    try:
        for sock in stalled:
            sock.sendall(large_answer)
        time.sleep(DEADLINE * 2)
        status, _, body = exchange(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert (status, json.loads(body)["status"]) == ("HTTP/1.1 200 OK", "ok")
        # Each was cut: what it reads now is what the buffers held, then the connection's end.
        cut = [_read_all(sock) for sock in stalled]
    finally:
        for sock in stalled:
            sock.close()
    whole = _read_all_from(port, large_answer)
    assert len(_body(whole)) > 200_000
    assert all(answer.startswith(b"HTTP/1.1 200 OK") and len(answer) < len(whole) for answer in cut)
    # Closed without an error's traceback (a socket error, once per client that stopped reading).
    assert "Socket error processing request" not in log.read_text()


def _read_all_from(port: int, request: bytes, *, pause: float = 0.0) -> bytes:
    with _small_window(port) as sock:
        sock.sendall(request)
        return _read_all(sock, pause=pause)


@pytest.mark.django_db(transaction=True)
def test_a_client_reading_slowly_within_the_deadline_gets_the_whole_answer(served, large_answer):
    # 16 KB every 0.05 s at most: each 64 KiB slice is read in about 0.2 s, well within the
    # deadline, while the whole answer takes seconds (one write of it all would have been cut).
    answer = _read_all_from(served[0], large_answer, pause=0.05)
    data = json.loads(_body(answer))
    assert (len(data["data"]), data["meta"]["limit"]) == (500, 500)
    assert data["meta"]["total"] > 500
