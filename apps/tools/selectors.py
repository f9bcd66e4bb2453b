"""Reads for tool providers and tools, scoped to what the caller may see."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, Max, Min, OuterRef, Q, QuerySet
from django.utils import timezone

from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import SESSION_ENDS_FOR_GOOD, session_end
from apps.core.timefmt import short_duration
from apps.core.workers import broker_down_text, queue_activity, queue_halt, queue_stall, worker_reading
from apps.projects.models import Project

from .compiler.compile import MAX_GUIDANCE_BYTES, MAX_GUIDANCE_CHARS
from .crypto import secret_decrypt
from .errors import ToolProviderNotFound
from .models import Approval, Invocation, Tool, ToolProvider


def provider_list(*, projects: QuerySet[Project] | list[Project]) -> QuerySet[ToolProvider]:
    """Providers of the given projects, with their tool counts (one query)."""
    return (ToolProvider.objects.filter(project__in=projects).select_related("project")
            .annotate(tool_count=Count("tools"), enabled_tool_count=Count("tools", filter=Q(tools__enabled=True)))
            # A total order (project names repeat): offset pages neither repeat nor skip a provider.
            .order_by("project__name", "project_id", "name", "id"))


def provider_get(*, projects: QuerySet[Project] | list[Project], provider_id: uuid.UUID | str) -> ToolProvider:
    provider = ToolProvider.objects.filter(project__in=projects, pk=provider_id).select_related("project").first()
    if provider is None:
        raise ToolProviderNotFound()
    return provider


def tool_list(*, provider: ToolProvider) -> QuerySet[Tool]:
    return Tool.objects.filter(provider=provider).order_by("position")


def provider_secret(*, provider: ToolProvider) -> str:
    """The clear signing secret, for the code that signs outbound calls; never for display."""
    return secret_decrypt(provider.secret_encrypted)


class CompiledRow(Protocol):
    """What the definition selectors read: a Tool, or the surface's lighter row of one."""

    @property
    def compiled(self) -> dict[str, Any]: ...


def tool_definition(*, tool: CompiledRow, force_approval: bool = False) -> dict[str, Any]:
    """The agent-facing tool definition (whitelisted projection of the compiled tool): name,
    description, scope, risk, approval_required, readonly, idempotent, input_schema, and the
    guidance flags. ``force_approval`` is the route's ``force_approval_tools`` decision."""
    compiled = tool.compiled
    definition = {
        "name": compiled["name"],
        "description": compiled["description"],
        "scope": compiled["scope"],
        "risk": compiled["risk"],
        "approval_required": bool(compiled["approval_required"] or force_approval),
        "readonly": compiled["readonly"],
        "idempotent": compiled["idempotent"],
        "input_schema": compiled["input_schema"],
    }
    if compiled.get("usage_guidance_available"):
        definition["usage_guidance_available"] = True
    if compiled.get("description_truncated"):
        definition["description_truncated"] = True
    return definition


def tool_usage_guidance(*, tool: CompiledRow) -> dict[str, Any]:
    """The detail endpoint's ``usage_guidance`` block."""
    guidance = tool.compiled["usage_guidance"]
    return {
        "text": guidance["text"],
        "truncated": guidance["truncated"],
        "source_chars": guidance["source_chars"],
        "max_chars": MAX_GUIDANCE_CHARS,
        "source_bytes": guidance["source_bytes"],
        "max_bytes": MAX_GUIDANCE_BYTES,
    }


# The most tool names read per project for the invocation list's filter: the walk below takes a step
# per name.
INVOCATION_TOOL_NAMES_MAX = 500

_TOOL_NAMES_SQL = """
WITH RECURSIVE names (project_id, tool_name, step) AS (
    SELECT first.project_id, first.tool_name, 1
    FROM unnest(COALESCE(%s::uuid[], ARRAY(SELECT id FROM projects_project))) AS project (id), LATERAL (
        SELECT project_id, tool_name FROM tools_invocation
        WHERE project_id = project.id ORDER BY tool_name LIMIT 1) AS first
  UNION ALL
    SELECT next.project_id, next.tool_name, names.step + 1
    FROM names, LATERAL (
        SELECT project_id, tool_name FROM tools_invocation
        WHERE project_id = names.project_id AND tool_name > names.tool_name ORDER BY tool_name LIMIT 1) AS next
    WHERE names.step < %s
)
SELECT DISTINCT tool_name FROM names ORDER BY tool_name
"""


def invocation_tool_names(*, project_ids: list[Any] | None) -> list[str]:
    """The names of the tools called in the given projects (None: in every project), in order: up to
    INVOCATION_TOOL_NAMES_MAX of each. Read by jumping from name to name down the (project,
    tool_name) index, a probe a name, rather than by a DISTINCT over every invocation (a scan that
    grows with the ledger: 18 ms at 20,000 calls, 1 ms this way)."""
    if project_ids is not None and not project_ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_TOOL_NAMES_SQL, [project_ids, INVOCATION_TOOL_NAMES_MAX])
        return [name for (name,) in cursor.fetchall()]


