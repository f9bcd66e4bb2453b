"""Errors of the runtime turn endpoints that are not the ledger's."""

from __future__ import annotations

from apps.core.errors import ApiError


class UnsupportedOption(ApiError):
    code = "unsupported_option"
    status = 400
    message = "This option is not supported by this server."


class KnowledgeUnavailable(ApiError):
    code = "knowledge_unavailable"
    status = 503
    message = "Knowledge search is unavailable right now; nothing was stored. Retry the same turn."

    def __init__(self, message: str | None = None, **kwargs):
        kwargs.setdefault("headers", {"Retry-After": "5"})
        super().__init__(message, **kwargs)
