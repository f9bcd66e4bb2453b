"""Calls that need approval: frozen (encrypted) until an approver decides once; resume executes the
frozen arguments once; an approval is never used twice; expired reads as denied. Decisions by the
builder API (scope approvals:decide, project-scoped, idempotent by decision_id)."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from rest_framework.test import APIClient

from apps.core.validators import BIDI_CONTROLS
from apps.projects.models import Membership
from apps.projects.tokens import operator_token_create
from apps.tools.approvals import approval_decide
from apps.tools.call_checks import Target, approval_reasons, approval_summary
from apps.tools.invocations import invocation_watchdog
from apps.tools.models import Approval, Invocation, ToolProvider
from apps.tools.route_tools import route_tools_set
from tests.core.hostile import NON_CANONICAL_UUID_FORMS, non_canonical_uuid
from tests.projects.factories import MembershipFactory
from tests.tools.invocation_helpers import new_id, stored

pytest_plugins = ["tests.tools.invocation_fixtures"]


def _decision_client(project, *, scopes=("approvals:decide",)) -> APIClient:
    owner = MembershipFactory(project=project)
    _, token = operator_token_create(user=owner.user, name="approver", scopes=list(scopes))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _decide(client, approval_id, **body):
    payload = {"decision_id": "d-1", "decision": "approved", **body}
    return client.post(f"/api/v1/builder/approvals/{approval_id}/decision", payload, format="json")


def test_a_high_risk_call_waits_for_approval_with_its_arguments_frozen(shop):
    invocation_id = new_id()
    body = shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 12.5}, invocation_id=invocation_id).json()
    approval = Approval.objects.get()
    assert (body["state"], body["ok"], body["auto_retry_allowed"], body["approval_id"]) == (
        "awaiting_approval", False, False, str(approval.pk))
    assert "Refund money to a customer" in body["text"]
    # The id written out (the text said "{invocation_id}", a placeholder nobody filled).
    assert f"POST /agent-api/v1/tool-invocations/{invocation_id}/resume" in body["text"]
    assert "{invocation_id}" not in body["text"]
    inv = Invocation.objects.get(invocation_id=invocation_id)
    assert inv.frozen_arguments and "SO-1" not in inv.frozen_arguments  # encrypted at rest
    assert (approval.status, approval.reasons) == ("pending", ["risk_high"])
    assert shop.server.received == []


def test_the_builder_api_cannot_approve_a_call_whose_session_was_revoked(shop):
    """Only that session can resume the call: approving it recorded an approval the watchdog then
    settled unsent, where the console refused it (review)."""
    from apps.agent_auth.services import session_revoke

    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 3})
    approval = Approval.objects.get()
    session_revoke(session=shop.session, revoked_by="operator")
    response = _decide(_decision_client(shop.route.project), approval.pk)
    assert (response.status_code, response.json()["error"]) == (409, "approval_call_cannot_run")
    approval.refresh_from_db()
    assert (approval.status, approval.decision_id, approval.decided_at) == ("pending", "", None)
    denied = _decide(_decision_client(shop.route.project), approval.pk, decision_id="d-2", decision="denied")
    assert (denied.status_code, denied.json()["data"]["status"]) == (200, "denied")


def test_a_matching_approval_rule_needs_approval_and_a_small_change_does_not(shop, dispatching):
    big = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 500}).json()
    small = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 5}).json()
    assert (big["state"], small["state"]) == ("awaiting_approval", "executed")
    assert Approval.objects.get().reasons == ['approval_when: quantity > 100']


def test_approved_then_resumed_executes_the_frozen_arguments_once(shop, dispatching):
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 12.5}, invocation_id=invocation_id)
    approval = Approval.objects.get()
    response = _decide(_decision_client(shop.route.project), approval.pk, comment="ok by phone")
    assert response.status_code == 200, response.content
    assert response.json()["data"]["status"] == "approved"
    assert shop.server.received == []  # deciding sends nothing
    first = shop.resume(invocation_id).json()
    assert (first["state"], first["business_status"]) == ("executed", 200)
    again = shop.resume(invocation_id).json()
    replay = shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 12.5}, invocation_id=invocation_id).json()
    assert again == first == replay
    [received] = shop.server.received
    assert received.json() == {"order_id": "SO-1", "amount": 12.5}
    approval.refresh_from_db()
    assert approval.used_at is not None
    assert Invocation.objects.get(invocation_id=invocation_id).frozen_arguments == ""


def test_resume_before_a_decision_still_awaits(shop):
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1}, invocation_id=invocation_id)
    body = shop.resume(invocation_id).json()
    assert body["state"] == "awaiting_approval"
    assert shop.server.received == []


def _denied(shop, *, comment: str, amount: int = 1) -> tuple[str, dict]:
    """A refund call an approver denied with `comment`: its invocation_id and the agent's resume."""
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": amount}, invocation_id=invocation_id)
    approval_decide(approval_id=Approval.objects.get().pk, projects=[shop.route.project], decision_id="d-1",
                    decision="denied", comment=comment)
    return invocation_id, shop.resume(invocation_id).json()