# Calls proven not sent that wait for the dispatcher to claim them; claimed ones being sent.
_QUEUED = Q(state=Invocation.State.IN_PROGRESS, journal_state=Invocation.JournalState.ABSENT)
_SENDING = Q(state=Invocation.State.IN_PROGRESS, journal_state=Invocation.JournalState.DISPATCHING)


def _is_queued(inv: Invocation) -> bool:
    """_QUEUED, for a call at hand."""
    return inv.state == Invocation.State.IN_PROGRESS and inv.journal_state == Invocation.JournalState.ABSENT


def dispatch_queue_name() -> str:
    """The Celery queue the dispatcher task is sent to (TOOL_DISPATCH_QUEUE, else the default one)."""
    return str(settings.TOOL_DISPATCH_QUEUE or settings.CELERY_TASK_DEFAULT_QUEUE)


def dispatch_queue_is_own() -> bool:
    """Whether calls are dispatched on a queue of their own (TOOL_DISPATCH_QUEUE), which no worker of
    `make run` (apps.core devserver: the default queue and the large documents') consumes."""
    return dispatch_queue_name() not in (settings.CELERY_TASK_DEFAULT_QUEUE, settings.KNOWLEDGE_LARGE_TASK_QUEUE)


def _sending_activity() -> dict[str, Any]:
    return worker_reading("calls", lambda: Invocation.objects.filter(_SENDING).aggregate(
        count=Count("id"), heartbeat_at=Max("dispatched_at"), busy_until=Max("dispatch_deadline")))


def invocation_queue_work(queue: str) -> list[dict[str, Any]]:
    """What the dispatch workers hold on a Celery queue: the calls being sent, when it is the
    dispatch queue (one statement); nothing on any other. ToolsConfig.ready names it to
    apps.core.workers, whose queue_activity counts it for the documents ingested on the same queue."""
    return [_sending_activity()] if queue == dispatch_queue_name() else []


def dispatch_activity() -> dict[str, Any]:
    """What the dispatch queue's workers hold now and the newest word from them, as apps.core.workers
    judges whether a queue moves: the calls claimed and being sent (`count`), the newest claim
    (`heartbeat_at`) and the latest dispatch deadline (`busy_until`: a send waits on its business
    system up to its timeout without a word, and is no silence before then) — merged with every
    other kind of work on the same Celery queue (queue_activity: by default calls share the default
    queue with small documents, and workers busy ingesting a bulk upload move it). One statement,
    and one per ingestion lane on that queue."""
    return queue_activity(dispatch_queue_name(), kind="calls", held=[_sending_activity()])


def _queued_per_project(project_ids: Iterable[Any], **queued_at: datetime) -> dict[Any, dict[str, Any]]:
    """Per project, its calls queued for dispatch within the `queued_at` bound: {project_id:
    {"calls": n, "since": the oldest one's queue time}}, in one statement."""
    rows = (Invocation.objects.filter(_QUEUED, project_id__in=list(project_ids), **queued_at)
            .order_by().values("project_id").annotate(calls=Count("id"), since=Min("queued_at")))
    return {row["project_id"]: {"calls": row["calls"], "since": row["since"]} for row in rows}


def invocations_waiting_for_a_worker(*, project_ids: Iterable[Any]) -> dict[Any, dict[str, Any]]:
    """Per project, its calls queued for dispatch that wait on a dispatch queue no worker moves, as
    the call's page judges each (apps.core.workers.queue_halt): {project_id: {"calls": n, "since":
    the oldest one's queue time, "held": how many wait behind workers that hold work on the queue
    but went silent (all or none: one queue), "silent": for how many seconds (None when they hold
    nothing)}}. Empty while it moves. Whatever the number of projects and calls,
    dispatch_activity's statements (two on the shared default queue, one on a queue of its own) and
    one more when it does not move: the dashboard's sign that the workers are down or stuck (an
    agent only ever reads in_progress, and the watchdog re-sends)."""
    now = timezone.now()
    halt = queue_halt(dispatch_activity(), now=now)
    if halt is None:
        return {}
    return {project_id: {**queued, "held": queued["calls"] if halt.holding else 0,
                         "silent": halt.silent if halt.holding else None}
            for project_id, queued in _queued_per_project(project_ids, queued_at__lte=halt.stalled_before).items()}


def invocation_dispatch_stall(*, inv: Invocation) -> str:
    """For a call queued for dispatch a minute while no worker moves the dispatch queue, how long it
    has waited and why; nothing otherwise (a worker may still be on its way, or the call is not
    queued). What to check is the page's to say: a worker consuming dispatch_queue_name()."""
    if not _is_queued(inv):
        return ""
    stall = queue_stall(dispatch_activity(), queued_at=inv.queued_at, now=timezone.now())
    if stall is None:
        return ""
    if broker_down := broker_down_text():
        return f"waiting {short_duration(stall.seconds)}: {broker_down}"
    if stall.holding:
        # The work held may be calls or, on a shared queue, documents: the page names the queue.
        return f"no word for {short_duration(stall.seconds)} from the workers busy on its queue"
    return f"no worker has taken it from the dispatch queue in {short_duration(stall.seconds)}"


