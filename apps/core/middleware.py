"""Request ids, no-store caching, streamed body limits, JSON errors for API paths, and 503 while a
backing service is down (apps.core.unavailable says which errors mean that)."""

from __future__ import annotations

import io
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.common import CommonMiddleware as DjangoCommonMiddleware
from django.template.defaultfilters import filesizeformat
from gunicorn.http.errors import ParseException

from apps.core.errors import ApiError
from apps.core.exceptions import STATUS_MESSAGES, error_response
from apps.core.logging import TOKEN_PATTERN, request_id_var
from apps.core.paths import is_json_path, under_prefix
from apps.core.request_body import BODY_TIMED_OUT, CLOSE_CONNECTION, body_ended_early_message, body_timed_out_message
from apps.core.unavailable import MESSAGE, RETRY_AFTER_SECONDS, mark, unavailable_code

logger = logging.getLogger("bailinghub.errors")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{8,128}")
_READ_CHUNK = 64 * 1024
# A body the server cannot deliver: gunicorn's chunk parser refuses a malformed chunk
# (ParseException), and a stream cut off before its end is an OSError (gunicorn's NoMoreData,
# Django's UnreadablePostError). The client's fault, never a 500.
_UNREADABLE_BODY = (OSError, ParseException)

GetResponse = Callable[[HttpRequest], HttpResponse]
ViewFunc = Callable[..., Any]


def request_id_is_valid(value: str) -> bool:
    """8–128 characters of [A-Za-z0-9._-], and not shaped like one of our credentials (an id is
    echoed and written to every log line)."""
    return bool(_REQUEST_ID.fullmatch(value)) and not TOKEN_PATTERN.search(value)


class RequestIdMiddleware:
    """Takes a well-formed X-Request-ID or makes one; it is in every log line and echoed back."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if request_id_is_valid(incoming) else uuid.uuid4().hex
        # An ad-hoc attribute, as Django does for request.user; the stubs do not declare it.
        request.request_id = request_id  # type: ignore[attr-defined]
        token = request_id_var.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-ID"] = request_id
        return response


class NoStoreMiddleware:
    """Every response under the agent prefixes is Cache-Control: no-store, errors included, and
    carries HTTP/1.0's Pragma: no-cache as well: Agent Auth's token endpoint must (RFC 6749 §5.1),
    including for what is answered before its view runs (a refused charset, an oversized body)."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if under_prefix(request.path, settings.BAILING_NO_STORE_PREFIXES):
            response["Cache-Control"] = "no-store"
            response["Pragma"] = "no-cache"
        return response


def view_body_limit(view_func: ViewFunc) -> int:
    """A view's body limit: `body_max_bytes` on the function or its DRF/Django view class."""
    for holder in (view_func, getattr(view_func, "cls", None), getattr(view_func, "view_class", None)):
        limit = getattr(holder, "body_max_bytes", None)
        if callable(limit):  # computed per request, so it follows the settings in force
            limit = limit()
        if limit:
            return int(limit)
    return int(settings.BAILING_JSON_BODY_MAX_BYTES)


def error_page(request: HttpRequest, status: int, message: str | None = None, code: str | None = None,
               **extra: Any) -> HttpResponse:
    """The error in the caller's shape: JSON under the API prefixes, otherwise an HTML page in
    the console's look with a way back to where the person came from."""
    if is_json_path(request.path):
        return error_response(status, message, code, **extra)
    from django.contrib import admin
    from django.template.loader import render_to_string
    from django.utils.http import url_has_allowed_host_and_scheme

    referer = request.headers.get("Referer", "")
    back = referer if referer and url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()) else ""
    admin_path = request.path.startswith(_admin_index_path())
    context = {
        "title": STATUS_TITLES.get(status, "Error"),
        "status": status,
        "message": message or STATUS_MESSAGES.get(status, "Error."),
        "back_url": back or (_admin_index_path() if admin_path else "/"),
        "site_header": admin.site.site_header,
        "site_title": admin.site.site_title,
        "site_url": None,
        "has_permission": False,
        "is_nav_sidebar_enabled": False,
        **extra,
    }
    # Rendered before the session and auth middlewares have run: the page shows no user.
    html = render_to_string("bailinghub/error.html", context, request=request)
    return HttpResponse(html, status=status, content_type="text/html; charset=utf-8")


def _admin_index_path() -> str:
    from django.urls import NoReverseMatch, reverse

    try:
        return reverse("admin:index")
    except NoReverseMatch:
        return "/admin/"


STATUS_TITLES = {400: "Bad request", 403: "Not allowed", 404: "Not found", 408: "Request timed out",
                 413: "Upload too large", 415: "Unsupported content"}


