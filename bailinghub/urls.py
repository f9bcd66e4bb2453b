from django.conf import settings
from django.contrib import admin
from django.urls import include, path, reverse_lazy
from django.views.generic import RedirectView
from drf_spectacular.renderers import (
    OpenApiJsonRenderer,
    OpenApiJsonRenderer2,
    OpenApiYamlRenderer,
    OpenApiYamlRenderer2,
)
from drf_spectacular.views import SpectacularAPIView

from apps.core import views as core_views

# admin.site is the console (apps.runtime.admin_site.ConsoleAdminSite): header, dashboard, no "View site".

# Agent-facing paths never end in a slash, and APPEND_SLASH never fires under their prefixes
# (apps.core.middleware.CommonMiddleware): an agent host follows no redirect.
urlpatterns = [
    # The host's bare address is where a newcomer starts: the console (it was Django's 404 page).
    path("", RedirectView.as_view(url=reverse_lazy("admin:index")), name="home"),
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("agent-auth/", include("apps.agent_auth.urls_pages")),  # agent_auth: authorization page and login
    path("agent-auth/v1/", include("apps.agent_auth.api.urls")),
    path("agent-api/v1/", include("apps.runtime.api.urls")),
    path("api/v1/builder/", include("apps.knowledge.api.urls")),
    path("api/v1/routes/", include("apps.answers.api.urls")),  # answers: RAG query, records, feedback, report
    path("api/v1/builder/", include("apps.tools.api.urls")),
    path("api/v1/builder/", include("apps.tasks.api.urls")),  # tasks: create, read, pause / resume / cancel
    # JSON unless asked otherwise (?format=yaml, or an Accept of YAML), as the README says:
    # drf-spectacular's own order answers YAML to a plain Accept: */*.
    path("api/schema/", SpectacularAPIView.as_view(renderer_classes=[
        OpenApiJsonRenderer, OpenApiJsonRenderer2, OpenApiYamlRenderer, OpenApiYamlRenderer2]), name="api-schema"),
]

# The demo business system is a separate backend that happens to share the process; it is not
# mounted at all unless enabled (on by default only in development).
if settings.DEMO_BUSINESS_ENABLED:
    urlpatterns.append(path("demo-business/", include("apps.demo_business.urls")))

handler400 = "apps.core.views.bad_request"
handler403 = "apps.core.views.permission_denied"
handler404 = "apps.core.views.not_found"
handler500 = "apps.core.views.server_error"
