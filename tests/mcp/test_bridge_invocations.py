"""A governed call through the bridge, against a scripted hub: a fresh invocation_id in the
session's run, an unsettled answer shown with that id and never sent again, a lost answer
reported as unknown, a 401 answered by one refresh and the same call, a changed surface refreshed
and not re-sent."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import pytest
from bailinghub_mcp import wire
from bailinghub_mcp.auth import HubSession
from bailinghub_mcp.bridge import Bridge, BridgeError

from tests.mcp.scripted_hub import LOOKUP, REVISION, RUN_ID, ScriptedHub, signed_in_store

INVOKE = ("POST", "/agent-api/v1/tool-invocations")


@pytest.fixture
def hub():
    scripted = ScriptedHub()
    yield scripted
    scripted.close()


@pytest.fixture
def bridge(hub, tmp_path):
    session = HubSession(signed_in_store(tmp_path / "config", hub))
    yield Bridge(session)
    session.close()


def result(state: str, invocation_id: str, **extra) -> dict:
    return {"schema_version": "bailing.agent-tool-invocation.v1", "invocation_id": invocation_id, "route": "shop",
            "tool": "issue_refund", "state": state, "ok": state == "executed", "auto_retry_allowed": False,
            "text": extra.pop("text", ""), **extra}


class EchoInvocation:
    """Answers a tool invocation with the id it was sent, in the given state."""

    def __init__(self, hub: ScriptedHub, state: str, **extra) -> None:
        self.hub, self.state, self.extra = hub, state, extra

    def install(self) -> None:
        original = self.hub.answer

        def answer(method, path, body):
            if (method, path) == INVOKE and not self.hub.script.get(INVOKE):
                return 200, result(self.state, body["invocation_id"], **self.extra)
            return original(method, path, body)

        self.hub.answer = answer


def test_a_call_is_sent_once_with_a_fresh_invocation_id_in_the_sessions_run(hub, bridge):
    EchoInvocation(hub, "executed", text='{"sku": "SKU-1"}').install()
    bridge.governed_tools()

    first = bridge.invoke("lookup_product", {"query": "cup"})
    second = bridge.invoke("lookup_product", {"query": "cup"})

    bodies = hub.sent(*INVOKE)
    assert len(bodies) == 2
    assert {key: bodies[0][key] for key in ("route", "capability_revision", "agent_run_id", "tool", "arguments")} == {
        "route": "shop", "capability_revision": REVISION, "agent_run_id": RUN_ID, "tool": "lookup_product",
        "arguments": {"query": "cup"}}
    assert all(re.fullmatch(r"[0-9a-f]{64}", body["invocation_id"]) for body in bodies)
    assert bodies[0]["invocation_id"] != bodies[1]["invocation_id"]
    assert first.is_error is False and 'Result (untrusted data):\n{"sku": "SKU-1"}' in first.text
    assert second.data["invocation_id"] == bodies[1]["invocation_id"]


@pytest.mark.parametrize("state", ["awaiting_approval", "in_progress", "reconciliation_required"])
def test_an_unsettled_answer_is_shown_with_its_invocation_id_and_not_sent_again(hub, bridge, state):
    EchoInvocation(hub, state, approval_id="ap-1" if state == "awaiting_approval" else None).install()
    bridge.governed_tools()

    outcome = bridge.invoke("issue_refund", {"order_id": "SO-1"})

    (body,) = hub.sent(*INVOKE)
    assert outcome.is_error is False
    assert outcome.data["state"] == state
    assert f"state: {state}; invocation_id: {body['invocation_id']}" in outcome.text
    assert "Do not" in outcome.text
    assert len(hub.sent(*INVOKE)) == 1


def test_a_lost_answer_is_reported_as_unknown_with_the_id_and_not_sent_again(hub, bridge, monkeypatch):
    monkeypatch.setattr(wire, "TIMEOUT_SECONDS", 0.5)
    bridge.session.client.timeout = wire.httpx.Timeout(0.5)
    hub.script[INVOKE] = [(2.0, 200, {})]
    bridge.governed_tools()

    outcome = bridge.invoke("issue_refund", {"order_id": "SO-1"})

    (body,) = hub.sent(*INVOKE)
    assert outcome.is_error is True
    assert outcome.data == {"error": "timeout", "message": outcome.data["message"],
                            "invocation_id": body["invocation_id"], "state": "unknown"}
    assert "Do not call the tool again" in outcome.text and body["invocation_id"] in outcome.text


def test_a_server_error_is_reported_with_the_id_to_inspect_and_not_sent_again(hub, bridge):
    hub.script[INVOKE] = [(500, {"error": "internal_error", "message": "Internal error."})]
    bridge.governed_tools()

    outcome = bridge.invoke("issue_refund", {"order_id": "SO-1"})

    (body,) = hub.sent(*INVOKE)
    assert outcome.is_error is True
    assert outcome.data == {"error": "internal_error", "status": 500, "message": "Internal error.",
                            "invocation_id": body["invocation_id"], "state": "unknown"}
    assert "Do not call the tool again" in outcome.text and body["invocation_id"] in outcome.text
    assert bridge.invocations[body["invocation_id"]] == {"tool": "issue_refund", "state": "unknown"}


@pytest.mark.parametrize(("status", "code"), [(404, "tool_not_found"), (503, "execution_paused"),
                                              (503, "TASK_UNAVAILABLE")])
def test_a_refusal_before_the_call_is_recorded_names_no_invocation(hub, bridge, status, code):
    hub.script[INVOKE] = [(status, {"error": code, "message": "Refused."})]
    bridge.governed_tools()

    outcome = bridge.invoke("issue_refund", {"order_id": "SO-1"})

    assert outcome.data == {"error": code, "status": status, "message": "Refused."}
    assert "Do not call" not in outcome.text
    assert bridge.invocations == {}


@pytest.mark.parametrize(("status", "code"), [(404, "tool_not_found"), (403, "route_not_allowed"),
                                              (400, "invalid_request"), (503, "execution_paused")])
def test_a_call_refused_before_it_was_recorded_is_not_in_the_runs_summary(hub, bridge, status, code):
    """The run's summary counts the calls the hub has: one it refused unrecorded is no invocation
    (the hub's memory read it as an omitted one, and it took a place of the route's max_tool_calls)."""
    EchoInvocation(hub, "executed").install()
    bridge.governed_tools()
    hub.script[INVOKE] = [(status, {"error": code, "message": "Refused."})]
    bridge.invoke("issue_refund", {"order_id": "SO-1"})
    bridge.invoke("lookup_product", {"query": "cup"})
    executed = hub.sent(*INVOKE)[1]["invocation_id"]

    assert bridge.run_calls == 1
    bridge.complete()

    (completion,) = hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete")
    assert json.loads(completion["content"]) == {
        "schema_version": "bailing.authorization-execution-summary.v1", "total_invocations": 1,
        "omitted_invocations": 0, "invocations": [{"invocation_id": executed, "tool": "lookup_product",
                                                   "last_known_state": "executed"}]}


def test_a_call_refused_as_the_runs_last_is_not_in_the_spent_runs_summary(hub, bridge):
    """The hub answers 200 rejected_before_dispatch, storing nothing, when the run has made its
    max_tool_calls (lowered since the bridge read it): the call goes on in a new turn's run, and the
    spent run's summary lists only the call the hub has."""
    bridge.governed_tools()
    original, answered = hub.answer, []

    def answer(method, path, body):
        if (method, path) != INVOKE:
            return original(method, path, body)
        answered.append(body["invocation_id"])
        if len(answered) == 2:
            return 200, result("rejected_before_dispatch", body["invocation_id"],
                               text="This run has made its 1 tool call, the route's limit. Nothing is stored.")
        return 200, result("executed", body["invocation_id"])

    hub.answer = answer
    bridge.invoke("lookup_product", {"query": "cup"})
    outcome = bridge.invoke("lookup_product", {"query": "mug"})

    assert outcome.data["state"] == "executed" and len(answered) == 3
    (completion, *_) = hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete")
    assert json.loads(completion["content"]) == {
        "schema_version": "bailing.authorization-execution-summary.v1", "total_invocations": 1,
        "omitted_invocations": 0, "invocations": [{"invocation_id": answered[0], "tool": "lookup_product",
                                                   "last_known_state": "executed"}]}
    assert answered[1] not in bridge.run_invocations and answered[2] in bridge.run_invocations


