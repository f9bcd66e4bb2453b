"""Hostile JSON bodies on every JSON endpoint family (agent auth, agent API, builder API).

Each test sends one kind of hostile body to every endpoint and compares the whole table of
answers, so a single endpoint that answers differently (or 500) shows up by name.
"""

from __future__ import annotations

import json

import pytest

from tests.core.hostile import ENDPOINT_NAMES, row_counts, send

pytestmark = pytest.mark.django_db

DEEP = 1000


def _answers(world, body, **kwargs) -> dict[str, tuple[int, str | None]]:
    out = {}
    for name in ENDPOINT_NAMES:
        response = send(world, name, body, **kwargs)
        is_json = response.get("Content-Type", "").startswith("application/json")
        out[name] = (response.status_code, response.json().get("error") if is_json else None)
    return out


# The tool contract and Agent Auth (whose error codes are a closed list) name a body they cannot
# parse `invalid_request`, and the whole agent API answers as the tool contract does (no agent
# contract names `invalid_json`); the builder API says `invalid_json`.
AGENT_API = ("turn_open", "run_complete", "memory_create", "memory_update", "project_memory_create",
             "project_memory_update", "knowledge_search", "knowledge_read", "capability_search")
INVALID_REQUEST_FAMILY = (*AGENT_API, "authorization_create", "token", "revoke", "authorization_approve",
                          "authorization_deny")
FAMILY_CODES = {(name, "invalid_json"): "invalid_request" for name in INVALID_REQUEST_FAMILY}


AGENT_AUTH = ("authorization_create", "token", "revoke", "authorization_approve", "authorization_deny")
AGENT_AUTH_400 = {name: (400, "invalid_request") for name in AGENT_AUTH}


def _all(status: int, code: str) -> dict[str, tuple[int, str]]:
    return {name: (status, FAMILY_CODES.get((name, code), code)) for name in ENDPOINT_NAMES}


# JSON text whose one value no field can take: the builder API answers as for any invalid field
# (422 with the endpoint's own code, naming it); the agent families say the body is not their JSON.
BUILDER_INVALID_FIELD = {"kb_create": "invalid_knowledge_base", "kb_update": "invalid_knowledge_base",
                         "kb_search": "invalid_search", "document_upload": "invalid_request"}


def _value_refused() -> dict[str, tuple[int, str]]:
    return {**_all(400, "invalid_json"), **{name: (422, code) for name, code in BUILDER_INVALID_FIELD.items()}}


@pytest.mark.parametrize("body", [
    "[" * DEEP + "]" * DEEP,
    '{"a":' * DEEP + "1" + "}" * DEEP,
    '{"query": ' + "[" * DEEP + "]" * DEEP + "}",
], ids=["arrays", "objects", "under_a_field"])
def test_a_thousand_levels_of_nesting_is_400_invalid_json_everywhere(world, body):
    before = row_counts()
    assert _answers(world, body) == _all(400, "invalid_json")
    assert row_counts() == before


def test_nesting_deeper_than_the_limit_but_within_the_stack_is_400(world):
    body = '{"content": ' + "[" * 80 + "]" * 80 + "}"
    before = row_counts()
    assert _answers(world, body) == _all(400, "invalid_json")
    assert row_counts() == before


@pytest.mark.parametrize("charset", ["rot13", "zlib", "base64", "hex", "latin-1", "utf-16", "bz2", "uu", "nonsense"])
def test_a_charset_other_than_utf8_is_415(world, charset):
    before = row_counts()
    answers = _answers(world, b'{"content": "x"}', content_type=f"application/json; charset={charset}")
    # Agent Auth's closed error list has no 415: it says invalid_request.
    assert answers == {**_all(415, "unsupported_media_type"), **AGENT_AUTH_400}
    assert row_counts() == before


# A Content-Type is a media type, never a range: DRF would match `*/*` (or `application/*`) against
# the JSON parser and read the body. Refused as any media type the endpoint does not read.
MEDIA_RANGES = ["*/*", "application/*", "*/json", "*/*; charset=utf-8", "application/*+json"]


@pytest.mark.parametrize("content_type", MEDIA_RANGES)
def test_a_media_range_as_content_type_is_refused_like_another_media_type(world, content_type):
    before = row_counts()
    answers = _answers(world, b'{"content": "x"}', content_type=content_type)
    assert answers == {**_all(415, "unsupported_media_type"), **AGENT_AUTH_400}
    assert row_counts() == before


def test_an_explicit_utf8_charset_is_accepted(world):
    response = send(world, "memory_create", '{"content": "记住：带字符集。"}',
                    content_type="application/json; charset=UTF-8")
    assert response.status_code == 200


@pytest.mark.parametrize("body", [
    '{"content": NaN}', '{"content": Infinity}', '{"content": -Infinity}',
    '{"content": 1e999}', '{"content": -1e999}',
], ids=["nan", "infinity", "minus_infinity", "overflow", "minus_overflow"])
def test_non_finite_numbers_are_400_invalid_json_or_a_422_invalid_builder_field(world, body):
    before = row_counts()
    expected = _all(400, "invalid_json") if "Infinity" in body or "NaN" in body else _value_refused()
    assert _answers(world, body) == expected
    assert row_counts() == before


