"""The projects app's errors: the builder API's shared ones (apps.projects.builder), with the
contract's codes and statuses."""

from __future__ import annotations

from apps.core.errors import ApiError


class InsufficientScope(ApiError):
    code = "insufficient_scope"
    status = 403
    message = "The token lacks the scope this operation needs."


class InvalidFields(ApiError):
    code = "invalid_request"
    status = 422
    message = "Some fields are invalid."
