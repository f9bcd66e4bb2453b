"""The approval queue, the execution pause switch and the invocation ledger in the operator console.

Approvals are reached the real way (an agent's call through the invocation endpoint); decisions go
through the one decision service, apps.tools.approvals.approval_decide."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.core.revisions import revision_of
from apps.projects.models import Membership, Project
from apps.tools import approvals
from apps.tools.admin_approvals import LIST_ARGUMENTS_MAX_STORED, LIST_VALUE_CHARS, approval_reason_text
from apps.tools.models import Approval, Invocation
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.projects.factories import ProjectFactory
from tests.routes.factories import RouteFactory
from tests.tools.approval_fixtures import console_client
from tests.tools.approval_helpers import call, invoke, pending_approval, turn
from tests.tools.surface_helpers import STORE_TOOLS

pytest_plugins = ["tests.tools.surface_fixtures"]

QUEUE = "/admin/tools/approval/"


def ident(value: str) -> str:
    return f'<span class="bh-ident" dir="ltr">{value}</span>'


@pytest.fixture
def owner(route) -> Client:
    return console_client(route.project, Membership.Role.OWNER, "owner")


@pytest.fixture
def viewer(route) -> Client:
    return console_client(route.project, Membership.Role.VIEWER, "viewer")


@pytest.fixture
def outsider(db) -> Client:
    return console_client(ProjectFactory(name="Other", slug="other"), Membership.Role.OWNER, "outsider")


def _detail(approval: Approval) -> str:
    return f"{QUEUE}{approval.pk}/change/"


def _decide(client: Client, approval: Approval, decision: str, *, comment: str = "", decision_id: str = "console:1"):
    return client.post(f"{QUEUE}{approval.pk}/decide/", {"decision": decision, "comment": comment,
                                                        "decision_id": decision_id})


def _state(approval: Approval) -> tuple[str, str, str]:
    approval.refresh_from_db()
    approval.invocation.refresh_from_db()
    return approval.status, approval.comment, approval.invocation.state


def test_the_queue_lists_the_projects_approvals_with_tool_risk_prompt_and_asker(owner, approval, issued):
    response = owner.get(QUEUE)
    assert response.status_code == 200
    assert [row.pk for row in response.context["cl"].result_list] == [approval.pk]
    page = response.content.decode()
    assert "<h1>Approvals</h1>" in page
    assert "order_refund" in page
    assert 'data-risk="high"' in page
    assert "ada@example.com" in page
    assert 'data-status="pending"' in page
    assert issued.access_token not in page and issued.refresh_token not in page


def test_the_queue_names_the_agent_client_and_the_route_with_their_ids_beside(owner, approval, route):
    page = owner.get(QUEUE).content.decode()
    client = approval.invocation.session.client
    assert f'<bdi>{client.name}</bdi> <span class="bh-muted">on ' in page
    assert f"title=\"The agent client's app id\">{ident(client.app_id)}</span>" in page
    assert (f"<bdi>{route.project.name}</bdi> · <bdi>门店助手</bdi> "
            f"<span class=\"bh-id\" title=\"The route's key\">{ident('store-assistant')}</span>" in page)
    assert f"title=\"The run's id: {approval.invocation.run_id}\">Run</a>" in page


def test_the_queue_never_reads_the_runs_frozen_context_or_the_sessions_principal(owner, approval):
    with CaptureQueriesContext(connection) as queries:
        assert owner.get(QUEUE).status_code == 200
    listed = [q["sql"] for q in queries.captured_queries if 'JOIN "agent_auth_agentsession"' in q["sql"]]
    assert len(listed) == 1
    assert '"ledger_run"."context_snapshot"' not in listed[0]
    assert '"agent_auth_agentsession"."principal",' not in listed[0]


def test_pending_approvals_come_first_then_the_newest(api_client, issued, tool_route, owner):
    first = pending_approval(api_client, issued.access_token, n=1)
    second = pending_approval(api_client, issued.access_token, n=2)
    third = pending_approval(api_client, issued.access_token, n=3)
    approvals.approval_decide(approval_id=third.pk, projects=Project.objects.all(), decision_id="d-3",
                                decision="denied")
    response = owner.get(QUEUE)
    assert [row.pk for row in response.context["cl"].result_list] == [second.pk, first.pk, third.pk]


def test_an_operator_of_another_project_sees_an_empty_queue(outsider, approval):
    response = outsider.get(QUEUE)
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


def test_an_operator_of_another_project_gets_404_on_the_approval_page(outsider, approval):
    assert outsider.get(_detail(approval)).status_code == 404
    assert outsider.get(f"{QUEUE}{approval.pk}/arguments/").status_code == 404


def test_an_operator_of_another_project_cannot_decide(outsider, approval):
    response = _decide(outsider, approval, "approved")
    assert response.status_code == 404
    assert _state(approval) == ("pending", "", "awaiting_approval")


def test_the_approval_page_shows_prompt_reasons_arguments_and_the_buttons(owner, approval):
    response = owner.get(_detail(approval))
    assert response.status_code == 200
    page = response.content.decode()
    reasons = re.search(r'<dd id="approval-reasons">(.*?)</dd>', page).group(1)
    assert reasons == '<span class="bh-reason" title="risk_high">high-risk tool</span>'
    assert "&quot;order_id&quot;: 1001" in page
    assert 'id="approve-button"' in page and 'id="deny-button"' in page
    assert "csrfmiddlewaretoken" in page


@pytest.mark.parametrize(("reason", "text"), [
    ("risk_high", "high-risk tool"),
    ("approval_required", "the tool requires approval"),
    ('approval_when: amount > 1000', "the arguments match the tool's approval rule “amount > 1000”"),
    ("route_forced", "the route requires approval for this tool"),
])
def test_each_approval_reason_reads_as_a_phrase(reason, text):
    assert approval_reason_text(reason) == text


def test_a_viewer_reads_the_approval_without_buttons(viewer, approval):
    page = viewer.get(_detail(approval)).content.decode()
    assert 'id="approve-button"' not in page
    assert 'id="decision-not-allowed"' in page


def test_a_viewer_cannot_decide(viewer, approval):
    response = _decide(viewer, approval, "approved")
    assert response.status_code == 403
    assert _state(approval) == ("pending", "", "awaiting_approval")


def test_approving_calls_the_decision_service_once(owner, approval, monkeypatch):
    calls = []
    real = approvals.approval_decide

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(approvals, "approval_decide", spy)
    response = _decide(owner, approval, "approved", comment="金额核对无误")
    assert response.status_code == 302
    assert [(c["decision"], c["comment"], c["approver"].username) for c in calls] == [
        ("approved", "金额核对无误", "owner")]
    assert _state(approval) == ("approved", "金额核对无误", "awaiting_approval")
    assert approval.approver_label == "owner"


def test_a_decided_approval_shows_who_when_and_the_comment_and_no_buttons(owner, approval):
    _decide(owner, approval, "approved", comment="ok to refund")
    page = owner.get(_detail(approval)).content.decode()
    assert 'id="decision-approver"><bdi>owner</bdi><' in page
    assert "ok to refund" in page
    assert 'id="approve-button"' not in page


def test_denying_settles_the_call_as_denied(owner, approval):
    _decide(owner, approval, "denied", comment="不符合退款政策")
    assert _state(approval) == ("denied", "不符合退款政策", "denied")


def test_a_second_decision_is_refused_with_a_message_not_an_error(owner, approval):
    _decide(owner, approval, "approved", decision_id="console:first")
    response = _decide(owner, approval, "denied", decision_id="console:second")
    assert response.status_code == 302
    page = owner.get(response["Location"]).content.decode()
    assert "already approved by owner" in page
    assert _state(approval) == ("approved", "", "awaiting_approval")


def test_the_same_form_sent_twice_replays_the_decision(owner, approval):
    _decide(owner, approval, "approved", comment="once", decision_id="console:same")
    response = _decide(owner, approval, "approved", comment="once", decision_id="console:same")
    page = owner.get(response["Location"]).content.decode()
    assert "This decision was already recorded." in page
    assert _state(approval) == ("approved", "once", "awaiting_approval")


def test_a_comment_over_2000_characters_is_refused_next_to_the_field(owner, approval):
    response = _decide(owner, approval, "approved", comment="x" * 2001)
    assert response.status_code == 200
    assert "at most 2000 characters" in response.content.decode()
    assert _state(approval) == ("pending", "", "awaiting_approval")


def test_a_comment_with_a_direction_override_is_refused_next_to_the_field(owner, approval):
    """The builder API refuses it (validate_shown_text); the console took it, and the comment,
    shown to other operators and told to the agent, read otherwise than it was written."""
    response = _decide(owner, approval, "denied", comment="ok \u202egpj.exe")
    assert response.status_code == 200
    assert "Invisible direction controls" in response.content.decode()
    assert _state(approval) == ("pending", "", "awaiting_approval")


def test_a_decision_without_approve_or_deny_is_refused(owner, approval):
    response = _decide(owner, approval, "maybe")
    assert response.status_code == 200
    assert "Press Approve or Deny." in response.content.decode()
    assert _state(approval) == ("pending", "", "awaiting_approval")


def test_an_expired_approval_reads_as_denied_without_buttons(owner, approval):
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    page = owner.get(_detail(approval)).content.decode()
    assert "reads as <strong>denied</strong>" in page
    assert 'id="approve-button"' not in page
    assert 'data-status="expired"' in owner.get(QUEUE).content.decode()


def test_deciding_an_expired_approval_says_so_and_records_nothing(owner, approval):
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    response = _decide(owner, approval, "approved", comment="too late")
    page = owner.get(response["Location"]).content.decode()
    assert "expired before it was decided" in page
    assert _state(approval) == ("expired", "", "denied")


def test_large_arguments_show_a_bounded_preview_and_load_whole_on_demand(api_client, issued, tool_route, owner):
    note = "库存盘点说明。" * 6000  # about 126 KB of UTF-8
    big = pending_approval(api_client, issued.access_token, tool="stock_adjust",
                           arguments={"sku": "SKU-1", "quantity": 500, "note": note})
    page = owner.get(_detail(big)).content.decode()
    assert 'id="arguments-expand"' in page
    assert "Large stock adjustment" in page
    assert note not in page
    assert len(page) < 40_000
    whole = owner.get(f"{QUEUE}{big.pk}/arguments/")
    assert whole.status_code == 200
    assert whole["Content-Type"] == "text/plain; charset=utf-8"
    assert note in whole.content.decode()


def test_small_arguments_give_their_size_once(owner, approval):
    """Under a kilobyte the size read "60 bytes as sent (60 bytes)"."""
    page = owner.get(_detail(approval)).content.decode()
    meta = re.search(r'<p class="bh-arguments-meta bh-muted">([^<]*)<', page).group(1)
    assert meta == f"{approval.invocation.arguments_bytes}\xa0bytes as sent · SHA-256 "


def test_large_arguments_give_their_exact_size_beside_the_rounded_one(api_client, issued, tool_route, owner):
    big = pending_approval(api_client, issued.access_token, tool="stock_adjust",
                           arguments={"sku": "SKU-1", "quantity": 500, "note": "库存盘点说明。" * 100})
    page = owner.get(_detail(big)).content.decode()
    meta = re.search(r'<p class="bh-arguments-meta bh-muted">([^<]*)<', page).group(1)
    assert meta == f"2.1\xa0KB as sent ({big.invocation.arguments_bytes} bytes) · SHA-256 "


def _arguments_lines(page: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>", "", line))
            for line in re.findall(r'<span class="bh-arguments-line">(.*?)</span></td>', page)]


def test_the_queue_tells_two_calls_of_one_tool_apart_by_their_arguments(api_client, issued, tool_route, owner):
    """Two pending refunds read the same in the queue: one had to open each (browser audit, low)."""
    for n in (1, 2):
        _mark_sensitive(pending_approval(api_client, issued.access_token, n=n), False)
    assert _arguments_lines(owner.get(QUEUE).content.decode()) == [
        'order_id=1002, amount=12.5, reason="破损退款"', 'order_id=1001, amount=12.5, reason="破损退款"']


def test_the_queue_cuts_a_long_line_and_leaves_large_arguments_to_the_approvals_page(
        api_client, issued, tool_route, owner):
    _mark_sensitive(pending_approval(api_client, issued.access_token, n=1, tool="stock_adjust",
                                     arguments={"sku": "SKU-1", "quantity": 500, "note": "盘点" * 100}), False)
    pending_approval(api_client, issued.access_token, n=2, tool="stock_adjust",
                     arguments={"sku": "SKU-2", "quantity": 500, "note": "库存盘点说明。" * 6000})
    large, long = _arguments_lines(owner.get(QUEUE).content.decode())
    assert large == "Too long for the list: open the approval."
    note = json.dumps("盘点" * 100, ensure_ascii=False)
    assert long == f'sku="SKU-1", quantity=500, note={note[:LIST_VALUE_CHARS - 1]}… (200 characters)'


def test_calls_that_differ_after_a_long_first_value_are_told_apart(api_client, issued, tool_route, owner):
    """The line was cut as a whole at 160 characters: a long first value hid the count that differed."""
    for n in (1, 2):
        _mark_sensitive(pending_approval(api_client, issued.access_token, n=n, tool="stock_adjust",
                                         arguments={"note": "m" * 2000, "sku": "SKU-1", "quantity": 500 + n}), False)
    lines = _arguments_lines(owner.get(QUEUE).content.decode())
    assert [line.split("(2,000 characters), ")[1] for line in lines] == ['sku="SKU-1", quantity=502',
                                                                    'sku="SKU-1", quantity=501']


def test_the_queue_shows_no_arguments_of_a_sensitive_tool_or_of_a_gone_provider(owner, viewer, approval):
    _mark_sensitive(approval, True)
    assert _arguments_lines(owner.get(QUEUE).content.decode()) == [
        "Marked sensitive: on the approval's page, for members who may decide."]
    _mark_sensitive(approval, False)
    assert _arguments_lines(viewer.get(QUEUE).content.decode())[0].startswith("order_id=1001, ")
    approval.invocation.provider.delete()
    assert _arguments_lines(owner.get(QUEUE).content.decode()) == [
        "The tool is no longer there: on the approval's page, for members who may decide."]
    # deleted once the result was stable: not on the approval's page either
    Invocation.objects.filter(pk=approval.invocation_id).update(frozen_arguments="")
    assert _arguments_lines(owner.get(QUEUE).content.decode()) == ["No longer kept."]


def test_the_queue_names_bidi_controls_in_arguments_and_isolates_each_pair(api_client, issued, tool_route, owner):
    """A right-to-left override in one value reordered the rest of the line: `quantity=500` could
    be drawn as `005=ytitnauq`."""
    _mark_sensitive(pending_approval(api_client, issued.access_token, n=1, tool="stock_adjust",
                                     arguments={"sku": "SKU-1\u202e0001=ytitnauq ,", "quantity": 500}), False)
    page = owner.get(QUEUE).content.decode()
    assert ('<span class="bh-arguments-line"><bdi>sku=&quot;SKU-1\\u202e0001=ytitnauq ,&quot;</bdi>, '
            "<bdi>quantity=500</bdi></span>") in page
    assert "\u202e" not in page


def test_the_approval_page_names_bidi_controls_in_the_arguments(api_client, issued, tool_route, owner):
    approval = pending_approval(api_client, issued.access_token, n=1, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "note": "restock \u202e2=ytitnauq ,", "quantity": 900})
    page = owner.get(_detail(approval)).content.decode()
    assert "&quot;note&quot;: &quot;restock \\u202e2=ytitnauq ,&quot;" in page
    whole = owner.get(f"{QUEUE}{approval.pk}/arguments/").content.decode()
    assert '"note": "restock \\u202e2=ytitnauq ,"' in whole and "\u202e" not in page + whole
    # still the JSON the SHA-256 beside it was taken of
    assert revision_of(json.loads(whole)) == approval.invocation.arguments_sha256


def test_the_arguments_line_cuts_the_pair_that_passes_its_limit_and_says_when_more_follow():
    from apps.tools.admin_approvals import arguments_line

    assert str(arguments_line({"a": 1, "b": "xyz"}, limit=9)) == "<bdi>a=1</bdi>, <bdi>b=&quot;…</bdi>"
    assert str(arguments_line({"a": 1, "b": "xyz"}, limit=5)) == "<bdi>a=1…</bdi>"
    assert str(arguments_line({"a": 1, "b": "xyz"}, limit=40)) == "<bdi>a=1</bdi>, <bdi>b=&quot;xyz&quot;</bdi>"


def test_the_queue_says_when_a_calls_arguments_are_gone_or_unreadable(owner, approval):
    _mark_sensitive(approval, False)
    Invocation.objects.filter(pk=approval.invocation_id).update(arguments_sha256="0" * 64)
    assert _arguments_lines(owner.get(QUEUE).content.decode()) == ["Cannot be read: open the approval."]
    Invocation.objects.filter(pk=approval.invocation_id).update(frozen_arguments="")
    assert _arguments_lines(owner.get(QUEUE).content.decode()) == ["No longer kept."]


def test_the_queue_reads_no_large_frozen_arguments(api_client, issued, tool_route, owner):
    """Only a value of at most LIST_ARGUMENTS_MAX_STORED characters is selected (inside a CASE on its
    size); the column itself is never in the list's SELECT."""
    pending_approval(api_client, issued.access_token, n=1, tool="stock_adjust",
                     arguments={"sku": "SKU-1", "quantity": 500, "note": "库存盘点说明。" * 6000})
    with CaptureQueriesContext(connection) as queries:
        assert owner.get(QUEUE).status_code == 200
    [listed] = [q["sql"] for q in queries.captured_queries if 'FROM "tools_approval"' in q["sql"]
                and "frozen_arguments" in q["sql"]]
    assert f'CASE WHEN OCTET_LENGTH("tools_invocation"."frozen_arguments") <= {LIST_ARGUMENTS_MAX_STORED} THEN ' \
           '"tools_invocation"."frozen_arguments" ELSE' in listed
    assert listed.count('"tools_invocation"."frozen_arguments"') == 3  # its size, the CASE's test, its branch