# Celery queues are first in, first out: a call queued this long before another that a dispatch
# worker has since claimed had its message handed to a worker first, had it not been lost — and
# the dispatcher claims or settles every queued call it is handed, unless it fails on it first (a
# defect: the workers' log says which). Two minutes cover all that may reorder two messages that
# far apart, with room: a worker reserves no more than it runs (CELERY_WORKER_PREFETCH_MULTIPLIER =
# 1 with acks_late: a delivered message is claimed within seconds, never parked behind a long
# task), a message leaves when its request's transaction commits, a moment after queued_at is set
# inside it, and the web processes' clocks that date the calls may differ by seconds.
PASSED_OVER_SECONDS = 120

_CLAIMED = Q(dispatched_at__isnull=False, queued_at__isnull=False)


def dispatch_reached() -> datetime | None:
    """How far down the dispatch queue its workers have come: the latest queue time among the calls
    they have claimed (sent or being sent). One statement, on the claimed calls' queue-time index."""
    reached: datetime | None = Invocation.objects.filter(_CLAIMED).aggregate(reached=Max("queued_at"))["reached"]
    return reached


def _passed_over_before(reached: datetime) -> datetime:
    return reached - timedelta(seconds=PASSED_OVER_SECONDS)


def invocations_passed_over(*, project_ids: Iterable[Any]) -> dict[Any, dict[str, Any]]:
    """Per project, its calls still queued for dispatch that the queue went past: calls queued more
    than PASSED_OVER_SECONDS after their first send have been claimed, and they have not, so their
    first message was lost (a broker restart, a worker that died holding it) or a worker failed on
    it before claiming the call — {project_id: {"calls": n, "since": the oldest one's queue time}}.
    A call sent again since (the watchdog, a resume) still counts: its new message may be taken, or
    go the way of the first; its page says how often and when. Read whether or not the queue
    moves now: the sign for a queue that moves on without them. Two statements whatever the number
    of projects and calls, one when no call was ever claimed."""
    reached = dispatch_reached()
    if reached is None:
        return {}
    return _queued_per_project(project_ids, queued_at__lt=_passed_over_before(reached))


def invocation_passed_over(*, inv: Invocation) -> str:
    """For a call still queued that the dispatch queue went past (invocations_passed_over), how far
    past it the workers have come, and how often and when it was sent again if it was; nothing
    otherwise (one statement for a queued call, none for another). What to do is the page's to say."""
    if not _is_queued(inv) or inv.queued_at is None:
        return ""
    reached = dispatch_reached()
    if reached is None or inv.queued_at >= _passed_over_before(reached):
        return ""
    told = (f"calls queued up to {short_duration((reached - inv.queued_at).total_seconds())} after it have been taken "
            "by the workers, and it has not")
    if inv.resends:
        # A queued call's row is saved again only when it is sent again: updated_at is the last send.
        last = short_duration((timezone.now() - inv.updated_at).total_seconds())
        told += (f", though it was sent again {last} ago" if inv.resends == 1 else
                 f", though it was sent again {inv.resends} times, the last {last} ago")
    return told


def session_blocker(*, session: AgentSession, now: datetime | None = None,
                    approver_current: bool | None = None) -> str:
    """Why no resume of a call made by ``session`` can run, as a blocker code beside
    ``invocations.invocation_blocker``'s (the approval page and queue read both): ``session_revoked``,
    ``session_expired``, ``session_authorization_deleted`` or ``session_approver_left``
    (apps.agent_auth.selectors.session_end); empty while the session can still be used. The agent
    signed in again is a new session, whose resume of the call is 404 ``invocation_not_found``.
    ``approver_current``: the value a list annotated, else it is read."""
    end = session_end(session=session, now=now or timezone.now(), approver_current=approver_current)
    return f"session_{end.value}" if end is not None else ""


# session_blocker's codes of the ends for good: such a call can never run (only its session can
# resume it).
SESSION_BLOCKERS_FOR_GOOD = frozenset(f"session_{end.value}" for end in SESSION_ENDS_FOR_GOOD)


def approvals_waiting_for_tools(*, tool_ids: Iterable[Any], now: datetime | None = None) -> dict[str, int]:
    """Calls of these tools still waiting for their approval, in one query: ``pending`` (not yet
    expired) and ``approved`` (approved, not yet resumed). Switching the tools off strands them:
    their agents' resume is refused (``tool_not_found``) while the tools are off."""
    now = now or timezone.now()
    tools = Tool.objects.filter(pk__in=list(tool_ids), provider_id=OuterRef("invocation__provider_id"),
                                name=OuterRef("tool_name"))
    return Approval.objects.filter(Exists(tools), invocation__state=Invocation.State.AWAITING_APPROVAL).aggregate(
        pending=Count("pk", filter=Q(status=Approval.Status.PENDING, expires_at__gt=now)),
        approved=Count("pk", filter=Q(status=Approval.Status.APPROVED, used_at__isnull=True)))
