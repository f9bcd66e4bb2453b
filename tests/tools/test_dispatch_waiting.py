"""Tool calls queued for dispatch that no worker takes: the console says so (the dashboard, per
project; the call's own page, with what to check), judged as documents waiting to be ingested are
(apps.core.workers). The `shop` fixture sends the dispatcher's messages to a queue no worker
consumes: every worker of the dispatch queue is down."""

from __future__ import annotations

import re
from contextlib import contextmanager
from datetime import timedelta
from importlib import import_module

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from apps.core.health import broker_look_forget, check_broker
from apps.core.redis import redis_client
from apps.knowledge.models import Document
from apps.knowledge.progress import documents_waiting_for_a_worker, knowledge_base_ingest_status
from apps.projects.models import Membership
from apps.tools.approvals import approval_decide
from apps.tools.invocations import invocation_watchdog
from apps.tools.models import Approval, Invocation
from apps.tools.selectors import (
    dispatch_activity,
    dispatch_queue_name,
    invocation_dispatch_stall,
    invocation_passed_over,
    invocations_passed_over,
    invocations_waiting_for_a_worker,
)
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.tools.invocation_helpers import new_id

pytest_plugins = ["tests.tools.invocation_fixtures"]

UNDELIVERED_QUEUE = "test-invocations-undelivered"  # the shop fixture's: no worker consumes it

IN_PROGRESS_TEXT = ("The call is being executed. Resume this same invocation_id to read its result; do not submit "
                    "it again.")


@pytest.fixture
def queued(shop, settings) -> Invocation:
    """A call the agent made, answered in_progress: proven not sent, waiting for the dispatcher."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert (body["state"], body["text"]) == ("in_progress", IN_PROGRESS_TEXT)
    return Invocation.objects.get(invocation_id=body["invocation_id"])


@pytest.fixture
def owner(shop) -> Client:
    user = UserFactory(username="owner", is_staff=True, is_superuser=False)
    MembershipFactory(project=shop.route.project, user=user, role=Membership.Role.OWNER)
    client = Client()
    client.force_login(user)
    return client


def _queued_ago(inv: Invocation, seconds: float) -> None:
    """Queued (and sent) `seconds` ago, untouched since."""
    at = timezone.now() - timedelta(seconds=seconds)
    Invocation.objects.filter(pk=inv.pk).update(queued_at=at, updated_at=at)


def _sending(shop, *, claimed_ago: float, deadline_in: float = -30) -> Invocation:
    """Another call a worker claimed `claimed_ago` seconds ago, with its dispatch deadline (its
    timeout and grace after the claim) `deadline_in` seconds from now: past it by default, when a
    live worker would have recorded an answer (or the watchdog will call it uncertain)."""
    body = shop.invoke("item_read", {"item_id": "2"}).json()
    inv = Invocation.objects.get(invocation_id=body["invocation_id"])
    now = timezone.now()
    Invocation.objects.filter(pk=inv.pk).update(
        journal_state=Invocation.JournalState.DISPATCHING, dispatched_at=now - timedelta(seconds=claimed_ago),
        dispatch_deadline=now + timedelta(seconds=deadline_in))
    return inv


# When a call was queued: set by invocations._queue, the one place every queueing goes through.


def test_a_queued_call_records_when_it_was_queued(shop, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    before = timezone.now()
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    after = timezone.now()
    queued = Invocation.objects.get(invocation_id=body["invocation_id"])
    assert (body["state"], queued.journal_state) == ("in_progress", Invocation.JournalState.ABSENT)
    assert queued.created_at <= queued.queued_at
    assert before <= queued.queued_at <= after


def test_an_approved_call_is_queued_by_the_resume_that_runs_it(shop, settings):
    """Not when it was made (it waited for a person), nor when it was approved (deciding sends
    nothing): when its agent's resume hands it to the dispatcher."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    invocation_id = new_id()
    made = shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 5}, invocation_id=invocation_id).json()
    assert made["state"] == "awaiting_approval"
    approval_decide(approval_id=Approval.objects.get().pk, projects=[shop.route.project], decision_id="d-1",
                    decision="approved")
    Invocation.objects.filter(invocation_id=invocation_id).update(created_at=timezone.now() - timedelta(hours=1))
    assert Invocation.objects.get(invocation_id=invocation_id).queued_at is None
    before = timezone.now()
    assert shop.resume(invocation_id).json()["state"] == "in_progress"
    resumed = Invocation.objects.select_related("approval").get(invocation_id=invocation_id)
    assert resumed.approval.used_at is not None
    assert before <= resumed.approval.used_at <= resumed.queued_at <= timezone.now()


def test_a_resume_of_a_queued_call_keeps_when_it_was_queued(shop, queued):
    """The resume sends a call unclaimed for a while to the dispatcher again (its message may be
    lost): it has waited no less for that."""
    long_ago = timezone.now() - timedelta(minutes=10)
    Invocation.objects.filter(pk=queued.pk).update(queued_at=long_ago, updated_at=long_ago)
    assert shop.resume(queued.invocation_id).json()["state"] == "in_progress"
    queued.refresh_from_db()
    assert (queued.queued_at, queued.updated_at > long_ago) == (long_ago, True)