def test_the_queue_query_count_does_not_grow_with_rows(api_client, issued, tool_route, owner):
    _mark_sensitive(pending_approval(api_client, issued.access_token, n=1), False)  # each line is decrypted
    owner.get(QUEUE)
    with CaptureQueriesContext(connection) as baseline:
        owner.get(QUEUE)
    expected = len(baseline.captured_queries)
    for n in range(2, 6):
        pending_approval(api_client, issued.access_token, n=n)
    with CaptureQueriesContext(connection) as more:
        response = owner.get(QUEUE)
    assert len(response.context["cl"].result_list) == 5
    assert len(more.captured_queries) == expected
    assert [line.split(",")[0] for line in _arguments_lines(response.content.decode())] == [
        f"order_id={1000 + n}" for n in range(5, 0, -1)]


def test_the_queue_filters_by_status(owner, approval, api_client, issued):
    other = pending_approval(api_client, issued.access_token, n=2)
    _decide(owner, other, "denied")
    pending = owner.get(QUEUE, {"status": "pending"}).context["cl"].result_list
    denied = owner.get(QUEUE, {"status": "denied"}).context["cl"].result_list
    assert ([row.pk for row in pending], [row.pk for row in denied]) == ([approval.pk], [other.pk])


def test_the_queue_finds_an_approval_by_the_conversation_id_its_row_shows_or_its_invocation_id(
        owner, approval, api_client, issued):
    """The rows show each call's conversation id, and searching it found nothing (browser audit)."""
    other = pending_approval(api_client, issued.access_token, n=2)
    conversation = approval.invocation.run.conversation.client_conversation_id
    assert conversation != other.invocation.run.conversation.client_conversation_id  # the premise
    page = owner.get(QUEUE, {"q": conversation})
    assert [row.pk for row in page.context["cl"].result_list] == [approval.pk]
    assert "whose conversation id or invocation id is exactly what you type" in page.content.decode()
    found = owner.get(QUEUE, {"q": other.invocation.invocation_id}).context["cl"].result_list
    assert [row.pk for row in found] == [other.pk]