def test_a_401_refreshes_once_and_sends_the_same_invocation_again(hub, bridge):
    bridge.governed_tools()
    hub.script[INVOKE] = [(401, {"error": "unauthorized", "message": "Expired."})]
    EchoInvocation(hub, "executed").install()

    outcome = bridge.invoke("lookup_product", {"query": "cup"})

    first, again = hub.sent(*INVOKE)
    assert first == again
    assert [auth for m, p, _, auth in hub.requests if (m, p) == INVOKE] == ["Bearer bha_first",
                                                                           "Bearer bha_refreshed1"]
    assert hub.refreshes == 1 and outcome.data["state"] == "executed"


def test_a_changed_surface_refreshes_the_tools_and_sends_nothing_again(hub, bridge):
    bridge.governed_tools()
    hub.script[INVOKE] = [(409, {"error": "capability_changed", "message": "Changed."})]
    hub.script[("POST", "/agent-api/v1/workspaces/shop/capabilities/search")] = [
        (200, {"schema_version": "bailing.agent-capability-search.v1", "capability_revision": REVISION,
               "tools": [LOOKUP]})]
    hub.script[("GET", f"/agent-api/v1/tools/issue_refund?route=shop&capability_revision={REVISION}")] = [
        (404, {"error": "tool_not_found", "message": "Gone."})]

    outcome = bridge.invoke("issue_refund", {"order_id": "SO-1"})

    assert outcome.is_error is True and outcome.data == {"error": "capability_changed"}
    assert "nothing was sent" in outcome.text
    assert len(hub.sent(*INVOKE)) == 1
    assert list(bridge.tools) == ["lookup_product"]


