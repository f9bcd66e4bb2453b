"""A call waiting for its approval whose agent session ended for good can never run: only the
session that made a call can resume it. The watchdog settles it, as it settles a lapsed approval,
and says why; a call whose session can still be used is left waiting."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.agent_auth.models import AgentAuthorization, AgentSession
from apps.agent_auth.services import session_revoke
from apps.tasks.services import MemberSpec, PolicySpec, task_create
from apps.tools.approvals import HUB_APPROVER_LABEL, approval_decide
from apps.tools.invocations import invocation_watchdog
from apps.tools.models import Approval, Invocation
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.ledger.helpers import open_turn
from tests.projects.factories import MembershipFactory
from tests.tools.invocation_helpers import ROUTE, new_id

pytest_plugins = ["tests.tools.invocation_fixtures"]

REFUND = {"order_id": "SO-1", "amount": 5}


def _revoke(session: AgentSession) -> None:
    session_revoke(session=session, revoked_by=AgentSession.RevokedBy.OPERATOR, reason="Lost laptop")


def _expire(session: AgentSession) -> None:
    AgentSession.objects.filter(pk=session.pk).update(refresh_expires_at=timezone.now() - timedelta(seconds=1))


def _authorization_deleted(session: AgentSession) -> None:
    AgentAuthorization.objects.filter(pk=session.authorization_id).delete()


def _waiting(shop) -> Approval:
    answer = shop.invoke("refund_issue", REFUND).json()
    assert answer["state"] == "awaiting_approval", answer
    return Approval.objects.select_related("invocation").get(pk=answer["approval_id"])


def _approve(approval: Approval) -> None:
    approval_decide(approval_id=approval.pk, projects=[approval.project], decision_id="d-1", decision="approved")


def _read(approval: Approval) -> tuple[str, str, str, bool]:
    approval.refresh_from_db()
    invocation = Invocation.objects.get(pk=approval.invocation_id)
    return approval.status, invocation.state, invocation.result["text"], invocation.frozen_arguments == ""


def test_a_pending_approval_of_a_revoked_session_is_denied_by_the_hub_and_its_call_says_why(shop):
    approval = _waiting(shop)
    _revoke(shop.session)

    assert invocation_watchdog()["settled"] == 1
    status, state, text, dropped = _read(approval)
    assert (status, state, dropped) == ("denied", "denied", True)
    assert text.startswith("The agent session that made this call was revoked before anyone decided its approval. "
                           "Only that session can resume a call, so this one can never run: BailingHub denied it.")
    assert (approval.approver_id, approval.approver_label, approval.comment.split(".")[0]) == (
        None, HUB_APPROVER_LABEL, "The agent session that made this call was revoked before anyone decided its "
                                  "approval")
    assert invocation_watchdog()["settled"] == 0
    assert shop.server.received == []


@pytest.mark.parametrize("end,said", [(_expire, "expired"),
                                      (_authorization_deleted, "ended (its authorization record was deleted)")])
def test_an_approved_call_whose_session_ended_before_its_resume_is_settled_unsent(shop, end, said):
    approval = _waiting(shop)
    _approve(approval)
    end(shop.session)

    assert invocation_watchdog()["settled"] == 1
    status, state, text, dropped = _read(approval)
    assert (status, state, dropped, approval.used_at) == ("approved", "rejected_before_dispatch", True, None)
    assert text.startswith(f"The agent session that made this call {said} after the call was approved and before it "
                           "was resumed. Only that session can resume a call, so this one can never run. Nothing was "
                           "sent")
    assert shop.server.received == []


def test_only_the_calls_of_the_ended_session_are_settled(shop):
    other = session_for(shop.session.client, principal={**PRINCIPAL, "id": "u-1002"})
    turn = open_turn(APIClient(), other.access_token, ROUTE, n=2)
    assert turn.status_code == 200, turn.json()
    live_pending, live_approved = (
        Approval.objects.get(pk=shop.post(shop.body("refund_issue", {**REFUND, "amount": amount},
                                                    agent_run_id=turn.json()["run_id"]),
                                          token=other.access_token).json()["approval_id"])
        for amount in (6, 7))
    _approve(live_approved)
    ended = _waiting(shop)
    _revoke(shop.session)

    assert invocation_watchdog()["settled"] == 1
    assert [_read(approval)[:2] for approval in (live_pending, live_approved, ended)] == [
        ("pending", "awaiting_approval"), ("approved", "awaiting_approval"), ("denied", "denied")]


def test_a_tasks_write_waiting_for_approval_gives_its_reservation_back_once_its_session_is_revoked(shop):
    owner = MembershipFactory(project=shop.route.project, role="owner")
    member = MemberSpec(session_id=str(shop.session.pk), workspace=ROUTE, client_conversation_id="conv-1",
                        allowed_tools=("refund_issue",))
    task, _ = task_create(project=shop.route.project, user=owner.user, request_id=new_id(), members=[member],
                          policy=PolicySpec(max_write_calls=1))
    binding = {"schema_version": "bailing.agent-task-binding.v1", "task_id": str(task.pk),
               "scope_hash": task.scope_hash}
    turn = open_turn(APIClient(), shop.token, ROUTE, n=2, client_conversation_id="conv-1", task_binding=binding)
    assert turn.status_code == 200, turn.json()
    answer = shop.invoke("refund_issue", REFUND, agent_run_id=turn.json()["run_id"]).json()
    assert answer["state"] == "awaiting_approval", answer
    task.refresh_from_db()
    assert task.write_reserved == 1
    _revoke(shop.session)

    assert invocation_watchdog()["settled"] == 1
    task.refresh_from_db()
    assert (task.write_reserved, task.write_consumed, task.active_permits) == (0, 0, 0)
    assert Invocation.objects.get(invocation_id=answer["invocation_id"]).state == "denied"
