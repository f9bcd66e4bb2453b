"""Every rule of the turn request: 400 naming the field (or 413), and nothing stored."""

import json

import pytest

from apps.ledger.models import Message
from tests.agent_auth.helpers import bearer
from tests.ledger.helpers import ledger_counts, open_turn, post_json, turn_body, turn_url

NOTHING = {"Conversation": 0, "Message": 0, "Run": 0, "MemoryNote": 0}


def _refused(response, field):
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == "invalid_request"
    assert [name.split(".")[0] for name in body["fields"]] == [field]
    assert ledger_counts() == NOTHING


def test_an_unknown_field_is_refused(api_client, issued, route):
    _refused(open_turn(api_client, issued.access_token, route.key, colour="blue"), "colour")


def test_a_malformed_task_binding_is_refused_naming_it(api_client, issued, route):
    response = open_turn(api_client, issued.access_token, route.key, task_binding={"task_id": "t"})
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert set(response.json()["fields"]) == {"task_binding.task_id", "task_binding.schema_version",
                                             "task_binding.scope_hash"}
    assert ledger_counts() == NOTHING


@pytest.mark.parametrize("field", ["client_conversation_id", "client_turn_id", "user_message_id", "user_input"])
def test_each_required_field_is_required(api_client, issued, route, field):
    _refused(open_turn(api_client, issued.access_token, route.key, **{field: ...}), field)


@pytest.mark.parametrize("field", ["client_conversation_id", "client_turn_id", "user_message_id"])
@pytest.mark.parametrize("value", ["", "x" * 192, 7, None, ["a"], "line\nbreak", "tab\there", "nbsp\u00a0",
                                   "bell\x07", "c1\x85"])
def test_ids_are_1_to_191_printable_characters(api_client, issued, route, field, value):
    _refused(open_turn(api_client, issued.access_token, route.key, **{field: value}), field)


@pytest.mark.parametrize("field", ["client_conversation_id", "client_turn_id", "user_message_id"])
def test_an_id_of_191_characters_is_accepted(api_client, issued, route, field):
    response = open_turn(api_client, issued.access_token, route.key, **{field: "标" * 191})
    assert response.status_code == 200


def test_user_input_of_64000_characters_is_accepted_verbatim(api_client, issued, route):
    text = "问" * 63_990 + "\t\r\n end  "
    response = open_turn(api_client, issued.access_token, route.key, user_input=text)
    assert response.status_code == 200
    assert Message.objects.get().content == text


def test_user_input_of_64000_ascii_escaped_characters_fits_the_body_limit(api_client, issued, route):
    body = json.dumps(turn_body(user_input="问" * 64_000), ensure_ascii=True)
    assert 384_000 < len(body) < 512 * 1024
    assert post_json(api_client, turn_url(route.key), body, issued.access_token).status_code == 200


def test_user_input_over_64000_characters_is_refused_not_truncated(api_client, issued, route):
    _refused(open_turn(api_client, issued.access_token, route.key, user_input="问" * 64_001), "user_input")


@pytest.mark.parametrize("value", ["", 42, None, {"text": "hi"}])
def test_user_input_is_a_non_empty_string(api_client, issued, route, value):
    _refused(open_turn(api_client, issued.access_token, route.key, user_input=value), "user_input")


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\x1b", "\x1f", "\x7f", "\x80", "\x85",
                                  "\x9f"])
def test_user_input_with_a_control_character_is_refused(api_client, issued, route, char):
    _refused(open_turn(api_client, issued.access_token, route.key, user_input=f"查{char}询"), "user_input")


def test_user_input_with_a_lone_surrogate_is_refused(api_client, issued, route):
    body = json.dumps(turn_body(), ensure_ascii=True).replace('"user_input": "', '"user_input": "\\ud800')
    _refused(post_json(api_client, turn_url(route.key), body, issued.access_token), "user_input")


def test_a_surrogate_pair_is_a_character_not_a_lone_surrogate(api_client, issued, route):
    response = open_turn(api_client, issued.access_token, route.key, user_input="表情 😀")
    assert response.status_code == 200
    assert Message.objects.get().content == "表情 😀"


@pytest.mark.parametrize("value", [[], "url=/staff", None, 3])
def test_page_context_is_an_object(api_client, issued, route, value):
    _refused(open_turn(api_client, issued.access_token, route.key, page_context=value), "page_context")


def test_page_context_of_16_kib_is_accepted(api_client, issued, route):
    filler = "a" * (16 * 1024 - len('{"f":""}'))
    response = open_turn(api_client, issued.access_token, route.key, page_context={"f": filler})
    assert response.status_code == 200
    assert response.json()["context"]["page_context"] == {"f": filler}


def test_page_context_over_16_kib_is_refused(api_client, issued, route):
    filler = "a" * (16 * 1024 - len('{"f":""}') + 1)
    _refused(open_turn(api_client, issued.access_token, route.key, page_context={"f": filler}), "page_context")


def test_page_context_is_measured_in_utf8_bytes(api_client, issued, route):
    _refused(open_turn(api_client, issued.access_token, route.key, page_context={"f": "页" * 5462}), "page_context")


