"""Agent tool discovery: capability search, tool detail and the legacy catalog. Read-only: no
invocation, no approval, no business call. Route checks in the tool contract's order
(`ToolRouteApi`); the surface comes from `apps.tools.surface.route_surface`, like every tool view."""

from __future__ import annotations

import re

from django.core.validators import ProhibitNullCharactersValidator
from rest_framework import serializers
from rest_framework.response import Response

from apps.core.errors import InvalidRequest
from apps.core.fields import ExactFieldsSerializer, StrictCharField
from apps.core.jsonbytes import CompactJSONRenderer
from apps.core.query import query_repeated_check
from apps.ledger.selectors import run_get_for_route, run_user_input
from apps.routes.validators import TOOL_NAME_RE
from apps.runtime.api.base import ToolRouteApi
from apps.runtime.api.knowledge import RunIdField, StrictIntegerField
from apps.tasks.services import task_run_check
from apps.tools import catalog
from apps.tools.errors import ToolNotFound
from apps.tools.ranking import QUERY_MAX_CHARS, query_clean
from apps.tools.surface import route_surface

SEARCH_BODY_MAX_BYTES = 32 * 1024
REVISION_RE = re.compile(r"^[0-9a-f]{64}$")


class QueryField(StrictCharField):
    """The search query: control characters (NUL included) are removed later, not refused."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]


class CapabilitySearchSerializer(ExactFieldsSerializer):
    query = QueryField(max_length=QUERY_MAX_CHARS, trim_whitespace=False, allow_blank=True, required=False,
                       allow_null=True, default=None)
    run_id = RunIdField(required=False, allow_null=True, default=None)
    limit = StrictIntegerField(min_value=1, max_value=catalog.SEARCH_MAX_LIMIT, required=False,
                               default=catalog.SEARCH_DEFAULT_LIMIT)

    def validate(self, attrs):
        attrs["query"] = query_clean(attrs["query"] or "")
        if not attrs["query"] and attrs["run_id"] is None:
            raise serializers.ValidationError({"query": ["Give a non-empty query or the run_id of a turn."]})
        return attrs


class ToolApi(ToolRouteApi):
    # The renderer the byte budgets are measured with.
    renderer_classes = [CompactJSONRenderer]


class CapabilitySearchApi(ToolApi):
    body_max_bytes = SEARCH_BODY_MAX_BYTES

    def post(self, request, route):
        serializer = CapabilitySearchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        query = data["query"]
        run = None
        if data["run_id"] is not None:
            run = run_get_for_route(session=request.auth, route=self.route, run_id=data["run_id"])
            query = query or query_clean(run_user_input(run=run))
        pin = task_run_check(session=request.auth, run=run)  # a bound run offers its member's tools only
        surface = route_surface(route=self.route, session=request.auth)
        return Response(catalog.capability_search(surface=surface, query=query, limit=data["limit"],
                                                  allowed=pin.member.allowed_tools if pin else None))


def _query_params(request, allowed: set[str]) -> dict[str, str]:
    params = request.query_params
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise InvalidRequest(f"Unknown query parameter: {', '.join(unknown)}.", field=unknown[0])
    query_repeated_check(params)
    return {key: params[key] for key in params}


class ToolDetailApi(ToolApi):
    def get(self, request, name):
        params = _query_params(request, {"route", "capability_revision"})
        revision = params.get("capability_revision", "")
        if not REVISION_RE.fullmatch(revision):
            raise InvalidRequest("capability_revision: give the 64 lower-case hex characters of the current "
                                 "capability revision.", field="capability_revision")
        if not TOOL_NAME_RE.fullmatch(name):
            raise ToolNotFound()
        surface = route_surface(route=self.route, session=request.auth)
        return Response(catalog.tool_detail(surface=surface, name=name, capability_revision=revision))


class ToolCatalogApi(ToolApi):
    require_runtime = False

    def get(self, request):
        _query_params(request, {"route"})
        return Response(catalog.tool_catalog(surface=route_surface(route=self.route, session=request.auth)))
