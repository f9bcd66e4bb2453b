import json
import re
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.agent_auth.services import session_revoke
from apps.ledger.models import Conversation, Message, Run
from apps.routes.selectors import route_profile
from apps.routes.services import route_update
from apps.tools.surface import route_capability_summary
from tests.agent_auth.helpers import bearer, session_for
from tests.ledger.helpers import complete_run, ledger_counts, open_turn, post_json, turn_body, turn_url

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def test_a_turn_answers_the_frozen_context(api_client, issued, route):
    response = open_turn(api_client, issued.access_token, route.key,
                         page_context={"url": "/staff", "title": "员工"}, renderers=["markdown", "bailing-form.v1"])
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    run = Run.objects.get()
    conversation = Conversation.objects.get()
    assert body == {
        "schema_version": "bailing.agent-turn-context.v1",
        "run_id": str(run.pk),
        "profile_revision": route_profile(route=route)["revision"],
        "capability_revision": route_capability_summary(route=route, session=issued.session)["revision"],
        "context": {
            "instructions": "【路由系统规则】\n你是门店助手。\n\n【本地 Agent 补充规则】\n只在店员要求时调用写工具。",
            "page_context": {"url": "/staff", "title": "员工"},
            "renderers": ["markdown", "bailing-form.v1"],
            "memory": {"summary": None, "recent": [], "notes": [], "project_notes": []},
            "memory_refs": [{"thread_id": str(conversation.pk), "summary_upto_id": 0, "prior_messages": 0}],
            "knowledge": [],
            "knowledge_refs": [],
            "governance": {
                "planner": "local_agent", "execution": "bailinghub_governed", "authorization": "server_revalidated",
                "knowledge_trust": "reference_only", "tool_results_trust": "untrusted_data",
                "hidden_reasoning_sync": False, "max_tool_calls": 5, "permission": "full",
            },
        },
        "active_tools": [],
    }
    assert HEX64.match(body["profile_revision"]) and HEX64.match(body["capability_revision"])
    assert uuid.UUID(body["run_id"])


def test_a_turn_freezes_a_run_and_appends_the_user_message(api_client, issued, route):
    open_turn(api_client, issued.access_token, route.key)
    run = Run.objects.get()
    assert run.state == Run.State.CONTEXT_READY
    assert (run.session_id, run.route_id, run.client_turn_id, run.user_message_id) == (
        issued.session.pk, route.pk, "turn-1", "message-1")
    assert HEX64.match(run.request_hash)
    assert run.context_ready_at is not None and run.prepare_ms is not None
    assert run.context_bytes == len(run.context_snapshot.encode())
    assert list(Message.objects.values_list("sequence", "role", "client_message_id", "content")) == [
        (1, "user", "message-1", "帮我查一下员工 Ada (1)")]
    conversation = Conversation.objects.get()
    assert (conversation.client_conversation_id, conversation.on_behalf_of, conversation.principal_id,
            conversation.message_count) == ("local-conversation-1", "ada@example.com", "u-1001", 1)


def test_the_same_turn_again_replays_the_same_bytes(api_client, issued, route):
    first = open_turn(api_client, issued.access_token, route.key)
    again = open_turn(api_client, issued.access_token, route.key)
    assert again.status_code == 200
    assert again.content == first.content
    assert ledger_counts() == {"Conversation": 1, "Message": 1, "Run": 1, "MemoryNote": 0}


def test_a_turn_is_sent_as_measured_whatever_the_accept_header(api_client, issued, route):
    first = open_turn(api_client, issued.access_token, route.key)
    again = post_json(api_client, turn_url(route.key), turn_body(), issued.access_token,
                      HTTP_ACCEPT="application/json; indent=8")
    assert again.status_code == 200
    assert again.content == first.content


def test_a_replay_after_completion_answers_the_original_context(api_client, issued, route):
    first = open_turn(api_client, issued.access_token, route.key)
    complete_run(api_client, issued.access_token, first.json()["run_id"])
    route_update(route=route, system_prompt="已经改过的提示。")
    again = open_turn(api_client, issued.access_token, route.key)
    assert again.content == first.content


