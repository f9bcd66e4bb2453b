"""The invocation endpoint's budgets come before anything else: the raw body is streamed and cut
past 2 MiB, the arguments past 1 MiB as JSON.stringify writes them (UTF-8); both 413 in the contract's shape, with
nothing stored and nothing sent."""

import json

import pytest

from tests.tools.invocation_helpers import stored

pytest_plugins = ["tests.tools.invocation_fixtures"]

MiB = 1024 * 1024


def _too_large(response, scope: str) -> dict:
    assert response.status_code == 413, response.content
    body = response.json()
    assert (body["error"], body["origin"], body["dispatch"], body["limit_scope"]) == (
        "arguments_too_large", "core", "not_dispatched", scope)
    assert response["Cache-Control"] == "no-store"
    return body


def test_arguments_over_one_mib_are_refused_with_their_exact_size(shop):
    text = "库" * ((MiB // 3) + 1)  # three UTF-8 bytes each, not escaped
    response = shop.invoke("note_add", {"text": text})
    body = _too_large(response, "arguments")
    assert body["max_bytes"] == MiB
    assert body["actual_bytes"] == len(json.dumps({"text": text}, ensure_ascii=False,
                                                  separators=(",", ":")).encode())
    assert stored() == {"invocations": 0, "approvals": 0, "journal": 0}
    assert shop.server.received == []


def test_arguments_of_exactly_one_mib_pass_the_budget(shop):
    filler = "a" * (MiB - len('{"text":""}'))
    response = shop.invoke("note_add", {"text": filler}, capability_revision="0" * 64)
    assert response.status_code == 409  # past the budget: the next check (a stale revision) answers
    assert response.json()["error"] == "capability_changed"


def _numbers_and_text(number: float, js_text: str, js_bytes: int) -> dict:
    """Arguments of a thousand `number`s and a filler text whose JSON.stringify is `js_bytes` long."""
    numbers = ",".join([js_text] * 1000)
    filler = "a" * (js_bytes - len(f'{{"x":[{numbers}],"text":""}}'))
    return {"x": [number] * 1000, "text": filler}


def test_the_budget_measures_numbers_as_json_stringify_writes_them(shop):
    # JavaScript writes 1e-7 where Python writes 1e-07: a thousand of them are 1,000 bytes fewer.
    exact = _numbers_and_text(1e-7, "1e-7", MiB)
    response = shop.invoke("note_add", exact, capability_revision="0" * 64)
    assert response.json()["error"] == "capability_changed"  # within the budget
    # ...and 0.00001 where Python writes 1e-05: over by one byte, and told so exactly.
    over = _numbers_and_text(0.00001, "0.00001", MiB + 1)
    body = _too_large(shop.invoke("note_add", over), "arguments")
    assert body["actual_bytes"] == MiB + 1
    assert stored() == {"invocations": 0, "approvals": 0, "journal": 0}


def test_a_body_over_two_mib_is_cut_while_streaming(shop):
    body = json.dumps(shop.body("note_add", {"text": "a" * (2 * MiB)}))
    response = shop.post(body)
    result = _too_large(response, "request_body")
    assert result["max_bytes"] == 2 * MiB
    assert 2 * MiB < result["observed_bytes"] < len(body)
    assert "actual_bytes" not in result
    assert stored() == {"invocations": 0, "approvals": 0, "journal": 0}
    assert shop.server.received == []


def test_the_arguments_budget_comes_before_authentication(shop):
    response = shop.post(shop.body("note_add", {"text": "é" * (MiB // 2 + 1)}), token="bha_not-a-token")
    _too_large(response, "arguments")


def test_the_turn_body_limit_does_not_apply_here(shop):
    response = shop.invoke("note_add", {"text": "a" * (600 * 1024)}, capability_revision="0" * 64)
    assert response.json()["error"] == "capability_changed"


def test_a_body_that_is_not_json_is_refused_before_anything(shop):
    response = shop.client.generic("POST", "/agent-api/v1/tool-invocations", "a=1", content_type="text/plain",
                                   HTTP_AUTHORIZATION=f"Bearer {shop.token}")
    assert (response.status_code, response.json()["error"]) == (415, "unsupported_media_type")
    assert stored() == {"invocations": 0, "approvals": 0, "journal": 0}


@pytest.mark.parametrize("content_type", ["*/*", "application/*", "*/json"])
def test_a_media_range_as_content_type_is_refused_before_anything(shop, content_type):
    body = json.dumps(shop.body("note_add", {"text": "tea"}))
    response = shop.client.generic("POST", "/agent-api/v1/tool-invocations", body, content_type=content_type,
                                   HTTP_AUTHORIZATION=f"Bearer {shop.token}")
    assert (response.status_code, response.json()["error"]) == (415, "unsupported_media_type")
    assert response["Cache-Control"] == "no-store"
    assert stored() == {"invocations": 0, "approvals": 0, "journal": 0}
    assert shop.server.received == []


@pytest.mark.parametrize(("arguments", "said"), [
    ('{"text": "tea\\ud800"}', "text: a lone surrogate is not allowed"),
    ('{"items": [{"sku": "A"}, {"sku": "\\udfff x"}]}', "items[1].sku: a lone surrogate is not allowed"),
    ('{"no\\ud83dte": "x"}', "arguments.no\ufffdte: an object key with a lone surrogate"),  # the parser's
])
def test_a_lone_surrogate_in_the_arguments_is_400_invalid_request_and_stores_nothing(shop, arguments, said):
    # A host that cuts text inside an emoji sends half of a surrogate pair: no UTF-8 encoder takes it.
    body = json.dumps(shop.body("note_add", {}))[:-1].replace('"arguments": {}', f'"arguments": {arguments}') + "}"
    response = shop.post(body)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request"), response.content
    assert said in response.json()["message"]
    assert stored() == {"invocations": 0, "approvals": 0, "journal": 0}
    assert shop.server.received == []


def test_a_surrogate_pair_in_the_arguments_is_a_character(shop):
    response = shop.invoke("note_add", {"text": "tea \U0001f375"})
    assert response.status_code == 200, response.content
    assert response.json()["state"] in {"in_progress", "executed"}
