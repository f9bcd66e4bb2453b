"""Governed tools through an MCP session against the live hub and the demo shop, dispatched by a
real Celery worker: a read runs; a write that needs approval waits, is approved through the
builder API, and resume_invocation returns its result — executed once, never re-sent."""

from __future__ import annotations

import json

import anyio
import pytest

from apps.demo_business.models import Refund, RequestLogEntry
from apps.ledger.models import Message, Run
from apps.projects.tokens import operator_token_create
from apps.tools.models import Approval, Invocation
from tests.knowledge.helpers import wait_for
from tests.mcp.conftest import http_json
from tests.mcp.mcp_client import mcp_session, run_async, text_of
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"order_id": "SO-240002", "amount": 45.5, "reason": "Bottle arrived dented"}


async def settled(client, result, *, attempts: int = 5):
    """What a careful model does with `in_progress`: ask again for the same invocation, by its id."""
    for _ in range(attempts):
        if result.structured_content.get("state") != "in_progress":
            return result
        result = await client.call_tool("resume_invocation",
                                        {"invocation_id": result.structured_content["invocation_id"]})
    return result


@pytest.mark.parametrize("listed_first", [True, False], ids=["listed-first", "called-before-listing"])
def test_a_readonly_tool_runs_and_its_result_reaches_the_model(signed_in, celery_worker_session, listed_first):
    """A host may call a tool it knows before it lists tools (a raw JSON-RPC client): the call was
    "Unknown tool …" until tools/list had loaded the route's tools (agent-host journey audit)."""
    async def scenario():
        async with mcp_session(signed_in) as client:
            if listed_first:
                await client.list_tools()
            return await settled(client, await client.call_tool("lookup_product", {"query": "保温杯"}))

    result = run_async(scenario)

    assert result.is_error is False
    assert result.structured_content["state"] == "executed" and result.structured_content["ok"] is True
    assert "SKU-1003" in result.structured_content["text"] and "SKU-1003" in text_of(result)
    inv = Invocation.objects.get()
    assert (inv.tool_name, inv.invocation_id) == ("lookup_product", result.structured_content["invocation_id"])
    # The session's run closes with the calls it made, as the hub's execution summary.
    run = wait_for(lambda: Run.objects.filter(state=Run.State.COMPLETED).first(), timeout=20,
                   message="the session's run to complete")
    reply = Message.objects.filter(run=run, role="assistant").get()
    assert json.loads(reply.content) == {
        "schema_version": "bailing.authorization-execution-summary.v1", "total_invocations": 1,
        "omitted_invocations": 0, "invocations": [{"invocation_id": inv.invocation_id, "tool": "lookup_product",
                                                   "last_known_state": "executed"}]}


def test_a_write_waits_for_approval_and_resume_returns_its_result_once_approved(signed_in, workspace, hub_url,
                                                                               celery_worker_session):
    owner = MembershipFactory(project=workspace.project)
    _, operator_token = operator_token_create(user=owner.user, name="approver", scopes=["approvals:decide"])

    async def scenario():
        async with mcp_session(signed_in) as client:
            await client.list_tools()
            waiting = await client.call_tool("issue_refund", REFUND)
            approval_id = waiting.structured_content["approval_id"]
            before_decision = await anyio.to_thread.run_sync(Refund.objects.count)
            status, decided = await anyio.to_thread.run_sync(lambda: http_json(
                "POST", f"{hub_url}/api/v1/builder/approvals/{approval_id}/decision",
                {"decision_id": "mcp-test-1", "decision": "approved", "comment": "ok"}, token=operator_token))
            invocation_id = waiting.structured_content["invocation_id"]
            resumed = await settled(client, await client.call_tool("resume_invocation",
                                                                   {"invocation_id": invocation_id}))
            receipt = await client.call_tool("inspect_invocation", {"invocation_id": invocation_id})
            return waiting, before_decision, (status, decided), resumed, receipt

    waiting, before_decision, (status, decided), resumed, receipt = run_async(scenario)

    invocation_id = waiting.structured_content["invocation_id"]
    assert waiting.is_error is False and waiting.structured_content["state"] == "awaiting_approval"
    assert f"state: awaiting_approval; invocation_id: {invocation_id}" in text_of(waiting)
    assert "resume_invocation" in text_of(waiting)
    assert before_decision == 0
    assert status == 200, decided
    assert resumed.structured_content["state"] == "executed" and resumed.structured_content["ok"] is True
    assert resumed.structured_content["invocation_id"] == invocation_id
    assert receipt.structured_content["approval"]["status"] == "approved"
    assert receipt.structured_content["read_only"] is True
    assert Approval.objects.get().status == "approved"
    assert Invocation.objects.count() == 1
    refund = Refund.objects.get()
    assert (refund.order_id, float(refund.amount)) == ("SO-240002", 45.5)
    assert list(RequestLogEntry.objects.filter(path__endswith="/refunds")
                .values_list("outcome", flat=True)) == ["applied"]


def test_a_session_goes_on_in_a_new_turn_once_its_runs_tool_calls_are_spent(signed_in, workspace,
                                                                            celery_worker_session):
    """The bridge opened one turn for the whole MCP session, so the route's max_tool_calls (per
    run) ended every tool of a desktop host after five calls: "This run has made its 5 tool calls"."""
    type(workspace).objects.filter(pk=workspace.pk).update(max_tool_calls=2)

    async def scenario():
        async with mcp_session(signed_in) as client:
            await client.list_tools()
            return [await settled(client, await client.call_tool("lookup_product", {"query": "保温杯"}))
                    for _ in range(5)]

    results = run_async(scenario)

    assert [result.structured_content["state"] for result in results] == ["executed"] * 5
    assert Invocation.objects.count() == 5
    runs = list(Run.objects.order_by("created_at"))
    assert len(runs) == 3
    assert [Invocation.objects.filter(run=run).count() for run in runs] == [2, 2, 1]
    assert all(run.state == Run.State.COMPLETED for run in runs[:2])
    first_reply = json.loads(Message.objects.get(run=runs[0], role="assistant").content)
    assert first_reply["total_invocations"] == 2
    assert {call["invocation_id"] for call in first_reply["invocations"]} == set(
        Invocation.objects.filter(run=runs[0]).values_list("invocation_id", flat=True))
