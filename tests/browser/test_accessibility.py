"""The console for people who use a keyboard or a screen reader: axe-core (tests/browser/axe/, MPL-2.0,
its licence header kept) on the pages of the operators' journeys, and the keyboard behaviour of the
console's own widgets."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.knowledge.models import Document
from apps.knowledge.services import route_knowledge_bind
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.browser.axe import violations
from tests.browser.conftest import OPERATOR_PASSWORD, admin_login
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.knowledge.test_admin_search import POLICY
from tests.routes.factories import RouteFactory
from tests.tools.approval_helpers import pending_approval
from tests.tools.factories import STORE_SPEC, ToolProviderFactory

LARGE_NOTE = "".join(f"第{n}行：盘点差异说明。\n" for n in range(1500))


@pytest.fixture
def journeys(project):
    """A project as an operator finds it mid-day: a route reading a knowledge base with a document, a
    tool provider, a refund waiting for approval (with its conversation and run in the ledger)."""
    # Instructions of forty lines: the run's page shows them in a box that scrolls.
    route = RouteFactory(project=project, key="store-assistant", name="门店助手", tools_direct_enabled=True,
                         system_prompt="\n".join(f"Rule {n}: answer from the store's own policies." for n in range(40)))
    kb = KnowledgeBaseFactory(project=project, name="After-sales")
    # A section long enough that the playground's passage box scrolls.
    documents = ingest_texts(kb, {"policy.md": POLICY, "returns.md": "# 无理由退款\n\n" + "\n\n".join(
        f"第{n}条：无理由退款在七天内办理，商品需完好。" for n in range(60))})
    route_knowledge_bind(route=route, knowledge_base=kb)
    provider = ToolProviderFactory(project=project, name="store", spec=STORE_SPEC)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["stock_adjust"])],
                    write_tools=["stock_adjust"], tools_direct_enabled=True)
    agent = session_for(AgentClientFactory(project=project, name="Counter assistant", app_id="counter-app",
                                           allowed_routes=[route.key]), principal=PRINCIPAL)
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500, "note": LARGE_NOTE})
    return {"project": project, "route": route, "kb": kb, "document": documents["returns.md"], "provider": provider,
            "approval": approval}


def test_the_consoles_pages_have_no_serious_or_critical_axe_violations(page, operator, journeys):
    """What Django's own markup still gives (minor: its inline tables' empty title column) is left to it."""
    approval = journeys["approval"]
    found = {}
    page.goto("/admin/login/?next=/admin/")
    found["sign-in"] = violations(page, impacts=("minor", "moderate", "serious", "critical"))  # the whole page is ours
    admin_login(page, username=operator.username, password=OPERATOR_PASSWORD)
    pages = {
        "dashboard": "/admin/",
        "project": f"/admin/projects/project/{journeys['project'].pk}/change/",
        "route": f"/admin/routes/route/{journeys['route'].pk}/change/",
        "knowledge base": f"/admin/knowledge/knowledgebase/{journeys['kb'].pk}/change/",
        "tool provider": f"/admin/tools/toolprovider/{journeys['provider'].pk}/change/",
        "approvals": "/admin/tools/approval/",
        "approval": f"/admin/tools/approval/{approval.pk}/change/",
        "invocation": f"/admin/tools/invocation/{approval.invocation.pk}/change/",
        "conversation": f"/admin/ledger/conversation/{approval.invocation.run.conversation_id}/change/",
        "run": f"/admin/ledger/run/{approval.invocation.run_id}/change/",
        "runs": "/admin/ledger/run/",
        "a document's chunks": f"/admin/knowledge/document/{journeys['document'].pk}/chunks/",
        "new operator token": "/admin/projects/operatortoken/add/",
        "deleting a knowledge base": f"/admin/knowledge/knowledgebase/{journeys['kb'].pk}/delete/",
    }
    for name, path in pages.items():
        page.goto(path)
        found[name] = violations(page)
    page.goto(f"/admin/knowledge/knowledgebase/{journeys['kb'].pk}/search/")
    page.fill("input[name=query]", "无理由退款")
    page.click("#pg-form input[type=submit]")
    page.wait_for_selector("#pg-results")
    found["search playground"] = violations(page)
    assert {name: found_here for name, found_here in found.items() if found_here} == {}


def test_the_consoles_own_tables_name_every_column(logged_in_page, journeys):
    """A column of buttons (Retry, Run again, Pause) has a header a screen reader can read out, and a row's
    "Run again" says which search it runs."""
    page = logged_in_page
    page.goto(f"/admin/knowledge/knowledgebase/{journeys['kb'].pk}/search/")
    page.fill("input[name=query]", "无理由退款")
    page.click("#pg-form input[type=submit]")
    page.wait_for_selector("#pg-results")
    assert violations(page, impacts=("minor",), context="#pg-recent") == []
    assert page.locator("#pg-recent .pg-rerun").get_attribute("aria-label") == "Run again: 无理由退款"
    page.goto(f"/admin/knowledge/knowledgebase/{journeys['kb'].pk}/change/")
    assert violations(page, impacts=("minor",), context="#kb-documents") == []
    page.goto("/admin/tools/approval/")
    assert violations(page, impacts=("minor",), context="#execution-panel") == []


def test_a_tabular_rows_controls_name_their_column_and_row(logged_in_page, journeys):
    provider = journeys["provider"]
    page = logged_in_page
    page.goto(f"/admin/tools/toolprovider/{provider.pk}/change/")
    switches = page.locator("#tools-group input[type=checkbox][name$='-enabled']")
    assert sorted(s.get_attribute("aria-label") for s in switches.all()) == sorted(
        f"Enabled: {name}" for name in provider.tools.values_list("name", flat=True))


def test_the_live_status_line_speaks_only_when_something_changes(logged_in_page, project):
    """The documents' summary and the live note are one status region; a poll that finds nothing new
    leaves it alone, so a screen reader does not read "Updating live…" again every two seconds."""
    kb = KnowledgeBaseFactory(project=project, name="Waiting")
    # Written as a live worker holds it, not uploaded: every poll finds the same, and no ingest is sent
    # (one met the live lease and was sent again two minutes later, into whatever test ran then).
    Document.objects.create(knowledge_base=kb, filename="plain.txt", file_type="txt", size=10, content_hash="0" * 64,
                            status="embedding", progress_done=40, progress_total=120, run_token=uuid.uuid4(),
                            heartbeat_at=timezone.now())
    page = logged_in_page
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    line = page.locator(".bh-live-line")
    assert line.get_attribute("role") == "status"
    page.evaluate("""() => { window.__spoken = [];
      new MutationObserver(changes => window.__spoken.push(changes.length))
        .observe(document.querySelector('.bh-live-line'), {childList: true, subtree: true, characterData: true}); }""")
    # The page asks again only once it has drawn the last answer: three polls, two answers drawn.
    for _ in range(3):
        with page.expect_response(lambda response: f"/{kb.pk}/status/" in response.url):
            pass
    assert line.inner_text() == "1 embedding Updating live…"
    assert page.evaluate("window.__spoken") == []


def test_showing_all_arguments_by_keyboard_keeps_the_focus_on_them(logged_in_page, journeys):
    page = logged_in_page
    page.goto(f"/admin/tools/approval/{journeys['approval'].pk}/change/")
    page.focus("#arguments-expand")
    page.keyboard.press("Enter")
    page.wait_for_selector('#arguments-json[data-expanded="true"]')
    assert page.evaluate("document.activeElement.id") == "arguments-json"
    assert page.locator("#arguments-status").get_attribute("role") == "status"


def test_a_search_by_keyboard_lands_on_its_results(logged_in_page, journeys):
    page = logged_in_page
    page.goto(f"/admin/knowledge/knowledgebase/{journeys['kb'].pk}/search/")
    page.focus("input[name=query]")
    page.keyboard.type("无理由退款")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement.id === 'pg-results'")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('#hit-1') !== null") is True
