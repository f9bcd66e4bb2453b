"""The tools and routes part of the builder API, mounted at /api/v1/builder/."""

from django.urls import path

from apps.projects.builder import by_method
from apps.tools.api import approvals
from apps.tools.api import views as v

urlpatterns = [
    path("tool-providers", by_method(get=v.ToolProviderListApi.as_view(), post=v.ToolProviderCreateApi.as_view()),
         name="tool-providers"),
    path("tool-providers/<uuid:provider_id>",
         by_method(get=v.ToolProviderGetApi.as_view(), delete=v.ToolProviderDeleteApi.as_view()),
         name="tool-provider"),
    path("tool-providers/<uuid:provider_id>/spec", v.ToolProviderSpecApi.as_view(), name="tool-provider-spec"),
    path("routes/<str:route_key>",
         by_method(get=v.RouteConfigGetApi.as_view(), patch=v.RouteConfigUpdateApi.as_view()),
         name="builder-route"),
    path("routes/<str:route_key>/dry-run", v.RouteDryRunApi.as_view(), name="builder-route-dry-run"),
    path("approvals/<str:approval_id>/decision", approvals.ApprovalDecisionApi.as_view(),
         name="builder-approval-decision"),
]
