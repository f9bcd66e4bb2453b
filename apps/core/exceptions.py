"""One rendering of every error: {"error": code, "message": ..., **extra} with the real status."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from apps.core import unavailable
from apps.core.errors import ApiError
from apps.core.unavailable import mark

logger = logging.getLogger("bailinghub.errors")


class ConsolePermissionDenied(DjangoPermissionDenied):
    """A console page refused for a reason the operator should read: its message is shown on the
    403 page (a plain PermissionDenied shows the role message, whatever text it carries)."""


STATUS_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    410: "gone",
    411: "length_required",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "unprocessable_entity",
    429: "rate_limited",
    500: "internal_error",
    502: "bad_gateway",
    503: "service_unavailable",
}

STATUS_MESSAGES = {
    400: "The request is invalid.",
    401: "Authentication is required.",
    403: "You do not have permission to do this.",
    404: "Not found.",
    405: "This method is not allowed here.",
    406: "The requested response format is not available.",
    408: "The request body stopped arriving.",
    409: "The request conflicts with the current state.",
    410: "This resource is gone.",
    413: "The request body is too large.",
    415: "This content type is not supported.",
    422: "The request could not be processed.",
    429: "Too many requests; retry later.",
    500: "Internal server error.",
    502: "An upstream service failed.",
    503: "The service is unavailable.",
}


def error_payload(status: int, message: str | None = None, code: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "error": code or STATUS_CODES.get(status, "error"),
        "message": message or STATUS_MESSAGES.get(status, "Error."),
        **extra,
    }


def error_response(status: int, message: str | None = None, code: str | None = None, **extra: Any) -> JsonResponse:
    # Compact, as CompactJSONRenderer renders every answer of an agent view: an error answered
    # before any view runs (an unknown path, a body over its budget) is no different on the wire.
    return JsonResponse(error_payload(status, message, code, **extra), status=status,
                        json_dumps_params={"ensure_ascii": False, "separators": (",", ":")})


FIELD_ERRORS_SHOWN = 10
_NAME_MAX = 128
_MESSAGE_MAX = 500
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(text: str, limit: int) -> str:
    """Text as it may appear in an error: cut, and never a lone surrogate (which no UTF-8 encoder takes)."""
    text = _LONE_SURROGATE.sub("\ufffd", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field_error_items(detail: Any, prefix: str = "") -> Iterator[tuple[str, list[str]]]:
    """(name, [message, ...]) for every leaf of DRF's nested error detail, lazily."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if key == "non_field_errors" and prefix:
                name = prefix
            yield from _field_error_items(value, name)
    elif isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            yield prefix or "non_field_errors", [str(item) for item in detail]
        else:
            for index, item in enumerate(detail):
                yield from _field_error_items(item, f"{prefix}[{index}]" if prefix else f"[{index}]")
    else:
        yield prefix or "non_field_errors", [str(detail)]


def field_errors(detail: Any, *, shown: int = FIELD_ERRORS_SHOWN) -> tuple[dict[str, list[str]], int]:
    """The first `shown` field errors ({"field.sub": ["message"]}, names and messages cut) and
    how many there are in all: a small body never buys a large error."""
    fields: dict[str, list[str]] = {}
    total = 0
    for name, messages in _field_error_items(detail):
        total += 1
        if len(fields) < shown:
            fields[_shown(name, _NAME_MAX)] = [_shown(message, _MESSAGE_MAX) for message in messages[:3]]
    return fields, total


