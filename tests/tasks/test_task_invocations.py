"""Task metering on real invocations against a real signed business server and a real worker:
a shared write budget across sessions, bounded concurrency, pause, and receipts."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from apps.agent_auth.services import session_revoke
from apps.tasks.models import Task
from apps.tasks.services import MemberSpec, PolicySpec, task_block, task_control, task_create
from apps.tools.delivery import invocation_dispatch
from apps.tools.invocations import invocation_watchdog
from apps.tools.models import Approval, Invocation
from apps.tools.route_tools import route_tools_set
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.ledger.helpers import ledger_counts, open_turn
from tests.projects.factories import MembershipFactory
from tests.tools.invocation_helpers import ROUTE, new_id

pytest_plugins = ["tests.tools.invocation_fixtures"]

CONVERSATION = "local-conversation-1"


def _task(shop, sessions, *, tools=("stock_write", "item_read"), **policy):
    owner = MembershipFactory(project=shop.route.project, role="owner")
    members = [MemberSpec(session_id=str(s.pk), workspace=ROUTE, client_conversation_id=CONVERSATION,
                          allowed_tools=tools) for s in sessions]
    task, _ = task_create(project=shop.route.project, user=owner.user, request_id=new_id(), members=members,
                          policy=PolicySpec(**policy))
    return task, owner


def _bound_run(shop, token, task, n=2):
    binding = {"schema_version": "bailing.agent-task-binding.v1", "task_id": str(task.pk),
               "scope_hash": task.scope_hash}
    response = open_turn(APIClient(), token, ROUTE, n=n, task_binding=binding)
    assert response.status_code == 200, response.json()
    return response.json()["run_id"]


def _body(shop, run_id, tool="stock_write", arguments=None, invocation_id=None):
    return {"invocation_id": invocation_id or new_id(), "route": ROUTE, "capability_revision": shop.revision,
            "agent_run_id": run_id, "tool": tool, "arguments": arguments or {"sku": "TEA-1", "quantity": 1}}


def _post(token, body):
    return APIClient().generic("POST", "/agent-api/v1/tool-invocations", json.dumps(body),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_two_sessions_share_one_write_budget_and_never_exceed_its_concurrency(shop, dispatching):
    second = session_for(shop.session.client, principal={**PRINCIPAL, "id": "u-1002"})
    task, _ = _task(shop, [shop.session, second.session], max_write_calls=5, max_concurrent=2)
    runs = {shop.token: _bound_run(shop, shop.token, task), second.access_token: _bound_run(shop, second.access_token,
                                                                                          task)}
    shop.server.respond("/api/stock", delay=0.3, body=b'{"adjusted":1}')
    outcomes: list[str] = []
    refused_for_now: list[int] = []
    barrier = threading.Barrier(40)

    def agent(token: str) -> None:
        body = _body(shop, runs[token])
        try:
            barrier.wait()
            # An agent host retries a call refused for now, and one still in progress (a busy machine:
            # the answer did not come within the call's wait), with the same invocation_id.
            for _ in range(600):
                response = _post(token, body)
                answer = response.json()
                if answer.get("error") == "TASK_CONCURRENCY_EXHAUSTED":
                    refused_for_now.append(response.status_code)
                    time.sleep(0.05)
                    continue
                if answer.get("state") == "in_progress":
                    time.sleep(0.05)
                    continue
                outcomes.append(answer.get("state") or answer["error"])
                return
            outcomes.append("still refused or in progress after 600 tries")
        finally:
            connection.close()

    threads = [threading.Thread(target=agent, args=(token,)) for token in runs for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["TASK_WRITE_BUDGET_EXHAUSTED"] * 35 + ["executed"] * 5
    assert len(shop.server.requests_to("/api/stock")) == 5
    assert shop.server.max_in_flight <= 2
    assert set(refused_for_now) <= {429}
    task.refresh_from_db()
    assert (task.write_reserved, task.write_consumed, task.active_permits) == (0, 5, 0)


def test_a_paused_task_dispatches_nothing_until_resumed(shop, dispatching):
    task, owner = _task(shop, [shop.session], max_write_calls=3, max_concurrent=1)
    run_id = _bound_run(shop, shop.token, task)
    task_control(task=task, user=owner.user, request_id="p", expected_revision=1, action="pause")
    body = _body(shop, run_id)
    response = _post(shop.token, body)
    assert (response.status_code, response.json()["error"]) == (409, "TASK_PAUSED")
    assert shop.server.requests_to("/api/stock") == []
    task_control(task=task, user=owner.user, request_id="r", expected_revision=2, action="resume")
    assert _post(shop.token, body).json()["state"] == "executed"
    task.refresh_from_db()
    assert (task.write_consumed, task.active_permits) == (1, 0)


def test_an_expired_task_refuses_its_calls_and_turns_and_stores_nothing(shop):
    task, _ = _task(shop, [shop.session], max_write_calls=3, max_concurrent=1,
                    expires_at=timezone.now() + timedelta(hours=1))
    run_id = _bound_run(shop, shop.token, task)
    Task.objects.filter(pk=task.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    invocations, ledger = Invocation.objects.count(), ledger_counts()
    response = _post(shop.token, _body(shop, run_id))
    assert (response.status_code, response.json()["error"]) == (409, "TASK_EXPIRED")
    binding = {"schema_version": "bailing.agent-task-binding.v1", "task_id": str(task.pk),
               "scope_hash": task.scope_hash}
    turn = open_turn(APIClient(), shop.token, ROUTE, n=3, task_binding=binding)
    assert (turn.status_code, turn.json()["error"]) == (409, "TASK_EXPIRED")
    assert (Invocation.objects.count(), ledger_counts()) == (invocations, ledger)
    task.refresh_from_db()
    assert (task.write_reserved, task.write_consumed, task.active_permits) == (0, 0, 0)
    assert shop.server.received == []


def test_a_tool_outside_the_members_tools_is_refused_and_nothing_is_stored(shop, dispatching):
    task, _ = _task(shop, [shop.session], tools=("item_read",))
    run_id = _bound_run(shop, shop.token, task)
    response = _post(shop.token, _body(shop, run_id))
    assert (response.status_code, response.json()["error"]) == (403, "TASK_TOOL_NOT_ALLOWED")
    assert shop.server.received == []


def test_an_enforced_session_cannot_invoke_under_an_unbound_run(shop, dispatching):
    _task(shop, [shop.session])
    response = _post(shop.token, _body(shop, shop.run_id))  # the fixture's run was opened before the task
    assert (response.status_code, response.json()["error"]) == (403, "TASK_REQUIRED")
    assert shop.server.received == []


def test_a_write_answered_with_a_server_error_is_used_and_frees_its_permit(shop, dispatching):
    """A 5xx is the business system's answer too: the agent is told to reconcile, while the task
    counts the write as used and the next call may run. Held as uncertain, it kept the only permit
    for good: every later call of the task, reads too, was TASK_DISPATCH_UNCERTAIN."""
    task, _ = _task(shop, [shop.session], max_write_calls=2, max_concurrent=1)
    run_id = _bound_run(shop, shop.token, task)
    shop.server.respond("/api/stock", status=503, body=b'{"error":"down"}')
    assert _post(shop.token, _body(shop, run_id)).json()["state"] == "reconciliation_required"
    assert _counters(task) == (0, 1, 0)
    assert Task.objects.get(pk=task.pk).charges.get().outcome == "trusted"
    read = _post(shop.token, _body(shop, run_id, tool="item_read", arguments={"item_id": "TEA-1"}))
    assert (read.status_code, read.json()["state"]) == (200, "executed")


def test_a_redirected_write_is_used_and_frees_its_permit(shop, dispatching):
    """A redirect is the business system's answer: the agent is told to reconcile (the write may
    have been applied), while the task counts the write as used and the next call may run."""
    task, _ = _task(shop, [shop.session], max_write_calls=2, max_concurrent=1)
    run_id = _bound_run(shop, shop.token, task)
    shop.server.respond("/api/stock", status=303, body=b"", headers={"Location": "/orders/1"})
    assert _post(shop.token, _body(shop, run_id)).json()["state"] == "reconciliation_required"
    assert _counters(task) == (0, 1, 0)
    assert Task.objects.get(pk=task.pk).charges.get().outcome == "trusted"
    shop.server.respond("/api/stock", status=200, body=b'{"ok":true}')
    assert _post(shop.token, _body(shop, run_id)).json()["state"] == "executed"
    assert _counters(task) == (0, 2, 0)


def test_a_write_whose_approval_expired_undecided_gives_its_reservation_back(shop):
    task, _ = _task(shop, [shop.session], tools=("refund_issue",), max_write_calls=1)
    run_id = _bound_run(shop, shop.token, task)
    refund = {"order_id": "SO-1", "amount": 5}
    assert _post(shop.token, _body(shop, run_id, "refund_issue", refund)).json()["state"] == "awaiting_approval"
    Approval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    invocation_watchdog()
    task.refresh_from_db()
    assert (task.write_reserved, task.write_consumed, task.active_permits) == (0, 0, 0)
    again = _post(shop.token, _body(shop, run_id, "refund_issue", {**refund, "order_id": "SO-2"}))
    assert (again.status_code, again.json()["state"]) == (200, "awaiting_approval")
    assert shop.server.received == []


def test_a_write_refused_for_now_that_must_now_wait_for_approval_reserves_its_budget_again(shop, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0  # no worker takes shop's dispatches: the first two stay in progress
    task, _ = _task(shop, [shop.session], tools=("limited_write",), max_write_calls=5, max_concurrent=3)
    run_id = _bound_run(shop, shop.token, task)
    for n in range(2):
        assert _post(shop.token, _body(shop, run_id, "limited_write", {"n": n})).json()["state"] == "in_progress"
    body = _body(shop, run_id, "limited_write", {"n": 3})
    assert _post(shop.token, body).json()["state"] == "rejected_before_dispatch"  # its permit given back
    route_tools_set(route=shop.route, force_approval_tools=["limited_write"])
    resumed = APIClient().generic("POST", f"/agent-api/v1/tool-invocations/{body['invocation_id']}/resume", "{}",
                                  content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {shop.token}")
    assert (resumed.status_code, resumed.json()["state"]) == (200, "awaiting_approval")
    task.refresh_from_db()
    assert (task.write_reserved, task.write_consumed, task.active_permits) == (3, 0, 2)


def test_a_receipt_re_verifies_the_member_set(shop, dispatching):
    from apps.agent_auth.services import session_revoke

    second = session_for(shop.session.client, principal={**PRINCIPAL, "id": "u-1002"})
    task, _ = _task(shop, [shop.session, second.session], tools=("item_read",))
    run_id = _bound_run(shop, shop.token, task)
    invocation_id = new_id()
    answer = _post(shop.token, _body(shop, run_id, tool="item_read", arguments={"item_id": "TEA-1"},
                                     invocation_id=invocation_id)).json()
    assert answer["state"] == "executed", answer
    receipt = APIClient().get(f"/agent-api/v1/tool-invocations/{invocation_id}/receipt",
                              HTTP_AUTHORIZATION=f"Bearer {shop.token}")
    assert receipt.status_code == 200
    session_revoke(session=second.session, revoked_by="operator")
    receipt = APIClient().get(f"/agent-api/v1/tool-invocations/{invocation_id}/receipt",
                              HTTP_AUTHORIZATION=f"Bearer {shop.token}")
    assert (receipt.status_code, receipt.json()["error"]) == (409, "TASK_SCOPE_BLOCKED")
    task.refresh_from_db()
    assert task.state == "blocked"


def _approved_refund(shop, run_id):
    from apps.tools.approvals import approval_decide
    from apps.tools.models import Approval

    invocation_id = new_id()
    body = _body(shop, run_id, tool="refund_issue", arguments={"order_id": "SO-1", "amount": 5},
                 invocation_id=invocation_id)
    assert _post(shop.token, body).json()["state"] == "awaiting_approval"
    approval_decide(approval_id=Approval.objects.get().pk, projects=[shop.route.project], decision_id="d",
                    decision="approved")
    return invocation_id


def _resume(token, invocation_id):
    return APIClient().generic("POST", f"/agent-api/v1/tool-invocations/{invocation_id}/resume", "{}",
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_resuming_an_approved_call_after_a_member_is_revoked_blocks_the_task_and_sends_nothing(shop, dispatching):
    from apps.agent_auth.services import session_revoke
    from apps.tools.models import Approval

    second = session_for(shop.session.client, principal={**PRINCIPAL, "id": "u-1002"})
    task, _ = _task(shop, [shop.session, second.session], tools=("refund_issue",), max_write_calls=3)
    invocation_id = _approved_refund(shop, _bound_run(shop, shop.token, task))
    session_revoke(session=second.session, revoked_by="operator")
    response = _resume(shop.token, invocation_id)
    assert (response.status_code, response.json()["error"]) == (409, "TASK_SCOPE_BLOCKED")
    task.refresh_from_db()
    assert (task.state, task.blocked_reason) == ("blocked", "a member session was revoked")
    assert shop.server.received == []
    assert Approval.objects.get().used_at is None
    again = _resume(shop.token, invocation_id)
    assert (again.status_code, again.json()["error"]) == (409, "TASK_SCOPE_BLOCKED")
    assert shop.server.received == []


def test_a_call_made_before_its_session_joined_a_task_cannot_run_outside_it(shop, dispatching):
    from apps.tools.models import Approval

    invocation_id = _approved_refund(shop, shop.run_id)  # the fixture's run: no task yet
    task, _ = _task(shop, [shop.session], tools=("refund_issue",), max_write_calls=0)
    response = _resume(shop.token, invocation_id)
    assert (response.status_code, response.json()["error"]) == (403, "TASK_REQUIRED")
    assert "joined a task after this call was made" in response.json()["message"]
    assert shop.server.received == []
    assert Approval.objects.get().used_at is None
    task.refresh_from_db()
    assert (task.state, task.write_reserved, task.write_consumed, task.active_permits) == ("active", 0, 0, 0)


def _counters(task):
    task.refresh_from_db()
    return task.write_reserved, task.write_consumed, task.active_permits


def test_crash_boundaries_never_lose_or_double_count_budget(shop, transactional_db, settings):
    """Boundary 1: the call is committed with its permit but the worker has not claimed it (a crash
    before dispatch) — the permit and reservation are held, nothing is sent. Boundary 2: the worker
    committed `dispatching` and died — the redelivered message makes it uncertain, the reservation
    and permit are kept, and nothing is ever sent twice. Boundary 3: a trusted answer settles the
    budget exactly once however many times the message is redelivered."""
    from datetime import timedelta

    from django.utils import timezone

    from apps.tools.delivery import invocation_dispatch
    from apps.tools.models import Invocation, InvocationJournalEntry

    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    task, _ = _task(shop, [shop.session], max_write_calls=3, max_concurrent=3)
    run_id = _bound_run(shop, shop.token, task)
    crashed = _post(shop.token, _body(shop, run_id)).json()
    assert crashed["state"] == "in_progress"
    assert _counters(task) == (1, 0, 1)  # boundary 1: held, not sent
    inv = Invocation.objects.get(invocation_id=crashed["invocation_id"])
    Invocation.objects.filter(pk=inv.pk).update(journal_state="dispatching", dispatched_at=timezone.now(),
                                                dispatch_deadline=timezone.now() - timedelta(seconds=1))
    InvocationJournalEntry.objects.create(invocation=inv, state="dispatching", detail={"method": "POST"})
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "uncertain"
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "settled"
    assert _counters(task) == (1, 0, 1)  # boundary 2: an uncertain write keeps its reservation and permit
    assert shop.server.requests_to("/api/stock") == []

    answered = _post(shop.token, _body(shop, run_id, arguments={"sku": "TEA-2", "quantity": 2})).json()
    other = Invocation.objects.get(invocation_id=answered["invocation_id"])
    for _ in range(3):  # the same message delivered three times
        invocation_dispatch(invocation_pk=str(other.pk))
    assert len(shop.server.requests_to("/api/stock")) == 1
    assert _counters(task) == (1, 1, 1)  # boundary 3: consumed once; the uncertain one still held


def _send_held_until_marked_uncertain(shop, settings, task, run_id, *, status=200):
    """A write whose send outlives its dispatch deadline: the business system holds its answer
    while the watchdog settles the call as uncertain, then answers. (The dispatcher's return, the
    call's row.)"""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    shop.server.respond("/api/stock", delay=30, status=status, body=b'{"adjusted":1}')
    queued = _post(shop.token, _body(shop, run_id)).json()
    inv = Invocation.objects.get(invocation_id=queued["invocation_id"])
    returned: list[str] = []

    def dispatcher() -> None:
        try:
            returned.append(invocation_dispatch(invocation_pk=str(inv.pk)))
        finally:
            connection.close()

    thread = threading.Thread(target=dispatcher)
    thread.start()
    for _ in range(400):
        if shop.server.requests_to("/api/stock"):
            break
        time.sleep(0.025)
    assert len(shop.server.requests_to("/api/stock")) == 1
    assert invocation_watchdog(now=timezone.now() + timedelta(hours=1))["uncertain"] == 1
    inv.refresh_from_db()
    assert (inv.state, inv.journal_state) == ("reconciliation_required", "uncertain")
    assert _counters(task) == (1, 0, 1)  # held as uncertain: the task's one permit with it
    shop.server.release.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    inv.refresh_from_db()
    return returned, inv


def test_an_answer_that_comes_after_the_watchdog_gave_up_is_kept_and_frees_the_tasks_permit(
        shop, transactional_db, settings):
    """The watchdog marks a call uncertain when its send outlives the dispatch deadline; the
    business system's answer may still come. It was only logged, and the call held its task's one
    permit for good: every later call of the task, reads too, was TASK_DISPATCH_UNCERTAIN. The
    call's result stays the verdict its agent was given (§2: a stable result is replayed as-is)."""
    task, owner = _task(shop, [shop.session], max_write_calls=3, max_concurrent=1)
    run_id = _bound_run(shop, shop.token, task)
    returned, inv = _send_held_until_marked_uncertain(shop, settings, task, run_id)
    assert returned == ["late_answer_kept"]
    console = Client()
    console.force_login(owner.user)
    page = console.get(f"/admin/tools/invocation/{inv.pk}/change/").content.decode()
    assert "The business system answered after this call was marked uncertain: HTTP 200, 14 bytes" in page
    assert (inv.state, inv.journal_state, inv.business_status) == ("reconciliation_required", "uncertain", None)
    assert list(inv.journal.values_list("state", flat=True)) == ["dispatching", "uncertain", "uncertain"]
    assert inv.journal.order_by("created_at").last().detail["late_answer"]["status"] == 200
    assert _counters(task) == (0, 1, 0)
    assert Task.objects.get(pk=task.pk).charges.get().outcome == "trusted"
    receipt = APIClient().get(f"/agent-api/v1/tool-invocations/{inv.invocation_id}/receipt",
                              HTTP_AUTHORIZATION=f"Bearer {shop.token}").json()
    assert (receipt["journal_state"], receipt["result"]["state"]) == ("uncertain", "reconciliation_required")
    read = _post(shop.token, _body(shop, run_id, tool="item_read", arguments={"item_id": "TEA-1"}))
    assert (read.status_code, read.json()["state"]) == (200, "in_progress")  # a permit was free
    assert len(shop.server.requests_to("/api/stock")) == 1  # the write was sent once


def test_a_late_business_rejection_counts_the_write_as_used(shop, transactional_db, settings):
    task, _ = _task(shop, [shop.session], max_write_calls=3, max_concurrent=1)
    run_id = _bound_run(shop, shop.token, task)
    returned, inv = _send_held_until_marked_uncertain(shop, settings, task, run_id, status=409)
    assert returned == ["late_answer_kept"]
    assert inv.state == "reconciliation_required"
    assert inv.journal.order_by("created_at").last().detail["late_answer"]["status"] == 409
    assert _counters(task) == (0, 1, 0)


def test_a_bound_turn_offers_only_the_members_tools(shop):
    unbound = {tool["name"] for tool in open_turn(APIClient(), shop.token, ROUTE, n=1).json()["active_tools"]}
    assert {"item_read", "stock_write"} <= unbound  # the premise: the route offers more than the member's tool
    task, _ = _task(shop, [shop.session], tools=("item_read",))
    binding = {"schema_version": "bailing.agent-task-binding.v1", "task_id": str(task.pk),
               "scope_hash": task.scope_hash}
    bound = open_turn(APIClient(), shop.token, ROUTE, n=2, task_binding=binding).json()
    assert [tool["name"] for tool in bound["active_tools"]] == ["item_read"]


def test_a_capability_search_under_a_bound_run_finds_only_the_members_tools(shop):
    task, _ = _task(shop, [shop.session], tools=("item_read",))
    run_id = _bound_run(shop, shop.token, task)
    response = APIClient().generic("POST", f"/agent-api/v1/workspaces/{ROUTE}/capabilities/search",
                                   json.dumps({"run_id": run_id, "query": "stock", "limit": 10}),
                                   content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {shop.token}")
    body = response.json()
    assert response.status_code == 200, body
    assert ([tool["name"] for tool in body["tools"]], body["discovery"]["authorized_total"]) == (["item_read"], 1)


def test_an_approved_call_whose_tool_changed_gives_its_task_write_back_and_sends_nothing(shop, dispatching):
    """Approved, then its tool's execution changed (here its provider's base URL): the resume was
    refused with capability_changed, but the call stayed `awaiting_approval` for good and held its
    task's write reservation for good - an approved approval never expires."""
    from apps.tools.models import Invocation

    task, _ = _task(shop, [shop.session], tools=("refund_issue",), max_write_calls=3)
    invocation_id = _approved_refund(shop, _bound_run(shop, shop.token, task))
    task.refresh_from_db()
    assert task.write_reserved == 1
    shop.provider.base_url = shop.provider.base_url + "/v2"
    shop.provider.save(update_fields=["base_url"])

    response = _resume(shop.token, invocation_id)
    assert (response.status_code, response.json()["error"]) == (409, "capability_changed")
    task.refresh_from_db()
    assert (task.write_reserved, task.write_consumed, task.active_permits) == (0, 0, 0)
    inv = Invocation.objects.get()
    assert (inv.state, inv.result["state"], inv.frozen_arguments) == (
        "rejected_before_dispatch", "rejected_before_dispatch", "")
    # Settled: the next resume replays the stored result (contracts §2), which says what to do.
    again = _resume(shop.token, invocation_id)
    assert (again.status_code, again.json()["state"], again.json()["auto_retry_allowed"]) == (
        200, "rejected_before_dispatch", False)
    assert "make a new call" in again.json()["text"]
    assert shop.server.received == []


def test_a_pending_call_whose_tool_changed_stays_pending(shop, dispatching):
    """Only an approved call is settled: a pending one may still be denied, or its tool come back."""
    from apps.tools.models import Invocation

    task, _ = _task(shop, [shop.session], tools=("refund_issue",), max_write_calls=3)
    body = _body(shop, _bound_run(shop, shop.token, task), tool="refund_issue",
                 arguments={"order_id": "SO-1", "amount": 5})
    assert _post(shop.token, body).json()["state"] == "awaiting_approval"
    shop.provider.base_url = shop.provider.base_url + "/v2"
    shop.provider.save(update_fields=["base_url"])
    response = _resume(shop.token, body["invocation_id"])
    assert (response.status_code, response.json()["error"]) == (409, "capability_changed")
    assert Invocation.objects.get().state == "awaiting_approval"
    task.refresh_from_db()
    assert task.write_reserved == 1


@pytest.mark.parametrize(("control", "error", "retry"), [
    ("pause", "TASK_PAUSED", True), ("cancel", "TASK_CANCELLED", False), ("block", "TASK_SCOPE_BLOCKED", False),
    ("expire", "TASK_EXPIRED", False)])
def test_a_call_queued_before_its_task_was_stopped_is_not_sent(shop, settings, control, error, retry):
    """It took its permit and was queued; then the task was paused, cancelled, blocked (a member's
    session revoked: no call had noticed yet) or expired before the dispatcher took it. It was
    sent all the same: the dispatcher's transaction did not look at the task."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0  # the answer is in_progress: no dispatcher has run
    other = session_for(shop.session.client, principal={**PRINCIPAL, "id": "u-1002"})
    task, owner = _task(shop, [shop.session, other.session], max_write_calls=3, max_concurrent=2)
    run_id = _bound_run(shop, shop.token, task)
    queued = _post(shop.token, _body(shop, run_id)).json()
    assert (queued["state"], _counters(task)) == ("in_progress", (1, 0, 1))
    if control == "block":
        session_revoke(session=other.session, revoked_by="operator")
    elif control == "expire":
        Task.objects.filter(pk=task.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    else:
        task_control(task=task, user=owner.user, request_id="stop", expected_revision=task.revision, action=control)
    invocation = Invocation.objects.get(invocation_id=queued["invocation_id"])

    assert invocation_dispatch(invocation_pk=str(invocation.pk)) == "task_refused"
    assert shop.server.requests_to("/api/stock") == []
    invocation.refresh_from_db()
    assert (invocation.result["state"], invocation.result["auto_retry_allowed"],
            invocation.result["text"].split(":")[0]) == ("rejected_before_dispatch", retry, error)
    assert _counters(task) == (0, 0, 0)  # the permit and the reservation are given back
    task.refresh_from_db()
    assert task.state == {"pause": "paused", "cancel": "cancelled", "block": "blocked", "expire": "active"}[control]


def _refused_by_a_pause(shop, settings):
    """A write queued under a task, then the task paused before the dispatcher took it: refused for
    now. (task, its owner, the call's body, the invocation)."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    task, owner = _task(shop, [shop.session], max_write_calls=3, max_concurrent=2)
    run_id = _bound_run(shop, shop.token, task)
    body = _body(shop, run_id)
    _post(shop.token, body)
    task_control(task=task, user=owner.user, request_id="pause", expected_revision=task.revision, action="pause")
    invocation = Invocation.objects.get(invocation_id=body["invocation_id"])
    assert invocation_dispatch(invocation_pk=str(invocation.pk)) == "task_refused"
    task.refresh_from_db()
    return task, owner, body, invocation


def test_a_queued_call_refused_by_a_pause_is_sent_when_resumed_after_the_task_is(shop, settings):
    task, owner, body, invocation = _refused_by_a_pause(shop, settings)
    again = _post(shop.token, body)  # while paused: refused for now, nothing stored changes
    assert (again.status_code, again.json()["error"]) == (409, "TASK_PAUSED")
    task.refresh_from_db()
    task_control(task=task, user=owner.user, request_id="resume", expected_revision=task.revision, action="resume")
    assert shop.server.requests_to("/api/stock") == []  # resuming the task sends nothing by itself
    assert _post(shop.token, body).json()["state"] == "in_progress"  # the agent's call again takes a permit
    assert invocation_dispatch(invocation_pk=str(invocation.pk)) == "executed"
    assert len(shop.server.requests_to("/api/stock")) == 1
    assert _counters(task) == (0, 1, 0)


def test_a_queued_call_of_a_task_that_is_still_usable_is_sent(shop, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    task, _ = _task(shop, [shop.session], max_write_calls=3, max_concurrent=2)
    run_id = _bound_run(shop, shop.token, task)
    queued = _post(shop.token, _body(shop, run_id)).json()
    invocation = Invocation.objects.get(invocation_id=queued["invocation_id"])
    assert invocation_dispatch(invocation_pk=str(invocation.pk)) == "executed"
    assert len(shop.server.requests_to("/api/stock")) == 1
    assert _counters(task) == (0, 1, 0)


def test_the_block_a_dispatcher_finds_holds_once_its_transaction_commits(transactional_db, shop, settings):
    """The refusal settles the call in the dispatcher's transaction, the block with it (no test
    transaction around them here)."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    other = session_for(shop.session.client, principal={**PRINCIPAL, "id": "u-1002"})
    task, _ = _task(shop, [shop.session, other.session], max_write_calls=3, max_concurrent=2)
    run_id = _bound_run(shop, shop.token, task)
    queued = _post(shop.token, _body(shop, run_id)).json()
    session_revoke(session=other.session, revoked_by="operator")
    invocation = Invocation.objects.get(invocation_id=queued["invocation_id"])
    assert invocation_dispatch(invocation_pk=str(invocation.pk)) == "task_refused"
    connection.close()  # read back on a new connection: what was committed
    assert (Task.objects.get(pk=task.pk).state, Invocation.objects.get(pk=invocation.pk).state) == (
        "blocked", "rejected_before_dispatch")
    assert _counters(task) == (0, 0, 0)


def test_a_call_refused_by_a_pause_whose_task_then_ended_is_settled_for_good(shop, settings):
    """Refused only for now, it read as retryable and kept its frozen arguments for ever, and each
    call of it was a 409: its task can never let it run again."""
    task, owner, body, invocation = _refused_by_a_pause(shop, settings)
    task.refresh_from_db()
    task_control(task=task, user=owner.user, request_id="cancel", expected_revision=task.revision, action="cancel")

    answer = _post(shop.token, body)
    assert answer.status_code == 200
    settled = answer.json()
    assert (settled["state"], settled["auto_retry_allowed"], settled["text"].split(":")[0]) == (
        "rejected_before_dispatch", False, "TASK_CANCELLED")
    invocation.refresh_from_db()
    assert invocation.frozen_arguments == ""
    assert _post(shop.token, body).json() == settled  # replayed as stored from now on
    assert shop.server.requests_to("/api/stock") == []
    assert _counters(task) == (0, 0, 0)


def _cancel(task, owner):
    task_control(task=task, user=owner.user, request_id="cancel", expected_revision=task.revision, action="cancel")


def _expire(task, owner):
    Task.objects.filter(pk=task.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


def _block(task, owner):
    task_block(task=task, reason="A member's session was revoked.")


@pytest.mark.parametrize("end,error", [(_cancel, "TASK_CANCELLED"), (_expire, "TASK_EXPIRED"),
                                       (_block, "TASK_SCOPE_BLOCKED")])
def test_the_watchdog_settles_a_call_refused_by_a_pause_whose_task_then_ended(shop, settings, end, error):
    """An agent that never comes back to such a call left it reading as retryable, its frozen
    arguments kept for ever: the watchdog settles it as the agent's coming back would."""
    task, owner, body, invocation = _refused_by_a_pause(shop, settings)
    end(task, owner)

    assert invocation_watchdog()["settled"] == 1
    invocation.refresh_from_db()
    assert (invocation.result["state"], invocation.result["auto_retry_allowed"],
            invocation.result["text"].split(":")[0], invocation.frozen_arguments) == (
        "rejected_before_dispatch", False, error, "")
    assert _post(shop.token, body).json() == invocation.result  # the agent reads it as stored
    assert invocation_watchdog()["settled"] == 0
    assert shop.server.requests_to("/api/stock") == []
    assert _counters(task) == (0, 0, 0)


def test_the_watchdog_leaves_a_call_refused_by_a_pause_while_its_task_is_only_paused(shop, settings):
    task, owner, body, invocation = _refused_by_a_pause(shop, settings)
    assert invocation_watchdog()["settled"] == 0
    invocation.refresh_from_db()
    assert (invocation.result["auto_retry_allowed"], invocation.frozen_arguments != "") == (True, True)
    task_control(task=task, user=owner.user, request_id="resume", expected_revision=task.revision, action="resume")
    assert _post(shop.token, body).json()["state"] == "in_progress"  # it can still run
