"""The task console in a real browser, as the seeded operator: create a task from an agent session
(an error shown beside its field first), open its page, watch its counters refresh without a
reload, pause it and resume it, and see a stale page refused. Screenshots land in /tmp/shots/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from apps.agent_auth.models import AgentSession
from apps.tasks.models import Task
from apps.tasks.services import MemberSpec, PolicySpec, task_control, task_create
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.browser.axe import violations
from tests.projects.factories import MembershipFactory, ProjectFactory
from tests.routes.factories import RouteFactory
from tests.tools.factories import ToolProviderFactory

SHOTS = Path("/tmp/shots")


@pytest.fixture
def route(project):
    route = RouteFactory(project=project, key="store-assistant", name="门店助手", tools_direct_enabled=True)
    provider = ToolProviderFactory(project=project, name="store")
    return route_tools_set(route=route, sources=[SourceSpec(provider=provider,
                                                            allowed_tools=["order_status", "stock_adjust"])],
                           write_tools=["stock_adjust"], tools_direct_enabled=True)


@pytest.fixture
def agent(route):
    return session_for(AgentClientFactory(project=route.project, allowed_routes=[route.key]), principal=PRINCIPAL)


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _badge(page) -> str:
    return page.locator("#task-state [data-task-state]").get_attribute("data-task-state")


def test_an_operator_creates_a_task_from_a_session_pauses_and_resumes_it(logged_in_page, route, agent):
    page = logged_in_page
    page.goto("/admin/")
    assert page.locator('[data-stat="tasks_active"]').first.inner_text() == "0"

    page.goto("/admin/tasks/task/add/")
    page.select_option("select[name=m0-session]", str(agent.session.pk))
    page.select_option("select[name=m0-workspace]", route.key)
    expect(page.locator(f'label.bh-tool[data-route="{route.key}"]').first).to_be_visible()  # loaded on the pick
    page.check(f'input[name=m0-allowed_tools][value="{route.key}:stock_adjust"]')
    assert page.locator('[data-member-row="1"]').is_hidden()
    page.click("#add-member")
    assert page.locator('[data-member-row="1"]').is_visible()
    page.fill("input[name=name]", "restock shelf 4")
    page.fill("input[name=max_write_calls]", "2")
    _shot(page, "task-create")
    page.click("#create-task")
    error = page.locator('[data-field="m0-client_conversation_id"] .errorlist')
    assert error.inner_text() == "1 to 191 printable characters are required, as in a turn."
    assert Task.objects.count() == 0
    _shot(page, "task-create-error")

    page.fill("input[name=m0-client_conversation_id]", "conv-shelf-4")
    page.click("#create-task")
    page.wait_for_url(re.compile(r".*/admin/tasks/task/[0-9a-f-]{36}/change/$"))
    task = Task.objects.get()
    assert task.members.get().allowed_tools == ["stock_adjust"]
    assert "created with 1 member. " in page.locator(".messagelist").inner_text()
    assert _badge(page) == "active"
    assert page.locator("#task-budget").inner_text() == "0 / 0 / 2"

    # The counters refresh from the live URL without a reload.
    Task.objects.filter(pk=task.pk).update(write_consumed=1, active_permits=1)
    page.wait_for_function("document.getElementById('task-budget').textContent === '1 / 0 / 2'")
    assert page.locator("#task-permits").inner_text() == "1 / 1"
    _shot(page, "task-page")

    page.click("#task-pause")
    page.wait_for_selector('#task-state [data-task-state="paused"]')
    assert "Paused" in page.locator(".messagelist").inner_text()
    assert page.locator("#task-pause").count() == 0
    _shot(page, "task-paused")

    page.click("#task-resume")
    page.wait_for_selector('#task-state [data-task-state="active"]')
    task.refresh_from_db()
    assert (task.state, task.revision) == ("active", 3)
    _shot(page, "task-resumed")

    page.goto("/admin/tasks/task/")
    row = page.locator("#result_list tbody tr")
    assert row.count() == 1
    assert "restock shelf 4" in row.inner_text() and "1 / 0 / 2" in row.inner_text()
    _shot(page, "task-list")

    page.goto("/admin/")
    tile = page.locator('[data-stat="tasks_active"]')
    assert tile.inner_text() == "1"
    _shot(page, "dashboard-tasks")
    tile.click()
    page.wait_for_url(re.compile(r".*/admin/tasks/task/\?.*state__exact=active"))
    assert page.locator("#result_list tbody tr").count() == 1


def test_picking_a_session_offers_only_the_workspaces_it_may_use(logged_in_page, route, agent):
    """Every route of the project was offered whatever the session: a workspace the session may not
    use was refused only after the submit ("Not a workspace this session may use")."""
    RouteFactory(project=route.project, key="hr-helpdesk", name="HR Helpdesk")
    page = logged_in_page
    page.goto("/admin/tasks/task/add/")
    workspace = page.locator("select[name=m0-workspace]")
    page.select_option("select[name=m0-workspace]", "hr-helpdesk")
    page.select_option("select[name=m0-session]", str(agent.session.pk))
    offered = workspace.evaluate("s => [...s.options].filter(o => o.value && !o.disabled).map(o => o.value)")
    assert offered == [route.key]
    assert workspace.input_value() == ""  # the workspace picked before, which this session may not use
    page.select_option("select[name=m0-session]", "")
    assert workspace.evaluate("s => [...s.options].filter(o => o.disabled).length") == 0


def test_a_session_found_by_searching_offers_only_the_workspaces_it_may_use(logged_in_page, route, agent,
                                                                            monkeypatch):
    """Past SESSION_CHOICES_MAX the session is Django's autocomplete: its options come from the search,
    without the workspaces of the plain select's, and every workspace stayed offered."""
    from apps.runtime import admin_task_create

    RouteFactory(project=route.project, key="hr-helpdesk", name="HR Helpdesk")
    monkeypatch.setattr(admin_task_create, "SESSION_CHOICES_MAX", 0)
    page = logged_in_page
    page.goto("/admin/tasks/task/add/")
    row = page.locator('[data-member-row="0"]')
    workspace = page.locator("select[name=m0-workspace]")
    page.select_option("select[name=m0-workspace]", "hr-helpdesk")
    row.locator("select[name=m0-session] + .select2 .select2-selection").click()
    page.locator(".select2-search__field").fill(PRINCIPAL["id"])
    page.locator(".select2-results__option", has_text=agent.session.client.app_id).click()
    _shot(page, "task-create-session-searched")
    offered = workspace.evaluate("s => [...s.options].filter(o => o.value && !o.disabled).map(o => o.value)")
    assert offered == [route.key]
    assert workspace.input_value() == ""  # the workspace picked before, which this session may not use

    # A refused form keeps the searched session, still narrowing its row's workspaces.
    page.select_option("select[name=m0-workspace]", route.key)
    page.click("#create-task")
    page.wait_for_selector(".errornote, .errorlist")
    _shot(page, "task-create-session-searched-refused")
    assert workspace.evaluate("s => [...s.options].filter(o => o.value && !o.disabled).map(o => o.value)") == [
        route.key]


