"""Console lists and the knowledge base's documents table in Chromium at 1366×900, the admin's
sidebar and filters open, as a project owner: every column and row action is inside its box, no
sideways scrolling. A browser audit found Business status, Journal state, Approval, Duration ms and
Run of the Invocations list behind a scrollbar (only "BUSI" showed), and the last column of the Runs
(Prepare ms), Agent authorizations (Decided at) and Routes (Knowledge enabled, Updated at) lists cut
off, and a failed document's Retry button clipped to "Re"; a later one the Conversations list's Last
message at and Created at ("LA", "De") and the Tasks list's Created ("CREA"). One row of each, seeded
the real way (an agent's approved call of a high-risk tool, then executed; a task of the agent's
session), as wide as their cells usually get. Screenshots land in /tmp/shots/list-widths-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.knowledge.models import Document
from apps.projects.models import Project
from apps.tasks.services import MemberSpec, PolicySpec, task_create
from apps.tools.approvals import approval_decide
from apps.tools.models import Approval, Invocation
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.browser.layout import assert_changelist_fits
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.routes.factories import RouteFactory
from tests.tools.approval_helpers import pending_approval
from tests.tools.factories import STORE_SPEC, ToolProviderFactory

SHOTS = Path("/tmp/shots")
FAILED_FILE = "after-sales-returns-and-refunds-policy-2026.pdf"
# A failure another attempt may get past, so its row offers Retry (a conversion failure offers advice).
FAILED_REASON = ("The embeddings endpoint did not answer within 30 s after 3 attempts; retry the document once "
                 "it answers again.")


@pytest.fixture
def seeded(project, operator):
    """A route drawing the store tools, an agent's approved and executed refund on it (an
    authorization, a conversation, a run, an invocation), a task of the agent's session, and a
    knowledge base with a failed document and one awaiting confirmation."""
    route = RouteFactory(project=project, key="store-assistant", name="Store assistant", tools_direct_enabled=True,
                         knowledge_enabled=True)
    provider = ToolProviderFactory(project=project, name="store", spec=STORE_SPEC)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["order_refund"])],
                    write_tools=["order_refund"], tools_direct_enabled=True)
    agent = session_for(AgentClientFactory(project=project, name="Counter assistant", app_id="counter-app",
                                           allowed_routes=[route.key]), principal=PRINCIPAL)
    approval = pending_approval(APIClient(), agent.access_token)
    approval_decide(approval_id=approval.pk, projects=Project.objects.all(), decision_id="d-1", decision="approved",
                    comment="ok", approver=operator)
    # As the agent's resume leaves it once the business system answered (the list reads these fields).
    now = timezone.now()
    Invocation.objects.filter(pk=approval.invocation_id).update(
        state=Invocation.State.EXECUTED, journal_state=Invocation.JournalState.COMPLETED, business_status=200,
        result={"refund_id": "R-1"}, dispatched_at=now, responded_at=now, settled_at=now, duration_ms=1234)
    Approval.objects.filter(pk=approval.pk).update(used_at=now)
    task_create(project=project, user=operator, request_id="rq-widths", name="Restock shelf 4 after the audit",
                members=[MemberSpec(session_id=str(agent.session.pk), workspace=route.key,
                                    client_conversation_id="restock-4", allowed_tools=("order_refund",))],
                policy=PolicySpec(max_write_calls=20, max_concurrent=4))
    kb = KnowledgeBaseFactory(project=project, name="After-sales handbook")
    Document.objects.create(knowledge_base=kb, filename=FAILED_FILE, file_type="pdf", size=10, content_hash="0" * 64,
                            status=Document.Status.FAILED, attempts=3, error_code="embedding_failed",
                            error_message=FAILED_REASON, failed_at=now)
    # Its badge and its progress bar are kept on one line: with it, the table ran past its box.
    Document.objects.create(knowledge_base=kb, filename="returns-faq.md", file_type="markdown", size=10,
                            content_hash="1" * 64, status=Document.Status.AWAITING_CONFIRMATION, progress_done=12,
                            progress_total=12, attempts=1)
    return kb


LISTS = [
    ("invocations", "/admin/tools/invocation/"),
    ("runs", "/admin/ledger/run/"),
    ("agent-authorizations", "/admin/agent_auth/agentauthorization/"),
    ("routes", "/admin/routes/route/"),
    ("conversations", "/admin/ledger/conversation/"),
    ("tasks", "/admin/tasks/task/"),
]


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"list-widths-{name}.png"), full_page=True)


def test_every_column_and_row_action_fits_at_1366(logged_in_page, seeded):
    page = logged_in_page
    page.set_viewport_size({"width": 1366, "height": 900})
    overflowing = []
    for name, path in LISTS:
        page.goto(path)
        assert page.locator("#nav-sidebar").is_visible()
        assert page.locator("#changelist-filter").is_visible()
        assert page.locator("#result_list tbody tr").count() == 1, name
        _shot(page, name)
        last = page.locator("#result_list thead th").last.inner_text().strip().lower()
        try:
            assert_changelist_fits(page, last_header=last)
        except AssertionError:
            overflowing.append(name)

    page.goto(f"/admin/knowledge/knowledgebase/{seeded.pk}/change/")
    row = page.locator("#kb-documents-table tbody tr", has_text=FAILED_FILE)
    assert row.get_attribute("data-status") == "failed"
    row.scroll_into_view_if_needed()
    _shot(page, "kb-documents")
    box = page.locator("#kb-documents .bh-scroll")
    retry = row.locator("input[type=submit][value=Retry]")
    assert retry.is_visible()
    inside = page.evaluate("""([box, button]) => {
      const b = box.getBoundingClientRect(), r = button.getBoundingClientRect();
      return r.left >= b.left && r.right <= b.right && r.top >= b.top && r.bottom <= b.bottom
        && box.scrollWidth <= box.clientWidth;
    }""", [box.element_handle(), retry.element_handle()])
    if not inside:
        overflowing.append("kb-documents")
    assert overflowing == [], overflowing


CUE = "document.querySelector('#changelist .bh-scroll-cue')"


def test_a_list_wider_than_a_phone_says_it_scrolls_sideways(logged_in_page, seeded):
    """At 390 px the Conversations, Tool providers and Tasks lists scrolled inside their box with
    Messages, Last message and Created off-screen and nothing saying so (browser audit, low)."""
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/admin/ledger/conversation/")
    cue = page.locator("#changelist .bh-scroll-cue")
    assert cue.inner_text() == "The table is wider than the screen: scroll it sideways for more columns →"
    box = page.locator("#changelist .results")
    box.evaluate("e => { e.scrollLeft = e.scrollWidth / 3; }")
    page.wait_for_function(f"() => {CUE}.textContent.startsWith('← More columns on both')")
    box.evaluate("e => { e.scrollLeft = e.scrollWidth; }")
    page.wait_for_function(f"() => {CUE}.textContent === '← More columns to the left'")
    _shot(page, "conversations-390")
    assert box.get_attribute("tabindex") is None  # its links take the focus, and scroll into sight
    page.set_viewport_size({"width": 1366, "height": 900})
    page.wait_for_function(f"() => {CUE}.hidden")
    assert not cue.is_visible()
    # The table grows with no window resize (a live page adds a wide row): the cue follows.
    page.evaluate("() => { const d = document.createElement('div'); d.style.width = '3000px'; d.textContent = 'wide';"
                  " document.querySelector('#result_list td').appendChild(d); }")
    page.wait_for_function(f"() => !{CUE}.hidden")
