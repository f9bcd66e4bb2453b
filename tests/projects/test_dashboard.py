"""The console's landing page: one panel per project the operator may see, with its routes, its
knowledge bases and their documents by status, its agent sessions and its recent runs."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from apps.agent_auth.services import session_revoke
from apps.core.timefmt import short_duration
from apps.knowledge.models import Document, KnowledgeBase
from apps.ledger.models import Run
from apps.projects.models import Membership
from tests.agent_auth.helpers import session_for
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.ledger.helpers import open_turn
from tests.projects.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.projects.helpers import admin_client, project_world
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def worlds(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock(), transaction.atomic():
        yield project_world("alpha"), project_world("bravo")
        transaction.set_rollback(True)


@pytest.fixture
def a(worlds):
    return worlds[0]


@pytest.fixture
def b(worlds):
    return worlds[1]


def _board(response, slug):
    return next(board for board in response.context["dashboard"] if board.project.slug == slug)


def test_the_landing_page_is_the_dashboard_of_the_operators_projects(a, b):
    response = admin_client(a.user).get("/admin/")
    assert response.status_code == 200
    assert [board.project.slug for board in response.context["dashboard"]] == ["alpha"]
    page = response.content.decode()
    assert 'id="project-alpha"' in page
    assert "Project bravo" not in page and "Route of bravo" not in page and "KB of bravo" not in page


def test_a_project_panel_lists_its_routes_with_their_knowledge_sources(a, b):
    board = _board(admin_client(a.user).get("/admin/"), "alpha")
    assert [(route.key, route.knowledge_enabled, route.knowledge_sources) for route in board.routes] == [
        ("alpha-route", True, 1)]
    assert board.route_total == 1
    KnowledgeBase.objects.filter(pk=a.kb.pk).update(enabled=False)  # agents no longer read it
    board = _board(admin_client(a.user).get("/admin/"), "alpha")
    assert [(route.key, route.knowledge_sources) for route in board.routes] == [("alpha-route", 0)]


def test_a_project_panel_counts_documents_by_status(a, b):
    refund = a.documents["alpha-refund.md"]
    Document.objects.filter(pk=refund.pk).update(status=Document.Status.FAILED)
    board = _board(admin_client(a.user).get("/admin/"), "alpha")
    [summary] = board.knowledge_bases
    assert (summary.kb.name, summary.ready, summary.total, summary.completed, summary.in_progress,
            summary.awaiting_confirmation, summary.failed) == ("KB of alpha", True, 2, 1, 0, 0, 1)


def test_a_knowledge_base_without_an_active_index_is_not_ready(a, b):
    a.kb.generations.update(status="building")
    [summary] = _board(admin_client(a.user).get("/admin/"), "alpha").knowledge_bases
    assert summary.ready is False
    assert "no active index" in admin_client(a.user).get("/admin/").content.decode()


def test_a_project_panel_counts_active_agent_sessions(a, b):
    session_for(a.agent_client)
    session_revoke(session=a.session, revoked_by="operator", reason="lost laptop")
    board = _board(admin_client(a.user).get("/admin/"), "alpha")
    assert (board.sessions_active, board.sessions_total) == (1, 2)


def test_a_project_panel_says_how_many_active_sessions_are_only_in_ended_tasks(a, b):
    """A member of a cancelled task can work again only in a new task: the panel counted it active
    with nothing beside it (browser audit, low)."""
    from apps.tasks.models import Task
    from apps.tasks.services import MemberSpec, PolicySpec, task_control, task_create

    second = session_for(a.agent_client).session
    tasks = [task_create(project=a.project, user=a.owner.user, request_id=f"rq-{n}", name=f"task {n}",
                         members=[MemberSpec(session_id=str(session.pk), workspace=a.route.key,
                                             client_conversation_id=f"c-{n}")], policy=PolicySpec())[0]
             for n, session in enumerate([a.session, second, second])]
    board = _board(admin_client(a.user).get("/admin/"), "alpha")
    assert (board.sessions_active, board.sessions_in_ended_tasks) == (2, 0)
    task_control(task=tasks[0], user=a.owner.user, request_id="x-0", expected_revision=1, action="cancel")
    task_control(task=tasks[1], user=a.owner.user, request_id="x-1", expected_revision=1, action="cancel")
    response = admin_client(a.user).get("/admin/")
    board = _board(response, "alpha")
    assert (board.sessions_active, board.sessions_in_ended_tasks) == (2, 1)  # the second is still in task 2
    assert 'data-stat="sessions_in_ended_tasks"' in response.content.decode()
    Task.objects.filter(pk=tasks[2].pk).update(state=Task.State.BLOCKED)
    assert _board(admin_client(a.user).get("/admin/"), "alpha").sessions_in_ended_tasks == 2
    session_revoke(session=second, revoked_by="operator", reason="lost laptop")  # no longer active: not counted
    assert _board(admin_client(a.user).get("/admin/"), "alpha").sessions_in_ended_tasks == 1
    # A revoked member blocks its task at its next read: its other members are counted before that.
    third, fourth = session_for(a.agent_client).session, session_for(a.agent_client).session
    pair_members = [MemberSpec(session_id=str(session.pk), workspace=a.route.key, client_conversation_id=f"pair-{n}")
                    for n, session in enumerate([third, fourth])]
    pair = task_create(project=a.project, user=a.owner.user, request_id="rq-pair", name="pair", policy=PolicySpec(),
                       members=pair_members)[0]
    assert _board(admin_client(a.user).get("/admin/"), "alpha").sessions_in_ended_tasks == 1
    session_revoke(session=fourth, revoked_by="operator", reason="lost laptop")
    assert _board(admin_client(a.user).get("/admin/"), "alpha").sessions_in_ended_tasks == 2
    assert Task.objects.get(pk=pair.pk).state == Task.State.ACTIVE  # as stored: the landing page blocks nothing


def test_the_active_tasks_tile_leaves_out_expired_tasks_as_its_list_does(a, b):
    """An expired task runs nothing, yet the tile counted it active beside the sessions counted as only
    in ended tasks (browser audit, low); so does one whose member was revoked (second review)."""

    from apps.tasks.models import Task
    from apps.tasks.services import MemberSpec, PolicySpec, task_create

    tasks = [task_create(project=a.project, user=a.owner.user, request_id=f"rq-{n}", name=f"task {n}",
                         members=[MemberSpec(session_id=str(a.session.pk), workspace=a.route.key,
                                             client_conversation_id=f"c-{n}")],
                         policy=PolicySpec(expires_at=timezone.now() + timedelta(hours=1)))[0] for n in range(2)]
    client = admin_client(a.user)
    assert _board(client.get("/admin/"), "alpha").tasks_active == 2
    Task.objects.filter(pk=tasks[0].pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    page = client.get("/admin/")
    assert _board(page, "alpha").tasks_active == 1
    [alpha] = [section for section in page.content.decode().split('<section class="bh-project"')
               if 'data-project="alpha"' in section]
    href = re.search(r'<a class="bh-tile" href="([^"]+)">\s*<span class="bh-tile-n" data-stat="tasks_active">', alpha)
    listed = client.get(href.group(1).replace("&amp;", "&"))
    assert [task.pk for task in listed.context["cl"].queryset] == [tasks[1].pk]
    ended = client.get("/admin/tasks/task/", {"runs": "no"})
    assert [task.pk for task in ended.context["cl"].queryset] == [tasks[0].pk]
    # A revoked member blocks its task at its next read: neither the tile nor its list counts it before.
    third = session_for(a.agent_client).session
    pair = task_create(project=a.project, user=a.owner.user, request_id="rq-pair", name="pair", policy=PolicySpec(),
                       members=[MemberSpec(session_id=str(third.pk), workspace=a.route.key,
                                           client_conversation_id="pair")])[0]
    assert _board(client.get("/admin/"), "alpha").tasks_active == 2
    session_revoke(session=third, revoked_by="operator", reason="lost laptop")
    assert _board(client.get("/admin/"), "alpha").tasks_active == 1
    assert Task.objects.get(pk=pair.pk).state == Task.State.ACTIVE
    assert [task.pk for task in client.get(href.group(1).replace("&amp;", "&")).context["cl"].queryset] == [
        tasks[1].pk]


def test_every_tile_opens_the_list_it_counts(a, b):
    # The sessions tile linked a filter the list does not have: Django dropped it (?e=1) and
    # listed every session, revoked ones and other projects' included.
    # A run of the day before: the runs tile counts the last 24 hours, and its list shows them alone.
    Run.objects.filter(pk=open_turn(APIClient(), a.access_token, a.route.key, 2).json()["run_id"]).update(
        created_at=timezone.now() - timedelta(days=2))
    session_for(a.agent_client)
    session_revoke(session=a.session, revoked_by="operator", reason="lost laptop")
    session_for(b.agent_client)
    client = admin_client(UserFactory(is_staff=True, is_superuser=True))
    page = client.get("/admin/").content.decode()
    [alpha] = [section for section in page.split('<section class="bh-project"') if 'data-project="alpha"' in section]
    tiles = re.findall(r'<a class="bh-tile" href="([^"]+)">\s*<span class="bh-tile-n" data-stat="(\w+)">(\d+)<', alpha)
    assert {stat for _, stat, _ in tiles} >= {"routes", "knowledge_bases", "sessions_active", "approvals_pending"}
    pages = {stat: client.get(href.replace("&amp;", "&")) for href, stat, _ in tiles}
    assert {stat: (page.status_code, page.get("Location")) for stat, page in pages.items()} == {
        stat: (200, None) for stat in pages}
    listed = {stat: page.context["cl"].result_count for stat, page in pages.items()}
    counted = {stat: int(count) for _, stat, count in tiles}
    assert listed == counted
    # The project parameter shows an operator nothing beyond their own projects.
    other = admin_client(a.user).get(f"/admin/agent_auth/agentsession/?client__project__id__exact={b.project.pk}")
    assert (other.status_code, other.context["cl"].result_count) == (200, 0)


def test_a_project_panel_shows_its_recent_runs_newest_first(a, b):

    second = open_turn(APIClient(), a.access_token, a.route.key, 2, user_input="第二个问题").json()["run_id"]
    board = _board(admin_client(a.user).get("/admin/"), "alpha")
    assert [str(run.pk) for run in board.recent_runs] == [second, str(a.run.pk)]
    assert board.runs_last_day == 2
    assert f"/admin/ledger/run/{second}/change/" in admin_client(a.user).get("/admin/").content.decode()


def test_a_quiet_projects_recent_runs_are_shown_beside_a_busier_projects_newer_ones(a, b, monkeypatch):
    """The newest runs of all projects are read first; a project with fewer of them than it shows
    (bravo, whose one run is older than alpha's newest) is ranked alone."""

    from apps.runtime import dashboard

    monkeypatch.setattr(dashboard, "RUNS_PER_PROJECT", 2)
    # Alpha's four new runs are the newest four of all, as many as the two projects show.
    opened = [open_turn(APIClient(), a.access_token, a.route.key, n, client_conversation_id=f"c-{n}").json()["run_id"]
              for n in range(2, 6)]
    response = admin_client(UserFactory(is_superuser=True)).get("/admin/")
    assert [str(run.pk) for run in _board(response, "alpha").recent_runs] == [opened[3], opened[2]]
    assert [run.pk for run in _board(response, "bravo").recent_runs] == [b.run.pk]


def test_a_superuser_sees_every_project(a, b):
    root = UserFactory(is_superuser=True)
    response = admin_client(root).get("/admin/")
    assert [board.project.slug for board in response.context["dashboard"]] == ["alpha", "bravo"]
    assert {board.role for board in response.context["dashboard"]} == {"superuser"}


def test_the_operators_role_is_shown_per_project(a, b):
    MembershipFactory(project=b.project, user=a.user, role=Membership.Role.VIEWER)
    response = admin_client(a.user).get("/admin/")
    assert [(board.project.slug, board.role) for board in response.context["dashboard"]] == [
        ("alpha", "owner"), ("bravo", "viewer")]


def test_an_operator_without_projects_is_told_so():
    loner = UserFactory(is_staff=True)
    page = admin_client(loner).get("/admin/").content.decode()
    assert "You are not a member of any project yet." in page


def test_no_page_offers_a_view_site_link(a, b):
    for path in ("/admin/", "/admin/routes/route/", f"/admin/routes/route/{a.route.pk}/change/"):
        page = admin_client(a.user).get(path).content.decode()
        assert "View site" not in page


def test_the_dashboard_query_count_does_not_grow_with_rows(a, b, django_assert_num_queries):
    client = admin_client(a.user)
    MembershipFactory(project=b.project, user=a.user, role=Membership.Role.EDITOR)
    client.get("/admin/")  # warm per-process caches (content types)
    with CaptureQueriesContext(connection) as baseline:
        client.get("/admin/")
    expected = len(baseline.captured_queries)  # read now: the log is shared and bounded
    # More of everything: projects, routes, knowledge bases, sessions and runs.
    third = ProjectFactory(name="Project charlie", slug="charlie")
    MembershipFactory(project=third, user=a.user)
    RouteFactory.create_batch(4, project=a.project)
    RouteFactory.create_batch(3, project=third)
    for n in range(3):
        KnowledgeBaseFactory(project=a.project, embedding_model=a.kb.embedding_model, name=f"more {n}")
    session_for(a.agent_client)

    for n in range(2, 6):
        open_turn(APIClient(), a.access_token, a.route.key, n, client_conversation_id=f"c-{n}")
    with django_assert_num_queries(expected):
        response = client.get("/admin/")
    assert len(response.context["dashboard"]) == 3
    assert len(_board(response, "alpha").recent_runs) == 5


def test_the_dashboard_reads_nothing_twice(a, b):
    # Documents and tool calls share the default queue: each side's judgement read the other's
    # work again, and each app list asked again whether the operator owns a project.
    client = admin_client(a.user)
    client.get("/admin/")  # warm per-process caches (content types)
    with CaptureQueriesContext(connection) as page:
        response = client.get("/admin/")
    assert response.status_code == 200
    statements = [query["sql"] for query in page.captured_queries]
    assert [sql for sql in set(statements) if statements.count(sql) > 1] == []


def test_a_tile_of_one_names_it_in_the_singular(a, b):
    page = admin_client(a.user).get("/admin/").content.decode()
    tiles = dict(re.findall(r'data-stat="(\w+)">1</span><span class="bh-tile-label">([^<]*)', page))
    assert tiles == {"routes": "route", "knowledge_bases": "knowledge base", "sessions_active": "active agent session ",
                     "runs_last_day": "run in the last 24 h"}


def test_a_run_opened_under_a_minute_ago_was_just_now(a, b):
    """Django's timesince read "0 minutes ago"."""
    Run.objects.filter(pk=a.run.pk).update(created_at=timezone.now())
    page = admin_client(a.user).get("/admin/").content.decode()
    [when] = re.findall(rf'<tr data-run="{a.run.pk}">\s*<td><a [^>]*>([^<]*)</a>', page)
    assert when == "just now"


def test_a_project_no_agent_signed_in_to_says_so_rather_than_zero_of_zero():
    """h4: "0 active agent sessions of 0" read like a broken counter."""
    quiet = MembershipFactory(role=Membership.Role.OWNER, project=ProjectFactory(slug="quiet"))
    page = admin_client(quiet.user).get("/admin/").content.decode()
    assert '<span class="bh-muted" data-stat="sessions_none">· no agent has signed in yet</span>' in page
    assert "of 0</span>" not in page


def _queued(document, *, ago: float, status: str = Document.Status.QUEUED, heartbeat_ago: float | None = None):
    now = timezone.now()
    Document.objects.filter(pk=document.pk).update(
        status=status, queued_at=now - timezone.timedelta(seconds=ago),
        heartbeat_at=None if heartbeat_ago is None else now - timezone.timedelta(seconds=heartbeat_ago))


def test_documents_queued_for_minutes_with_no_worker_ingesting_are_named_on_the_landing_page(a, b):
    """With every worker down, the landing page called the KB ready and counted the uploads "in
    progress"; only each KB's own page said that nothing moved."""
    for document in a.documents.values():
        _queued(document, ago=300)
    _queued(b.documents["bravo-refund.md"], ago=30)  # bravo's waited half a minute: nothing to say yet
    response = admin_client(a.user).get("/admin/")
    waiting = _board(response, "alpha").waiting_for_a_worker
    assert (waiting["documents"], round((timezone.now() - waiting["since"]).total_seconds() / 60)) == (2, 5)
    assert (waiting["held"], waiting["silent"]) == (0, None)  # nothing held: no worker at all
    page = response.content.decode()
    assert re.search(r"2 documents queued for 5\xa0minutes with no worker ingesting: check that the Celery "
                     r"workers are running", page), page
    assert admin_client(a.user).get("/admin/knowledge/document/?status__exact=queued").status_code == 200
    assert _board(admin_client(b.user).get("/admin/"), "bravo").waiting_for_a_worker is None


@pytest.mark.parametrize(("heartbeat_ago", "waiting"), [(10, None), (300, 1)])
def test_a_queue_is_stalled_only_while_what_it_ingests_is_silent(a, b, heartbeat_ago, waiting):
    """A document queued for minutes behind one a worker is embedding now is only in line."""
    _queued(a.documents["alpha-refund.md"], ago=300)
    _queued(a.documents["alpha-delivery.md"], ago=400, status=Document.Status.EMBEDDING, heartbeat_ago=heartbeat_ago)
    board = _board(admin_client(a.user).get("/admin/"), "alpha")
    assert (board.waiting_for_a_worker or {}).get("documents") == waiting


def _sign(response) -> str:
    match = re.search(r'<p class="bh-waiting bh-bad" data-stat="waiting_for_a_worker">(.*?) <a ',
                      response.content.decode())
    assert match is not None
    return match.group(1)


def test_documents_behind_workers_that_hold_work_and_went_quiet_are_told_so_not_that_no_worker_runs(a, b):
    """Workers that hold a document and stopped speaking (stuck, or killed mid-task) are running
    or were: the sign said "no worker ingesting", which sent operators to start workers that were
    there. The KB page told the two apart; the landing page now says what that page says."""
    _queued(a.documents["alpha-refund.md"], ago=300)
    _queued(a.documents["alpha-delivery.md"], ago=400, status=Document.Status.EMBEDDING, heartbeat_ago=120)
    response = admin_client(a.user).get("/admin/")
    waiting = _board(response, "alpha").waiting_for_a_worker
    assert (waiting["documents"], waiting["held"], short_duration(waiting["silent"])) == (1, 1, "2 min")
    assert _sign(response) == (
        "1 document queued for 5\xa0minutes behind workers that hold work on their queue but have said nothing for "
        "2 min: check that the Celery workers are still running, and their logs for what they are stuck on.")


def test_a_document_just_queued_behind_quiet_workers_is_counted_as_its_kb_page_tells_it(a, b):
    """One judgement (apps.core.workers.queue_halt): the KB page says at once that a document queued
    ten seconds ago waits behind workers silent for minutes; the landing page waited a minute more."""
    _queued(a.documents["alpha-refund.md"], ago=10)
    _queued(a.documents["alpha-delivery.md"], ago=400, status=Document.Status.EMBEDDING, heartbeat_ago=300)
    waiting = _board(admin_client(a.user).get("/admin/"), "alpha").waiting_for_a_worker
    assert (waiting or {}).get("held") == 1


def test_documents_in_a_quiet_lane_and_in_an_idle_one_are_told_apart(a, b, settings):
    """Small documents behind workers gone quiet on the default queue, a large one on the large
    documents' queue that no worker has taken (none runs there)."""
    settings.KNOWLEDGE_TASK_QUEUE = None
    _queued(a.documents["alpha-refund.md"], ago=300)
    _queued(a.documents["alpha-delivery.md"], ago=400, status=Document.Status.EMBEDDING, heartbeat_ago=120)
    large = KnowledgeBaseFactory(project=a.project)
    Document.objects.create(knowledge_base=large, filename="big.pdf", file_type="pdf",
                            size=settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES, content_hash="2" * 64,
                            status=Document.Status.QUEUED, queued_at=timezone.now() - timezone.timedelta(minutes=7))
    response = admin_client(a.user).get("/admin/")
    waiting = _board(response, "alpha").waiting_for_a_worker
    assert (waiting["documents"], waiting["held"]) == (2, 1)
    assert _sign(response) == (
        "2 documents queued for 7\xa0minutes: 1 behind workers that hold work on their queue but have said nothing for "
        "2 min, the others with no worker ingesting: check that the Celery workers are running, and their logs for "
        "what they are stuck on.")


def _steps(page: str, slug: str) -> list[tuple[str, str, str]]:
    """(done, text, link href or "") of each step of a project's Get started list, in order."""
    [section] = [s for s in page.split('<section class="bh-project"') if f'data-project="{slug}"' in s]
    steps = []
    for done, item in re.findall(r'<li data-step="\d+" data-done="(\w+)"(.*?)</li>', section, re.S):
        text = re.search(r'<span class="bh-step-text">(.*?)</span>\s*(?:<a |$)', item, re.S).group(1)
        link = re.search(r'<a href="([^"]+)">', item)
        href = link.group(1).replace("&amp;", "&") if link else ""
        steps.append((done, re.sub(r"<[^>]+>|\s+", " ", text).strip(), href))
    return steps


def test_an_empty_project_lists_its_first_steps_each_a_link_to_the_page_that_takes_it():
    owner = MembershipFactory(project=ProjectFactory(name="Empty Co", slug="empty"), role=Membership.Role.OWNER)
    client = admin_client(owner.user)
    steps = _steps(client.get("/admin/").content.decode(), "empty")
    assert [(done, text.split(":")[0].split(" from ")[0]) for done, text, _ in steps] == [
        ("no", "Add a route"), ("no", "Add a knowledge base and upload documents into it."),
        ("no", "Let a route read it"), ("no", "Add a tool provider"), ("no", "Add an agent client"),
        ("no", "Sign an agent in"),
    ]
    project_id = str(owner.project.pk)
    pages = [client.get(href) for _, _, href in steps]
    assert [page.status_code for page in pages] == [200] * 6
    # The add pages start in this project.
    for page in (pages[0], pages[1], pages[3], pages[4]):
        assert str(page.context["adminform"].form.initial.get("project")) == project_id


def test_the_steps_tick_off_as_they_are_taken_and_the_list_goes_once_they_are(a, b):
    owner = MembershipFactory(project=ProjectFactory(name="Growing Co", slug="growing"), role=Membership.Role.OWNER)
    client = admin_client(owner.user)
    RouteFactory(project=owner.project, key="growing-route")
    steps = _steps(client.get("/admin/").content.decode(), "growing")
    assert [done for done, _, _ in steps] == ["yes", "no", "no", "no", "no", "no"]
    assert steps[0][2] == ""  # a step taken links nowhere
    # A project with a route reading a KB of documents, an agent client and a signed-in agent is under
    # way: the list is gone (the tool provider is optional).
    page = admin_client(a.user).get("/admin/").content.decode()
    assert 'data-project="alpha"' in page and 'data-panel="getting_started"' not in page


def test_a_viewer_reads_the_steps_without_links_and_who_takes_them():
    viewer = MembershipFactory(project=ProjectFactory(name="Watched Co", slug="watched"), role=Membership.Role.VIEWER)
    page = admin_client(viewer.user).get("/admin/").content.decode()
    assert [href for _, _, href in _steps(page, "watched")] == [""] * 6
    assert "You can view this project: an owner or an editor takes these steps." in page


def test_the_steps_read_the_whole_project_not_the_panels_first_rows(a, b, monkeypatch):
    # The panels show the first routes and KBs only: a route reading a KB of documents beyond them
    # left "Let a route read it" and "upload documents" undone for ever.
    monkeypatch.setattr("apps.runtime.dashboard.ROUTES_PER_PROJECT", 1)
    monkeypatch.setattr("apps.runtime.dashboard.KBS_PER_PROJECT", 1)
    RouteFactory(project=a.project, key="a-first", name="A route without knowledge")
    KnowledgeBaseFactory(project=a.project, embedding_model=a.kb.embedding_model, name="A empty KB")
    response = admin_client(a.user).get("/admin/")
    board = _board(response, "alpha")
    assert ([route.key for route in board.routes], [s.kb.name for s in board.knowledge_bases]) == (
        ["a-first"], ["A empty KB"])
    assert board.getting_started == []
    assert 'data-panel="getting_started"' not in response.content.decode()
