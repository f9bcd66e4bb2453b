"""What the agent did with tools, in the ledger: the conversation's Runs table sums up each run's tool
calls and their approvals, and the run page shows its calls above the frozen context. Before, the
conversation page showed none of them, and the run's calls came about 5000 px down its page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.ledger.models import Run
from apps.projects.models import Membership
from apps.tools.approvals import approval_decide
from apps.tools.models import Approval
from tests.ledger.helpers import complete_run
from tests.projects.factories import MembershipFactory
from tests.tools.approval_helpers import call, turn

pytest_plugins = ["tests.tools.surface_fixtures"]

LARGE_STOCK_CHANGE = {"sku": "SKU-1", "quantity": 500}  # over the store spec's approval rule (quantity > 100)


@pytest.fixture
def viewer(route) -> Client:
    client = Client()
    client.force_login(MembershipFactory(project=route.project, role=Membership.Role.VIEWER).user)
    return client


@pytest.fixture
def run(api_client, issued, route, tool_route) -> Run:
    """One turn with two calls, both held for approval: a refund the operator then denied, and a large
    stock change still waiting."""
    opened = turn(api_client, issued.access_token, route_key=route.key, n=1)
    refund = call(api_client, issued.access_token, opened, route_key=route.key, n=1).json()
    stock = call(api_client, issued.access_token, opened, route_key=route.key, n=2, tool="stock_adjust",
                 arguments=LARGE_STOCK_CHANGE).json()
    assert (refund["state"], stock["state"]) == ("awaiting_approval", "awaiting_approval")
    approval_decide(approval_id=refund["approval_id"], projects=[route.project], decision_id="console:1",
                    decision="denied")
    return Run.objects.get(pk=opened["run_id"])


def _conversation_page(client: Client, run: Run) -> str:
    return client.get(f"/admin/ledger/conversation/{run.conversation_id}/change/").content.decode()


def test_the_runs_table_sums_up_a_runs_tool_calls_by_state_with_their_approvals_and_tools(run, viewer):
    assert ('2 tool calls: 1 awaiting approval, 1 denied<br>'
            '<span class="bh-muted">2 approvals: 1 pending, 1 denied</span><br>'
            '<span class="bh-muted">order_refund, stock_adjust</span>') in _conversation_page(viewer, run)


def test_an_approval_nobody_decided_before_its_expiry_is_summed_up_as_expired(run, viewer):
    Approval.objects.filter(status=Approval.Status.PENDING).update(expires_at=timezone.now() - timedelta(minutes=1))
    assert "2 approvals: 1 denied, 1 expired" in _conversation_page(viewer, run)


def test_a_run_without_tool_calls_says_so(api_client, issued, route, viewer):
    opened = turn(api_client, issued.access_token, route_key=route.key, n=1)
    page = _conversation_page(viewer, Run.objects.get(pk=opened["run_id"]))
    assert '<p><span class="bh-muted">no tool calls</span></p>' in page


def test_the_runs_table_shows_each_revision_by_its_first_12_characters_and_the_whole_in_its_title(run, viewer):
    page = _conversation_page(viewer, run)
    for revision in (run.profile_revision, run.capability_revision):
        assert f'<code title="{revision}">{revision[:12]}…</code>' in page
        assert f">{revision}<" not in page


def test_the_conversation_page_reads_its_runs_tool_calls_with_no_query_per_run(api_client, issued, route,
                                                                                tool_route, viewer):
    def turn_with_a_refund(n: int) -> None:
        opened = turn(api_client, issued.access_token, route_key=route.key, n=n, conversation="refunds")
        assert call(api_client, issued.access_token, opened, route_key=route.key, n=n).status_code == 200
        complete_run(api_client, issued.access_token, opened["run_id"], n)

    turn_with_a_refund(1)
    run = Run.objects.get()
    _conversation_page(viewer, run)  # the first page of a login also reads and saves its session
    with CaptureQueriesContext(connection) as one:
        _conversation_page(viewer, run)
    turn_with_a_refund(2)
    turn_with_a_refund(3)
    with CaptureQueriesContext(connection) as three:
        page = _conversation_page(viewer, run)
    assert (page.count("1 tool call: 1 awaiting approval<br>"), len(three)) == (3, len(one))


def test_the_run_page_shows_its_tool_calls_between_its_facts_and_its_frozen_context(run, viewer):
    page = viewer.get(f"/admin/ledger/run/{run.pk}/change/").content.decode()
    facts, calls, context = (page.index(mark) for mark in ('class="form-row field-request_hash"',
                                                           'id="invocations-group"', 'class="bh-context"'))
    assert facts < calls < context
