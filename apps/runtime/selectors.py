"""What the workspace endpoints answer: composed from routes (profile), agent_auth (binding),
knowledge and tools (the route's surface)."""

from __future__ import annotations

from typing import Any

from apps.agent_auth.models import AgentSession
from apps.core.revisions import revision_of
from apps.knowledge import selectors as knowledge_selectors
from apps.routes.models import Route
from apps.routes.selectors import route_profile
from apps.tools.surface import capability_summary, route_surface

WORKSPACES_SCHEMA = "bailing.agent-workspaces.v1"
PROFILE_SCHEMA = "bailing.agent-runtime-profile.v1"
SYSTEM_INFO_SCHEMA = "bailing.agent-system-info.v1"


def route_knowledge_source_count(*, route: Route) -> int:
    """How many knowledge bases `route`'s agents read: its bound ones that are on."""
    return knowledge_selectors.route_knowledge_source_count(route=route)


def workspace_entry(*, route: Route) -> dict[str, str]:
    return {"route": route.key, "name": route.name, "description": route.description}


def workspace_list(*, routes: list[Route]) -> dict[str, Any]:
    return {"schema_version": WORKSPACES_SCHEMA, "workspaces": [workspace_entry(route=route) for route in routes]}


def workspace_bootstrap(*, route: Route, session: AgentSession) -> dict[str, Any]:
    """`bailing.agent-runtime-profile.v1`: never a credential, model, provider URL or secret.
    `active_tools` (contracts-beyond-seeds §6) are the first `active_limit` definitions of the
    surface in its own order — there is no user input to rank by yet; each turn offers its best."""
    knowledge_sources = route_knowledge_source_count(route=route)
    surface = route_surface(route=route, session=session, knowledge_sources=knowledge_sources)
    return {
        "schema_version": PROFILE_SCHEMA,
        "workspace": workspace_entry(route=route),
        "profile": route_profile(route=route, knowledge_sources=knowledge_sources),
        "capabilities": capability_summary(route=route, surface=surface),
        "active_tools": [tool.definition for tool in surface.tools[: route.agent_client_active_tool_limit]],
    }


def workspace_system_info(*, route: Route, session: AgentSession) -> dict[str, Any]:
    """`bailing.agent-system-info.v1`. Loads no tools; needs neither the runtime switch nor
    direct tools, but says when either is off."""
    system = None
    if route.system_info_configured:
        system = {
            "name": route.system_info_name,
            "summary": route.system_info_summary,
            "domains": list(route.system_info_domains or []),
            "boundaries": list(route.system_info_boundaries or []),
        }
    body: dict[str, Any] = {
        "schema_version": SYSTEM_INFO_SCHEMA,
        "binding": {
            "client_app_id": session.client.app_id,
            "session_id": str(session.pk),
            "workspace": route.key,
        },
        "metadata_status": "configured" if system else "missing",
        "revision": revision_of(system) if system else None,
        "system": system,
        "tool_status": "not_loaded",
        "availability": "unknown",
    }
    if not route.agent_client_enabled:
        body.update(availability="unavailable", unavailable_reason="agent_client_disabled")
    elif not route.tools_direct_enabled:
        body.update(availability="unavailable", unavailable_reason="agent_direct_disabled")
    return body