def test_the_pause_switch_asks_for_confirmation_first(owner, route):
    response = owner.get(f"{QUEUE}execution/{route.project.pk}/")
    assert response.status_code == 200
    assert 'id="execution-confirm"' in response.content.decode()
    route.project.refresh_from_db()
    assert route.project.tool_execution_paused is False


def test_pausing_sets_the_flag_and_the_queue_shows_a_banner(owner, route):
    response = owner.post(f"{QUEUE}execution/{route.project.pk}/", {"paused": "1"})
    assert response.status_code == 302
    route.project.refresh_from_db()
    assert route.project.tool_execution_paused is True
    assert f'data-paused-project="{route.project.slug}"' in owner.get(QUEUE).content.decode()


def test_resuming_clears_the_flag(owner, route):
    owner.post(f"{QUEUE}execution/{route.project.pk}/", {"paused": "1"})
    owner.post(f"{QUEUE}execution/{route.project.pk}/", {"paused": "0"})
    route.project.refresh_from_db()
    assert route.project.tool_execution_paused is False
    assert "data-paused-project" not in owner.get(QUEUE).content.decode()


def test_a_viewer_cannot_pause(viewer, route):
    assert viewer.post(f"{QUEUE}execution/{route.project.pk}/", {"paused": "1"}).status_code == 403
    route.project.refresh_from_db()
    assert route.project.tool_execution_paused is False