def test_a_replay_is_the_same_even_when_the_keys_are_sent_in_another_order(api_client, issued, route):
    body = turn_body(page_context={"b": 1, "a": 2})
    first = post_json(api_client, turn_url(route.key), body, issued.access_token)
    reordered = dict(reversed(list(body.items())))
    reordered["page_context"] = {"a": 2, "b": 1}
    again = post_json(api_client, turn_url(route.key), reordered, issued.access_token)
    assert again.status_code == 200
    assert again.content == first.content


def _conflict(response):
    assert response.status_code == 409
    assert response.json()["error"] == "turn_conflict"


def test_the_same_turn_id_with_other_input_is_a_conflict(api_client, issued, route):
    open_turn(api_client, issued.access_token, route.key)
    before = ledger_counts()
    _conflict(open_turn(api_client, issued.access_token, route.key, user_input="另一个问题"))
    assert ledger_counts() == before


def test_the_same_turn_id_with_another_user_message_id_is_a_conflict(api_client, issued, route):
    open_turn(api_client, issued.access_token, route.key)
    _conflict(open_turn(api_client, issued.access_token, route.key, user_message_id="message-9"))
    assert Run.objects.count() == 1


def test_the_same_user_message_id_under_another_turn_is_a_conflict(api_client, issued, route):
    open_turn(api_client, issued.access_token, route.key)
    _conflict(open_turn(api_client, issued.access_token, route.key, client_turn_id="turn-9"))
    assert Run.objects.count() == 1


def test_a_different_page_context_is_a_conflict(api_client, issued, route):
    open_turn(api_client, issued.access_token, route.key, page_context={"url": "/staff"})
    _conflict(open_turn(api_client, issued.access_token, route.key, page_context={"url": "/orders"}))


def test_adding_renderers_is_a_conflict(api_client, issued, route):
    open_turn(api_client, issued.access_token, route.key)
    _conflict(open_turn(api_client, issued.access_token, route.key, renderers=["markdown"]))


def test_sending_knowledge_delivery_inline_explicitly_is_the_same_request(api_client, issued, route):
    first = open_turn(api_client, issued.access_token, route.key)
    again = open_turn(api_client, issued.access_token, route.key, knowledge_delivery="inline")
    assert again.content == first.content


def test_turn_keys_are_per_conversation(api_client, issued, route):
    first = open_turn(api_client, issued.access_token, route.key)
    other = open_turn(api_client, issued.access_token, route.key, client_conversation_id="local-conversation-2")
    assert other.status_code == 200
    assert other.json()["run_id"] != first.json()["run_id"]
    assert Conversation.objects.count() == 2


def test_turn_keys_are_per_route(api_client, issued, route, hr_route):
    first = open_turn(api_client, issued.access_token, route.key)
    other = open_turn(api_client, issued.access_token, hr_route.key)
    assert other.status_code == 200
    assert other.json()["run_id"] != first.json()["run_id"]


def test_turn_keys_are_per_session(api_client, issued, agent_client, route):
    first = open_turn(api_client, issued.access_token, route.key)
    second_session = session_for(agent_client)
    other = open_turn(api_client, second_session.access_token, route.key)
    assert other.status_code == 200
    assert other.json()["run_id"] != first.json()["run_id"]
    assert other.json()["context"]["memory"]["recent"] == []


def test_memory_is_read_before_the_user_message_is_appended(api_client, issued, route):
    first = open_turn(api_client, issued.access_token, route.key)
    complete_run(api_client, issued.access_token, first.json()["run_id"])
    second = open_turn(api_client, issued.access_token, route.key, 2).json()
    assert second["context"]["memory"]["recent"] == [
        {"role": "user", "kind": "message", "content": "帮我查一下员工 Ada (1)", "truncated": False},
        {"role": "assistant", "kind": "message", "content": "已完成 1。", "truncated": False},
    ]
    assert second["context"]["memory_refs"][0]["prior_messages"] == 2
    assert Conversation.objects.get().message_count == 3


