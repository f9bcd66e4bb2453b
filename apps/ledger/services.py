"""Writes of the ledger and of memory notes. Conversations, messages, runs and notes change only here.

Ordering of locks, to stay free of deadlocks: a conversation row is locked before any run of it.
The turn's idempotency is held by the database (unique constraints on runs); the conversation
lock only keeps the common path free of IntegrityErrors and makes message numbering gapless.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from apps.agent_auth.models import AgentSession
from apps.core.jsonbytes import compact_json
from apps.core.revisions import revision_of
from apps.ledger.errors import CompletionConflict, MemoryNotFound
from apps.ledger.memory import EXECUTION_SUMMARY_KIND, execution_summary_parse
from apps.ledger.models import MESSAGE_TERMS_CHARS, Conversation, MemoryNote, Message, Run
from apps.ledger.selectors import message_terms, note_holder
from apps.projects.models import Project
from apps.routes.models import Route

logger = logging.getLogger("bailinghub.ledger")


def conversation_lock(*, session: AgentSession, route: Route, client_conversation_id: str) -> Conversation:
    """The conversation, created when new, locked (SELECT … FOR UPDATE) until the transaction ends.

    INSERT … ON CONFLICT DO NOTHING then a locking read: parallel first turns of one conversation
    create one row without an IntegrityError. Call inside a transaction.
    """
    Conversation.objects.bulk_create(
        [Conversation(session=session, route=route, client_conversation_id=client_conversation_id,
                      principal_id=session.principal_id, on_behalf_of=session.on_behalf_of)],
        ignore_conflicts=True,
    )
    return Conversation.objects.select_for_update(of=("self",)).get(
        session=session, route=route, client_conversation_id=client_conversation_id
    )


def run_open(*, conversation: Conversation, client_turn_id: str, user_message_id: str, request_hash: str,
             knowledge_delivery: str) -> Run | None:
    """A new run in `preparing`, holding the turn's keys; None when another run already holds one
    (the unique constraints decided: re-read and replay). Call inside a transaction."""
    try:
        with transaction.atomic():
            return Run.objects.create(
                session_id=conversation.session_id, route_id=conversation.route_id, conversation=conversation,
                client_turn_id=client_turn_id, user_message_id=user_message_id, request_hash=request_hash,
                knowledge_delivery=knowledge_delivery, state=Run.State.PREPARING,
            )
    except IntegrityError:
        return None


def _message_append(*, conversation: Conversation, run: Run, role: str, client_message_id: str, content: str,
                    kind: str = Message.Kind.TEXT) -> Message:
    """Appends a message as the conversation's next number; the conversation must be locked."""
    now = timezone.now()
    conversation.message_count += 1
    conversation.last_message_at = now
    conversation.save(update_fields=["message_count", "last_message_at", "updated_at"])
    return Message.objects.create(conversation=conversation, run=run, sequence=conversation.message_count,
                                  role=role, kind=kind, client_message_id=client_message_id, content=content,
                                  search_terms=message_terms(content=content))


# A fill reads this many messages at a time and writes their terms in statements of at most this
# many characters of text: 2,000 long Chinese messages made one statement of ~340 MB of terms.
FILL_READ_ROWS, FILL_WRITE_CHARS = 500, 1_000_000


def message_terms_fill(*, every: bool = False) -> int:
    """Writes the search terms of the messages that have none (of every message with `every`: run
    it so if knowledge.pipeline.terms changes its terms), committing as it goes: cut short, it
    takes up where it stopped (ledger 0005 runs it). Plain SQL, so that it runs on the table as any
    migration leaves it. Returns the messages read."""
    read, after = 0, None
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, left(content, %s) FROM ledger_message WHERE (%s::uuid IS NULL OR id > %s::uuid) "
                "AND (%s OR (search_terms = '{}' AND content <> '')) ORDER BY id LIMIT %s",
                [MESSAGE_TERMS_CHARS, after, after, every, FILL_READ_ROWS])
            rows = cursor.fetchall()
            if not rows:
                return read
            batch: dict[str, list[str]] = {}
            chars = 0
            for index, (pk, content) in enumerate(rows):
                batch[str(pk)] = message_terms(content=content)
                chars += len(content)
                if chars >= FILL_WRITE_CHARS or index == len(rows) - 1:
                    cursor.execute(
                        "UPDATE ledger_message AS m SET search_terms = "
                        "ARRAY(SELECT jsonb_array_elements_text(v.value)) "
                        "FROM jsonb_each(%s::jsonb) AS v WHERE m.id = v.key::uuid",
                        [json.dumps(batch, ensure_ascii=False)])
                    batch, chars = {}, 0
        read += len(rows)
        after = rows[-1][0]