def test_an_operator_of_another_project_cannot_pause_it(outsider, route):
    assert outsider.post(f"{QUEUE}execution/{route.project.pk}/", {"paused": "1"}).status_code == 404
    route.project.refresh_from_db()
    assert route.project.tool_execution_paused is False


def test_a_pause_without_a_choice_is_refused_on_the_page(owner, route):
    response = owner.post(f"{QUEUE}execution/{route.project.pk}/", {"paused": "maybe"})
    assert response.status_code == 200
    assert "errornote" in response.content.decode()
    route.project.refresh_from_db()
    assert route.project.tool_execution_paused is False


def test_the_run_page_lists_its_invocations_with_state_and_approval(owner, approval):
    _decide(owner, approval, "denied", comment="no")
    page = owner.get(f"/admin/ledger/run/{approval.invocation.run_id}/change/").content.decode()
    assert "order_refund" in page
    assert 'data-state="denied"' in page
    assert "by <bdi>owner</bdi> at" in page
    assert "absent: never dispatched" in page


def test_the_invocation_list_is_scoped_and_filterable(owner, outsider, approval):
    assert [row.pk for row in owner.get("/admin/tools/invocation/").context["cl"].result_list] == [
        approval.invocation_id]
    assert list(outsider.get("/admin/tools/invocation/").context["cl"].result_list) == []
    assert list(owner.get("/admin/tools/invocation/", {"state__exact": "executed"}).context["cl"].result_list) == []
    assert outsider.get(f"/admin/tools/invocation/{approval.invocation_id}/change/").status_code == 404


