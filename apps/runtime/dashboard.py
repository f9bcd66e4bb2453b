"""What the console's landing page shows for each project an operator may see: its routes, its
knowledge bases with document counts by status, its agent sessions, its pending tool approvals, its
active tasks, its recent runs, documents and tool calls that wait for a worker no one runs, and
tool calls the dispatch queue went past.

It reads every app (routes, agent_auth, knowledge, ledger), which only runtime may import. The
number of queries is fixed — one per kind of row (two at most for the recent runs), whatever the
number of projects or rows — and each list is capped, so a busy project never makes the page slow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Exists, F, OuterRef, Q, Subquery, Window
from django.db.models.functions import Coalesce, RowNumber
from django.urls import reverse
from django.utils import timezone

from apps.agent_auth.models import AgentClient, AgentSession
from apps.agent_auth.selectors import session_live_q
from apps.core.workers import broker_down_text, queue_readings_shared
from apps.knowledge import progress as knowledge_progress
from apps.knowledge import selectors as knowledge_selectors
from apps.knowledge.models import Document, IndexGeneration, KnowledgeBase
from apps.ledger.models import Run
from apps.projects.models import Project
from apps.projects.selectors import project_list_visible
from apps.routes.models import Route
from apps.tasks.models import Task
from apps.tasks.selectors import session_only_in_ended_tasks_q, task_can_run_q
from apps.tools import selectors as tool_selectors
from apps.tools.models import Approval, ToolProvider

ROUTES_PER_PROJECT = 20
KBS_PER_PROJECT = 20
RUNS_PER_PROJECT = 8
PROJECTS_SHOWN = 50
# Document statuses the page names one by one; the in-between pipeline states count as "in progress".
IN_PROGRESS = (Document.Status.PENDING, Document.Status.QUEUED, Document.Status.PARSING,
               Document.Status.CHUNKING, Document.Status.EMBEDDING)


@dataclass
class KnowledgeBaseSummary:
    kb: KnowledgeBase
    ready: bool
    total: int
    completed: int
    in_progress: int
    awaiting_confirmation: int
    failed: int


@dataclass
class ProjectDashboard:
    project: Project
    role: str
    routes: list[Route] = field(default_factory=list)
    route_total: int = 0
    knowledge_bases: list[KnowledgeBaseSummary] = field(default_factory=list)
    kb_total: int = 0
    sessions_active: int = 0
    sessions_total: int = 0
    # Active sessions whose tasks all ended (cancelled, blocked or expired): they work only in a new task.
    sessions_in_ended_tasks: int = 0
    runs_last_day: int = 0
    recent_runs: list[Run] = field(default_factory=list)
    # Pending approvals whose agent session can still resume the call: work for an approver.
    approvals_pending: int = 0
    # Pending approvals whose agent session ended: their calls cannot run (deny them; the watchdog
    # denies those of sessions ended for good).
    approvals_session_ended: int = 0
    tasks_active: int = 0
    # Documents queued where no worker moves, as each KB page judges them (apps.core.workers.queue_halt):
    # {"documents": n, "since": datetime, "held": n behind silent workers holding work, "silent": seconds}.
    waiting_for_a_worker: dict[str, Any] | None = None
    # Tool calls queued for dispatch while no worker moves the dispatch queue, as the call's page judges
    # them: {"calls": n, "since": datetime, "held": n, "silent": seconds, "queue": the queue's name}.
    calls_waiting_for_a_worker: dict[str, Any] | None = None
    # Tool calls still queued that the dispatch queue went past (their messages lost, or failed on
    # before a worker claimed them):
    # {"calls": n, "since": datetime}.
    calls_passed_over: dict[str, Any] | None = None
    # Beside work waiting: why, when the broker does not answer (apps.core.workers.BROKER_DOWN_TEXT),
    # rather than the workers' advice.
    broker_down: str = ""
    provider_total: int = 0
    client_total: int = 0
    # For the Get started list, over the whole project (the panels show the first routes and KBs only).
    has_completed_documents: bool = False
    has_reading_route: bool = False

    @property
    def may_edit(self) -> bool:
        return self.role != "viewer"

    @property
    def getting_started(self) -> list[GettingStartedStep]:
        return getting_started(self)


@dataclass(frozen=True)
class GettingStartedStep:
    text: str
    done: bool
    url: str  # where to do it
    link: str  # the link's words
    optional: bool = False


def getting_started(board: ProjectDashboard) -> list[GettingStartedStep]:
    """The steps from an empty project to an agent at work, each ticked once done; none once every
    step that is not optional is. A newcomer's project said "No routes yet." and nothing more."""
    pk = board.project.pk
    steps = [
        GettingStartedStep("Add a route: the workspace an agent connects to.", board.route_total > 0,
                           f"{reverse('admin:routes_route_add')}?project={pk}", "Add a route"),
        GettingStartedStep("Add a knowledge base and upload documents into it.", board.has_completed_documents,
                           f"{reverse('admin:knowledge_knowledgebase_add')}?project={pk}" if not board.kb_total
                           else f"{reverse('admin:knowledge_knowledgebase_changelist')}?project__id__exact={pk}",
                           "Add a knowledge base" if not board.kb_total else "Upload documents"),
        GettingStartedStep("Let a route read it: on the route's page, under Knowledge.", board.has_reading_route,
                           f"{reverse('admin:routes_route_changelist')}?project__id__exact={pk}", "Open the routes"),
        GettingStartedStep("Add a tool provider from the business system's OpenAPI document, if agents should "
                           "call it.", board.provider_total > 0,
                           f"{reverse('admin:tools_toolprovider_add')}?project={pk}", "Add a tool provider",
                           optional=True),
        GettingStartedStep("Add an agent client: the application your agents sign in through.",
                           board.client_total > 0, f"{reverse('admin:agent_auth_agentclient_add')}?project={pk}",
                           "Add an agent client"),
        GettingStartedStep("Sign an agent in: its agent client's page gives the bailinghub-mcp login line "
                           "for each route.", board.sessions_total > 0,
                           f"{reverse('admin:agent_auth_agentclient_changelist')}?project__id__exact={pk}",
                           "Open the agent clients"),
    ]
    return [] if all(step.done for step in steps if not step.optional) else steps


