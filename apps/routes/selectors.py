"""Reads of routes: an enabled route by its key, the agent-facing profile projection and its revision."""

from __future__ import annotations

from typing import Any

from apps.core.revisions import revision_of
from apps.routes.models import Route

# The section markers of the runtime contract's bootstrap (agent-client-runtime-api.zh.md:
# "instructions": "【路由系统规则】\n...\n\n【本地 Agent 补充规则】\n..."), fixed whatever the route's
# language: hosts built on that page find the two parts by them.
ROUTE_RULES_LABEL = "【路由系统规则】"
AGENT_RULES_LABEL = "【本地 Agent 补充规则】"


def enabled_route_get(*, project_id: Any, key: str) -> Route | None:
    """The enabled route `key` of a project, or None. One query, without the model's ordering
    (a join of the project for its name): a project's keys are unique."""
    return Route.objects.filter(project_id=project_id, key=key, enabled=True).order_by().first()


def route_instructions(*, route: Route) -> str:
    """The route system prompt, then the optional agent-client instructions, each labelled."""
    parts = []
    if route.system_prompt.strip():
        parts.append(f"{ROUTE_RULES_LABEL}\n{route.system_prompt.strip()}")
    if route.agent_client_instructions.strip():
        parts.append(f"{AGENT_RULES_LABEL}\n{route.agent_client_instructions.strip()}")
    return "\n\n".join(parts)


def route_governance(*, route: Route) -> dict[str, Any]:
    return {
        "planner": "local_agent",
        "execution": "bailinghub_governed",
        "authorization": "server_revalidated",
        "knowledge_trust": "reference_only",
        "tool_results_trust": "untrusted_data",
        "hidden_reasoning_sync": False,
        "max_tool_calls": route.max_tool_calls,
        "permission": route.permission,
    }


def route_memory_settings(*, route: Route) -> dict[str, Any]:
    return {
        "recent_messages": route.memory_recent_messages,
        "recent_budget_chars": route.memory_recent_budget_chars,
        "per_message_chars": route.memory_per_message_chars,
        "summary_enabled": route.memory_summary_enabled,
        "summary_max_chars": route.memory_summary_max_chars,
    }


def route_knowledge_settings(*, route: Route, sources: int) -> dict[str, Any]:
    return {
        "enabled": route.knowledge_enabled and sources > 0,
        "sources": sources,
        "mode": route.knowledge_mode,
        "top_k": route.knowledge_top_k,
        "max_docs": route.knowledge_max_docs,
        "page_boost": route.knowledge_page_boost,
    }


def route_profile(*, route: Route, knowledge_sources: int = 0) -> dict[str, Any]:
    """The bootstrap `profile` object, revision included.

    `knowledge_sources` is the number of knowledge bases the route's agents read (bound and on);
    the knowledge app, which sits below routes, counts them.
    """
    profile = {
        "instructions": route_instructions(route=route),
        "memory": route_memory_settings(route=route),
        "knowledge": route_knowledge_settings(route=route, sources=knowledge_sources),
        "governance": route_governance(route=route),
    }
    projection = {
        "workspace": {"route": route.key, "name": route.name, "description": route.description},
        "profile": profile,
        "knowledge_score_threshold": route.knowledge_score_threshold,
        "tools": {
            "agent_direct": route.tools_direct_enabled,
            "write_tools": sorted(route.write_tools or []),
            "force_approval_tools": sorted(route.force_approval_tools or []),
            "unattended_write_tools": (
                None if route.unattended_write_tools is None else sorted(route.unattended_write_tools)
            ),
            "active_tool_limit": route.agent_client_active_tool_limit,
        },
    }
    return {"revision": revision_of(projection), **profile}
