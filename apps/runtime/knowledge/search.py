"""Knowledge search for agents: capabilities, search hints, and the `on_demand` delivery of a turn.

Search returns at most three hints, one per document, each with a signed reference
(apps.runtime.knowledge.references); a hit is shown only while its text is still exactly in the
current text of its chunk, in a document that is still readable in the scope. Nothing here writes.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from apps.agent_auth.models import AgentSession
from apps.core.jsonbytes import iso_utc, json_bytes, json_text_prefix
from apps.knowledge.models import Document, KnowledgeBase
from apps.knowledge.pipeline.candidates import Hit
from apps.knowledge.pipeline.embedders import EmbeddingFailed
from apps.knowledge.pipeline.excerpt import focused_excerpt
from apps.knowledge.pipeline.retrieve import SearchOptions, clean_query
from apps.knowledge.selectors import knowledge_search
from apps.ledger.models import Run
from apps.routes.models import Route
from apps.runtime.knowledge import references
from apps.runtime.knowledge.documents import piece_texts, readable_digests
from apps.runtime.knowledge.limits import (
    CAPABILITIES_SCHEMA,
    CHAPTER_PATH_MAX_BYTES,
    DELIVERY_MODES,
    DELIVERY_SCHEMA,
    LIMITS,
    PROTOCOL,
    QUERY_MAX_CHARS,
    SEARCH_MAX_BYTES,
    SEARCH_MAX_RESULTS,
    SEARCH_SCHEMA,
    SUMMARY_MAX_BYTES,
    TRUST,
)
from apps.runtime.knowledge.references import REF_SIGNER
from apps.runtime.knowledge.scope import KnowledgeScope, bounded, request_bounded, scope_or_unavailable

logger = logging.getLogger("bailinghub.runtime")


@dataclass(frozen=True)
class Found:
    document: Document
    hit: Hit
    revision: str
    section: str  # the current text of the section the hit lies in

    def summary(self, query: str) -> str:
        """The hint's summary: the excerpt of the hit's section that the query is about, within
        the span of the chunk that matched (pipeline.excerpt)."""
        start, end = self.hit.metadata.get("parent_start"), self.hit.metadata.get("parent_end")
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(self.section)):
            start = self.section.find(self.hit.content)
            end = start + len(self.hit.content)
        return focused_excerpt(self.section, query, max_bytes=SUMMARY_MAX_BYTES, region=(start, end))


def chapter_path_out(path: str | None) -> str | None:
    """A hit's chapter path as agents get it: null when its section has none, else at most
    CHAPTER_PATH_MAX_BYTES of JSON string."""
    return None if path is None else json_text_prefix(path, CHAPTER_PATH_MAX_BYTES)


def _model_groups(scope: KnowledgeScope) -> list[list[KnowledgeBase]]:
    groups: dict[str, list[KnowledgeBase]] = {}
    for kb in scope.knowledge_bases:
        groups.setdefault(str(kb.embedding_model_id), []).append(kb)
    return [groups[key] for key in sorted(groups)]


def _merge_by_rank(ranked_lists: list[list[Hit]]) -> list[Hit]:
    """Rankings of separately searched embedding models, merged by rank (their scores are not
    comparable), ties by score."""
    entries = [(rank, -hit.score, group, hit) for group, hits in enumerate(ranked_lists)
               for rank, hit in enumerate(hits)]
    return [hit for *_, hit in sorted(entries, key=lambda entry: entry[:3])]


def retrieve_hits(*, route: Route, scope: KnowledgeScope, query: str, limit: int,
                  budget_bytes: int = SUMMARY_MAX_BYTES, max_docs: int | None = None) -> tuple[str, list[Hit]]:
    """(status, hits best first). Each embedding model's KBs are searched on their own, so one
    failing model (its embedder down) leaves the others: `partial`; all failing: `unavailable`."""
    options = SearchOptions(
        top_k=max(limit, route.knowledge_top_k), mode="hybrid", score_threshold=route.knowledge_score_threshold,
        max_docs=min(limit if max_docs is None else max_docs, route.knowledge_max_docs), budget_bytes=budget_bytes,
        route_id=route.pk,
    )
    ranked_lists, failed = [], 0
    for kbs in _model_groups(scope):
        try:
            with bounded():
                ranked_lists.append(knowledge_search(kbs=kbs, query=query, options=options).hits)
        except (DatabaseError, EmbeddingFailed) as exc:
            logger.warning("Agent knowledge search failed over %d knowledge base(s): %s", len(kbs), type(exc).__name__)
            failed += 1
    status = "ok" if not failed else ("partial" if ranked_lists else "unavailable")
    return status, _merge_by_rank(ranked_lists)


def validate_hits(*, hits: list[Hit], scope: KnowledgeScope, limit: int, one_per_document: bool = True
                  ) -> list[Found]:
    """The best hit of each of at most `limit` documents (or, not one per document, the best
    `limit` hits) that are still readable in this scope, whose hit text is still exactly in the
    current text of its chunk."""
    order = list(dict.fromkeys(hit.document_id for hit in hits))
    documents, digests = readable_digests(document_ids=order, scope=scope)
    # Only the pieces the hits came from are read, not the documents' whole bodies.
    texts = piece_texts(sources={hit.parent_id or hit.chunk_id for hit in hits if hit.document_id in digests},
                        digests=digests, scope=scope)
    found: list[Found] = []
    seen = set()
    for hit in hits:
        document = documents.get(hit.document_id)
        if document is None or (one_per_document and document.pk in seen) or not hit.content:
            continue
        source = texts.get((document.pk, hit.parent_id or hit.chunk_id))
        if source is None or hit.content not in source:
            continue
        seen.add(document.pk)
        found.append(Found(document=document, hit=hit, revision=digests[document.pk].revision, section=source))
        if len(found) == limit:
            break
    return found


def _documents_find(*, route: Route, scope: KnowledgeScope, query: str, limit: int) -> tuple[str, list[Found]]:
    """(status, validated documents best first): retrieval, then validation against the database."""
    if not scope.configured:
        return "disabled", []
    query = clean_query(query)[:QUERY_MAX_CHARS]
    if not query:
        return "ok", []
    status, hits = retrieve_hits(route=route, scope=scope, query=query, limit=limit)
    try:
        with bounded():
            return status, validate_hits(hits=hits, scope=scope, limit=limit)
    except DatabaseError as exc:
        logger.warning("Agent knowledge hit validation failed: %s", type(exc).__name__)
        return "unavailable", []


def refs_issue(*, session: AgentSession, route: Route, run_id: uuid.UUID | None, scope: KnowledgeScope,
               found: list[Found]) -> tuple[list[str], int]:
    """A reference to each found hit's document, bound to the caller, the route and `run_id`,
    naming the section the hit lies in (its reading chain starts there); and their expiry."""
    expires_at = REF_SIGNER.expiry(at=references.now())
    identity = references.identity_digest(session)
    refs = []
    for item in found:
        claims = references.RefClaims(session_id=session.pk, identity=identity, run_id=run_id,
                                      document_id=item.document.pk, scope_revision=scope.revision,
                                      document_revision=item.revision, route_key=route.key,
                                      section_id=item.hit.parent_id or item.hit.chunk_id)
        refs.append(references.ref_issue(claims, expires_at=expires_at))
    return refs, expires_at


def _hints_issue(*, session: AgentSession, route: Route, run_id: uuid.UUID | None, scope: KnowledgeScope,
                 found: list[Found], query: str) -> list[dict[str, Any]]:
    """One hint per document, with a reference bound to the caller, the route and `run_id`: the
    contract's six fields and no other ("每个hint仅含 ref、title、summary、revision、score、
    expires_at"). The section a hit lies in comes with the read (chapter_path)."""
    refs, expires_at = refs_issue(session=session, route=route, run_id=run_id, scope=scope, found=found)
    hints = []
    for item, ref in zip(found, refs, strict=True):
        hints.append({
            "ref": ref,
            "title": item.document.filename,
            "summary": item.summary(query),
            "revision": item.revision,
            "score": round(float(item.hit.score), 4),
            "expires_at": iso_utc(expires_at),
        })
    return hints