def run_freeze(*, run: Run, conversation: Conversation, user_input: str, context: dict[str, Any],
               active_tools: list[dict[str, Any]], profile_revision: str, capability_revision: str,
               context_bytes: int, context_tokens: int, stats: dict[str, Any], prepare_ms: int,
               knowledge_ms: int | None) -> Run:
    """Freezes the context of a `preparing` run, appends the user's message, and marks the run
    `context_ready`. The memory in `context` must have been read before this call."""
    _message_append(conversation=conversation, run=run, role=Message.Role.USER,
                    client_message_id=run.user_message_id, content=user_input)
    run.context_snapshot = compact_json(context)
    run.active_tools_snapshot = compact_json(active_tools)
    run.profile_revision = profile_revision
    run.capability_revision = capability_revision
    run.context_bytes = context_bytes
    run.context_tokens = context_tokens
    run.context_stats = stats
    run.prepare_ms = prepare_ms
    run.knowledge_ms = knowledge_ms
    run.state = Run.State.CONTEXT_READY
    run.context_ready_at = timezone.now()
    run.save()
    return run


def completion_fingerprint(*, assistant_message_id: str, status: str, content: str, model: str | None,
                           runtime: str | None, usage: dict[str, int] | None) -> str:
    return revision_of({
        "assistant_message_id": assistant_message_id, "status": status, "content": content,
        "model": model, "runtime": runtime, "usage": usage,
    })


@transaction.atomic
def run_complete(*, run: Run, assistant_message_id: str, status: str, content: str, model: str | None = None,
                 runtime: str | None = None, usage: dict[str, int] | None = None) -> Run:
    """Records a run's outcome and its visible assistant message, once.

    The same completion again returns the run unchanged (replay); any difference — or an
    `assistant_message_id` another run of the conversation already used — is 409
    `completion_conflict`. The content is stored exactly as sent; an authorization execution
    summary in it is recognised (the message's `kind`), never rewritten.
    """
    fingerprint = completion_fingerprint(assistant_message_id=assistant_message_id, status=status, content=content,
                                         model=model, runtime=runtime, usage=usage)
    conversation = Conversation.objects.select_for_update(of=("self",)).get(pk=run.conversation_id)
    run = Run.objects.select_for_update(of=("self",)).get(pk=run.pk)
    if run.is_final:
        if run.completion_fingerprint == fingerprint:
            return run
        raise CompletionConflict()
    if run.state != Run.State.CONTEXT_READY:  # a preparing run is never visible outside its transaction
        raise CompletionConflict("This run is not ready to be completed.")
    kind = Message.Kind.TEXT
    if execution_summary_parse(content) is not None:
        kind = Message.Kind.EXECUTION_SUMMARY
    run.assistant_message_id = assistant_message_id
    run.completion_fingerprint = fingerprint
    run.state = status
    run.model = model or ""
    run.runtime = runtime or ""
    run.usage = usage
    run.completed_at = timezone.now()
    try:
        with transaction.atomic():
            run.save()
            _message_append(conversation=conversation, run=run, role=Message.Role.ASSISTANT,
                            client_message_id=assistant_message_id, content=content, kind=kind)
    except IntegrityError as exc:
        raise CompletionConflict("This assistant_message_id is already used in this conversation.") from exc
    logger.info("Run %s %s (%s)", run.pk, status, "execution summary" if kind == EXECUTION_SUMMARY_KIND else "text")
    return run


# Memory notes


@transaction.atomic
def memory_note_create(*, session: AgentSession, project: Project, route: Route | None, content: str) -> MemoryNote:
    """A note of the session's principal: on `route` (route memory) or, with `route=None`, on
    `project` (project memory). Content limits are the API's to check."""
    scope = MemoryNote.Scope.ROUTE if route is not None else MemoryNote.Scope.PROJECT
    return MemoryNote.objects.create(scope=scope, project=project, route=route, **note_holder(session),
                                     content=content, created_by_session=session)


@transaction.atomic
def memory_note_update(*, note: MemoryNote, content: str) -> MemoryNote:
    """The note's new content; 404 `memory_not_found` when it was deleted since it was read (a
    PATCH racing a DELETE answered 500)."""
    now = timezone.now()
    if not MemoryNote.objects.filter(pk=note.pk).update(content=content, updated_at=now):
        raise MemoryNotFound()
    note.content, note.updated_at = content, now
    return note


@transaction.atomic
def memory_note_delete(*, note: MemoryNote) -> None:
    """Delete the note; 404 `memory_not_found` when another request deleted it first (two DELETEs
    at once both answered "deleted")."""
    deleted, _ = MemoryNote.objects.filter(pk=note.pk).delete()
    if not deleted:
        raise MemoryNotFound()