def test_a_tool_not_loaded_is_refused_before_anything_is_sent(hub, bridge):
    bridge.governed_tools()
    with pytest.raises(Exception, match="capability_search"):
        bridge.invoke("drop_database", {})
    assert hub.sent(*INVOKE) == []


@pytest.mark.parametrize("follow_up", ["resume", "inspect"])
def test_an_invocation_id_with_a_trailing_newline_is_refused_before_anything_is_sent(hub, bridge, follow_up):
    # `$` also matches before a final newline: the id would have gone into the URL's path.
    with pytest.raises(BridgeError, match="invocation_id"):
        getattr(bridge, follow_up)({"invocation_id": "a" * 64 + "\n"})
    assert [path for _, path, _, _ in hub.requests if "tool-invocations" in path] == []


def test_a_tool_name_with_a_trailing_newline_is_not_loaded(hub, bridge):
    hub.script[("POST", "/agent-api/v1/workspaces/shop/capabilities/search")] = [
        (200, {"schema_version": "bailing.agent-capability-search.v1", "capability_revision": REVISION,
               "tools": [{**LOOKUP, "name": "lookup_product\n"}]})]

    bridge.capability_search({"query": "product"})

    assert "lookup_product\n" not in bridge.tools


def test_a_new_capability_revision_reloads_the_tool_list(hub, bridge):
    assert [tool["name"] for tool in bridge.governed_tools()] == ["lookup_product", "issue_refund"]
    changed = "b" * 64
    original = hub.answer

    def answer(method, path, body):
        status, payload = original(method, path, body)
        if path.endswith("/bootstrap"):
            payload = {**payload, "capabilities": {"revision": changed}}
        return status, payload

    hub.answer = answer
    hub.script[("POST", "/agent-api/v1/workspaces/shop/capabilities/search")] = [
        (200, {"schema_version": "bailing.agent-capability-search.v1", "capability_revision": changed,
               "tools": [{**LOOKUP, "description": "Find a product by name or SKU."}]})]
    hub.script[("GET", f"/agent-api/v1/tools/issue_refund?route=shop&capability_revision={changed}")] = [
        (404, {"error": "tool_not_found", "message": "Gone."})]

    tools = bridge.governed_tools()

    assert [(tool["name"], tool["description"]) for tool in tools] == [("lookup_product",
                                                                        "Find a product by name or SKU.")]
    assert bridge.revision == changed
    (search,) = hub.sent("POST", "/agent-api/v1/workspaces/shop/capabilities/search")
    assert search == {"run_id": RUN_ID}


