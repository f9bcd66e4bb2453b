"""Errors of the RAG answers API, each with its contract code and HTTP status."""

from __future__ import annotations

from apps.core.errors import ApiError

DEPENDENCY_UNAVAILABLE = "DEPENDENCY_UNAVAILABLE"
FAILED_RETRIEVAL = "FAILED_RETRIEVAL"


class RouteNotFound(ApiError):
    code = "route_not_found"
    status = 404
    message = "Route not found."


class RouteAmbiguous(ApiError):
    code = "invalid_request"
    status = 400
    message = "project_id: Several of your projects have a route with this key; name the project."


class RagQueryInvalid(ApiError):
    code = "invalid_rag_query"
    status = 422
    message = "The question is invalid."


class RagFeedbackInvalid(ApiError):
    code = "invalid_feedback"
    status = 422
    message = "The feedback is invalid."


class RagQueryNotFound(ApiError):
    code = "rag_query_not_found"
    status = 404
    message = "RAG query not found."
