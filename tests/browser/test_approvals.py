"""The approval queue in a real browser, as the seeded operator: an agent asks the demo business
system for a refund through the hub, the call waits for approval, the operator finds it from the
dashboard, reads it, approves it with a comment; the agent's resume then executes it once, and the
run's page in the ledger shows the journal. Screenshots land in /tmp/shots/."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from uuid import UUID

import pytest
from rest_framework.test import APIClient

from apps.demo_business.models import Refund
from apps.tools.approvals import approval_decide
from apps.tools.models import Approval, Invocation, InvocationJournalEntry, Tool
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_delete, provider_reimport
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, bearer, session_for
from tests.browser.contrast import contrast_ratio
from tests.browser.layout import assert_changelist_fits
from tests.demo_business.conftest import TEST_SECRET, mount
from tests.routes.factories import RouteFactory
from tests.tools.approval_helpers import INVOKE_URL, invocation_id, pending_approval
from tests.tools.factories import STORE_SPEC, ToolProviderFactory

DEMO_SPEC = (Path(__file__).resolve().parents[2] / "apps" / "demo_business" / "openapi.json").read_bytes()
SHOTS = Path("/tmp/shots")
REFUND = {"order_id": "SO-240002", "amount": 45.5, "reason": "Bottle arrived dented"}


@pytest.fixture
def demo_mounted(settings):
    original = settings.DEMO_BUSINESS_ENABLED
    settings.DEMO_BUSINESS_SIGNING_SECRET = TEST_SECRET
    mount(settings, enabled=True)
    yield
    mount(settings, enabled=original)


@pytest.fixture
def route(project):
    return RouteFactory(project=project, key="store-assistant", name="门店助手", tools_direct_enabled=True)


@pytest.fixture
def agent(route):
    return session_for(AgentClientFactory(project=route.project, name="Counter assistant", app_id="counter-app",
                                          allowed_routes=[route.key]), principal=PRINCIPAL)


@pytest.fixture
def demo_route(route, live_server, demo_mounted):
    provider = ToolProviderFactory(project=route.project, name="demo-shop", base_url=f"{live_server.url}/demo-business",
                                   secret=TEST_SECRET, spec=DEMO_SPEC)
    return route_tools_set(route=route, sources=[SourceSpec(provider=provider,
                                                            allowed_tools=["get_order_status", "issue_refund"])],
                           write_tools=["issue_refund"], tools_direct_enabled=True)


@pytest.fixture
def store_route(route):
    provider = ToolProviderFactory(project=route.project, name="store", spec=STORE_SPEC)
    return route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["stock_adjust"])],
                           write_tools=["stock_adjust"], tools_direct_enabled=True)


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_an_operator_approves_a_refund_and_the_agent_resume_executes_it_once(
        logged_in_page, demo_route, agent, celery_worker_session):
    page = logged_in_page
    api = APIClient()
    approval = pending_approval(api, agent.access_token, tool="issue_refund", arguments=REFUND)
    assert approval.prompt == "Approve this refund to the customer's original payment method?"

    page.goto("/admin/")
    tile = page.locator('[data-stat="approvals_pending"]')
    assert tile.inner_text() == "1"
    _shot(page, "dashboard-approvals")
    tile.click()
    page.wait_for_url(re.compile(r".*/admin/tools/approval/\?.*status=pending"))
    row = page.locator("#result_list tbody tr")
    assert row.count() == 1
    assert "issue_refund" in row.inner_text()
    assert "ada@example.com" in row.inner_text()
    _shot(page, "approvals-queue")

    row.locator("a", has_text="issue_refund").click()
    page.wait_for_url(re.compile(rf".*/admin/tools/approval/{approval.pk}/change/"))
    assert page.locator("#approval-prompt").inner_text() == approval.prompt
    assert json.loads(page.locator("#arguments-json").inner_text()) == REFUND
    _shot(page, "approval-detail")

    page.fill("textarea[name=comment]", "订单 SO-240002 破损，同意退款。")
    page.click("#approve-button")
    page.wait_for_url(re.compile(rf".*/admin/tools/approval/{approval.pk}/change/"))
    assert "Approved." in page.locator(".messagelist").inner_text()
    assert page.locator("#decision-approver").inner_text() == "operator"
    assert page.locator("#decision-comment").inner_text() == "订单 SO-240002 破损，同意退款。"
    assert page.locator("#approve-button").count() == 0
    _shot(page, "approval-decided")

    resumed = api.generic("POST", f"{INVOKE_URL}/{invocation_id(1)}/resume", "{}", content_type="application/json",
                          **bearer(agent.access_token))
    assert resumed.status_code == 200, resumed.content
    assert (resumed.json()["state"], resumed.json()["business_status"]) == ("executed", 200)
    assert Refund.objects.filter(order_id="SO-240002").count() == 1

    page.goto(f"/admin/ledger/run/{approval.invocation.run_id}/change/")
    inline = page.locator('[data-state="executed"]')
    assert inline.count() == 1
    journal = [item.get_attribute("data-journal") for item in page.locator("[data-journal]").all()]
    assert journal == ["dispatching", "response_recorded", "completed"]
    assert "by <bdi>operator</bdi> at" in page.content()
    _shot(page, "run-invocations")

    page.goto(f"/admin/tools/invocation/{approval.invocation_id}/change/")
    assert page.locator('[data-state="executed"]').count() == 1
    # frozen arguments are deleted once the result is stable; the result (a business echo) may repeat them
    assert page.locator(".field-arguments_size .readonly").inner_text().endswith(
        " bytes (not kept: the hub deleted them once the result was stable; the business system's answer below "
        "may repeat some of them)")
    _shot(page, "invocation-detail")
    # At 390 px the journal's detail (the dispatch target) was cut off at the row's edge, with no scroll.
    page.set_viewport_size({"width": 390, "height": 844})
    journal = page.locator(".bh-journal-table")
    journal.scroll_into_view_if_needed()
    _shot(page, "invocation-journal-390")
    assert journal.evaluate("""t => [...t.querySelectorAll('td')].every(td =>
      td.getBoundingClientRect().right <= window.innerWidth && td.scrollWidth <= td.clientWidth)""")
    assert journal.evaluate(
        "t => t.getBoundingClientRect().right <= t.closest('.form-row').getBoundingClientRect().right")


def test_large_frozen_arguments_expand_on_demand(logged_in_page, store_route, agent):
    page = logged_in_page
    note = "".join(f"第{n}行：盘点差异说明。\n" for n in range(1500))
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500, "note": note})
    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    preview = page.locator("#arguments-json")
    assert preview.get_attribute("data-expanded") == "false"
    assert len(preview.inner_text()) <= 4096
    _shot(page, "approval-arguments-preview")

    page.click("#arguments-expand")
    page.wait_for_selector('#arguments-json[data-expanded="true"]')
    assert json.loads(preview.inner_text())["note"] == note
    assert page.locator("#arguments-status").inner_text() == "Showing all of it."
    _shot(page, "approval-arguments-expanded")


def test_an_operator_pauses_and_resumes_tool_execution(logged_in_page, project, store_route, agent):
    page = logged_in_page
    pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                     arguments={"sku": "SKU-1", "quantity": 500})
    page.goto("/admin/tools/approval/")
    page.locator(f'#execution-panel tr[data-project="{project.slug}"] a.button').click()
    _shot(page, "execution-confirm")
    page.click("#execution-confirm")
    page.wait_for_url(re.compile(r".*/admin/tools/approval/$"))
    banner = page.locator(f'[data-paused-project="{project.slug}"]')
    assert "Tool execution is paused for Bailing Retail" in banner.inner_text()
    project.refresh_from_db()
    assert project.tool_execution_paused is True
    _shot(page, "approvals-paused")

    page.goto("/admin/")
    assert page.locator('[data-stat="tool_execution_paused"]').count() == 1

    page.goto("/admin/tools/approval/")
    page.locator(f'#execution-panel tr[data-project="{project.slug}"] a.button').click()
    page.click("#execution-confirm")
    page.wait_for_url(re.compile(r".*/admin/tools/approval/$"))
    assert page.locator("[data-paused-project]").count() == 0
    project.refresh_from_db()
    assert project.tool_execution_paused is False
    assert Invocation.objects.count() == 1
    assert Approval.objects.get().status == "pending"


# The grid's text without the ids kept beside the names as secondary text (.bh-id), for copying.
_MAIN_TEXT = """dd => { const ids = [...dd.querySelectorAll('.bh-id')];
  ids.forEach(e => { e.style.display = 'none'; });
  const text = dd.innerText.trim();
  ids.forEach(e => { e.style.display = ''; });
  return text; }"""
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_the_approval_page_names_the_route_the_tool_the_agent_and_the_run(logged_in_page, store_route, agent):
    """An approver read the route's key, the agent's app id and the run's UUID where people's names
    belong; the ids stay as smaller secondary text, for support."""
    page = logged_in_page
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500})
    run = approval.invocation.run
    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    _shot(page, "approval-names")

    route = page.locator("#approval-route")
    assert page.evaluate(_MAIN_TEXT, route.element_handle()) == "Bailing Retail · 门店助手"
    assert route.locator(".bh-id").inner_text() == "store-assistant"
    tool = page.locator("#approval-tool")
    assert page.evaluate(_MAIN_TEXT, tool.element_handle()) == "stock_adjust from store\nAdjust stock"
    tool_pk = Tool.objects.get(name="stock_adjust").pk
    assert tool.locator("a").get_attribute("href") == f"/admin/tools/tool/{tool_pk}/change/"
    agent_row = page.locator("#approval-agent")
    assert page.evaluate(_MAIN_TEXT, agent_row.element_handle()) == "Counter assistant on Ada's laptop"
    assert agent_row.locator(".bh-id").inner_text() == "counter-app"

    run_row = page.locator("#approval-run")
    run_text = page.evaluate(_MAIN_TEXT, run_row.element_handle())
    assert run_text.startswith("Turn of ") and "conversation approvals-1" in run_text
    assert UUID(run_row.locator(".bh-id").inner_text()) == run.pk
    assert run_row.locator("a").first.get_attribute("href") == f"/admin/ledger/run/{run.pk}/change/"
    grid = page.locator(".bh-approval-grid dd").element_handles()
    assert [text for dd in grid if _UUID.search(text := page.evaluate(_MAIN_TEXT, dd))] == []


def test_the_queue_names_the_tool_the_agent_and_the_route_and_fits_at_1366(logged_in_page, store_route, agent):
    """The queue read the route's key and a cut run id where the approval's page names them; the ids
    stay as smaller secondary text. Three rows still fit beside the sidebar and the filters."""
    page = logged_in_page
    page.set_viewport_size({"width": 1366, "height": 768})
    approvals = [pending_approval(APIClient(), agent.access_token, tool="stock_adjust", n=n,
                                  arguments={"sku": f"SKU-{n}", "quantity": 500}) for n in (1, 2, 3)]
    page.goto("/admin/tools/approval/")
    _shot(page, "approvals-queue-names-1366")
    assert page.locator("#result_list tbody tr").count() == 3

    row = page.locator("#result_list tbody tr").first
    run = approvals[2].invocation.run
    assert page.evaluate(_MAIN_TEXT, row.locator(".field-tool").element_handle()) == "stock_adjust\nfrom store"
    agent_line = row.locator(".bh-agent")
    assert page.evaluate(_MAIN_TEXT, agent_line.element_handle()) == "Counter assistant on Ada's laptop"
    assert agent_line.locator(".bh-id").inner_text() == "counter-app"
    route_line = row.locator(".bh-route")
    assert page.evaluate(_MAIN_TEXT, route_line.element_handle()) == "Bailing Retail · 门店助手"
    assert route_line.locator(".bh-id").inner_text() == "store-assistant"
    run_line = row.locator(".bh-run")
    assert run_line.inner_text() == "Run in conversation approvals-3"
    assert run_line.locator("a").get_attribute("href") == f"/admin/ledger/run/{run.pk}/change/"
    assert str(run.pk) in run_line.locator("a").get_attribute("title")
    cells = row.locator("td").element_handles()
    assert [text for td in cells if _UUID.search(text := page.evaluate(_MAIN_TEXT, td))] == []

    assert_changelist_fits(page, last_header="asked · expires")
    # Status and risk share a cell: each badge says which it is ("pending" and "medium" were two
    # amber badges side by side).
    assert row.locator(".field-status_and_risk").inner_text().split("\n") == ["pending", "medium risk"]
    # The prompt is what the approver reads: at 1366 it was the narrowest text column (~100 px, a
    # word or two a line) beside the agent's ids (browser audit, low). It is now the widest.
    widths = {name: row.locator(f".field-{name}").evaluate("e => e.getBoundingClientRect().width")
              for name in ("tool", "prompt_text", "asked_by", "age")}
    assert widths["prompt_text"] >= 200, widths
    assert widths["prompt_text"] == max(widths.values()), widths


def test_an_approval_whose_tool_changed_says_the_call_can_no_longer_run(logged_in_page, store_route, agent):
    """A re-import moved the tool's path while its call waited: the page said "exactly these run if
    approved" and, once approved, "the agent's next resume executes the frozen arguments once",
    while the resume is refused with capability_changed and nothing ever runs."""
    page = logged_in_page
    api = APIClient()
    approval = pending_approval(api, agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500})
    provider_reimport(provider=approval.invocation.provider,
                      spec=STORE_SPEC.replace(b"/stock/adjustments:", b"/stock/corrections:"))

    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    blocked = page.locator("#approval-blocked")
    assert blocked.get_attribute("data-blocker") == "capability_changed"
    assert "can no longer run" in blocked.inner_text() and "Deny it" in blocked.inner_text()
    assert "exactly these run if approved" not in page.locator("#approval-arguments").inner_text()
    _shot(page, "approval-tool-changed")
    # Approving is not the green, first choice there: it says it runs nothing.
    approve = page.locator("#approve-button")
    assert (approve.inner_text(), approve.get_attribute("class")) == ("Approve anyway (runs nothing now)", "button")

    page.click("#approve-button")
    page.wait_for_url(re.compile(rf".*/admin/tools/approval/{approval.pk}/change/"))
    assert "cannot be" in page.locator("#decision-unusable").inner_text()
    assert "Not used yet" not in page.locator("#decision").inner_text()
    resumed = api.generic("POST", f"{INVOKE_URL}/{invocation_id(1)}/resume", "{}", content_type="application/json",
                          **bearer(agent.access_token))
    assert (resumed.status_code, resumed.json()["error"]) == (409, "capability_changed")
    # The refused resume settles the approved call: it never reads as still waiting to be used.
    page.reload()
    assert "Never used" in page.locator("#decision-unusable").inner_text()
    assert page.locator("#approval-blocked").count() == 0


def test_an_approval_whose_provider_was_deleted_says_the_call_can_no_longer_run(logged_in_page, store_route, agent):
    page = logged_in_page
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500})
    provider_delete(provider=approval.invocation.provider)

    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    assert page.locator("#approval-blocked").get_attribute("data-blocker") == "tool_not_found"
    assert page.locator("#approve-button").count() == 1


def test_an_approval_whose_tool_did_not_change_shows_no_warning(logged_in_page, store_route, agent):
    page = logged_in_page
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500})
    # Rewording is not a change of execution (contracts §2): the approved call still runs.
    provider_reimport(provider=approval.invocation.provider,
                      spec=STORE_SPEC.replace(b"summary: Adjust stock", b"summary: Adjust stock on hand"))
    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    assert page.locator("#approval-blocked").count() == 0
    assert "exactly these run if approved" in page.locator("#approval-arguments").inner_text()


def test_a_reimport_preview_names_the_waiting_calls_it_would_strand(logged_in_page, store_route, agent, tmp_path):
    """The preview listed the changed tools and routes, but not that a call waiting for approval
    would never run once the re-import moved its tool's path."""
    page = logged_in_page
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500})
    moved = tmp_path / "store.yaml"
    moved.write_bytes(STORE_SPEC.replace(b"/stock/adjustments:", b"/stock/corrections:"))
    reworded = tmp_path / "store-reworded.yaml"
    reworded.write_bytes(STORE_SPEC.replace(b"summary: Adjust stock", b"summary: Adjust stock on hand"))
    provider = approval.invocation.provider

    page.goto(f"/admin/tools/toolprovider/{provider.pk}/change/")
    page.click("text=Re-import")
    page.set_input_files("input[name=spec_file]", str(moved))
    page.click("input[name=_preview]")
    assert "stock_adjust (1)" in page.locator("#compile-stranded").inner_text()
    _shot(page, "reimport-stranded")

    if not page.locator("input[name=spec_file]").is_visible():  # the section stays open after a preview
        page.click("text=Re-import")
    page.set_input_files("input[name=spec_file]", str(reworded))
    page.click("input[name=_preview]")
    assert "Changed: stock_adjust" in page.locator("#compile-diff").inner_text()
    assert page.locator("#compile-stranded").count() == 0
    provider.refresh_from_db()
    assert provider.spec_sha256 == hashlib.sha256(STORE_SPEC).hexdigest()