def too_large_response(request: HttpRequest, view_func: ViewFunc, *, max_bytes: int,
                       observed_bytes: int) -> HttpResponse:
    """413 in the view's own shape when it declares one (tool invocations), else request_too_large
    (body_refused); an HTML page outside the API prefixes. The connection closes after it: the
    body was not read to its end."""
    request.META[CLOSE_CONNECTION] = True  # the WSGI environ itself: no later middleware can lose it
    return _too_large_response(request, view_func, max_bytes=max_bytes, observed_bytes=observed_bytes)


def _too_large_response(request: HttpRequest, view_func: ViewFunc, *, max_bytes: int,
                        observed_bytes: int) -> HttpResponse:
    for holder in (view_func, getattr(view_func, "cls", None), getattr(view_func, "view_class", None)):
        builder = getattr(holder, "body_too_large_payload", None)
        if builder:
            payload = builder(max_bytes=max_bytes, observed_bytes=observed_bytes)
            if is_json_path(request.path):
                return error_response(413, **payload)
            return error_page(request, 413, payload.get("message"))
    if not is_json_path(request.path):
        declared = int(request.META.get("CONTENT_LENGTH") or 0) or observed_bytes
        return error_page(request, 413, f"The request is {filesizeformat(declared)}; this page accepts at most "
                                        f"{filesizeformat(max_bytes)}. Nothing was saved.",
                          max_bytes=max_bytes, observed_bytes=declared)
    return body_refused(request, 413, f"The request body exceeds {max_bytes} bytes.", "request_too_large",
                        max_bytes=max_bytes, observed_bytes=observed_bytes)


def body_refused(request: HttpRequest, status: int, message: str, code: str | None = None,
                 **extra: Any) -> HttpResponse:
    """A body refused before any view reads it (411, 413, 415), in error_page's shape; 400
    invalid_request under a closed error list (Agent Auth's has none of those codes)."""
    if under_prefix(request.path, settings.BAILING_CLOSED_ERROR_PREFIXES):
        return error_response(400, message, "invalid_request", **extra)
    return error_page(request, status, message, code, **extra)


def body_timed_out(request: HttpRequest) -> HttpResponse:
    """408 for a body that stopped arriving (BODY_TIMED_OUT): a read waited the read timeout for a
    byte. Its connection closes: the rest may still come."""
    request.META[CLOSE_CONNECTION] = True
    return body_refused(request, 408, body_timed_out_message(), "request_timeout")


def _has_body(request: HttpRequest) -> bool:
    """Whether the request announces a body: a Content-Length above zero (or not a number), or a
    chunked transfer."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    return length.strip() != "0" or "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()


class HttpsRequiredMiddleware:
    """While the deployment sends plain HTTP to HTTPS (SECURE_SSL_REDIRECT), a plain-HTTP request to
    an agent API is refused in JSON — 403 ``https_required``, 400 ``invalid_request`` on Agent
    Auth's closed list — instead of redirected: agent hosts follow no redirect (contracts-beyond-seeds
    §6) and would only see a 301 they cannot act on. Its body is not read, nor its token checked."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (settings.SECURE_SSL_REDIRECT and not request.is_secure()
                and under_prefix(request.path, settings.BAILING_HTTPS_REFUSED_PREFIXES)):
            if _has_body(request):
                request.META[CLOSE_CONNECTION] = True  # its unread body may still be on its way
            return body_refused(request, 403, "This API is served over HTTPS only: send the request to its "
                                              "https:// address.", "https_required")
        return self.get_response(request)