def test_a_call_the_rate_limit_refused_is_queued_by_the_resume_that_lets_it_through(shop, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    for n in range(2):
        assert shop.invoke("limited_write", {"n": n}).json()["state"] == "in_progress"
    invocation_id = new_id()
    refused = shop.invoke("limited_write", {"n": 3}, invocation_id=invocation_id).json()
    assert (refused["state"], refused["auto_retry_allowed"]) == ("rejected_before_dispatch", True)
    call = Invocation.objects.get(invocation_id=invocation_id)
    assert call.queued_at is None
    for key in redis_client().scan_iter(f"bailinghub:tools:rate:{call.provider_id}:limited_write:*"):
        redis_client().delete(key)  # the window has passed
    before = timezone.now()
    assert shop.resume(invocation_id).json()["state"] == "in_progress"
    call.refresh_from_db()
    assert (call.state, call.journal_state) == (Invocation.State.IN_PROGRESS, Invocation.JournalState.ABSENT)
    assert before <= call.queued_at <= timezone.now()


def test_the_watchdogs_resend_keeps_the_time_it_was_queued(queued, settings):
    """The watchdog (or a resume) sends a lost message again: the call has waited no less for it."""
    long_ago = timezone.now() - timedelta(minutes=10)
    Invocation.objects.filter(pk=queued.pk).update(queued_at=long_ago, updated_at=long_ago)
    assert invocation_watchdog() == {"requeued": 1, "uncertain": 0, "settled": 0}
    queued.refresh_from_db()
    assert (queued.queued_at, queued.updated_at > long_ago) == (long_ago, True)


def test_the_upgrade_dates_calls_queued_before_it_from_when_they_were_queued(shop, queued):
    """Migration 0008's backfill. updated_at, which it read, is refreshed by the watchdog's re-send
    every minute or so: a call queued for hours read as queued a minute ago. A direct call was
    queued when it was made; an approved one when a resume consumed its approval."""
    from django.apps import apps

    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 5}, invocation_id=invocation_id)
    approval_decide(approval_id=Approval.objects.get().pk, projects=[shop.route.project], decision_id="d-1",
                    decision="approved")
    assert shop.resume(invocation_id).json()["state"] == "in_progress"
    approved = Invocation.objects.get(invocation_id=invocation_id)
    now = timezone.now()
    Invocation.objects.filter(pk=queued.pk).update(created_at=now - timedelta(hours=3), updated_at=now,
                                                   queued_at=None)
    Invocation.objects.filter(pk=approved.pk).update(created_at=now - timedelta(hours=5), updated_at=now,
                                                     queued_at=None)
    Approval.objects.filter(invocation=approved).update(used_at=now - timedelta(hours=2))
    settled = _sending(shop, claimed_ago=5, deadline_in=25)
    Invocation.objects.filter(pk=settled.pk).update(queued_at=None)

    import_module("apps.tools.migrations.0008_invocation_queued_at")._queued_since_first_sent(apps, None)
    assert dict(Invocation.objects.values_list("pk", "queued_at")) == {
        queued.pk: now - timedelta(hours=3), approved.pk: now - timedelta(hours=2), settled.pk: None}


def test_the_dispatch_queue_moves_while_a_worker_sends_and_speaks(shop):
    assert dispatch_activity() == {"count": 0, "heartbeat_at": None, "busy_until": None}
    sending = _sending(shop, claimed_ago=5, deadline_in=25)
    sending.refresh_from_db()
    assert dispatch_activity() == {"count": 1, "heartbeat_at": sending.dispatched_at,
                                   "busy_until": sending.dispatch_deadline}


def test_calls_queued_over_a_minute_with_no_worker_are_counted_per_project(shop, queued):
    _queued_ago(queued, 300)
    waiting = invocations_waiting_for_a_worker(project_ids=[shop.route.project_id, ProjectFactory().pk])
    assert list(waiting) == [shop.route.project_id]
    assert (waiting[shop.route.project_id]["calls"], waiting[shop.route.project_id]["held"],
            waiting[shop.route.project_id]["silent"]) == (1, 0, None)  # nothing held: no worker at all
    assert round((timezone.now() - waiting[shop.route.project_id]["since"]).total_seconds() / 60) == 5


def test_a_call_queued_under_a_minute_is_not_counted_yet(shop, queued):
    _queued_ago(queued, 30)
    assert invocations_waiting_for_a_worker(project_ids=[shop.route.project_id]) == {}


@pytest.mark.parametrize(("claimed_ago", "calls"), [(10, None), (300, 1)])
def test_the_dispatch_queue_stalls_only_while_what_it_sends_is_silent(shop, queued, claimed_ago, calls):
    """A call queued for minutes while a worker claimed another seconds ago is only in line."""
    _queued_ago(queued, 300)
    _sending(shop, claimed_ago=claimed_ago)
    waiting = invocations_waiting_for_a_worker(project_ids=[shop.route.project_id])
    assert waiting.get(shop.route.project_id, {}).get("calls") == calls


def test_a_settled_call_is_never_counted(shop, queued):
    Invocation.objects.filter(pk=queued.pk).update(
        state=Invocation.State.EXECUTED, journal_state=Invocation.JournalState.COMPLETED,
        queued_at=timezone.now() - timedelta(minutes=5))
    assert invocations_waiting_for_a_worker(project_ids=[shop.route.project_id]) == {}


def test_a_slow_send_within_its_deadline_is_a_worker_at_work(shop, queued):
    """A tool's timeout may be up to 600 s: a worker claimed a call 2 min ago and waits on the
    business system, its deadline 8 min ahead. The call queued behind it for 90 s is in line, not
    behind silent workers (the sign said "no word from the workers sending calls for 2 min")."""
    _queued_ago(queued, 90)
    _sending(shop, claimed_ago=120, deadline_in=480)
    queued.refresh_from_db()
    assert (invocations_waiting_for_a_worker(project_ids=[shop.route.project_id]),
            invocation_dispatch_stall(inv=queued)) == ({}, "")