def test_denied_is_final_and_nothing_is_sent(shop):
    invocation_id, body = _denied(shop, comment="no")
    assert (body["state"], body["ok"], body["auto_retry_allowed"]) == ("denied", False, False)
    assert Invocation.objects.get(invocation_id=invocation_id).frozen_arguments == ""
    assert shop.server.received == []


def test_a_denial_tells_the_agent_the_approvers_comment(shop):
    _, body = _denied(shop, comment="Not 150 — the delivery note says 15.", amount=150)
    assert body["text"] == (
        "The approval for this call was denied. The approver's comment: “Not 150 — the delivery note says "
        "15.” Nothing was sent to the business system.")


def test_the_comment_reaches_the_agent_bounded_on_one_line_without_direction_controls_or_tokens(shop):
    _, body = _denied(shop, comment="Use\n‮SO-2‬ token bha_" + "A" * 30 + " " + "x" * 600)
    quoted = body["text"].split("“")[1].split("”")[0]
    assert quoted == "Use SO-2 token [redacted] " + "x" * 473 + "…"
    assert len(quoted) == 500


def test_another_services_key_in_the_comment_never_reaches_the_agent(shop):
    """The comment goes to the agent's model: an approver pasting a key there (here, the audit's
    own) sent it on as it was; only the hub's tokens and `password=` were removed."""
    pasted = ("Wrong account; use api key sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c or AKIAIOSFODNN7EXAMPLE, "
              "password=hunter2x")
    _, body = _denied(shop, comment=pasted)
    assert body["text"].split("“")[1].split("”")[0] == (
        "Wrong account; use api key [redacted] or [redacted], password=[redacted]")
    # Kept as the agent was told it: kept whole, it was shown to every operator (browser audit).
    approval = Approval.objects.get()
    assert approval.comment == "Wrong account; use api key [redacted] or [redacted], password=[redacted]"
    # The same decision sent again replays: it is compared with what is kept.
    again = approval_decide(approval_id=approval.pk, projects=[shop.route.project], decision_id="d-1",
                            decision="denied", comment=pasted)
    assert again.pk == approval.pk and again.status == "denied"


def test_a_denial_without_a_comment_says_only_that(shop):
    _, body = _denied(shop, comment="")
    assert body["text"] == "The approval for this call was denied. Nothing was sent to the business system."


def test_an_expired_approval_reads_as_denied(shop):
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1}, invocation_id=invocation_id)
    Approval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert shop.resume(invocation_id).json()["state"] == "denied"
    assert shop.receipt(invocation_id).json()["approval"]["status"] == "denied"
    assert shop.server.received == []


def test_the_watchdog_denies_a_call_whose_approval_expired_undecided(shop):
    """Nobody resumes it: the watchdog settles it as a resume would, and its frozen arguments go."""
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1}, invocation_id=invocation_id)
    assert invocation_watchdog() == {"requeued": 0, "uncertain": 0, "settled": 0}  # not expired yet
    Approval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert invocation_watchdog() == {"requeued": 0, "uncertain": 0, "settled": 1}
    invocation = Invocation.objects.select_related("approval").get()
    assert (invocation.state, invocation.frozen_arguments, invocation.approval.status) == ("denied", "", "expired")
    assert shop.resume(invocation_id).json()["state"] == "denied"
    assert shop.server.received == []


def test_deciding_an_expired_approval_is_refused(shop):
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    approval = Approval.objects.get()
    Approval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _decide(_decision_client(shop.route.project), approval.pk)
    assert (response.status_code, response.json()["error"]) == (409, "approval_expired")
    assert Invocation.objects.get().state == "denied"


