"""The task console (apps/runtime/admin_tasks.py, admin_task_create.py) through Django's test
client: scoping, creating a task from sessions with errors beside their fields, a double submit,
control with compare-and-set and a viewer's read-only page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from apps.ledger.models import Run
from apps.projects.models import Membership
from apps.routes.models import Route
from apps.tasks.models import Task, TaskLedgerEntry, TaskMember
from apps.tasks.services import MemberSpec, PolicySpec, task_create
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.ledger.helpers import open_turn
from tests.projects.factories import MembershipFactory, ProjectFactory
from tests.queries import get_statements
from tests.routes.factories import RouteFactory
from tests.tasks.conftest import TaskWorld
from tests.tools.factories import ToolProviderFactory

ADD_URL = reverse("admin:tasks_task_add")
LIST_URL = reverse("admin:tasks_task_changelist")


@pytest.fixture
def tools(world: TaskWorld) -> None:
    provider = ToolProviderFactory(project=world.route.project, name="store")
    route_tools_set(route=world.route, sources=[SourceSpec(provider=provider,
                                                           allowed_tools=["order_status", "stock_adjust"])],
                    write_tools=["stock_adjust"], tools_direct_enabled=True)


@pytest.fixture
def owner(world: TaskWorld) -> Client:
    client = Client()
    client.force_login(world.owner.user)
    return client


def _viewer(world: TaskWorld) -> Client:
    membership = MembershipFactory(project=world.route.project, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(membership.user)
    return client


def _task(world: TaskWorld, **policy) -> Task:
    task, _ = task_create(project=world.route.project, user=world.owner.user, request_id="rq-1", name="restock",
                          members=[MemberSpec(session_id=str(world.first.session.pk), workspace=world.route.key,
                                              client_conversation_id="conv-1", allowed_tools=("stock_adjust",))],
                          policy=PolicySpec(**policy))
    return task


def _form(world: TaskWorld, **overrides) -> dict[str, str | list[str]]:
    data: dict[str, str | list[str]] = {
        "project": str(world.route.project.pk), "request_id": "console:form-1", "name": "restock shelf 4",
        "m0-session": str(world.first.session.pk), "m0-workspace": world.route.key,
        "m0-client_conversation_id": "conv-1", "m0-allowed_tools": [f"{world.route.key}:stock_adjust"],
        "max_write_calls": "3", "max_concurrent": "2", "expires_at": "",
    }
    data.update(overrides)
    return data


def _field_errors(html: str, field: str) -> str:
    """The error list rendered inside the form row of ``field``."""
    match = re.search(rf'data-field="{re.escape(field)}">\s*(<ul class="errorlist"[^>]*>.*?</ul>)', html, re.S)
    return match.group(1) if match else ""


def test_the_list_shows_only_the_operators_projects_tasks(world, owner):
    mine = _task(world)
    other_route = RouteFactory(project=ProjectFactory(), key="elsewhere")
    other_session = session_for(AgentClientFactory(project=other_route.project, allowed_routes=["elsewhere"]),
                                principal=PRINCIPAL)
    task_create(project=other_route.project, user=None, request_id="rq-x", name="not yours",
                members=[MemberSpec(session_id=str(other_session.session.pk), workspace="elsewhere",
                                    client_conversation_id="c")], policy=PolicySpec())
    response = owner.get(LIST_URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "restock" in html and "not yours" not in html
    assert 'data-task-state="active"' in html
    assert "0 / 0 / ∞" in html and "0 / 1" in html
    assert list(response.context["cl"].queryset) == [mine]
    # A task is frozen: the list is not Django's "Select task to change".
    assert "<h1>Tasks</h1>" in html and "to change" not in html


@pytest.mark.parametrize("term", [
    lambda task: "RESTOCK",  # a word of its name, in any case
    lambda task: task.request_id,
    lambda task: str(task.pk),
    lambda task: str(task.pk)[:8],  # the start of its id, as a URL shows it
], ids=["name", "request id", "id", "id prefix"])
def test_the_list_searches_tasks_by_name_request_id_and_id(world, owner, term):
    restock = _task(world)
    task_create(project=world.route.project, user=world.owner.user, request_id="nightly-audit-7", name="count shelves",
                members=[MemberSpec(session_id=str(world.second.session.pk), workspace=world.route.key,
                                    client_conversation_id="conv-2")], policy=PolicySpec())
    response = owner.get(LIST_URL, {"q": term(restock)})
    assert response.status_code == 200
    assert 'id="searchbar"' in response.content.decode()
    assert list(response.context["cl"].queryset) == [restock]


def test_another_projects_task_page_is_a_404(world, owner):
    other = ProjectFactory()
    route = RouteFactory(project=other, key="elsewhere")
    session = session_for(AgentClientFactory(project=other, allowed_routes=[route.key]), principal=PRINCIPAL)
    task, _ = task_create(project=other, user=None, request_id="rq-x", members=[MemberSpec(
        session_id=str(session.session.pk), workspace=route.key, client_conversation_id="c")], policy=PolicySpec())
    assert owner.get(reverse("admin:tasks_task_change", args=[task.pk])).status_code == 404
    assert owner.get(reverse("admin:tasks_task_live", args=[task.pk])).status_code == 404


def test_the_create_form_lists_active_sessions_never_tokens(world, owner, tools):
    response = owner.get(ADD_URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert str(world.first.session.pk) in html and str(world.second.session.pk) in html
    assert world.first.session.client.app_id in html
    # each session names the workspaces it may use, the only ones its member row can take
    label = f"{world.first.session.device_label} — workspaces: {', '.join(world.first.session.allowed_routes)}"
    assert escape(label) in html
    assert world.first.access_token not in html and world.first.refresh_token not in html
    assert re.search(r'name="request_id" value="console:[0-9a-f-]{36}"', html)
    assert "Empty: never. In UTC, the console&#x27;s time zone." in html  # which zone a typed time is read in


def test_a_session_names_only_the_workspaces_its_client_still_allows(world, owner, tools):
    client = world.first.session.client
    client.allowed_routes = []
    client.save()
    html = owner.get(ADD_URL).content.decode()
    assert escape(f"{world.first.session.device_label} — workspaces: none") in html
    assert "workspaces: store-assistant" not in html


def test_a_session_of_an_ended_task_is_offered_with_that_task_named(world, owner, tools):
    """A member of a cancelled task can work again only in a new task: the create page offered it
    as any other session, with no hint of the task it had been in (browser audit, low)."""
    task = _task(world)
    first = escape(f"workspaces: {', '.join(world.first.session.allowed_routes)}")
    second = escape(f"workspaces: {', '.join(world.second.session.allowed_routes)}")
    html = owner.get(ADD_URL).content.decode()
    assert f"{first} — in restock (active)<" in html and f"{second}<" in html
    _control(owner, task, "cancel", 1, confirmed="on")
    html = owner.get(ADD_URL).content.decode()
    assert f"{first} — in restock (cancelled)<" in html and f"{second}<" in html
    searched = owner.get(f"/admin/tasks/task/sessions/{world.route.project.pk}/", {"term": "u-1001"}).json()
    assert [row["text"].endswith(" — in restock (cancelled)") for row in searched["results"]] == [True]
    later, _ = task_create(project=world.route.project, user=None, request_id="rq-2", name="audit",
                           members=[MemberSpec(session_id=str(world.second.session.pk), workspace=world.route.key,
                                               client_conversation_id="conv-2")],
                           policy=PolicySpec(expires_at=timezone.now() + timedelta(hours=1)))
    Task.objects.filter(pk=later.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    assert f"{second} — in audit (expired)<" in owner.get(ADD_URL).content.decode()


def _two_member_task(world: TaskWorld, name: str, request_id: str) -> Task:
    return task_create(project=world.route.project, user=None, request_id=request_id, name=name, members=[
        MemberSpec(session_id=str(session.pk), workspace=world.route.key, client_conversation_id=f"{name}-{n}")
        for n, session in enumerate([world.first.session, world.second.session])], policy=PolicySpec())[0]


def test_a_session_in_several_tasks_is_named_with_one_it_may_still_work_in(world, owner, tools):
    """The newest task was named: "in audit (cancelled)" for a session still working in restock."""
    _task(world)
    audit = task_create(project=world.route.project, user=None, request_id="rq-2", name="audit", members=[
        MemberSpec(session_id=str(world.first.session.pk), workspace=world.route.key, client_conversation_id="c-2")],
        policy=PolicySpec())[0]
    _control(owner, audit, "cancel", 1, confirmed="on")
    first = escape(f"workspaces: {', '.join(world.first.session.allowed_routes)}")
    assert f"{first} — in restock (active)<" in owner.get(ADD_URL).content.decode()


def test_a_task_with_a_revoked_member_is_named_blocked_before_anyone_reads_it(world, owner, tools):
    from apps.agent_auth.services import session_revoke

    task = _two_member_task(world, "stocktake", "rq-3")
    session_revoke(session=world.first.session, revoked_by="operator", reason="left")
    second = escape(f"workspaces: {', '.join(world.second.session.allowed_routes)}")
    assert f"{second} — in stocktake (blocked)<" in owner.get(ADD_URL).content.decode()
    task.refresh_from_db()
    assert task.state == "active"  # as stored: the create page blocks nothing


def test_a_task_whose_member_changed_identity_is_named_blocked_before_anyone_reads_it(world, owner, tools):
    """A changed app id blocks the task at its next read (services._member_changed): the create page
    called it active until then."""
    from apps.agent_auth.models import AgentClient

    _two_member_task(world, "stocktake", "rq-3")
    AgentClient.objects.filter(pk=world.first.session.client_id).update(app_id="renamed-app")
    second = escape(f"workspaces: {', '.join(world.second.session.allowed_routes)}")
    assert f"{second} — in stocktake (blocked)<" in owner.get(ADD_URL).content.decode()


def test_creating_a_task_from_a_session(world, owner, tools):
    response = owner.post(ADD_URL, _form(world))
    task = Task.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:tasks_task_change", args=[task.pk])
    assert (task.name, task.max_write_calls, task.max_concurrent, task.request_id) == (
        "restock shelf 4", 3, 2, "console:form-1")
    member = task.members.get()
    assert (member.session_id, member.workspace, member.client_conversation_id, member.allowed_tools) == (
        world.first.session.pk, world.route.key, "conv-1", ["stock_adjust"])


def test_the_created_message_counts_the_members_in_words(world, owner, tools):
    one = owner.post(ADD_URL, _form(world), follow=True)
    assert "created with 1 member. Its sessions" in one.content.decode()
    two = owner.post(ADD_URL, _form(world, **{"request_id": "console:form-2", "m0-client_conversation_id": "conv-3",
                                              "m1-session": str(world.second.session.pk),
                                              "m1-workspace": world.route.key, "m1-client_conversation_id": "conv-2",
                                              "m1-allowed_tools": [f"{world.route.key}:stock_adjust"]}),
                     follow=True)
    assert Task.objects.count() == 2
    assert "created with 2 members. Its sessions" in two.content.decode()


def test_the_create_form_keeps_a_member_conversation_exactly_as_typed(world, owner, tools):
    """As the builder API does: turns name their conversation exactly."""
    response = owner.post(ADD_URL, _form(world, **{"m0-client_conversation_id": "conv-1 "}))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert list(TaskMember.objects.values_list("client_conversation_id", flat=True)) == ["conv-1 "]


def test_a_double_submit_creates_one_task(world, owner, tools):
    first = owner.post(ADD_URL, _form(world))
    second = owner.post(ADD_URL, _form(world), follow=True)
    assert first.status_code == 302
    assert second.status_code == 200
    assert Task.objects.count() == 1
    assert "already created by this form" in second.content.decode()


def test_a_workspace_the_session_may_not_use_is_shown_beside_the_workspace(world, owner, tools):
    RouteFactory(project=world.route.project, key="back-office")
    response = owner.post(ADD_URL, _form(world, **{"m0-workspace": "back-office", "m0-allowed_tools": []}))
    assert response.status_code == 422
    html = response.content.decode()
    assert "Not a workspace this session may use." in _field_errors(html, "m0-workspace")
    assert "errornote" in html and '"error"' not in html
    assert Task.objects.count() == 0


def test_policy_errors_of_the_service_are_shown_beside_their_fields(world, owner, tools):
    past = (timezone.localtime() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    response = owner.post(ADD_URL, _form(world, max_concurrent="0", expires_at=past))
    assert response.status_code == 422
    html = response.content.decode()
    assert "1 to 64." in _field_errors(html, "max_concurrent")
    assert "Must be in the future." in _field_errors(html, "expires_at")
    assert Task.objects.count() == 0


def test_every_policy_error_shows_at_once_beside_a_too_long_name(world, owner, tools):
    """The ranges were the service's alone, and the service runs once the form is valid: a budget
    of -1 and a concurrency of 0 were said only after a too-long name was put right (browser audit)."""
    past = (timezone.localtime() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    response = owner.post(ADD_URL, _form(world, name="n" * 201, max_write_calls="-1", max_concurrent="0",
                                         expires_at=past))
    assert response.status_code == 422
    html = response.content.decode()
    assert "Ensure this value has at most 200 characters" in _field_errors(html, "name")
    assert "Empty (unlimited) or 0 to 1000000." in _field_errors(html, "max_write_calls")
    assert "1 to 64." in _field_errors(html, "max_concurrent")
    assert "Must be in the future." in _field_errors(html, "expires_at")
    assert Task.objects.count() == 0


def test_a_member_without_conversation_id_is_told_beside_that_field(world, owner, tools):
    response = owner.post(ADD_URL, _form(world, **{"m0-client_conversation_id": ""}))
    assert response.status_code == 422
    assert "1 to 191 printable characters are required, as in a turn." in _field_errors(
        response.content.decode(), "m0-client_conversation_id")
    assert Task.objects.count() == 0


def test_a_task_without_members_is_refused_above_the_form(world, owner, tools):
    response = owner.post(ADD_URL, _form(world, **{"m0-session": ""}))
    assert response.status_code == 422
    assert "Add at least one member" in response.content.decode()
    assert Task.objects.count() == 0


def test_a_viewer_cannot_create_a_task(world, tools):
    viewer = _viewer(world)
    assert viewer.get(ADD_URL).status_code == 403
    assert viewer.post(ADD_URL, _form(world)).status_code == 403
    assert Task.objects.count() == 0


def _control(client: Client, task: Task, action: str, revision: int, request_id: str = "console:c-1", **extra):
    return client.post(reverse("admin:tasks_task_control", args=[task.pk]),
                       {"action": action, "expected_revision": str(revision), "request_id": request_id, **extra},
                       follow=True)


def test_the_task_page_offers_pause_and_cancel_for_an_active_task(world, owner):
    task = _task(world)
    html = owner.get(reverse("admin:tasks_task_change", args=[task.pk])).content.decode()
    assert 'id="task-pause"' in html and 'id="task-cancel"' in html and 'id="task-resume"' not in html
    assert f'name="expected_revision" value="{task.revision}"' in html
    assert task.scope_hash in html


def test_the_task_page_counts_its_ledger_entries_without_1_entries(world, owner):
    """A new task's page read "Ledger 1 entries" (the number is refreshed live, the noun was not)."""
    page = owner.get(reverse("admin:tasks_task_change", args=[_task(world).pk])).content.decode()
    assert '<dt>Ledger entries</dt><dd><span id="task-ledger-sequence">1</span></dd>' in page
    assert "entries</dd>" not in page


