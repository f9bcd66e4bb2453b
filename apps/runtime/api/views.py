"""The workspace endpoints of Agent Client Runtime v1."""

from __future__ import annotations

from rest_framework.response import Response

from apps.agent_auth.selectors import session_route_list
from apps.runtime.api.base import AgentApi, WorkspaceApi, conditional_response
from apps.runtime.selectors import workspace_bootstrap, workspace_list, workspace_system_info


class WorkspaceListApi(AgentApi):
    def get(self, request):
        return conditional_response(request, workspace_list(routes=session_route_list(session=request.auth)))


class WorkspaceSystemInfoApi(WorkspaceApi):
    require_runtime = False

    def get(self, request, route):
        return Response(workspace_system_info(route=self.route, session=request.auth))


class WorkspaceBootstrapApi(WorkspaceApi):
    def get(self, request, route):
        return conditional_response(request, workspace_bootstrap(route=self.route, session=request.auth))