def test_the_invocation_page_never_shows_the_frozen_arguments(owner, approval):
    page = owner.get(f"/admin/tools/invocation/{approval.invocation_id}/change/").content.decode()
    assert "kept encrypted until the result is stable" in page
    assert approval.invocation.frozen_arguments[:40] not in page
    assert "破损退款" not in page


def _arguments_field(client: Client, invocation_id) -> str:
    page = client.get(f"/admin/tools/invocation/{invocation_id}/change/").content.decode()
    return html.unescape(re.search(r'field-arguments_size.*?<div class="readonly">(.*?)</div>', page, re.S).group(1))


def test_the_invocation_page_says_why_the_arguments_are_not_kept(owner, approval):
    """ "The hub deleted them once the result was stable; the business system's answer below may
    repeat some" was said of calls never sent, and of built-in tools, which have neither."""
    size = approval.invocation.arguments_bytes
    _decide(owner, approval, "denied")
    assert _arguments_field(owner, approval.invocation_id) == (
        f"{size} bytes (not kept; the call was never sent to the business system)")
    Invocation.objects.filter(pk=approval.invocation_id).update(journal_state=Invocation.JournalState.COMPLETED)
    assert _arguments_field(owner, approval.invocation_id) == (
        f"{size} bytes (not kept: the hub deleted them once the result was stable; the business system's answer "
        "below may repeat some of them)")
    Invocation.objects.filter(pk=approval.invocation_id).update(provider_name="", provider=None)
    assert _arguments_field(owner, approval.invocation_id) == (
        f"{size} bytes (not kept: a built-in tool runs inside the hub)")