def test_a_write_budget_of_one_reads_1_write_call(world, owner):
    page = owner.get(reverse("admin:tasks_task_change", args=[_task(world, max_write_calls=1).pk])).content.decode()
    assert "<dt>Write budget</dt><dd>1 write call</dd>" in page


def test_pausing_with_the_revision_shown(world, owner):
    task = _task(world)
    response = _control(owner, task, "pause", task.revision)
    task.refresh_from_db()
    assert response.status_code == 200
    assert (task.state, task.revision) == ("paused", 2)
    assert 'id="task-resume"' in response.content.decode()


def test_a_stale_page_changes_nothing(world, owner):
    task = _task(world)
    _control(owner, task, "pause", 1, request_id="console:c-1")
    _control(owner, task, "resume", 2, request_id="console:c-2")
    entries = TaskLedgerEntry.objects.filter(task=task).count()
    response = _control(owner, task, "pause", 1, request_id="console:c-3")
    task.refresh_from_db()
    assert "the task changed since you loaded it" in response.content.decode().lower()
    assert (task.state, task.revision) == ("active", 3)
    assert TaskLedgerEntry.objects.filter(task=task).count() == entries


def test_cancel_asks_for_confirmation_first(world, owner):
    task = _task(world)
    response = _control(owner, task, "cancel", task.revision)
    task.refresh_from_db()
    assert task.state == "active"
    listed = owner.get(LIST_URL, {"project__id__exact": str(world.route.project.pk), "state__exact": "active"})
    assert listed.status_code == 200
    assert list(listed.context["cl"].queryset) == [task]
    assert 'id="cancel-confirm"' in response.content.decode()
    confirmed = _control(owner, task, "cancel", 1, confirmed="on")
    task.refresh_from_db()
    assert confirmed.status_code == 200
    assert (task.state, task.revision) == ("cancelled", 2)


