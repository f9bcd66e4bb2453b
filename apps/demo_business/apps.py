from django.apps import AppConfig


class DemoBusinessConfig(AppConfig):
    """A small shop backend served by the project itself, so an agent host sees a real, mixed tool
    catalogue out of the box. It talks to the hub only over signed HTTP, like any business backend,
    and imports nothing from the hub's apps."""

    name = "apps.demo_business"
    label = "demo_business"
    verbose_name = "Demo business system"