def _ingesting(project, *, size: int, heartbeat_ago: float) -> Document:
    """A document a worker is embedding, its last heartbeat `heartbeat_ago` seconds ago."""
    return Document.objects.create(
        knowledge_base=KnowledgeBaseFactory(project=project), filename="bulk.txt", file_type="txt", size=size,
        content_hash="0" * 64, status=Document.Status.EMBEDDING, queued_at=timezone.now() - timedelta(minutes=10),
        heartbeat_at=timezone.now() - timedelta(seconds=heartbeat_ago))


def test_workers_busy_ingesting_on_the_shared_default_queue_move_it(shop, queued, settings):
    """By default calls are dispatched on the default queue, where small documents are ingested: a
    bulk upload keeps every worker busy and a call waits minutes behind it, on a queue that moves
    (the dashboard said no worker consumed it)."""
    settings.TOOL_DISPATCH_QUEUE = None
    _queued_ago(queued, 300)
    queued.refresh_from_db()
    _ingesting(shop.route.project, size=100, heartbeat_ago=5)
    assert (invocations_waiting_for_a_worker(project_ids=[shop.route.project_id]),
            invocation_dispatch_stall(inv=queued)) == ({}, "")


def test_ingestion_on_another_queue_does_not_move_the_dispatch_queue(shop, queued, settings):
    """Large documents are ingested on their own queue, and a dispatch queue of its own
    (TOOL_DISPATCH_QUEUE) is moved by nothing but calls."""
    settings.TOOL_DISPATCH_QUEUE = None
    _queued_ago(queued, 300)
    _ingesting(shop.route.project, size=settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES, heartbeat_ago=5)
    assert invocations_waiting_for_a_worker(project_ids=[shop.route.project_id])[shop.route.project_id]["calls"] == 1
    settings.TOOL_DISPATCH_QUEUE = UNDELIVERED_QUEUE
    _ingesting(shop.route.project, size=100, heartbeat_ago=5)
    assert invocations_waiting_for_a_worker(project_ids=[shop.route.project_id])[shop.route.project_id]["calls"] == 1


def test_silent_ingestion_on_the_shared_queue_does_not_move_it(shop, queued, settings):
    settings.TOOL_DISPATCH_QUEUE = None
    _queued_ago(queued, 300)
    _ingesting(shop.route.project, size=100, heartbeat_ago=600)
    assert invocations_waiting_for_a_worker(project_ids=[shop.route.project_id])[shop.route.project_id]["calls"] == 1
    # No call is being sent: the page blames no "workers sending calls", only the queue's busy ones.
    queued.refresh_from_db()
    assert invocation_dispatch_stall(inv=queued) == "no word for 10 min from the workers busy on its queue"


@pytest.mark.parametrize(("knowledge_queue", "calls"), [("celery", None), ("knowledge.all", 1)])
def test_a_knowledge_queue_of_its_own_is_followed_to_where_documents_go(shop, queued, settings, knowledge_queue,
                                                                       calls):
    """KNOWLEDGE_TASK_QUEUE sends every document to one queue: the dispatch queue shares it or not."""
    settings.TOOL_DISPATCH_QUEUE = None
    settings.KNOWLEDGE_TASK_QUEUE = knowledge_queue
    _queued_ago(queued, 300)
    _ingesting(shop.route.project, size=settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES, heartbeat_ago=5)
    waiting = invocations_waiting_for_a_worker(project_ids=[shop.route.project_id])
    assert waiting.get(shop.route.project_id, {}).get("calls") == calls


def _document_queued(project, *, size: int, ago: float) -> Document:
    """A document queued `ago` seconds ago, nothing of its KB ingesting."""
    return Document.objects.create(
        knowledge_base=KnowledgeBaseFactory(project=project), filename="late.txt", file_type="txt", size=size,
        content_hash="1" * 64, status=Document.Status.QUEUED, queued_at=timezone.now() - timedelta(seconds=ago))


def _stage(document: Document) -> str:
    """The document's row on its KB page."""
    rows = knowledge_base_ingest_status(kb=document.knowledge_base)["documents"]
    return next(row["stage"] for row in rows if row["id"] == str(document.pk))


def test_workers_busy_sending_calls_on_the_shared_default_queue_move_it_for_documents(shop, settings):
    """The reverse of the shared queue: every worker of the default queue waits on a slow business
    system (a call claimed 2 min ago, its deadline 8 min ahead) and a small document waits behind
    them. The KB page said "no worker has started on it in 5 min" and the dashboard "no worker
    ingesting", with the workers running."""
    settings.TOOL_DISPATCH_QUEUE = None
    document = _document_queued(shop.route.project, size=100, ago=300)
    _sending(shop, claimed_ago=120, deadline_in=480)
    assert (documents_waiting_for_a_worker(project_ids=[shop.route.project_id]), _stage(document)) == (
        {}, "queued — 1st in line")


NO_WORKER = ("queued — 1st in line — no worker has started on it in 5 min; if this goes on, check that the Celery "
             "workers are running")


@pytest.mark.parametrize(("dispatch_queue", "size"), [(UNDELIVERED_QUEUE, 100), (None, "large")],
                         ids=["dispatch-queue-of-its-own", "large-documents-queue"])
