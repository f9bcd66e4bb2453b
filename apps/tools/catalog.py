"""What the agent tool endpoints answer, from a route's surface: capability search, tool detail,
the legacy catalog, and the active tools of a turn."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from typing import Any

from apps.core.jsonbytes import json_bytes

from . import semantic
from .errors import CapabilityChanged, ToolNotFound
from .ranking import Prepared, lexical_ranking, prepare
from .surface import Surface, SurfaceTool

SEARCH_SCHEMA = "bailing.agent-capability-search.v1"
DETAIL_SCHEMA = "bailing.agent-tool-detail.v1"
CATALOG_SCHEMA = "bailing.agent-tool-catalog.v1"
SEARCH_DEFAULT_LIMIT = 8
SEARCH_MAX_LIMIT = 12
CATALOG_MAX_BYTES = 1024 * 1024 - 4096  # under the hosts' 1 MiB, with room for the renderer's margin
LEXICAL = "lexical"


def ranked_tools(surface: Surface, query: str, *, limit: int,
                 allowed: Collection[str] | None = None) -> tuple[list[SurfaceTool], str]:
    """The best ``limit`` tools of ``surface`` for ``query`` and the ranking that ordered them:
    semantic fused with lexical when every business tool has a fresh index row (apps.tools.semantic),
    else the contract's lexical order for the whole search. With ``allowed`` (a task member's exact
    tools), only those, in the same order."""
    order, matched = lexical_ranking(query, _prepared(surface))
    scores = semantic.similarities(surface, query)
    if scores is None:
        ranking = LEXICAL
    else:
        keywords, found = semantic.keyword_ranking(surface, query, tiers=(order, matched))
        order = semantic.fused_order(names=[tool.name for tool in surface.tools], lexical=keywords,
                                     lexical_matched=found, semantic=scores)
        ranking = semantic.SEMANTIC
    if allowed is not None:
        order = [index for index in order if surface.tools[index].name in allowed]
    return [surface.tools[index] for index in order[:limit]], ranking


_PREPARED: OrderedDict[str, tuple[Prepared, ...]] = OrderedDict()
_PREPARED_MAX = 64


def _prepared(surface: Surface) -> tuple[Prepared, ...]:
    # The revision covers every definition, so the normalized texts of one revision never change:
    # kept per process for the last few surfaces, so a search does not normalize 1,000 tools again.
    prepared = _PREPARED.get(surface.revision)
    if prepared is None or len(prepared) != len(surface.tools):
        prepared = prepare([tool.rank_text for tool in surface.tools])
        _PREPARED[surface.revision] = prepared
        while len(_PREPARED) > _PREPARED_MAX:
            _PREPARED.popitem(last=False)
    return prepared


def capability_search(*, surface: Surface, query: str, limit: int,
                      allowed: Collection[str] | None = None) -> dict[str, Any]:
    """`bailing.agent-capability-search.v1`: the best `limit` tools of the authorized surface for
    `query`, zero scores included, with the `discovery` block. ``discovery.ranking`` says which
    order answered: ``semantic`` (fused with lexical) or, while any source's index is missing or
    stale, ``lexical`` for the whole search. Under a run bound to a task, `allowed` is the member's
    exact tools: the authorization then is those, and nothing else is offered."""
    tools, ranking = ranked_tools(surface, query, limit=limit, allowed=allowed)
    total = surface.count(allowed)
    return {
        "schema_version": SEARCH_SCHEMA,
        "route": surface.route.key,
        "capability_revision": surface.revision,
        "query": query,
        "tools": [tool.definition for tool in tools],
        "discovery": {
            "mode": "ranked_candidates",
            "scope": "current_authorization",
            "returned_count": len(tools),
            "authorized_total": total,
            "matched_total": None,
            "matched_total_exact": False,
            "limit": limit,
            "truncated": total > len(tools),
            "has_more": total > len(tools),
            "truncation_scope": "authorized_catalog",
            "pagination": "unsupported",
            "ranking": ranking,
        },
    }


def active_tools(*, surface: Surface, query: str, limit: int,
                 allowed: Collection[str] | None = None) -> list[dict[str, Any]]:
    """A turn's `active_tools`: the best `limit` definitions for the user's input, by the search
    order. A turn bound to a task gives the member's exact tools as `allowed` and is offered only
    those: any other would be refused with TASK_TOOL_NOT_ALLOWED."""
    return [tool.definition for tool in ranked_tools(surface, query, limit=limit, allowed=allowed)[0]]


def tool_detail(*, surface: Surface, name: str, capability_revision: str) -> dict[str, Any]:
    """`bailing.agent-tool-detail.v1`: one tool's definition and usage guidance. 409
    `capability_changed` when `capability_revision` is not the surface's; 404 `tool_not_found`
    when the tool is not on it. Reads only."""
    if capability_revision != surface.revision:
        raise CapabilityChanged(capability_revision=surface.revision)
    tool = surface.get(name)
    if tool is None:
        raise ToolNotFound()
    return {
        "schema_version": DETAIL_SCHEMA,
        "route": surface.route.key,
        "capability_revision": surface.revision,
        "tool": tool.definition,
        "usage_guidance": tool.usage_guidance,
    }


def tool_catalog(*, surface: Surface) -> dict[str, Any]:
    """The legacy `bailing.agent-tool-catalog.v1`: the tools of the surface, in source order. Hosts
    refuse answers over 1 MiB, so a surface too large for that ends at the last whole definition
    that fits, with `truncated: true` (absent otherwise); capability search reaches every tool."""
    body: dict[str, Any] = {
        "schema_version": CATALOG_SCHEMA,
        "route": surface.route.key,
        "capability_revision": surface.revision,
        "tools": [],
    }
    remaining = CATALOG_MAX_BYTES - json_bytes(body) - len(',"truncated":true')
    for tool in surface.tools:
        size = json_bytes(tool.definition) + 1
        if size > remaining:
            body["truncated"] = True
            break
        remaining -= size
        body["tools"].append(tool.definition)
    return body
