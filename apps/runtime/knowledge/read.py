"""Paged reads of a document through a signed reference and cursor
(`bailing.agent-knowledge-read.v1`). Every read re-checks the identity, the route, the run, the
scope, the document's ownership, ready state and revision, and refuses with the protocol's error
instead of ever serving another revision. Byte budgets are measured over the exact bytes the views
send (apps.core.jsonbytes.CompactJSONRenderer)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import DatabaseError

from apps.agent_auth.models import AgentSession
from apps.core.jsonbytes import json_bytes, json_text_prefix, utf8_char_floor
from apps.routes.models import Route
from apps.runtime.errors import KnowledgeChanged, KnowledgeReferenceInvalid, KnowledgeScopeChanged, KnowledgeUnavailable
from apps.runtime.knowledge import references
from apps.runtime.knowledge.documents import (
    BODY_SEPARATOR,
    chapter_path_at,
    document_revision,
    document_sections,
    documents_ready,
)
from apps.runtime.knowledge.limits import (
    CHAPTER_PATH_MAX_BYTES,
    READ_CHAIN_MAX_BYTES,
    READ_DEFAULT_BYTES,
    READ_SCHEMA,
    TRUST,
    UNAVAILABLE_MESSAGE,
)
from apps.runtime.knowledge.scope import bounded, knowledge_scope_get, run_get_current

logger = logging.getLogger("bailinghub.runtime")


def _page(answer: dict[str, Any], *, body: bytes, offset: int, exposed: int, max_bytes: int, ref: str,
          expires_at: int) -> dict[str, Any]:
    """Fills `content`, `next_cursor`, `truncated` and `budget_exhausted` of `answer` with the
    page of `body` starting at `offset`: as much as fits `max_bytes` of JSON, whole characters,
    never past READ_CHAIN_MAX_BYTES of body exposed by the chain."""
    if offset > len(body) or offset != utf8_char_floor(body, offset) or not 0 <= exposed <= READ_CHAIN_MAX_BYTES:
        raise KnowledgeReferenceInvalid()
    end = utf8_char_floor(body, min(len(body), offset + READ_CHAIN_MAX_BYTES - exposed))
    rest = body[offset:end].decode("utf-8")
    cut_by_chain = end < len(body)
    answer.update(content=rest, next_cursor=None, truncated=cut_by_chain, budget_exhausted=cut_by_chain)
    if json_bytes(answer) <= max_bytes:
        return answer
    cursor = references.cursor_issue(ref=ref, offset=offset, exposed=exposed, expires_at=expires_at)  # fixed length
    answer.update(content="", next_cursor=cursor, truncated=True, budget_exhausted=False)
    content = json_text_prefix(rest, max_bytes - json_bytes(answer))
    if not content:  # the envelope alone cannot exceed a quarter of the smallest budget
        raise KnowledgeUnavailable(UNAVAILABLE_MESSAGE)
    used = len(content.encode("utf-8"))
    next_cursor = references.cursor_issue(ref=ref, offset=offset + used, exposed=exposed + used,
                                          expires_at=expires_at)
    answer.update(content=content, next_cursor=next_cursor)
    return answer


def knowledge_read(*, session: AgentSession, route: Route, ref: str, run_id: uuid.UUID | None = None,
                   cursor: str | None = None, max_bytes: int = READ_DEFAULT_BYTES) -> dict[str, Any]:
    """`bailing.agent-knowledge-read.v1`: the next page of the document `ref` names, as long as
    the reference is this caller's, unexpired, and its scope and document revision still hold."""
    at = references.now()
    claims = references.ref_verify(ref, session=session, route=route, run_id=run_id, at=at)
    offset, exposed = references.cursor_verify(cursor, ref=ref, at=at) if cursor is not None else (0, 0)
    if run_id is not None:
        run_get_current(session=session, route=route, run_id=run_id)
    try:
        with bounded():
            scope = knowledge_scope_get(route=route)
            if scope.revision != claims.scope_revision:
                raise KnowledgeScopeChanged()
            document = documents_ready(document_ids=[claims.document_id], scope=scope).get(claims.document_id)
            sections = document_sections(document_ids=[claims.document_id], scope=scope).get(claims.document_id)
    except DatabaseError as exc:
        logger.warning("Agent knowledge read unavailable: %s", type(exc).__name__)
        raise KnowledgeUnavailable(UNAVAILABLE_MESSAGE) from exc
    if document is None or sections is None:  # a document's sections are never an empty list
        raise KnowledgeChanged()
    pieces = sections.pieces
    body = BODY_SEPARATOR.join(text for _, text, _ in pieces)
    revision = document_revision(title=document.filename, body=body)
    if revision != claims.document_revision:
        raise KnowledgeChanged()
    answer: dict[str, Any] = {"schema_version": READ_SCHEMA, "route": route.key}
    if run_id is not None:
        answer["run_id"] = str(run_id)
    path = chapter_path_at(pieces, offset)
    # The section this page begins in, so that a citation can name it.
    answer.update(knowledge_scope_revision=scope.revision, ref=ref, revision=revision, title=document.filename,
                  chapter_path=None if path is None else json_text_prefix(path, CHAPTER_PATH_MAX_BYTES),
                  content="", trust=TRUST, next_cursor=None, truncated=False, budget_exhausted=False)
    encoded = body.encode("utf-8")
    answer.update(total_content_bytes=len(encoded), read_chain_max_bytes=READ_CHAIN_MAX_BYTES)
    return _page(answer, body=encoded, offset=offset, exposed=exposed, max_bytes=max_bytes, ref=ref,
                 expires_at=claims.expires_at)
