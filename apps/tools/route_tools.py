"""Writes of a route's tools: its sources (provider + allow list) and its tool policy.

The policy fields live on Route (permission, ``tools.agent_direct``); they are set here, together
with the sources, because they are only meaningful against them: a write tool or a forced approval
must name a compiled write tool that one of the route's sources allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.routes.models import Route
from apps.routes.validators import validate_tool_names

from .errors import RouteToolsInvalid
from .models import RouteToolSource, Tool, ToolProvider

UNSET: Any = object()
POLICY_FIELDS = ("permission", "tools_direct_enabled", "write_tools", "force_approval_tools",
                 "unattended_write_tools", "max_tool_calls")
MAX_SOURCES = 32


@dataclass(frozen=True)
class SourceSpec:
    """One source as an operator sets it: a provider of the route's project and exact operationIds."""

    provider: ToolProvider
    allowed_tools: Sequence[str]


def _names_check(field: str, names: Sequence[str]) -> None:
    try:
        validate_tool_names(list(names))
    except ValidationError as exc:
        raise RouteToolsInvalid(f"{field}: {exc.messages[0]}", field=field) from None


def _sources_check(*, route: Route, sources: Sequence[SourceSpec]) -> dict[str, Tool]:
    """The compiled tools the sources allow, by name; refuses anything that is not exact."""
    if len(sources) > MAX_SOURCES:
        raise RouteToolsInvalid(f"sources: at most {MAX_SOURCES} tool sources.", field="sources")
    seen_providers: set[Any] = set()
    allowed: dict[str, Tool] = {}
    for source in sources:
        provider = source.provider
        if provider.project_id != route.project_id:
            raise RouteToolsInvalid(f"sources: provider '{provider.name}' belongs to another project.",
                                    field="sources")
        if provider.pk in seen_providers:
            raise RouteToolsInvalid(f"sources: provider '{provider.name}' is listed twice.", field="sources")
        seen_providers.add(provider.pk)
        _names_check("sources", source.allowed_tools)
        tools = {tool.name: tool for tool in Tool.objects.filter(provider=provider, name__in=source.allowed_tools)}
        missing = [name for name in source.allowed_tools if name not in tools]
        if missing:
            raise RouteToolsInvalid(
                f"sources: provider '{provider.name}' has no compiled tool named {', '.join(map(repr, missing))}.",
                field="sources")
        for name in source.allowed_tools:
            if name in allowed:
                raise RouteToolsInvalid(
                    f"sources: tool '{name}' is allowed from two providers; a route's tool names must be unique.",
                    field="sources")
            allowed[name] = tools[name]
    return allowed


def _write_tools_check(field: str, names: Sequence[str] | None, allowed: dict[str, Tool]) -> None:
    if not names:
        return
    _names_check(field, names)
    for name in names:
        tool = allowed.get(name)
        if tool is None:
            raise RouteToolsInvalid(f"{field}: '{name}' is not a tool of this route's sources.", field=field)
        if tool.readonly:
            raise RouteToolsInvalid(f"{field}: '{name}' is a read-only tool, not a write tool.", field=field)


def _current_sources(route: Route) -> list[SourceSpec]:
    return [SourceSpec(provider=source.provider, allowed_tools=list(source.allowed_tools))
            for source in RouteToolSource.objects.filter(route=route).select_related("provider").order_by("position")]


def _policy_check(*, route: Route, allowed: dict[str, Tool]) -> None:
    for field in ("write_tools", "force_approval_tools", "unattended_write_tools"):
        _write_tools_check(field, getattr(route, field), allowed)
    try:
        # Not the name, which no tool setting changes: one stored before validate_shown_name with a
        # bidi control would refuse every tool change, and the builder API cannot rename a route.
        route.full_clean(exclude=["name"])
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise RouteToolsInvalid(f"{field}: {messages[0]}", field=field) from None


def route_tools_check(*, route: Route, sources: Sequence[SourceSpec]) -> None:
    """The checks of ``route_tools_set`` for a form that has already set the tool policy on an
    unsaved ``route`` (and runs the model's own validation itself): the sources, and every
    ``write_tools`` / ``force_approval_tools`` / ``unattended_write_tools`` name against them.
    Reads only; raises RouteToolsInvalid with ``field``."""
    allowed = _sources_check(route=route, sources=sources)
    for field in ("write_tools", "force_approval_tools", "unattended_write_tools"):
        _write_tools_check(field, getattr(route, field), allowed)


@transaction.atomic
def route_tools_set(*, route: Route, sources: Sequence[SourceSpec] = UNSET, **policy: Any) -> Route:
    """Set a route's tool sources and/or tool policy, checked as a whole; a refusal writes nothing.

    ``policy`` takes the Route fields in POLICY_FIELDS; an omitted one keeps its value. Refused
    (400 ``invalid_request`` with ``field``): a provider of another project or listed twice, an
    allow-list name the provider has not compiled, one tool name from two providers, and a
    ``write_tools`` / ``force_approval_tools`` / ``unattended_write_tools`` name that is not a
    compiled write tool allowed by the sources — plus every rule Route.clean() holds.
    """
    unknown = sorted(set(policy) - set(POLICY_FIELDS))
    if unknown:
        raise TypeError(f"route_tools_set() got unexpected policy fields: {', '.join(unknown)}")
    # One writer of a route's tools at a time; the policy not being changed is checked as stored.
    locked = Route.objects.select_for_update().get(pk=route.pk)
    for field in POLICY_FIELDS:
        if field not in policy:
            setattr(route, field, getattr(locked, field))
    new_sources = _current_sources(route) if sources is UNSET else list(sources)
    allowed = _sources_check(route=route, sources=new_sources)
    previous = {field: getattr(route, field) for field in policy}
    for field, value in policy.items():
        setattr(route, field, value)
    try:
        _policy_check(route=route, allowed=allowed)
    except RouteToolsInvalid:
        for field, value in previous.items():  # the caller's instance stays as the database has it
            setattr(route, field, value)
        raise
    if policy:
        route.save(update_fields=[*policy, "updated_at"])
    if sources is not UNSET:
        RouteToolSource.objects.filter(route=route).delete()
        RouteToolSource.objects.bulk_create([
            RouteToolSource(route=route, provider=source.provider, allowed_tools=list(source.allowed_tools),
                            position=position)
            for position, source in enumerate(new_sources)
        ])
    return route
