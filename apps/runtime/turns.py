"""Turns of the Agent Client Runtime: open a turn (freeze a run and its context), answer it.

`turn_open` is the one service behind `POST /workspaces/:route/turns`:

1. the request hash (SHA-256 of the canonical request, `knowledge_delivery` included);
2. a run already holding this turn's keys is replayed when the hash is the same, and is 409
   `turn_conflict` otherwise (checked again under the lock; the unique constraints on Run
   decide any race);
3. knowledge — inline bodies through the knowledge app's retrieval selector, or `on_demand`
   hints (apps.runtime.knowledge) — before any lock;
4. the conversation row, created on first use and locked for the rest of the transaction;
5. memory, read *before* the user's message is appended: recent messages, the summary, the
   principal's route and project notes;
6. the context, fitted into 64 KiB, frozen on the run with the revisions; the user's message
   is appended and the run is `context_ready`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from django.db import transaction

from apps.agent_auth.models import AgentSession
from apps.core.jsonbytes import compact_json, iso_utc, json_bytes, json_text_bytes, json_text_prefix
from apps.core.revisions import revision_of
from apps.knowledge.pipeline.embedders import EmbeddingFailed
from apps.knowledge.selectors import route_knowledge_search
from apps.ledger.errors import TurnConflict
from apps.ledger.memory import AssembledMemory, MemorySettings, memory_assemble, token_count
from apps.ledger.models import Conversation, MemoryNote, Run
from apps.ledger.selectors import (
    conversation_messages_for_memory,
    project_note_list,
    route_note_list,
    run_list_for_turn,
    run_list_for_turn_key,
)
from apps.ledger.services import conversation_lock, run_freeze, run_open
from apps.routes.models import Route
from apps.routes.selectors import route_governance, route_instructions, route_profile
from apps.runtime.errors import KnowledgeUnavailable
from apps.runtime.knowledge import PreparedDelivery, chapter_path_out, knowledge_delivery_prepare
from apps.runtime.selectors import route_knowledge_source_count
from apps.tasks.models import Task, TaskMember
from apps.tasks.services import task_binding_resolve, task_run_pin
from apps.tools.catalog import active_tools
from apps.tools.ranking import query_clean
from apps.tools.surface import route_surface

logger = logging.getLogger("bailinghub.runtime")

TURN_SCHEMA = "bailing.agent-turn-context.v1"
COMPLETION_SCHEMA = "bailing.agent-run-completion.v1"

CONTEXT_MAX_BYTES = 64 * 1024
KNOWLEDGE_MAX_BYTES = 16 * 1024
KNOWLEDGE_ENTRY_MIN_BYTES = 512
KNOWLEDGE_QUERY_MAX_CHARS = 2000
# The principal's notes a turn carries, newest first, whole notes only, within these budgets.
ROUTE_NOTES_IN_CONTEXT, ROUTE_NOTES_CONTEXT_CHARS = 20, 8000
PROJECT_NOTES_IN_CONTEXT, PROJECT_NOTES_CONTEXT_CHARS = 12, 4000


@dataclass(frozen=True)
class TurnRequest:
    """A validated turn request; every field takes part in the request hash."""

    client_conversation_id: str
    client_turn_id: str
    user_message_id: str
    user_input: str
    page_context: dict[str, Any] = field(default_factory=dict)
    renderers: list[str] = field(default_factory=list)
    knowledge_delivery: str = Run.KnowledgeDelivery.INLINE
    task_binding: dict[str, Any] | None = None

    @property
    def hash(self) -> str:
        fields = asdict(self)
        if fields["task_binding"] is None:  # hashes of turns without a binding stay what they were
            del fields["task_binding"]
        return revision_of(fields)


def _bytes(value: Any) -> int:
    """`value`'s size as the answer sends it (U+2028 and U+2029 escaped: six bytes each)."""
    return json_bytes(value)


