"""Task control reads: the agent's snapshot (its own membership only) and the operator's views."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet

from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import session_live_q
from apps.core.errors import InvalidRequest
from apps.core.revisions import revision_of
from apps.core.validators import uuid_parse
from apps.projects.models import Project
from apps.projects.selectors import project_list_editable, project_list_visible
from apps.tasks.errors import ProjectReadOnly, TaskNotFound
from apps.tasks.models import Task, TaskCharge, TaskMember

TASK_SCHEMA = "bailing.agent-task.v1"
CAPABILITIES_SCHEMA = "bailing.agent-task-control-capabilities.v1"


def _member_broken_q(now: datetime) -> Q:
    """Members (TaskMember rows) that block their task at its next read (services._member_changed):
    the session revoked or expired, or its identity no longer the one frozen with the member."""
    return (~session_live_q(now, "session__") | ~Q(session__principal_id=F("principal_id"))
            | ~Q(session__on_behalf_of=F("on_behalf_of")) | ~Q(session__client__app_id=F("client_app_id")))


def task_can_run_q(now: datetime, prefix: str = "") -> Q:
    """Tasks (or, with `prefix`, rows reaching one) that can still run: active or paused, not
    expired, and no member that blocks it. Counted before the next read blocks it
    (services.task_state_current), so that no view calls such a task usable."""
    broken = TaskMember.objects.filter(task=OuterRef(f"{prefix}pk")).filter(_member_broken_q(now))
    return (Q(**{f"{prefix}state__in": [Task.State.ACTIVE, Task.State.PAUSED]})
            & (Q(**{f"{prefix}expires_at__isnull": True}) | Q(**{f"{prefix}expires_at__gt": now}))
            & ~Q(Exists(broken)))


def membership_usable_q(now: datetime) -> Q:
    """Memberships (TaskMember rows) whose task can still run (task_can_run_q)."""
    return task_can_run_q(now, prefix="task__")


def session_only_in_ended_tasks_q(now: datetime) -> Q:
    """Sessions of some task (task-enforced for good) none of whose tasks can run again: cancelled,
    blocked or expired. Such a session works again only in a new task."""
    memberships = TaskMember.objects.filter(session=OuterRef("pk"))
    return Q(Exists(memberships)) & ~Q(Exists(memberships.filter(membership_usable_q(now))))


def task_control_capabilities(*, enforced: bool) -> dict[str, Any]:
    return {"schema_version": CAPABILITIES_SCHEMA, "supported": True, "mode": "required" if enforced else "optional",
            "task_schema": TASK_SCHEMA, "metering": "write_invocation", "same_hub_only": True,
            "controls": ["pause", "resume", "cancel"], "inspect_invocation": True}


def _uuid(value: str) -> uuid.UUID | None:
    return uuid_parse(value)


def task_policy(task: Task) -> dict[str, Any]:
    return {"max_write_calls": task.max_write_calls, "max_concurrent": task.max_concurrent,
            "expires_at": task.expires_at.isoformat().replace("+00:00", "Z") if task.expires_at else None}


def task_counters(task: Task) -> dict[str, int]:
    return {"write_reserved": task.write_reserved, "write_consumed": task.write_consumed,
            "active_permits": task.active_permits}


def task_uncertain_permits(task: Task) -> int:
    """How many of the task's dispatch permits are held by calls whose outcome is uncertain: they
    keep them (contracts-beyond-seeds §5), for the task's life."""
    return TaskCharge.objects.filter(task=task, permit=True, outcome=TaskCharge.Outcome.UNCERTAIN).count()


def member_out(member: TaskMember) -> dict[str, Any]:
    return {"session_id": str(member.session_id), "client_app_id": member.client_app_id,
            "workspace": member.workspace, "client_conversation_id": member.client_conversation_id,
            "allowed_tools": list(member.allowed_tools)}


def task_revision_hex(task: Task) -> str:
    """The task's control revision as agent hosts take every revision (the wire rules: 64 lowercase
    hex): a digest of the task and its counter, new with every control action. Operators compare
    and set on the counter itself."""
    return revision_of({"task": str(task.pk), "revision": task.revision})