def test_deleting_a_provider_names_the_waiting_calls_it_would_strand(logged_in_page, store_route, agent):
    page = logged_in_page
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500})
    page.goto(f"/admin/tools/toolprovider/{approval.invocation.provider_id}/delete/")
    assert "stock_adjust (1)" in page.locator("#delete-stranded").inner_text()
    _shot(page, "provider-delete-stranded")


def test_saving_a_new_base_url_names_the_waiting_calls_it_strands(logged_in_page, store_route, agent):
    """A new base URL changes how every tool is sent, so a waiting call can no longer run; the
    change form has no preview for it, and saving said only "changed successfully"."""
    page = logged_in_page
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500})
    provider = approval.invocation.provider
    page.goto(f"/admin/tools/toolprovider/{provider.pk}/change/")
    page.click("input[name=_continue]")
    assert "Calls waiting for an approval" not in page.locator(".messagelist").inner_text()

    page.fill("input[name=base_url]", provider.base_url + "/v2")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist li.warning")
    assert "stock_adjust (1)" in page.locator(".messagelist li.warning").inner_text()
    _shot(page, "provider-base-url-stranded")


def test_pausing_from_the_project_page_leads_back_to_it(logged_in_page, project, store_route):
    """The project page's Pause… (and its Cancel) led to the approval queue: the operator lost the
    page they were on and had to find the project again to see its switch."""
    page = logged_in_page
    project_url = f"/admin/projects/project/{project.pk}/change/"
    page.goto(project_url)
    page.click(".field-tool_execution a.button")
    assert page.locator(".breadcrumbs").inner_text().startswith("Home › Tools › Approvals")
    page.click("a.cancel-link")
    page.wait_for_url(re.compile(rf".*{project_url}$"))

    page.click(".field-tool_execution a.button")
    page.click("#execution-confirm")
    page.wait_for_url(re.compile(rf".*{project_url}$"))
    assert "paused" in page.locator(".field-tool_execution").inner_text()
    assert "Tool execution is paused" in page.locator(".messagelist").inner_text()
    project.refresh_from_db()
    assert project.tool_execution_paused is True