def test_a_stale_cancel_is_caught_at_the_first_click(world, owner):
    """Cancel from a page loaded before another tab paused the task: the conflict is reported at once,
    not after the operator confirmed (the confirm box showed the fresh state and said nothing)."""
    task = _task(world)
    _control(owner, task, "pause", 1, request_id="console:c-1")
    response = _control(owner, task, "cancel", 1, request_id="console:c-2")
    task.refresh_from_db()
    page = response.content.decode()
    assert 'id="cancel-confirm"' not in page
    assert "the task changed since you loaded it (it is now paused, revision 2)" in page.lower()
    assert (task.state, task.revision) == ("paused", 2)


def test_a_stale_cancel_is_caught_at_the_first_click_when_a_revoked_member_blocks_the_task(world, owner):
    """The check compared the stored task: the page then blocked it (revision 2) and offered to
    confirm a cancel of revision 1, which failed one click later."""
    from apps.agent_auth.services import session_revoke

    task = _two_member_task(world, "stocktake", "rq-3")
    session_revoke(session=world.second.session, revoked_by="operator", reason="left")
    page = _control(owner, task, "cancel", 1).content.decode()
    task.refresh_from_db()
    assert 'id="cancel-confirm"' not in page
    assert "the task changed since you loaded it (it is now blocked, revision 2)" in page.lower()
    assert (task.state, task.revision) == ("blocked", 2)