def test_the_dashboard_counts_pending_approvals(owner, approval, api_client, issued):
    pending_approval(api_client, issued.access_token, n=2)
    response = owner.get("/admin/")
    assert [board.approvals_pending for board in response.context["dashboard"]] == [2]
    assert 'data-stat="approvals_pending">2<' in response.content.decode()


def test_invocation_rows_are_not_changed_by_reading_the_console(owner, approval):
    before = Invocation.objects.values("state", "updated_at").get(pk=approval.invocation_id)
    owner.get(_detail(approval))
    owner.get(f"{QUEUE}{approval.pk}/arguments/")
    owner.get(f"/admin/tools/invocation/{approval.invocation_id}/change/")
    assert Invocation.objects.values("state", "updated_at").get(pk=approval.invocation_id) == before


def test_the_run_page_query_count_does_not_grow_with_its_invocations(api_client, issued, tool_route, owner):
    run = turn(api_client, issued.access_token, route_key="store-assistant", n=1)
    call(api_client, issued.access_token, run, route_key="store-assistant", n=1)
    url = f"/admin/ledger/run/{run['run_id']}/change/"
    owner.get(url)
    with CaptureQueriesContext(connection) as baseline:
        owner.get(url)
    expected = len(baseline.captured_queries)
    for n in range(2, 6):
        response = call(api_client, issued.access_token, run, route_key="store-assistant", n=n)
        assert response.json()["state"] == "awaiting_approval"
    with CaptureQueriesContext(connection) as more:
        page = owner.get(url).content.decode()
    assert page.count('data-state="awaiting_approval"') == 5
    assert len(more.captured_queries) == expected


def test_the_project_page_shows_the_pause_switch_instead_of_a_checkbox(owner, route):
    page = owner.get(f"/admin/projects/project/{route.project.pk}/change/").content.decode()
    assert f'href="/admin/tools/approval/execution/{route.project.pk}/?from=project"' in page
    assert 'name="tool_execution_paused"' not in page


