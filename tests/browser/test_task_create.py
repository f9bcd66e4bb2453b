"""The task create page in Chromium: a member row shows its workspace's tools once one is picked,
they are reached and checked with the keyboard, a second member is added, and the task is created;
at 390 px the page does not scroll sideways."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.tasks.models import Task
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.browser.conftest import OPERATOR_PASSWORD, admin_login
from tests.routes.factories import RouteFactory
from tests.tools.factories import ToolProviderFactory


@pytest.fixture
def sessions(project):
    provider = ToolProviderFactory(project=project, name="store")
    for key in ("store-assistant", "back-office"):
        route_tools_set(route=RouteFactory(project=project, key=key), tools_direct_enabled=True,
                        sources=[SourceSpec(provider=provider, allowed_tools=["order_status", "stock_adjust"])],
                        write_tools=["stock_adjust"])
    client = AgentClientFactory(project=project, allowed_routes=["store-assistant", "back-office"])
    return [session_for(client, principal={**PRINCIPAL, "id": f"u-{n}"}).session for n in (1, 2)]


def _tools(page, row: int):
    return page.locator(f"[data-member-row='{row}'] input[name='m{row}-allowed_tools']")


def test_creating_a_task_of_two_members_picking_each_rows_workspace_tools(page, operator, sessions):
    admin_login(page, username=operator.username, password=OPERATOR_PASSWORD)
    page.goto("/admin/tasks/task/add/")
    expect(page.locator("[data-member-row='0'] .bh-tools")).to_have_text("Choose a workspace to see its tools.")
    expect(_tools(page, 0)).to_have_count(0)
    page.select_option("#id_m0-session", str(sessions[0].pk))
    page.select_option("#id_m0-workspace", "store-assistant")
    expect(_tools(page, 0)).to_have_count(2)
    assert _tools(page, 0).evaluate_all("boxes => boxes.map(b => b.value)") == [
        "store-assistant:order_status", "store-assistant:stock_adjust"]
    # the keyboard reaches the loaded boxes: conversation id, then the tools
    page.focus("#id_m0-workspace")
    page.keyboard.press("Tab")
    page.keyboard.type("conv-1")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(page.locator("#id_m0-tool-1")).to_be_focused()
    page.keyboard.press("Space")
    expect(page.locator("#id_m0-tool-1")).to_be_checked()

    page.click("#add-member")
    page.select_option("#id_m1-session", str(sessions[1].pk))
    page.select_option("#id_m1-workspace", "store-assistant")
    expect(_tools(page, 1)).to_have_count(2)
    page.select_option("#id_m1-workspace", "back-office")  # another workspace: its own tools, none checked
    expect(_tools(page, 1).first).to_have_attribute("value", "back-office:order_status")
    page.check("#id_m1-tool-0")
    page.fill("#id_m1-client_conversation_id", "conv-2")
    with page.expect_navigation():
        page.click("#create-task")
    expect(page.locator("ul.messagelist")).to_contain_text("created with 2 members")
    task = Task.objects.get()
    assert page.url.endswith(f"/admin/tasks/task/{task.pk}/change/")
    assert [(m.workspace, m.allowed_tools) for m in task.members.order_by("position")] == [
        ("store-assistant", ["stock_adjust"]), ("back-office", ["order_status"])]


def test_a_refused_form_keeps_each_rows_tools_and_the_page_fits_390_px(page, operator, sessions):
    admin_login(page, username=operator.username, password=OPERATOR_PASSWORD)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/admin/tasks/task/add/")
    page.select_option("#id_m0-session", str(sessions[0].pk))
    page.select_option("#id_m0-workspace", "back-office")
    page.check("#id_m0-tool-1")
    with page.expect_navigation():
        page.click("#create-task")  # no conversation id: refused
    expect(page.locator("#task-errors")).to_be_visible()
    expect(page.locator("#id_m0-tool-1")).to_be_checked()
    expect(_tools(page, 0)).to_have_count(2)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert Task.objects.count() == 0


def test_a_long_tools_box_is_filtered_by_name_keeping_the_checked_ones(page, operator, sessions, monkeypatch):
    from apps.runtime import admin_tasks

    monkeypatch.setattr(admin_tasks, "TOOLS_FILTER_MIN", 1, raising=False)
    admin_login(page, username=operator.username, password=OPERATOR_PASSWORD)
    page.goto("/admin/tasks/task/add/")
    page.select_option("#id_m0-workspace", "store-assistant")
    page.check("#id_m0-tool-0")  # order_status
    page.fill("#id_m0-tools-filter", "stock")
    page.keyboard.press("Enter")  # filters, never submits
    expect(page.locator("label[for='id_m0-tool-1']")).to_be_visible()
    expect(page.locator("label[for='id_m0-tool-0']")).to_be_visible()  # checked: kept in sight
    page.uncheck("#id_m0-tool-0")
    page.fill("#id_m0-tools-filter", "stocks")
    expect(page.locator("label[for='id_m0-tool-1']")).to_be_hidden()
    expect(page.locator("label[for='id_m0-tool-0']")).to_be_hidden()
    assert page.url.endswith("/admin/tasks/task/add/")


def test_a_signed_out_operators_pick_says_the_tools_were_not_loaded(page, operator, sessions):
    """The tools URL then answers with the login page (a redirect): never drawn as the tools box."""
    admin_login(page, username=operator.username, password=OPERATOR_PASSWORD)
    page.goto("/admin/tasks/task/add/")
    page.context.clear_cookies()
    page.select_option("#id_m0-workspace", "store-assistant")
    expect(page.locator("[data-member-row='0'] .bh-tools")).to_have_text(
        "The workspace's tools could not be loaded: choose it again.")
    expect(page.locator("[data-member-row='0'] input[name=username]")).to_have_count(0)
