import contextlib
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bailinghub.settings")

_django = get_wsgi_application()

from django.conf import settings  # noqa: E402  (after Django is set up)

from apps.core.request_body import BODY_TIMED_OUT, CLOSE_CONNECTION  # noqa: E402


class _TimedInput:
    """The WSGI input of a request whose socket has a read timeout: a read that waited the whole
    timeout for a byte marks the request BODY_TIMED_OUT in its environ before the error goes on, so
    whoever meets the error (the body limit's reader, CSRF's reading of a form, a DRF parser)
    answers 408, not a malformed body."""

    def __init__(self, stream: Any, environ: dict[str, Any]) -> None:
        self._stream = stream
        self._environ = environ

    def _timed(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return method(*args)
        except TimeoutError:
            self._environ[BODY_TIMED_OUT] = True
            raise

    def read(self, *args: Any) -> bytes:
        return self._timed(self._stream.read, *args)

    def readline(self, *args: Any) -> bytes:
        return self._timed(self._stream.readline, *args)

    def readlines(self, *args: Any) -> list[bytes]:
        return self._timed(self._stream.readlines, *args)

    def __iter__(self) -> "_TimedInput":
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


# The most of an answer written in one go: each slice's write may wait the read timeout, so a
# client must read at least this much in that time (64 KiB in 30 s: about 2 KiB/s).
ANSWER_SLICE_BYTES = 64 * 1024


class _SlicedAnswer:
    """Django's answer in slices of at most ANSWER_SLICE_BYTES, which gunicorn writes one by one
    while the socket's timeout holds. Python's timeout on a write is for the whole write: an answer
    written in one piece to a slow but reading client would be cut as surely as one to a client
    that stopped reading."""

    def __init__(self, answer: Iterable[bytes]) -> None:
        self._answer = answer

    def __iter__(self) -> Iterator[bytes]:
        parts = iter(self._answer)
        while True:
            try:
                part = next(parts)
            except StopIteration:
                return
            except TimeoutError as exc:
                # The worker takes a TimeoutError for a client that stopped reading; one of the
                # application's own (a peer's socket, a future) is its error, with its traceback.
                raise RuntimeError("The application's answer raised TimeoutError.") from exc
            for start in range(0, len(part), ANSWER_SLICE_BYTES):
                yield part[start : start + ANSWER_SLICE_BYTES]
            if not part:
                yield part

    def close(self) -> None:  # Django's request_finished (its connections' clean-up) depends on it
        close = getattr(self._answer, "close", None)
        if callable(close):
            close()


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Django's WSGI application, under gunicorn with two additions:

    - Each read of the request's body waits at most BAILING_REQUEST_READ_TIMEOUT_SECONDS for a
      byte (nginx's client_body_timeout): gunicorn reads a body with no timeout, so a client
      announcing a body and never sending it held a web thread for good, and a handful of them
      every thread. The answer is written under the same timeout, a slice at a time
      (_SlicedAnswer; nginx's send_timeout): a client that stopped reading an answer larger
      than the kernel's buffers held its thread for good too. bailinghub.gunicorn's worker
      closes its connection, and bounds the connection's next request's head.
    - A request marked CLOSE_CONNECTION in its environ closes its connection: the start_response
      belongs to the response being built, whose `force_close` makes it send `Connection: close`
      and close after the body (gunicorn drops the application's own `Connection` header).

    Under another server (no `gunicorn.socket`) both are left out; the first also over HTTP/2.
    (gunicorn terminates no TLS here; if it did, its handshake would not be timed.)"""
    timeout = settings.BAILING_REQUEST_READ_TIMEOUT_SECONDS
    # HTTP/1 only: an HTTP/2 connection's streams share its socket, which gunicorn's own HTTP/2
    # code times (http2/connection.py), and a stream's body is not read from the socket.
    http1 = str(environ.get("SERVER_PROTOCOL", "")).startswith("HTTP/1")
    sock = environ.get("gunicorn.socket") if timeout > 0 and http1 else None
    if isinstance(sock, socket.socket):
        sock.settimeout(timeout)
        environ["wsgi.input"] = _TimedInput(environ["wsgi.input"], environ)
    try:
        response = _django(environ, start_response)
    finally:
        if isinstance(sock, socket.socket) and environ.get(BODY_TIMED_OUT):
            with contextlib.suppress(OSError):  # closed under the answer: gunicorn ends it anyway
                # Nothing more is read from it (nothing came; no RST can cut the answer), so
                # gunicorn's closing linger, which waits up to 2 s for the client to close and
                # runs on the loop that accepts connections, ends at once.
                sock.shutdown(socket.SHUT_RD)
    if environ.get(CLOSE_CONNECTION):
        force_close = getattr(getattr(start_response, "__self__", None), "force_close", None)
        if callable(force_close):
            force_close()
    if not isinstance(sock, socket.socket) or isinstance(response, environ.get("wsgi.file_wrapper", ())):
        # A file gunicorn sends with sendfile, which waits at most the socket's timeout each time
        # the client's window is full (without sendfile, it writes the file's blocks one by one).
        return response
    return _SlicedAnswer(response)