def _hints_fit(envelope: dict[str, Any], hints: list[dict[str, Any]], *, max_bytes: int) -> bool:
    """Adds hints to `envelope["hints"]` in order while the whole stays within `max_bytes`;
    whether any was left out. Fewer hints, never more bytes."""
    for hint in hints:
        envelope["hints"].append(hint)
        if json_bytes(envelope) > max_bytes:
            envelope["hints"].pop()
            return True
    return False


def knowledge_capabilities(*, route: Route) -> dict[str, Any]:
    """`bailing.agent-knowledge-capabilities.v1`. `enabled`: the route reads knowledge, has
    sources, and the knowledge service answered (with an embedder configured for a source)."""
    scope = scope_or_unavailable(route)
    providers = settings.KNOWLEDGE_EMBEDDERS
    enabled = scope.configured and any(kb.embedding_model.provider in providers for kb in scope.knowledge_bases)
    return {
        "schema_version": CAPABILITIES_SCHEMA,
        "protocol": PROTOCOL,
        "supported": True,
        "route": route.key,
        "enabled": enabled,
        "knowledge_scope_revision": scope.revision,
        "delivery_modes": list(DELIVERY_MODES),
        "limits": dict(LIMITS),
    }


def knowledge_search_hints(*, session: AgentSession, route: Route, query: str, limit: int = SEARCH_MAX_RESULTS,
                           run: Run | None = None) -> dict[str, Any]:
    """`bailing.agent-knowledge-search.v1`: hints to at most `limit` documents, the whole answer
    within SEARCH_MAX_BYTES. A retrieval failure is `unavailable` (or `partial`), never an empty
    `ok`; the route's score threshold is applied and never lowered to fill."""
    with request_bounded():
        scope = scope_or_unavailable(route)
        status, found = _documents_find(route=route, scope=scope, query=query, limit=limit)
    hints = _hints_issue(session=session, route=route, run_id=run.pk if run else None, scope=scope, found=found,
                         query=query)
    answer: dict[str, Any] = {"schema_version": SEARCH_SCHEMA, "route": route.key}
    if run is not None:
        answer["run_id"] = str(run.pk)
    answer.update(knowledge_scope_revision=scope.revision, status=status, trust=TRUST, hints=[], truncated=False)
    answer["truncated"] = _hints_fit(answer, hints, max_bytes=SEARCH_MAX_BYTES)
    return answer