def test_page_context_is_measured_as_sent_with_line_separators_escaped(api_client, issued, route):
    # 5,400 U+2028: 16,208 bytes as UTF-8, 32,408 as the answer sends them (escaped, six bytes each).
    _refused(open_turn(api_client, issued.access_token, route.key, page_context={"t": "\u2028" * 5400}),
             "page_context")


@pytest.mark.parametrize("value", [{"title": "a\x00b"}, {"nested": [{"x": "\x1b[31m"}]}, {"key\x07": "v"}])
def test_page_context_strings_and_keys_obey_the_text_rules(api_client, issued, route, value):
    _refused(open_turn(api_client, issued.access_token, route.key, page_context=value), "page_context")


def test_page_context_nested_too_deep_is_refused(api_client, issued, route):
    value: dict = {}
    for _ in range(40):
        value = {"a": value}
    _refused(open_turn(api_client, issued.access_token, route.key, page_context=value), "page_context")


def test_page_context_keeps_text_with_line_breaks_verbatim(api_client, issued, route):
    value = {"selection": "第一行\n第二行\t\r", "n": 1.5, "flag": True, "none": None}
    response = open_turn(api_client, issued.access_token, route.key, page_context=value)
    assert response.json()["context"]["page_context"] == value


def test_twenty_renderers_are_accepted(api_client, issued, route):
    names = [f"r{n}" for n in range(20)]
    response = open_turn(api_client, issued.access_token, route.key, renderers=names)
    assert response.json()["context"]["renderers"] == names


@pytest.mark.parametrize("value", [
    [f"r{n}" for n in range(21)],
    ["markdown", "markdown"],
    ["Markdown"],
    ["1form"],
    ["-form"],
    ["a" * 65],
    ["mark down"],
    ["markdown\n"],
    [""],
    [3],
    "markdown",
    None,
])
def test_invalid_renderers_are_refused(api_client, issued, route, value):
    _refused(open_turn(api_client, issued.access_token, route.key, renderers=value), "renderers")


@pytest.mark.parametrize("value", ["bogus", "", None, True])
def test_knowledge_delivery_is_inline_or_on_demand(api_client, issued, route, value):
    _refused(open_turn(api_client, issued.access_token, route.key, knowledge_delivery=value), "knowledge_delivery")


def test_a_body_that_is_not_an_object_is_refused(api_client, issued, route):
    _refused(post_json(api_client, turn_url(route.key), [turn_body()], issued.access_token), "non_field_errors")


@pytest.mark.parametrize("raw", ['{"user_input": "a"', '{"user_input": NaN}', "\ufeff{}"])
def test_malformed_json_is_refused(api_client, issued, route, raw):
    response = post_json(api_client, turn_url(route.key), raw, issued.access_token)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert ledger_counts() == NOTHING


def test_a_repeated_key_is_refused_not_silently_picked(api_client, issued, route):
    body = json.dumps(turn_body())[:-1] + ', "user_input": "另一个"}'
    response = post_json(api_client, turn_url(route.key), body, issued.access_token)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert ledger_counts() == NOTHING


def test_deeply_nested_json_is_a_400_not_a_500(api_client, issued, route):
    body = '{"page_context": ' + '{"a":' * 60_000 + "1" + "}" * 60_000 + "}"
    assert len(body) < 512 * 1024
    response = post_json(api_client, turn_url(route.key), body, issued.access_token)
    assert response.status_code == 400
    assert ledger_counts() == NOTHING


def test_a_body_over_512_kib_is_413_before_parsing(api_client, issued, route):
    body = json.dumps(turn_body(user_input="a" * (512 * 1024)))
    response = post_json(api_client, turn_url(route.key), body, issued.access_token)
    assert response.status_code == 413
    assert response.json()["error"] == "request_too_large"
    assert response.json()["max_bytes"] == 512 * 1024
    assert response.json()["observed_bytes"] > 512 * 1024
    assert ledger_counts() == NOTHING


def test_a_body_of_exactly_512_kib_is_read(api_client, issued, route):
    body = json.dumps(turn_body(page_context={"pad": ""}))
    body = body.replace('"pad": ""', '"pad": ""' + " " * (512 * 1024 - len(body)))
    assert len(body.encode()) == 512 * 1024
    assert post_json(api_client, turn_url(route.key), body, issued.access_token).status_code == 200


@pytest.mark.parametrize("content_type, named", [
    ("application/x-www-form-urlencoded", "not 'application/x-www-form-urlencoded'"),  # urllib's default
    ("text/plain; charset=utf-8", "not 'text/plain'"),
    ("", "this request named none"),
])
def test_a_body_of_another_media_type_is_415_saying_to_send_json(api_client, issued, route, content_type, named):
    response = api_client.generic("POST", turn_url(route.key), json.dumps(turn_body()), content_type=content_type,
                                  **bearer(issued.access_token))
    assert (response.status_code, response.json()["error"]) == (415, "unsupported_media_type")
    assert response.json()["message"] == f"The body must be JSON (Content-Type: application/json, in UTF-8), {named}."
    assert ledger_counts() == NOTHING
