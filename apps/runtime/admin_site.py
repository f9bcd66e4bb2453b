"""The operator console: Django's admin site with a dashboard for a landing page.

The landing page summarises every project the operator may see (apps.runtime.dashboard), which
reads routes, knowledge, agent sessions and the ledger — hence it lives in runtime, the one app
that may import them all. INSTALLED_APPS names ConsoleAdminConfig instead of django.contrib.admin,
so `admin.site` is this site everywhere.
"""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.contrib.admin.apps import AdminConfig


class ConsoleAdminSite(AdminSite):
    site_header = "BailingHub"
    site_title = "BailingHub console"
    index_title = "Dashboard"
    # There is no public site behind the console: no "View site" link that would lead to a 404.
    site_url = None
    # Not admin/index.html: Django's app_index.html (each section's page) extends that one and has
    # no dashboard in its context, so overriding it showed "not a member of any project" there.
    index_template = "admin/dashboard.html"

    def index(self, request, extra_context=None):
        from apps.runtime.dashboard import dashboard_projects

        extra_context = {**(extra_context or {}), "dashboard": dashboard_projects(user=request.user)}
        return super().index(request, extra_context)


class ConsoleAdminConfig(AdminConfig):
    default_site = "apps.runtime.admin_site.ConsoleAdminSite"
