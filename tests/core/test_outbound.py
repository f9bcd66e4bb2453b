"""apps.core.outbound: a client whose every socket operation keeps to the thread's deadline."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from apps.core.outbound import deadline, deadline_client
from tests.local_server import HANDLED_WAIT_SECONDS, TricklingServer

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"


def test_a_trickled_answer_is_cut_at_the_deadline_as_a_read_timeout():
    with TricklingServer(ANSWER) as server, deadline_client(timeout=5) as client:
        with deadline(time.monotonic() + 0.3), pytest.raises(httpx.ReadTimeout):
            client.get(f"http://127.0.0.1:{server.port}/")
        assert server.handled.wait(HANDLED_WAIT_SECONDS)
    assert server.outcomes == ["cut"]


def test_without_a_deadline_the_client_reads_the_whole_answer():
    with TricklingServer(ANSWER, head=len(ANSWER) - 3, gap=0.02) as server, deadline_client(timeout=5) as client:
        response = client.get(f"http://127.0.0.1:{server.port}/")
    assert (response.status_code, response.text, server.outcomes) == (200, "hello", ["whole"])


def test_an_inner_deadline_cannot_extend_an_outer_one():
    with TricklingServer(ANSWER) as server, deadline_client(timeout=5) as client:
        with deadline(time.monotonic() + 0.3), deadline(time.monotonic() + 60), pytest.raises(httpx.ReadTimeout):
            client.get(f"http://127.0.0.1:{server.port}/")
        assert server.handled.wait(HANDLED_WAIT_SECONDS)
    assert server.outcomes == ["cut"]



def test_an_answer_already_received_is_not_read_past_the_deadline():
    # The headers come at once, the body once the client has read them: it is all in the socket's
    # buffer, ready, by the time the client reads it past the deadline. A read given a millisecond
    # returned it at once, so a peer sending faster than a read a millisecond was never cut. (The
    # body is held until the headers are read: sent 50 ms after them, it reached a client scheduled
    # late together with them, was read with them, and no read was left to be cut.)
    head = ANSWER.index(b"hello")
    headers_read = threading.Event()
    with TricklingServer(ANSWER, head=head, gap=0.05, tail=head + 1, hold=headers_read) as server, \
            deadline_client(timeout=5) as client:
        at = time.monotonic() + 1
        with deadline(at), client.stream("GET", f"http://127.0.0.1:{server.port}/") as response:
            headers_read.set()
            assert server.handled.wait(HANDLED_WAIT_SECONDS)
            time.sleep(max(at - time.monotonic(), 0) + 0.05)
            with pytest.raises(httpx.ReadTimeout):
                response.read()