def _ranked(queryset, *, partition: str, order: list, limit: int):
    """The first `limit` rows of each `partition`, in one query (a window function)."""
    return queryset.annotate(
        _rank=Window(RowNumber(), partition_by=[F(partition)], order_by=order),
    ).filter(_rank__lte=limit)


def _count_per_project(model) -> Coalesce:
    """Rows of `model` in the outer project, as a subquery (two joined counts would multiply)."""
    rows = model.objects.filter(project=OuterRef("pk")).order_by().values("project").annotate(n=Count("pk"))
    return Coalesce(Subquery(rows.values("n")[:1]), 0)


def dashboard_projects(*, user, now: datetime | None = None) -> list[ProjectDashboard]:
    """One summary per project `user` may see (superusers: every project, the first
    PROJECTS_SHOWN by name), in the order of the project list."""
    now = now or timezone.now()
    projects = list(
        project_list_visible(user=user)
        .annotate(route_total=_count_per_project(Route), kb_total=_count_per_project(KnowledgeBase),
                  provider_total=_count_per_project(ToolProvider), client_total=_count_per_project(AgentClient),
                  has_completed_documents=Exists(Document.objects.filter(
                      knowledge_base__project=OuterRef("pk"), status=Document.Status.COMPLETED)),
                  has_reading_route=Exists(Route.objects.filter(project=OuterRef("pk"), knowledge_enabled=True)
                                           .filter(knowledge_selectors.route_source_filter())))
        .order_by("name")[:PROJECTS_SHOWN]
    )
    if not projects:
        return []
    roles = {} if user.is_superuser else dict(
        user.memberships.filter(project__in=projects).values_list("project_id", "role")
    )
    boards = {
        p.pk: ProjectDashboard(project=p, role=roles.get(p.pk, "superuser"), route_total=p.route_total,
                               kb_total=p.kb_total, provider_total=p.provider_total, client_total=p.client_total,
                               has_completed_documents=p.has_completed_documents,
                               has_reading_route=p.has_reading_route)
        for p in projects
    }
    ids = list(boards)

    routes = _ranked(
        Route.objects.filter(project_id__in=ids).annotate(
            # The sources its agents read: bound KBs of its project that are on.
            knowledge_sources=Count("knowledge_bindings", filter=knowledge_selectors.route_source_filter())),
        partition="project_id", order=[F("key").asc()], limit=ROUTES_PER_PROJECT,
    ).order_by("key")
    for route in routes:
        boards[route.project_id].routes.append(route)

    status_counts = {
        name: Count("documents", filter=Q(documents__status__in=statuses))
        for name, statuses in (
            ("completed", [Document.Status.COMPLETED]),
            ("in_progress", list(IN_PROGRESS)),
            ("awaiting_confirmation", [Document.Status.AWAITING_CONFIRMATION]),
            ("failed", [Document.Status.FAILED]),
        )
    }
    kbs = _ranked(
        KnowledgeBase.objects.filter(project_id__in=ids).select_related("embedding_model").annotate(
            document_total=Count("documents"), **status_counts,
            ready=Exists(IndexGeneration.objects.filter(knowledge_base=OuterRef("pk"),
                                                        status=IndexGeneration.Status.ACTIVE)),
        ),
        partition="project_id", order=[F("name").asc()], limit=KBS_PER_PROJECT,
    ).order_by("name")
    for kb in kbs:
        boards[kb.project_id].knowledge_bases.append(KnowledgeBaseSummary(
            kb=kb, ready=kb.ready, total=kb.document_total, completed=kb.completed, in_progress=kb.in_progress,
            awaiting_confirmation=kb.awaiting_confirmation, failed=kb.failed,
        ))

    sessions = (
        AgentSession.objects.filter(client__project_id__in=ids)
        .values("client__project_id")
        .annotate(total=Count("id"), active=Count("id", filter=session_live_q(now)),
                  ended_tasks=Count("id", filter=session_live_q(now) & session_only_in_ended_tasks_q(now)))
    )
    for row in sessions:
        board = boards[row["client__project_id"]]
        board.sessions_total, board.sessions_active = row["total"], row["active"]
        board.sessions_in_ended_tasks = row["ended_tasks"]

    day_counts = (
        Run.objects.filter(route__project_id__in=ids, created_at__gte=now - timedelta(days=1))
        .values("route__project_id").annotate(n=Count("id"))
    )
    for row in day_counts:
        boards[row["route__project_id"]].runs_last_day = row["n"]

    live = session_live_q(now, prefix="invocation__session__")
    pending = (
        Approval.objects.filter(project_id__in=ids, status=Approval.Status.PENDING, expires_at__gt=now)
        .values("project_id").annotate(n=Count("id", filter=live), ended=Count("id", filter=~live))
    )
    for row in pending:
        boards[row["project_id"]].approvals_pending = row["n"]
        boards[row["project_id"]].approvals_session_ended = row["ended"]

    # Active and able to run: an expired task, or one whose member was revoked, runs nothing whatever
    # its stored state says until it is read (the sessions tile counts their members as only in ended
    # tasks).
    active_tasks = (
        Task.objects.filter(task_can_run_q(now), project_id__in=ids, state=Task.State.ACTIVE)
        .values("project_id").annotate(n=Count("id"))
    )
    for row in active_tasks:
        boards[row["project_id"]].tasks_active = row["n"]

    with queue_readings_shared():  # documents and calls share the default queue: each read once
        documents_waiting = knowledge_progress.documents_waiting_for_a_worker(project_ids=ids)
        calls_waiting = tool_selectors.invocations_waiting_for_a_worker(project_ids=ids)
    broker_down = broker_down_text() if documents_waiting or calls_waiting else ""
    for project_id in {*documents_waiting, *calls_waiting}:
        boards[project_id].broker_down = broker_down
    for project_id, waiting in documents_waiting.items():
        boards[project_id].waiting_for_a_worker = waiting
    for project_id, waiting in calls_waiting.items():
        boards[project_id].calls_waiting_for_a_worker = {**waiting, "queue": tool_selectors.dispatch_queue_name()}
    for project_id, passed in tool_selectors.invocations_passed_over(project_ids=ids).items():
        boards[project_id].calls_passed_over = passed

    for run in _recent_runs(ids):
        boards[run.route.project_id].recent_runs.append(run)

    return [boards[p.pk] for p in projects]


