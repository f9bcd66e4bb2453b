"""The tools and routes builder API: input validation and output shapes."""

from __future__ import annotations

import json
from typing import Any

from rest_framework import serializers

from apps.core.fields import (
    BoundedListField,
    ExactFieldsSerializer,
    JSONBooleanField,
    JSONIntegerField,
    JSONStringField,
    JSONUUIDField,
)
from apps.routes.models import Route
from apps.tools.builder import MAX_KNOWLEDGE_BINDINGS
from apps.tools.models import RouteToolSource, Tool, ToolProvider
from apps.tools.route_tools import MAX_SOURCES
from apps.tools.services import MAX_SECRET_CHARS

TOOL_NAMES_MAX = 256


class SpecField(serializers.Field):  # type: ignore[type-arg]
    """The OpenAPI document: its text (JSON or YAML) as a JSON string, or the document itself as a
    JSON object. Answers the bytes the compiler reads."""

    default_error_messages = {
        "invalid": "The spec is required as a string (JSON or YAML text) or a JSON object.",
        "not_text": "The spec text is not valid Unicode.",
    }

    def to_internal_value(self, data: Any) -> bytes:
        if isinstance(data, str):
            try:
                return data.encode("utf-8")
            except UnicodeEncodeError:
                self.fail("not_text")
        if isinstance(data, dict):
            return json.dumps(data, ensure_ascii=False).encode("utf-8")
        self.fail("invalid")

    def to_representation(self, value: Any) -> Any:
        return value


class StrictChoiceField(serializers.ChoiceField):
    """One of the choices, as a JSON string (no coercion of numbers or booleans)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid_choice", input=str(data)[:64])
        return super().to_internal_value(data)


def _tool_names(**kwargs: Any) -> BoundedListField:
    return BoundedListField(child=JSONStringField(max_length=64), max_length=TOOL_NAMES_MAX, **kwargs)


class ToolProviderCreateIn(ExactFieldsSerializer):
    project_id = JSONUUIDField()
    name = JSONStringField(max_length=64)
    base_url = JSONStringField(max_length=2000)
    secret = JSONStringField(max_length=MAX_SECRET_CHARS, required=False, trim_whitespace=False)
    enabled = JSONBooleanField(required=False, default=True)
    spec = SpecField()
    spec_filename = JSONStringField(max_length=255, required=False, default="")


class ToolProviderSpecIn(ExactFieldsSerializer):
    spec = SpecField()
    spec_filename = JSONStringField(max_length=255, required=False, default="")


class SourceIn(ExactFieldsSerializer):
    provider_id = JSONUUIDField()
    allowed_tools = _tool_names()


class AgentDirectIn(ExactFieldsSerializer):
    enabled = JSONBooleanField(required=False)
    write_tools = _tool_names(required=False)
    force_approval_tools = _tool_names(required=False)
    unattended_write_tools = _tool_names(required=False, allow_null=True)
    max_tool_calls = JSONIntegerField(required=False, min_value=0, max_value=50)


class RouteToolsIn(ExactFieldsSerializer):
    sources = BoundedListField(child=SourceIn(), max_length=MAX_SOURCES, required=False)
    permission = StrictChoiceField(choices=Route.Permission.choices, required=False)
    agent_direct = AgentDirectIn(required=False)


class BindingsIn(ExactFieldsSerializer):
    knowledge_base_ids = BoundedListField(child=JSONUUIDField(), max_length=MAX_KNOWLEDGE_BINDINGS)


class RouteUpdateIn(ExactFieldsSerializer):
    tools = RouteToolsIn(required=False)
    bindings = BindingsIn(required=False)


def tool_out(tool: Tool) -> dict[str, Any]:
    return {"name": tool.name, "method": tool.method, "path": tool.path, "scope": tool.scope, "risk": tool.risk,
            "readonly": tool.readonly, "approval_required": tool.approval_required, "has_acc": tool.has_acc,
            "enabled": tool.enabled}


def provider_out(provider: ToolProvider, *, tools: list[Tool] | None = None, report: bool = False) -> dict[str, Any]:
    """A provider; ``tools`` and the whole compile ``report`` on the detail and write answers."""
    counts = provider.compile_report.get("warning_counts") or {}
    out: dict[str, Any] = {
        "id": str(provider.pk),
        "project_id": str(provider.project_id),
        "name": provider.name,
        "base_url": provider.base_url,
        "enabled": provider.enabled,
        "title": provider.title,
        "openapi_version": provider.openapi_version,
        "spec_sha256": provider.spec_sha256,
        "spec_filename": provider.spec_filename,
        "warning_count": sum(counts.values()),
        "compiled_at": provider.compiled_at,
        "created_at": provider.created_at,
        "updated_at": provider.updated_at,
    }
    if tools is not None:
        out["tool_count"] = len(tools)
        out["enabled_tool_count"] = sum(1 for tool in tools if tool.enabled)
        out["tools"] = [tool_out(tool) for tool in tools]
    else:
        out["tool_count"] = getattr(provider, "tool_count", 0)
        out["enabled_tool_count"] = getattr(provider, "enabled_tool_count", 0)
    if report:
        out["compile_report"] = provider.compile_report
    return out


def route_out(route: Route, *, sources: list[RouteToolSource], knowledge_base_ids: list[str]) -> dict[str, Any]:
    return {
        "route_key": route.key,
        "project_id": str(route.project_id),
        "name": route.name,
        "enabled": route.enabled,
        "tools": {
            "sources": [{"provider_id": str(source.provider_id), "provider": source.provider.name,
                         "allowed_tools": list(source.allowed_tools)} for source in sources],
            "permission": route.permission,
            "agent_direct": {
                "enabled": route.tools_direct_enabled,
                "write_tools": list(route.write_tools or []),
                "force_approval_tools": list(route.force_approval_tools or []),
                "unattended_write_tools": (None if route.unattended_write_tools is None
                                           else list(route.unattended_write_tools)),
                "max_tool_calls": route.max_tool_calls,
            },
        },
        "bindings": {"knowledge_base_ids": knowledge_base_ids},
        "updated_at": route.updated_at,
    }
