"""Task metering for governed invocations (contracts-beyond-seeds §5): the checks a bound call must
pass before anything is stored, and the reservation / permit / settlement moves the invocation
state machine makes inside its own transactions. Dispatch goes through a Celery queue, so §5's
"one transaction before the HTTP request leaves" is two, in order, both before it leaves: the
request's, which takes the permit, consumes the approval and queues the call; then the
dispatcher's, which checks the task again (dispatch_task_refusal), marks the dispatch and writes
the journal's ``dispatching`` and commits before it sends. A call between the two is proven not
sent and holds its permit until it is sent or settled (the watchdog re-sends it). The trusted
answer and the settlement commit together.

Counters: ``write_reserved`` (writes awaiting approval or dispatch; an uncertain write keeps it),
``write_consumed`` (writes that got a trusted answer, a business rejection included),
``active_permits`` (dispatches in flight, reads included; an uncertain one is not released). An
uncertain call's charge is settled only by the business system's own answer arriving after the
watchdog gave up on the send (``charge_settle(late=True)``, apps.tools.delivery)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import F, Q, QuerySet

from apps.agent_auth.models import AgentSession
from apps.tasks.errors import (
    TaskCancelled,
    TaskConcurrencyExhausted,
    TaskDispatchUncertain,
    TaskExpired,
    TaskPaused,
    TaskRequired,
    TaskScopeBlocked,
    TaskToolNotAllowed,
    TaskWriteBudgetExhausted,
    task_control_required,
)
from apps.tasks.models import Task, TaskCharge, TaskMember, TaskRun
from apps.tasks.services import (
    ledger_append,
    session_task_enforced,
    task_members_verify,
    task_run_verify,
    task_usable,
)


def ended_task_runs(*, now: datetime) -> QuerySet[TaskRun, UUID]:
    """The ids of the runs whose task can never let a call run again: cancelled, blocked or expired."""
    return TaskRun.objects.filter(Q(task__state__in=[Task.State.CANCELLED, Task.State.BLOCKED])
                                  | Q(task__expires_at__lte=now)).values_list("run_id", flat=True)


def run_task_ended(*, run_id: Any) -> TaskCancelled | TaskExpired | TaskScopeBlocked | None:
    """Why the task run `run_id` is pinned to has ended (the error a call of it meets), or None."""
    link = TaskRun.objects.select_related("task").filter(run_id=run_id).first()
    if link is None:
        return None
    try:
        task_usable(task=link.task)
    except (TaskCancelled, TaskExpired, TaskScopeBlocked) as ended:
        return ended
    return None


@dataclass(frozen=True)
class Bound:
    task_id: Any
    member: TaskMember


@task_control_required
def invocation_task_check(*, session: AgentSession, run: Any, tool_name: str) -> Bound | None:
    """Before a call is stored: a task-enforced session must call under a run bound to its task,
    the task must be usable, its member set intact, and the tool among the member's exact tools.
    Only a member session can have a bound run, so a session outside every task costs one query."""
    if not session_task_enforced(session=session):
        return None
    link = TaskRun.objects.select_related("task", "member").filter(run=run).first()
    if link is None:
        raise TaskRequired("This session belongs to a task: call tools under a run bound to it.")
    task_usable(task=link.task)
    task_members_verify(task=link.task)
    if tool_name not in link.member.allowed_tools:
        raise TaskToolNotAllowed()
    return Bound(task_id=link.task_id, member=link.member)


@task_control_required
def invocation_task_recheck(*, session: AgentSession, inv: Any) -> None:
    """Before a stored call that has not settled is re-evaluated (an approved call is then
    dispatched): the task rules as they are now. A session that joined a task after the call was
    made cannot run it outside the task (TASK_REQUIRED); a bound call's task must still be usable
    and its whole member set intact (a revoked member blocks the task: TASK_SCOPE_BLOCKED). Run
    outside the caller's transaction, so the block holds; nothing else changes."""
    if session_task_enforced(session=session):
        task_run_verify(run=inv.run_id, unbound="This session joined a task after this call was made, and a call "
                                                "outside the task cannot run. Make it again under a run bound to it.")


def _locked(task_id: Any) -> Task:
    return Task.objects.select_for_update().get(pk=task_id)


def _budget_left(task: Task) -> bool:
    return task.max_write_calls is None or task.write_reserved + task.write_consumed < task.max_write_calls


def bound_for_run(*, run_id: Any) -> Bound | None:
    """The task (and membership) a run is pinned to, or None."""
    link = TaskRun.objects.select_related("member").filter(run_id=run_id).first()
    return None if link is None else Bound(task_id=link.task_id, member=link.member)


def charge_reserve(*, bound: Bound, invocation_pk: Any, tool_name: str, write: bool) -> None:
    """A call that waits for approval: a write reserves one unit of the budget now (a read holds
    nothing until its permit). Must run inside the transaction that stores the call; raising
    stores nothing."""
    if not write:
        return
    task = _locked(bound.task_id)
    task_usable(task=task)
    if not _budget_left(task):
        raise TaskWriteBudgetExhausted()
    task.write_reserved += 1
    task.save(update_fields=["write_reserved", "updated_at"])
    # A call refused for now keeps its released charge (charge_settle): it is reserved again.
    TaskCharge.objects.update_or_create(invocation_pk=invocation_pk, defaults={
        "task": task, "tool_name": tool_name, "write": write, "reserved": True})
    ledger_append(task, "write_reserved", detail={"tool": tool_name})