def test_the_project_pick_reads_as_the_forms_after_it(logged_in_page, route, operator):
    """With two projects the create page first asks for one: its label stood inline before the
    select, and the help under it started 160 px right of the select's left edge."""
    MembershipFactory(user=operator, project=ProjectFactory(name="Warehouse"))
    page = logged_in_page
    page.goto("/admin/tasks/task/add/")
    select = page.locator("#project-form select[name=project]").bounding_box()
    help_box = page.locator("#project-form .help").bounding_box()
    assert abs(select["x"] - help_box["x"]) <= 2
    _shot(page, "task-create-project-pick")


def test_a_stale_task_page_changes_nothing(logged_in_page, operator, route, agent):
    page = logged_in_page
    task, _ = task_create(project=route.project, user=operator, request_id="rq-1", name="stocktake",
                          members=[MemberSpec(session_id=str(agent.session.pk), workspace=route.key,
                                              client_conversation_id="c-1")], policy=PolicySpec())
    page.goto(f"/admin/tasks/task/{task.pk}/change/")
    task_control(task=task, user=operator, request_id="elsewhere-1", expected_revision=1, action="pause")
    task_control(task=task, user=operator, request_id="elsewhere-2", expected_revision=2, action="resume")
    page.wait_for_selector("#task-stale:not([hidden])")
    page.click("#task-pause")
    assert "The task changed since you loaded it" in page.locator(".messagelist").inner_text()
    task.refresh_from_db()
    assert (task.state, task.revision) == ("active", 3)
    _shot(page, "task-stale")


