"""The error model: every error a caller sees is an ApiError with a stable code and HTTP status.

Services raise subclasses (or ApiError with a code); one exception handler renders
{"error": code, "message": message, **extra}.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    code = "error"
    status = 400
    message = "The request could not be processed."
    # Seconds a caller should wait before retrying, sent as Retry-After (an unavailable service).
    retry_after: int | None = None

    def __init__(self, message: str | None = None, *, code: str | None = None, status: int | None = None,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        self.message = message or self.message
        self.code = code or self.code
        self.status = status or self.status
        if headers is None and self.retry_after is not None:
            headers = {"Retry-After": str(self.retry_after)}
        self.headers = headers or {}
        self.extra = extra
        super().__init__(self.message)

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.extra}


class InvalidRequest(ApiError):
    code = "invalid_request"
    status = 400
    message = "The request is invalid."


def malformed_body(detail: object) -> InvalidRequest:
    """A body its parser refused, for the contracts that call it `invalid_request` (the tool
    contract, Agent Auth): the parser's `detail` says what and where, and is the whole message."""
    return InvalidRequest(str(detail))


class UnsupportedMediaType(ApiError):
    code = "unsupported_media_type"
    status = 415
    message = "The body must be JSON (Content-Type: application/json, in UTF-8)."


def json_body_required_text(content_type: str | None) -> str:
    """What a JSON-only API says of a body of another media type: what to send, and what came."""
    media_type = (content_type or "").split(";", 1)[0].strip()[:80]
    sent = f"not {media_type!r}" if media_type else "this request named none"
    return f"{UnsupportedMediaType.message[:-1]}, {sent}."


def json_body_required(content_type: str | None) -> UnsupportedMediaType:
    return UnsupportedMediaType(json_body_required_text(content_type))


class Unauthorized(ApiError):
    code = "unauthorized"
    status = 401
    message = "Authentication is required."


class NotFound(ApiError):
    code = "not_found"
    status = 404
    message = "Not found."


class RateLimited(ApiError):
    code = "rate_limited"
    status = 429
    message = "Too many requests; retry later."
