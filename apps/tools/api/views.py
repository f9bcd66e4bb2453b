"""The tools and routes builder API: one class per operation, each validating input, calling one
service or selector and answering ``{"data": ...}``. Scoping is in apps.tools.builder."""

from __future__ import annotations

import uuid
from typing import Any

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.errors import ApiError
from apps.core.validators import uuid_parse
from apps.projects.builder import BuilderApi, builder_validated, query_error, query_integer
from apps.projects.models import OperatorToken
from apps.projects.selectors import project_get_editable, project_list_visible
from apps.tools import builder, selectors, services
from apps.tools.api.serializers import (
    RouteUpdateIn,
    ToolProviderCreateIn,
    ToolProviderSpecIn,
    provider_out,
    route_out,
)
from apps.tools.compiler.loader import MAX_SPEC_BYTES
from apps.tools.errors import InvalidRouteSettings, InvalidToolProvider
from apps.tools.route_tools import UNSET

SCOPE_TOOLS = OperatorToken.Scope.TOOLS_WRITE
SCOPE_ROUTES = OperatorToken.Scope.ROUTES_WRITE
# A spec at its limit, written as a JSON string (escapes may double it), plus the other fields.
SPEC_BODY_MAX_BYTES = 2 * MAX_SPEC_BYTES + 64 * 1024
LIST_LIMIT_MAX = 500
_AGENT_DIRECT_FIELDS = {"enabled": "tools_direct_enabled", "write_tools": "write_tools",
                        "force_approval_tools": "force_approval_tools",
                        "unattended_write_tools": "unattended_write_tools", "max_tool_calls": "max_tool_calls"}


def _validated(serializer_class: Any, data: Any, error: type[ApiError]) -> dict[str, Any]:
    return builder_validated(serializer_class, data, error=error)


def _project_id(request: Request) -> uuid.UUID | None:
    raw = request.query_params.get("project_id")
    if not raw:
        return None
    project_id = uuid_parse(raw)
    if project_id is None:
        raise query_error("project_id", "A project UUID is required.")
    return project_id


def _page(request: Request) -> tuple[int, int]:
    return query_integer(request, "offset", 0, 0, 10**9), query_integer(request, "limit", 100, 1, LIST_LIMIT_MAX)


class ToolsBuilderApi(BuilderApi):
    """Reads need any tools: or routes: scope; each write names its own."""

    scope_family = ("tools", "routes")


class _SpecBody:
    """The body limit of the views that take a spec (read by apps.core.middleware before the view
    runs), and the refusal it answers: the spec's own, with its reason."""

    body_max_bytes = SPEC_BODY_MAX_BYTES

    @staticmethod
    def body_too_large_payload(*, max_bytes: int, observed_bytes: int) -> dict[str, Any]:
        message = f"The request is {observed_bytes} bytes; a spec may be at most {MAX_SPEC_BYTES} bytes."
        return {"code": "spec_refused", "reason": "spec_too_large", "message": message, "max_bytes": max_bytes,
                "fields": {"spec": [message]}}


class ToolProviderListApi(ToolsBuilderApi):
    def get(self, request: Request) -> Response:
        offset, limit = _page(request)
        projects = project_list_visible(user=request.user)
        project_id = _project_id(request)
        if project_id is not None:
            projects = projects.filter(pk=project_id)
        queryset = selectors.provider_list(projects=projects)
        total = queryset.count()
        return Response({"data": [provider_out(p) for p in queryset[offset: offset + limit]],
                         "meta": {"total": total, "offset": offset, "limit": limit}})


class ToolProviderCreateApi(_SpecBody, ToolsBuilderApi):
    required_scope = SCOPE_TOOLS
    invalid_error = InvalidToolProvider

    def post(self, request: Request) -> Response:
        data = _validated(ToolProviderCreateIn, request.data, InvalidToolProvider)
        project = project_get_editable(user=request.user, project_id=data["project_id"])
        outcome, generated = builder.provider_create(
            project=project, name=data["name"], base_url=data["base_url"], secret=data.get("secret"),
            spec=data["spec"], spec_filename=data["spec_filename"], enabled=data["enabled"])
        body = provider_out(outcome.provider, tools=list(selectors.tool_list(provider=outcome.provider)), report=True)
        if generated is not None:
            body["signing_secret"] = generated  # shown once: only its encryption is stored
        return Response({"data": body}, status=status.HTTP_201_CREATED)


