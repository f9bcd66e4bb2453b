"""Reads for tool providers and tools, scoped to what the caller may see."""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from django.db.models import Count, Q, QuerySet

from apps.projects.models import Project

from .compiler.compile import MAX_GUIDANCE_BYTES, MAX_GUIDANCE_CHARS
from .crypto import secret_decrypt
from .errors import ToolProviderNotFound
from .models import Tool, ToolProvider


def provider_list(*, projects: QuerySet[Project] | list[Project]) -> QuerySet[ToolProvider]:
    """Providers of the given projects, with their tool counts (one query)."""
    return (ToolProvider.objects.filter(project__in=projects).select_related("project")
            .annotate(tool_count=Count("tools"), enabled_tool_count=Count("tools", filter=Q(tools__enabled=True)))
            .order_by("project__name", "name"))


def provider_get(*, projects: QuerySet[Project] | list[Project], provider_id: uuid.UUID | str) -> ToolProvider:
    provider = ToolProvider.objects.filter(project__in=projects, pk=provider_id).select_related("project").first()
    if provider is None:
        raise ToolProviderNotFound()
    return provider


def tool_list(*, provider: ToolProvider) -> QuerySet[Tool]:
    return Tool.objects.filter(provider=provider).order_by("position")


def provider_secret(*, provider: ToolProvider) -> str:
    """The clear signing secret, for the code that signs outbound calls; never for display."""
    return secret_decrypt(provider.secret_encrypted)


class CompiledRow(Protocol):
    """What the definition selectors read: a Tool, or the surface's lighter row of one."""

    @property
    def compiled(self) -> dict[str, Any]: ...


def tool_definition(*, tool: CompiledRow, force_approval: bool = False) -> dict[str, Any]:
    """The agent-facing tool definition (whitelisted projection of the compiled tool): name,
    description, scope, risk, approval_required, readonly, idempotent, input_schema, and the
    guidance flags. ``force_approval`` is the route's ``force_approval_tools`` decision."""
    compiled = tool.compiled
    definition = {
        "name": compiled["name"],
        "description": compiled["description"],
        "scope": compiled["scope"],
        "risk": compiled["risk"],
        "approval_required": bool(compiled["approval_required"] or force_approval),
        "readonly": compiled["readonly"],
        "idempotent": compiled["idempotent"],
        "input_schema": compiled["input_schema"],
    }
    if compiled.get("usage_guidance_available"):
        definition["usage_guidance_available"] = True
    if compiled.get("description_truncated"):
        definition["description_truncated"] = True
    return definition


def tool_usage_guidance(*, tool: CompiledRow) -> dict[str, Any]:
    """The detail endpoint's ``usage_guidance`` block."""
    guidance = tool.compiled["usage_guidance"]
    return {
        "text": guidance["text"],
        "truncated": guidance["truncated"],
        "source_chars": guidance["source_chars"],
        "max_chars": MAX_GUIDANCE_CHARS,
        "source_bytes": guidance["source_bytes"],
        "max_bytes": MAX_GUIDANCE_BYTES,
    }
