"""The operator side of tools, shared by the builder API and the console: which route or provider
an operator may see or change, a route's tools and knowledge bindings changed as one (through
``route_tools_set`` and the knowledge services), the summary bootstrap would show for a route
(its dry-run), and a re-import that reports which routes' capability revisions it changed."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from apps.core.errors import InvalidRequest
from apps.knowledge import selectors as knowledge_selectors
from apps.knowledge import services as knowledge_services
from apps.knowledge.models import KnowledgeBase
from apps.projects.models import Project
from apps.projects.selectors import project_list_editable, project_list_visible
from apps.routes.models import Route
from apps.routes.validators import ROUTE_KEY_RE

from . import services
from .errors import (
    BuilderSpecRefused,
    InvalidProvider,
    InvalidRouteSettings,
    InvalidToolProvider,
    RouteNotFound,
    RouteToolsInvalid,
    SpecRefusedError,
    ToolsForbidden,
)
from .models import RouteToolSource, ToolProvider
from .route_tools import UNSET, SourceSpec, route_tools_set
from .selectors import provider_get
from .surface import capability_summary, route_surface

MAX_KNOWLEDGE_BINDINGS = 64
# route_tools_set's field names, as the builder API's body names them.
ROUTE_FIELD_PATHS = {
    "sources": "tools.sources",
    "permission": "tools.permission",
    "tools_direct_enabled": "tools.agent_direct.enabled",
    "write_tools": "tools.agent_direct.write_tools",
    "force_approval_tools": "tools.agent_direct.force_approval_tools",
    "unattended_write_tools": "tools.agent_direct.unattended_write_tools",
    "max_tool_calls": "tools.agent_direct.max_tool_calls",
}


# Scoping: another project's route or provider does not exist for the caller (404); a project the
# caller only views refuses changes (403).


def route_get_visible(*, user: Any, route_key: str, project_id: uuid.UUID | None = None) -> Route:
    """The route with this key in a project the user may see. Route keys are unique per project:
    when several of the user's projects have one, ``project_id`` must say which. A key no route can
    have is not looked up (one with a NUL reached PostgreSQL, which refuses it: 500)."""
    if not ROUTE_KEY_RE.fullmatch(route_key):
        raise RouteNotFound()
    routes = Route.objects.filter(key=route_key, project__in=project_list_visible(user=user))
    if project_id is not None:
        routes = routes.filter(project_id=project_id)
    found = list(routes.select_related("project").order_by("pk")[:2])
    if not found:
        raise RouteNotFound()
    if len(found) > 1:
        message = "Several of your projects have a route with this key; pass project_id to say which."
        raise InvalidRequest(f"project_id: {message}", fields={"project_id": [message]})
    return found[0]


def _check_editable(*, user: Any, project_id: Any) -> None:
    if not project_list_editable(user=user).filter(pk=project_id).exists():
        raise ToolsForbidden()


def route_get_editable(*, user: Any, route_key: str, project_id: uuid.UUID | None = None) -> Route:
    route = route_get_visible(user=user, route_key=route_key, project_id=project_id)
    _check_editable(user=user, project_id=route.project_id)
    return route


def provider_get_visible(*, user: Any, provider_id: uuid.UUID) -> ToolProvider:
    return provider_get(projects=project_list_visible(user=user), provider_id=provider_id)


def provider_get_editable(*, user: Any, provider_id: uuid.UUID) -> ToolProvider:
    provider = provider_get_visible(user=user, provider_id=provider_id)
    _check_editable(user=user, project_id=provider.project_id)
    return provider


# A route's tools and knowledge bindings.


def route_tool_sources(*, route: Route) -> QuerySet[RouteToolSource]:
    return RouteToolSource.objects.filter(route=route).select_related("provider").order_by("position")


def route_knowledge_base_ids(*, route: Route) -> list[str]:
    return [str(pk) for pk in knowledge_selectors.route_knowledge_bases(route=route).values_list("pk", flat=True)]


@dataclass(frozen=True)
class SourceIn:
    """A source as the builder API names it: a provider id and exact operationIds."""

    provider_id: uuid.UUID
    allowed_tools: Sequence[str]


@dataclass(frozen=True)
class RouteChange:
    """What a PATCH changes; ``UNSET`` keeps a setting as it is."""

    sources: Sequence[SourceIn] | Any = UNSET
    knowledge_base_ids: Sequence[uuid.UUID] | Any = UNSET
    policy: dict[str, Any] = field(default_factory=dict)


def _invalid(path: str, message: str) -> InvalidRouteSettings:
    return InvalidRouteSettings(f"{path}: {message}", fields={path: [message]})


def _sources_resolve(*, route: Route, sources: Sequence[SourceIn]) -> list[SourceSpec]:
    providers = {provider.pk: provider for provider in ToolProvider.objects.filter(
        project_id=route.project_id, pk__in=[source.provider_id for source in sources])}
    specs = []
    for index, source in enumerate(sources):
        provider = providers.get(source.provider_id)
        if provider is None:
            raise _invalid(f"tools.sources[{index}].provider_id",
                           "No tool provider with this id in the route's project.")
        specs.append(SourceSpec(provider=provider, allowed_tools=list(source.allowed_tools)))
    return specs


def _knowledge_bases_resolve(*, route: Route, ids: Sequence[uuid.UUID]) -> list[KnowledgeBase]:
    path = "bindings.knowledge_base_ids"
    if len(set(ids)) != len(ids):
        raise _invalid(path, "A knowledge base is listed twice.")
    if len(ids) > MAX_KNOWLEDGE_BINDINGS:
        raise _invalid(path, f"At most {MAX_KNOWLEDGE_BINDINGS} knowledge bases.")
    kbs = {kb.pk: kb for kb in KnowledgeBase.objects.filter(project_id=route.project_id, pk__in=ids)}
    missing = [str(pk) for pk in ids if pk not in kbs]
    if missing:
        raise _invalid(path, f"No knowledge base with id {missing[0]} in the route's project.")
    return [kbs[pk] for pk in ids]


@transaction.atomic
def route_config_update(*, route: Route, change: RouteChange) -> Route:
    """Change a route's tool sources, tool policy and knowledge bindings as one; a refusal
    (InvalidRouteSettings naming the field as the builder API names it) writes nothing."""
    sources = UNSET if change.sources is UNSET else _sources_resolve(route=route, sources=change.sources)
    kbs = (UNSET if change.knowledge_base_ids is UNSET
           else _knowledge_bases_resolve(route=route, ids=change.knowledge_base_ids))
    if sources is not UNSET or change.policy:
        try:
            route_tools_set(route=route, sources=sources, **change.policy)
        except RouteToolsInvalid as exc:
            name = str(exc.extra.get("field", ""))
            raise _invalid(ROUTE_FIELD_PATHS.get(name, name), exc.message.split(": ", 1)[-1]) from None
    if kbs is not UNSET:
        wanted = {kb.pk for kb in kbs}
        for bound in knowledge_selectors.route_knowledge_bases(route=route):
            if bound.pk not in wanted:
                knowledge_services.route_knowledge_unbind(route=route, knowledge_base=bound)
        for kb in kbs:
            knowledge_services.route_knowledge_bind(route=route, knowledge_base=kb)
    return route


def route_dry_run(*, route: Route) -> dict[str, Any]:
    """What bootstrap would show for ``route`` — the knowledge bases it reads (``kb_count``) and its
    ``capabilities`` — as an operator sees it (a principal acting on someone's behalf). Reads only;
    the console's route page and the builder API's dry-run both show this."""
    kb_count = knowledge_selectors.route_knowledge_source_count(route=route)
    surface = route_surface(route=route, session=None, knowledge_sources=kb_count)
    return {
        "kb_count": kb_count,
        "knowledge_enabled": route.knowledge_enabled,
        "agent_direct_enabled": route.tools_direct_enabled,
        "capabilities": capability_summary(route=route, surface=surface),
        # Counted in `capabilities` with the business tools (agents see and call them alike), so
        # named here: a 5-tool provider's route with knowledge reads "7 tools".
        "builtin_tools": [tool.name for tool in surface.tools if tool.tool is None],
    }


# Providers.


def _spec_refused(exc: SpecRefusedError) -> BuilderSpecRefused:
    reason = str(exc.extra.get("reason", ""))
    extra: dict[str, Any] = {"reason": reason, "fields": {"spec": [exc.message]}}
    if exc.extra.get("pointer"):
        extra["pointer"] = exc.extra["pointer"]
    return BuilderSpecRefused(exc.message, status=413 if reason == "spec_too_large" else None, **extra)


def _provider_invalid(exc: InvalidProvider) -> InvalidToolProvider:
    name = str(exc.extra.get("field", "non_field_errors"))
    message = exc.message.split(": ", 1)[-1]
    return InvalidToolProvider(f"{name}: {message}", fields={name: [message]})


@dataclass(frozen=True)
class RevisionChange:
    route_key: str
    before: str
    after: str


def provider_create(*, project: Project, name: str, base_url: str, secret: str | None, spec: bytes,
                    spec_filename: str = "", enabled: bool = True) -> tuple[services.ProviderImport, str | None]:
    """``services.provider_create`` with the builder API's errors; a missing secret is generated
    and returned (once) beside the import."""
    generated = None
    if secret is None:
        secret = generated = services.secret_generate()
    try:
        outcome = services.provider_create(project=project, name=name, base_url=base_url, secret=secret, spec=spec,
                                           spec_filename=spec_filename, enabled=enabled)
    except SpecRefusedError as exc:
        raise _spec_refused(exc) from None
    except InvalidProvider as exc:
        raise _provider_invalid(exc) from None
    return outcome, generated


def _route_revisions(routes: Sequence[Route]) -> dict[Any, str]:
    return {route.pk: route_surface(route=route, session=None).revision for route in routes}


@transaction.atomic
def provider_spec_replace(*, provider: ToolProvider, spec: bytes, spec_filename: str = ""
                          ) -> tuple[services.ProviderImport, list[RevisionChange]]:
    """Re-import a provider's spec and say which routes drawing on it now have another capability
    revision (computed before and after, as the operator's view of each route)."""
    routes = list(Route.objects.filter(tool_sources__provider=provider).distinct().order_by("key", "pk"))
    before = _route_revisions(routes)
    try:
        outcome = services.provider_reimport(provider=provider, spec=spec, spec_filename=spec_filename)
    except SpecRefusedError as exc:
        raise _spec_refused(exc) from None
    after = _route_revisions(routes)
    changes = [RevisionChange(route_key=route.key, before=before[route.pk], after=after[route.pk])
               for route in routes if before[route.pk] != after[route.pk]]
    return outcome, changes