def turn_response(*, run: Run) -> dict[str, Any]:
    """`bailing.agent-turn-context.v1`, from the frozen run: a replay answers the same bytes. The
    task binding is echoed at the top level only when the turn sent one."""
    out = {
        "schema_version": TURN_SCHEMA,
        "run_id": str(run.pk),
        "profile_revision": run.profile_revision,
        "capability_revision": run.capability_revision,
        "context": run.context,
        "active_tools": run.active_tools,
    }
    link = getattr(run, "task_link", None)
    if link is not None:
        out["task_binding"] = link.binding
    return out


def completion_response(*, run: Run) -> dict[str, Any]:
    return {"schema_version": COMPLETION_SCHEMA, "run_id": str(run.pk), "status": run.state}


def _replayed(runs: list[Run], request_hash: str) -> Run:
    if len(runs) == 1 and runs[0].request_hash == request_hash:
        return runs[0]
    raise TurnConflict()


def turn_open(*, session: AgentSession, route: Route, request: TurnRequest) -> Run:
    """The run of this turn: a new one with a frozen context, or the one already frozen under
    the same keys and request (replayed as it was). 409 `turn_conflict` when the keys are held
    by a different request; 503 `knowledge_unavailable` (nothing stored) when retrieval fails.

    Knowledge depends on the request and the route only, so it is searched before the
    conversation is locked: a slow embedding never holds the lock or a transaction open.
    """
    started = time.monotonic()
    request_hash = request.hash
    bound = task_binding_resolve(session=session, workspace=route.key,
                                 client_conversation_id=request.client_conversation_id, binding=request.task_binding)
    held = run_list_for_turn_key(session=session, route=route, client_conversation_id=request.client_conversation_id,
                                 client_turn_id=request.client_turn_id, user_message_id=request.user_message_id)
    if held:  # a retry: no search, no lock
        return _replayed(held, request_hash)
    knowledge_started = time.monotonic()
    knowledge = _knowledge_inline(route=route, request=request)
    delivery = None
    if request.knowledge_delivery == Run.KnowledgeDelivery.ON_DEMAND:  # hints only; bodies stay out
        delivery = knowledge_delivery_prepare(session=session, route=route,
                                              query=knowledge_query(request=request, route=route))
    knowledge_ms = round((time.monotonic() - knowledge_started) * 1000)
    return _turn_freeze(session=session, route=route, request=request, request_hash=request_hash,
                        knowledge=knowledge, delivery=delivery, knowledge_ms=knowledge_ms, started=started,
                        bound=bound)


class _TurnKeys(TypedDict):
    conversation: Conversation
    client_turn_id: str
    user_message_id: str