def test_a_viewer_sees_no_buttons_and_a_forged_post_is_403(world):
    task = _task(world)
    viewer = _viewer(world)
    html = viewer.get(reverse("admin:tasks_task_change", args=[task.pk])).content.decode()
    assert 'id="task-pause"' not in html and 'id="controls-not-allowed"' in html
    response = _control(viewer, task, "pause", task.revision)
    task.refresh_from_db()
    assert response.status_code == 403
    assert (task.state, task.revision) == ("active", 1)


def test_the_live_endpoint_gives_state_and_counters_only(world, owner):
    task = _task(world, max_write_calls=5)
    response = owner.get(reverse("admin:tasks_task_live", args=[task.pk]))
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert response.json() == {"state": "active", "revision": 1, "ledger_sequence": 1,
                               "counters": {"write_reserved": 0, "write_consumed": 0, "active_permits": 0},
                               "budget": "0 / 0 / 5", "budget_note": "", "permits": "0 / 1", "permits_note": ""}


def test_permits_held_by_uncertain_calls_are_said_beside_the_counter(world, owner):
    """They are never given back: "2 / 2" read as two calls still running, and the agents' calls were
    refused as if one would finish."""
    import uuid

    from apps.tasks.metering import Bound, charge_permit, charge_settle

    task = _task(world, max_write_calls=5, max_concurrent=2)
    bound = Bound(task_id=task.pk, member=task.members.get())
    first, second = uuid.uuid4(), uuid.uuid4()
    for call in (first, second):
        charge_permit(bound=bound, invocation_pk=call, tool_name="stock_adjust", write=True)
    charge_settle(invocation_pk=first, outcome="uncertain")
    live = owner.get(reverse("admin:tasks_task_live", args=[task.pk])).json()
    assert (live["permits"], live["permits_note"]) == (
        "2 / 2", "1 held by a call whose outcome is uncertain, for good: 1 left for new calls.")
    charge_settle(invocation_pk=second, outcome="uncertain")
    page = owner.get(reverse("admin:tasks_task_change", args=[task.pk])).content.decode()
    note = page.split('id="task-permits-note">', 1)[1].split("</span>", 1)[0]
    assert note == ("2 held by calls whose outcome is uncertain, for good: no new call can run "
                    "(TASK_DISPATCH_UNCERTAIN). Check the business system, then cancel the task and create another "
                    "for what is left.")


def test_the_dashboard_counts_active_tasks_and_links_to_them(world, owner):
    task = _task(world)
    _task_paused = task_create(project=world.route.project, user=None, request_id="rq-2", name="paused one",
                               members=[MemberSpec(session_id=str(world.second.session.pk),
                                                   workspace=world.route.key, client_conversation_id="c-2")],
                               policy=PolicySpec())[0]
    _control(owner, _task_paused, "pause", 1)
    response = owner.get("/admin/")
    html = response.content.decode()
    assert re.search(r'data-stat="tasks_active">1<', html)
    assert f'{LIST_URL}?project__id__exact={world.route.project.pk}&amp;state__exact=active' in html
    assert task.state == "active"
    listed = owner.get(LIST_URL, {"project__id__exact": str(world.route.project.pk), "state__exact": "active"})
    assert listed.status_code == 200
    assert list(listed.context["cl"].queryset) == [task]


