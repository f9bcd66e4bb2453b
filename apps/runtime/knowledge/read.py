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
from apps.runtime.knowledge.documents import body_window
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


def _page(answer: dict[str, Any], *, window: bytes, total: int, offset: int, exposed: int, max_bytes: int,
          ref: str, expires_at: int) -> dict[str, Any]:
    """Fills `content`, `next_cursor`, `truncated` and `budget_exhausted` of `answer` with the
    page of a body of `total` bytes starting at `offset`: as much as fits `max_bytes` of JSON,
    whole characters, never past READ_CHAIN_MAX_BYTES of body exposed by the chain. `window` is
    the body from `offset` on: window_length(...) bytes of it, fewer at its end (a shorter window
    would give shorter pages)."""
    if offset > total or (window and window[0] & 0xC0 == 0x80):
        raise KnowledgeReferenceInvalid()  # past the end or inside a character
    assert len(window) == min(total - offset, window_length(exposed=exposed, max_bytes=max_bytes))
    # Where the chain stops, relative to `offset`; the window holds the byte there unless the
    # window ends first, and then what it holds is more than a page.
    limit = min(total, offset + READ_CHAIN_MAX_BYTES - exposed) - offset
    reaches = limit < len(window) or offset + len(window) == total
    end = utf8_char_floor(window, limit) if reaches else utf8_char_floor(window, len(window) - 1)
    rest = window[:end].decode("utf-8")
    cut_by_chain = offset + end < total
    answer.update(content=rest, next_cursor=None, truncated=cut_by_chain, budget_exhausted=cut_by_chain)
    if reaches and json_bytes(answer) <= max_bytes:
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


def window_length(*, exposed: int, max_bytes: int) -> int:
    """How much of a body _page needs from the page's offset on: the rest of the chain, or more
    than a page can carry (a page's content never has more bytes than its JSON), and the byte
    after either (a character that straddles the cut is left out)."""
    return min(READ_CHAIN_MAX_BYTES - exposed, max_bytes) + 1


def knowledge_read(*, session: AgentSession, route: Route, ref: str, run_id: uuid.UUID | None = None,
                   cursor: str | None = None, max_bytes: int = READ_DEFAULT_BYTES) -> dict[str, Any]:
    """`bailing.agent-knowledge-read.v1`: the next page of the document `ref` names — the first
    one starting at the section the reference's hit lies in, the chain going on from there to the
    body's end (at most READ_CHAIN_MAX_BYTES) — as long as the reference is this caller's,
    unexpired, and its scope and document revision still hold.
    A page reads the sections it shows and the lengths of the others, not the whole body, once
    this process keeps the document's digest (documents.body_window)."""
    at = references.now()
    claims = references.ref_verify(ref, session=session, route=route, run_id=run_id, at=at)
    offset, exposed = references.cursor_verify(cursor, ref=ref, at=at) if cursor is not None else (0, 0)
    if run_id is not None:
        run_get_current(session=session, route=route, run_id=run_id)
    if not 0 <= exposed <= READ_CHAIN_MAX_BYTES:  # a signed cursor's never is
        raise KnowledgeReferenceInvalid()
    try:
        with bounded():
            scope = knowledge_scope_get(route=route)
            if scope.revision != claims.scope_revision:
                raise KnowledgeScopeChanged()
            # A chain's first page starts at the section its reference's hit lies in.
            window = body_window(document_id=claims.document_id, scope=scope, offset=offset,
                                 length=window_length(exposed=exposed, max_bytes=max_bytes),
                                 section_id=claims.section_id if cursor is None else None)
    except DatabaseError as exc:
        logger.warning("Agent knowledge read unavailable: %s", type(exc).__name__)
        raise KnowledgeUnavailable(UNAVAILABLE_MESSAGE) from exc
    if window is None or window.revision != claims.document_revision:
        raise KnowledgeChanged()
    answer: dict[str, Any] = {"schema_version": READ_SCHEMA, "route": route.key}
    if run_id is not None:
        answer["run_id"] = str(run_id)
    path = window.chapter_path
    # The section this page begins in, so that a citation can name it.
    answer.update(knowledge_scope_revision=scope.revision, ref=ref, revision=window.revision,
                  title=window.document.filename,
                  chapter_path=None if path is None else json_text_prefix(path, CHAPTER_PATH_MAX_BYTES),
                  content="", trust=TRUST, next_cursor=None, truncated=False, budget_exhausted=False)
    answer.update(total_content_bytes=window.total_bytes, read_chain_max_bytes=READ_CHAIN_MAX_BYTES)
    return _page(answer, window=window.data, total=window.total_bytes, offset=window.offset, exposed=exposed,
                 max_bytes=max_bytes, ref=ref, expires_at=claims.expires_at)
