"""One rendering of every error: {"error": code, "message": ..., **extra} with the real status."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from apps.core.errors import ApiError

logger = logging.getLogger("bailinghub.errors")

STATUS_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    410: "gone",
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


def error_payload(status: int, message: str | None = None, code: str | None = None, **extra: Any) -> dict:
    return {
        "error": code or STATUS_CODES.get(status, "error"),
        "message": message or STATUS_MESSAGES.get(status, "Error."),
        **extra,
    }


def error_response(status: int, message: str | None = None, code: str | None = None, **extra: Any) -> JsonResponse:
    return JsonResponse(error_payload(status, message, code, **extra), status=status,
                        json_dumps_params={"ensure_ascii": False})


def flatten_field_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as {"field.sub": ["message", ...]}."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if key == "non_field_errors" and prefix:
                name = prefix
            out.update(flatten_field_errors(value, name))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return {prefix or "non_field_errors": [str(item) for item in detail]}
        out = {}
        for index, item in enumerate(detail):
            out.update(flatten_field_errors(item, f"{prefix}[{index}]" if prefix else f"[{index}]"))
        return out
    return {prefix or "non_field_errors": [str(detail)]}


def validation_message(fields: dict[str, list[str]]) -> str:
    name, messages = next(iter(fields.items()))
    return f"{name}: {messages[0]}" if name != "non_field_errors" else messages[0]


def api_exception_handler(exc: Exception, context: dict) -> Response:
    """DRF exception handler: renders ApiError, DRF and Django exceptions in the one error shape."""
    headers: dict[str, str] = {}
    if isinstance(exc, ApiError):
        return Response(exc.as_dict(), status=exc.status, headers=exc.headers)
    if isinstance(exc, drf.ValidationError):
        fields = flatten_field_errors(exc.detail)
        payload = error_payload(400, validation_message(fields), "invalid_request", fields=fields)
        return Response(payload, status=400)
    if isinstance(exc, DjangoValidationError):
        fields = flatten_field_errors(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
        return Response(error_payload(400, validation_message(fields), "invalid_request", fields=fields),
                        status=400)
    if isinstance(exc, Http404):
        return Response(error_payload(404), status=404)
    if isinstance(exc, DjangoPermissionDenied):
        return Response(error_payload(403), status=403)
    if isinstance(exc, drf.ParseError):
        return Response(error_payload(400, "The request body is not valid JSON.", "invalid_json"), status=400)
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            headers["WWW-Authenticate"] = auth_header
        return Response(error_payload(exc.status_code, str(exc.detail) if exc.status_code == 403 else None),
                        status=exc.status_code, headers=headers)
    if isinstance(exc, drf.Throttled):
        if exc.wait is not None:
            headers["Retry-After"] = str(int(exc.wait) + 1)
        return Response(error_payload(429), status=429, headers=headers)
    if isinstance(exc, drf.APIException):
        return Response(error_payload(exc.status_code), status=exc.status_code)
    request = context.get("request")
    logger.exception("Unhandled error in %s", getattr(request, "path", "?"))
    return Response(error_payload(500), status=500)
