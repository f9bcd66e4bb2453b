"""The one JSON parser of every API endpoint, and the multipart parser that says what went wrong.

JSON bodies are strict UTF-8 (RFC 8259 §8.1) and I-JSON-like (RFC 7493): no repeated key, no
NaN/Infinity (nor a number that only fits as infinity), integers of at most 20 digits within
64 bits, object keys without lone surrogates, and at most `JSON_MAX_DEPTH` levels of nesting.
Anything else is a 400 `invalid_json` that says what and where; a charset other than UTF-8 is
415 before a byte is decoded.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from itertools import accumulate
from typing import IO, Any, NoReturn

from django.http import UnreadablePostError
from django.http.multipartparser import MultiPartParserError
from rest_framework.exceptions import ParseError
from rest_framework.parsers import DataAndFiles, JSONParser, MultiPartParser

from apps.core.errors import UnsupportedMediaType
from apps.core.request_body import body_unreadable_error

JSON_MAX_DEPTH = 64
INT_MAX_DIGITS = 20
INT_MIN, INT_MAX = -(2**63), 2**64 - 1

_UTF8 = {"utf-8", "utf8"}
# A JSON string, or an unterminated one to the end of the text. The closing quote is optional so
# that a match never fails once it has begun: a failed match made the next quote a new start, and
# `"` followed by many `\"` cost a scan to the end for each one (a 40 KB body 4.5 s, 1 MiB ~45 min).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_MARK = re.compile(r"[^\[\]{},]+")
_MARKS_PIECE = 256 * 1024
# After a piece, a NUL (taken as the escaped character, should the piece end on a backslash in a
# string), a quote and U+0001: the U+0001 stays, the last character, only if the quote closed a
# string the piece ended in.
_PIECE_END = '\x00"\x01'
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_LONG_DIGITS = re.compile(r"[0-9]{19}")
# Lone surrogates only ever come from \uD800-\uDFFF escapes: UTF-8 text cannot carry them.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_CHARSET = re.compile(r";\s*charset\s*=\s*\"?([^\s;\"]*)", re.IGNORECASE)


class UnsupportedCharset(UnsupportedMediaType):
    message = "Only UTF-8 is accepted: send Content-Type: application/json (charset utf-8 or none)."


class InvalidJSON(ParseError):
    """`path` and `problem` are set when the text is JSON but one value in it is refused (a number
    too large to represent, an object key with a lone surrogate): an API may then answer as it
    answers an invalid field (the builder API's 422) rather than as unparseable text."""

    default_code = "invalid_json"

    def __init__(self, message: str, *, path: str | None = None, value_refused: bool = False):
        self.path = path
        self.problem = message
        self.value_refused = value_refused
        super().__init__(f"{path}: {message}" if path else message, code="invalid_json")


def content_charset(content_type: str) -> str | None:
    """The charset parameter of a Content-Type header, lower-cased, or None when there is none."""
    match = _CHARSET.search(content_type or "")
    return match.group(1).strip().lower() if match else None


def charset_is_utf8(content_type: str) -> bool:
    charset = content_charset(content_type)
    return charset is None or charset in _UTF8


class _Refused(ValueError):
    """Raised inside the json hooks: the decoder's own ValueError subclasses are caught alike."""


def _refuse_constant(name: str) -> NoReturn:
    raise _Refused(f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > INT_MAX_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits is too long (at most {INT_MAX_DIGITS})")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise _Refused("an integer outside the 64-bit range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate key {key[:64]!r}")
            seen.add(key)
    return out


class _NonFinite(float):
    """1e999 parses to infinity; marked so the walk can name where it stood."""


def _float_parser(flagged: list[bool]) -> Callable[[str], float]:
    def parse_float(text: str) -> float:
        value = float(text)
        if math.isfinite(value):
            return value
        flagged.append(True)
        return _NonFinite(value)

    return parse_float


def json_marks(text: str) -> str:
    """The brackets and commas of JSON text outside its strings, in order, at C speed and in linear
    time (an unterminated string runs to the end: such text is not JSON, and the decoder says
    where). A value follows each comma.

    Read _MARKS_PIECE characters at a time: re.sub lists the text between its matches, and over a
    whole document of short strings that list took four times the text (205 MB for a 50 MB file
    of `"a",`). A piece that ends inside a string hands the next one a quote that reopens it (and
    the backslash of an escape it ends in)."""
    pieces, reopen = [], ""
    for start in range(0, len(text), _MARKS_PIECE):
        piece = reopen + text[start:start + _MARKS_PIECE]
        if start + _MARKS_PIECE >= len(text):
            pieces.append(_NOT_MARK.sub("", _STRING.sub("", piece)))
            break
        outside = _STRING.sub("", piece + _PIECE_END)
        pieces.append(_NOT_MARK.sub("", outside))
        if not outside.endswith("\x01"):
            reopen = ""
        elif (len(piece) - len(piece.rstrip("\\"))) % 2:
            reopen = '"\\'
        else:
            reopen = '"'
    return "".join(pieces)


def json_brackets(text: str) -> str:
    """The brackets of JSON text outside its strings, in order (json_marks)."""
    return json_marks(text).replace(",", "")


def brackets_too_deep(brackets: str) -> bool:
    """Whether brackets (json_brackets) nest deeper than JSON_MAX_DEPTH."""
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > JSON_MAX_DEPTH


def nested_too_deep(text: str) -> bool:
    """Whether JSON text nests arrays and objects deeper than JSON_MAX_DEPTH (strings skipped),
    at C speed and before the decoder recurses into it."""
    if text.count("[") + text.count("{") <= JSON_MAX_DEPTH:
        return False
    return brackets_too_deep(json_brackets(text))


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    shown = _LONE_SURROGATE.sub("\ufffd", key[:64])
    return f"{parent}.{shown}" if parent else shown


def json_problem(value: Any, *, max_depth: int = JSON_MAX_DEPTH) -> tuple[str, str] | None:
    """(path, problem) of the first value a strict parse refuses, walking without recursion."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                return path or "$", f"nested deeper than {max_depth} levels"
            if isinstance(item, dict):
                for key in item:
                    if _LONE_SURROGATE.search(key):
                        return _path(path, key), "an object key with a lone surrogate"
                children = [(child, _path(path, key), depth + 1) for key, child in item.items()]
            else:
                children = [(child, _path(path, index), depth + 1) for index, child in enumerate(item)]
            stack.extend(reversed(children))
        elif isinstance(item, _NonFinite):
            return path or "$", "a number too large to represent"
    return None


def lone_surrogate_path(value: Any) -> str | None:
    """Where in a parsed JSON value (keys and strings, walked without recursion) a lone surrogate
    sits — `a.b[2]` as json_problem writes paths, `$` for the value itself — or None. The strict
    parse leaves those in values to the fields; no UTF-8 encoder, and so neither PostgreSQL nor a
    business system, takes one."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return path or "$"
        elif isinstance(item, dict):
            for key, child in item.items():
                if _LONE_SURROGATE.search(key):
                    return _path(path, key)
                stack.append((child, _path(path, key)))
        elif isinstance(item, list):
            stack.extend((child, _path(path, index)) for index, child in enumerate(item))
    return None


def strict_json_loads(data: bytes | str) -> Any:
    """Parse bytes (which must be UTF-8) or text as strict JSON; InvalidJSON says why.

    The common body costs one C-speed pass more than json.loads: the checks that need Python per
    value (long integers, lone surrogates, the path of a bad value) run only when a cheap look
    at the text says they could find something.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    except UnicodeDecodeError as exc:
        raise InvalidJSON(f"The body is not valid UTF-8 (byte {exc.start}).") from exc
    if nested_too_deep(text):
        raise InvalidJSON(f"The body is nested deeper than {JSON_MAX_DEPTH} levels.")
    non_finite: list[bool] = []
    hooks: dict[str, Any] = {"parse_float": _float_parser(non_finite)}
    if _LONG_DIGITS.search(text):
        hooks["parse_int"] = _bounded_int
    try:
        value = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys, **hooks)
    except RecursionError as exc:
        raise InvalidJSON(f"The body is nested deeper than {JSON_MAX_DEPTH} levels.") from exc
    except ValueError as exc:
        raise InvalidJSON(f"The body is not valid JSON: {str(exc)[:200]}.") from exc
    if non_finite or _SURROGATE_ESCAPE.search(text):
        problem = json_problem(value)
        if problem:
            path, message = problem
            raise InvalidJSON(f"{message}.", path=path, value_refused=not message.startswith("nested"))
    return value


class StrictJSONParser(JSONParser):
    """The DRF default parser (REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"])."""

    def parse(self, stream: IO[Any] | None, media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:  # any JSON value, not only an object
        if not charset_is_utf8(media_type or ""):
            raise UnsupportedCharset()
        return strict_json_loads(stream.read() if stream is not None else b"")


class StrictMultiPartParser(MultiPartParser):
    """A multipart body that cannot be parsed is 400 `invalid_multipart`, not `invalid_json`; one
    that cannot be read whole is body_unreadable_error's 408 or 400. That error is no
    UnreadablePostError: CSRF's check (a request signed in with the console's session) reads the
    form and takes an UnreadablePostError for an empty form, and the upload became 422
    file_required on a connection kept alive."""

    def parse(self, stream: IO[Any], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> DataAndFiles[Any, Any]:
        if not charset_is_utf8(media_type or ""):
            raise UnsupportedCharset()
        request = (parser_context or {}).get("request")
        try:
            parsed = super().parse(stream, media_type, parser_context)
        except ParseError as exc:
            raise ParseError(f"The multipart body cannot be parsed: {str(exc.detail)[:200]}",
                             code="invalid_multipart") from exc
        except MultiPartParserError as exc:
            raise ParseError(f"The multipart body cannot be parsed: {str(exc)[:200]}",
                             code="invalid_multipart") from exc
        except UnreadablePostError as exc:
            if request is None:
                raise
            raise body_unreadable_error(request) from exc
        # Django's parser takes the end of the stream for the end of the body (it reads the stream
        # to its end, as no upload handler here takes the raw input): an upload cut off inside
        # its file parsed as a form without it.
        limited = getattr(stream, "_stream", None)  # the HttpRequest's LimitedStream (Django's own)
        received, announced = getattr(limited, "_pos", None), getattr(limited, "limit", None)
        if request is not None and isinstance(received, int) and isinstance(announced, int) and received < announced:
            raise body_unreadable_error(request, received=received, announced=announced)
        return parsed
