"""Reads for tool providers and tools, scoped to what the caller may see."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from apps.projects.models import Project

from .crypto import secret_decrypt
from .errors import ToolProviderNotFound
from .models import Tool, ToolProvider


def provider_list(*, projects: QuerySet[Project] | list[Project]) -> QuerySet[ToolProvider]:
    """Providers of the given projects, with their tool counts (one query)."""
    return (ToolProvider.objects.filter(project__in=projects).select_related("project")
            .annotate(tool_count=Count("tools"), enabled_tool_count=Count("tools", filter=Q(tools__enabled=True)))
            .order_by("project__name", "name"))


def provider_get(*, projects: QuerySet[Project] | list[Project], provider_id) -> ToolProvider:
    provider = ToolProvider.objects.filter(project__in=projects, pk=provider_id).select_related("project").first()
    if provider is None:
        raise ToolProviderNotFound()
    return provider


def tool_list(*, provider: ToolProvider) -> QuerySet[Tool]:
    return Tool.objects.filter(provider=provider).order_by("position")


def provider_secret(*, provider: ToolProvider) -> str:
    """The clear signing secret, for the code that signs outbound calls; never for display."""
    return secret_decrypt(provider.secret_encrypted)
