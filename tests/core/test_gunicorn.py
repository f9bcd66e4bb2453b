"""The web server as `make run` and the container start it: gunicorn with bailinghub.gunicorn's
settings around bailinghub.wsgi, on this test run's database.

- A body refused past its limit closes the connection, announced: the client's next request
  goes on a new connection instead of being lost on one gunicorn drops after promising keep-alive.
- The access log escapes control characters a client put in its request: one request, one line.
- A stop signal that reaches a worker before its own handlers are installed is not lost, and a
  second one during the first's handler (Ctrl-C: SIGINT, then the master's SIGQUIT) does not hang it.
- A request gunicorn refuses itself (a request line or headers over its limits, a malformed line)
  is answered like every API error: JSON, never stored, with no credential repeated.
- A chunked body that cannot be read (a malformed chunk, a stream cut off) is the client's 400,
  not a 500, and closes the connection; so is a body that ends before its Content-Length.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import uuid

import pytest

from apps.runtime.api.invocations import REQUEST_BODY_MAX_BYTES
from tests.gunicorn_server import exchange, gunicorn_start


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    log = tmp_path_factory.mktemp("gunicorn") / "access.log"
    process, port = gunicorn_start("bailinghub.gunicorn", log=log)
    try:
        yield port, log
    finally:
        process.terminate()
        process.wait(30)


def test_a_refused_body_closes_its_connection_and_the_next_request_is_answered(server):
    port, _ = server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    # 256 KiB past the limit: more than gunicorn reads away on its own before reusing a connection.
    padding = "x" * (REQUEST_BODY_MAX_BYTES + 256 * 1024)
    conn.request("POST", "/agent-api/v1/tool-invocations", body=json.dumps({"arguments": {"a": padding}}),
                 headers={"Content-Type": "application/json"})
    refused = conn.getresponse()
    body = json.loads(refused.read())
    assert (refused.status, refused.getheader("Connection"), body["error"], body["limit_scope"]) == (
        413, "close", "arguments_too_large", "request_body")

    conn.request("GET", "/healthz")  # http.client opens a new connection after "close"
    after = conn.getresponse()
    after.read()
    conn.close()
    assert after.status == 200


def _settled_lines(log, quiet: float = 0.5) -> int:
    """The access log's line count once no line has come for `quiet` seconds: the module's server
    logs an earlier test's requests after their responses, and one written after this test counted
    its lines was read as this test's own (a flaky [POST, GET, GET])."""
    count, since = -1, time.monotonic()
    deadline = since + 10
    while time.monotonic() < deadline:
        now = log.read_bytes().count(b"\n") if log.exists() else 0
        if now != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.05)
    return count


def _lines_from(log, mark: bytes) -> list[bytes]:
    """The access log's lines from the first one holding `mark` on."""
    lines = log.read_bytes().split(b"\n")[:-1]
    first = next((n for n, line in enumerate(lines) if mark in line), len(lines))
    return lines[first:]


def test_a_request_cannot_forge_or_colour_access_log_lines(server):
    port, log = server
    _settled_lines(log)
    # This test's lines are found by a mark in the first one's path, not by counting the lines
    # before it: a line of an earlier test written late (its worker stalled after answering) was
    # counted as this test's own, a flaky [GET, GET, GET].
    mark = uuid.uuid4().hex
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    forging = f"{mark}x%0d%0a127.0.0.1%20%22POST%20/forged%22%20200%1b%5b31m%00"
    conn.request("GET", f"/agent-api/v1/workspaces/{forging}/system-info")
    conn.getresponse().read()
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    conn.close()

    deadline = time.monotonic() + 10
    while len(_lines_from(log, mark.encode())) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = _lines_from(log, mark.encode())
    assert [line.split(b'"')[1].split(b" ")[0] for line in lines] == [b"GET", b"GET"]
    forged = lines[0]
    assert b"\\x0d\\x0a127.0.0.1 " in forged and b"\\x1b[31m\\x00/system-info" in forged
    assert not any(byte in forged for byte in (b"\r", b"\x1b", b"\x00"))
    assert forged.count(b'"') == 2 and b"\\x22POST /forged\\x22" in forged  # the quoted field holds


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET /agent-api/v1/workspaces?pad=" + b"x" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "414 URI Too Long"),
    (b"GET /agent-api/v1/workspaces HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"x" * 9000 + b"\r\n\r\n",
     "431 Request Header Fields Too Large"),
    (b"GET /agent-api/v1/workspaces HTTP/1.1\r\nHost: x\r\nAuthorization Bearer bha_" + b"A" * 43 + b"\r\n\r\n",
     "400 Bad Request"),
])
def test_a_request_gunicorn_refuses_is_answered_in_json_and_never_stored(server, request_bytes, status):
    port, _ = server
    line, headers, body = exchange(port, request_bytes)
    assert line == f"HTTP/1.1 {status}"
    assert (headers["content-type"], headers["cache-control"], headers["connection"]) == (
        "application/json", "no-store", "close")
    assert int(headers["content-length"]) == len(body)
    payload = json.loads(body)
    assert payload["error"] == "invalid_request" and payload["message"].startswith(status.split(" ", 1)[1])
    assert b"bha_" not in body