def test_a_run_the_hub_no_longer_knows_gives_way_to_a_new_turn_and_the_call_goes_there(hub, bridge):
    """After a new sign-in (another session) the bridge kept the old session's run: every tool call
    and capability search then failed for good with run_not_found."""
    hub.script[INVOKE] = [(404, {"error": "run_not_found", "message": "No such run for this session."})]
    EchoInvocation(hub, "executed", text='{"sku": "SKU-1"}').install()
    bridge.governed_tools()

    outcome = bridge.invoke("lookup_product", {"query": "cup"})

    first, second = hub.sent(*INVOKE)
    turns = hub.sent("POST", "/agent-api/v1/workspaces/shop/turns")
    assert [turn["client_turn_id"] for turn in turns] == ["session", "session-2"]
    assert first["invocation_id"] != second["invocation_id"]
    assert outcome.is_error is False and outcome.data["state"] == "executed"
    assert hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete") == []  # nothing to complete there


def test_a_call_that_met_a_run_another_call_has_left_keeps_the_sessions_newer_run(hub, bridge):
    """Calls at once that all met one spent run rotated one after the other, each leaving the run
    the one before had just opened: 12 calls left 10 runs open on the hub for good."""
    bridge.governed_tools()
    assert bridge.ensure_run() == RUN_ID
    bridge.run_id = "run-opened-by-another-call"  # another call left RUN_ID meanwhile

    bridge.rotate_run(spent=True, run_id=RUN_ID)
    bridge.rotate_run(spent=False, run_id=RUN_ID)

    assert bridge.run_id == "run-opened-by-another-call"
    assert hub.sent("POST", "/agent-api/v1/runs/run-opened-by-another-call/complete") == []
    bridge.rotate_run(spent=True, run_id="run-opened-by-another-call")  # the current run is left, completed
    assert bridge.run_id is None
    assert len(hub.sent("POST", "/agent-api/v1/runs/run-opened-by-another-call/complete")) == 1