@transaction.atomic
def _turn_freeze(*, session: AgentSession, route: Route, request: TurnRequest, request_hash: str,
                 knowledge: InlineKnowledge, delivery: PreparedDelivery | None, knowledge_ms: int,
                 started: float, bound: tuple[Task, TaskMember] | None = None) -> Run:
    conversation = conversation_lock(session=session, route=route,
                                     client_conversation_id=request.client_conversation_id)
    keys = _TurnKeys(conversation=conversation, client_turn_id=request.client_turn_id,
                     user_message_id=request.user_message_id)
    existing = run_list_for_turn(**keys)
    if existing:
        return _replayed(existing, request_hash)
    run = run_open(**keys, request_hash=request_hash, knowledge_delivery=request.knowledge_delivery)
    if run is None:  # the database refused a second holder of a key: replay the one that won
        return _replayed(run_list_for_turn(**keys), request_hash)
    pinned = (*bound, request.task_binding) if bound is not None and request.task_binding is not None else None
    member_tools = set(pinned[1].allowed_tools) if pinned is not None else None

    memory = _memory_read(route=route, conversation=conversation)
    notes = route_note_list(route=route, session=session, limit=ROUTE_NOTES_IN_CONTEXT)
    project_notes = project_note_list(project=route.project, session=session,
                                      limit=PROJECT_NOTES_IN_CONTEXT)
    context: dict[str, Any] = {
        "instructions": route_instructions(route=route),
        "page_context": request.page_context,
        "renderers": request.renderers,
        "memory": {
            "summary": memory.summary,
            "recent": memory.recent,
            "notes": _notes_within(notes, ROUTE_NOTES_CONTEXT_CHARS),
            "project_notes": _notes_within(project_notes, PROJECT_NOTES_CONTEXT_CHARS),
        },
        "memory_refs": [{"thread_id": str(conversation.pk), "summary_upto_id": memory.summary_upto_id,
                         "prior_messages": memory.prior_messages}],
        "knowledge": knowledge.entries,
        "knowledge_refs": knowledge.refs,
        "governance": route_governance(route=route),
    }
    if delivery is not None:
        context["knowledge_delivery"] = delivery.for_run(run=run)
    fit_stats = context_fit(context, max_bytes=CONTEXT_MAX_BYTES)
    text = compact_json(context)
    knowledge_sources = route_knowledge_source_count(route=route)
    surface = route_surface(route=route, session=session, knowledge_sources=knowledge_sources)
    offered = active_tools(surface=surface, query=query_clean(request.user_input),
                           limit=route.agent_client_active_tool_limit, allowed=member_tools)
    if pinned is not None:
        # Last, so the task's row lock (task_run_pin) is held only to the commit: the turns of one
        # task wait for each other there, not through each one's tool search.
        task_run_pin(run=run, task=pinned[0], member=pinned[1], binding=pinned[2])
    return run_freeze(
        run=run, conversation=conversation, user_input=request.user_input, context=context,
        active_tools=offered,
        profile_revision=route_profile(route=route, knowledge_sources=knowledge_sources)["revision"],
        capability_revision=surface.revision,
        context_bytes=_bytes(context), context_tokens=token_count(text),
        stats={**memory.stats, **knowledge.stats, **fit_stats,
               "notes": len(context["memory"]["notes"]), "project_notes": len(context["memory"]["project_notes"])},
        prepare_ms=round((time.monotonic() - started) * 1000), knowledge_ms=knowledge_ms,
    )


def _memory_read(*, route: Route, conversation: Conversation) -> AssembledMemory:
    settings = MemorySettings(
        recent_messages=route.memory_recent_messages,
        recent_budget_chars=route.memory_recent_budget_chars,
        per_message_chars=route.memory_per_message_chars,
        summary_enabled=route.memory_summary_enabled,
        summary_max_chars=route.memory_summary_max_chars,
    )
    messages = conversation_messages_for_memory(conversation=conversation,
                                                recent_messages=settings.recent_messages,
                                                summary_enabled=settings.summary_enabled)
    return memory_assemble(messages=messages, prior_messages=conversation.message_count, settings=settings)


def _notes_within(notes: list[MemoryNote], budget_chars: int) -> list[dict[str, str]]:
    """Whole notes, newest first, while their contents fit `budget_chars` together."""
    out: list[dict[str, str]] = []
    for note in notes:
        if len(note.content) > budget_chars:
            break
        budget_chars -= len(note.content)
        out.append({"id": str(note.pk), "content": note.content, "updated_at": iso_utc(note.updated_at)})
    return out


@dataclass
class InlineKnowledge:
    entries: list[dict[str, Any]] = field(default_factory=list)
    refs: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


def knowledge_query(*, request: TurnRequest, route: Route) -> str:
    """What a turn searches for: the user's input (its first KNOWLEDGE_QUERY_MAX_CHARS characters),
    after the page title when the route boosts by page."""
    query = request.user_input[:KNOWLEDGE_QUERY_MAX_CHARS]
    title = request.page_context.get("title")
    if route.knowledge_page_boost and isinstance(title, str) and title.strip():
        query = f"{title.strip()[:200]}\n{query}"
    return query


