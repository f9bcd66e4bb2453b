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
from bailinghub.wsgi import ANSWER_SLICE_BYTES, _SlicedAnswer
from tests.gunicorn_server import exchange, served_with_deadline
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts, wait_for
from tests.projects.factories import MembershipFactory

DEADLINE = 1.5
SECTIONS = 120


served = served_with_deadline("tests.core.gunicorn_small_buffers", DEADLINE)  # (port, the server's own log)


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


def _read_to_end(sock: socket.socket, *, pause: float = 0.0) -> tuple[bytes, bool]:
    """What comes, 4 KB at a time with `pause` after each, until the connection ends; and whether
    it was reset."""
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
            time.sleep(pause)
    except ConnectionResetError:
        return data, True
    return data, False


TCP_CLOSE = 7  # Linux's tcp_states.h: what a reset leaves (an orderly end leaves CLOSE_WAIT)


def _tcp_state(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


def _refuses_what_is_sent(sock: socket.socket) -> bool:
    try:
        for _ in range(3):
            sock.sendall(b"late")
            time.sleep(0.3)
    except (BrokenPipeError, ConnectionResetError):
        return True
    return False


def _body(answer: bytes) -> bytes:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" not in head.lower()
    return body


@pytest.mark.django_db(transaction=True)
def test_clients_that_stop_reading_their_answers_free_the_threads_they_held(served, large_answer):
    port, log = served
    access = log.parent / "access.log"
    answered = access.read_text().count("/chunks")  # by the module's other tests
    stalled = [_small_window(port) for _ in range(2)]  # as many as the server has threads
    try:
        for sock in stalled:
            sock.sendall(large_answer)
        status, _, body = exchange(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert (status, json.loads(body)["status"]) == ("HTTP/1.1 200 OK", "ok")
        # Both writes have timed out (each is in the access log once it ends); a client that read
        # before its own had would take in the rest of its answer.
        wait_for(lambda: access.read_text().count("/chunks") == answered + 2, timeout=30,
                 message="both writes to time out")
        # Let go at once: nothing more is read from it (gunicorn's closing linger read what its
        # client still sent for 2 s, on the loop that accepts connections).
        refused = _refuses_what_is_sent(stalled[1])
        # Reset: what the server had not sent is dropped (closed, it was kept, probing the client
        # for minutes, and its end waited behind it); the client reads what its buffers held.
        wait_for(lambda: _tcp_state(stalled[0]) == TCP_CLOSE, timeout=30, message="the connection to be reset")
        cut, reset = _read_to_end(stalled[0])
    finally:
        for sock in stalled:
            sock.close()
    whole = _read_all_from(port, large_answer)
    assert len(_body(whole)) > 200_000
    assert (cut[:15], len(cut) < len(whole), _body(whole).startswith(_body(cut)), reset) == (
        b"HTTP/1.1 200 OK", True, True, True)
    assert refused
    # Closed without an error's traceback (a socket error, once per client that stopped reading).
    assert "Socket error processing request" not in log.read_text()


def _read_all_from(port: int, request: bytes, *, pause: float = 0.0) -> bytes:
    with _small_window(port) as sock:
        sock.sendall(request)
        data, reset = _read_to_end(sock, pause=pause)
    assert not reset
    return data


@pytest.mark.django_db(transaction=True)
def test_a_client_reading_slowly_within_the_deadline_gets_the_whole_answer(served, large_answer):
    # 4 KB every 25 ms at most: each 64 KiB slice is taken in about 0.4 s, well within the
    # deadline, while the whole answer (about 400 KB) takes about 2.5 s: one write of it all would
    # have been cut.
    answer = _read_all_from(served[0], large_answer, pause=0.025)
    data = json.loads(_body(answer))
    assert (len(data["data"]), data["meta"]["limit"]) == (500, 500)
    assert data["meta"]["total"] > 500


def test_an_answer_is_written_in_slices_of_at_most_64_kib_in_order():
    parts = [b"", b"x" * (ANSWER_SLICE_BYTES * 2 + 5), b"tail"]
    sliced = list(_SlicedAnswer(parts))
    assert [len(part) for part in sliced] == [0, ANSWER_SLICE_BYTES, ANSWER_SLICE_BYTES, 5, 4]
    assert b"".join(sliced) == b"".join(parts)


class _Answer:
    def __init__(self, parts):
        self.parts, self.closed = parts, False

    def __iter__(self):
        yield from self.parts
        raise TimeoutError("a peer did not answer")

    def close(self):
        self.closed = True


def test_the_applications_own_timeout_is_not_taken_for_a_client_that_stopped_reading():
    # The worker closes a connection at debug level on a TimeoutError while the answer is written.
    answer = _Answer([b"first"])
    sliced = _SlicedAnswer(answer)
    parts = iter(sliced)
    assert next(parts) == b"first"
    with pytest.raises(RuntimeError, match="raised TimeoutError"):
        next(parts)
    sliced.close()
    assert answer.closed
