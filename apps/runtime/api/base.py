"""Base views of `/agent-api/v1`: agent bearer authentication, route resolution, conditional GETs.

Every `/workspaces/:route/...` endpoint subclasses `WorkspaceApi`: the route is resolved once,
through `apps.agent_auth.selectors.session_route_get`, before the handler runs, and is
`self.route`; `request.auth` is the AgentSession. Set `require_runtime = False` on an endpoint
that must work with the route's agent-client switch off (system info).
"""

from __future__ import annotations

from typing import Any, cast

from rest_framework.exceptions import NotAuthenticated, ParseError, UnsupportedMediaType
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.agent_auth.authentication import REFUSED_MISSING, AgentBearerAuthentication, refused
from apps.agent_auth.errors import (
    AgentClientDisabled,
    AudienceNotAllowed,
    InvalidRoute,
    RouteNotAllowed,
    RouteUnavailable,
)
from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import route_admits_audience, session_route_get, session_route_keys
from apps.agent_auth.validators import route_key_is_valid
from apps.core.errors import json_body_required, malformed_body
from apps.core.jsonbytes import CompactJSONRenderer
from apps.core.negotiation import AgentContentNegotiation
from apps.core.revisions import revision_of
from apps.routes.models import Route
from apps.routes.selectors import enabled_route_get
from apps.tools.errors import AgentDirectDisabled


class AgentApi(APIView):
    """An endpoint for a local agent holding an access token.

    Answers are rendered compact whatever the Accept header asks: an `indent` made the bytes
    sent differ from the bytes measured (a turn's 64 KiB context, a listing's 1 MiB) and from
    the representation an ETag names.

    A body that cannot be parsed is 400 `invalid_request`, with the parser's account of what and
    where, on every endpoint: the tool contract names that code for it (§2), and no agent
    contract names another (turns and complete said `invalid_json`). A body of another media type
    stays 415 `unsupported_media_type`, saying what to send (DRF's text named only what came)."""

    authentication_classes = [AgentBearerAuthentication]
    permission_classes = [IsAuthenticated]
    content_negotiation_class = AgentContentNegotiation
    renderer_classes = [CompactJSONRenderer]

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, ParseError):
            exc = malformed_body(exc.detail)
        elif isinstance(exc, UnsupportedMediaType):
            exc = json_body_required(self.request.content_type)
        elif isinstance(exc, NotAuthenticated):
            exc = refused(REFUSED_MISSING)  # no Authorization header: what to send
        return super().handle_exception(exc)

    @property
    def session(self) -> AgentSession:
        # AgentBearerAuthentication puts the session there; DRF types `request.auth` as a Token.
        return cast(AgentSession, self.request.auth)


class WorkspaceApi(AgentApi):
    """An endpoint under `/workspaces/<route>/`: `self.route` is the route as this session may use it."""

    require_runtime = True
    route: Route

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication first: 401 before any route error
        self.route = session_route_get(session=request.auth, key=kwargs["route"], require_runtime=self.require_runtime)


def tool_route_get(*, session: AgentSession, key: Any, require_runtime: bool) -> Route:
    """The route `key` for a tool endpoint, checked in the tool contract's order: 400
    `invalid_route` (malformed or missing), 403 `route_not_allowed` (outside the client's or the
    session's `allowed_routes`), 404 `route_unavailable` (missing or disabled), 403
    `agent_client_disabled` (with `require_runtime`), 403 `agent_direct_disabled`, 403
    `audience_not_allowed`. One query."""
    if key is None:
        raise InvalidRoute("route is missing: name the workspace (its route key).")
    if not isinstance(key, str) or not route_key_is_valid(key):
        raise InvalidRoute()
    if key not in session_route_keys(session):
        raise RouteNotAllowed("This route is not within the client's and the session's allowed routes.")
    route = enabled_route_get(project_id=session.client.project_id, key=key)
    if route is None:
        raise RouteUnavailable()
    if require_runtime and not route.agent_client_enabled:
        raise AgentClientDisabled()
    if not route.tools_direct_enabled:
        raise AgentDirectDisabled()
    if not route_admits_audience(route=route, audience=session.audience or None):
        raise AudienceNotAllowed()
    return route


class ToolRouteApi(AgentApi):
    """A tool endpoint: `self.route` is checked by `tool_route_get`, from the `route` URL segment
    or, for the `/tools` paths, the `route` query parameter. The legacy catalog sets
    `require_runtime = False`: the route's agent-client switch does not close it."""

    require_runtime = True
    route: Route

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if "route" in kwargs:
            key = kwargs["route"]
        else:  # a missing or repeated `route` parameter names no route: invalid_route
            values = request.query_params.getlist("route")
            key = values[0] if len(values) == 1 else None
        self.route = tool_route_get(session=request.auth, key=key, require_runtime=self.require_runtime)


def _etag_matches(header: str, etag: str) -> bool:
    candidates = [part.strip() for part in header.split(",")]
    return any(candidate == "*" or candidate.removeprefix("W/") == etag for candidate in candidates)


def conditional_response(request, payload: dict[str, Any]) -> Response:
    """200 with an ETag over the body, or 304 without a body when If-None-Match names it."""
    etag = f'"{revision_of(payload)}"'
    if _etag_matches(request.headers.get("If-None-Match", ""), etag):
        return Response(status=304, headers={"ETag": etag})
    return Response(payload, headers={"ETag": etag})
