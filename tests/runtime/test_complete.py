import json

import pytest

from apps.ledger.models import Message, Run
from apps.routes.services import route_update
from tests.agent_auth.helpers import session_for
from tests.core.hostile import NON_CANONICAL_UUID_FORMS, non_canonical_uuid
from tests.ledger.helpers import (
    complete_run,
    complete_url,
    completion_body,
    ledger_counts,
    open_turn,
    post_json,
)

USAGE = {"input_tokens": 120, "cached_input_tokens": 80, "output_tokens": 30, "total_tokens": 150, "tool_calls": 1}


@pytest.fixture
def run_id(api_client, issued, route):
    return open_turn(api_client, issued.access_token, route.key).json()["run_id"]


def _full(**overrides):
    fields = {"model": "optional-model-name", "runtime": "optional-runtime-name", "usage": dict(USAGE)}
    return completion_body(**{**fields, **overrides})


def test_completing_a_run_answers_its_status(api_client, issued, run_id):
    response = post_json(api_client, complete_url(run_id), _full(), issued.access_token)
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert response.json() == {"schema_version": "bailing.agent-run-completion.v1", "run_id": run_id,
                               "status": "completed"}


def test_completion_records_the_outcome_and_the_visible_message(api_client, issued, run_id):
    post_json(api_client, complete_url(run_id), _full(), issued.access_token)
    run = Run.objects.get()
    assert (run.state, run.assistant_message_id, run.model, run.runtime, run.usage) == (
        "completed", "assistant-message-1", "optional-model-name", "optional-runtime-name", USAGE)
    assert run.completed_at is not None and len(run.completion_fingerprint) == 64
    assert list(Message.objects.order_by("sequence").values_list("sequence", "role", "client_message_id", "content",
                                                                  "kind")) == [
        (1, "user", "message-1", "帮我查一下员工 Ada (1)", "text"),
        (2, "assistant", "assistant-message-1", "已完成 1。", "text"),
    ]


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_a_run_may_end_failed_or_cancelled(api_client, issued, run_id, status):
    response = complete_run(api_client, issued.access_token, run_id, status=status, content="")
    assert response.json()["status"] == status
    assert Run.objects.get().state == status


def test_content_is_stored_exactly_as_sent(api_client, issued, run_id):
    content = "  第一行\r\n\t第二行  \n" + "答" * 63_980
    complete_run(api_client, issued.access_token, run_id, content=content)
    assert Message.objects.get(role="assistant").content == content


def test_content_may_be_left_out(api_client, issued, run_id):
    response = post_json(api_client, complete_url(run_id),
                         {"assistant_message_id": "assistant-message-1", "status": "cancelled"}, issued.access_token)
    assert response.status_code == 200
    assert Message.objects.get(role="assistant").content == ""


def test_the_same_completion_again_is_replayed(api_client, issued, run_id):
    first = post_json(api_client, complete_url(run_id), _full(), issued.access_token)
    before = ledger_counts()
    again = post_json(api_client, complete_url(run_id), _full(), issued.access_token)
    assert again.status_code == 200
    assert again.content == first.content
    assert ledger_counts() == before


def test_a_replay_with_the_usage_keys_in_another_order_is_the_same(api_client, issued, run_id):
    post_json(api_client, complete_url(run_id), _full(), issued.access_token)
    again = post_json(api_client, complete_url(run_id), _full(usage=dict(reversed(USAGE.items()))),
                      issued.access_token)
    assert again.status_code == 200


@pytest.mark.parametrize("change", [
    {"assistant_message_id": "assistant-message-2"},
    {"status": "failed"},
    {"content": "已完成 1。 "},
    {"model": "another-model"},
    {"model": ...},
    {"runtime": "another-runtime"},
    {"usage": {**USAGE, "output_tokens": 31}},
    {"usage": ...},
])
def test_any_change_after_completion_is_a_conflict(api_client, issued, run_id, change):
    post_json(api_client, complete_url(run_id), _full(), issued.access_token)
    run_before = Run.objects.values().get()
    counts = ledger_counts()
    response = post_json(api_client, complete_url(run_id), _full(**change), issued.access_token)
    assert response.status_code == 409
    assert response.json()["error"] == "completion_conflict"
    assert Run.objects.values().get() == run_before
    assert ledger_counts() == counts


def test_an_assistant_message_id_used_by_another_run_is_a_conflict(api_client, issued, route, run_id):
    complete_run(api_client, issued.access_token, run_id)
    second = open_turn(api_client, issued.access_token, route.key, 2).json()["run_id"]
    response = complete_run(api_client, issued.access_token, second, 1)
    assert response.status_code == 409
    assert response.json()["error"] == "completion_conflict"
    assert Run.objects.get(pk=second).state == "context_ready"
    assert Message.objects.filter(role="assistant").count() == 1


def test_another_sessions_run_is_not_found(api_client, agent_client, run_id):
    other = session_for(agent_client)
    response = complete_run(api_client, other.access_token, run_id)
    assert response.status_code == 404
    assert response.json()["error"] == "run_not_found"
    assert Run.objects.get().state == "context_ready"


@pytest.mark.parametrize("run_id", ["0f9e8d7c-6b5a-4c3d-8e2f-1a0b9c8d7e6f", "not-a-uuid", "1"])
def test_an_unknown_run_is_not_found(api_client, issued, run_id):
    response = complete_run(api_client, issued.access_token, run_id)
    assert response.status_code == 404
    assert response.json()["error"] == "run_not_found"