def task_member_get(*, session: AgentSession, task_id: str, workspace: str,
                    client_conversation_id: str) -> TaskMember:
    """The caller's own membership of a task, with the task; TaskNotFound (404) otherwise."""
    pk = _uuid(task_id)
    member = None if pk is None else (TaskMember.objects.select_related("task").filter(
        task_id=pk, task__project_id=session.client.project_id, session=session, workspace=workspace,
        client_conversation_id=client_conversation_id).first())
    if member is None:
        raise TaskNotFound()
    return member


def task_snapshot(*, member: TaskMember, task: Task) -> dict[str, Any]:
    """`bailing.agent-task.v1` of `task` for one of its members: never another member's details."""
    return {"schema_version": TASK_SCHEMA, "task_id": str(task.pk), "state": task.state,
            "revision": task_revision_hex(task),
            "ledger_sequence": task.ledger_sequence, "scope_hash": task.scope_hash,
            "member_count": task.members.count(), "member": member_out(member), "policy": task_policy(task),
            "counters": task_counters(task), "snapshot_is_dispatch_permission": False}


def task_list_visible(*, user: Any, project_id: uuid.UUID | None = None) -> QuerySet[Task]:
    queryset = (Task.objects.select_related("project").annotate(member_total=Count("members"))
                .filter(project__in=project_list_visible(user=user)))
    if project_id:
        queryset = queryset.filter(project_id=project_id)
    return queryset.order_by("created_at", "id")


def task_list_after(*, user: Any, project_id: uuid.UUID | None = None,
                    cursor: uuid.UUID | None = None) -> QuerySet[Task]:
    """The operator's tasks, oldest first, after the task `cursor` (the builder list's cursor: the
    last task of the page before). A cursor that is not a task of this listing is 400
    `invalid_request` naming it."""
    queryset = task_list_visible(user=user, project_id=project_id)
    if cursor is None:
        return queryset
    after = queryset.filter(pk=cursor).first()
    if after is None:
        raise InvalidRequest("cursor: Not a task of this listing.", fields={"cursor": ["Unknown cursor."]})
    return queryset.filter(created_at__gte=after.created_at).exclude(created_at=after.created_at, id__lte=after.id)


def task_get_visible(*, user: Any, task_id: str) -> Task:
    pk = _uuid(task_id)
    task = None if pk is None else task_list_visible(user=user).filter(pk=pk).first()
    if task is None:
        raise TaskNotFound()
    return task


def task_get_editable(*, user: Any, task_id: str) -> Task:
    """A task the operator may control: 404 outside their projects, 403 for a viewer."""
    task = task_get_visible(user=user, task_id=task_id)
    if not project_list_editable(user=user).filter(pk=task.project_id).exists():
        raise ProjectReadOnly()
    return task


def project_editable_get(*, user: Any, project_id: str | None) -> Project | None:
    pk = _uuid(project_id or "")
    return None if pk is None else project_list_editable(user=user).filter(pk=pk).first()


def task_runs_summary(*, task: Task) -> list[dict[str, Any]]:
    """The task's runs, newest first, with their invocation states counted — no arguments, no bodies."""
    rows = list(task.runs.select_related("run", "member").order_by("-run__created_at")[:100])
    # Every run's states in one query (one per run was a hundred queries for a busy task).
    states: dict[Any, dict[str, int]] = {link.run_id: {} for link in rows}
    counted = (task.runs.filter(run_id__in=list(states), run__invocations__isnull=False)
               .values_list("run_id", "run__invocations__state").annotate(n=Count("run__invocations"))
               .order_by("run_id", "run__invocations__state"))
    for run_id, state, n in counted:
        states[run_id][state] = n
    return [{"run_id": str(link.run_id), "workspace": link.member.workspace,
             "client_conversation_id": link.member.client_conversation_id,
             "run_state": link.run.state, "invocations": states[link.run_id]} for link in rows]
