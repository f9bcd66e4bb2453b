"""JSON: every value with its key path (`order.items[0].sku: A-1`), one record per top-level entry.

A document is read with the API's strict JSON limits (apps.core.parsers): bounded nesting and
integer size, no NaN/Infinity, no repeated keys. Beyond them Python's decoder recurses or converts
without bound, so such a file fails conversion with the reason instead of crashing the pipeline.

The upload check parses a file of up to FULL_CHECK_MAX_BYTES in full. A larger file is only
decoded and looked at (its nesting, its first character): the strict parse holds the whole
document as Python objects, 8 to 15 times the file's size, which is the worker's job, not the web
process's. Such a file, if it is not valid JSON, fails in the pipeline with the same reason.

Held as Python objects, a file of many small containers (`[{},{},…]`) takes 50 to 60 times its
size (a 48 MiB one passed 2.3 GB in a worker), and empty containers spend nothing from the text
budget. So a file holding more objects and arrays than KNOWLEDGE_JSON_MAX_CONTAINERS is refused
before it is parsed, at upload and in the pipeline: counted outside strings, and only when the
plain count of `{` and `[` is already over the limit.

Values are held whole before the text budget sees any of them: a 50 MB object of 4 million
`"k1": 1` members took 920 MB and 21 s to fail as too large, 12 million numbers in an array
680 MB. So a file of more than KNOWLEDGE_JSON_MAX_VALUES values is refused the same way, before
it is parsed: a value follows each comma outside strings.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings

from apps.core.parsers import (
    JSON_MAX_DEPTH,
    InvalidJSON,
    brackets_too_deep,
    json_marks,
    nested_too_deep,
    strict_json_loads,
)
from apps.knowledge.pipeline.parsers.base import Block, ConversionFailed, ParsedDocument, Section, TextBudget
from apps.knowledge.pipeline.parsers.text import text_decode

# The strict parser words its reasons for a request body.
_BODY_PREFIX = re.compile(r"^The body (?:is not valid JSON: |is )")
FULL_CHECK_MAX_BYTES = 4 * 1024 * 1024
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_VALUE_START = frozenset('{["-0123456789tfn')
# Python's decoder messages (3.11 and 3.12) in an operator's words; one not listed is shown as it is.
_DECODE_WORDS = {
    "Expecting value": "expected a value",
    "Expecting ',' delimiter": "expected ','",
    "Expecting ':' delimiter": "expected ':'",
    "Expecting property name enclosed in double quotes": "expected a key in double quotes",
    "Unterminated string starting at": "a string is not closed; it starts",
    "Invalid control character at": "a raw control character (a tab or a line break) inside a string",
    "Invalid \\escape": "an unknown backslash escape",
    "Invalid \\uXXXX escape": "a \\u escape without four hexadecimal digits",
    "Extra data": "text after the end of the JSON value",
}


def decode_error_text(error: json.JSONDecodeError) -> str:
    """What the decoder found wrong and where, as a person reads it: "expected ',' at line 1,
    column 13" (lines and columns from 1, as an editor counts them; no character offset)."""
    words = _DECODE_WORDS.get(error.msg) or f"{error.msg[:1].lower()}{error.msg[1:]}"
    return f"{words} at line {error.lineno}, column {error.colno}"


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _leaves(value: Any, path: str, budget: TextBudget) -> list[str]:
    """Every leaf with its key path. Paths repeat per leaf, so a small file of deep keys over long
    arrays expands many times over: each line is spent from the budget as it is made."""
    if isinstance(value, dict):
        if not value:
            return []
        out: list[str] = []
        for key, item in value.items():
            out.extend(_leaves(item, f"{path}.{key}" if path else str(key), budget))
        return out
    if isinstance(value, list):
        out = []
        for index, item in enumerate(value):
            out.extend(_leaves(item, f"{path}[{index}]", budget))
        return out
    line = f"{path}: {_scalar(value)}" if path else _scalar(value)
    budget.spend(len(line))
    return [line]


def _size_check(text: str) -> str | None:
    """ConversionFailed past KNOWLEDGE_JSON_MAX_CONTAINERS or KNOWLEDGE_JSON_MAX_VALUES; the
    text's brackets when it had to read them (so that a caller does not read them again), else None."""
    containers, values = settings.KNOWLEDGE_JSON_MAX_CONTAINERS, settings.KNOWLEDGE_JSON_MAX_VALUES
    if text.count("{") + text.count("[") <= containers and text.count(",") < values:
        return None
    marks = json_marks(text)
    brackets = marks.replace(",", "")
    count = brackets.count("{") + brackets.count("[")
    if count > containers:
        raise ConversionFailed(f"The file holds {count:,} JSON objects and arrays, more than a document may "
                               f"({containers:,}, KNOWLEDGE_JSON_MAX_CONTAINERS). Split the document.")
    if len(marks) - len(brackets) >= values:
        raise ConversionFailed(f"The file holds more than {values:,} JSON values, more than a document may "
                               "(KNOWLEDGE_JSON_MAX_VALUES). Split the document.")
    return brackets


def _load(data: bytes) -> Any:
    text = text_decode(data)
    _size_check(text)
    try:
        return strict_json_loads(text)
    except InvalidJSON as exc:
        # A syntax error keeps the decoder's error as its cause; the strict parser words it for an API.
        if isinstance(exc.__cause__, json.JSONDecodeError):
            reason = f"{decode_error_text(exc.__cause__)}."
        else:
            reason = _BODY_PREFIX.sub("", str(exc.detail))
        raise ConversionFailed(f"The file is not valid JSON: {reason}") from exc


def parse(data: bytes, budget: TextBudget) -> ParsedDocument:
    value = _load(data)
    if isinstance(value, dict):
        groups = [_leaves(item, str(key), budget) for key, item in value.items()]
    elif isinstance(value, list):
        groups = [_leaves(item, f"[{index}]", budget) for index, item in enumerate(value)]
    else:
        groups = [_leaves(value, "", budget)]
    blocks = tuple(Block(text="\n".join(lines), kind="record") for lines in groups if lines)
    return ParsedDocument(file_type="json", sections=(Section(headings=(), blocks=blocks),) if blocks else ())


def _look(data: bytes) -> None:
    """What a large file's upload check can afford: the text decodes, nests no deeper than the
    strict limit, and starts like a JSON value."""
    text = text_decode(data)
    brackets = _size_check(text)
    if brackets_too_deep(brackets) if brackets is not None else nested_too_deep(text):
        raise ConversionFailed(f"The file is not valid JSON: nested deeper than {JSON_MAX_DEPTH} levels.")
    start = _WHITESPACE.match(text).end()  # type: ignore[union-attr]  # matches the empty string
    if start == len(text) or text[start] not in _VALUE_START:
        reason = decode_error_text(json.JSONDecodeError("Expecting value", text, start))
        raise ConversionFailed(f"The file is not valid JSON: {reason}.")


def check(data: bytes) -> None:
    if len(data) > FULL_CHECK_MAX_BYTES:
        _look(data)
    else:
        _load(data)