def test_the_task_page_fits_a_narrow_window(logged_in_page, operator, route, agent):
    """At 800 px, with the admin's sidebar open, the members table made the page 840 px wide; its
    tables now scroll inside their own box."""
    task, _ = task_create(project=route.project, user=operator, request_id="rq-narrow", name="stocktake",
                          members=[MemberSpec(session_id=str(agent.session.pk), workspace=route.key,
                                              client_conversation_id="c-1",
                                              allowed_tools=("order_status", "stock_adjust"))],
                          policy=PolicySpec())
    page = logged_in_page
    page.set_viewport_size({"width": 800, "height": 900})
    page.goto(f"/admin/tasks/task/{task.pk}/change/")
    assert page.locator("#task-members tr[data-member]").count() == 1
    _shot(page, "task_narrow")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth") is True
    # A box that scrolls can be scrolled from the keyboard: its own links or fields take the focus, or
    # (text only) it takes it itself, as a named region (scroll_cue.js).
    page.wait_for_selector(".bh-scroll-cue:not([hidden])")
    boxes = page.evaluate("""() => [...document.querySelectorAll('.bh-scroll')]
      .filter(b => b.scrollWidth - b.clientWidth > 1)
      .map(b => [b.getAttribute('tabindex') === '0' && b.getAttribute('role') === 'region',
                 b.querySelector('a[href], button, input, select, textarea') !== null])""")
    assert boxes and all(itself != inner for itself, inner in boxes), boxes


def test_the_create_page_fits_1366_px_whatever_a_sessions_label(logged_in_page, route):
    """A session's label names its client, principal, device and routes; a select is as wide as its
    longest option, and a long one ran the page past the screen."""
    client = AgentClientFactory(project=route.project, allowed_routes=[route.key])
    session = session_for(client, principal={**PRINCIPAL, "id": "u-" + "9" * 100},
                          on_behalf_of="ada." + "y" * 150 + "@example.com").session
    AgentSession.objects.filter(pk=session.pk).update(device_label="工作站 " + "x" * 120)
    page = logged_in_page
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto("/admin/tasks/task/add/")
    select = page.locator("select[name=m0-session]")
    assert "x" * 120 in select.inner_text()
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    assert select.evaluate("e => e.getBoundingClientRect().right") <= 1366
    _shot(page, "task_create_long_session")


def test_a_task_page_says_when_its_write_budget_refuses_new_writes(logged_in_page, route, agent, operator):
    """At 2 / 0 / 2 the task still read `active` with nothing else: an operator could not tell that
    every new write of its members was being refused (TASK_WRITE_BUDGET_EXHAUSTED)."""
    page = logged_in_page
    task, _ = task_create(project=route.project, user=operator, request_id="rq-budget", name="stocktake",
                          members=[MemberSpec(session_id=str(agent.session.pk), workspace=route.key,
                                              client_conversation_id="c-1")], policy=PolicySpec(max_write_calls=2))
    page.goto(f"/admin/tasks/task/{task.pk}/change/")
    assert page.locator("#task-budget-note").inner_text() == ""

    # The note follows the live counters, without a reload.
    Task.objects.filter(pk=task.pk).update(write_consumed=1, write_reserved=1)
    page.wait_for_function("document.getElementById('task-budget').textContent === '1 / 1 / 2'")
    assert "Fully reserved" in page.locator("#task-budget-note").inner_text()
    Task.objects.filter(pk=task.pk).update(write_consumed=2, write_reserved=0)
    page.wait_for_function("document.getElementById('task-budget').textContent === '2 / 0 / 2'")
    assert "TASK_WRITE_BUDGET_EXHAUSTED" in page.locator("#task-budget-note").inner_text()

    page.reload()
    note = page.locator("#task-budget-note").inner_text()
    assert note.startswith("Used up") and "create a new task" in note
    _shot(page, "task-budget-used-up")


def test_the_create_page_is_usable_in_a_phone_width_window(logged_in_page, route, agent):
    """At 390 px the admin stacks a label over its field, and the 200 px the wide layout gives each
    label became its height: a 200 px gap under every label, and the help texts, still indented
    210 px, ran the page 195 px past the window."""
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/admin/tasks/task/add/")
    _shot(page, "task_create_390")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    for name in ("name", "m0-session", "m0-workspace", "max_write_calls"):
        row = page.locator(f".form-row[data-field='{name}']")
        label_bottom = row.locator("label").first.evaluate("e => e.getBoundingClientRect().bottom")
        field_top = row.locator(f"[name='{name}']").evaluate("e => e.getBoundingClientRect().top")
        assert field_top - label_bottom < 30, name


