from __future__ import annotations

from typing import Any

from django.db import transaction

from apps.projects.models import Project
from apps.routes.models import Route


@transaction.atomic
def route_create(*, project: Project, key: str, name: str, **settings: Any) -> Route:
    """Create a route; every setting is validated before anything is written."""
    route = Route(project=project, key=key, name=name, **settings)
    route.full_clean()
    route.save()
    return route


@transaction.atomic
def route_update(*, route: Route, **changes: Any) -> Route:
    """Apply changes to a route, validated as a whole; a refused change writes nothing."""
    for field, value in changes.items():
        setattr(route, field, value)
    route.full_clean()
    route.save()
    return route
