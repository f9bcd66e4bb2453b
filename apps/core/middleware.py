"""Request ids, no-store caching, streamed body limits and JSON errors for API paths."""

from __future__ import annotations

import io
import logging
import re
import uuid

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from apps.core.errors import ApiError
from apps.core.exceptions import error_response
from apps.core.logging import request_id_var

logger = logging.getLogger("bailinghub.errors")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")
_READ_CHUNK = 64 * 1024


def is_json_path(path: str) -> bool:
    return path.startswith(settings.BAILING_JSON_ERROR_PREFIXES)


class RequestIdMiddleware:
    """Takes a well-formed X-Request-ID or makes one; it is in every log line and echoed back."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex
        request.request_id = request_id
        token = request_id_var.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-ID"] = request_id
        return response


class NoStoreMiddleware:
    """Every response under the agent prefixes is Cache-Control: no-store, errors included."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith(settings.BAILING_NO_STORE_PREFIXES):
            response["Cache-Control"] = "no-store"
        return response


def view_body_limit(view_func) -> int:
    """A view's body limit: `body_max_bytes` on the function or its DRF/Django view class."""
    for holder in (view_func, getattr(view_func, "cls", None), getattr(view_func, "view_class", None)):
        limit = getattr(holder, "body_max_bytes", None)
        if limit:
            return int(limit)
    return settings.BAILING_JSON_BODY_MAX_BYTES


def too_large_response(view_func, *, max_bytes: int, observed_bytes: int) -> HttpResponse:
    """413 in the view's own shape when it declares one (tool invocations), else request_too_large."""
    for holder in (view_func, getattr(view_func, "cls", None), getattr(view_func, "view_class", None)):
        builder = getattr(holder, "body_too_large_payload", None)
        if builder:
            payload = builder(max_bytes=max_bytes, observed_bytes=observed_bytes)
            return error_response(413, **payload)
    return error_response(
        413,
        f"The request body exceeds {max_bytes} bytes.",
        "request_too_large",
        max_bytes=max_bytes,
        observed_bytes=observed_bytes,
    )


class BodySizeLimitMiddleware:
    """Reads a request body in chunks and stops as soon as it passes the view's limit.

    Runs after URL resolution (process_view), so each view may raise or lower the global
    BAILING_JSON_BODY_MAX_BYTES with a `body_max_bytes` attribute. Multipart uploads are not
    buffered here: only their declared length is checked, Django streams the files to disk.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs):
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return None
        limit = view_body_limit(view_func)
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return error_response(400, "Content-Length is not a number.")
        if request.content_type == "multipart/form-data":
            if declared > limit:
                return too_large_response(view_func, max_bytes=limit, observed_bytes=0)
            return None
        if declared <= 0:
            return None
        chunks: list[bytes] = []
        observed = 0
        while observed <= limit:
            chunk = request.read(min(_READ_CHUNK, limit + 1 - observed))
            if not chunk:
                break
            chunks.append(chunk)
            observed += len(chunk)
        if observed > limit:
            return too_large_response(view_func, max_bytes=limit, observed_bytes=observed)
        body = b"".join(chunks)
        # Hand the bytes back to Django as if nothing had been read.
        request._body = body
        request._stream = io.BytesIO(body)
        request._read_started = False
        return None


class ApiExceptionMiddleware:
    """Under the JSON prefixes, errors raised outside DRF and non-JSON error pages become JSON."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code >= 400
            and is_json_path(request.path)
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            replacement = error_response(response.status_code)
            for header in ("Allow", "Retry-After", "WWW-Authenticate"):
                if header in response:
                    replacement[header] = response[header]
            return replacement
        return response

    def process_exception(self, request: HttpRequest, exception: Exception):
        if not is_json_path(request.path):
            return None
        if isinstance(exception, ApiError):
            response = error_response(exception.status, exception.message, exception.code, **exception.extra)
            for key, value in exception.headers.items():
                response[key] = value
            return response
        if isinstance(exception, Http404):
            return error_response(404)
        if isinstance(exception, PermissionDenied):
            return error_response(403)
        logger.exception("Unhandled error in %s", request.path)
        return error_response(500)
