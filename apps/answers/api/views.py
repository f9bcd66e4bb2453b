"""The RAG answers API under /api/v1/routes/{route_key}/rag/: ask, list, feedback, report.

Operators by session or operator token; asking and feedback need `knowledge:query`, the reads
any knowledge scope. Routes are found only in the operator's projects (selectors)."""

from __future__ import annotations

import uuid

from rest_framework.response import Response

from apps.answers import selectors, services
from apps.answers.api.serializers import RagFeedbackIn, RagQueryIn, rag_query_out
from apps.answers.errors import RagFeedbackInvalid, RagQueryInvalid, RagQueryNotFound
from apps.core.exceptions import validation_extra, validation_message
from apps.ledger.rag import rag_query_feedback
from apps.projects.builder import BuilderApi, newest_first_page, query_boolean, query_error, query_integer
from apps.projects.models import OperatorToken

SCOPE_QUERY = OperatorToken.Scope.KNOWLEDGE_QUERY
LIST_LIMIT_MAX = 500
OFFSET_MAX = 10**9
FEEDBACK_FILTERS = ("helpful", "unhelpful", "none", "any")




def _route(request, route_key: str):
    raw = request.query_params.get("project_id")
    project_id = None
    if raw:
        try:
            project_id = str(uuid.UUID(raw))
        except ValueError:
            raise query_error("project_id", "A project UUID is required.") from None
    return selectors.route_get_for_operator(user=request.user, route_key=route_key, project_id=project_id)


def _validated(serializer_class, data, error_class) -> dict:
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        extra = validation_extra(serializer.errors)
        raise error_class(validation_message(extra["fields"]), **extra)
    return serializer.validated_data


class RagQueryApi(BuilderApi):
    """Answer a question from the route's knowledge with cited evidence; always recorded when the
    database allows (`query_id` is null when the record could not be written)."""

    required_scope = SCOPE_QUERY
    invalid_error = RagQueryInvalid

    def post(self, request, route_key):
        route = _route(request, route_key)
        data = _validated(RagQueryIn, request.data, RagQueryInvalid)
        answer = services.rag_query_answer(route=route, question=data["question"],
                                           conversation_id=data["conversation_id"] or "", user=request.user)
        return Response(answer.to_public())


class RagQueryListApi(BuilderApi):
    def get(self, request, route_key):
        route = _route(request, route_key)
        feedback = request.query_params.get("feedback") or None
        if feedback is not None and feedback not in FEEDBACK_FILTERS:
            raise query_error("feedback", "One of " + ", ".join(FEEDBACK_FILTERS) + " is required.")
        queryset = selectors.rag_query_list(route=route, feedback=feedback,
                                            grounded=query_boolean(request, "grounded"))
        rows, meta = newest_first_page(request, queryset, limit_max=LIST_LIMIT_MAX, offset_max=OFFSET_MAX)
        return Response({"data": [rag_query_out(row) for row in rows], "meta": meta})


class RagFeedbackApi(BuilderApi):
    required_scope = SCOPE_QUERY
    invalid_error = RagFeedbackInvalid

    def post(self, request, route_key, query_id):
        route = _route(request, route_key)
        try:
            query_uuid = uuid.UUID(str(query_id))
        except ValueError:
            raise RagQueryNotFound() from None
        query = selectors.rag_query_get(route=route, query_id=query_uuid)
        data = _validated(RagFeedbackIn, request.data, RagFeedbackInvalid)
        query = rag_query_feedback(query=query, helpful=data["helpful"], note=data["note"] or "")
        return Response({"data": rag_query_out(query)})


class RagReportApi(BuilderApi):
    def get(self, request, route_key):
        route = _route(request, route_key)
        days = query_integer(request, "days", selectors.REPORT_DAYS_DEFAULT, 1, selectors.REPORT_DAYS_MAX)
        return Response({"data": selectors.rag_report(route=route, days=days)})