def test_on_a_phone_the_task_pages_values_have_the_width_of_the_page(logged_in_page, operator, route, agent):
    """At 390 px the budget's longest label took most of the row, its values a 60 px column: "3 write
    calls" on three lines. The labels now stand above their values."""
    task, _ = task_create(project=route.project, user=operator, request_id="rq-phone", name="stocktake",
                          members=[MemberSpec(session_id=str(agent.session.pk), workspace=route.key,
                                              client_conversation_id="c-1")], policy=PolicySpec(max_write_calls=3))
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/admin/tasks/task/{task.pk}/change/")
    _shot(page, "task_390")
    for grid in page.locator(".bh-task-grid").all():
        width = grid.evaluate("e => e.getBoundingClientRect().width")
        for value in grid.locator("dd").all():
            assert value.evaluate("e => e.getBoundingClientRect().width") >= width * 0.9, value.inner_text()
    budget = page.locator("#task-counters dd", has_text="write calls")
    assert budget.inner_text() == "3 write calls"
    line = budget.evaluate("e => parseFloat(getComputedStyle(e).lineHeight) || 20")
    assert budget.evaluate("e => e.getBoundingClientRect().height") < 1.5 * line


def test_a_workspace_found_by_searching_shows_only_its_tools(logged_in_page, route, agent, monkeypatch):
    """Past the route limit the workspace is Django's autocomplete, which announces a choice through
    jQuery only: the row still loads that workspace's tools alone."""
    from apps.routes import admin as routes_admin
    from apps.tools.models import ToolProvider

    other = RouteFactory(project=route.project, key="hr-helpdesk", name="HR Helpdesk")
    route_tools_set(route=other, sources=[SourceSpec(provider=ToolProvider.objects.get(name="store"),
                                                     allowed_tools=["order_status"])], tools_direct_enabled=True)
    monkeypatch.setattr(routes_admin, "ROUTE_CHOICES_MAX", 1)
    page = logged_in_page
    page.goto("/admin/tasks/task/add/")
    row = page.locator('[data-member-row="0"]')
    expect(row.locator(".bh-tools")).to_have_text("Choose a workspace to see its tools.")
    row.locator("select[name=m0-workspace] + .select2 .select2-selection").click()
    page.locator(".select2-search__field").fill("store")
    page.locator(".select2-results__option", has_text="门店助手 (store-assistant)").click()
    expect(row.locator('label.bh-tool[data-route="store-assistant"]').first).to_be_visible()
    expect(row.locator('label.bh-tool[data-route="hr-helpdesk"]')).to_have_count(0)


@pytest.fixture
def sessions(route):
    """Two sessions that may use two workspaces with tools: store-assistant and back-office."""
    from apps.tools.models import ToolProvider

    route_tools_set(route=RouteFactory(project=route.project, key="back-office"), tools_direct_enabled=True,
                    sources=[SourceSpec(provider=ToolProvider.objects.get(name="store"),
                                        allowed_tools=["order_status", "stock_adjust"])], write_tools=["stock_adjust"])
    client = AgentClientFactory(project=route.project, allowed_routes=["store-assistant", "back-office"])
    return [session_for(client, principal={**PRINCIPAL, "id": f"u-{n}"}).session for n in (1, 2)]


def _tools(page, row: int):
    return page.locator(f"[data-member-row='{row}'] input[name='m{row}-allowed_tools']")


def test_creating_a_task_of_two_members_picking_each_rows_workspace_tools(logged_in_page, sessions):
    page = logged_in_page
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


def test_a_refused_form_keeps_each_rows_tools_and_the_page_fits_390_px(logged_in_page, sessions):
    page = logged_in_page
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


def test_a_long_tools_box_is_filtered_by_name_keeping_the_checked_ones(logged_in_page, sessions, monkeypatch):
    from apps.runtime import admin_task_create

    monkeypatch.setattr(admin_task_create, "TOOLS_FILTER_MIN", 1)
    page = logged_in_page
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