def flatten_field_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as {"field.sub": ["message", ...]}, the first few only."""
    return field_errors({prefix: detail} if prefix else detail)[0]


def validation_extra(detail: Any) -> dict[str, Any]:
    """`fields` (the first few) and, when some were left out, `field_errors_total`."""
    fields, total = field_errors(detail)
    return {"fields": fields, **({"field_errors_total": total} if total > len(fields) else {})}


def validation_message(fields: dict[str, list[str]]) -> str:
    if not fields:
        return "The request is invalid."
    name, messages = next(iter(fields.items()))
    return f"{name}: {messages[0]}" if name != "non_field_errors" else messages[0]


def _bounded(payload: dict[str, Any]) -> dict[str, Any]:
    """An ApiError's payload with its `fields` bounded (services pass whole error dicts) and its
    message safe to encode."""
    payload = dict(payload)
    if isinstance(payload.get("message"), str):
        payload["message"] = _shown(payload["message"], 2 * _MESSAGE_MAX)
    fields = payload.get("fields")
    if isinstance(fields, dict) and "field_errors_total" not in payload:
        payload.update(validation_extra(fields))
    return payload


def suspicious_message(exc: SuspiciousOperation) -> str | None:
    """What a client is told of a request Django refused as suspicious: the limit it passed, in
    its own numbers — Django's text names the setting (settings.DATA_UPLOAD_MAX_NUMBER_FIELDS)."""
    if isinstance(exc, TooManyFieldsSent):
        return f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} parameters."
    if isinstance(exc, TooManyFilesSent):
        return f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files."
    if isinstance(exc, RequestDataTooBig):
        return f"The request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
    return _shown(str(exc), _MESSAGE_MAX) or None


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF exception handler: renders ApiError, DRF and Django exceptions in the one error shape."""
    headers: dict[str, str] = {}
    if isinstance(exc, ApiError):
        return Response(_bounded(exc.as_dict()), status=exc.status, headers=exc.headers)
    if isinstance(exc, drf.ValidationError):
        extra = validation_extra(exc.detail)
        return Response(error_payload(400, validation_message(extra["fields"]), "invalid_request", **extra),
                        status=400)
    if isinstance(exc, DjangoValidationError):
        extra = validation_extra(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
        return Response(error_payload(400, validation_message(extra["fields"]), "invalid_request", **extra),
                        status=400)
    if isinstance(exc, SuspiciousOperation):
        # Too many fields or files in a form, a malformed multipart: the client's fault, never a 500.
        return Response(error_payload(400, suspicious_message(exc), "invalid_request"), status=400)
    if isinstance(exc, Http404):
        return Response(error_payload(404), status=404)
    if isinstance(exc, DjangoPermissionDenied):
        return Response(error_payload(403), status=403)
    if isinstance(exc, drf.ParseError):
        # Our parsers name what could not be parsed (`invalid_json`, `invalid_multipart`) and say why;
        # DRF's own (`parse_error`) are JSON ones here.
        code = exc.get_codes()
        if not isinstance(code, str) or code == "parse_error":
            return Response(error_payload(400, "The request body is not valid JSON.", "invalid_json"), status=400)
        return Response(error_payload(400, _shown(str(exc.detail), _MESSAGE_MAX), code), status=400)
    if isinstance(exc, drf.UnsupportedMediaType):
        return Response(error_payload(415, _shown(str(exc.detail), _MESSAGE_MAX)), status=415)
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            headers["WWW-Authenticate"] = auth_header
        # A 401's own words only where an authentication says why (agent_auth.authentication.refused):
        # DRF's defaults ("Incorrect authentication credentials.") stay the generic message.
        explained = exc.status_code == 403 or exc.get_codes() == "explained"
        return Response(error_payload(exc.status_code, str(exc.detail) if explained else None),
                        status=exc.status_code, headers=headers)
    if isinstance(exc, drf.PermissionDenied) and str(exc.detail).startswith("CSRF Failed"):
        # SessionAuthentication's refusal: the generic "You do not have permission" sent a person
        # with the right role looking for the wrong cause. Django's reason names the header the
        # client itself sent (or did not).
        origin = "Origin checking failed" in str(exc.detail) or "Referer checking failed" in str(exc.detail)
        return Response(error_payload(403, (
            "A request signed in with the console's session must come from this hub's own address (its Origin or "
            "Referer header): " if origin else "A request signed in with the console's session must carry the CSRF "
            "token: send the csrftoken cookie's value as the X-CSRFToken header, or use an operator token instead. "
        ) + str(exc.detail).removeprefix("CSRF Failed: ")[:200]), status=403)
    if isinstance(exc, drf.Throttled):
        # Set by DRF's Throttled.__init__; its stubs do not declare the attribute.
        wait: float | None = getattr(exc, "wait", None)
        if wait is not None:
            headers["Retry-After"] = str(int(wait) + 1)
        return Response(error_payload(429), status=429, headers=headers)
    if isinstance(exc, drf.APIException):
        return Response(error_payload(exc.status_code), status=exc.status_code)
    request = context.get("request")
    if mark(getattr(request, "_request", request), exc):
        code = unavailable.unavailable_code(getattr(request, "path", ""))
        return Response(error_payload(503, unavailable.MESSAGE, code), status=503,
                        headers={"Retry-After": str(unavailable.RETRY_AFTER_SECONDS)})
    logger.exception("Unhandled error in %s", getattr(request, "path", "?"))
    return Response(error_payload(500), status=500)