def test_an_operator_of_several_projects_picks_the_project_first(world, owner):
    MembershipFactory(project=ProjectFactory(name="Second shop"), user=world.owner.user, role=Membership.Role.EDITOR)
    response = owner.get(ADD_URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="project-form"' in html and "Second shop" in html and 'id="task-form"' not in html
    chosen = owner.get(ADD_URL, {"project": str(world.route.project.pk)}).content.decode()
    assert 'id="task-form"' in chosen and str(world.first.session.pk) in chosen


def test_a_tool_of_another_workspace_is_refused_beside_the_tools(world, owner, tools):
    back_office = RouteFactory(project=world.route.project, key="back-office", tools_direct_enabled=True)
    provider = ToolProviderFactory(project=world.route.project, name="store-2")
    route_tools_set(route=back_office, sources=[SourceSpec(provider=provider, allowed_tools=["stock_adjust"])],
                    write_tools=["stock_adjust"], tools_direct_enabled=True)
    response = owner.post(ADD_URL, _form(world, **{"m0-allowed_tools": ["back-office:stock_adjust"]}))
    assert response.status_code == 422
    assert "is a tool of back-office, not of this workspace." in _field_errors(response.content.decode(),
                                                                              "m0-allowed_tools")
    assert Task.objects.count() == 0


def test_the_task_page_lists_its_runs_with_their_state(world, owner):
    task, _ = task_create(project=world.route.project, user=world.owner.user, request_id="rq-run",
                          members=[MemberSpec(session_id=str(world.first.session.pk), workspace=world.route.key,
                                              client_conversation_id="local-conversation-1")],
                          policy=PolicySpec())
    binding = {"schema_version": "bailing.agent-task-binding.v1", "task_id": str(task.pk),
               "scope_hash": task.scope_hash}
    turn = open_turn(world.api, world.first.access_token, world.route.key, task_binding=binding)
    assert turn.status_code == 200, turn.content
    response = owner.get(reverse("admin:tasks_task_change", args=[task.pk]))
    html = response.content.decode()
    run_id = turn.json()["run_id"]
    assert f'data-run="{run_id}"' in html
    assert response.context["runs"] == [{"run_id": run_id, "workspace": world.route.key,
                                         "client_conversation_id": "local-conversation-1",
                                         "run_state": Run.objects.get(pk=run_id).state, "invocations": {}}]


def test_an_expired_task_says_so_in_the_list_and_on_its_page(world, owner):
    task = _task(world, expires_at=timezone.now() + timedelta(hours=1))
    Task.objects.filter(pk=task.pk).update(expires_at=timezone.now() - timedelta(minutes=5))
    assert "expired 20" in owner.get(LIST_URL).content.decode()
    page = owner.get(reverse("admin:tasks_task_change", args=[task.pk])).content.decode()
    assert "TASK_EXPIRED" in page


def test_the_list_shows_when_a_task_was_created_in_the_console_time_zone(world, owner, settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    task = _task(world)
    created = timezone.localtime(task.created_at, timezone.get_fixed_timezone(8 * 60))
    assert f"{created:%Y-%m-%d %H:%M} CST" in owner.get(LIST_URL).content.decode()


def _tools_routes(world: TaskWorld, count: int) -> list[Route]:
    provider = ToolProviderFactory(project=world.route.project, name="warehouse")
    routes = [RouteFactory(project=world.route.project, key=f"shop-{n}") for n in range(count)]
    for route in routes:
        route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["order_status"])],
                        tools_direct_enabled=True)
    return routes


def _tool_boxes(html: str, row: int) -> list[str]:
    """The values of member row `row`'s tool checkboxes, with a ``+`` after each one checked."""
    box = rf'<input type="checkbox" id="id_m{row}-tool-\d+" name="m{row}-allowed_tools" value="([^"]*)"( checked)?>'
    return [value + ("+" if checked else "") for value, checked in re.findall(box, html)]


def test_the_create_form_draws_no_tools_before_a_workspace_is_picked(world, owner, tools):
    """Each row's tools are its workspace's, loaded when one is picked: every tools-enabled route's
    tools in each row were 48,000 boxes at 300 routes of 40 tools (12.5 MB). The page's queries do
    not grow with the routes either."""

    def reads() -> tuple[int, str]:
        with CaptureQueriesContext(connection) as captured:
            response = owner.get(ADD_URL + f"?project={world.route.project.pk}")
        return len(captured.captured_queries), response.content.decode()

    reads()  # the first page fills caches (content types) with queries of its own
    few, _ = reads()
    _tools_routes(world, 3)
    many, page = reads()
    assert many == few
    assert [_tool_boxes(page, row) for row in range(4)] == [[], [], [], []]
    assert page.count("Choose a workspace to see its tools.") == 4


def test_a_refused_form_shows_each_row_its_workspaces_tools_with_its_picks_kept(world, owner, tools):
    _tools_routes(world, 2)
    response = owner.post(ADD_URL, _form(world, **{
        "m0-client_conversation_id": "", "m1-session": str(world.second.session.pk), "m1-workspace": "shop-1",
        "m1-client_conversation_id": "conv-2", "m1-allowed_tools": ["shop-1:order_status"]}))
    assert response.status_code == 422
    html = response.content.decode()
    assert _tool_boxes(html, 0) == ["store-assistant:order_status", "store-assistant:stock_adjust+"]
    assert _tool_boxes(html, 1) == ["shop-1:order_status+"]
    assert [_tool_boxes(html, row) for row in (2, 3)] == [[], []]


