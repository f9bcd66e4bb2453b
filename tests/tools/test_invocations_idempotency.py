"""Idempotency, concurrency, rate limits, pause, and the journal that keeps a write from ever being
sent twice — a worker dying mid-dispatch included."""

import json
import threading
from datetime import timedelta

from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from apps.projects.models import Project
from apps.tools.delivery import invocation_dispatch
from apps.tools.invocations import invocation_watchdog
from apps.tools.models import Approval, Invocation, InvocationJournalEntry
from tests.tools.invocation_helpers import ROUTE, new_id

pytest_plugins = ["tests.tools.invocation_fixtures"]


def test_a_settled_result_is_replayed_as_is(shop, dispatching):
    invocation_id = new_id()
    first = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}, invocation_id=invocation_id).json()
    again = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}, invocation_id=invocation_id).json()
    assert first == again
    assert first["state"] == "executed"
    assert len(shop.server.received) == 1


def test_twenty_identical_calls_at_once_dispatch_once(shop, dispatching):
    shop.server.respond("/api/stock", delay=0.5, body=b'{"adjusted":1}')
    body = shop.body("stock_write", {"sku": "TEA-1", "quantity": 1})
    answers: list = []
    barrier = threading.Barrier(20)

    def call() -> None:
        try:
            client = APIClient()
            barrier.wait()
            response = client.generic("POST", "/agent-api/v1/tool-invocations", json.dumps(body),
                                      content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {shop.token}")
            answers.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 20
    assert {status for status, _ in answers} == {200}
    states = {answer["state"] for _, answer in answers}
    assert states <= {"executed", "in_progress"}
    executed = [answer for _, answer in answers if answer["state"] == "executed"]
    assert all(answer == executed[0] for answer in executed)
    assert {answer["invocation_id"] for _, answer in answers} == {body["invocation_id"]}
    assert len(shop.server.requests_to("/api/stock")) == 1
    assert Invocation.objects.count() == 1


def test_a_rate_limited_call_is_refused_for_now_and_never_sent(shop, dispatching):
    for n in range(2):
        assert shop.invoke("limited_write", {"n": n}).json()["state"] == "executed"
    invocation_id = new_id()
    body = shop.invoke("limited_write", {"n": 3}, invocation_id=invocation_id).json()
    assert (body["state"], body["ok"], body["auto_retry_allowed"], body["rate_limit"]) == (
        "rejected_before_dispatch", False, True, {"count": 2, "window": "1h"})
    assert 0 < body["retry_after_ms"] <= 3600 * 1000
    again = shop.invoke("limited_write", {"n": 3}, invocation_id=invocation_id).json()
    assert again["state"] == "rejected_before_dispatch"
    assert len(shop.server.requests_to("/api/limited")) == 2


def test_the_rate_limit_holds_across_sessions(shop, dispatching):
    from tests.agent_auth.factories import AgentClientFactory
    from tests.agent_auth.helpers import PRINCIPAL, session_for
    from tests.ledger.helpers import open_turn

    for n in range(2):
        shop.invoke("limited_write", {"n": n})
    other = session_for(AgentClientFactory(project=shop.route.project, allowed_routes=[ROUTE]), principal=PRINCIPAL)
    run_id = open_turn(shop.client, other.access_token, ROUTE).json()["run_id"]
    body = shop.body("limited_write", {"n": 9}, agent_run_id=run_id)
    answer = shop.post(body, token=other.access_token).json()
    assert answer["state"] == "rejected_before_dispatch"
    assert len(shop.server.requests_to("/api/limited")) == 2


def test_while_paused_invoke_and_resume_answer_503_and_receipts_work(shop, dispatching):
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 3}, invocation_id=invocation_id)
    from apps.tools.approvals import approval_decide

    approval_decide(approval_id=Approval.objects.get().pk, projects=[shop.route.project], decision_id="d",
                    decision="approved")
    Project.objects.filter(pk=shop.route.project_id).update(tool_execution_paused=True)
    paused = shop.resume(invocation_id)
    assert (paused.status_code, paused.json()["error"]) == (503, "execution_paused")
    assert shop.receipt(invocation_id).json()["approval"]["status"] == "approved"
    assert shop.server.received == []
    assert Approval.objects.get().used_at is None  # a paused resume consumes nothing
    Project.objects.filter(pk=shop.route.project_id).update(tool_execution_paused=False)
    assert shop.resume(invocation_id).json()["state"] == "executed"
    assert len(shop.server.received) == 1


def test_while_paused_a_settled_call_is_still_replayed_and_nothing_is_sent(shop, dispatching):
    # Pause stops dispatch; the stored answer of a call that already ran is replayed as it is.
    invocation_id = new_id()
    body = shop.body("item_read", {"item_id": "TEA-1"}, invocation_id=invocation_id)
    executed = shop.post(body).json()
    assert executed["state"] == "executed"
    Project.objects.filter(pk=shop.route.project_id).update(tool_execution_paused=True)
    replayed, resumed = shop.post(body), shop.resume(invocation_id)
    assert (replayed.status_code, replayed.json()) == (200, executed)
    assert (resumed.status_code, resumed.json()) == (200, executed)
    fresh = shop.invoke("item_read", {"item_id": "TEA-1"})
    assert (fresh.status_code, fresh.json()["error"]) == (503, "execution_paused")
    assert len(shop.server.received) == 1
    assert Invocation.objects.count() == 1