def test_calls_sent_on_another_queue_do_not_move_a_documents_lane(shop, settings, dispatch_queue, size):
    settings.TOOL_DISPATCH_QUEUE = dispatch_queue
    size = settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES if size == "large" else size
    document = _document_queued(shop.route.project, size=size, ago=300)
    _sending(shop, claimed_ago=120, deadline_in=480)
    line = "in line for large documents" if size == settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES else "in line"
    assert (documents_waiting_for_a_worker(project_ids=[shop.route.project_id])[shop.route.project_id]["documents"],
            _stage(document)) == (1, NO_WORKER.replace("in line", line))


def test_a_document_behind_silent_sends_on_its_queue_says_whose_silence_it_is(shop, settings):
    """Sends past their deadline, silent 2 min, hold the default queue's workers: the document is
    told so at once, and not that workers ingesting documents went silent (none is)."""
    settings.TOOL_DISPATCH_QUEUE = None
    document = _document_queued(shop.route.project, size=100, ago=10)
    _sending(shop, claimed_ago=120)
    assert _stage(document) == ("queued — 1st in line — no word from the workers busy with other work on its queue "
                                "for 2 min; if this goes on, check that the Celery workers are running")


def _more_projects_queued(shop, n: int) -> list:
    """`n` more projects with a call each queued five minutes (moved there from the shop's)."""
    projects = [ProjectFactory() for _ in range(n)]
    for i, project in enumerate(projects):
        body = shop.invoke("item_read", {"item_id": str(10 + i)}).json()
        Invocation.objects.filter(invocation_id=body["invocation_id"]).update(
            project=project, queued_at=timezone.now() - timedelta(minutes=5))
    return [project.pk for project in projects]


@pytest.mark.parametrize(("dispatch_queue", "statements"), [(UNDELIVERED_QUEUE, 2), (None, 3)])
def test_the_count_of_waiting_calls_reads_the_same_statements_for_any_number_of_projects(
        shop, queued, settings, django_assert_num_queries, dispatch_queue, statements):
    """The calls being sent, the documents on the same queue when it is the shared default one, and
    the waiting calls grouped by project (STYLE: queries are counted)."""
    settings.TOOL_DISPATCH_QUEUE = dispatch_queue
    _queued_ago(queued, 300)
    ids = [shop.route.project_id, *_more_projects_queued(shop, 3)]
    with django_assert_num_queries(statements):
        waiting = invocations_waiting_for_a_worker(project_ids=ids)
    assert sorted(row["calls"] for row in waiting.values()) == [1, 1, 1, 1]


@pytest.mark.parametrize(("dispatch_queue", "statements"), [(UNDELIVERED_QUEUE, 1), (None, 2)])
def test_a_moving_queue_is_told_from_its_activity_alone(shop, queued, settings, django_assert_num_queries,
                                                       dispatch_queue, statements):
    settings.TOOL_DISPATCH_QUEUE = dispatch_queue
    _queued_ago(queued, 300)
    _sending(shop, claimed_ago=5, deadline_in=25)
    ids = [shop.route.project_id, *_more_projects_queued(shop, 3)]
    with django_assert_num_queries(statements):
        assert invocations_waiting_for_a_worker(project_ids=ids) == {}


def test_a_call_pages_stall_reads_the_queues_activity_for_a_queued_call_only(shop, queued,
                                                                             django_assert_num_queries):
    _queued_ago(queued, 300)
    sending = _sending(shop, claimed_ago=300)
    queued.refresh_from_db()
    sending.refresh_from_db()
    with django_assert_num_queries(1):
        assert invocation_dispatch_stall(inv=queued) == "no word for 5 min from the workers busy on its queue"
    with django_assert_num_queries(0):
        assert invocation_dispatch_stall(inv=sending) == ""


def test_a_queued_calls_stall_says_how_long_it_has_waited(queued):
    _queued_ago(queued, 300)
    queued.refresh_from_db()
    assert invocation_dispatch_stall(inv=queued) == "no worker has taken it from the dispatch queue in 5 min"


def test_a_call_behind_silent_sends_says_how_long_they_have_been_silent(shop, queued):
    _queued_ago(queued, 300)
    _sending(shop, claimed_ago=120)
    queued.refresh_from_db()
    assert invocation_dispatch_stall(inv=queued) == "no word for 2 min from the workers busy on its queue"


@pytest.mark.parametrize(("setting", "queue"), [(None, "celery"), ("tools.dispatch", "tools.dispatch")])
def test_the_dispatch_queue_is_the_default_one_unless_one_is_set(settings, setting, queue):
    settings.TOOL_DISPATCH_QUEUE = setting
    assert dispatch_queue_name() == queue


# The console


def _dashboard_sign(client: Client) -> str | None:
    match = re.search(r'<p class="bh-waiting bh-bad" data-stat="calls_waiting_for_a_worker">(.*?)</p>',
                      client.get("/admin/").content.decode(), re.S)
    return match.group(1) if match else None


def test_the_dashboard_names_calls_no_worker_dispatches(owner, queued):
    """With every worker down, an agent read in_progress, the watchdog sent the call again, and the
    landing page said nothing was wrong."""
    _queued_ago(queued, 300)
    sign = _dashboard_sign(owner)
    assert sign is not None
    assert re.fullmatch(
        "1 tool call queued for 5\xa0minutes with no worker dispatching: check that a Celery worker consumes the "
        f"dispatch queue \u201c{UNDELIVERED_QUEUE}\u201d. "
        f'<a href="/admin/tools/invocation/[?]project__id__exact={queued.project_id}&amp;state__exact=in_progress'
        '&amp;journal_state__exact=absent">See the queued calls</a>', sign), sign