@pytest.mark.parametrize("form", NON_CANONICAL_UUID_FORMS)
def test_a_run_id_in_another_spelling_is_not_found(api_client, issued, run_id, form):
    """§6: run_id is a UUID — the 8-4-4-4-12 form; braces, urn:uuid: or moved dashes name no run."""
    response = complete_run(api_client, issued.access_token, non_canonical_uuid(run_id, form))
    assert (response.status_code, response.json()["error"]) == (404, "run_not_found")
    run = Run.objects.get()
    assert (run.state, run.completion_fingerprint) == ("context_ready", "")
    assert Message.objects.filter(role="assistant").count() == 0


def test_a_run_id_in_upper_case_is_the_same_run(api_client, issued, run_id):
    response = complete_run(api_client, issued.access_token, run_id.upper())
    assert (response.status_code, response.json()["run_id"]) == (200, run_id)


def test_completion_needs_the_agent_bearer(api_client, run_id):
    response = api_client.post(complete_url(run_id), completion_body(), format="json")
    assert response.status_code == 401
    assert Run.objects.get().state == "context_ready"


def test_completion_rechecks_the_route(api_client, issued, route, run_id):
    route_update(route=route, agent_client_enabled=False)
    response = complete_run(api_client, issued.access_token, run_id)
    assert response.status_code == 403
    assert response.json()["error"] == "agent_client_disabled"
    assert Run.objects.get().state == "context_ready"


def _refused(response, field):
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid_request"
    assert list(response.json()["fields"]) == [field]
    run = Run.objects.get()
    assert (run.state, run.completion_fingerprint) == ("context_ready", "")
    assert Message.objects.filter(role="assistant").count() == 0


@pytest.mark.parametrize("raw", ['{"status": "completed"', '{"status": NaN}', '{"a": 1, "a": 2}'])
def test_a_body_that_is_not_json_is_invalid_request_as_on_the_tool_endpoints(api_client, issued, run_id, raw):
    response = post_json(api_client, complete_url(run_id), raw, issued.access_token)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert response["Cache-Control"] == "no-store"
    run = Run.objects.get()
    assert (run.state, run.completion_fingerprint) == ("context_ready", "")
    assert Message.objects.filter(role="assistant").count() == 0


@pytest.mark.parametrize("field", ["reasoning", "hidden_reasoning", "reasoning_content", "thinking", "extra"])
def test_hidden_reasoning_or_any_unknown_field_is_refused(api_client, issued, run_id, field):
    _refused(complete_run(api_client, issued.access_token, run_id, **{field: "chain of thought"}), field)


@pytest.mark.parametrize("field", ["assistant_message_id", "status"])
def test_required_fields(api_client, issued, run_id, field):
    _refused(complete_run(api_client, issued.access_token, run_id, **{field: ...}), field)


@pytest.mark.parametrize("value", ["", "x" * 192, "a\nb", 5, None])
def test_assistant_message_id_is_1_to_191_printable_characters(api_client, issued, run_id, value):
    _refused(complete_run(api_client, issued.access_token, run_id, assistant_message_id=value), "assistant_message_id")


@pytest.mark.parametrize("value", ["done", "context_ready", "", None])
def test_status_is_completed_failed_or_cancelled(api_client, issued, run_id, value):
    _refused(complete_run(api_client, issued.access_token, run_id, status=value), "status")


def test_content_over_64000_characters_is_refused(api_client, issued, run_id):
    _refused(complete_run(api_client, issued.access_token, run_id, content="答" * 64_001), "content")


@pytest.mark.parametrize("field", ["content", "model", "runtime"])
@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f", "\x85"])
def test_control_characters_are_refused_not_normalised(api_client, issued, run_id, field, char):
    _refused(complete_run(api_client, issued.access_token, run_id, **{field: f"a{char}b"}), field)


def test_a_lone_surrogate_in_content_is_refused(api_client, issued, run_id):
    body = json.dumps(completion_body(), ensure_ascii=True).replace('"content": "', '"content": "\\udc00')
    _refused(post_json(api_client, complete_url(run_id), body, issued.access_token), "content")


@pytest.mark.parametrize("field", ["model", "runtime"])
def test_model_and_runtime_are_at_most_191_characters(api_client, issued, run_id, field):
    assert complete_run(api_client, issued.access_token, run_id, **{field: "m" * 192}).status_code == 400
    assert complete_run(api_client, issued.access_token, run_id, **{field: "m" * 191}).status_code == 200


@pytest.mark.parametrize("usage", [
    {"reasoning_tokens": 5},
    {"input_tokens": -1},
    {"input_tokens": 1.5},
    {"input_tokens": True},
    {"input_tokens": "12"},
    {"input_tokens": 2**53},
    [1, 2],
    "120",
])
def test_usage_is_known_non_negative_integers(api_client, issued, run_id, usage):
    response = complete_run(api_client, issued.access_token, run_id, usage=usage)
    assert response.status_code == 400
    assert all(name.startswith("usage") for name in response.json()["fields"])
    assert Run.objects.get().state == "context_ready"


def test_a_completion_body_over_512_kib_is_413(api_client, issued, run_id):
    body = json.dumps(completion_body(content="a" * (512 * 1024)))
    response = post_json(api_client, complete_url(run_id), body, issued.access_token)
    assert response.status_code == 413
    assert response.json()["max_bytes"] == 512 * 1024
    assert Run.objects.get().state == "context_ready"


def test_an_execution_summary_in_the_answer_is_recognised_but_stored_verbatim(api_client, issued, run_id):
    content = json.dumps({"schema_version": "bailing.authorization-execution-summary.v1", "invocations": [],
                          "total_invocations": 0, "omitted_invocations": 0}, indent=2)
    complete_run(api_client, issued.access_token, run_id, content=content)
    message = Message.objects.get(role="assistant")
    assert (message.kind, message.content) == ("authorization_execution_summary", content)