def test_a_stop_signal_that_reaches_a_worker_before_its_handlers_is_not_lost(django_db_setup, tmp_path):
    # The first worker gets SIGQUIT while the master's inherited handler is still in place (which
    # only queues it): it must quit once its own handlers are in, not serve on until a SIGKILL.
    mark = tmp_path / "signalled"
    errors = tmp_path / "error.log"
    with errors.open("wb") as stderr:
        process, port = gunicorn_start("tests.core.gunicorn_early_stop", log=tmp_path / "access.log", stderr=stderr,
                                       extra_env={"BAILING_TEST_EARLY_STOP_MARK": str(mark)})
    try:
        deadline = time.monotonic() + 60
        while not (mark.exists() and mark.read_text()) and time.monotonic() < deadline:  # listens before it forks
            time.sleep(0.1)
        first = mark.read_text()
        while f"Worker exiting (pid: {first})" not in errors.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert f"Worker exiting (pid: {first})" in errors.read_text()
        assert process.poll() is None  # the master carries on with a new worker
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        process.terminate()
        process.wait(30)


def test_a_second_stop_signal_during_the_first_ones_handler_does_not_hang_the_worker():
    """Ctrl-C on make run reaches a worker as SIGINT and, from its master, as SIGQUIT: the second
    handler ran while the first held the thread pool's lock in its shutdown, waited for it forever,
    and the worker was SIGKILLed 20 s later (two stops in eight here, each 25 s instead of 7)."""
    import signal
    import threading

    from gunicorn.config import Config
    from gunicorn.glogging import Logger
    from gunicorn.workers.gthread import ThreadWorker

    from bailinghub import gunicorn as settings_module

    config = Config()
    worker = ThreadWorker(0, os.getppid(), [], None, 30, config, Logger(config))
    worker.tpool = worker.get_thread_pool()
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGQUIT)}
    try:
        signal.signal(signal.SIGQUIT, worker.handle_quit)  # as gunicorn's init_signals puts them
        signal.signal(signal.SIGINT, worker.handle_quit)
        settings_module.post_worker_init(worker)
        queue, second = worker.tpool._work_queue, []

        class SecondSignalInsideShutdown:  # put() runs under the pool's shutdown lock
            def put(self, item):
                if not second:
                    second.append(True)
                    signal.getsignal(signal.SIGQUIT)(signal.SIGQUIT, None)  # as the interpreter would, here
                queue.put(item)

        worker.tpool._work_queue = SecondSignalInsideShutdown()
        exited = []

        def first_signal():
            try:
                signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
            except SystemExit as exc:
                exited.append(exc.code)

        thread = threading.Thread(target=first_signal, daemon=True)
        thread.start()
        thread.join(10)
        assert second and exited == [0], "the worker hung in its second quit handler"
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        worker.tmp.close()


def _chunked(port: int, path: str, pieces: list[bytes]) -> tuple[int, dict, str | None]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, body=iter(pieces), encode_chunked=True,
                 headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    response = conn.getresponse()
    answer = (response.status, json.loads(response.read()), response.getheader("Connection"))
    conn.close()
    return answer


# The view reads the database: its tables must exist even when no other test of the run asks for
# them (pytest-django creates the test database only for the databases the collected tests use).
@pytest.mark.django_db
def test_a_chunked_body_is_read_as_the_body(server):
    port, _ = server
    body = json.dumps({"client_app_id": "no-such-app", "redirect_uri": "http://127.0.0.1:53682/callback",
                       "state": "st-0123456789", "requested_routes": ["store-assistant"], "device_label": "laptop",
                       "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
                       "code_challenge_method": "S256"}).encode()
    status, answer, _ = _chunked(port, "/agent-auth/v1/authorizations", [body[:40], body[40:90], body[90:]])
    # invalid_client: the client id was read from the body (an empty body would be invalid_request).
    assert (status, answer["error"]) == (400, "invalid_client"), answer


def test_a_chunked_body_past_the_limit_is_413_and_closes_the_connection(server):
    port, _ = server
    piece = b"x" * (256 * 1024)
    pieces = [b'{"arguments": {"a": "'] + [piece] * ((REQUEST_BODY_MAX_BYTES // len(piece)) + 2) + [b'"}}']
    status, answer, connection_header = _chunked(port, "/agent-api/v1/tool-invocations", pieces)
    assert (status, answer["error"], answer["limit_scope"], connection_header) == (
        413, "arguments_too_large", "request_body", "close")


@pytest.mark.parametrize("path", ["/agent-auth/v1/authorizations", "/agent-api/v1/tool-invocations"])
@pytest.mark.parametrize("chunks", [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}XX0\r\n\r\n", b"40\r\n{\"a\": 1"],
                         ids=["bad_size", "missing_terminator", "cut_off"])
def test_a_chunked_body_that_cannot_be_read_is_400_and_closes_the_connection(server, path, chunks):
    port, _ = server
    status, headers, body = exchange(port, f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
                                         + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                                         + chunks, half_close=True)
    assert (status, headers["content-type"], headers["cache-control"], headers["connection"]) == (
        "HTTP/1.1 400 Bad Request", "application/json", "no-store", "close")
    assert json.loads(body) == {"error": "invalid_request", "message": "The request body could not be read: "
                                "its chunked encoding is malformed or it ended early."}


@pytest.mark.parametrize("path", ["/agent-auth/v1/authorizations", "/agent-api/v1/tool-invocations"])
@pytest.mark.parametrize("body", [b'{"a": 1}', b"{}", b""], ids=["valid_json", "empty_object", "nothing"])
def test_a_body_that_ends_before_its_content_length_is_400_and_closes_the_connection(server, path, body):
    # Whole JSON documents, cut off from what their Content-Length promised: read as they came,
    # they would be taken for the body the client announced.
    port, _ = server
    status, headers, answer = exchange(port, f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
                                           + b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n" + body,
                                       half_close=True)
    assert (status, headers["content-type"], headers["cache-control"], headers["connection"]) == (
        "HTTP/1.1 400 Bad Request", "application/json", "no-store", "close")
    assert json.loads(answer) == {"error": "invalid_request", "message": f"The request body ended after {len(body)} "
                                  "of the 40 bytes its Content-Length announced."}
