"""Reads of the ledger and of memory notes, already scoped to the caller.

Runs are found only through their own session; notes only through (route or project, the
session's principal: tenant, id and `on_behalf_of`): one principal's notes are never reachable
with another principal's session.
"""

from __future__ import annotations

import contextlib
import uuid

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import F, Lookup, Q, QuerySet
from django.utils.text import smart_split, unescape_string_literal

from apps.agent_auth.models import AgentSession
from apps.knowledge.pipeline.terms import keyword_terms
from apps.ledger.errors import MemoryNotFound, RunNotFound
from apps.ledger.memory import SUMMARY_SCAN_MESSAGES, LedgerMessage
from apps.ledger.models import MESSAGE_TERMS_CHARS, Conversation, MemoryNote, Message, Run
from apps.projects.models import Project
from apps.routes.models import Route


class _AnyOf(Lookup):
    """`lhs = ANY(rhs)`, rhs an ARRAY(subquery): run once, its array can be an index condition (an
    IN (subquery) under an OR is checked row by row)."""

    lookup_name = "any_of"

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY({rhs})", [*lhs_params, *rhs_params]


def message_terms(*, content: str) -> list[str]:
    """The distinct keyword terms a message is found by (Message.search_terms)."""
    return list(dict.fromkeys(keyword_terms(content[:MESSAGE_TERMS_CHARS])))


def message_search(*, queryset: QuerySet[Message], text: str) -> QuerySet[Message]:
    """The messages of `queryset` that match every word of `text` (quotes make one search word of
    several, as in the admin's search: an id with a space in it; its words must all be in the
    message, in any order): a word matches a message that contains its terms (a whole word, its
    English stem; a CJK phrase by its characters and adjacent pairs, so as a phrase but in rare
    cases), or whose client message id, run id, conversation id or `on_behalf_of` is exactly it.

    Each word is one condition on indexed columns (the terms' GIN index, the client message id's,
    the run's, the conversation's), which PostgreSQL ORs in a bitmap; a conversation is looked up
    first, as an array, not as a per-row subquery, which would scan the messages."""
    for bit in smart_split(text):
        if bit[:1] in {'"', "'"} and bit[-1:] == bit[:1]:
            bit = unescape_string_literal(bit)
        bit = bit.strip()
        if not bit:
            continue
        conversations = Conversation.objects.filter(Q(client_conversation_id=bit) | Q(on_behalf_of=bit)).order_by()
        match = Q(client_message_id=bit) | Q(_AnyOf(F("conversation_id"), ArraySubquery(conversations.values("id"))))
        terms = message_terms(content=bit)
        if terms:
            match |= Q(search_terms__contains=terms)
        with contextlib.suppress(ValueError):
            match |= Q(run_id=uuid.UUID(bit))
        queryset = queryset.filter(match)
    return queryset


ROUTE_NOTES_LIMIT_DEFAULT, ROUTE_NOTES_LIMIT_MAX = 20, 100
PROJECT_NOTES_LIMIT_DEFAULT, PROJECT_NOTES_LIMIT_MAX = 12, 50


def run_list_for_turn(*, conversation: Conversation, client_turn_id: str, user_message_id: str) -> list[Run]:
    """Runs of `conversation` holding either key of a turn (at most two)."""
    return list(
        Run.objects.filter(Q(client_turn_id=client_turn_id) | Q(user_message_id=user_message_id),
                           conversation=conversation)
    )


def run_list_for_turn_key(*, session: AgentSession, route: Route, client_conversation_id: str, client_turn_id: str,
                          user_message_id: str) -> list[Run]:
    """The same lookup without the conversation row in hand (a replay's fast path; no lock)."""
    return list(
        Run.objects.filter(Q(client_turn_id=client_turn_id) | Q(user_message_id=user_message_id),
                           conversation__session=session, conversation__route=route,
                           conversation__client_conversation_id=client_conversation_id)
    )


