"""Byte-exact JSON: what a response or a stored snapshot weighs, and cutting text to fit.

Agent-facing budgets (knowledge search 4 KiB, reads 16–32 KiB, turn context, tool arguments) are
measured over the exact bytes sent or stored, so everything here encodes the way they are sent:
compact separators, UTF-8, non-ASCII not escaped.
"""

from __future__ import annotations

import functools
import json
import re
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
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # value = 0.digits × 10**n
    n = int(exponent or 0) + len(whole) - (len(whole + fraction) - len(digits))
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    return f"{digits[0]}{'.' + digits[1:] if k > 1 else ''}e{'+' if n > 0 else '-'}{abs(n - 1)}"


# JSON.stringify writes an integral number below this magnitude as digits alone (1, not 1.0), and
# one at or above it with an exponent (1e+21), as Python writes that float.
_JS_PLAIN_INTEGER_LIMIT = 1e21


def js_numbers(value: Any) -> Any:
    """`value` with its numbers as a JavaScript host holds and writes them: an integral float below
    1e21 in magnitude becomes an int (1.0, 1e0 and 10e-1 are the number 1, -0.0 is 0), so that two
    spellings a host cannot tell apart are one value — in a hash, and in what is sent on. Booleans
    and strings are left alone; nesting is bounded by the parser (JSON_MAX_DEPTH)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _JS_PLAIN_INTEGER_LIMIT:
        return int(value)
    if isinstance(value, dict):
        return {key: js_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [js_numbers(item) for item in value]
    return value


# In compact JSON from Python's json: a string (skipped whole, so a number inside one is text), or
# a number as Python writes it (an int, or a float's repr).
_STRING_OR_NUMBER = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?(?:e[-+]\d+)?)')


@functools.lru_cache(maxsize=4096)
def _number_delta(python_text: str) -> int:
    """Bytes JavaScript writes `python_text` (a number as Python's json wrote it) in, less its own."""
    if "." in python_text or "e" in python_text:
        return len(js_number(float(python_text))) - len(python_text)
    return len(js_number(float(int(python_text)))) - len(python_text)  # an integer past 2**53


def json_stringify_bytes(value: Any) -> int:
    """The UTF-8 size of `JSON.stringify(value)` as an agent host computes it: compact, non-ASCII
    as is, numbers as JavaScript writes them (a lone surrogate counts the 3 bytes Python gives it;
    JavaScript escapes it to 6, and the text rules refuse it anyway). One pass of a regular
    expression over Python's text finds the numbers JavaScript writes otherwise: an exponent,
    a trailing ".0", an integer past 2**53."""
    text = compact_json(value)
    size = len(text.encode("utf-8", "surrogatepass"))
    for number in _STRING_OR_NUMBER.findall(text):
        if number and ("e" in number or number.endswith(".0") or _unsafe_integer(number)):
            size += _number_delta(number)
    return size


def _unsafe_integer(number: str) -> bool:
    return "." not in number and len(number) > 15 and abs(int(number)) > _JS_SAFE_INTEGER


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
