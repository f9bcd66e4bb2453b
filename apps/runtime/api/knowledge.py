"""Agent knowledge endpoints (`bailing.agent-knowledge.v1`): capabilities, search, read.

They need the route's runtime switch but not direct business tools. Responses are rendered by
CompactJSONRenderer, the renderer the byte budgets are measured with.
"""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.response import Response

from apps.core.fields import ExactFieldsSerializer, StrictCharField
from apps.core.jsonbytes import CompactJSONRenderer
from apps.core.validators import uuid_parse
from apps.runtime import knowledge
from apps.runtime.api.base import WorkspaceApi
from apps.runtime.api.serializers import allowed_characters
from apps.tasks.services import session_task_enforced, task_run_check, task_run_verify

# A query of 2000 characters, each escaped as a surrogate pair (12 bytes), plus the envelope.
SEARCH_BODY_MAX_BYTES = 32 * 1024
# The body limit bounds a reference or cursor too; one longer than any issued (the signer's
# MAX_TOKEN_CHARS) is refused by its check, as `knowledge_reference_invalid`.
READ_BODY_MAX_BYTES = 16 * 1024


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: no strings, booleans or floats."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class RunIdField(StrictCharField):
    def to_internal_value(self, data):
        run_id = uuid_parse(super().to_internal_value(data))
        if run_id is None:
            raise serializers.ValidationError("run_id must be a UUID (8-4-4-4-12 hex digits).")
        return run_id


class KnowledgeSearchSerializer(ExactFieldsSerializer):
    query = StrictCharField(max_length=knowledge.QUERY_MAX_CHARS, trim_whitespace=False,
                            validators=[allowed_characters])
    limit = StrictIntegerField(min_value=1, max_value=knowledge.SEARCH_MAX_RESULTS, required=False,
                               default=knowledge.SEARCH_MAX_RESULTS)
    run_id = RunIdField(required=False, allow_null=True, default=None)

    def validate_query(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("The query must not be empty.")
        return value


class KnowledgeReadSerializer(ExactFieldsSerializer):
    # Any string is a reference to check: a malformed one (an over-long one included) is
    # `knowledge_reference_invalid`, never `invalid_request` (the protocol's code for a tampered one).
    ref = StrictCharField(trim_whitespace=False, allow_blank=True)
    run_id = RunIdField(required=False, allow_null=True, default=None)
    cursor = StrictCharField(trim_whitespace=False, required=False, allow_null=True, allow_blank=True, default=None)
    max_bytes = StrictIntegerField(min_value=knowledge.READ_MIN_BYTES, max_value=knowledge.READ_MAX_BYTES,
                                   required=False, default=knowledge.READ_DEFAULT_BYTES)


class KnowledgeApi(WorkspaceApi):
    renderer_classes = [CompactJSONRenderer]


class KnowledgeCapabilitiesApi(KnowledgeApi):
    def get(self, request, route):
        return Response(knowledge.knowledge_capabilities(route=self.route))


class KnowledgeSearchApi(KnowledgeApi):
    body_max_bytes = SEARCH_BODY_MAX_BYTES

    def post(self, request, route):
        serializer = KnowledgeSearchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        run = None
        if data["run_id"] is not None:
            run = knowledge.run_get_current(session=request.auth, route=self.route, run_id=data["run_id"])
        task_run_check(session=request.auth, run=run)
        return Response(knowledge.knowledge_search_hints(session=request.auth, route=self.route, query=data["query"],
                                                         limit=data["limit"], run=run))


class KnowledgeReadApi(KnowledgeApi):
    body_max_bytes = READ_BODY_MAX_BYTES

    def post(self, request, route):
        serializer = KnowledgeReadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        run_id = serializer.validated_data.get("run_id")
        if session_task_enforced(session=request.auth):  # membership is checked like everywhere else
            run = None if run_id is None else knowledge.run_get_current(session=request.auth, route=self.route,
                                                                         run_id=run_id)
            task_run_verify(run=run)
        return Response(knowledge.knowledge_read(session=request.auth, route=self.route, **serializer.validated_data))