def _recent_runs(ids: list) -> list[Run]:
    """The newest RUNS_PER_PROJECT runs of each project, newest first. The newest runs of all the
    projects come first, as many as every project may show (an index scan that stops there); only a
    project with fewer among them is then ranked alone, in a second query. Ranking every run of every
    project in one window sorted the whole ledger on each load: 137 ms at 100,000 runs, spilling to disk."""
    runs = (Run.objects.select_related("route", "conversation")
            .only("id", "state", "created_at", "completed_at", "context_bytes", "route__key", "route__name",
                  "route__project_id", "conversation__on_behalf_of"))
    order = [F("created_at").desc(), F("id").desc()]
    limit = RUNS_PER_PROJECT * len(ids)
    newest = list(runs.filter(route__project_id__in=ids).order_by(*order)[:limit])
    shown: dict[Any, list[Run]] = {pk: [] for pk in ids}
    for run in newest:
        if len(shown[run.route.project_id]) < RUNS_PER_PROJECT:
            shown[run.route.project_id].append(run)
    # Fewer than `limit` rows are every run of these projects: nothing older is left to rank.
    short = [pk for pk, picked in shown.items() if len(picked) < RUNS_PER_PROJECT] if len(newest) == limit else []
    if short:
        for pk in short:
            shown[pk] = []
        for run in _ranked(runs.filter(route__project_id__in=short), partition="route__project_id", order=order,
                           limit=RUNS_PER_PROJECT):
            shown[run.route.project_id].append(run)
    return sorted((run for picked in shown.values() for run in picked), key=lambda run: (run.created_at, run.pk),
                  reverse=True)

