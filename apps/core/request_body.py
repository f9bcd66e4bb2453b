"""A request body that could not be read whole: the marks its request leaves in the WSGI environ
for the web server's connection (bailinghub.wsgi reads and sets them under gunicorn), and what the
client is told."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from apps.core.errors import ApiError
from apps.core.paths import under_prefix

# Set when the request's connection must not serve another request: a refused body's rest may
# still be on its way. bailinghub.wsgi tells gunicorn, which ignores an application's own
# `Connection` header and would otherwise promise keep-alive, then close the connection anyway
# once the unread rest passes 64 KiB, so the client's next request on it is lost.
CLOSE_CONNECTION = "bailing_close_connection"
# Set by bailinghub.wsgi when a read of the body waited BAILING_REQUEST_READ_TIMEOUT_SECONDS for a
# byte: the client stopped sending. Whoever meets the read's error answers 408 request_timeout.
BODY_TIMED_OUT = "bailing_body_timed_out"


def body_timed_out_message() -> str:
    seconds = f"{settings.BAILING_REQUEST_READ_TIMEOUT_SECONDS:g}"
    return (f"The request body stopped arriving: nothing came for {seconds} seconds. Nothing was saved; "
            "send the request again.")


def body_ended_early_message(received: int, announced: int) -> str:
    return f"The request body ended after {received} of the {announced} bytes its Content-Length announced."


def body_unreadable_error(request: Any, *, received: int | None = None, announced: int | None = None) -> ApiError:
    """The error for a body a parser could not read whole (`request`: Django's or DRF's): 408
    request_timeout when the read timed out, else 400 — it ended before its Content-Length
    (`received` of `announced` bytes) or the connection failed. 400 invalid_request under a closed
    error list. Its connection closes: the rest may still be on its way."""
    request.META[CLOSE_CONNECTION] = True
    if request.META.get(BODY_TIMED_OUT):
        status, code, message = 408, "request_timeout", body_timed_out_message()
    elif received is not None and announced is not None:
        status, code, message = 400, "invalid_request", body_ended_early_message(received, announced)
    else:
        status, code, message = 400, "invalid_request", "The request body could not be read: the connection failed."
    if under_prefix(request.path, settings.BAILING_CLOSED_ERROR_PREFIXES):
        status, code = 400, "invalid_request"
    return ApiError(message, code=code, status=status)