def test_a_signed_out_operators_pick_says_the_tools_were_not_loaded(logged_in_page, sessions):
    """The tools URL then answers with the login page (a redirect): never drawn as the tools box."""
    page = logged_in_page
    page.goto("/admin/tasks/task/add/")
    page.context.clear_cookies()
    page.select_option("#id_m0-workspace", "store-assistant")
    expect(page.locator("[data-member-row='0'] .bh-tools")).to_have_text(
        "The workspace's tools could not be loaded: choose it again.")
    expect(page.locator("[data-member-row='0'] input[name=username]")).to_have_count(0)


def test_the_task_pages_have_no_serious_or_critical_axe_violations(logged_in_page, operator, route, agent):
    """A quiet grey link in the create page's heading band ("another project", 1.02:1) and the task
    page's faded "· live" note (4.09:1) failed axe's colour contrast."""
    task, _ = task_create(project=route.project, user=operator, request_id="rq-axe", name="stocktake",
                          members=[MemberSpec(session_id=str(agent.session.pk), workspace=route.key,
                                              client_conversation_id="c-1", allowed_tools=("order_status",))],
                          policy=PolicySpec(max_write_calls=2))
    page = logged_in_page
    found = {}
    for name, path in {"create": "/admin/tasks/task/add/", "task": f"/admin/tasks/task/{task.pk}/change/",
                       "tasks": "/admin/tasks/task/"}.items():
        page.goto(path)
        found[name] = violations(page)
    assert {name: found_here for name, found_here in found.items() if found_here} == {}


def test_adding_a_member_by_keyboard_puts_the_focus_in_the_row_it_added(logged_in_page, route, agent):
    """The last row hides the button that added it: the focus fell to the page's body."""
    page = logged_in_page
    page.goto("/admin/tasks/task/add/")
    rows = int(page.locator("#add-member").get_attribute("data-max"))
    for row in range(1, rows):
        page.focus("#add-member")
        page.keyboard.press("Enter")
        expect(page.locator(f"#id_m{row}-session")).to_be_focused()
    assert page.locator("#add-member").is_hidden()


def test_the_task_page_tells_a_screen_reader_when_its_counters_change(logged_in_page, operator, route, agent):
    """The counters are rewritten every 3 s; a status region speaks only when they change."""
    task, _ = task_create(project=route.project, user=operator, request_id="rq-live", name="stocktake",
                          members=[MemberSpec(session_id=str(agent.session.pk), workspace=route.key,
                                              client_conversation_id="c-1")], policy=PolicySpec(max_write_calls=2))
    page = logged_in_page
    page.goto(f"/admin/tasks/task/{task.pk}/change/")
    status = page.locator("#task-live-status[role=status]")
    expect(status).to_have_text("")
    Task.objects.filter(pk=task.pk).update(write_consumed=1, active_permits=1)
    expect(status).to_have_text("Updated: Task active; writes consumed / reserved / max 1 / 0 / 2; "
                                "permits active / max 1 / 1.")
    task_control(task=task, user=operator, request_id="elsewhere-1", expected_revision=1, action="pause")
    expect(status).to_have_text("Updated: Task paused; writes consumed / reserved / max 1 / 0 / 2; "
                                "permits active / max 1 / 1. Changed since this page loaded: reload before deciding.")


def test_a_picked_sessions_whole_label_reads_under_its_select_on_a_phone(logged_in_page, route, agent, operator):
    """At 390 px the closed select showed "demo-agent · operator (principal 1) · …": neither the device
    nor "— in Refund batch (cancelled)" could be read once picked (browser audit, low)."""
    task, _ = task_create(project=route.project, user=operator, request_id="rq-1", name="Refund batch",
                          members=[MemberSpec(session_id=str(agent.session.pk), workspace=route.key,
                                              client_conversation_id="c-1")], policy=PolicySpec())
    task_control(task=task, user=operator, request_id="x-1", expected_revision=1, action="cancel")
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/admin/tasks/task/add/")
    line = page.locator("[data-member-row='0'] [data-session-picked]")
    assert line.is_hidden()
    page.select_option("select[name=m0-session]", str(agent.session.pk))
    expect(line).to_be_visible()
    assert line.inner_text().startswith("Picked: ") and line.inner_text().endswith(" — in Refund batch (cancelled)")
    assert agent.session.device_label in line.inner_text()
    assert line.evaluate("e => e.getBoundingClientRect().right <= window.innerWidth")
    _shot(page, "task-create-picked-390")
    page.select_option("select[name=m0-session]", "")
    expect(line).to_be_hidden()
