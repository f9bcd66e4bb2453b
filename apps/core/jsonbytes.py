"""Byte-exact JSON: what a response or a stored snapshot weighs, and cutting text to fit.

Agent-facing budgets (knowledge search 4 KiB, reads 16–32 KiB, turn context, tool arguments) are
measured over the exact bytes sent or stored, so everything here encodes the way they are sent:
compact separators, UTF-8, non-ASCII not escaped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rest_framework.renderers import JSONRenderer


class CompactJSONRenderer(JSONRenderer):
    """DRF's JSON renderer (compact, UTF-8, U+2028/U+2029 escaped), ignoring an `indent` asked for
    in the Accept header, so the bytes sent are the bytes measured."""

    def get_indent(self, accepted_media_type: str, renderer_context: Mapping[str, Any]) -> None:
        return None


_RENDERER = CompactJSONRenderer()


def compact_json(value: Any) -> str:
    """JSON text with compact separators and non-ASCII kept as is (the form snapshots are stored in)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_bytes(value: Any) -> int:
    """The size of `value` as CompactJSONRenderer sends it."""
    return len(_RENDERER.render(value))


def json_text_bytes(text: str) -> int:
    """The size of `text` as a JSON string's contents (without its quotes)."""
    return json_bytes(text) - 2


def json_text_prefix(text: str, max_json_bytes: int) -> str:
    """The longest prefix of `text` whose JSON string form has at most `max_json_bytes` bytes."""
    lo, hi = 0, min(len(text), max_json_bytes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if json_text_bytes(text[:mid]) <= max_json_bytes:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def utf8_char_floor(data: bytes, index: int) -> int:
    """The largest character boundary of UTF-8 `data` at or before `index`."""
    while 0 < index < len(data) and data[index] & 0xC0 == 0x80:
        index -= 1
    return index


def iso_utc(moment: datetime | float | int) -> str:
    """An aware datetime or a Unix timestamp as ISO 8601 in UTC with a `Z`."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, tz=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