def charge_permit(*, bound: Bound, invocation_pk: Any, tool_name: str, write: bool) -> None:
    """A call about to be handed to the dispatcher: a dispatch permit (and, for a write not yet
    reserved, its reservation). Paused → TASK_PAUSED; no permit free → TASK_CONCURRENCY_EXHAUSTED
    while a call in flight holds one (it frees it when it settles), TASK_DISPATCH_UNCERTAIN when
    only uncertain calls hold them (they keep them: a retry would wait for nothing); no budget →
    TASK_WRITE_BUDGET_EXHAUSTED. Inside the caller's transaction."""
    task = _locked(bound.task_id)
    task_usable(task=task)
    if task.state == Task.State.PAUSED:
        raise TaskPaused()
    charge = TaskCharge.objects.select_for_update().filter(invocation_pk=invocation_pk).first()
    if charge is None:
        charge = TaskCharge(task=task, invocation_pk=invocation_pk, tool_name=tool_name, write=write)
    if charge.permit:
        return
    if task.active_permits >= task.max_concurrent:
        if TaskCharge.objects.filter(task=task, permit=True, outcome=TaskCharge.Outcome.OPEN).exists():
            raise TaskConcurrencyExhausted()
        raise TaskDispatchUncertain()
    if write and not charge.reserved:
        if not _budget_left(task):
            raise TaskWriteBudgetExhausted()
        task.write_reserved += 1
        charge.reserved = True
    task.active_permits += 1
    charge.permit = True
    task.save(update_fields=["write_reserved", "active_permits", "updated_at"])
    charge.save()
    ledger_append(task, "permit", detail={"tool": tool_name, "write": write})


@task_control_required
def dispatch_task_refusal(*, invocation_pk: Any) -> TaskPaused | TaskCancelled | TaskExpired | TaskScopeBlocked | None:
    """In the dispatcher's transaction, before a call that holds its task's permit is marked sent:
    why the task as it is now refuses it — paused, cancelled, expired, or blocked (its whole member
    set is verified again: a member revoked since blocks it) — or None. Between the request that
    took the permit and the dispatcher, an operator's pause or cancel, or a member's revocation,
    did not stop a call already queued: it was sent. The task row stays locked to the end of the
    transaction, so a control waits for the dispatch to be marked (and is then in-flight)."""
    charge = TaskCharge.objects.filter(invocation_pk=invocation_pk, outcome=TaskCharge.Outcome.OPEN,
                                       permit=True).values_list("task_id", flat=True).first()
    if charge is None:
        return None
    task = _locked(charge)
    try:
        task_usable(task=task)
        task_members_verify(task=task)
    except (TaskCancelled, TaskExpired, TaskScopeBlocked) as refusal:
        return refusal
    return TaskPaused() if task.state == Task.State.PAUSED else None


def charge_settle(*, invocation_pk: Any, outcome: str, late: bool = False) -> None:
    """Settle what a call holds, in the transaction that records its outcome: ``trusted`` (an HTTP
    answer: the permit is released and a write's reservation becomes consumption), ``released``
    (proven not sent, denied or expired: everything is given back), ``uncertain`` (kept as it is).
    A call outside every task, or settled already, changes nothing. A released call may take a
    permit again later (a call refused only for now is re-evaluated). `late`: the business system's
    answer to a call already settled as uncertain (its dispatcher outlived the dispatch deadline and
    the watchdog gave up on it) — only that charge is settled, and only as ``trusted``."""
    if late and outcome != TaskCharge.Outcome.TRUSTED:
        raise ValueError("only a trusted answer settles a call held as uncertain")
    held = TaskCharge.Outcome.UNCERTAIN if late else TaskCharge.Outcome.OPEN
    charge = TaskCharge.objects.select_for_update().filter(invocation_pk=invocation_pk, outcome=held).first()
    if charge is None:
        return
    task = _locked(charge.task_id)
    if outcome == TaskCharge.Outcome.UNCERTAIN:
        charge.outcome = outcome
        charge.save(update_fields=["outcome", "updated_at"])
        ledger_append(task, "uncertain", detail={"tool": charge.tool_name})
        return
    updates: dict[str, Any] = {}
    if charge.permit:
        updates["active_permits"] = F("active_permits") - 1
    if charge.reserved:
        updates["write_reserved"] = F("write_reserved") - 1
        if outcome == TaskCharge.Outcome.TRUSTED:
            updates["write_consumed"] = F("write_consumed") + 1
    if outcome == TaskCharge.Outcome.RELEASED:
        charge.permit = charge.reserved = False  # stays open: it may be re-evaluated and try again
    else:
        charge.outcome = outcome
    charge.save(update_fields=["outcome", "permit", "reserved", "updated_at"])
    if updates:
        Task.objects.filter(pk=task.pk).update(**updates)
    detail: dict[str, Any] = {"tool": charge.tool_name, "outcome": outcome}
    if late:
        detail["late"] = True
    ledger_append(task, "settled", detail=detail)


@task_control_required
def receipt_task_check(*, run_id: Any) -> None:
    """A receipt of a task's invocation re-verifies the task's whole member set (a revoked or
    changed member blocks the task and the receipt answers TASK_SCOPE_BLOCKED)."""
    link = TaskRun.objects.select_related("task").filter(run_id=run_id).first()
    if link is not None:
        task_members_verify(task=link.task)
