"""Task control writes: create (idempotent by request_id), control with compare-and-set, the
append-only ledger, blocking on a changed member set, and binding a turn to a task.

Every write locks the task row first (``select_for_update``), so control actions, budget movements
and blocks are serialised per task and each ledger entry gets the next sequence number."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import SessionEnd, session_end, session_route_keys
from apps.core.revisions import revision_of
from apps.core.validators import CLIENT_ID_MAX_CHARS, uuid_parse
from apps.projects.models import Project
from apps.routes.validators import ROUTE_KEY_RE, TOOL_NAME_RE
from apps.tasks.errors import (
    TaskCancelled,
    TaskExpired,
    TaskInvalid,
    TaskNotFound,
    TaskRequestConflict,
    TaskRequired,
    TaskRevisionConflict,
    TaskScopeBlocked,
    TaskTransitionInvalid,
    task_control_required,
)
from apps.tasks.models import Task, TaskLedgerEntry, TaskMember, TaskRun

MEMBERS_MAX = 32
TOOLS_PER_MEMBER_MAX = 64
WRITE_CALLS_MAX = 1_000_000
CONCURRENT_MAX = 64
BINDING_SCHEMA = "bailing.agent-task-binding.v1"
_ACTIONS = {
    "pause": ({Task.State.ACTIVE}, Task.State.PAUSED),
    "resume": ({Task.State.PAUSED}, Task.State.ACTIVE),
    "cancel": ({Task.State.ACTIVE, Task.State.PAUSED, Task.State.BLOCKED}, Task.State.CANCELLED),
}


@dataclass(frozen=True)
class MemberSpec:
    session_id: str
    workspace: str
    client_conversation_id: str
    allowed_tools: tuple[str, ...] = ()
    client_app_id: str | None = None  # optional: when given, it must be the session's client app


@dataclass(frozen=True)
class PolicySpec:
    max_write_calls: int | None = None
    max_concurrent: int = 1
    expires_at: datetime | None = None


@dataclass
class _Invalid:
    fields: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, message: str) -> None:
        self.fields.setdefault(name, []).append(message)

    def raise_if_any(self) -> None:
        if self.fields:
            name, messages = next(iter(self.fields.items()))
            raise TaskInvalid(f"{name}: {messages[0]}", fields=self.fields)


def _policy_public(policy: PolicySpec) -> dict[str, Any]:
    return {"max_write_calls": policy.max_write_calls, "max_concurrent": policy.max_concurrent,
            "expires_at": policy.expires_at.isoformat() if policy.expires_at else None}


def _member_public(member: TaskMember) -> dict[str, Any]:
    return {"session_id": str(member.session_id), "client_app_id": member.client_app_id,
            "workspace": member.workspace, "client_conversation_id": member.client_conversation_id,
            "allowed_tools": list(member.allowed_tools)}


def task_scope_hash(*, members: list[dict[str, Any]], policy: dict[str, Any]) -> str:
    """SHA-256 over the frozen members (with the identity each had) and the policy."""
    return revision_of({"members": members, "policy": policy})


# Why a session cannot be a member: refused at creation, and the reason a task blocks.
_MEMBER_REFUSALS = {
    SessionEnd.REVOKED: "The session is revoked or expired.",
    SessionEnd.EXPIRED: "The session is revoked or expired.",
    SessionEnd.AUTHORIZATION_DELETED: "The session's authorization record was deleted.",
    SessionEnd.APPROVER_LEFT: "The account that approved the session has left the project.",
}
_MEMBER_BLOCKS = {
    SessionEnd.REVOKED: "a member session was revoked",
    SessionEnd.EXPIRED: "a member session expired",
    SessionEnd.AUTHORIZATION_DELETED: "a member session's authorization record was deleted",
    SessionEnd.APPROVER_LEFT: "the account that approved a member session left the project",
}


def _sessions(project: Project, members: list[MemberSpec], invalid: _Invalid) -> dict[str, AgentSession]:
    ids = {m.session_id for m in members}
    valid_ids = {m.session_id for m in members if uuid_parse(m.session_id) is not None}
    found = {str(s.pk): s for s in AgentSession.objects.select_related("client", "authorization").filter(
        pk__in=valid_ids, client__project=project)}
    now = timezone.now()
    for index, member in enumerate(members):
        name = f"members[{index}]"
        session = found.get(member.session_id) if member.session_id in ids else None
        if session is None:
            invalid.add(f"{name}.session_id", "No such agent session in this project.")
            continue
        end = session_end(session=session, now=now)
        if end is not None:
            invalid.add(f"{name}.session_id", _MEMBER_REFUSALS[end])
        if member.client_app_id is not None and member.client_app_id != session.client.app_id:
            invalid.add(f"{name}.client_app_id", "Not the client app of this session.")
        granted = session_route_keys(session)
        if not ROUTE_KEY_RE.fullmatch(member.workspace) or member.workspace not in granted:
            invalid.add(f"{name}.workspace", "Not a workspace this session may use.")
    return found


def _validate(project: Project, members: list[MemberSpec], policy: PolicySpec) -> dict[str, AgentSession]:
    invalid = _Invalid()
    if not 1 <= len(members) <= MEMBERS_MAX:
        invalid.add("members", f"Between 1 and {MEMBERS_MAX} members are required.")
    for index, member in enumerate(members):
        name = f"members[{index}]"
        # As a turn's own (apps.runtime.api.serializers): an id no turn can send could never be bound,
        # and the member's session, task-enforced for good, could open no turn in that conversation.
        conversation = member.client_conversation_id
        if not conversation or len(conversation) > CLIENT_ID_MAX_CHARS or not conversation.isprintable():
            invalid.add(f"{name}.client_conversation_id",
                        f"1 to {CLIENT_ID_MAX_CHARS} printable characters are required, as in a turn.")
        if len(member.allowed_tools) > TOOLS_PER_MEMBER_MAX:
            invalid.add(f"{name}.allowed_tools", f"At most {TOOLS_PER_MEMBER_MAX} tools.")
        bad = [tool for tool in member.allowed_tools if not isinstance(tool, str) or not TOOL_NAME_RE.fullmatch(tool)]
        if bad:
            invalid.add(f"{name}.allowed_tools", "Exact tool names are required.")
        elif len(set(member.allowed_tools)) != len(member.allowed_tools):
            invalid.add(f"{name}.allowed_tools", "A tool is listed twice.")
    keys = [(m.session_id, m.workspace, m.client_conversation_id) for m in members]
    if len(set(keys)) != len(keys):
        invalid.add("members", "A session, workspace and conversation is listed twice.")
    if policy.max_write_calls is not None and not 0 <= policy.max_write_calls <= WRITE_CALLS_MAX:
        invalid.add("policy.max_write_calls", f"Empty (unlimited) or 0 to {WRITE_CALLS_MAX}.")
    if not 1 <= policy.max_concurrent <= CONCURRENT_MAX:
        invalid.add("policy.max_concurrent", f"1 to {CONCURRENT_MAX}.")
    if policy.expires_at is not None and policy.expires_at <= timezone.now():
        invalid.add("policy.expires_at", "Must be in the future.")
    invalid.raise_if_any()
    sessions = _sessions(project, members, invalid)
    invalid.raise_if_any()
    return sessions


def _request_hash(*, name: str, members: list[MemberSpec], policy: PolicySpec) -> str:
    # A member without client_app_id hashes as it did before the field existed: earlier requests still replay.
    shown = [{key: value for key, value in asdict(m).items() if key != "client_app_id" or value is not None}
             for m in members]
    return revision_of({"name": name, "members": shown, "policy": _policy_public(policy)})


def task_create(*, project: Project, user: Any, request_id: str, members: list[MemberSpec], policy: PolicySpec,
                name: str = "") -> tuple[Task, bool]:
    """The task of this request: created (True), or the one an earlier identical request created
    (False). The same request_id with a different request → 409 `task_request_conflict`."""
    request_hash = _request_hash(name=name, members=members, policy=policy)
    existing = Task.objects.filter(project=project, request_id=request_id).first()
    if existing is not None:
        if existing.request_hash != request_hash:
            raise TaskRequestConflict()
        return existing, False
    sessions = _validate(project, members, policy)
    try:
        with transaction.atomic():
            task = Task(project=project, name=name, request_id=request_id, request_hash=request_hash,
                        max_write_calls=policy.max_write_calls, max_concurrent=policy.max_concurrent,
                        expires_at=policy.expires_at, created_by=user if getattr(user, "pk", None) else None)
            rows = []
            for position, spec in enumerate(members):
                session = sessions[spec.session_id]
                rows.append(TaskMember(
                    task=task, session=session, client_app_id=session.client.app_id, workspace=spec.workspace,
                    client_conversation_id=spec.client_conversation_id, allowed_tools=list(spec.allowed_tools),
                    principal_id=session.principal_id, on_behalf_of=session.on_behalf_of, position=position))
            task.scope_hash = task_scope_hash(members=[_frozen(row) for row in rows],
                                              policy=_policy_public(policy))
            task.save()
            TaskMember.objects.bulk_create(rows)
            ledger_append(task, "created", actor=_actor(user), request_id=request_id,
                           detail={"members": len(rows), "policy": _policy_public(policy)})
    except IntegrityError:  # a concurrent identical request won the race
        existing = Task.objects.filter(project=project, request_id=request_id).first()
        if existing is None or existing.request_hash != request_hash:
            raise TaskRequestConflict() from None
        return existing, False
    return task, True


def _frozen(member: TaskMember) -> dict[str, Any]:
    return {**_member_public(member), "principal_id": member.principal_id, "on_behalf_of": member.on_behalf_of}


def _actor(user: Any) -> str:
    return str(getattr(user, "username", "") or "")[:191]


def ledger_append(task: Task, kind: str, *, actor: str = "", request_id: str = "",
                  detail: dict[str, Any] | None = None) -> TaskLedgerEntry:
    """Append to a task whose row this transaction holds (or just created); the task's
    `ledger_sequence` is advanced in the row and on `task`."""
    task.ledger_sequence += 1
    Task.objects.filter(pk=task.pk).update(ledger_sequence=task.ledger_sequence)
    return TaskLedgerEntry.objects.create(task=task, sequence=task.ledger_sequence, kind=kind, actor=actor,
                                          request_id=request_id, revision=task.revision, state=task.state,
                                          detail=detail or {})


def task_control(*, task: Task, user: Any, request_id: str, expected_revision: int, action: str) -> Task:
    """Pause, resume or cancel with compare-and-set on the control revision; a stale revision is a
    conflict, never retried with a newer one. The same request_id again (with the same action and
    expected revision, else a conflict) acts no more and answers the task as it now stands: its
    state and revision may have moved on since the first answer."""
    if action not in _ACTIONS:
        raise TaskInvalid("action: One of pause, resume, cancel.", fields={"action": ["One of pause, resume, cancel."]})
    with transaction.atomic():
        locked = Task.objects.select_for_update().get(pk=task.pk)
        done = locked.ledger.filter(request_id=request_id).first()
        if done is not None:
            if done.kind != action or done.detail.get("expected_revision") != expected_revision:
                raise TaskRequestConflict()
            return locked
        if locked.revision != expected_revision:
            raise TaskRevisionConflict(revision=locked.revision, state=locked.state)
        allowed_from, target = _ACTIONS[action]
        if locked.state not in allowed_from:
            raise TaskTransitionInvalid(f"A {locked.state} task cannot {action}.", state=locked.state,
                                        revision=locked.revision)
        locked.state = target
        locked.revision += 1
        locked.save(update_fields=["state", "revision", "updated_at"])
        ledger_append(locked, action, actor=_actor(user), request_id=request_id,
                       detail={"expected_revision": expected_revision})
    return locked


def task_block(*, task: Task, reason: str) -> Task:
    """Block the whole task (never shrink it to the members that remain). Commits on its own, so
    the block holds even when the request that found it fails."""
    with transaction.atomic():
        locked = Task.objects.select_for_update().get(pk=task.pk)
        if locked.state in (Task.State.BLOCKED, Task.State.CANCELLED):
            return locked
        locked.state = Task.State.BLOCKED
        locked.blocked_reason = reason[:500]
        locked.revision += 1
        locked.save(update_fields=["state", "blocked_reason", "revision", "updated_at"])
        ledger_append(locked, "blocked", detail={"reason": reason[:500]})
    return locked


def _member_changed(member: TaskMember, now: datetime) -> str | None:
    session = member.session
    end = session_end(session=session, now=now)
    if end is not None:
        return _MEMBER_BLOCKS[end]
    if (session.principal_id, session.on_behalf_of, session.client.app_id) != (
            member.principal_id, member.on_behalf_of, member.client_app_id):
        return "a member session changed identity"
    return None


def task_members_verify(*, task: Task, members: Iterable[TaskMember] | None = None) -> None:
    """Re-verify the whole member set (`members`, read with their sessions' clients and
    authorizations, if the caller has them); any revoked or changed member blocks the task."""
    now = timezone.now()
    if members is None:
        members = task.members.select_related("session__client", "session__authorization")
    for member in members:
        reason = _member_changed(member, now)
        if reason is not None:
            task_block(task=task, reason=reason)
            raise TaskScopeBlocked()


def task_state_current(*, task: Task, members: Iterable[TaskMember] | None = None) -> Task:
    """``task`` as a read shows it: a task whose member set no longer holds (a revoked, expired or
    changed member) is blocked first, as the next bound call would find it, so no view calls
    ``active`` a task the contract says is blocked. Returns the task re-read when it was blocked."""
    if task.state in (Task.State.BLOCKED, Task.State.CANCELLED):
        return task
    try:
        task_members_verify(task=task, members=members)
    except TaskScopeBlocked:
        return Task.objects.get(pk=task.pk)
    return task


def task_usable(*, task: Task) -> None:
    """The states in which a bound turn, search or read may not proceed."""
    if task.state == Task.State.CANCELLED:
        raise TaskCancelled()
    if task.state == Task.State.BLOCKED:
        raise TaskScopeBlocked()
    if task.expires_at is not None and task.expires_at <= timezone.now():
        raise TaskExpired()


@task_control_required
def session_task_enforced(*, session: AgentSession) -> bool:
    return TaskMember.objects.filter(session=session).exists()


@task_control_required
def task_binding_resolve(*, session: AgentSession, workspace: str, client_conversation_id: str,
                         binding: dict[str, Any] | None) -> tuple[Task, TaskMember] | None:
    """The task and membership a turn is bound to, verified against the whole member set before
    any run exists; None for a session outside every task that sent no binding."""
    if binding is None:
        if session_task_enforced(session=session):
            raise TaskRequired()
        return None
    member = (TaskMember.objects.select_related("task").filter(
        task_id=binding["task_id"], task__project_id=session.client.project_id, session=session,
        workspace=workspace, client_conversation_id=client_conversation_id).first())
    if member is None:
        raise TaskNotFound()
    task = member.task
    if task.scope_hash != binding["scope_hash"]:
        raise TaskScopeBlocked("The binding's scope_hash is not the task's.")
    task_usable(task=task)
    task_members_verify(task=task)
    return task, member


def task_run_pin(*, run: Any, task: Task, member: TaskMember, binding: dict[str, Any]) -> TaskRun:
    """Pin a new run to its task, inside the turn's transaction. The task is checked again under
    its row's lock: a cancel (or block) that committed after the turn first read the task refuses
    the turn, and the run goes with it (6 of 20 turns racing a cancel were pinned to the cancelled
    task)."""
    task_usable(task=Task.objects.select_for_update(no_key=True).get(pk=task.pk))
    return TaskRun.objects.create(run=run, task=task, member=member, binding=binding)


@task_control_required
def task_run_check(*, session: AgentSession, run: Any | None) -> TaskRun | None:
    """For a task-enforced session, a request made under a run (capability search, knowledge
    search and read) must name a run pinned to a usable task; the member set is re-verified.
    Returns the run's pin (its task and member read with it); sessions outside every task pass
    unchanged (None)."""
    if not session_task_enforced(session=session):
        return None
    return task_run_verify(run=run)


@task_control_required
def task_run_verify(*, run: Any | None,
                    unbound: str = "This session belongs to a task: give the run_id of a turn bound to it.") -> TaskRun:
    """`task_run_check` for a session already known to be task-enforced (`run` a Run or its id);
    `unbound` is the TASK_REQUIRED message for a run pinned to no task."""
    link = None if run is None else TaskRun.objects.select_related("task", "member").filter(run=run).first()
    if link is None:
        raise TaskRequired(unbound)
    task_usable(task=link.task)
    task_members_verify(task=link.task)
    return link