def test_saving_the_project_form_does_not_switch_the_pause(owner, route):
    response = owner.post(f"/admin/projects/project/{route.project.pk}/change/", {
        "name": route.project.name, "slug": route.project.slug, "description": "", "tool_execution_paused": "on",
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0", "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000"})
    assert response.status_code == 302
    route.project.refresh_from_db()
    assert route.project.tool_execution_paused is False


def test_a_pause_switched_in_the_console_stops_agents_calls(owner, route, api_client, issued, tool_route):
    owner.post(f"{QUEUE}execution/{route.project.pk}/", {"paused": "1"})
    response = invoke(api_client, issued.access_token, route_key="store-assistant", n=1)
    assert response.status_code == 503
    assert response.json()["error"] == "execution_paused"
    assert Invocation.objects.count() == 0


def test_the_queue_filters_by_route_and_risk(owner, api_client, route, tool_route, store_provider):
    second = RouteFactory(project=route.project, key="second-desk", tools_direct_enabled=True)
    route_tools_set(route=second, sources=[SourceSpec(provider=store_provider, allowed_tools=STORE_TOOLS)],
                    write_tools=["stock_adjust", "order_refund"], tools_direct_enabled=True)
    agent = session_for(AgentClientFactory(project=route.project, allowed_routes=[route.key, second.key]),
                        principal=PRINCIPAL)
    first = pending_approval(api_client, agent.access_token, n=1)
    other = pending_approval(api_client, agent.access_token, route_key="second-desk", n=2)

    def listed(**params: str) -> list:
        return [row.pk for row in owner.get(QUEUE, params).context["cl"].result_list]

    assert listed(invocation__route__id__exact=str(route.pk)) == [first.pk]
    assert listed(invocation__route__id__exact=str(second.pk)) == [other.pk]
    assert (listed(risk__exact="high"), listed(risk__exact="low")) == ([other.pk, first.pk], [])


def test_a_settled_calls_arguments_are_no_longer_shown(owner, approval):
    _decide(owner, approval, "denied")
    whole = owner.get(f"{QUEUE}{approval.pk}/arguments/")
    assert whole.status_code == 410
    assert "No longer kept" in whole.content.decode()
    assert 'id="arguments-absent"' in owner.get(_detail(approval)).content.decode()


def test_the_approval_page_shows_its_times_in_the_console_time_zone_and_names_it(owner, approval, settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    asked = timezone.localtime(approval.created_at, timezone.get_fixed_timezone(8 * 60))
    page = owner.get(_detail(approval)).content.decode()
    assert f"<dt>Asked at</dt><dd>{asked:%Y-%m-%d %H:%M:%S} CST (" in page


def test_the_invocation_timings_are_in_the_console_time_zone(owner, approval, settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    asked = timezone.localtime(approval.invocation.created_at, timezone.get_fixed_timezone(8 * 60))
    page = owner.get(f"/admin/tools/invocation/{approval.invocation.pk}/change/").content.decode()
    assert f"asked {asked:%H:%M:%S}.{asked.microsecond // 1000:03d} CST" in page


def test_a_sent_call_names_the_headers_the_business_system_knows_it_by(owner, approval):
    invocation = approval.invocation
    page = owner.get(f"/admin/tools/invocation/{invocation.pk}/change/").content.decode()
    assert invocation.idempotency_key not in page
    assert re.search(r'field-sent_as">.*?not sent', page, re.S)

    Invocation.objects.filter(pk=invocation.pk).update(journal_state=Invocation.JournalState.UNCERTAIN,
                                                       state=Invocation.State.RECONCILIATION_REQUIRED)
    page = owner.get(f"/admin/tools/invocation/{invocation.pk}/change/").content.decode()
    assert f"<code>X-Bailing-Job-Id: {invocation.pk}</code>" in page
    assert f"<code>X-Bailing-Idempotency-Key: {invocation.idempotency_key}</code>" in page


def _mark_sensitive(approval: Approval, sensitive: bool) -> None:
    from apps.tools.models import Tool

    tool = Tool.objects.get(provider_id=approval.invocation.provider_id, name=approval.tool_name)
    tool.compiled = {**tool.compiled, "audit_sensitive": sensitive}
    tool.save(update_fields=["compiled"])


def test_a_viewer_reads_the_arguments_of_a_tool_not_marked_sensitive(viewer, approval):
    _mark_sensitive(approval, False)
    assert "&quot;order_id&quot;: 1001" in viewer.get(_detail(approval)).content.decode()
    arguments = viewer.get(f"{QUEUE}{approval.pk}/arguments/")
    assert arguments.status_code == 200
    assert '"order_id": 1001' in arguments.content.decode()


def test_the_arguments_of_a_sensitive_tool_show_only_to_members_who_may_decide(owner, viewer, approval):
    _mark_sensitive(approval, True)
    page = viewer.get(_detail(approval)).content.decode()
    assert "order_id" not in page
    assert "Hidden from you: the tool marks its arguments sensitive (audit.sensitive)" in page
    assert viewer.get(f"{QUEUE}{approval.pk}/arguments/").status_code == 403
    assert "&quot;order_id&quot;: 1001" in owner.get(_detail(approval)).content.decode()
    assert '"order_id": 1001' in owner.get(f"{QUEUE}{approval.pk}/arguments/").content.decode()


def test_the_arguments_of_a_deleted_providers_call_show_only_to_members_who_may_decide(owner, viewer, approval):
    _mark_sensitive(approval, False)
    approval.invocation.provider.delete()
    invocation = Invocation.objects.get(pk=approval.invocation_id)
    assert (invocation.provider_id, invocation.provider_name != "") == (None, True)
    assert "Hidden from you" in viewer.get(_detail(approval)).content.decode()
    assert viewer.get(f"{QUEUE}{approval.pk}/arguments/").status_code == 403
    assert "&quot;order_id&quot;: 1001" in owner.get(_detail(approval)).content.decode()


INVOCATIONS = "/admin/tools/invocation/"


def _called(invocation: Invocation, *names: str, project: Project | None = None) -> None:
    """More calls like `invocation` (reached the real way), of other tools or in another project."""
    fields = {field.attname: getattr(invocation, field.attname) for field in Invocation._meta.concrete_fields
              if not field.primary_key and field.attname not in ("idempotency_key", "created_at", "updated_at")}
    for index, name in enumerate(names):
        Invocation.objects.create(**{**fields, "tool_name": name, "idempotency_key": f"{name}-{index}-{project}",
                                     "project_id": project.pk if project else invocation.project_id})


def _tool_names(response) -> list[str]:
    spec = next(spec for spec in response.context["cl"].filter_specs if spec.title == "tool name")
    return [name for name, _ in spec.lookup_choices]


def test_the_tool_filter_offers_the_names_called_in_the_operators_projects(owner, approval):
    _called(approval.invocation, "stock_adjust", "order_status")
    _called(approval.invocation, "elsewhere_only", project=ProjectFactory())
    assert _tool_names(owner.get(INVOCATIONS)) == ["order_refund", "order_status", "stock_adjust"]
    listed = owner.get(INVOCATIONS, {"tool_name": "stock_adjust"}).context["cl"].result_list
    assert [row.tool_name for row in listed] == ["stock_adjust"]


def test_the_tool_filter_reads_no_distinct_over_the_invocations(owner, approval):
    """Django's filter listed DISTINCT tool_name over every call the operator may see, a scan that
    grew with the ledger; the names are walked down the (project, tool_name) index instead."""
    with CaptureQueriesContext(connection) as queries:
        assert owner.get(INVOCATIONS).status_code == 200
    assert not [query["sql"] for query in queries if query["sql"].startswith("SELECT DISTINCT")
                and '"tools_invocation"."tool_name"' in query["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN SELECT tool_name FROM tools_invocation WHERE project_id = %s AND tool_name > '' "
                       "ORDER BY tool_name LIMIT 1", [approval.invocation.project_id])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "invocation_project_tool" in plan and "Sort" not in plan


def test_past_thirty_tool_names_the_filter_is_a_drop_down_keeping_the_lists_parameters(owner, approval):
    _called(approval.invocation, *(f"tool_{n:02d}" for n in range(30)))
    html = owner.get(INVOCATIONS, {"state__exact": "awaiting_approval"}).content.decode()
    form = re.search(r'<form method="get" class="bh-filter-select">.*?</form>', html, re.S).group(0)
    assert '<select name="tool_name"' in form
    assert '<input type="hidden" name="state__exact" value="awaiting_approval">' in form
    assert '<option value="tool_29">tool_29</option>' in form
    # The drop-down's "All" sends an empty name: the whole list, not the calls of a tool named "".
    all_tools = owner.get(INVOCATIONS, {"tool_name": ""}).context["cl"]
    assert len(all_tools.result_list) == 31


@pytest.mark.parametrize(("query", "listed"), [({"tool_name": "order_refund\x00"}, 0), ({"tool_name": "no_such"}, 0),
                                               ({"tool_name": "order_refund", "p": "9" * 30}, 1)])
def test_a_hostile_tool_filter_is_no_500(owner, approval, query, listed):
    response = owner.get(INVOCATIONS, query)
    assert (response.status_code, len(response.context["cl"].result_list)) == (200, listed)


def test_a_tool_name_with_a_nul_says_so(owner, approval):
    response = owner.get(INVOCATIONS, {"tool_name": "order_refund\x00"})
    assert "No tool name holds a NUL character: no call is listed." in response.content.decode()
