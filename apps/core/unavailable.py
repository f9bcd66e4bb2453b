"""PostgreSQL or Redis down: 503 with Retry-After instead of a 500, and recovery by itself.

Whatever raised it — a view, a DRF view, a middleware, the session save — an error that says a
backing service cannot be reached marks the request (`mark`), and one middleware
(apps.core.middleware.ServiceUnavailableMiddleware) turns the resulting 5xx into a 503 in the
caller's shape. Nothing is cached across requests: Django drops a
connection that failed (CONN_HEALTH_CHECKS), so the first request after the server is back
reconnects and succeeds.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.signals import got_request_exception
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.http import HttpRequest

from apps.core.paths import under_prefix

logger = logging.getLogger("bailinghub.errors")

RETRY_AFTER_SECONDS = 5
MESSAGE = "The service is temporarily unavailable; retry shortly."


def _unavailable_classes() -> tuple[type[BaseException], ...]:
    from kombu.exceptions import OperationalError as BrokerOperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return (DatabaseOperationalError, DatabaseInterfaceError, RedisConnectionError, RedisTimeoutError,
            BrokerOperationalError)


def is_unavailable(exc: BaseException | None) -> bool:
    """True if `exc` (or an exception it was raised from) says PostgreSQL, Redis or the broker
    cannot be reached or gave up (connection refused or lost, a timeout)."""
    classes = _unavailable_classes()
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, classes):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def mark(request: HttpRequest | None, exc: BaseException) -> bool:
    """Record on the request that it failed because a backing service is down; whether it did."""
    if request is None or not is_unavailable(exc):
        return False
    if not getattr(request, "_backing_service_unavailable", False):
        logger.warning("Backing service unavailable during %s %s: %s", request.method, request.path,
                       type(exc).__name__)
    # An ad-hoc attribute on this request only (read back with getattr); the stubs do not declare it.
    request._backing_service_unavailable = True  # type: ignore[attr-defined]
    return True


def unavailable_code(path: str) -> str:
    """The error code of a 503 for a backing service down, at `path` (BAILING_UNAVAILABLE_CODES)."""
    for prefix, code in settings.BAILING_UNAVAILABLE_CODES.items():
        if under_prefix(path, (prefix,)):
            return str(code)
    return "service_unavailable"


def _on_request_exception(sender: object, request: HttpRequest | None = None, **kwargs: Any) -> None:
    import sys

    exc = sys.exc_info()[1]
    if exc is not None:
        mark(request, exc)


got_request_exception.connect(_on_request_exception, dispatch_uid="bailinghub.core.unavailable")