def _knowledge_inline(*, route: Route, request: TurnRequest) -> InlineKnowledge:
    """`context.knowledge` (`ref`, `title`, `chapter_path`, `content`) and `knowledge_refs` (`ref`,
    `doc_id`, `title`, `chapter_path`, `score`) for an inline turn: the route's hits (its top_k, max_docs and threshold,
    applied by the retrieval selector), best first, whole while they fit KNOWLEDGE_MAX_BYTES;
    the first one that does not fit is cut when at least KNOWLEDGE_ENTRY_MIN_BYTES remain, and
    the rest are left out. `ref` is the hit's ordinal in this turn: `knowledge:1`, `knowledge:2`…"""
    if request.knowledge_delivery != Run.KnowledgeDelivery.INLINE:
        return InlineKnowledge()
    try:
        hits = route_knowledge_search(route=route, query=knowledge_query(request=request, route=route))
    except EmbeddingFailed as exc:
        logger.warning("Knowledge search failed for route %s: %s", route.key, exc)
        raise KnowledgeUnavailable() from exc
    out = InlineKnowledge(stats={"knowledge_hits": len(hits), "knowledge_cut": 0})
    remaining = KNOWLEDGE_MAX_BYTES
    for hit in hits:
        ref = f"knowledge:{len(out.entries) + 1}"
        entry = {"ref": ref, "title": hit.title, "chapter_path": chapter_path_out(hit.chapter_path),
                 "content": hit.content}
        size = _bytes(entry) + 1
        if size > remaining:
            room = remaining - (size - _bytes(hit.content))
            if room < KNOWLEDGE_ENTRY_MIN_BYTES:
                break
            entry["content"] = json_text_prefix(hit.content, room - 2)  # room counts the quotes
            out.stats["knowledge_cut"] += 1
            size = _bytes(entry) + 1
        remaining -= size
        out.entries.append(entry)
        out.refs.append({"ref": ref, "doc_id": str(hit.document_id), "title": hit.title,
                         "chapter_path": entry["chapter_path"], "score": hit.score})
    out.stats["knowledge_included"] = len(out.entries)
    return out


def context_fit(context: dict[str, Any], *, max_bytes: int) -> dict[str, int]:
    """Shrinks `context` in place until it is at most `max_bytes` bytes as sent.

    Left out first: the oldest recent messages, then the oldest notes (route, then project), the
    summary, the lowest-ranked knowledge entries; only then are the instructions cut (and
    `instructions_truncated: true` says so). Returns counts of what was left out.
    """
    stats = {"fit_recent_dropped": 0, "fit_notes_dropped": 0, "fit_knowledge_dropped": 0,
             "fit_summary_dropped": 0, "fit_instructions_cut": 0}
    overflow = _bytes(context) - max_bytes
    while overflow > 0:
        memory = context["memory"]
        if memory["recent"]:
            overflow -= _bytes(memory["recent"].pop(0)) + 1
            stats["fit_recent_dropped"] += 1
        elif memory["notes"] or memory["project_notes"]:
            notes = memory["notes"] or memory["project_notes"]
            overflow -= _bytes(notes.pop()) + 1
            stats["fit_notes_dropped"] += 1
        elif memory["summary"] is not None:
            overflow -= _bytes(memory["summary"]) - 4
            memory["summary"] = None
            stats["fit_summary_dropped"] = 1
        elif context["knowledge"]:
            entry = context["knowledge"].pop()
            context["knowledge_refs"] = [ref for ref in context["knowledge_refs"] if ref["ref"] != entry["ref"]]
            overflow -= _bytes(entry) + 1
            stats["fit_knowledge_dropped"] += 1
        elif context["instructions"]:
            _instructions_cut(context, overflow)
            stats["fit_instructions_cut"] = 1
            overflow = 0
        else:  # nothing left to leave out; the request limits make this unreachable
            break
        if overflow <= 0:  # the estimate says it fits: measure exactly
            overflow = _bytes(context) - max_bytes
    return stats


def _instructions_cut(context: dict[str, Any], overflow: int) -> None:
    """Cuts the instructions by at least `overflow` bytes of their JSON form, at a character boundary."""
    context["instructions_truncated"] = True
    text = context["instructions"]
    overflow += len('"instructions_truncated":true,')
    while overflow > 0 and text:
        # JSON escapes make a character cost 1–6 bytes; cut at least one character each round.
        cut = max(1, overflow // 6)
        removed = text[-cut:]
        text = text[:-cut]
        overflow -= json_text_bytes(removed)
    context["instructions"] = text