def test_a_tool_not_on_the_workspace_is_refused_beside_the_tools_and_the_picks_kept(world, owner, tools):
    """Validation is the same as when every route's tools were choices: exact names of the row's
    workspace's tools."""
    response = owner.post(ADD_URL, _form(world, **{"m0-allowed_tools": ["store-assistant:stock_adjust",
                                                                        "store-assistant:no_such_tool"]}))
    assert response.status_code == 422
    html = response.content.decode()
    assert "store-assistant:no_such_tool is not one of the available choices." in _field_errors(
        html, "m0-allowed_tools")
    assert _tool_boxes(html, 0) == ["store-assistant:order_status", "store-assistant:stock_adjust+"]
    assert Task.objects.count() == 0


TOOLS_URL = "/admin/tasks/task/tools/{}/"


def test_the_tools_box_of_a_workspace_lists_its_tools_only(world, owner, tools):
    """What the page loads into a row when its workspace is picked."""
    _tools_routes(world, 2)
    RouteFactory(project=world.route.project, key="no-tools", tools_direct_enabled=False)
    url = TOOLS_URL.format(world.route.project.pk)
    box = owner.get(url, {"workspace": world.route.key, "row": "2"})
    assert box.status_code == 200
    assert _tool_boxes(box.content.decode(), 2) == ["store-assistant:order_status", "store-assistant:stock_adjust"]
    assert _tool_boxes(owner.get(url, {"workspace": "shop-0", "row": "0"}).content.decode(), 0) == [
        "shop-0:order_status"]
    assert "No tools on no-tools: the member may read knowledge only." in owner.get(
        url, {"workspace": "no-tools", "row": "0"}).content.decode()
    assert "Choose a workspace to see its tools." in owner.get(url, {"workspace": "", "row": "0"}).content.decode()


def test_the_tools_box_reads_one_route_in_queries_that_do_not_grow_with_the_routes(world, owner, tools,
                                                                                    django_assert_num_queries):
    url = TOOLS_URL.format(world.route.project.pk)
    owner.get(url, {"workspace": world.route.key, "row": "0"})  # compiled tools and sessions read once
    _tools_routes(world, 5)
    owner.get(url, {"workspace": "shop-0", "row": "0"})
    # session, user, the project, the route, its sources, their tools
    with django_assert_num_queries(6):
        owner.get(url, {"workspace": world.route.key, "row": "0"})


@pytest.mark.parametrize("query", [{"workspace": "no-such-route", "row": "0"}, {"workspace": "store-\x00assistant",
                                   "row": "0"}, {"workspace": "store-assistant", "row": "4"},
                                   {"workspace": "store-assistant", "row": "-1"}, {"workspace": "store-assistant"},
                                   {"workspace": "store-assistant", "row": "²"},
                                   {"workspace": "store-assistant", "row": "01"}])
def test_a_tools_box_of_no_workspace_or_row_of_the_project_is_a_404(world, owner, tools, query):
    assert owner.get(TOOLS_URL.format(world.route.project.pk), query).status_code == 404


def test_the_tools_box_of_another_project_or_for_a_viewer_is_a_404(world, owner, tools):
    other = RouteFactory(project=ProjectFactory(), key="store-assistant", tools_direct_enabled=True)
    assert owner.get(TOOLS_URL.format(other.project.pk), {"workspace": other.key, "row": "0"}).status_code == 404
    assert _viewer(world).get(TOOLS_URL.format(world.route.project.pk),
                              {"workspace": world.route.key, "row": "0"}).status_code == 404


def test_route_surfaces_are_each_routes_own_surface(world, tools):
    """route_surfaces reads several routes at once; each must be what route_surface gives alone:
    direct tools off, knowledge on with and without a knowledge base, several allow lists of one
    provider, write tools, with and without a session."""
    from apps.knowledge.services import route_knowledge_bind
    from apps.routes.services import route_update
    from apps.tools.surface import route_surface, route_surfaces
    from tests.knowledge.factories import KnowledgeBaseFactory

    project = world.route.project
    provider = ToolProviderFactory(project=project, name="warehouse")
    reads = route_tools_set(route=RouteFactory(project=project, key="reads"), tools_direct_enabled=True,
                            sources=[SourceSpec(provider=provider, allowed_tools=["order_status"])])
    writes = route_tools_set(route=RouteFactory(project=project, key="writes"), tools_direct_enabled=True,
                             sources=[SourceSpec(provider=provider, allowed_tools=["order_status", "stock_adjust"])],
                             write_tools=["stock_adjust"])
    off = route_tools_set(route=RouteFactory(project=project, key="off"), tools_direct_enabled=False,
                          sources=[SourceSpec(provider=provider, allowed_tools=["order_status"])])
    no_kb = route_update(route=route_tools_set(route=RouteFactory(project=project, key="no-kb"),
                                               tools_direct_enabled=True, sources=[]), knowledge_enabled=True)
    with_kb = route_update(route=route_tools_set(route=RouteFactory(project=project, key="with-kb"),
                                                 tools_direct_enabled=True, sources=[]), knowledge_enabled=True)
    route_knowledge_bind(route=with_kb, knowledge_base=KnowledgeBaseFactory(project=project))
    routes = [world.route, writes, reads, off, no_kb, with_kb]  # the larger allow list first
    for session in (None, world.first.session):
        together = route_surfaces(routes=routes, session=session)
        alone = [route_surface(route=route, session=session) for route in routes]
        assert [(s.revision, [tool.name for tool in s.tools]) for s in together] == [
            (s.revision, [tool.name for tool in s.tools]) for s in alone]
    names = [[tool.name for tool in surface.tools] for surface in together]
    assert "stock_adjust" in names[1] and "stock_adjust" not in names[2] and names[3] == [] and names[4] != names[5]