def test_the_dashboard_tells_calls_behind_quiet_workers_from_calls_no_worker_takes(owner, shop, queued):
    """Workers that claimed a call and went quiet past its deadline (stuck, or killed mid-send) hold
    the dispatch queue: the call's page said so, the landing page said "no worker dispatching" and
    sent operators to start workers that were there."""
    _queued_ago(queued, 300)
    _sending(shop, claimed_ago=120)
    waiting = invocations_waiting_for_a_worker(project_ids=[shop.route.project_id])[shop.route.project_id]
    assert (waiting["calls"], waiting["held"], round(waiting["silent"])) == (1, 1, 120)
    assert _dashboard_sign(owner) == (
        "1 tool call queued for 5\xa0minutes behind workers that hold work on the dispatch queue "
        f"\u201c{UNDELIVERED_QUEUE}\u201d but have said nothing for 2 min: check that the Celery workers consuming it "
        "are still running, and their logs for what they are stuck on. "
        f'<a href="/admin/tools/invocation/?project__id__exact={queued.project_id}&amp;state__exact=in_progress'
        '&amp;journal_state__exact=absent">See the queued calls</a>')


def test_a_call_just_queued_behind_quiet_workers_is_counted_as_its_page_tells_it(shop, queued):
    """One judgement (apps.core.workers.queue_halt): the call's page says at once that it waits
    behind workers silent for minutes; the dashboard waited a minute more."""
    _queued_ago(queued, 10)
    _sending(shop, claimed_ago=300)
    queued.refresh_from_db()
    waiting = invocations_waiting_for_a_worker(project_ids=[shop.route.project_id])
    assert (waiting.get(shop.route.project_id, {}).get("held"), invocation_dispatch_stall(inv=queued)) == (
        1, "no word for 5 min from the workers busy on its queue")


def test_the_dashboards_queued_calls_link_lists_that_projects_calls(owner, shop, queued):
    """The sign counts one project's calls; its link listed every queued call the operator may see."""
    _queued_ago(queued, 300)
    other = ProjectFactory(slug="other")
    MembershipFactory(project=other, user=get_user_model().objects.get(username="owner"), role=Membership.Role.OWNER)
    Invocation.objects.filter(pk=_sending(shop, claimed_ago=5, deadline_in=25).pk).update(
        project=other, journal_state=Invocation.JournalState.ABSENT, queued_at=timezone.now() - timedelta(seconds=30))
    link = re.search(r'<a href="([^"]*)">See the queued calls</a>', _dashboard_sign(owner) or "")
    assert link is not None
    listed = owner.get(link.group(1).replace("&amp;", "&"))
    assert (listed.status_code, [row.pk for row in listed.context["cl"].result_list]) == (200, [queued.pk])


def test_the_dashboard_says_nothing_when_the_queued_call_has_settled(owner, shop, queued):
    Invocation.objects.filter(pk=queued.pk).update(state=Invocation.State.EXECUTED,
                                                   journal_state=Invocation.JournalState.COMPLETED)
    assert _dashboard_sign(owner) is None


def test_the_dashboard_says_nothing_of_a_call_queued_under_a_minute(owner, shop, queued):
    _queued_ago(queued, 30)
    assert _dashboard_sign(owner) is None


def test_the_dashboard_says_nothing_while_a_worker_dispatches(owner, shop, queued):
    _queued_ago(queued, 300)
    _sending(shop, claimed_ago=5, deadline_in=25)
    assert _dashboard_sign(owner) is None


def test_another_projects_operator_is_not_told(queued):
    _queued_ago(queued, 300)
    other = UserFactory(username="other", is_staff=True, is_superuser=False)
    MembershipFactory(project=ProjectFactory(slug="other"), user=other, role=Membership.Role.OWNER)
    client = Client()
    client.force_login(other)
    assert _dashboard_sign(client) is None


def _page_sign(client: Client, inv: Invocation) -> str | None:
    response = client.get(f"/admin/tools/invocation/{inv.pk}/change/")
    assert response.status_code == 200
    match = re.search(r'<p class="errornote" id="dispatch-stall">(.*?)</p>', response.content.decode(), re.S)
    return match.group(1) if match else None


def test_a_queued_calls_page_says_it_waits_for_a_worker_and_what_to_check(owner, queued, settings):
    settings.TOOL_DISPATCH_QUEUE = None
    _queued_ago(queued, 300)
    assert _page_sign(owner, queued) == (
        "Waiting for a worker: no worker has taken it from the dispatch queue in 5 min. Check that a Celery worker "
        "consumes the dispatch queue \u201ccelery\u201d (<code>make run</code> starts one; on a server, "
        "<code>celery -A bailinghub worker --queues celery</code>). Its agent reads "
        "<code>in_progress</code> meanwhile; once a worker takes it, it is sent once.")


def test_a_dispatch_queue_of_its_own_is_named_with_the_worker_it_needs(owner, queued):
    """With TOOL_DISPATCH_QUEUE set, `make run` starts no worker on it — the very mistake this note
    finds — and the page said "make run starts one"."""
    _queued_ago(queued, 300)
    assert _page_sign(owner, queued) == (
        "Waiting for a worker: no worker has taken it from the dispatch queue in 5 min. Check that a Celery worker "
        f"consumes the dispatch queue \u201c{UNDELIVERED_QUEUE}\u201d (TOOL_DISPATCH_QUEUE): <code>make run</code> "
        f"starts none for it; start one with <code>celery -A bailinghub worker --queues {UNDELIVERED_QUEUE}</code>. "
        "Its agent reads <code>in_progress</code> meanwhile; once a worker takes it, it is sent once.")


