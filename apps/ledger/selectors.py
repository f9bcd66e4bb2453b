"""Reads of the ledger and of memory notes, already scoped to the caller.

Runs are found only through their own session; notes only through (route or project, the
session's principal: tenant, id and `on_behalf_of`): one principal's notes are never reachable
with another principal's session.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import unicodedata
import uuid
from functools import cache

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import F, Lookup, Q, QuerySet
from django.db.models.functions import Left
from django.db.models.lookups import Regex
from django.utils.text import smart_split, unescape_string_literal

from apps.agent_auth.models import AgentSession
from apps.core.validators import uuid_parse
from apps.knowledge.pipeline.terms import CJK_CHARS, keyword_terms, normalise, term_runs
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


def search_words(text: str) -> list[str]:
    """The words of an admin search box's `text`, as Django's admin splits them: quotes make one word
    of several; empty words are dropped."""
    words = []
    for bit in smart_split(text):
        if bit[:1] in {'"', "'"} and bit[-1:] == bit[:1]:
            bit = unescape_string_literal(bit)
        if bit.strip():
            words.append(bit.strip())
    return words


def _conversations_named(word: str) -> ArraySubquery:
    """The ids of the conversations whose client id or on-behalf-of user is `word`, as an array
    looked up once (not a per-row subquery)."""
    return ArraySubquery(Conversation.objects.filter(Q(client_conversation_id=word) | Q(on_behalf_of=word))
                         .order_by().values("id"))


def message_search(*, queryset: QuerySet[Message], text: str) -> QuerySet[Message]:
    """The messages of `queryset` that match every word of `text` (quotes make one search word of
    several, as in the admin's search: a phrase, or an id with a space in it): a word matches a
    message whose client message id, run id, conversation id or `on_behalf_of` is exactly it, or
    whose content contains it.

    Content is matched by keyword terms (a whole word, by its English stem; a CJK run by its
    characters and adjacent pairs). A word of several terms in a row — a quoted phrase, a word
    joined by punctuation ("refund-policy"), a CJK run of more than two characters — is a phrase:
    its words must also stand in the content in that order, next to each other, as typed (not by
    stem: "refund policies" does not find "refund policy"), in any case, full-width or
    Traditional form, with any run of spaces and punctuation between two words and none needed
    next to a CJK run; so "refund policy" finds "REFUND-policy" but not "policy refund", and
    退款政策 does not find 政策…退款. A message is searched in its first MESSAGE_TERMS_CHARS
    characters, the ones its terms are made of, for phrases too: a phrase that only occurs beyond
    them is not found, as a word that only occurs beyond them is not.

    Each word is one condition on indexed columns (the terms' GIN index, the client message id's,
    the run's, the conversation's), which PostgreSQL ORs in a bitmap; a phrase's order is a regular
    expression checked only on the rows whose terms matched, which the index found. A conversation
    is looked up first, as an array, not as a per-row subquery, which would scan the messages."""
    for bit in search_words(text):
        conversations = _conversations_named(bit)
        match = Q(client_message_id=bit) | Q(_AnyOf(F("conversation_id"), conversations))
        terms = message_terms(content=bit)
        if terms:
            contains = Q(search_terms__contains=terms)
            runs = term_runs(bit[:MESSAGE_TERMS_CHARS])
            if len(runs) > 1 or (runs[0][1] and len(runs[0][0]) > 2):
                contains &= Q(Regex(Left("content", MESSAGE_TERMS_CHARS), _phrase_pattern(runs)))
            match |= contains
        with contextlib.suppress(ValueError):
            match |= Q(run_id=uuid.UUID(bit))
        queryset = queryset.filter(match)
    return queryset


def run_search(*, queryset: QuerySet[Run], text: str) -> QuerySet[Run]:
    """The runs of `queryset` that match every word of `text` (quotes make one word of several, as
    in the admin's search): a word matches a run whose id, client turn id or user message id is
    exactly it, or whose conversation's client id or `on_behalf_of` is.

    Each word is one condition on indexed columns, which PostgreSQL ORs in a bitmap; the
    conversations are looked up first, as an array, not as a per-row subquery. A substring match
    of these columns read every run of the operator's projects, twice (the page and its count)."""
    for bit in search_words(text):
        conversations = _conversations_named(bit)
        match = (Q(client_turn_id=bit) | Q(user_message_id=bit)
                 | Q(_AnyOf(F("conversation_id"), conversations)))
        with contextlib.suppress(ValueError):
            match |= Q(id=uuid.UUID(bit))
        queryset = queryset.filter(match)
    return queryset


# What may stand between two words of a phrase, and next to a phrase's first or last word: not a
# letter or digit (as the database's locale classifies them: C.UTF-8's or en_US.UTF-8's are
# Unicode's), a combining mark, which keyword_terms cuts a word at though the database counts it a
# letter (a Thai tone mark, a Devanagari vowel sign: ที่นี่ is the runs ท and น), or a CJK character.
def _phrase_pattern(runs: list[tuple[str, bool]]) -> str:
    """A regular expression (PostgreSQL's) of the runs (terms.term_runs) in a row: whole words, with
    at least one separator between two of them; CJK runs anywhere, next to their neighbours or not."""
    between, edge = _separators()
    parts = []
    for i, (run, cjk) in enumerate(runs):
        if i:
            parts.append(between + ("*" if cjk or runs[i - 1][1] else "+"))
        parts.append("".join(_character_pattern(char) for char in run))
    pattern = "".join(parts)
    if not runs[0][1]:
        pattern = f"(?:^|{edge})" + pattern
    if not runs[-1][1]:
        pattern += f"(?:{edge}|$)"
    return pattern


@cache
def _separators() -> tuple[str, str]:
    """(a separator between two words, a word's edge), as PostgreSQL regular expression atoms."""
    ranges: list[list[int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)).startswith("M"):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    marks = "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)
    return f"(?:[^[:alnum:]]|[{marks}])", f"[^[:alnum:]]|[{marks}]|[{CJK_CHARS}]"


def _character_pattern(char: str) -> str:
    """`char` (a letter, digit or CJK character in normal form) or any character that reads as it
    in terms.normalise, one for one: its other cases, its full-width and half-width forms, its
    compatibility forms (a Kangxi radical for a Han character), its Traditional forms."""
    candidates = {char, *_forms_of().get(char, "")}
    # In a word, Σ reads as ς at its end (str.lower's final sigma), though alone it reads as σ.
    candidates |= {c for c in (char.upper(), char.title()) if len(c) == 1 and normalise(f"x{c}") == f"x{char}"}
    forms = sorted(candidates)
    return forms[0] if len(forms) == 1 else f"[{''.join(forms)}]"


@cache
def _forms_of() -> dict[str, str]:
    """{a character in normal form: every other character terms.normalise reads as it alone} (one
    pass over Unicode, about half a second, once per process)."""
    forms: dict[str, str] = {}
    for code in itertools.chain(range(0xD800), range(0xE000, sys.maxunicode + 1)):
        char = chr(code)
        read = normalise(char)
        if len(read) == 1 and read != char:
            forms[read] = forms.get(read, "") + char
    return forms


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
    """The run `run_id` when `session` opened it; 404 `run_not_found` otherwise (malformed ids,
    and a UUID in another spelling than 8-4-4-4-12, too)."""
    pk = uuid_parse(run_id)
    if pk is None:
        raise RunNotFound()
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
    pk = uuid_parse(note_id)
    if pk is None:
        raise MemoryNotFound()
    note = queryset.filter(pk=pk).first()
    if note is None:
        raise MemoryNotFound()
    return note


def route_note_get(*, route: Route, session: AgentSession, note_id) -> MemoryNote:
    """One of the principal's route notes; 404 `memory_not_found` for any other id."""
    return _one(_route_notes(route=route, session=session), note_id)


def project_note_get(*, project: Project, session: AgentSession, note_id) -> MemoryNote:
    return _one(_project_notes(project=project, session=session), note_id)