@dataclass(frozen=True)
class PreparedDelivery:
    """The knowledge of an `on_demand` turn, searched before its run exists (and before the turn
    takes any lock); `for_run` issues the hints, bound to the run."""

    session: AgentSession
    route: Route
    scope: KnowledgeScope
    status: str
    found: list[Found]
    query: str

    def for_run(self, *, run: Run) -> dict[str, Any]:
        """`context.knowledge_delivery` (`bailing.agent-knowledge-delivery.v1`) within
        SEARCH_MAX_BYTES. Its references are readable once the run is `context_ready`."""
        delivery: dict[str, Any] = {
            "schema_version": DELIVERY_SCHEMA,
            "mode": "on_demand",
            "protocol": PROTOCOL,
            "knowledge_scope_revision": self.scope.revision,
            "status": self.status,
            "hints": [],
        }
        hints = _hints_issue(session=self.session, route=self.route, run_id=run.pk, scope=self.scope,
                             found=self.found, query=self.query)
        _hints_fit(delivery, hints, max_bytes=SEARCH_MAX_BYTES)
        return delivery


def knowledge_delivery_prepare(*, session: AgentSession, route: Route, query: str) -> PreparedDelivery:
    """Search for an `on_demand` turn. A retrieval failure is status `unavailable` in the delivery
    (the turn goes on: no body was promised); 503 `knowledge_unavailable` only when the scope
    itself cannot be read."""
    with request_bounded():
        scope = scope_or_unavailable(route)
        status, found = _documents_find(route=route, scope=scope, query=query, limit=SEARCH_MAX_RESULTS)
    return PreparedDelivery(session=session, route=route, scope=scope, status=status, found=found, query=query)
