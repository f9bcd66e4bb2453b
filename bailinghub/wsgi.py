import contextlib
import os
import socket
from collections.abc import Callable, Iterable
from typing import Any

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bailinghub.settings")

_django = get_wsgi_application()

from django.conf import settings  # noqa: E402  (after Django is set up)

from apps.core.request_body import BODY_TIMED_OUT, CLOSE_CONNECTION  # noqa: E402


class _DeadlineInput:
    """The WSGI input of a request whose socket has a read timeout: a read that waited the whole
    timeout for a byte marks the request BODY_TIMED_OUT in its environ before the error goes on, so
    whoever meets the error (the body limit's reader, CSRF's reading of a form, a DRF parser) can
    answer 408 instead of a malformed body."""

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

    def __iter__(self) -> "_DeadlineInput":
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Django's WSGI application, under gunicorn with two additions:

    - Reading the request's body has a deadline (BAILING_REQUEST_READ_TIMEOUT_SECONDS without a byte):
      gunicorn reads a body with no timeout, so a client announcing a body and never sending it
      held a web thread for good, and a handful of them every thread. The socket's timeout is
      lifted when Django has answered: writing the answer is as before (the worker sets it again
      for the connection's next request; bailinghub.gunicorn).
    - A request marked CLOSE_CONNECTION in its environ closes its connection: the start_response
      belongs to the response being built, whose `force_close` makes it send `Connection: close`
      and close after the body (gunicorn drops the application's own `Connection` header).

    Under another server (no `gunicorn.socket`) both are left out."""
    deadline = settings.BAILING_REQUEST_READ_TIMEOUT_SECONDS
    sock = environ.get("gunicorn.socket") if deadline > 0 else None
    if isinstance(sock, socket.socket):
        sock.settimeout(deadline)
        environ["wsgi.input"] = _DeadlineInput(environ["wsgi.input"], environ)
    try:
        response = _django(environ, start_response)
    finally:
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):  # closed under the answer: gunicorn ends it anyway
                sock.settimeout(None)
    if environ.get(CLOSE_CONNECTION):
        force_close = getattr(getattr(start_response, "__self__", None), "force_close", None)
        if callable(force_close):
            force_close()
    return response