def test_a_fresh_call_s_page_says_nothing_yet(owner, queued):
    _queued_ago(queued, 20)
    assert _page_sign(owner, queued) is None


def test_a_queued_calls_page_says_nothing_while_a_worker_dispatches(owner, shop, queued):
    _queued_ago(queued, 300)
    _sending(shop, claimed_ago=5, deadline_in=25)
    assert _page_sign(owner, queued) is None


def test_a_claimed_calls_page_says_nothing_of_the_queue(owner, shop, queued):
    """It left the queue when a worker claimed it (its own page says how its send went)."""
    sending = _sending(shop, claimed_ago=300)
    _queued_ago(sending, 400)
    assert _page_sign(owner, sending) is None


def test_reading_the_console_changes_no_call(owner, queued):
    _queued_ago(queued, 300)
    before = Invocation.objects.values().get(pk=queued.pk)
    owner.get("/admin/")
    owner.get(f"/admin/tools/invocation/{queued.pk}/change/")
    assert Invocation.objects.values().get(pk=queued.pk) == before


# Passed over: the queue moved on past a call whose message was lost.


def _claimed(shop, *, queued_ago: float, claimed_ago: float, settled: bool = False) -> Invocation:
    """Another call, queued `queued_ago` seconds ago, that a worker claimed `claimed_ago` seconds ago
    (and sent and settled, with `settled`)."""
    inv = _sending(shop, claimed_ago=claimed_ago, deadline_in=25)
    changes = {"queued_at": timezone.now() - timedelta(seconds=queued_ago)}
    if settled:
        changes.update(state=Invocation.State.EXECUTED, journal_state=Invocation.JournalState.COMPLETED)
    Invocation.objects.filter(pk=inv.pk).update(**changes)
    return inv


PASSED_OVER_PAGE = (
    "Passed over: calls queued up to 5 min after it have been taken by the workers, and it has not. Its message to "
    "them was lost (a broker restart, or a worker that died holding it), or a worker failed on it before claiming "
    "the call (the workers' log has this call's id). The Celery beat's watchdog sends such a call again "
    "(TOOL_DISPATCH_REQUEUE_SECONDS after it was last sent): if this note stays, check that the beat runs "
    "(<code>make run</code>'s worker runs it; on a server, <code>celery -A bailinghub beat</code>) and the workers'"
    " log. Its agent's resume of this call sends it again too; once a worker takes it, it is sent once.")


def _passed_over_page(client: Client, inv: Invocation) -> str | None:
    response = client.get(f"/admin/tools/invocation/{inv.pk}/change/")
    assert response.status_code == 200
    match = re.search(r'<p class="errornote" id="dispatch-passed-over">(.*?)</p>', response.content.decode(), re.S)
    return match.group(1) if match else None


def _passed_over_sign(client: Client) -> str | None:
    match = re.search(r'<p class="bh-waiting bh-bad" data-stat="calls_passed_over">(.*?)</p>',
                      client.get("/admin/").content.decode(), re.S)
    return match.group(1) if match else None


def test_a_call_the_queue_went_past_is_told_so_on_its_page_and_the_dashboard(owner, shop, queued):
    """Its message lost while the workers kept taking calls queued after it: the queue moved, so no
    sign read it as stalled, and it read "in progress" for as long as nobody re-sent it."""
    _queued_ago(queued, 600)
    _claimed(shop, queued_ago=500, claimed_ago=499, settled=True)
    _claimed(shop, queued_ago=300, claimed_ago=5)  # being sent now: the queue moves
    assert (_passed_over_page(owner, queued), invocation_dispatch_stall(inv=Invocation.objects.get(pk=queued.pk)),
            _dashboard_sign(owner)) == (PASSED_OVER_PAGE, "", None)
    assert _passed_over_sign(owner) == (
        "1 tool call queued for 10\xa0minutes that the dispatch queue went past: calls queued after it have been taken "
        "by the workers, its message was lost or failed before a worker claimed it. The Celery beat's watchdog sends "
        "such calls again: if this stays, check that the beat runs and the workers' log. "
        f'<a href="/admin/tools/invocation/?project__id__exact={queued.project_id}&amp;state__exact=in_progress'
        '&amp;journal_state__exact=absent">See the queued calls</a>')


def test_a_call_being_sent_counts_as_taken(shop, queued):
    """Claimed and not answered yet (within its deadline): the worker took it off the queue."""
    _queued_ago(queued, 600)
    _claimed(shop, queued_ago=300, claimed_ago=10)
    queued.refresh_from_db()
    assert (invocations_passed_over(project_ids=[shop.route.project_id]),
            invocation_passed_over(inv=queued)) == (
        {shop.route.project_id: {"calls": 1, "since": queued.queued_at}},
        "calls queued up to 5 min after it have been taken by the workers, and it has not")


def test_a_call_in_line_behind_a_moving_queue_is_not_passed_over(owner, shop, queued):
    """The workers are taking calls queued before it (a backlog): it waits its turn."""
    _queued_ago(queued, 300)
    _claimed(shop, queued_ago=900, claimed_ago=5)
    _claimed(shop, queued_ago=600, claimed_ago=400, settled=True)
    queued.refresh_from_db()
    assert (invocations_passed_over(project_ids=[shop.route.project_id]), invocation_passed_over(inv=queued),
            _passed_over_page(owner, queued), _passed_over_sign(owner)) == ({}, "", None, None)


