"""Byte-exact JSON: what a response or a stored snapshot weighs, and cutting text to fit.

Agent-facing budgets (knowledge search 4 KiB, reads 16–32 KiB, turn context, tool arguments) are
measured over the exact bytes sent or stored, so everything here encodes the way they are sent:
compact separators, UTF-8, non-ASCII not escaped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
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


# JavaScript holds every number as a double: an integer past 2**53 is written as its nearest one.
_JS_SAFE_INTEGER = 2**53


def js_number(value: float) -> str:
    """`value` as JavaScript's JSON.stringify writes a number (ECMAScript Number::toString): the
    shortest digits that read back (Python's repr finds the same), positioned by its rules, e.g.
    1e-7 (Python: 1e-07), 0.00001 (1e-05), 10000000000000000 (1e+16), 1 (1.0)."""
    if value == 0:
        return "0"
    if value < 0:
        return "-" + js_number(-value)
    _, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)  # finite: NaN and infinities are no JSON
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits, k = stripped, len(stripped)
    n = exponent + k  # value = 0.digits × 10**n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    mantissa = digits[0] + (f".{digits[1:]}" if k > 1 else "")
    return f"{mantissa}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"


def _stringify_delta(value: Any) -> int:
    """How many bytes more JSON.stringify writes `value`'s numbers in than Python's json does."""
    if isinstance(value, dict):
        return sum(_stringify_delta(item) for item in value.values())
    if isinstance(value, list):
        return sum(_stringify_delta(item) for item in value)
    if isinstance(value, float):
        return len(js_number(value)) - len(repr(value))
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _JS_SAFE_INTEGER:
        return len(js_number(float(value))) - len(str(value))
    return 0


def json_stringify_bytes(value: Any) -> int:
    """The UTF-8 size of `JSON.stringify(value)` as an agent host computes it: compact, non-ASCII
    as is, numbers as JavaScript writes them (a lone surrogate counts the 3 bytes Python gives it;
    JavaScript escapes it to 6, and the text rules refuse it anyway)."""
    return len(compact_json(value).encode("utf-8", "surrogatepass")) + _stringify_delta(value)


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
