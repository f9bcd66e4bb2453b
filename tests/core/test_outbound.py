"""apps.core.outbound: a client whose every socket operation keeps to the thread's deadline."""

from __future__ import annotations

import time

import httpx
import pytest

from apps.core.outbound import deadline, deadline_client
from tests.local_server import TricklingServer

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"


def test_a_trickled_answer_is_cut_at_the_deadline_as_a_read_timeout():
    with TricklingServer(ANSWER) as server, deadline_client(timeout=5) as client:
        with deadline(time.monotonic() + 0.3), pytest.raises(httpx.ReadTimeout):
            client.get(f"http://127.0.0.1:{server.port}/")
        assert server.handled.wait(10)
    assert server.outcomes == ["cut"]


def test_without_a_deadline_the_client_reads_the_whole_answer():
    with TricklingServer(ANSWER, head=len(ANSWER) - 3, gap=0.02) as server, deadline_client(timeout=5) as client:
        response = client.get(f"http://127.0.0.1:{server.port}/")
    assert (response.status_code, response.text, server.outcomes) == (200, "hello", ["whole"])


def test_an_inner_deadline_cannot_extend_an_outer_one():
    with TricklingServer(ANSWER) as server, deadline_client(timeout=5) as client:
        with deadline(time.monotonic() + 0.3), deadline(time.monotonic() + 60), pytest.raises(httpx.ReadTimeout):
            client.get(f"http://127.0.0.1:{server.port}/")
        assert server.handled.wait(10)
    assert server.outcomes == ["cut"]

