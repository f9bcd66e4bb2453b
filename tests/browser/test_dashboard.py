"""Journey 1 in Chromium: the operator logs in and lands on a dashboard of their project."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.contrast import contrast_ratio
from tests.projects.helpers import project_world

SHOTS = Path("/tmp/shots")


@pytest.fixture
def world(project, operator):
    return project_world("retail", project=project, user=operator)


@pytest.fixture
def stranger_world(transactional_db):
    return project_world("bravo")


def _dashboard(page):
    page.goto("/admin/")  # the login may have landed before the rows existed
    return page


def test_the_landing_page_is_a_dashboard_of_the_operators_project(logged_in_page, world, stranger_world):
    page = _dashboard(logged_in_page)
    panel = page.locator("#project-bailing-retail")
    assert panel.locator("h2").inner_text() == "Bailing Retail"
    assert panel.locator("[data-stat=routes]").inner_text() == "1"
    assert panel.locator("[data-stat=knowledge_bases]").inner_text() == "1"
    assert panel.locator("[data-stat=sessions_active]").inner_text() == "1"
    assert panel.locator("[data-stat=runs_last_day]").inner_text() == "1"
    kb_row = panel.locator("[data-panel=knowledge_bases] tr[data-kb='KB of retail']")
    assert kb_row.locator("[data-status=completed]").inner_text() == "✓ 2"
    assert "ready" in kb_row.inner_text()
    assert panel.locator("[data-panel=recent_runs] tbody tr").count() == 1
    assert page.locator("#project-bravo").count() == 0
    assert "Project bravo" not in page.content()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "dashboard.png"), full_page=True)


def test_the_console_offers_no_view_site_link(logged_in_page, world):
    page = _dashboard(logged_in_page)
    assert page.get_by_role("link", name="View site").count() == 0
    assert page.locator("#user-tools").inner_text().upper().count("VIEW SITE") == 0


def test_a_dashboard_route_opens_the_route_page(logged_in_page, world):
    page = _dashboard(logged_in_page)
    page.locator("[data-panel=routes] a", has_text="Route of retail").click()
    page.wait_for_url(f"**/admin/routes/route/{world.route.pk}/change/")
    assert page.locator("#id_key").input_value() == "retail-route"


def test_a_dashboard_run_opens_the_run_page(logged_in_page, world):
    page = _dashboard(logged_in_page)
    page.locator(f"[data-panel=recent_runs] tr[data-run='{world.run.pk}'] a").click()
    page.wait_for_url(f"**/admin/ledger/run/{world.run.pk}/change/")
    assert page.locator(".bh-context dt", has_text="instructions").count() == 1


# The panels whose right edge passes the inside of their project's box (its border and padding).
_PANELS_PAST_THE_BOX = """section => {
  const style = getComputedStyle(section);
  const inner = section.getBoundingClientRect().right - parseFloat(style.borderRightWidth)
                - parseFloat(style.paddingRight);
  return [...section.querySelectorAll('.bh-panel')]
    .filter(panel => panel.getBoundingClientRect().right > inner + 0.5)
    .map(panel => panel.dataset.panel);
}"""


def test_on_a_phone_the_panels_stay_inside_their_project_box(logged_in_page, world):
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    _dashboard(page)
    assert page.locator("#project-bailing-retail").evaluate(_PANELS_PAST_THE_BOX) == []
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def test_on_a_phone_a_recent_run_shows_all_its_cells_without_scrolling(logged_in_page, world):
    """Five columns were wider than the panel at 390 px: the state and context scrolled out of sight."""
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    _dashboard(page)
    panel = page.locator("[data-panel=recent_runs]")
    assert panel.evaluate("e => e.scrollWidth <= e.clientWidth")
    right = panel.evaluate("e => e.getBoundingClientRect().right")
    row = panel.locator(f"tr[data-run='{world.run.pk}']")
    for cell in row.locator("td").all():
        assert cell.evaluate("e => e.getBoundingClientRect().right") <= right, cell.inner_text()
    assert row.locator(".bh-badge").is_visible()
    # Without the table's head, the size says what it is.
    assert row.locator(".bh-run-context").evaluate("e => getComputedStyle(e, '::before').content") == '"context "'
    page.screenshot(path=str(SHOTS / "dashboard-390-runs.png"), full_page=True)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_tiles_number_stands_out_from_its_tile(logged_in_page, world, scheme):
    """The dark theme kept the light theme's teal: 2.9:1 on a dark tile."""
    page = logged_in_page
    page.emulate_media(color_scheme=scheme)
    _dashboard(page)
    assert contrast_ratio(page.locator("#project-bailing-retail [data-stat=routes]")) >= 4.5


@pytest.mark.parametrize(("system", "picked"), [("light", "dark"), ("dark", "light")])
def test_the_consoles_colours_follow_the_theme_picked_in_the_header(logged_in_page, world, system, picked):
    """The console's colours followed only the system's scheme: with a light system and the header's
    toggle on dark, the documents' counts were dark green on the dark theme's near-black."""
    page = logged_in_page
    page.emulate_media(color_scheme=system)
    page.add_init_script(f"localStorage.setItem('theme', '{picked}')")  # what Django's toggle stores
    _dashboard(page)
    assert page.evaluate("document.documentElement.dataset.theme") == picked
    assert contrast_ratio(page.locator("[data-panel=knowledge_bases] [data-status=completed]")) >= 4.5
    assert contrast_ratio(page.locator("#project-bailing-retail [data-stat=routes]")) >= 4.5


@pytest.mark.parametrize("width", [1366, 390])
def test_documents_waiting_for_a_worker_are_named_in_the_projects_header(logged_in_page, ingest_unconsumed, world,
                                                                         width):
    # ingest_unconsumed before world: the session's worker would take the documents set queued by
    # hand below (their leases are free) and ingest them again, and the sign would go.
    from django.utils import timezone

    from apps.knowledge.models import Document

    Document.objects.filter(knowledge_base=world.kb).update(
        status=Document.Status.QUEUED, queued_at=timezone.now() - timezone.timedelta(minutes=7))
    logged_in_page.set_viewport_size({"width": width, "height": 900})
    page = _dashboard(logged_in_page)
    notice = page.locator("#project-bailing-retail [data-stat=waiting_for_a_worker]")
    assert notice.is_visible()
    assert "2 documents queued for 7" in notice.inner_text()
    box = notice.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"dashboard-waiting-{width}.png"))
    notice.get_by_role("link", name="See the queued documents").click()
    page.wait_for_url("**/admin/knowledge/document/?status__exact=queued")
    assert page.locator("#result_list tbody tr").count() == 2


@pytest.mark.parametrize("width", [1366, 390])
def test_a_new_projects_first_steps_lead_to_the_pages_that_take_them(logged_in_page, project, width):
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/")
    steps = page.locator("#project-bailing-retail [data-panel=getting_started] li")
    assert steps.count() == 6
    assert [steps.nth(n).get_attribute("data-done") for n in range(6)] == ["no"] * 6
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(SHOTS / f"dashboard_getting_started_{width}.png"), full_page=True)
    steps.nth(0).get_by_role("link", name="Add a route").click()
    page.wait_for_url("**/admin/routes/route/add/?project=*")
    assert page.locator("#id_project").input_value() == str(project.pk)
