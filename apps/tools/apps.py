from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks


class ToolsConfig(AppConfig):
    name = "apps.tools"
    label = "tools"
    verbose_name = "Tools"

    def ready(self) -> None:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured

        from apps.core.outbound import networks_parse
        from apps.core.workers import queue_work_register
        from apps.tools.selectors import invocation_queue_work

        checks.register(check_secret_keys, checks.Tags.security, deploy=True)
        queue_work_register("calls", invocation_queue_work)
        try:
            networks_parse(settings.TOOL_PROVIDER_DENIED_NETWORKS)
        except ValueError as exc:
            raise ImproperlyConfigured(f"TOOL_PROVIDER_DENIED_NETWORKS: {exc}") from exc


def check_secret_keys(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[checks.CheckMessage]:
    from django.conf import settings

    if settings.DEBUG or any(key.strip() for key in settings.TOOL_SECRET_KEYS):
        return []
    return [checks.Error("TOOL_SECRET_KEYS is not set: tool provider secrets cannot be encrypted.",
                         hint="Set TOOL_SECRET_KEYS to one or more Fernet keys, newest first.", id="tools.E001")]