def test_the_approval_expiry_is_a_setting(shop, settings):
    settings.TOOL_APPROVAL_TTL_SECONDS = 60
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    approval = Approval.objects.get()
    assert timedelta(seconds=55) < approval.expires_at - approval.created_at <= timedelta(seconds=60)


def test_the_same_decision_replays_and_another_is_a_conflict(shop):
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    approval = Approval.objects.get()
    client = _decision_client(shop.route.project)
    first = _decide(client, approval.pk, comment="fine")
    replay = _decide(client, approval.pk, comment="fine")
    other = _decide(client, approval.pk, decision="denied", decision_id="d-2")
    assert first.json() == replay.json()
    assert (other.status_code, other.json()["error"]) == (409, "approval_already_decided")
    approval.refresh_from_db()
    assert (approval.status, approval.decision_id, approval.comment) == ("approved", "d-1", "fine")


def test_an_operator_of_another_project_gets_404(shop):
    from tests.projects.factories import ProjectFactory

    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    approval = Approval.objects.get()
    response = _decide(_decision_client(ProjectFactory()), approval.pk)
    assert (response.status_code, response.json()["error"]) == (404, "approval_not_found")
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_deciding_needs_the_approvals_scope(shop):
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    response = _decide(_decision_client(shop.route.project, scopes=("tools:write",)), Approval.objects.get().pk)
    assert (response.status_code, response.json()["error"]) == (403, "insufficient_scope")
    assert Approval.objects.get().status == "pending"


@pytest.mark.parametrize("control", sorted(BIDI_CONTROLS))
def test_a_comment_with_a_bidi_control_is_refused_as_a_name_is(shop, control):
    """The comment is shown to other operators: U+202E in it reorders what they read after it."""
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    response = _decide(_decision_client(shop.route.project), Approval.objects.get().pk,
                       comment=f"refund ok {control}gpj.exe")
    body = response.json()
    assert (response.status_code, body["error"], list(body["fields"])) == (400, "invalid_request", ["comment"])
    assert "U+202E" in body["message"]
    approval = Approval.objects.get()
    assert (approval.status, approval.comment, approval.decision_id) == ("pending", "", "")
    assert Invocation.objects.get().state == "awaiting_approval"


def test_a_right_to_left_comment_without_controls_is_kept_as_written(shop):
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    response = _decide(_decision_client(shop.route.project), Approval.objects.get().pk, comment="موافق على الاسترداد")
    assert (response.status_code, response.json()["data"]["comment"]) == (200, "موافق على الاسترداد")


@pytest.mark.parametrize("form", NON_CANONICAL_UUID_FORMS)
def test_an_approval_id_in_another_spelling_is_not_found(shop, form):
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    approval = Approval.objects.get()
    response = _decide(_decision_client(shop.route.project), non_canonical_uuid(str(approval.pk), form))
    assert (response.status_code, response.json()["error"]) == (404, "approval_not_found")
    approval.refresh_from_db()
    assert (approval.status, approval.decision_id, approval.decided_at) == ("pending", "", None)


def test_an_approval_id_in_upper_case_is_the_same_approval(shop):
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    response = _decide(_decision_client(shop.route.project), str(Approval.objects.get().pk).upper())
    assert (response.status_code, response.json()["data"]["status"]) == (200, "approved")


@pytest.mark.parametrize("body, field", [
    ({"decision_id": "d-1", "decision": "maybe"}, "decision"),
    ({"decision_id": "", "decision": "approved"}, "decision_id"),
    ({"decision_id": "d-1", "decision": "approved", "extra": 1}, "extra"),
    ({"decision": "approved"}, "decision_id"),
])
def test_a_bad_decision_body_is_refused_naming_the_field(shop, body, field):
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 1})
    response = _decision_client(shop.route.project).post(
        f"/api/v1/builder/approvals/{Approval.objects.get().pk}/decision", body, format="json")
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert field in response.json()["fields"]
    assert Approval.objects.get().status == "pending"


@pytest.mark.parametrize(("value", "needed"), [(True, False), (1, True), (1.0, True), ("true", True),
                                             ([True], True), (None, True)])
def test_a_not_equal_rule_compares_as_json_does(value, needed):
    """`dry_run != true` needs approval for 1: in JSON, 1 is not true (Python's `1 != True` is False)."""
    target = Target(name="stock_write", provider=ToolProvider(), fingerprint="", forced_approval=False,
                    compiled={"approval_rules": [{"param": "dry_run", "op": "!=", "value": True}]})
    assert bool(approval_reasons(target=target, arguments={"dry_run": value})) is needed


