"""The projects app's errors: the builder API's shared ones (apps.projects.builder, and the project a
new KB or tool provider goes into), with the contract's codes and statuses."""

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


class ProjectNotFound(ApiError):
    code = "project_not_found"
    status = 404
    message = "Project not found."


class ProjectForbidden(ApiError):
    code = "forbidden"
    status = 403
    message = "Your role in this project does not allow this change."
