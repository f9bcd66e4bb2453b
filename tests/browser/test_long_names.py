"""Long unbroken names and narrow windows in Chromium: a knowledge base named with 200 characters,
a file named with 250 and a 5000-character search keep the knowledge base page and the search
playground as wide as the window, at 1366 px and at 800 px (where the admin's sidebar still shows).
They once made the page 3017 px wide, pushed the documents table's Status and Reason out of view and
the playground's "Run again" out of its table. Screenshots land in /tmp/shots/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

SHOTS = Path("/tmp/shots")
KB_NAME = "N" * 200
LONG_FILENAME = "L" * 250 + ".md"
LONG_QUERY = "x" * 5000
WIDTHS = [1366, 800]


@pytest.fixture
def kb(project):
    kb = KnowledgeBaseFactory(project=project, name=KB_NAME)
    ingest_texts(kb, {LONG_FILENAME: "# Warranty\n\nEvery kettle carries a two year warranty.",
                      "policy.md": "# Returns\n\nCustomers can return unopened items within 30 days."})
    return kb


def _fits_the_window(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_kb_page_with_long_names_fits_the_window(logged_in_page, kb, width):
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    assert page.locator("#kb-documents-table a", has_text=LONG_FILENAME).count() == 1
    _shot(page, f"long-names-kb-{width}")
    assert _fits_the_window(page)


def test_the_documents_table_shows_every_column_beside_a_long_filename(logged_in_page, kb):
    page = logged_in_page
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    box = page.locator("#kb-documents .bh-scroll")
    assert box.evaluate("e => e.scrollWidth <= e.clientWidth")
    box_right = box.evaluate("e => e.getBoundingClientRect().right")
    reason = page.locator("#kb-documents-table thead th", has_text="Reason")
    assert reason.evaluate("e => e.getBoundingClientRect().right") <= box_right


def _search(page, kb, query: str) -> None:
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/search/")
    page.fill("input[name=query]", query)
    page.click("#pg-form input[type=submit]")
    page.wait_for_selector("#pg-results")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_playground_with_a_long_hit_and_a_long_query_fits_the_window(logged_in_page, kb, width):
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    _search(page, kb, LONG_QUERY)
    _search(page, kb, "kettle warranty")
    assert page.locator(".pg-hit h2 a", has_text=LONG_FILENAME).count() == 1
    _shot(page, f"long-names-playground-{width}")
    assert _fits_the_window(page)


def test_run_again_stays_inside_the_recent_searches_table(logged_in_page, kb):
    page = logged_in_page
    _search(page, kb, LONG_QUERY)
    box = page.locator("#pg-recent .bh-scroll")
    assert box.evaluate("e => e.scrollWidth <= e.clientWidth")
    rerun = page.locator("#pg-recent .pg-rerun")
    assert rerun.evaluate("e => e.getBoundingClientRect().right") <= box.evaluate(
        "e => e.getBoundingClientRect().right")


@pytest.mark.parametrize("field", ["strategy", "fusion"])
def test_a_kb_form_select_fits_its_row_on_a_narrow_window(logged_in_page, kb, field):
    page = logged_in_page
    page.set_viewport_size({"width": 800, "height": 900})
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    row_right = page.locator(f".form-row.field-{field}").evaluate("e => e.getBoundingClientRect().right")
    assert page.locator(f"#id_{field}").evaluate("e => e.getBoundingClientRect().right") <= row_right


SPACED_KB_NAME = ("Quarterly after-sales policy handbook for all Bailing retail stores including refunds "
                  "exchanges warranty and membership points rules effective next year draft v2 Quarterly "
                  "after-sales policy handbook.")

_OVERLAP = """([title, tools]) => {
  const a = title.getBoundingClientRect(), b = tools.getBoundingClientRect();
  return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
}"""


@pytest.mark.parametrize("width", [1280, 800])
@pytest.mark.parametrize("heading", ["#content > h1", "#content > h2"])
def test_a_long_title_never_runs_under_the_object_tools(logged_in_page, project, width, heading):
    """The change form's object tools (Search playground, History) float up beside the title; a long
    knowledge base name once ran under them at 1280 and 800 px."""
    kb = KnowledgeBaseFactory(project=project, name=SPACED_KB_NAME)
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    title = page.locator(heading)
    assert len(SPACED_KB_NAME) == 200
    assert page.locator("#content > h2").inner_text() == SPACED_KB_NAME
    tools = page.locator("#content-main > ul.object-tools")
    assert tools.locator("a").all_inner_texts() == ["SEARCH PLAYGROUND", "HISTORY"]
    _shot(page, f"long-title-object-tools-{width}")
    assert page.evaluate(_OVERLAP, [title.element_handle(), tools.element_handle()]) is False
    for button in tools.locator("a").element_handles():
        assert page.evaluate(_OVERLAP, [title.element_handle(), button]) is False


_INSIDE = """([inner, outer]) => inner.getBoundingClientRect().right <= outer.getBoundingClientRect().right + 1"""


@pytest.mark.parametrize("width", WIDTHS)
def test_a_route_named_with_256_unbroken_letters_keeps_the_dashboard_and_a_clients_form_whole(
        logged_in_page, project, width):
    """The dashboard's Routes panel scrolled its Status and Knowledge columns out of view, and a
    client's allowed-routes choice ran past the form's edge (the console audit, stop 52)."""
    from tests.agent_auth.factories import AgentClientFactory
    from tests.routes.factories import RouteFactory

    RouteFactory(project=project, key="long-name", name="N" * 256)
    client = AgentClientFactory(project=project, allowed_routes=["long-name"])
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/")
    panel = page.locator('[data-panel="routes"]')
    _shot(page, f"long-route-dashboard-{width}")
    assert page.evaluate("p => p.scrollWidth <= p.clientWidth", panel.element_handle())
    status = panel.locator('tr[data-route="long-name"] td').nth(2)
    assert page.evaluate(_INSIDE, [status.element_handle(), panel.element_handle()])
    page.goto(f"/admin/agent_auth/agentclient/{client.pk}/change/")
    _shot(page, f"long-route-client-{width}")
    label = page.locator('#id_allowed_routes label', has_text="NNNN")
    fieldset = page.locator("#agentclient_form fieldset").first
    assert page.evaluate(_INSIDE, [label.element_handle(), fieldset.element_handle()])
    assert _fits_the_window(page)
