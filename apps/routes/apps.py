from django.apps import AppConfig


class RoutesConfig(AppConfig):
    name = "apps.routes"
    label = "routes"
    verbose_name = "Routes (agent workspaces)"