@pytest.mark.parametrize("digits", [21, 4400, 12_000])
def test_integers_longer_than_twenty_digits_are_400_invalid_json(world, digits):
    before = row_counts()
    assert _answers(world, '{"content": ' + "9" * digits + "}") == _all(400, "invalid_json")
    assert row_counts() == before


def test_an_integer_beyond_64_bits_is_400_invalid_json(world):
    assert _answers(world, f'{{"content": {2**64}}}') == _all(400, "invalid_json")


def test_a_duplicate_key_is_400_invalid_json(world):
    before = row_counts()
    assert _answers(world, '{"content": "a", "content": "b"}') == _all(400, "invalid_json")
    assert row_counts() == before


@pytest.mark.parametrize("body", ['{"\\ud800": 1}', '{"chunk_strategy": {"\\udfff": 1}}'], ids=["top", "nested"])
def test_a_lone_surrogate_key_is_400_invalid_json_or_a_422_invalid_builder_field(world, body):
    before = row_counts()
    assert _answers(world, body) == _value_refused()
    assert row_counts() == before


@pytest.mark.parametrize("body", [b'{"content": "\xff"}', b'\xef\xbb\xbf{"content": "x"}', b'{"content": "\xc3"}'],
                         ids=["invalid_byte", "bom", "truncated_sequence"])
def test_bytes_that_are_not_utf8_json_are_400_invalid_json(world, body):
    before = row_counts()
    assert _answers(world, body) == _all(400, "invalid_json")
    assert row_counts() == before


def test_the_unparseable_body_message_says_what_and_where(world):
    response = send(world, "memory_create", '{"content": {"max_chars": 1e999}}')
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_request"
    assert "content.max_chars" in body["message"]


def test_a_builder_patch_with_1e999_is_422_naming_the_field(world):
    before = row_counts()
    response = send(world, "kb_update", '{"chunk_strategy": {"max_chars": 1e999}}')
    body = response.json()
    assert (response.status_code, body["error"]) == (422, "invalid_knowledge_base")
    assert body["fields"] == {"chunk_strategy.max_chars": ["A number too large to represent."]}
    assert body["message"] == "chunk_strategy.max_chars: A number too large to represent."
    assert row_counts() == before


def test_a_body_nested_within_the_limit_still_works(world):
    context = {"a": {"b": {"c": {"d": [1, 2, {"e": "f"}]}}}}
    response = send(world, "turn_open", json.dumps({
        "client_conversation_id": "c-deep", "client_turn_id": "t-deep", "user_message_id": "m-deep",
        "user_input": "你好", "page_context": context}))
    assert response.status_code == 200


@pytest.mark.parametrize("name", INVALID_REQUEST_FAMILY)
def test_an_invalid_request_for_an_unreadable_body_gives_the_parsers_account_once(world, name):
    response = send(world, name, '{"a": ')
    body = response.json()
    assert (response.status_code, body["error"]) == (400, "invalid_request")
    assert body["message"].startswith("The body is not valid JSON: ")
    assert body["message"].count("not valid JSON") == 1


# What JavaScript's JSON.stringify writes (node 20), for numbers Python's json writes otherwise.
JS_NUMBERS = {1e-7: "1e-7", 1e-5: "0.00001", 1e-6: "0.000001", 1e16: "10000000000000000", 1e21: "1e+21",
              1e20: "100000000000000000000", 1.0: "1", -0.0: "0", 1.5e-9: "1.5e-9", 123.456: "123.456",
              -2.5: "-2.5", 5e-324: "5e-324", 1.7976931348623157e308: "1.7976931348623157e+308",
              1234567.0: "1234567", 0.1: "0.1"}


@pytest.mark.parametrize(("number", "written"), JS_NUMBERS.items(), ids=JS_NUMBERS.values())
def test_numbers_are_written_as_json_stringify_writes_them(number, written):
    from apps.core.jsonbytes import js_number, json_stringify_bytes

    assert js_number(number) == written
    assert json_stringify_bytes({"n": [number]}) == len(f'{{"n":[{written}]}}')


def test_an_integer_past_two_to_the_53_is_written_as_the_double_javascript_holds():
    from apps.core.jsonbytes import json_stringify_bytes

    # JSON.stringify(12345678901234567890) === "12345678901234567000"; 2**60 is exact.
    assert json_stringify_bytes(12345678901234567890) == len("12345678901234567000")
    assert json_stringify_bytes([2**60, True, None, "字"]) == len('[1152921504606846976,true,null,"字"]'.encode())


def test_a_number_written_inside_a_string_is_text():
    from apps.core.jsonbytes import json_stringify_bytes

    value = {"s": 'say "1e-07" or 1.0\\', "n": 1.0}
    assert json_stringify_bytes(value) == len('{"s":"say \\"1e-07\\" or 1.0\\\\","n":1}')


@pytest.mark.parametrize("value, held", [
    ({"q": 1.0, "n": [-0.0, 1e20, 2.5]}, {"q": 1, "n": [0, 10**20, 2.5]}),
    ([1e21, True, False, None, "1.0"], [1e21, True, False, None, "1.0"]),
], ids=["integral floats", "left alone"])
def test_js_numbers_holds_numbers_as_javascript_writes_them(value, held):
    from apps.core.jsonbytes import js_numbers

    out = js_numbers(value)
    assert out == held
    assert [type(item) for item in (out if isinstance(out, list) else out["n"])] == [
        type(item) for item in (held if isinstance(held, list) else held["n"])]