def test_a_route_forced_approval_applies(shop):
    from apps.tools.route_tools import route_tools_set

    route_tools_set(route=shop.route, force_approval_tools=["note_add"])
    body = shop.invoke("note_add", {"text": "hi"}).json()
    assert body["state"] == "awaiting_approval"
    assert Approval.objects.get().reasons == ["route_forced"]
    assert stored()["approvals"] == 1


def test_a_call_refused_for_now_waits_for_an_approval_the_route_has_forced_since(shop, settings):
    """A rate-limited call is tried again as a new one would be: the route's new rule applies."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0  # no worker takes shop's dispatches: the first two stay in progress
    for n in range(2):
        assert shop.invoke("limited_write", {"n": n}).json()["state"] == "in_progress"
    invocation_id = new_id()
    assert shop.invoke("limited_write", {"n": 3}, invocation_id=invocation_id).json()["state"] == \
        "rejected_before_dispatch"
    route_tools_set(route=shop.route, force_approval_tools=["limited_write"])
    body = shop.resume(invocation_id).json()
    invocation = Invocation.objects.select_related("approval").get(invocation_id=invocation_id)
    assert (body["state"], body["approval_id"]) == ("awaiting_approval", str(invocation.approval.pk))
    assert (invocation.state, invocation.journal_state, invocation.approval.reasons) == (
        "awaiting_approval", "absent", ["route_forced"])
    assert shop.server.received == []


def test_a_route_forced_approval_holds_when_the_tool_s_own_rule_does_not_match(shop):
    from apps.tools.route_tools import route_tools_set

    route_tools_set(route=shop.route, force_approval_tools=["stock_write"])
    body = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}).json()
    assert body["state"] == "awaiting_approval"
    assert Approval.objects.get().reasons == ["route_forced"]
    assert shop.server.received == []


def test_a_decision_waits_for_a_resume_holding_the_call_before_it_locks_the_approval(shop, transactional_db):
    """A resume locks the call, then its approval; a decision takes them in the same order, so the
    two wait for each other instead of deadlocking (PostgreSQL killed one as a 503)."""
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=new_id())
    approval = Approval.objects.get()
    holding, release = threading.Event(), threading.Event()
    outcome: dict = {}

    def resume_in_progress():  # holds the call's row as invocation_advance does
        try:
            with transaction.atomic():
                Invocation.objects.select_for_update().get(pk=approval.invocation_id)
                holding.set()
                release.wait(30)
        finally:
            connection.close()

    def decide():
        try:
            outcome["status"] = approval_decide(approval_id=approval.pk, projects=[shop.route.project],
                                                decision_id="d-1", decision="approved").status
        finally:
            connection.close()

    holder, decider = threading.Thread(target=resume_in_progress), threading.Thread(target=decide)
    holder.start()
    assert holding.wait(10)
    decider.start()
    try:
        deadline = time.monotonic() + 10
        while not _waiting_on_a_lock() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _waiting_on_a_lock()
        # The decision waits on the call; the approval is free for the resume to take next.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT id FROM tools_approval WHERE id = %s FOR UPDATE NOWAIT", [approval.pk])
    finally:
        release.set()
        holder.join(10)
        decider.join(10)
    assert outcome == {"status": "approved"}


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0] > 0


@pytest.mark.parametrize(("rule", "arguments", "needed"), [
    ({"param": "lines.qty", "op": ">", "value": 100}, {"lines": [{"qty": 5}, {"qty": 150}]}, True),
    ({"param": "lines.qty", "op": ">", "value": 100}, {"lines": [{"qty": 5}, {"qty": 100}]}, False),
    ({"param": "lines.qty", "op": ">", "value": 100}, {"lines": []}, False),
    ({"param": "lines.qty", "op": ">", "value": 100}, {"lines": {"qty": 150}}, True),
    ({"param": "lines.qty", "op": ">", "value": 100}, {"lines": [{"qty": "many"}]}, True),
    ({"param": "order.lines.sku", "op": "in", "value": ["TEA-1"]},
     {"order": {"lines": [{"sku": "CUP-2"}, {"sku": "TEA-1"}]}}, True),
    ({"param": "lines.note", "op": "exists"}, {"lines": [{"qty": 1}, {"note": "gift"}]}, True),
    ({"param": "lines.note", "op": "exists"}, {"lines": [{"qty": 1}]}, False),
    ({"param": "lines.note", "op": "exists", "value": False}, {"lines": [{"qty": 1}]}, True),
    ({"param": "tags", "op": "contains", "value": "vip"}, {"tags": ["new", "vip"]}, True),
    # exists: false fails closed through an array: any item without the field (review, high)
    ({"param": "lines.approved_by", "op": "exists", "value": False},
     {"lines": [{"approved_by": "m1"}, {"sku": "B"}]}, True),
    ({"param": "lines.approved_by", "op": "exists", "value": False},
     {"lines": [{"approved_by": "m1"}, {"approved_by": "m2"}]}, False),
    ({"param": "lines.qty", "op": ">", "value": 100}, {"lines": [[{"qty": 150}], [{"qty": 1}]]}, True),
    ({"param": "lines.qty", "op": ">", "value": 100}, {"lines": ["x", {"qty": 150}]}, True),
    ({"param": "lines.qty", "op": "exists", "value": False}, {"lines": ["x", {"qty": 150}]}, True),
    ({"param": "skus", "op": "in", "value": ["TEA-1"]}, {"skus": ["TEA-1", "CUP-2"]}, True),
    ({"param": "skus", "op": "in", "value": ["TEA-1"]}, {"skus": ["CUP-2"]}, False),
    ({"param": "skus", "op": "==", "value": "TEA-1"}, {"skus": ["CUP-2", "TEA-1"]}, True),
    ({"param": "skus", "op": "==", "value": ["CUP-2"]}, {"skus": ["CUP-2"]}, True),
    ({"param": "skus", "op": "in", "value": "TEA-1"}, {"skus": []}, True),
])
def test_a_rule_through_an_array_matches_when_any_item_does(rule, arguments, needed):
    """`lines.qty > 100` never matched when lines is an array (the path stopped at the list), so a
    call with a line over 100 needed no approval."""
    target = Target(name="stock_write", provider=ToolProvider(), fingerprint="", forced_approval=False,
                    compiled={"approval_rules": [rule]})
    assert bool(approval_reasons(target=target, arguments=arguments)) is needed


@pytest.mark.parametrize("compiled,summary", [
    ({"risk": "high", "approval_declared": True}, "always (high risk)"),
    ({"risk": "medium", "approval_declared": True, "approval_rules": [{"param": "quantity", "op": ">", "value": 1}]},
     "always"),
    ({"risk": "low", "approval_rules": [{"param": "quantity", "op": ">", "value": 100},
                                        {"param": "sku", "op": "in", "value": ["茶-1", "CUP-2"]}]},
     'when quantity > 100 or sku in ["茶-1", "CUP-2"]'),
    ({"approval_rules": [{"param": "note", "op": "exists"}, {"param": "dry_run", "op": "exists", "value": False}]},
     "when note is given or dry_run is left out"),
    ({"approval_rules": [{"param": "sku", "op": "==", "value": "x" * 200}]}, 'when sku == "' + "x" * 71 + "\u2026"),
    ({"risk": "low", "approval_rules": []}, "no"),
])
def test_the_approval_summary_says_when_a_call_asks_as_approval_reasons_decides_it(compiled, summary):
    assert approval_summary(compiled) == summary


WITHDRAWN_APPROVERS = {
    "lowered to viewer": lambda membership: Membership.objects.filter(pk=membership.pk).update(
        role=Membership.Role.VIEWER),
    "taken out of the project": lambda membership: Membership.objects.filter(pk=membership.pk).delete(),
}


@pytest.mark.parametrize("withdraw", WITHDRAWN_APPROVERS.values(), ids=WITHDRAWN_APPROVERS.keys())
def test_an_approver_lowered_to_viewer_or_taken_out_of_the_project_can_no_longer_decide(shop, withdraw):
    """A decision is authorized when it is made, not when the approver was given the token."""
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 3})
    approval = Approval.objects.get()
    owner = MembershipFactory(project=shop.route.project)
    _, token = operator_token_create(user=owner.user, name="approver", scopes=["approvals:decide"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    withdraw(owner)
    response = _decide(client, approval.pk)
    assert (response.status_code, response.json()["error"]) == (404, "approval_not_found")
    approval.refresh_from_db()
    assert (approval.status, approval.decision_id, approval.decided_at) == ("pending", "", None)
