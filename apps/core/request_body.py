"""A request body that could not be read whole: the marks its request leaves in the WSGI environ
for the web server's connection (bailinghub.wsgi reads and sets them under gunicorn), and what the
client is told."""

from __future__ import annotations

from django.conf import settings
from django.http import UnreadablePostError

# Set when the request's connection must not serve another request: a refused body's rest may
# still be on its way. bailinghub.wsgi tells gunicorn, which ignores an application's own
# `Connection` header and would otherwise promise keep-alive, then close the connection anyway
# once the unread rest passes 64 KiB, so the client's next request on it is lost.
CLOSE_CONNECTION = "bailing_close_connection"
# Set by bailinghub.wsgi when reading the body waited its whole deadline for a byte: the client
# stopped sending. Whoever meets the read's error answers 408 request_timeout.
BODY_TIMED_OUT = "bailing_body_timed_out"


def body_timed_out_message() -> str:
    seconds = f"{settings.BAILING_REQUEST_READ_TIMEOUT_SECONDS:g}"
    return (f"The request body stopped arriving: nothing came for {seconds} seconds. Nothing was saved; "
            "send the request again.")


def body_ended_early_message(received: int, announced: int) -> str:
    return f"The request body ended after {received} of the {announced} bytes its Content-Length announced."


class BodyEndedEarly(UnreadablePostError):
    """A parser met the body's end before its Content-Length: the client stopped sending (a
    half-close). What came is not the body announced, though it may parse as one (a multipart
    upload cut inside its file parsed as a form without the file)."""

    def __init__(self, received: int, announced: int) -> None:
        super().__init__(body_ended_early_message(received, announced))
        self.received = received
        self.announced = announced