@pytest.mark.parametrize(("later_by", "passed_over"), [(60, False), (119, False), (180, True)])
def test_a_call_is_passed_over_only_by_one_queued_over_two_minutes_after_it(shop, queued, later_by, passed_over):
    """Messages sent within two minutes of each other may be taken in either order (a commit that
    came late, the web processes' clocks): a neighbour queued that close taken first says nothing."""
    _queued_ago(queued, 600)
    _claimed(shop, queued_ago=600 - later_by, claimed_ago=10, settled=True)
    queued.refresh_from_db()
    assert (bool(invocation_passed_over(inv=queued)),
            shop.route.project_id in invocations_passed_over(project_ids=[shop.route.project_id])) == (
        passed_over, passed_over)


def test_a_call_sent_again_is_still_passed_over_and_says_when_it_was_sent_again(owner, shop, queued):
    """The watchdog (or a resume) sent it again two minutes ago: its first message was lost or failed
    all the same, and its new one may go the same way (a worker that fails on it before claiming
    it): the sign stays, and says when it was sent again."""
    _queued_ago(queued, 600)
    _claimed(shop, queued_ago=300, claimed_ago=5)
    Invocation.objects.filter(pk=queued.pk).update(updated_at=timezone.now() - timedelta(seconds=120), resends=1)
    queued.refresh_from_db()
    told = ("calls queued up to 5 min after it have been taken by the workers, and it has not, though it was sent "
            "again 2 min ago")
    assert invocation_passed_over(inv=queued) == told
    assert _passed_over_page(owner, queued) == PASSED_OVER_PAGE.replace("and it has not.", "and it has not, though "
                                                                        "it was sent again 2 min ago.")
    assert shop.route.project_id in invocations_passed_over(project_ids=[shop.route.project_id])


def test_the_watchdogs_resends_are_counted_on_the_page(shop, queued, settings):
    """Each re-send (the watchdog's own, not a stand-in for it) is counted: the page tells a call
    sent again once from one its workers keep failing on, which the watchdog sends every minute."""
    _queued_ago(queued, 600)
    first_queued = Invocation.objects.get(pk=queued.pk).queued_at
    _claimed(shop, queued_ago=300, claimed_ago=5)
    assert "sent again" not in invocation_passed_over(inv=Invocation.objects.get(pk=queued.pk))
    assert invocation_watchdog()["requeued"] == 1
    assert invocation_passed_over(inv=Invocation.objects.get(pk=queued.pk)).endswith(
        ", though it was sent again 0 s ago")
    # The next rounds, each a re-send interval after the last (the row was saved just now).
    for rounds in (1, 2):
        later = timezone.now() + timedelta(seconds=rounds * (settings.TOOL_DISPATCH_REQUEUE_SECONDS + 1))
        assert invocation_watchdog(now=later)["requeued"] == 1
    again = Invocation.objects.get(pk=queued.pk)
    assert (again.resends, again.queued_at) == (3, first_queued)
    assert invocation_passed_over(inv=again).endswith(", though it was sent again 3 times, the last 0 s ago")
    assert shop.route.project_id in invocations_passed_over(project_ids=[shop.route.project_id])


def test_an_agents_resume_sends_a_passed_over_call_again_and_counts_it(shop, queued):
    _queued_ago(queued, 600)
    _claimed(shop, queued_ago=300, claimed_ago=5)
    assert shop.resume(queued.invocation_id).json()["state"] == "in_progress"
    again = Invocation.objects.get(pk=queued.pk)
    assert again.resends == 1
    assert invocation_passed_over(inv=again).endswith(", though it was sent again 0 s ago")


def test_a_call_queued_afresh_counts_its_resends_from_0(shop, queued):
    """Sent again three times, then refused for now by the dispatcher (a pause): the agent's resume
    queues it as a new call would be, and the page must not count the old message's re-sends."""
    Invocation.objects.filter(pk=queued.pk).update(state=Invocation.State.REJECTED_BEFORE_DISPATCH, resends=3)
    assert shop.resume(queued.invocation_id).json()["state"] == "in_progress"
    again = Invocation.objects.get(pk=queued.pk)
    assert (again.state, again.resends, again.queued_at > queued.queued_at) == ("in_progress", 0, True)


def test_the_upgrade_counts_a_call_saved_after_it_was_queued_as_sent_again_once(shop, queued):
    """Migration 0011's backfill: before the count, a queued call's later save was its re-send."""
    from django.apps import apps

    Invocation.objects.filter(pk=queued.pk).update(queued_at=timezone.now() - timedelta(minutes=10),
                                                   updated_at=timezone.now() - timedelta(minutes=2))
    waiting = Invocation.objects.get(invocation_id=shop.invoke("item_read", {"item_id": "3"}).json()["invocation_id"])
    _queued_ago(waiting, 600)  # sent once: saved when it was queued, not since
    claimed = _claimed(shop, queued_ago=600, claimed_ago=5)  # saved since, by the worker's claim
    import_module("apps.tools.migrations.0011_invocation_resends_backfill")._sent_again_at_least_once(apps, None)
    assert dict(Invocation.objects.values_list("pk", "resends")) == {queued.pk: 1, waiting.pk: 0, claimed.pk: 0}


