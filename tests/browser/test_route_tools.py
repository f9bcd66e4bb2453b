"""In Chromium: on a route's page the operator picks the tools of a provider as the route's source,
marks a write tool for forced approval and sees the dry-run counts change; a write tool no source
allows is refused next to its field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.routes.models import Route
from apps.runtime.route_tools_form import source_field_name
from apps.tools.models import RouteToolSource
from tests.routes.factories import RouteFactory
from tests.tools.factories import ToolProviderFactory

SHOTS = Path("/tmp/shots")


def _follow(page, target) -> None:
    with page.expect_navigation():
        target.click()


@pytest.fixture
def route(project):
    return RouteFactory(project=project, key="store-assistant", name="门店助手", tools_direct_enabled=True)


@pytest.fixture
def store(project):
    return ToolProviderFactory(project=project, name="demo-store")


def _pick(page, field: str, value: str) -> None:
    page.locator(f"input[type=checkbox][name={field}][value={value}]").check()


def _counts(page) -> tuple[str, str, str]:
    panel = page.locator("[data-capabilities]")
    return (panel.locator("[data-tools-total]").inner_text(), panel.locator("[data-tools-writes]").inner_text(),
            panel.locator("[data-tools-approval]").inner_text())


def test_an_operator_adds_a_source_and_forces_approval_of_a_write_tool(logged_in_page, route, store):
    page = logged_in_page
    page.goto(f"/admin/routes/route/{route.pk}/change/")
    assert _counts(page) == ("0", "0", "0")
    source = source_field_name(store)
    _pick(page, source, "product_lookup")
    _pick(page, source, "customer_note")
    _pick(page, "write_tools", "customer_note")
    _pick(page, "force_approval_tools", "customer_note")
    page.locator(f".field-{source}").scroll_into_view_if_needed()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "route_tools_picks.png"))
    _follow(page, page.locator("input[name=_continue]"))

    assert "was changed successfully" in page.locator(".messagelist .success").inner_text()
    assert list(RouteToolSource.objects.filter(route=route).values_list("allowed_tools", flat=True)) == [
        ["product_lookup", "customer_note"]]
    route.refresh_from_db()
    assert (route.write_tools, route.force_approval_tools) == (["customer_note"], ["customer_note"])
    assert _counts(page) == ("2", "1", "1")
    page.locator("[data-capabilities]").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "route_tools_dry_run.png"))


def test_a_write_tool_no_source_allows_is_refused_next_to_the_field(logged_in_page, route, store):
    page = logged_in_page
    page.goto(f"/admin/routes/route/{route.pk}/change/")
    _pick(page, source_field_name(store), "product_lookup")
    _pick(page, "write_tools", "order_refund")
    _follow(page, page.locator("input[name=_continue]"))

    error = page.locator(".field-write_tools .errorlist")
    assert error.inner_text() == "'order_refund' is not a tool of this route's sources."
    assert page.locator(".errornote").count() == 1
    assert RouteToolSource.objects.filter(route=route).count() == 0
    assert Route.objects.get(pk=route.pk).write_tools == []
    error.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "route_tools_refused.png"))


def test_the_tool_picks_fit_a_phone_width_window(logged_in_page, route, store):
    """At 390 px the picks' 36em minimum width (480 px) passed the window, and the page's box cut
    them: "lookup_product — GET /products · read-onl"; a switched-off tool's note was cut away."""
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/admin/routes/route/{route.pk}/change/")
    picks = page.locator("div.bh-tool-picks")
    assert picks.count() >= 4
    page.locator(f".field-{source_field_name(store)}").scroll_into_view_if_needed()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "route_tools_390.png"))
    rights = picks.evaluate_all("es => es.map(e => e.getBoundingClientRect().right)")
    assert max(rights) <= 390
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def _many_operations(count: int) -> bytes:
    paths = {f"/items/{n}": {"get": {"operationId": f"item_get_{n}", "summary": f"Read item {n}.",
                                     "responses": {"200": {"description": "The item."}}}} for n in range(count)}
    return json.dumps({"openapi": "3.0.3", "info": {"title": "Many", "version": "1"}, "paths": paths}).encode()


def test_a_long_list_of_tools_is_narrowed_by_a_filter_and_ticked_as_shown(logged_in_page, route, project):
    """The route page listed all 3,000 tools of a provider as checkboxes in a scroll box, with no
    filter and no "select all" (browser audit, low)."""
    many = ToolProviderFactory(project=project, name="huge-catalog", spec=_many_operations(300))
    source = source_field_name(many)
    page = logged_in_page
    page.goto(f"/admin/routes/route/{route.pk}/change/")
    field = page.locator(f".field-{source}")
    bar = field.locator(".bh-picks-bar")
    assert bar.locator(".bh-picks-count").inner_text() == "0 of 300 ticked"
    _pick(page, source, "item_get_7")
    assert bar.locator(".bh-picks-count").inner_text() == "1 of 300 ticked"
    assert bar.get_by_role("searchbox", name="Filter Tools from huge-catalog").count() == 1
    bar.locator(".bh-picks-filter").fill("item_get_1 GET")  # words in any case, all of them
    visible = field.locator(f"input[name={source}]:visible")
    assert visible.count() == 111  # item_get_1, _10–_19, _100–_199
    assert bar.locator(".bh-picks-count").inner_text() == "1 of 300 ticked · 111 shown"
    bar.locator(".bh-picks-filter").press("Enter")  # does not submit the route's form
    assert page.url.endswith(f"/admin/routes/route/{route.pk}/change/")
    bar.get_by_role("button", name="Tick shown: Tools from huge-catalog", exact=True).click()
    assert bar.locator(".bh-picks-count").inner_text() == "112 of 300 ticked · 111 shown"
    bar.locator(".bh-picks-filter").fill("item_get_19")
    bar.get_by_role("button", name="Untick shown: Tools from huge-catalog", exact=True).click()
    assert bar.locator(".bh-picks-count").inner_text() == "101 of 300 ticked · 11 shown"
    field.scroll_into_view_if_needed()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "route_tools_filter.png"))
    _follow(page, page.locator("input[name=_continue]"))

    assert "was changed successfully" in page.locator(".messagelist .success").inner_text()
    allowed = RouteToolSource.objects.get(route=route, provider=many).allowed_tools
    expected = {"item_get_7", "item_get_1"} | {f"item_get_{n}" for n in [*range(10, 19), *range(100, 190)]}
    assert sorted(allowed) == sorted(expected)
    # a dozen tools or fewer have no bar
    dozen = ToolProviderFactory(project=project, name="dozen", spec=_many_operations(12))
    thirteen = ToolProviderFactory(project=project, name="thirteen", spec=_many_operations(13))
    page.reload()
    assert [page.locator(f".field-{source_field_name(p)} .bh-picks-bar").count() for p in (dozen, thirteen)] == [0, 1]
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator(f".field-{source} .bh-picks-bar").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "route_tools_filter_390.png"))
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
