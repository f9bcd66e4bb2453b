from django.urls import path

from apps.runtime.api import views

# No trailing slashes: agent hosts never follow redirects. `<str:route>` takes any segment so a
# malformed key reaches the view and is answered 400 `invalid_route`, not a bare 404.
urlpatterns = [
    path("workspaces", views.WorkspaceListApi.as_view(), name="agent-api-workspaces"),
    path("workspaces/<str:route>/system-info", views.WorkspaceSystemInfoApi.as_view(),
         name="agent-api-workspace-system-info"),
    path("workspaces/<str:route>/bootstrap", views.WorkspaceBootstrapApi.as_view(),
         name="agent-api-workspace-bootstrap"),
]