def test_a_later_call_still_queued_too_does_not_pass_it_over(shop, queued):
    """Only a claim shows the workers came past it: calls queued after it and waiting as well are a
    queue no worker has reached yet (or none runs: that is the stall sign's to say)."""
    _queued_ago(queued, 600)
    later = _claimed(shop, queued_ago=60, claimed_ago=50)
    Invocation.objects.filter(pk=later.pk).update(journal_state=Invocation.JournalState.ABSENT, dispatched_at=None,
                                                  dispatch_deadline=None)
    queued.refresh_from_db()
    assert (invocations_passed_over(project_ids=[shop.route.project_id]),
            invocation_passed_over(inv=queued)) == ({}, "")


def test_no_call_ever_claimed_passes_nothing_over(shop, queued):
    _queued_ago(queued, 600)
    queued.refresh_from_db()
    assert (invocations_passed_over(project_ids=[shop.route.project_id]),
            invocation_passed_over(inv=queued)) == ({}, "")


def test_a_claimed_or_settled_call_is_never_passed_over(owner, shop, queued):
    """It left the queue; a call claimed long after it was queued is not a lost message."""
    taken = _claimed(shop, queued_ago=900, claimed_ago=10)
    _claimed(shop, queued_ago=100, claimed_ago=90, settled=True)
    taken.refresh_from_db()
    assert (invocation_passed_over(inv=taken), _passed_over_page(owner, taken)) == ("", None)


def test_passed_over_calls_are_counted_per_project_in_the_same_statements_for_any_number(
        shop, queued, django_assert_num_queries):
    _queued_ago(queued, 600)
    ids = [shop.route.project_id, *_more_projects_queued(shop, 3)]
    ten_minutes_ago = timezone.now() - timedelta(minutes=10)
    Invocation.objects.filter(project_id__in=ids[1:]).update(queued_at=ten_minutes_ago, updated_at=ten_minutes_ago)
    _claimed(shop, queued_ago=300, claimed_ago=299, settled=True)
    with django_assert_num_queries(2):
        passed = invocations_passed_over(project_ids=ids)
    assert sorted(row["calls"] for row in passed.values()) == [1, 1, 1, 1]


def test_a_queued_calls_page_reads_one_statement_for_it(shop, queued, django_assert_num_queries):
    _queued_ago(queued, 600)
    _claimed(shop, queued_ago=300, claimed_ago=299, settled=True)
    queued.refresh_from_db()
    with django_assert_num_queries(1):
        assert invocation_passed_over(inv=queued) != ""


UNREACHABLE_BROKER = "redis+socket:///nonexistent/bailinghub-broker.sock"
BROKER_DOWN = ("the task broker (Redis) cannot be reached: nothing queued reaches a worker until it is back, and the "
               "watchdogs send the work again then; check that Redis is running (/readyz says so too)")


@contextmanager
def _broker_unreachable(settings):
    """The console's look at the broker finds none (the app's own sends use the same setting: it is
    put back before the fixtures' teardown sends anything)."""
    kept = settings.CELERY_BROKER_URL
    settings.CELERY_BROKER_URL = UNREACHABLE_BROKER
    try:
        yield
    finally:
        settings.CELERY_BROKER_URL = kept


def test_while_the_broker_is_down_the_console_blames_the_broker_not_the_workers(owner, shop, queued, settings):
    """With Redis down and the workers healthy, the dashboard, the KB page and the call's page all
    said to check that the Celery workers run (while /readyz said "redis")."""
    settings.TOOL_DISPATCH_QUEUE = None
    _queued_ago(queued, 300)
    document = _document_queued(shop.route.project, size=100, ago=300)
    with _broker_unreachable(settings):
        page = _page_sign(owner, queued)
        stage = _stage(document)
        dashboard = owner.get("/admin/").content.decode()
    assert page == (
        f"Waiting for the broker: waiting 5 min: {BROKER_DOWN}. Its agent reads <code>in_progress</code> meanwhile; "
        "once a worker takes it, it is sent once.")
    assert stage == f"queued — 1st in line — waiting 5 min: {BROKER_DOWN}"
    assert re.search(r"1 tool call queued for 5\xa0minutes: " + re.escape(BROKER_DOWN) + r"\.", dashboard)
    assert re.search(r"1 document queued for 5\xa0minutes: " + re.escape(BROKER_DOWN) + r"\.", dashboard)
    assert "check that" not in dashboard.replace("check that Redis is running", "")


def test_the_broker_is_asked_once_for_a_while_then_again(settings):
    assert check_broker() == "ok"
    with _broker_unreachable(settings):
        assert check_broker() == "ok"  # the process's last look, for BROKER_LOOK_SECONDS
        broker_look_forget()
        assert check_broker() == "unavailable"
    settings.CELERY_BROKER_URL = "amqp://guest@127.0.0.1:9//"
    broker_look_forget()
    assert check_broker() == "unknown"


def test_a_call_the_broker_refused_is_logged_as_left_to_the_watchdog(shop, settings, broker_down, caplog,
                                                                     django_capture_on_commit_callbacks):
    """It was an ERROR traceback saying "in on_commit() during transaction", and nothing of what
    happens next; the knowledge sends say it in one warning."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    with django_capture_on_commit_callbacks(execute=True):
        body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert body["state"] == "in_progress"
    [record] = [r for r in caplog.records if "dispatch queue" in r.getMessage()]
    inv = Invocation.objects.get(invocation_id=body["invocation_id"])
    assert (record.levelname, record.name, record.exc_info) == ("WARNING", "bailinghub.tools", None)
    assert record.getMessage().startswith(f"Could not send call {inv.pk} to the dispatch queue (")
    assert record.getMessage().endswith("the watchdog sends it again once it has waited TOOL_DISPATCH_REQUEUE_SECONDS.")
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