def _claimed_by_a_worker_that_died(shop, settings) -> Invocation:
    """A write whose dispatcher committed `dispatching` and died before any outcome was recorded."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    body = shop.invoke("note_add", {"text": "once"}).json()
    assert body["state"] == "in_progress"
    inv = Invocation.objects.get()
    assert inv.journal_state == "absent"  # queued, proven not sent (no worker runs in this test)
    Invocation.objects.filter(pk=inv.pk).update(journal_state="dispatching", dispatched_at=timezone.now(),
                                                dispatch_deadline=timezone.now() - timedelta(seconds=1))
    InvocationJournalEntry.objects.create(invocation=inv, state="dispatching", detail={"method": "POST"})
    return inv


def test_a_worker_killed_mid_dispatch_gives_reconciliation_and_no_second_send(shop, transactional_db, settings):
    inv = _claimed_by_a_worker_that_died(shop, settings)
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "uncertain"  # the message, redelivered
    body = shop.resume(inv.invocation_id).json()
    assert (body["state"], body["auto_retry_allowed"]) == ("reconciliation_required", False)
    assert "Do not submit a new write" in body["text"]
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "settled"
    assert shop.server.received == []
    assert list(InvocationJournalEntry.objects.filter(invocation=inv).order_by("created_at")
                .values_list("state", flat=True)) == ["dispatching", "uncertain"]


def test_a_dispatch_past_its_deadline_is_reconciled_on_resume(shop, transactional_db, settings):
    inv = _claimed_by_a_worker_that_died(shop, settings)
    body = shop.resume(inv.invocation_id).json()
    assert body["state"] == "reconciliation_required"
    receipt = shop.receipt(inv.invocation_id).json()
    assert (receipt["dispatch_state"], receipt["journal_state"]) == ("unknown", "uncertain")
    assert shop.server.received == []


def test_frozen_arguments_that_cannot_be_read_are_never_sent(shop, transactional_db, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    body = shop.invoke("note_add", {"text": "x"}).json()
    inv = Invocation.objects.get(invocation_id=body["invocation_id"])
    Invocation.objects.filter(pk=inv.pk).update(frozen_arguments="not-a-fernet-token")
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "frozen_lost"
    assert shop.resume(inv.invocation_id).json()["state"] == "rejected_before_dispatch"
    assert shop.server.received == []


def _undelivered() -> int:
    from bailinghub.celery import app
    from tests.tools.invocation_fixtures import UNDELIVERED_QUEUE  # a plugin: imported once pytest has it

    with app.connection_for_write() as broker:
        return broker.default_channel.client.llen(UNDELIVERED_QUEUE)


def test_the_watchdog_hands_a_call_whose_message_was_lost_to_the_dispatcher_once(shop, transactional_db, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert body["state"] == "in_progress" and _undelivered() == 1
    inv = Invocation.objects.get(invocation_id=body["invocation_id"])
    assert invocation_watchdog() == {"requeued": 0, "uncertain": 0, "settled": 0}  # queued just now: not lost yet
    Invocation.objects.filter(pk=inv.pk).update(
        updated_at=timezone.now() - timedelta(seconds=settings.TOOL_DISPATCH_REQUEUE_SECONDS + 1))
    assert invocation_watchdog() == {"requeued": 1, "uncertain": 0, "settled": 0}
    assert _undelivered() == 2
    # handed over again: the clock restarts
    assert invocation_watchdog() == {"requeued": 0, "uncertain": 0, "settled": 0}
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "executed"
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "settled"  # the first message, delivered late
    assert len(shop.server.received) == 1


def test_a_second_message_for_a_call_being_sent_leaves_it_to_the_send(shop, transactional_db, settings):
    """The watchdog's copy (or a redelivered message) meets a call another worker is sending: it
    neither sends nor settles it, so the answer that worker gets is the one recorded."""
    inv = _claimed_by_a_worker_that_died(shop, settings)
    Invocation.objects.filter(pk=inv.pk).update(dispatch_deadline=timezone.now() + timedelta(seconds=30))
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "in_flight"
    inv.refresh_from_db()
    assert (inv.state, inv.journal_state) == ("in_progress", "dispatching")
    assert invocation_watchdog() == {"requeued": 0, "uncertain": 0, "settled": 0}
    assert shop.server.received == []


def test_the_watchdog_makes_a_claimed_call_past_its_deadline_uncertain(shop, transactional_db, settings):
    inv = _claimed_by_a_worker_that_died(shop, settings)
    assert invocation_watchdog() == {"requeued": 0, "uncertain": 1, "settled": 0}
    inv.refresh_from_db()
    assert (inv.state, inv.journal_state) == ("reconciliation_required", "uncertain")
    assert shop.resume(inv.invocation_id).json()["state"] == "reconciliation_required"
    assert shop.server.received == []


def test_the_watchdog_settles_a_lost_call_whose_arguments_cannot_be_read(shop, transactional_db, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    body = shop.invoke("note_add", {"text": "x"}).json()
    inv = Invocation.objects.get(invocation_id=body["invocation_id"])
    Invocation.objects.filter(pk=inv.pk).update(
        frozen_arguments="not-a-fernet-token",
        updated_at=timezone.now() - timedelta(seconds=settings.TOOL_DISPATCH_REQUEUE_SECONDS + 1))
    assert invocation_watchdog() == {"requeued": 0, "uncertain": 0, "settled": 1}
    inv.refresh_from_db()
    assert inv.state == "rejected_before_dispatch"
    assert shop.server.received == []
