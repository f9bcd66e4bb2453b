from __future__ import annotations

from typing import Any

from django.db import transaction

from apps.projects.models import Project
from apps.routes.models import Route

# Tool names are only meaningful against the route's tool sources, which this app cannot see: they
# are set with apps.tools.route_tools.route_tools_set, which checks each against the compiled tools.
TOOL_NAME_LISTS = frozenset({"write_tools", "force_approval_tools", "unattended_write_tools"})


def _refuse_tool_name_lists(settings: dict[str, Any]) -> None:
    named = sorted(TOOL_NAME_LISTS & set(settings))
    if named:
        raise TypeError(f"{', '.join(named)}: set with apps.tools.route_tools.route_tools_set, which checks "
                        "the names against the route's tool sources.")


@transaction.atomic
def route_create(*, project: Project, key: str, name: str, **settings: Any) -> Route:
    """Create a route; every setting is validated before anything is written. Tool name lists are
    refused here (TOOL_NAME_LISTS)."""
    _refuse_tool_name_lists(settings)
    route = Route(project=project, key=key, name=name, **settings)
    route.full_clean()
    route.save()
    return route


@transaction.atomic
def route_update(*, route: Route, **changes: Any) -> Route:
    """Apply changes to a route, validated as a whole; a refused change writes nothing. Tool name
    lists are refused here (TOOL_NAME_LISTS)."""
    _refuse_tool_name_lists(changes)
    for field, value in changes.items():
        setattr(route, field, value)
    route.full_clean()
    route.save()
    return route
