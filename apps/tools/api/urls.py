"""The tools and routes part of the builder API, mounted at /api/v1/builder/."""

from collections.abc import Callable
from typing import Any

from django.urls import path

from apps.knowledge.api import views as knowledge_views
from apps.tools.api import approvals
from apps.tools.api import views as v

# One URL, one view class per method: the knowledge builder API's dispatcher (untyped there).
by_method: Callable[..., Any] = knowledge_views.by_method

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