def test_a_turn_while_the_previous_one_is_open_sees_its_user_message(api_client, issued, route):
    open_turn(api_client, issued.access_token, route.key)
    second = open_turn(api_client, issued.access_token, route.key, 2).json()
    assert [entry["content"] for entry in second["context"]["memory"]["recent"]] == ["帮我查一下员工 Ada (1)"]


def test_knowledge_delivery_on_demand_keeps_bodies_out_and_says_so(api_client, issued, route):
    # More in tests/runtime/test_knowledge_turns.py.
    response = open_turn(api_client, issued.access_token, route.key, knowledge_delivery="on_demand")
    assert response.status_code == 200
    context = response.json()["context"]
    assert (context["knowledge"], context["knowledge_refs"]) == ([], [])
    assert (context["knowledge_delivery"]["mode"], context["knowledge_delivery"]["status"]) == ("on_demand", "disabled")


def test_a_turn_needs_the_agent_bearer(api_client, route):
    response = api_client.post(turn_url(route.key), turn_body(), format="json")
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert Run.objects.count() == 0


def test_a_revoked_session_cannot_open_a_turn(api_client, issued, route):
    session_revoke(session=issued.session, revoked_by="agent")
    assert open_turn(api_client, issued.access_token, route.key).status_code == 401
    assert Run.objects.count() == 0


def test_a_turn_on_a_route_outside_the_grant_is_route_unavailable(api_client, agent_client, route):
    issued = session_for(agent_client, granted=["hr-helpdesk"])
    response = open_turn(api_client, issued.access_token, route.key)
    assert response.status_code == 404
    assert response.json()["error"] == "route_unavailable"
    assert Run.objects.count() == 0


def test_a_turn_on_a_malformed_route_key_is_invalid_route(api_client, issued):
    response = open_turn(api_client, issued.access_token, "Bad_Route")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_route"


def test_a_turn_needs_the_runtime_switch(api_client, issued, route):
    route_update(route=route, agent_client_enabled=False)
    response = open_turn(api_client, issued.access_token, route.key)
    assert response.status_code == 403
    assert response.json()["error"] == "agent_client_disabled"
    assert ledger_counts() == {"Conversation": 0, "Message": 0, "Run": 0, "MemoryNote": 0}


def test_a_turn_has_no_trailing_slash_redirect(api_client, issued, route):
    response = post_json(api_client, turn_url(route.key) + "/", turn_body(), issued.access_token)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_get_on_turns_is_405(api_client, issued, route):
    response = api_client.get(turn_url(route.key), **bearer(issued.access_token))
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


# A line separator is three bytes in UTF-8 and six as the answer sends it (escaped).
@pytest.mark.parametrize("prompt", ["规" * 70_000, "规\u2028" * 39_000], ids=["hanzi", "line separators"])
def test_a_huge_system_prompt_is_cut_to_keep_the_context_within_64_kib(api_client, issued, route, prompt):
    route_update(route=route, system_prompt=prompt)
    response = open_turn(api_client, issued.access_token, route.key)
    context = response.json()["context"]
    sent = re.search(rb'"context":(\{.*\}),"active_tools"', response.content).group(1)
    assert json.loads(sent) == context
    assert 63 * 1024 < len(sent) <= 64 * 1024
    assert Run.objects.get().context_bytes == len(sent)
    assert context["instructions_truncated"] is True
    assert context["instructions"].startswith("【路由系统规则】\n规")


def test_an_ordinary_turn_makes_a_bounded_number_of_queries(api_client, issued, route):
    open_turn(api_client, issued.access_token, route.key)
    with CaptureQueriesContext(connection) as first:
        open_turn(api_client, issued.access_token, route.key, 2)
    for n in range(3, 8):
        open_turn(api_client, issued.access_token, route.key, n)
    with CaptureQueriesContext(connection) as later:
        open_turn(api_client, issued.access_token, route.key, 8)
    assert len(later) == len(first)
