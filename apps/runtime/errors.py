"""Errors of the runtime endpoints (turns, knowledge) that are not the ledger's."""

from __future__ import annotations

from apps.core.errors import ApiError


class KnowledgeUnavailable(ApiError):
    code = "knowledge_unavailable"
    status = 503
    message = "Knowledge search is unavailable right now; nothing was stored. Retry the same turn."

    retry_after = 5


class KnowledgeReferenceInvalid(ApiError):
    code = "knowledge_reference_invalid"
    status = 400
    message = "This knowledge reference or cursor is not valid for this session, route and run; search again."


class KnowledgeReferenceExpired(ApiError):
    code = "knowledge_reference_expired"
    status = 410
    message = "This knowledge reference has expired; search again."


class KnowledgeScopeChanged(ApiError):
    code = "knowledge_scope_changed"
    status = 409
    message = "The route's knowledge configuration changed since this reference was issued; search again."


class KnowledgeChanged(ApiError):
    code = "knowledge_changed"
    status = 409
    message = "The document changed, was removed or is no longer ready; search again."


class RunNotActive(ApiError):
    code = "run_not_active"
    status = 409
    message = "This run is not ready for knowledge requests: it is still being prepared or has finished."