def run_get_for_session(*, session: AgentSession, run_id: str | uuid.UUID) -> Run:
    """The run `run_id` when `session` opened it; 404 `run_not_found` otherwise (malformed ids too)."""
    try:
        pk = uuid.UUID(str(run_id))
    except ValueError as exc:
        raise RunNotFound() from exc
    run = Run.objects.select_related("route", "conversation").filter(pk=pk, session=session).first()
    if run is None:
        raise RunNotFound()
    return run


def run_get_for_route(*, session: AgentSession, route: Route, run_id: str | uuid.UUID) -> Run:
    """The run `run_id` when `session` opened it on `route`; 404 `run_not_found` otherwise."""
    run = run_get_for_session(session=session, run_id=run_id)
    if run.route_id != route.pk:
        raise RunNotFound()
    return run


def run_user_input(*, run: Run) -> str:
    """The user's input of a run's turn, exactly as sent (the run's user message)."""
    return (
        run.messages.filter(role=Message.Role.USER).values_list("content", flat=True).first() or ""
    )


def conversation_messages_for_memory(*, conversation: Conversation, recent_messages: int,
                                     summary_enabled: bool) -> list[LedgerMessage]:
    """The newest messages memory may use, newest first: the recent window, plus the messages a
    summary draws from when summaries are on. One query, bounded."""
    limit = recent_messages + (SUMMARY_SCAN_MESSAGES if summary_enabled else 0)
    if limit <= 0:
        return []
    rows = (
        conversation.messages.order_by("-sequence")
        .exclude(content="")
        .values_list("sequence", "role", "kind", "content")[:limit]
    )
    return [LedgerMessage(*row) for row in rows]


def note_holder(session: AgentSession) -> dict[str, str]:
    """Whose notes a session reads and writes: its principal's tenant and id, and whom it acts for."""
    tenant = session.principal.get("tenant") if isinstance(session.principal, dict) else None
    return {"principal_tenant": tenant or "", "principal_id": session.principal_id,
            "on_behalf_of": session.on_behalf_of}


def _route_notes(*, route: Route, session: AgentSession) -> QuerySet[MemoryNote]:
    return MemoryNote.objects.filter(scope=MemoryNote.Scope.ROUTE, route=route, **note_holder(session))


def _project_notes(*, project: Project, session: AgentSession) -> QuerySet[MemoryNote]:
    return MemoryNote.objects.filter(scope=MemoryNote.Scope.PROJECT, project=project, **note_holder(session))


def route_note_list(*, route: Route, session: AgentSession,
                    limit: int = ROUTE_NOTES_LIMIT_DEFAULT) -> list[MemoryNote]:
    """The principal's route notes, most recently updated first; `limit` clamped to 1–100."""
    limit = max(1, min(ROUTE_NOTES_LIMIT_MAX, limit))
    return list(_route_notes(route=route, session=session).order_by("-updated_at", "-id")[:limit])


def project_note_list(*, project: Project, session: AgentSession,
                      limit: int = PROJECT_NOTES_LIMIT_DEFAULT) -> list[MemoryNote]:
    """The principal's project notes, newest first; `limit` clamped to 1–50."""
    limit = max(1, min(PROJECT_NOTES_LIMIT_MAX, limit))
    return list(_project_notes(project=project, session=session).order_by("-created_at", "-id")[:limit])


def _one(queryset: QuerySet[MemoryNote], note_id) -> MemoryNote:
    try:
        pk = uuid.UUID(str(note_id))
    except ValueError as exc:
        raise MemoryNotFound() from exc
    note = queryset.filter(pk=pk).first()
    if note is None:
        raise MemoryNotFound()
    return note


def route_note_get(*, route: Route, session: AgentSession, note_id) -> MemoryNote:
    """One of the principal's route notes; 404 `memory_not_found` for any other id."""
    return _one(_route_notes(route=route, session=session), note_id)


def project_note_get(*, project: Project, session: AgentSession, note_id) -> MemoryNote:
    return _one(_project_notes(project=project, session=session), note_id)