def test_a_spent_run_left_while_a_call_of_its_is_in_flight_is_completed_when_that_call_answers(hub, bridge):
    """Completed at once, the calls still in flight met "run not active" (8 of 12 calls at once
    failed so); a run must wait for them, and then be completed, once."""
    bridge.governed_tools()
    bridge.ensure_run()
    bridge.in_flight[RUN_ID] += 1  # a call sent under it, not answered yet

    bridge.rotate_run(spent=True, run_id=RUN_ID)
    assert bridge.run_id is None and hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete") == []

    bridge._answered(RUN_ID)
    assert len(hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete")) == 1
    bridge.complete()  # the session's end: nothing left to complete
    assert len(hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete")) == 1


def test_a_left_runs_completion_the_hub_refuses_never_becomes_the_answer_of_the_call_that_was_last(hub, bridge):
    """Raised from under the call, it replaced the call's own answer: a call that ran read as
    failed, and a model would send it again."""
    hub.script[("POST", f"/agent-api/v1/runs/{RUN_ID}/complete")] = [(503, {"error": "service_unavailable",
                                                                              "message": "Down."})]
    bridge.governed_tools()
    bridge.ensure_run()
    bridge.in_flight[RUN_ID] += 1
    bridge.rotate_run(spent=True, run_id=RUN_ID)

    bridge._answered(RUN_ID)  # does not raise

    assert RUN_ID in bridge.leaving  # tried again at the session's end, which succeeds
    bridge.complete()
    assert len(hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete")) == 2 and bridge.leaving == {}
    with pytest.raises(BridgeError, match="session has ended"):
        bridge.ensure_run()  # a call still in flight sent again opens no run nothing would complete


def test_a_tool_list_taken_while_the_hub_is_down_counts_as_changed_until_one_succeeds(hub, bridge):
    """The host got the built-in tools alone with no sign, and was never told when the workspace's
    tools came back."""
    hub.script[("GET", "/agent-api/v1/workspaces/shop/bootstrap")] = [
        (503, {"error": "service_unavailable", "message": "Down."})]

    assert bridge.listed_tools() == []
    assert bridge.tools_changed is True  # the next call that reaches the hub says "list again"

    names = [tool["name"] for tool in bridge.listed_tools()]
    assert names == ["lookup_product", "issue_refund"]
    assert bridge.tools_changed is False


@pytest.mark.parametrize("answer", [(503, {"error": "agent_auth_unavailable", "message": "Down."}), (502, {})],
                         ids=["hub_error", "wire_error"])
def test_a_refresh_that_fails_before_the_call_is_sent_names_no_invocation(hub, bridge, answer):
    """The access token is refreshed before the call goes out; a refresh the hub failed was shown
    as the call's own failure: "may or may not have been recorded, do not call again", with an
    invocation id the hub never saw, listed as reconciliation_required when the run completed."""
    bridge.governed_tools()
    expired = replace(bridge.session.credentials, access_expires_at=time.time())
    bridge.session.store.save(expired)
    bridge.session.credentials = expired
    hub.script[("POST", "/agent-auth/v1/token")] = [answer]

    outcome = bridge.invoke("issue_refund", {"order_id": "SO-1"})

    assert hub.sent(*INVOKE) == []
    assert outcome.is_error is True and outcome.data["error"] == "refresh_failed"
    assert "invocation_id" not in outcome.data and "Do not call" not in outcome.text
    assert bridge.invocations == {}


def test_calls_refused_before_they_were_sent_do_not_end_the_turn_early(hub, bridge):
    """The hub does not count a call it refused before sending it (bad arguments) toward the
    route's max_tool_calls; the bridge did, and started a new turn after two typos."""
    original, invoked = hub.answer, []
    refused = "The arguments do not fit the tool's input_schema. Nothing was sent to the business system."

    def answer(method, path, body):
        if path.endswith("/turns"):
            status, turn = original(method, path, body)
            return status, {**turn, "context": {"governance": {"max_tool_calls": 2}}}
        if (method, path) == INVOKE:
            invoked.append(body["invocation_id"])
            if len(invoked) <= 2:
                return 200, result("rejected_before_dispatch", body["invocation_id"], text=refused)
            return 200, result("executed", body["invocation_id"])
        return original(method, path, body)
    hub.answer = answer
    bridge.governed_tools()

    outcomes = [bridge.invoke("lookup_product", {"query": query}) for query in (1, 2, "cup", "mug", "pot")]

    assert [outcome.data["state"] for outcome in outcomes] == ["rejected_before_dispatch"] * 2 + ["executed"] * 3
    turns = hub.sent("POST", "/agent-api/v1/workspaces/shop/turns")
    assert [turn["client_turn_id"] for turn in turns] == ["session", "session-2"]  # after two calls made
    assert len(hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete")) == 1


def test_a_call_refused_for_now_still_counts_toward_the_turn(hub, bridge):
    """A rate limit's refusal (auto_retry_allowed) is a call the hub counts: the bridge keeps it
    counted, so the third call of a two-call turn goes to a new turn without a refused request."""
    original = hub.answer

    def answer(method, path, body):
        if path.endswith("/turns"):
            status, turn = original(method, path, body)
            return status, {**turn, "context": {"governance": {"max_tool_calls": 2}}}
        if (method, path) == INVOKE:
            limited = len(hub.sent(*INVOKE)) == 1
            return 200, result("rejected_before_dispatch" if limited else "executed", body["invocation_id"],
                               auto_retry_allowed=limited, text="Rate limited." if limited else "")
        return original(method, path, body)
    hub.answer = answer
    bridge.governed_tools()

    for query in ("cup", "mug", "pot"):
        bridge.invoke("lookup_product", {"query": query})

    turns = hub.sent("POST", "/agent-api/v1/workspaces/shop/turns")
    assert [turn["client_turn_id"] for turn in turns] == ["session", "session-2"]
    assert len(hub.sent(*INVOKE)) == 3