def test_a_tasks_breadcrumbs_keep_its_name_in_an_isolate(world, owner):
    """A name with U+202E or Arabic letters, raw, reordered the trail (Home › Tasks › name)."""
    task, _ = task_create(project=world.route.project, user=world.owner.user, request_id="rq-rtl",
                          name="إعادة \u202eالتخزين <i>", members=[MemberSpec(
                              session_id=str(world.first.session.pk), workspace=world.route.key,
                              client_conversation_id="conv-1", allowed_tools=())], policy=PolicySpec())
    page = owner.get(reverse("admin:tasks_task_change", args=[task.pk])).content.decode()
    trail = re.search(r'<div class="breadcrumbs">(.*?)</div>', page, re.S).group(1)
    assert trail.rstrip().endswith(f"&rsaquo; <bdi>{escape(task.name)}</bdi>")


def test_the_create_form_refuses_a_name_with_a_bidi_control(world, owner, tools):
    """As the builder API's task name does (apps.core.validators.validate_shown_name)."""
    response = owner.post(ADD_URL, _form(world, name="Stocktake\u202e"))
    assert response.status_code == 422
    assert "Invisible direction controls" in _field_errors(response.content.decode(), "name")
    assert Task.objects.count() == 0


def test_past_the_select_limit_a_members_session_is_picked_by_searching(world, owner, tools, monkeypatch):
    """A project of many active sessions: no row lists them all, and a session found by searching
    makes the task as one picked from the list did."""
    from apps.runtime import admin_task_create

    monkeypatch.setattr(admin_task_create, "SESSION_CHOICES_MAX", 1)
    html = owner.get(ADD_URL).content.decode()
    selects = re.findall(r'<select name="m\d-session".*?</select>', html, re.S)
    assert len(selects) == 4
    search_url = f"/admin/tasks/task/sessions/{world.route.project.pk}/"
    assert all(f'data-ajax--url="{search_url}"' in select for select in selects)
    assert str(world.first.session.pk) not in html and str(world.second.session.pk) not in html
    response = owner.post(ADD_URL, _form(world, **{"m0-session": str(world.second.session.pk)}))
    assert response.status_code == 302
    assert Task.objects.get().members.get().session_id == world.second.session.pk


def test_the_session_search_finds_the_projects_active_sessions_by_user_or_principal(world, owner):
    from apps.agent_auth.services import session_revoke
    from apps.runtime.admin_task_create import session_label

    url = f"/admin/tasks/task/sessions/{world.route.project.pk}/"
    found = owner.get(url, {"term": "u-1002"}).json()
    assert found == {"results": [{"id": str(world.second.session.pk), "text": session_label(world.second.session),
                                  "routes": sorted(world.second.session.allowed_routes)}],
                     "pagination": {"more": False}}
    session_revoke(session=world.second.session, revoked_by="operator", reason="left")
    assert owner.get(url, {"term": "u-1002"}).json()["results"] == []
    assert [row["id"] for row in owner.get(url).json()["results"]] == [str(world.first.session.pk)]


@pytest.mark.parametrize("query", [{"term": "u-1002\x00"}, {"term": "u-1002", "page": "9" * 30},
                                   {"term": "u-1002", "page": "-1"}])
def test_a_hostile_session_search_is_no_500(world, owner, query):
    url = f"/admin/tasks/task/sessions/{world.route.project.pk}/"
    response = owner.get(url, query)
    assert (response.status_code, [row["id"] for row in response.json()["results"]]) == (
        200, [str(world.second.session.pk)])


def test_the_session_search_of_another_project_is_a_404(world, owner):
    other = AgentClientFactory(project=ProjectFactory(), allowed_routes=[])
    session_for(other, principal=PRINCIPAL)
    assert owner.get(f"/admin/tasks/task/sessions/{other.project.pk}/").status_code == 404


def test_past_the_route_limit_a_members_workspace_is_picked_by_searching(world, owner, tools, monkeypatch):
    """A project of many routes: no row lists their keys, and a workspace found by searching makes
    the task as one picked from the list did."""
    from apps.routes import admin as routes_admin

    RouteFactory(project=world.route.project, key="unchosen-route")
    monkeypatch.setattr(routes_admin, "ROUTE_CHOICES_MAX", 1)
    html = owner.get(ADD_URL).content.decode()
    selects = re.findall(r'<select name="m\d-workspace".*?</select>', html, re.S)
    assert len(selects) == 4
    search_url = f"/admin/routes/route/keys/{world.route.project.pk}/"
    assert all(f'data-ajax--url="{search_url}"' in select for select in selects)
    assert "unchosen-route" not in html
    response = owner.post(ADD_URL, _form(world))
    assert response.status_code == 302
    assert Task.objects.get().members.get().workspace == world.route.key


