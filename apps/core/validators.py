"""Validators for text the console shows a person beside other text, the length of the ids a
client sends, and the one form of a UUID a client may send."""

from __future__ import annotations

import re
import uuid

from django.core.exceptions import ValidationError

# The invisible characters that steer the bidi algorithm (ALM, LRM, RLM, the embeddings and
# overrides, the isolates): inside an id they would reorder what follows them, even under the
# override, so the console names them instead (`conv-\u202egpj.exe` is not `conv-exe.jpg`).
# An id a client sends (a conversation's, a turn's, a message's): 1 to this many printable
# characters, as a turn takes them; the ledger's columns are this wide, and a task member's
# conversation id is held to it too.
CLIENT_ID_MAX_CHARS = 191

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _bidi_controls_refuse(value: str, *, what: str) -> None:
    if any(char in BIDI_CONTROLS for char in value):
        raise ValidationError(f"Invisible direction controls (such as U+202E) are not allowed in {what}: they "
                              "reorder the text shown after it.", code="bidi_control")


def validate_shown_name(value: str) -> None:
    """A name the console prints in sentences, options, headings and messages: none of the
    BIDI_CONTROLS, which would reorder the text shown after it (a one-time token, "was added
    successfully") wherever the name is not in an isolate of its own."""
    _bidi_controls_refuse(value, what="a name")


def validate_shown_text(value: str) -> None:
    """Free text one operator writes for the others to read (an approval's comment): the same rule
    as a name. The console shows it in an isolate of its own (dir=auto), where right-to-left text
    reads as written without these controls, and where an override still makes the words say
    something else
    (`ok <U+202E>gpj.exe` reads `ok exe.jpg`). Text an agent or an end user sends (a turn, a memory
    note) is not held to it: it is kept as sent and shown in an isolate (apps.core.bidi)."""
    _bidi_controls_refuse(value, what="this text")


# A UUID as RFC 9562 writes it: 8-4-4-4-12 hex digits (upper- or lower-case, as §4 lets a reader
# take it). uuid.UUID() also reads braces, `urn:uuid:`, no dashes and dashes anywhere — spellings
# no contract names, which made one row answer to many ids.
_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def uuid_parse(value: object) -> uuid.UUID | None:
    """`value` as a UUID when it is one, or a string in the 8-4-4-4-12 form; None otherwise. Every
    id a client sends as "a UUID" (in a path, a query or a body) is read by this, and a None is
    the endpoint's own answer for an id that names nothing (404 `run_not_found`, ...) or a bad
    field."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str) and _CANONICAL_UUID.fullmatch(value):
        return uuid.UUID(value)
    return None
