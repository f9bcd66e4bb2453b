from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.names import name_taken, names_lock
from apps.projects.models import Project
from apps.routes.models import ROUTE_NAME_TAKEN, Route

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
    _refuse_name_taken(route)
    route.full_clean()
    route.save()
    return route


@transaction.atomic
def route_update(*, route: Route, **changes: Any) -> Route:
    """Apply changes to a route, validated as a whole; a refused change writes nothing. Tool name
    lists are refused here (TOOL_NAME_LISTS)."""
    _refuse_tool_name_lists(changes)
    # A name kept as it was is not checked, as a KB's: one saved before names were compared as they read stays.
    renamed = "name" in changes and changes["name"] != route.name
    for field, value in changes.items():
        setattr(route, field, value)
    if renamed:
        _refuse_name_taken(route)
    route.full_clean()
    route.save()
    return route


def _refuse_name_taken(route: Route) -> None:
    """A name that reads as another route's of the project (apps.core.names) is taken: the agent's
    workspace list and the sign-in page tell routes apart by name. The database's constraint
    compares names ignoring case only."""
    names_lock("route", route.project_id)
    if name_taken(Route.objects.filter(project=route.project_id).exclude(pk=route.pk), route.name):
        raise ValidationError({"name": [ValidationError(ROUTE_NAME_TAKEN, code="route_name_taken")]})