class BodySizeLimitMiddleware:
    """Reads a request body in chunks and stops as soon as it passes the view's limit.

    Runs after URL resolution (process_view), so each view may raise or lower the global
    BAILING_JSON_BODY_MAX_BYTES with a `body_max_bytes` attribute. Multipart uploads are not
    buffered here: only their declared length is checked, Django streams the files to disk. A body
    in a content coding (gzip, ...) is refused unread: nothing decodes one.
    """

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func: ViewFunc, view_args: tuple[Any, ...],
                     view_kwargs: dict[str, Any]) -> HttpResponse | None:
        if request.method in ("GET", "HEAD", "OPTIONS") and not _has_body(request):
            return None  # a body on these is unusual, but any that comes is held to the same limit
        limit = view_body_limit(view_func)
        if request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower() not in ("", "identity"):
            # Nothing decodes a content coding: a gzip body would be read as its compressed bytes,
            # and a plain one labelled gzip as if the label were not there. Its body is not read.
            request.META[CLOSE_CONNECTION] = True
            return body_refused(request, 415, "Send the body without a Content-Encoding: none is decoded here.",
                                "unsupported_media_type")
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return error_page(request, 400, "Content-Length is not a number.")
        chunked = declared <= 0 and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and (request.content_type == "multipart/form-data"
                        or not request.META.get("wsgi.input_terminated")):
            return body_refused(request, 411, "Send the body with a Content-Length: a chunked body is not read here.")
        if request.content_type == "multipart/form-data":
            if declared > limit:
                return too_large_response(request, view_func, max_bytes=limit, observed_bytes=0)
            return None
        if declared <= 0 and not chunked:
            return None
        # A chunked body (no Content-Length; gunicorn ends the stream at its last chunk) is read
        # from the server's stream itself: Django reads no more than Content-Length, so nothing.
        read = request.META["wsgi.input"].read if chunked else request.read
        chunks: list[bytes] = []
        observed = 0
        try:
            while observed <= limit:
                chunk = read(min(_READ_CHUNK, limit + 1 - observed))
                if not chunk:
                    break
                chunks.append(chunk)
                observed += len(chunk)
        except _UNREADABLE_BODY:
            request.META[CLOSE_CONNECTION] = True  # where the next request would start is unknown
            if request.META.get(BODY_TIMED_OUT):
                return body_timed_out(request)
            return body_refused(request, 400, "The request body could not be read: its chunked encoding is "
                                              "malformed or it ended early.")
        if observed > limit:
            return too_large_response(request, view_func, max_bytes=limit, observed_bytes=observed)
        if not chunked and observed < declared:
            # The client stopped sending (a half-close) before its Content-Length: what came is
            # not the body it announced, though it may parse as one.
            request.META[CLOSE_CONNECTION] = True
            return body_refused(request, 400, body_ended_early_message(observed, declared))
        body = b"".join(chunks)
        if chunked:  # its length is known now (DRF reads no body without one)
            request.META["CONTENT_LENGTH"] = str(len(body))
        # Hand the bytes back to Django as if nothing had been read.
        request._body = body
        request._stream = io.BytesIO(body)
        request._read_started = False  # type: ignore[attr-defined]  # private HttpRequest state the stubs omit
        return None


class CommonMiddleware(DjangoCommonMiddleware):
    """Django's, where APPEND_SLASH never fires under the no-redirect prefixes: agent hosts follow
    no redirect, so a path that only exists with a slash is 404 there like any unknown one."""

    def should_redirect_with_slash(self, request: HttpRequest) -> bool:
        if under_prefix(request.path, settings.BAILING_NO_REDIRECT_PREFIXES):
            return False
        return bool(super().should_redirect_with_slash(request))


class ApiExceptionMiddleware:
    """Under the JSON prefixes, errors raised outside DRF and non-JSON error pages become JSON."""

    def __init__(self, get_response: GetResponse) -> None:
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

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
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
        if mark(request, exception):
            return None  # ServiceUnavailableMiddleware answers 503
        logger.exception("Unhandled error in %s", request.path)
        return error_response(500)


class ContentCharsetMiddleware:
    """A body in a charset the API does not read is 415 (400 invalid_request where the contract
    has no 415) before anything decodes it.

    Django takes any codec Python knows as the request encoding, text or not (`rot13`, `zlib`,
    `hex`), and DRF's parsers would decode with it. Under the JSON prefixes only UTF-8 is accepted;
    elsewhere (forms in the console) a codec that is not a text encoding is refused.
    """

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        from apps.core.parsers import UnsupportedCharset, charset_is_utf8, content_charset

        content_type = request.META.get("CONTENT_TYPE", "")
        charset = content_charset(content_type)
        if charset is None or charset_is_utf8(content_type):
            return self.get_response(request)
        if is_json_path(request.path):
            return body_refused(request, UnsupportedCharset.status, UnsupportedCharset.message, UnsupportedCharset.code)
        if not _is_text_encoding(charset):
            return error_page(request, 415, f"The charset {charset[:40]!r} is not a text encoding.")
        return self.get_response(request)


def _is_text_encoding(charset: str) -> bool:
    import codecs

    try:
        return bool(getattr(codecs.lookup(charset), "_is_text_encoding", True))
    except LookupError:
        return True  # Django ignores an unknown charset and reads UTF-8


def unavailable_response(request: HttpRequest) -> HttpResponse:
    """503 + Retry-After in the caller's shape: a JSON error under the API prefixes, else a page
    that reloads by itself."""
    response: HttpResponse
    if is_json_path(request.path):
        response = error_response(503, MESSAGE, unavailable_code(request.path))
    else:
        response = HttpResponse(
            "<!doctype html><title>Temporarily unavailable</title><h1>Temporarily unavailable</h1>"
            f"<p>{MESSAGE} This page reloads by itself.</p>"
            f'<meta http-equiv="refresh" content="{RETRY_AFTER_SECONDS}">',
            status=503, content_type="text/html; charset=utf-8",
        )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class ServiceUnavailableMiddleware:
    """Turns a 5xx of a request marked by `mark` into 503 + Retry-After. It never touches the
    database or Redis itself, so it answers while they are down."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            response = self.get_response(request)
        except Exception as exc:  # an exception that escaped every other handler
            if not mark(request, exc):
                raise
            return unavailable_response(request)
        if response.status_code >= 500 and getattr(request, "_backing_service_unavailable", False):
            return unavailable_response(request)
        return response