@pytest.mark.parametrize("workspace", ["elsewhere", "no-such-route", "store-\x00assistant"])
@pytest.mark.parametrize("route_choices_max", [100, 1])
def test_a_member_takes_no_workspace_but_its_projects_and_nothing_is_created(world, owner, tools, monkeypatch,
                                                                              workspace, route_choices_max):
    from apps.routes import admin as routes_admin

    RouteFactory(project=ProjectFactory(), key="elsewhere")
    MembershipFactory(project=Route.objects.get(key="elsewhere").project, user=world.owner.user,
                      role=Membership.Role.OWNER)
    monkeypatch.setattr(routes_admin, "ROUTE_CHOICES_MAX", route_choices_max)
    response = owner.post(ADD_URL, _form(world, **{"m0-workspace": workspace}))
    assert response.status_code == 422
    assert _field_errors(response.content.decode(), "m0-workspace")
    assert Task.objects.count() == 0


def test_the_tool_picks_walk_only_the_routes_with_agent_direct_tools(world, tools, monkeypatch):
    """A route with agent-direct tools off has none to offer; at 2,000 such routes, walking their
    surfaces was most of the create page."""
    from apps.runtime import admin_task_create
    from apps.tools.surface import route_surfaces

    no_tools = RouteFactory(project=world.route.project, key="no-tools", tools_direct_enabled=False)
    walked = []

    def spy(*, routes, session):
        walked.extend(route.key for route in routes)
        return route_surfaces(routes=routes, session=session)

    monkeypatch.setattr(admin_task_create, "route_surfaces", spy)
    options = admin_task_create.route_tool_options([no_tools, world.route])
    assert walked == [world.route.key]
    assert {key: [option.value for option in row] for key, row in options.items()} == {
        "no-tools": [], "store-assistant": ["store-assistant:order_status", "store-assistant:stock_adjust"]}


def test_a_task_whose_member_was_revoked_reads_blocked_on_its_page_and_its_live_counters(world, owner):
    """The agent's and the builder's reads say blocked; the operator's page said active with the
    member's session shown revoked beside it, and offered Pause."""
    from apps.agent_auth.services import session_revoke

    task = _task(world)
    live = owner.get(reverse("admin:tasks_task_live", args=[task.pk])).json()
    assert live["state"] == "active"
    session_revoke(session=world.first.session, revoked_by="operator", reason="left")
    page = owner.get(reverse("admin:tasks_task_change", args=[task.pk]))
    assert page.status_code == 200
    assert page.context["task"].state == "blocked"
    assert [action["name"] for action in page.context["actions"]] == ["cancel"]
    assert owner.get(reverse("admin:tasks_task_live", args=[task.pk])).json()["state"] == "blocked"
    task.refresh_from_db()
    assert (task.state, task.blocked_reason) == ("blocked", "a member session was revoked")


def test_the_task_page_reads_its_members_once(world, owner):
    """The page checks the member set (a revoked member blocks the task) on the members it shows."""

    task = _task(world)
    with CaptureQueriesContext(connection) as page:
        assert owner.get(reverse("admin:tasks_task_change", args=[task.pk])).status_code == 200
    reads = [q["sql"] for q in page.captured_queries
             if q["sql"].startswith("SELECT") and 'FROM "tasks_taskmember"' in q["sql"]]
    assert len(reads) == 1, reads


def test_a_members_many_tools_are_folded_under_their_count_on_the_task_page(world, owner, tools, monkeypatch):
    """Up to MEMBER_TOOLS_INLINE a member's tools read inline; past it, under "N tools" (a <details>):
    32 members of 40 tools were a members table 25,000 px tall at 390 px."""
    from apps.runtime import admin_tasks

    task = _task(world)  # one tool: stock_adjust
    url = reverse("admin:tasks_task_change", args=[task.pk])
    member = re.compile(r'<tr data-member="0">.*?</tr>', re.S)
    inline = member.search(owner.get(url).content.decode()).group(0)
    assert "<details" not in inline and "<code>stock_adjust</code>" in inline
    monkeypatch.setattr(admin_tasks, "MEMBER_TOOLS_INLINE", 0)
    folded = member.search(owner.get(url).content.decode()).group(0)
    assert '<details class="bh-member-tools"><summary>1 tool</summary><code>stock_adjust</code></details>' in folded


def test_a_long_tools_box_offers_a_filter_by_name(world, owner, tools, monkeypatch):
    """Past TOOLS_FILTER_MIN tools a row's box starts with a labelled filter; below it, none."""
    from apps.runtime import admin_task_create

    url = TOOLS_URL.format(world.route.project.pk)
    query = {"workspace": world.route.key, "row": "1"}
    assert "bh-tools-filter" not in owner.get(url, query).content.decode()
    monkeypatch.setattr(admin_task_create, "TOOLS_FILTER_MIN", 1)
    box = owner.get(url, query).content.decode()
    assert re.search(r'<input type="search" class="bh-tools-filter" id="id_m1-tools-filter" '
                     r'aria-label="Filter the 2 tools by name"', box)


def test_the_list_makes_as_many_queries_with_four_tasks_as_with_one(world, owner):
    _task(world)
    with_one = get_statements(owner, LIST_URL)
    for n in range(2, 5):
        task_create(project=world.route.project, user=world.owner.user, request_id=f"rq-{n}", name=f"restock {n}",
                    members=[MemberSpec(session_id=str(world.second.session.pk), workspace=world.route.key,
                                        client_conversation_id=f"conv-{n}")], policy=PolicySpec())
    assert (get_statements(owner, LIST_URL), Task.objects.count()) == (with_one, 4)