def test_the_approval_page_fits_a_phone_width_window(logged_in_page, store_route, agent):
    """At 390 px "What the agent was told" — the resume path with the invocation's 64-character id,
    one unbreakable word — made the page 733 px wide: every line of the page scrolled sideways."""
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500})
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    _shot(page, "approval-390")
    told = page.locator("#approval-journal p", has_text="What the agent was told")
    assert approval.invocation.invocation_id in told.inner_text().replace("\n", "")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def test_the_execution_journal_fits_a_phone_width_window(logged_in_page, demo_route, agent, operator,
                                                         celery_worker_session):
    """The journal's details are JSON in one <code> each; at 390 px the dispatch target, one
    unbreakable word, pushed the table 72 px past the window and the page scrolled sideways. The
    journal is the one a real call writes (approved, resumed, dispatched to the demo shop), not
    rows made by hand that could drift from what apps/tools/invocations.py and delivery.py write."""
    api = APIClient()
    approval = pending_approval(api, agent.access_token, tool="issue_refund", arguments=REFUND)
    approval_decide(approval_id=approval.pk, projects=[demo_route.project], decision_id="decision-1",
                    decision="approved", approver=operator)
    resumed = api.generic("POST", f"{INVOKE_URL}/{invocation_id(1)}/resume", "{}", content_type="application/json",
                          **bearer(agent.access_token))
    assert (resumed.status_code, resumed.json()["state"]) == (200, "executed")
    target = InvocationJournalEntry.objects.get(invocation=approval.invocation, state="dispatching").detail["target"]
    assert target.startswith("/demo-business/")
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    _shot(page, "approval-journal-390")
    journal = page.locator("#approval-journal [data-journal]")
    assert [row.get_attribute("data-journal") for row in journal.all()] == [
        "dispatching", "response_recorded", "completed"]
    assert target in page.locator("#approval-journal table").inner_text().replace("\n", "")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    details = page.locator("#approval-journal [data-journal] td:last-child")
    assert min(details.evaluate_all("cells => cells.map(c => c.getBoundingClientRect().width)")) > 250


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_decisions_comment_reads_as_clearly_as_the_text_around_it(logged_in_page, store_route, agent, operator,
                                                                   scheme):
    """Django's blockquote style — 11 px, #777 — made the approver's comment the faintest text of the
    page, and in the dark theme grey on near-black."""
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500})
    approval_decide(approval_id=approval.pk, projects=[store_route.project], decision_id="decision-1",
                    decision="approved", comment="Counted twice with the shift lead.", approver=operator)
    page = logged_in_page
    page.emulate_media(color_scheme=scheme)
    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    _shot(page, f"approval-comment-{scheme}")
    comment = page.locator("#decision-comment")
    assert comment.inner_text() == "Counted twice with the shift lead."
    assert contrast_ratio(comment) >= 7
    size = "e => parseFloat(getComputedStyle(e).fontSize)"
    assert comment.evaluate(size) == page.locator("#decision .bh-decided p").first.evaluate(size)