class ToolProviderGetApi(ToolsBuilderApi):
    def get(self, request: Request, provider_id: uuid.UUID) -> Response:
        provider = builder.provider_get_visible(user=request.user, provider_id=provider_id)
        return Response({"data": provider_out(provider, tools=list(selectors.tool_list(provider=provider)),
                                              report=True)})


class ToolProviderDeleteApi(ToolsBuilderApi):
    required_scope = SCOPE_TOOLS

    def delete(self, request: Request, provider_id: uuid.UUID) -> Response:
        services.provider_delete(provider=builder.provider_get_editable(user=request.user, provider_id=provider_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ToolProviderSpecApi(_SpecBody, ToolsBuilderApi):
    required_scope = SCOPE_TOOLS
    invalid_error = InvalidToolProvider

    def put(self, request: Request, provider_id: uuid.UUID) -> Response:
        provider = builder.provider_get_editable(user=request.user, provider_id=provider_id)
        data = _validated(ToolProviderSpecIn, request.data, InvalidToolProvider)
        outcome, revisions = builder.provider_spec_replace(provider=provider, spec=data["spec"],
                                                           spec_filename=data["spec_filename"])
        diff = outcome.diff
        return Response({"data": {
            "provider": provider_out(outcome.provider, tools=list(selectors.tool_list(provider=outcome.provider)),
                                     report=True),
            "diff": {"added": list(diff.added), "removed": list(diff.removed), "changed": list(diff.changed),
                     "switched_off": list(diff.switched_off), "switched_on": list(diff.switched_on),
                     "routes_losing_tools": {key: list(names) for key, names in diff.routes_losing.items()}},
            "capability_revisions_changed": [
                {"route_key": change.route_key, "before": change.before, "after": change.after}
                for change in revisions],
        }})


def _route_body(route: Any) -> dict[str, Any]:
    return route_out(route, sources=list(builder.route_tool_sources(route=route)),
                     knowledge_base_ids=builder.route_knowledge_base_ids(route=route))


class RouteConfigGetApi(ToolsBuilderApi):
    def get(self, request: Request, route_key: str) -> Response:
        route = builder.route_get_visible(user=request.user, route_key=route_key, project_id=_project_id(request))
        return Response({"data": _route_body(route)})


class RouteConfigUpdateApi(ToolsBuilderApi):
    required_scope = SCOPE_ROUTES
    invalid_error = InvalidRouteSettings

    def patch(self, request: Request, route_key: str) -> Response:
        route = builder.route_get_editable(user=request.user, route_key=route_key, project_id=_project_id(request))
        data = _validated(RouteUpdateIn, request.data, InvalidRouteSettings)
        tools = data.get("tools", {})
        policy = {_AGENT_DIRECT_FIELDS[key]: value for key, value in tools.get("agent_direct", {}).items()}
        if "permission" in tools:
            policy["permission"] = tools["permission"]
        sources = UNSET
        if "sources" in tools:
            sources = [builder.SourceIn(provider_id=s["provider_id"], allowed_tools=s["allowed_tools"])
                       for s in tools["sources"]]
        ids = data["bindings"]["knowledge_base_ids"] if "bindings" in data else UNSET
        route = builder.route_config_update(route=route, change=builder.RouteChange(
            sources=sources, knowledge_base_ids=ids, policy=policy))
        return Response({"data": _route_body(route)})


class RouteDryRunApi(ToolsBuilderApi):
    def get(self, request: Request, route_key: str) -> Response:
        route = builder.route_get_visible(user=request.user, route_key=route_key, project_id=_project_id(request))
        return Response({"data": {"route_key": route.key, **builder.route_dry_run(route=route)}})
