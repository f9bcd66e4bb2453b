"""The strict JSON parser on its own: what it refuses, what it keeps, and what it says."""

from __future__ import annotations

import pytest

from apps.core import parsers
from apps.core.parsers import (
    _STRING,
    JSON_MAX_DEPTH,
    InvalidJSON,
    content_charset,
    json_brackets,
    json_marks,
    strict_json_loads,
)
from tests.memory import memory_peak


def _refusal(text: str) -> str:
    with pytest.raises(InvalidJSON) as caught:
        strict_json_loads(text.encode("utf-8", "surrogatepass"))
    return str(caught.value.detail)


def test_nesting_at_the_limit_is_accepted():
    assert strict_json_loads("[" * JSON_MAX_DEPTH + "]" * JSON_MAX_DEPTH) is not None


def test_nesting_one_past_the_limit_is_refused():
    assert "nested deeper than 64 levels" in _refusal("[" * (JSON_MAX_DEPTH + 1) + "]" * (JSON_MAX_DEPTH + 1))


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = '{"a": "' + "[{" * 500 + '\\"' + "[" * 100 + '"}'
    assert strict_json_loads(text) == {"a": "[{" * 500 + '"' + "[" * 100}


def test_many_shallow_containers_are_fine():
    assert len(strict_json_loads("[" + ",".join(["[{}]"] * 10_000) + "]")) == 10_000


@pytest.mark.parametrize("text,path", [
    ('{"a": {"b": [1, 1e999]}}', "a.b[1]"), ('[-1e400]', "[0]"), ('{"x": 1E+309}', "x"),
])
def test_a_number_that_overflows_to_infinity_is_refused_with_its_path(text, path):
    message = _refusal(text)
    assert message.startswith(f"{path}: ")
    assert "too large" in message


def test_a_lone_surrogate_key_is_refused_with_its_path():
    assert _refusal('{"a": {"\\udc00x": 1}}').startswith("a.\ufffdx")


def test_a_surrogate_pair_is_a_character_not_a_lone_surrogate():
    assert strict_json_loads('{"\\ud83d\\ude00": "\\ud83d\\ude00"}') == {"😀": "😀"}


def test_a_lone_surrogate_in_a_value_is_left_to_the_field_rules():
    assert strict_json_loads('{"a": "\\ud800"}') == {"a": "\ud800"}


@pytest.mark.parametrize("number", [2**64 - 1, -(2**63), 10**19])
def test_integers_within_64_bits_are_kept(number):
    assert strict_json_loads(f"[{number}]") == [number]


@pytest.mark.parametrize("number", ["18446744073709551616", "-9223372036854775809", "1" + "0" * 25])
def test_integers_beyond_64_bits_are_refused(number):
    assert "integer" in _refusal(f"[{number}]")


def test_long_digit_strings_are_text_not_numbers():
    assert strict_json_loads('["' + "9" * 5000 + '"]') == ["9" * 5000]


def test_a_duplicate_key_is_named():
    assert "duplicate key 'b'" in _refusal('{"a": 1, "b": 2, "b": 3}')


def test_a_duplicate_key_in_a_nested_object_is_refused():
    assert "duplicate key" in _refusal('{"a": [{"k": 1, "k": 1}]}')


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}'])
def test_nan_and_infinity_literals_are_refused(text):
    assert "is not a JSON number" in _refusal(text)


def test_bytes_that_are_not_utf8_are_refused_with_the_offset():
    with pytest.raises(InvalidJSON) as caught:
        strict_json_loads(b'{"a": "\xff"}')
    assert "not valid UTF-8 (byte 7)" in str(caught.value.detail)


@pytest.mark.parametrize("header,charset", [
    ("application/json", None), ("application/json; charset=UTF-8", "utf-8"),
    ('application/json;charset="rot13"', "rot13"), ("application/json; foo=bar; Charset=Latin-1", "latin-1"),
])
def test_the_charset_parameter_is_read(header, charset):
    assert content_charset(header) == charset


def test_brackets_are_counted_outside_strings_escaped_quotes_included():
    assert json_brackets('{"a": "x]\\"}[", "b": [1, {"c": "\\\\"}]}') == "{[{}]}"


def test_an_unterminated_string_runs_to_the_end_in_one_match():
    """`"` then many `\\"`: had the string's match failed at the end, each escaped quote would begin
    another scan to the end (quadratic: a 40 KB body held a worker 4.5 s). The bracket after such a
    string is inside it."""
    text = "[" * (JSON_MAX_DEPTH + 1) + '"' + '\\"' * 1000 + "]" * 3
    assert json_brackets(text) == "[" * (JSON_MAX_DEPTH + 1)
    assert [m.span() for m in _STRING.finditer(text)] == [(JSON_MAX_DEPTH + 1, len(text))]


def test_the_marks_of_a_long_text_of_short_strings_are_read_without_listing_the_text_between_them():
    """re.sub over the whole text listed the text between its strings: four times the text (205 MB
    for a 50 MB document of `"a",`). Read a piece at a time, the marks themselves are most of it."""
    text = "[" + '"a",' * 1_000_000 + '"a"]'
    with memory_peak() as peak:
        marks = json_marks(text)
    assert marks == "[" + "," * 1_000_000 + "]"
    assert peak.bytes < len(text)


MARKED = {
    "escaped quotes and brackets in strings": ('{"a": "x]\\"}[", "b": [1, {"c": "\\\\"}]}', "{,[,{}]}"),
    "a string longer than a piece": ('[{"k": "' + "a, b] " * 5 + '"}, 2]', "[{},]"),
    "an unterminated string": ('[1, "abc, ]' + '\\"' * 5, "[,"),
    "escapes cut anywhere": ('["\\\\", "\\"", {"\\u0022": [","]}]', "[,,{[]}]"),
}


@pytest.mark.parametrize(("text", "marks"), MARKED.values(), ids=MARKED.keys())
def test_a_text_read_in_pieces_of_any_size_has_the_marks_of_one_pass(monkeypatch, text, marks):
    assert json_marks(text) == marks
    for size in range(1, 9):
        monkeypatch.setattr(parsers, "_MARKS_PIECE", size)
        assert json_marks(text) == marks


def test_a_body_of_escaped_quotes_is_refused_as_invalid_json():
    with pytest.raises(InvalidJSON):
        strict_json_loads("[" * 100 + '"' + '\\"' * 20000)
