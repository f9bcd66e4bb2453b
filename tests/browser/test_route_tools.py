"""In Chromium: on a route's page the operator picks the tools of a provider as the route's source,
marks a write tool for forced approval and sees the dry-run counts change; a write tool no source
allows is refused next to its field."""

from __future__ import annotations

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
