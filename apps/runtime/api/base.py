"""Base views of `/agent-api/v1`: agent bearer authentication, route resolution, conditional GETs.

Every `/workspaces/:route/...` endpoint subclasses `WorkspaceApi`: the route is resolved once,
through `apps.agent_auth.selectors.session_route_get`, before the handler runs, and is
`self.route`; `request.auth` is the AgentSession. Set `require_runtime = False` on an endpoint
that must work with the route's agent-client switch off (system info).
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.agent_auth.authentication import AgentBearerAuthentication
from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import session_route_get
from apps.core.revisions import revision_of
from apps.routes.models import Route


class AgentApi(APIView):
    """An endpoint for a local agent holding an access token."""

    authentication_classes = [AgentBearerAuthentication]
    permission_classes = [IsAuthenticated]

    @property
    def session(self) -> AgentSession:
        return self.request.auth


class WorkspaceApi(AgentApi):
    """An endpoint under `/workspaces/<route>/`: `self.route` is the route as this session may use it."""

    require_runtime = True
    route: Route

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication first: 401 before any route error
        self.route = session_route_get(session=request.auth, key=kwargs["route"], require_runtime=self.require_runtime)


def _etag_matches(header: str, etag: str) -> bool:
    candidates = [part.strip() for part in header.split(",")]
    return any(candidate == "*" or candidate.removeprefix("W/") == etag for candidate in candidates)


def conditional_response(request, payload: dict[str, Any]) -> Response:
    """200 with an ETag over the body, or 304 without a body when If-None-Match names it."""
    etag = f'"{revision_of(payload)}"'
    if _etag_matches(request.headers.get("If-None-Match", ""), etag):
        return Response(status=304, headers={"ETag": etag})
    return Response(payload, headers={"ETag": etag})
