"""What the built-in `kb_search` tool answers (apps.tools.knowledge_tools): the route's best
passages, each with its section's `chapter_path`, so an agent can cite "from which section".

Unlike search hints (one per document, short summaries, 4 KiB), a tool result carries passage
text: up to KB_SEARCH_MAX_RESULTS passages, several per document allowed, the whole answer within
KB_SEARCH_MAX_BYTES of compact JSON — whole passages while they fit, then one cut to the room left
when at least KB_SEARCH_ENTRY_MIN_BYTES remain. Each passage's `ref` reads its document on with
`kb_read` (the knowledge read protocol). Nothing here writes (a KB's reranker may write its cost
record).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import DatabaseError

from apps.agent_auth.models import AgentSession
from apps.core.jsonbytes import iso_utc, json_bytes, json_text_prefix
from apps.knowledge.pipeline.retrieve import clean_query
from apps.routes.models import Route
from apps.runtime.knowledge.limits import (
    KB_SEARCH_DEFAULT_RESULTS,
    KB_SEARCH_ENTRY_MIN_BYTES,
    KB_SEARCH_MAX_BYTES,
    KB_SEARCH_MAX_RESULTS,
    KB_SEARCH_SCHEMA,
    QUERY_MAX_CHARS,
    TRUST,
)
from apps.runtime.knowledge.scope import bounded, request_bounded, scope_or_unavailable
from apps.runtime.knowledge.search import chapter_path_out, refs_issue, retrieve_hits, validate_hits

logger = logging.getLogger("bailinghub.runtime")


def _fit(answer: dict[str, Any], hits: list[dict[str, Any]], *, max_bytes: int) -> bool:
    """Adds `hits` to `answer["hits"]` in order within `max_bytes`; whether any was cut or left out."""
    for hit in hits:
        answer["hits"].append(hit)
        size = json_bytes(answer)
        if size <= max_bytes:
            continue
        content = hit["content"]
        hit["content"] = ""
        room = max_bytes - json_bytes(answer) + 2  # the quotes of the empty string are already counted
        if room - 2 < KB_SEARCH_ENTRY_MIN_BYTES:
            answer["hits"].pop()
            return True
        hit["content"] = json_text_prefix(content, room - 2)
        hit["truncated"] = True
        return True
    return False


def kb_search_run(*, session: AgentSession, route: Route, query: str, limit: int = KB_SEARCH_DEFAULT_RESULTS,
                  run_id: uuid.UUID | None = None, max_bytes: int = KB_SEARCH_MAX_BYTES) -> dict[str, Any]:
    """`bailing.kb-search.v1`: {schema_version, route, knowledge_scope_revision, status, trust,
    hits: [{ref, title, chapter_path, content, score, truncated}], truncated, expires_at}.
    `status` is ok (zero hits included), disabled, partial or unavailable — a retrieval failure is
    never an empty ok. The caller (the tool dispatcher) has checked the route, the session and
    `limit` (1–KB_SEARCH_MAX_RESULTS). `max_bytes` (at most KB_SEARCH_MAX_BYTES, at least 2048)
    bounds the whole answer, for a caller whose result budget is smaller (an invocation's text)."""
    limit = max(1, min(limit, KB_SEARCH_MAX_RESULTS))
    max_bytes = max(2048, min(max_bytes, KB_SEARCH_MAX_BYTES))
    with request_bounded():
        scope = scope_or_unavailable(route)
        answer: dict[str, Any] = {"schema_version": KB_SEARCH_SCHEMA, "route": route.key,
                                  "knowledge_scope_revision": scope.revision}
        status, found = "disabled", []
        query = clean_query(query)[:QUERY_MAX_CHARS]
        if scope.configured and not query:
            status = "ok"
        elif scope.configured:
            # Each passage gets an even share of the budget, cut around its hit rather than at its start.
            status, hits = retrieve_hits(route=route, scope=scope, query=query, limit=limit,
                                         budget_bytes=max(1024, max_bytes // limit),
                                         max_docs=route.knowledge_max_docs)
            try:
                with bounded():
                    found = validate_hits(hits=hits, scope=scope, limit=limit, one_per_document=False)
            except DatabaseError as exc:
                logger.warning("kb_search hit validation failed: %s", type(exc).__name__)
                status, found = "unavailable", []
    refs, expires_at = refs_issue(session=session, route=route, run_id=run_id, scope=scope, found=found)
    answer.update(status=status, trust=TRUST, hits=[], truncated=False, expires_at=iso_utc(expires_at))
    passages = [{"ref": ref, "title": item.document.filename, "chapter_path": chapter_path_out(item.hit.chapter_path),
                 "content": item.hit.content, "score": round(float(item.hit.score), 4),
                 "truncated": bool(item.hit.metadata.get("truncated", False))}
                for item, ref in zip(found, refs, strict=True)]
    answer["truncated"] = _fit(answer, passages, max_bytes=max_bytes)
    return answer
