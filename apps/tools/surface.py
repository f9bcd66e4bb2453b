"""The one place that decides which tools a caller may see and call on a route: its surface.

Every agent endpoint that shows or uses tools (bootstrap, turns, capability search, tool detail,
the legacy catalog, later invocations) reads ``route_surface``. The authorized surface (ACC
contract) is: the route's tool sources (provider + exact allow list) ∩ enabled providers ∩
enabled tools ∩ tools whose subject the principal satisfies; read-only tools always, a write tool
only when the route's permission is ``full`` and the tool is listed in ``write_tools``. Nothing at
all while ``tools.agent_direct`` is off. When the route reads knowledge (knowledge on, knowledge
bases bound), the built-in ``kb_search`` and ``kb_read`` join it.

``capability_revision`` is SHA-256 over a canonical JSON of: the route key, permission, audience,
the ``agent_direct`` config, per source the provider name, enabled flag, SHA-256 of its base URL
and of its spec, the allow list and every allowed tool's compiled execution-relevant fields and
switch — and the public projection agents are shown (definitions, guidance). The runtime contract
says the revision covers the compiled public projection and its bounded guidance, so rewording a
description or guidance changes it; the provider secret, route name, prompt, ``max_tool_calls``
and ``active_tool_limit`` do not take part.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, TextField
from django.db.models.functions import MD5, Cast

from apps.agent_auth.models import AgentSession
from apps.core.revisions import revision_of
from apps.knowledge.selectors import route_knowledge_source_count, route_source_filter
from apps.routes.models import Route

from .compiler.compile import MAX_GUIDANCE_BYTES, MAX_GUIDANCE_CHARS
from .knowledge_tools import KNOWLEDGE_TOOLS
from .models import RouteToolSource, Tool
from .ranking import RankText
from .selectors import tool_definition, tool_usage_guidance

# The compiled fields the revision covers for every allowed tool (§2), beside the public projection.
REVISION_TOOL_FIELDS = ("name", "method", "path", "scope", "risk", "approval_required", "approval_declared",
                        "approval_rules", "approval_prompt", "subject_required", "readonly", "idempotent",
                        "input_schema", "parameter_locations")
# ... and what the public projection adds to them (the guidance as its text).
REVISION_PROJECTION_FIELDS = ("description", "description_truncated", "usage_guidance_available")
# The JSON-Schema keywords an input schema shown to agents may hold (ACC contract); the compiler
# projects every schema onto them.
INPUT_SCHEMA_KEYWORDS = frozenset({
    "type", "properties", "required", "items", "description", "enum", "const", "oneOf", "anyOf", "allOf",
    "nullable", "format", "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "minItems", "maxItems", "additionalProperties",
})


@dataclass(frozen=True)
class SurfaceTool:
    """One tool a caller may see: its agent-facing definition, its guidance, and (for a business
    tool) the row it was compiled into; built-in tools have ``tool=None``."""

    name: str
    definition: dict[str, Any]
    usage_guidance: dict[str, Any]
    tool: ToolRow | None = None
    provider_name: str = ""

    @property
    def rank_text(self) -> RankText:
        return RankText(name=self.name, scope=self.definition["scope"], description=self.definition["description"])


@dataclass(frozen=True)
class Surface:
    route: Route
    tools: tuple[SurfaceTool, ...]
    revision: str
    _by_name: dict[str, SurfaceTool] = field(default_factory=dict, repr=False, compare=False)

    def get(self, name: str) -> SurfaceTool | None:
        return self._by_name.get(name)

    def count(self, allowed: Collection[str] | None = None) -> int:
        """How many tools the surface authorizes (of ``allowed`` only, when given)."""
        return len(self.tools) if allowed is None else sum(1 for tool in self.tools if tool.name in allowed)

    def summary(self) -> dict[str, Any]:
        """Bootstrap ``capabilities`` (without ``active_limit``, which is the route's)."""
        readonly = sum(1 for tool in self.tools if tool.definition["readonly"])
        return {
            "revision": self.revision,
            "authorized_total": len(self.tools),
            "readonly": readonly,
            "writes": len(self.tools) - readonly,
            "approval_required": sum(1 for tool in self.tools if tool.definition["approval_required"]),
        }


def route_approval_forced(*, route: Route, name: str, readonly: bool) -> bool:
    """The route's own approval rule: listed in ``force_approval_tools``, or — legacy config — a
    write tool not listed in ``unattended_write_tools``."""
    if name in (route.force_approval_tools or []):
        return True
    return route.unattended_write_tools is not None and not readonly and name not in route.unattended_write_tools


def _principal_satisfies(*, compiled: dict[str, Any], session: AgentSession | None) -> bool:
    # A principal carries roles, not scopes, so the scope needs no grant of its own; a tool that
    # acts on a subject needs the session to act on behalf of someone.
    if compiled.get("subject_required"):
        return session is None or bool(session.on_behalf_of)
    return True


def _authorized(*, route: Route, tool: ToolRow, session: AgentSession | None) -> bool:
    if not tool.enabled or not _principal_satisfies(compiled=tool.compiled, session=session):
        return False
    if tool.compiled["readonly"]:
        return True
    return route.permission == Route.Permission.FULL and tool.name in (route.write_tools or [])


def _tool_projection(compiled: dict[str, Any]) -> dict[str, Any]:
    projection = {key: compiled.get(key) for key in (*REVISION_TOOL_FIELDS, *REVISION_PROJECTION_FIELDS)}
    projection["usage_guidance"] = (compiled.get("usage_guidance") or {}).get("text")
    return projection


def _sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


def _sources(route: Route) -> list[RouteToolSource]:
    return list(RouteToolSource.objects.filter(route=route).select_related("provider").order_by("position"))


@dataclass(frozen=True)
class ToolRow:
    """The columns of a Tool the surface reads (the definition selectors read only ``compiled``),
    and ``digest``, the SHA-256 of its revision projection without the switch."""

    id: Any
    provider_id: Any
    name: str
    enabled: bool
    compiled: dict[str, Any]
    digest: str


@dataclass(frozen=True)
class _Compiled:
    compiled: dict[str, Any]
    digest: str


# Compiled tools by (id, MD5 of the stored JSON): content-addressed, so an entry is never stale —
# a re-compiled tool has another MD5 and is read again. It spares each request decoding and
# hashing every compiled tool of a large surface.
_COMPILED: OrderedDict[tuple[Any, str], _Compiled] = OrderedDict()
_COMPILED_MAX = 20_000


def _compiled_get(keys: list[tuple[Any, str]]) -> dict[tuple[Any, str], _Compiled]:
    found = {key: entry for key in keys if (entry := _COMPILED.get(key)) is not None}
    missing = [key for key in keys if key not in found]
    if missing:
        wanted = dict(missing)
        rows = (Tool.objects.filter(pk__in=wanted).annotate(compiled_md5=MD5(Cast("compiled", TextField())))
                .values_list("id", "compiled_md5", "compiled"))
        for pk, md5, compiled in rows:
            entry = _Compiled(compiled=compiled, digest=revision_of(_tool_projection(compiled)))
            found[(pk, wanted[pk])] = entry  # a re-compile in between: this request reads the newer one
            _COMPILED[(pk, md5)] = entry  # cached under the version actually read
        while len(_COMPILED) > _COMPILED_MAX:
            _COMPILED.popitem(last=False)
    return found


def _tools_by_source(sources: Sequence[RouteToolSource]) -> dict[Any, dict[str, ToolRow]]:
    # Filtered by provider in the database and by allow list here: an IN list of a thousand names
    # costs the database more than the rows it would leave out. The compiled JSON itself is read
    # only for tools this process has not seen in that exact version.
    wanted: dict[Any, set[str]] = {}
    for source in sources:  # several routes' sources of one provider: their allow lists together
        if source.allowed_tools:
            wanted.setdefault(source.provider_id, set()).update(source.allowed_tools)
    out: dict[Any, dict[str, ToolRow]] = {source.provider_id: {} for source in sources}
    if not wanted:
        return out
    rows = [row for row in Tool.objects.filter(provider_id__in=wanted)
            .annotate(compiled_md5=MD5(Cast("compiled", TextField())))
            .values_list("id", "provider_id", "name", "enabled", "compiled_md5")
            if row[2] in wanted[row[1]]]
    compiled = _compiled_get([(row[0], row[4]) for row in rows])
    for pk, provider_id, name, enabled, md5 in rows:
        entry = compiled[(pk, md5)]
        out[provider_id][name] = ToolRow(pk, provider_id, name, enabled, entry.compiled, entry.digest)
    return out


def route_surface(*, route: Route, session: AgentSession | None, knowledge_sources: int | None = None) -> Surface:
    """The authorized surface of ``route`` for ``session`` (``None``: an operator's view, as a
    principal acting on someone's behalf would see it), with its capability revision. Two
    queries whatever the number of tools (one more when this process has not read some tool's
    compiled version yet), and one to count the route's knowledge bases when its knowledge is on
    and the caller has not counted them (``knowledge_sources``)."""
    sources = _sources(route) if route.tools_direct_enabled else []
    return _surface(route=route, session=session, knowledge_sources=knowledge_sources, sources=sources,
                    tools=_tools_by_source(sources))


def route_surfaces(*, routes: Sequence[Route], session: AgentSession | None) -> list[Surface]:
    """``route_surface`` of each of ``routes``, in the same order, in a fixed number of queries
    whatever the number of routes (a page listing every route's tools asked three a route)."""
    direct = [route.pk for route in routes if route.tools_direct_enabled]
    by_route: dict[Any, list[RouteToolSource]] = {pk: [] for pk in direct}
    for source in (RouteToolSource.objects.filter(route_id__in=direct).select_related("provider")
                   .order_by("position")) if direct else []:
        by_route[source.route_id].append(source)
    tools = _tools_by_source([source for sources in by_route.values() for source in sources])
    reading = [route.pk for route in routes if route.knowledge_enabled]
    counts = dict(Route.objects.filter(pk__in=reading).annotate(n=Count("knowledge_bindings",
                                                                        filter=route_source_filter()))
                  .values_list("pk", "n")) if reading else {}
    return [_surface(route=route, session=session, knowledge_sources=counts.get(route.pk, 0),
                     sources=by_route.get(route.pk, []), tools=tools) for route in routes]


def _surface(*, route: Route, session: AgentSession | None, knowledge_sources: int | None,
             sources: list[RouteToolSource], tools: dict[Any, dict[str, ToolRow]]) -> Surface:
    surface: list[SurfaceTool] = []
    sources_projection: list[dict[str, Any]] = []
    if route.tools_direct_enabled:
        for source in sources:
            provider = source.provider
            allowed = tools[source.provider_id]
            sources_projection.append({
                "provider": provider.name,
                "enabled": provider.enabled,
                "base_url_sha256": _sha256(provider.base_url),
                "spec_sha256": provider.spec_sha256,
                "allow": list(source.allowed_tools),
                "tools": [[tool.digest, tool.enabled] for name in source.allowed_tools if (tool := allowed.get(name))],
            })
            if not provider.enabled:
                continue
            for name in source.allowed_tools:
                tool = allowed.get(name)
                if tool is None or not _authorized(route=route, tool=tool, session=session):
                    continue
                forced = route_approval_forced(route=route, name=name, readonly=tool.compiled["readonly"])
                surface.append(SurfaceTool(name=name, definition=tool_definition(tool=tool, force_approval=forced),
                                           usage_guidance=tool_usage_guidance(tool=tool), tool=tool,
                                           provider_name=provider.name))
        if route.knowledge_enabled and knowledge_sources is None:
            knowledge_sources = route_knowledge_source_count(route=route)
        if route.knowledge_enabled and knowledge_sources:
            surface.extend(_knowledge_tools())
    unique = _unique(surface)
    projection = {
        "route": route.key,
        "permission": route.permission,
        "audience": {"policy": route.audience_policy, "allowed": sorted(route.allowed_audiences or [])},
        "agent_direct": {
            "enabled": route.tools_direct_enabled,
            "write_tools": sorted(route.write_tools or []),
            "force_approval_tools": sorted(route.force_approval_tools or []),
            "unattended_write_tools": (None if route.unattended_write_tools is None
                                       else sorted(route.unattended_write_tools)),
        },
        "sources": sources_projection,
        # Business tools are covered above field by field; here, which of them this caller sees
        # and the route's approval decision. Built-in tools are covered whole.
        "surface": [[tool.name, tool.definition["approval_required"]] if tool.tool is not None
                    else {"definition": tool.definition, "usage_guidance": tool.usage_guidance["text"]}
                    for tool in unique],
    }
    return Surface(route=route, tools=tuple(unique), revision=revision_of(projection),
                   _by_name={tool.name: tool for tool in unique})


def _unique(tools: list[SurfaceTool]) -> list[SurfaceTool]:
    # route_tools_set refuses one name from two sources; a name compiled later by a re-import
    # could still collide, and then the earlier source keeps it.
    seen: set[str] = set()
    out = []
    for tool in tools:
        if tool.name not in seen:
            seen.add(tool.name)
            out.append(tool)
    return out


def _knowledge_tools() -> list[SurfaceTool]:
    out = []
    for definition, guidance in KNOWLEDGE_TOOLS:
        text_bytes = len(guidance.encode("utf-8"))
        out.append(SurfaceTool(
            name=definition["name"], definition=dict(definition),
            usage_guidance={"text": guidance, "truncated": False, "source_chars": len(guidance),
                            "max_chars": MAX_GUIDANCE_CHARS, "source_bytes": text_bytes,
                            "max_bytes": MAX_GUIDANCE_BYTES},
        ))
    return out


def route_capability_summary(*, route: Route, session: AgentSession | None,
                             knowledge_sources: int | None = None) -> dict[str, Any]:
    """Bootstrap `capabilities`: the revision and counts of the tools `session` may use on `route`
    (its authorized surface; empty while direct tools are off). With no session, as an operator
    sees it (the builder dry-run and the route page)."""
    return capability_summary(route=route,
                              surface=route_surface(route=route, session=session, knowledge_sources=knowledge_sources))


def capability_summary(*, route: Route, surface: Surface) -> dict[str, Any]:
    """Bootstrap `capabilities` of a surface already built."""
    summary = surface.summary()
    return {
        "revision": summary["revision"],
        "authorized_total": summary["authorized_total"],
        "active_limit": route.agent_client_active_tool_limit,
        "readonly": summary["readonly"],
        "writes": summary["writes"],
        "approval_required": summary["approval_required"],
    }
