"""Governed tool invocations: the one state machine of a tool call.

::

    invoke ─► checks ─► key ─┬─► replay a stable result
                             ├─► awaiting_approval (frozen arguments, Approval) ─► decide ─► resume
                             ├─► rejected_before_dispatch (schema, rate limit, nothing sent)
                             └─► in_progress ─► [task] journal dispatching ─► HTTP ─► response_recorded
                                                  ─► completed: executed | business_rejected
                                                  └► uncertain: reconciliation_required

Every transition is an update of the Invocation row (locked) and, when it concerns the dispatch, a
journal entry, in one transaction. A state is never inferred from a missing row: ``journal_state``
``absent`` is what proves a call was never sent, and only such a call may be dispatched — once,
by ``invocation_dispatch`` (the Celery task's body, apps.tools.delivery), which commits
``dispatching`` before the request leaves. Approvals gate transitions; deciding one sends nothing
(apps.tools.approvals). What a call's arguments and its compiled tool decide on their own (the
fingerprint, approval reasons, the schema check) is apps.tools.call_checks; what every transition
is written with (the answer, the locked row's update and journal entry) is
apps.tools.invocation_transitions.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import session_ended_for_good_q
from apps.core.broker import BROKER_ERRORS
from apps.core.errors import ApiError
from apps.core.jsonbytes import compact_json, js_numbers, json_stringify_bytes
from apps.core.redis import redis_client
from apps.core.revisions import revision_of
from apps.projects.models import Project
from apps.routes.models import Route
from apps.tasks.errors import TaskCancelled, TaskExpired, TaskScopeBlocked
from apps.tasks.metering import (
    Bound,
    bound_for_run,
    charge_permit,
    charge_reserve,
    ended_task_runs,
    invocation_task_check,
    invocation_task_recheck,
    run_task_ended,
)

from .approvals import approval_lapse, approval_session_ended, approval_status, invocation_settle_denied
from .call_checks import Target, approval_reasons, execution_fingerprint, schema_problem
from .dispatch import arguments_unplaceable
from .errors import CapabilityChanged, ToolNotFound
from .invocation_errors import ExecutionPaused, InvocationConflict, InvocationNotFound, RunNotActive
from .invocation_transitions import (
    NOT_SENT_TEXT,
    Journal,
    State,
    answer_build,
    arguments_freeze,
    arguments_thaw,
    invocation_lock,
    invocation_settle,
    invocation_settle_arguments_lost,
    invocation_settle_uncertain,
    result_is_stable,
    settled_channel,
    transition_save,
)
from .models import Approval, Invocation, InvocationJournalEntry, ToolProvider
from .ratelimit import rate_limit_take
from .surface import SurfaceTool, route_approval_forced, route_surface

logger = logging.getLogger("bailinghub.tools")

if TYPE_CHECKING:  # the ledger sits above tools: its Run is only named here, never imported at run time
    from apps.ledger.models import Run

RECEIPT_SCHEMA = "bailing.agent-invocation-receipt.v1"
INSPECTION_SCHEMA = "bailing.agent-invocation-inspection-capabilities.v1"
KEY_DOMAIN = "bailinghub.tool-invocation.v1"
DISPATCH_TASK = "tools.invocation_dispatch"
WATCHDOG_TASK = "tools.invocation_watchdog"


@dataclass(frozen=True)
class InvokeCall:
    """One validated ``POST /tool-invocations`` body."""

    invocation_id: str
    capability_revision: str
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class BuiltinCall:
    """A built-in (knowledge) tool call, run in-process by the runner the runtime passes in."""

    session: AgentSession
    route: Route
    run: Run
    tool: str
    arguments: dict[str, Any]


BuiltinRunner = Callable[[BuiltinCall], dict[str, Any]]


def invocation_key(*, session_id: Any, invocation_id: str) -> str:
    """SHA-256 over a domain tag, the session id and the agent's ``invocation_id``."""
    return hashlib.sha256(f"{KEY_DOMAIN}\x00{session_id}\x00{invocation_id}".encode()).hexdigest()


def arguments_bytes(arguments: Any) -> int:
    """The arguments' size as the contract measures it: the UTF-8 bytes of
    `JSON.stringify(arguments)` (apps.core.jsonbytes.json_stringify_bytes)."""
    return json_stringify_bytes(arguments)


def _target(*, route: Route, tool: SurfaceTool) -> Target:
    if tool.tool is None:
        compiled = dict(tool.definition)
        return Target(name=tool.name, compiled=compiled, provider=None, forced_approval=False,
                      fingerprint=execution_fingerprint(route_key=route.key, provider=None, compiled=compiled))
    provider = ToolProvider.objects.get(pk=tool.tool.provider_id)
    compiled = tool.tool.compiled
    forced = route_approval_forced(route=route, name=tool.name, readonly=bool(compiled.get("readonly")))
    return Target(name=tool.name, compiled=compiled, provider=provider, forced_approval=forced,
                  fingerprint=execution_fingerprint(route_key=route.key, provider=provider, compiled=compiled))


def _current_target(*, inv: Invocation, session: AgentSession) -> Target:
    """The invocation's tool as the caller may use it now: still on its surface (else 404
    ``tool_not_found``) and executing as it did when the call was made (else 409
    ``capability_changed``)."""
    tool = route_surface(route=inv.route, session=session).get(inv.tool_name)
    if tool is None:
        raise ToolNotFound()
    target = _target(route=inv.route, tool=tool)
    if target.fingerprint != inv.execution_fingerprint:
        raise CapabilityChanged("The tool's execution changed since this call was made; nothing was sent. "
                                "Discover the tools again and make a new call.")
    return target


def invocation_blocker(*, inv: Invocation) -> str:
    """Why the agent's resume of ``inv`` would be refused before anything runs, read as the resume
    reads it (``_current_target``): ``tool_not_found`` (the tool left the caller's surface: its
    provider was deleted or switched off, or the tool was removed, switched off or taken off the
    route) or ``capability_changed`` (its execution fingerprint changed, e.g. a re-import changed
    its path); empty when nothing stands in the way. Read-only: the approval page asks it so that an
    approver is not told that a call which can no longer run "runs if approved"."""
    try:
        _current_target(inv=inv, session=inv.session)
    except ToolNotFound:
        return ToolNotFound.code
    except CapabilityChanged:
        return CapabilityChanged.code
    return ""


def approvals_stranded(*, provider: ToolProvider, compiled_by_name: dict[str, dict[str, Any]] | None
                       ) -> dict[str, int]:
    """The provider's calls still waiting for their approval (pending, or approved and not yet
    resumed) that could not run once ``compiled_by_name`` replaces its tools (``None``: once the
    provider is deleted), counted by tool name: their tool is gone, or its execution fingerprint
    changes, so their agents' resume is refused (``invocation_blocker``). Reads only: a re-import's
    preview and a delete's confirmation say it before the operator goes ahead."""
    now = timezone.now()
    waiting = (Invocation.objects.filter(provider=provider, state=State.AWAITING_APPROVAL)
               .filter(models.Q(approval__status=Approval.Status.PENDING, approval__expires_at__gt=now)
                       | models.Q(approval__status=Approval.Status.APPROVED, approval__used_at__isnull=True))
               .values_list("tool_name", "execution_fingerprint", "route__key").order_by("tool_name"))
    stranded: dict[str, int] = {}
    for name, fingerprint, route_key in waiting:
        compiled = (compiled_by_name or {}).get(name)
        if compiled is None or execution_fingerprint(route_key=route_key, provider=provider,
                                                     compiled=compiled) != fingerprint:
            stranded[name] = stranded.get(name, 0) + 1
    return stranded


def _paused(project_id: Any) -> bool:
    return bool(Project.objects.filter(pk=project_id).values_list("tool_execution_paused", flat=True).first())


def execution_pause_check(*, route: Route) -> None:
    """503 ``execution_paused`` while the route's project has tool execution paused."""
    if _paused(route.project_id):
        raise ExecutionPaused()


def _send_after_commit(inv: Invocation) -> None:
    pk = str(inv.pk)

    def send() -> None:
        # Nobody reads its result: see apps.knowledge.dispatch._send on ignore_result.
        try:
            current_app.send_task(DISPATCH_TASK, args=[pk], queue=settings.TOOL_DISPATCH_QUEUE, ignore_result=True)
        except BROKER_ERRORS as exc:  # said as the knowledge sends say it: an ERROR traceback "during transaction"
            logger.warning("Could not send call %s to the dispatch queue (%s); the watchdog sends it again once it "
                           "has waited TOOL_DISPATCH_REQUEUE_SECONDS.", pk, exc)

    transaction.on_commit(send, robust=True)


def _queue(inv: Invocation, target: Target) -> dict[str, Any]:
    """A call proven not sent, ready to go: take from the tool's rate limit, then hand it to the
    dispatcher after commit; or refuse it for now (``auto_retry_allowed``, re-evaluated later).
    A task-bound call first takes a dispatch permit (and a write its budget): a TASK_* refusal
    rolls back the caller's whole transaction, so nothing is stored or consumed."""
    bound = bound_for_run(run_id=inv.run_id)
    if bound is not None:
        charge_permit(bound=bound, invocation_pk=inv.pk, tool_name=inv.tool_name, write=not inv.readonly)
    rate = target.compiled.get("rate_limit")
    if rate and inv.provider_id is not None:
        decision = rate_limit_take(key=f"{inv.provider_id}:{inv.tool_name}", count=int(rate["count"]),
                                   window=str(rate["window"]))
        if not decision.allowed:
            return invocation_settle(inv, answer_build(
                inv, state=State.REJECTED_BEFORE_DISPATCH, auto_retry_allowed=True,
                text=f"The tool's rate limit ({rate['count']} per {rate['window']}) is reached. {NOT_SENT_TEXT} "
                     "Resume or repeat this same invocation after retry_after_ms.",
                retry_after_ms=decision.retry_after_ms, rate_limit=dict(rate)))
    answer = answer_build(inv, state=State.IN_PROGRESS,
                          text="The call is being executed. Resume this same invocation_id to read its result; do not "
                               "submit it again.")
    transition_save(inv, state=State.IN_PROGRESS, result=answer, queued_at=timezone.now(), resends=0)
    _send_after_commit(inv)
    return answer


def _awaiting_text(approval: Approval, invocation_id: str) -> str:
    # The id written out: the text said "{invocation_id}", a placeholder nobody filled.
    prompt = f" ({approval.prompt})" if approval.prompt else ""
    return (f"This call needs an approver's decision{prompt}. {NOT_SENT_TEXT} Once it is approved, resume it "
            f"(POST /agent-api/v1/tool-invocations/{invocation_id}/resume, or your host's resume tool); do not "
            "submit it again.")


def invocation_invoke(*, session: AgentSession, route: Route, run: Run, run_active: bool,
                      call: InvokeCall, builtin: BuiltinRunner) -> dict[str, Any]:
    """``POST /tool-invocations`` after the budgets and the route and run checks: the answer of
    the call keyed by (session, ``invocation_id``) — a new one, or the existing one replayed or
    re-evaluated. The arguments' numbers are taken as a JavaScript host writes them (js_numbers):
    the hash, the approval rules, the frozen copy and the business request all see 1, never 1.0."""
    call = replace(call, arguments=js_numbers(call.arguments))
    key = invocation_key(session_id=session.pk, invocation_id=call.invocation_id)
    arguments_sha256 = revision_of(call.arguments)
    existing = Invocation.objects.select_related("route").filter(idempotency_key=key).first()
    if existing is not None:
        return _existing(existing, session=session, route=route, call=call,
                         arguments_sha256=arguments_sha256)
    execution_pause_check(route=route)
    if not run_active:
        raise RunNotActive()
    surface = route_surface(route=route, session=session)
    if call.capability_revision != surface.revision:
        raise CapabilityChanged()
    tool = surface.get(call.tool)
    if tool is None:
        raise ToolNotFound()
    bound = invocation_task_check(session=session, run=run, tool_name=call.tool)
    target = _target(route=route, tool=tool)
    inv = Invocation(
        idempotency_key=key, invocation_id=call.invocation_id, project_id=route.project_id, session=session,
        route=route, run=run, tool_name=call.tool, provider=target.provider,
        provider_name=target.provider.name if target.provider else "", principal_id=session.principal_id,
        on_behalf_of=session.on_behalf_of, arguments_sha256=arguments_sha256,
        arguments_bytes=arguments_bytes(call.arguments), capability_revision=call.capability_revision,
        execution_fingerprint=target.fingerprint, readonly=bool(target.compiled.get("readonly")),
        risk=str(target.compiled.get("risk", "low")), state=State.IN_PROGRESS,
    )
    if target.builtin and (refused := _run_limit_refusal(inv, limit=route.max_tool_calls)) is not None:
        # Before the built-in runs; every call is checked again under the run's lock where its row
        # is made. A twin that took the last place meanwhile is replayed.
        twin = Invocation.objects.select_related("route").filter(idempotency_key=key).first()
        if twin is not None:
            return _existing(twin, session=session, route=route, call=call, arguments_sha256=arguments_sha256)
        return refused
    problem = schema_problem(schema=target.compiled.get("input_schema") or {}, arguments=call.arguments)
    if problem is not None:
        field, message = problem
        answer = answer_build(
            inv, state=State.REJECTED_BEFORE_DISPATCH,
            text=f"The arguments do not fit the tool's input schema: {field}: {message}. {NOT_SENT_TEXT}")
        return _create(inv, answer, session=session, route=route, run=run, call=call)
    if not target.builtin and (unplaceable := arguments_unplaceable(compiled=target.compiled,
                                                                    arguments=call.arguments)) is not None:
        answer = answer_build(inv, state=State.REJECTED_BEFORE_DISPATCH, text=(
            f"The arguments cannot be sent: {unplaceable.field}: {unplaceable.message} {NOT_SENT_TEXT}"))
        return _create(inv, answer, session=session, route=route, run=run, call=call)
    if target.builtin:
        # Read-only and in-process: run before the row exists; two identical calls racing both read,
        # and one answer is kept.
        started = time.monotonic()
        try:
            output = builtin(BuiltinCall(session=session, route=route, run=run, tool=call.tool,
                                         arguments=call.arguments))
        except ApiError as exc:
            if exc.status >= 500:  # the knowledge service is down for now: nothing is kept, retry the same call
                return answer_build(inv, state=State.REJECTED_BEFORE_DISPATCH, auto_retry_allowed=True,
                                    text=f"{exc.message} Retry this same invocation in a few seconds.")
            inv.journal_state = Journal.COMPLETED
            answer = answer_build(inv, state=State.BUSINESS_REJECTED, business_status=exc.status,
                                  text=compact_json(exc.as_dict()))
            return _create(inv, answer, session=session, route=route, run=run, call=call,
                           journal={"outcome": "in_process", "error": exc.code})
        inv.duration_ms = int((time.monotonic() - started) * 1000)
        inv.journal_state = Journal.COMPLETED
        answer = answer_build(inv, state=State.EXECUTED, text=compact_json(output))
        return _create(inv, answer, session=session, route=route, run=run, call=call,
                       journal={"outcome": "in_process"})
    reasons = approval_reasons(target=target, arguments=call.arguments)
    inv.frozen_arguments = arguments_freeze(call.arguments)
    if reasons:
        return _create(inv, None, session=session, route=route, run=run, call=call, reasons=reasons, target=target,
                       bound=bound)
    return _create(inv, None, session=session, route=route, run=run, call=call, target=target, dispatch=True)


class _MadeMeanwhile(Exception):
    """An identical call's row appeared while this one waited for the run's lock."""


def _refusal_cap(limit: int) -> int:
    """How many calls a run may have refused before dispatch for good (their arguments did not fit
    the tool's schema): they do not spend ``max_tool_calls``, but a model repeating bad calls
    stops here, so a run keeps at most ``limit`` + this many rows."""
    return max(10, 2 * limit)


def _run_limit_refusal(inv: Invocation, *, limit: int, refusal: bool = False) -> dict[str, Any] | None:
    """The answer to a new call once its run has made the route's ``max_tool_calls`` calls, or, for
    a call refused before dispatch (``refusal``), once the run has had _refusal_cap such refusals;
    None while there is room. A call settled as ``rejected_before_dispatch`` before any attempt to
    send it (its arguments, the tool changed, the project paused) never reached the business system
    and never will, so it does not count as made; one the dispatcher tried to send (the business
    system could not be reached) does, or a run could knock on a system that is down without end;
    so does an unsettled one (a rate limit's, retried later). Nothing is stored for a refused call,
    so the same call is refused the same way. _create asks under the run's lock, so racing calls
    cannot all take the last place."""
    calls = Invocation.objects.filter(run_id=inv.run_id)
    never_sent = models.Q(state=State.REJECTED_BEFORE_DISPATCH, settled_at__isnull=False, dispatched_at__isnull=True)
    if calls.exclude(never_sent).count() >= limit:
        said = ("The route allows no tool calls in a run (max_tool_calls is 0)." if limit == 0 else
                f"This run has made its {limit} tool call{'' if limit == 1 else 's'}, the most the route allows "
                "in one run (max_tool_calls).")
        then = "Answer with what you have, or complete this run and go on in a new turn."
    elif refusal and calls.filter(never_sent).count() >= (cap := _refusal_cap(limit)):
        said = f"This run has had {cap} calls refused before they were sent, the most one run may have."
        then = ("This call's arguments do not fit the tool's input_schema either: call again only with arguments "
                "that do, or answer with what you have.")
    else:
        return None
    return answer_build(inv, state=State.REJECTED_BEFORE_DISPATCH, text=f"{said} {NOT_SENT_TEXT} {then}")


def _create(inv: Invocation, answer: dict[str, Any] | None, *, session: AgentSession, route: Route,
            run: Run, call: InvokeCall, journal: dict[str, Any] | None = None,
            reasons: list[str] | None = None, target: Target | None = None, dispatch: bool = False,
            bound: Bound | None = None) -> dict[str, Any]:
    """Insert the new invocation in its first state, under its run's lock. A racing identical call
    that inserted first wins: this one then answers as a replay of it, even when the winner took
    the run's last place (it was refused: "nothing was sent", of a write that was). A run
    completed meanwhile takes no new call (409 run_not_active: the call was stored and sent on a
    completed run)."""
    try:
        with transaction.atomic():
            run_state = (type(inv.run).objects.select_for_update().filter(pk=inv.run_id)
                         .values_list("state", flat=True).first())
            if Invocation.objects.filter(idempotency_key=inv.idempotency_key).exists():
                raise _MadeMeanwhile()
            if run_state != type(inv.run).State.CONTEXT_READY:
                raise RunNotActive()
            refusal = answer is not None and answer["state"] == State.REJECTED_BEFORE_DISPATCH
            if (refused := _run_limit_refusal(inv, limit=route.max_tool_calls, refusal=refusal)) is not None:
                return refused
            if answer is not None:
                inv.state, inv.result, inv.business_status = answer["state"], answer, None
            inv.save(force_insert=True)
            if answer is not None and result_is_stable(answer):
                # Settled as it is made: at its creation time, which the insert sets (set before it,
                # a call read "settled 07:08:55.864 · asked 07:08:55.865").
                inv.settled_at = inv.created_at
                Invocation.objects.filter(pk=inv.pk).update(settled_at=inv.created_at)
            if journal is not None:
                InvocationJournalEntry.objects.create(invocation=inv, state=Journal.COMPLETED, detail=journal)
            if reasons is not None and target is not None:
                answer = _approval_open(inv, target, reasons=reasons, bound=bound)
            elif dispatch and target is not None:
                answer = _queue(inv, target)
    except (IntegrityError, _MadeMeanwhile):
        existing = Invocation.objects.select_related("route").filter(idempotency_key=inv.idempotency_key).first()
        if existing is None:
            raise
        return _existing(existing, session=session, route=route, call=call,
                         arguments_sha256=inv.arguments_sha256)
    assert answer is not None
    if answer["state"] == State.IN_PROGRESS:
        return invocation_wait(inv=inv)
    return answer


def _approval_open(inv: Invocation, target: Target, *, reasons: list[str], bound: Bound | None) -> dict[str, Any]:
    """The call (its row locked, nothing sent) now waits for an approver: its Approval, its answer
    ``awaiting_approval``, and, for a write of a task, its share of the task's budget."""
    approval = Approval.objects.create(
        invocation=inv, project_id=inv.project_id, tool_name=inv.tool_name,
        arguments_sha256=inv.arguments_sha256, risk=inv.risk,
        prompt=str(target.compiled.get("approval_prompt") or "")[:200], reasons=reasons,
        expires_at=timezone.now() + timedelta(seconds=settings.TOOL_APPROVAL_TTL_SECONDS))
    answer = invocation_settle(inv, answer_build(inv, state=State.AWAITING_APPROVAL,
                                                 text=_awaiting_text(approval, inv.invocation_id),
                                                 approval_id=str(approval.pk)))
    if bound is not None:  # a write waiting for approval holds its share of the budget
        charge_reserve(bound=bound, invocation_pk=inv.pk, tool_name=inv.tool_name, write=not inv.readonly)
    return answer


def _existing(inv: Invocation, *, session: AgentSession, route: Route, call: InvokeCall,
              arguments_sha256: str) -> dict[str, Any]:
    # The contract's conflicts; the same call under another run of the session replays.
    if (inv.route_id != route.pk or inv.tool_name != call.tool or inv.arguments_sha256 != arguments_sha256
            or inv.capability_revision != call.capability_revision):
        raise InvocationConflict()
    if result_is_stable(inv.result):
        # As resume and the receipt: the replay of a call whose tool left the caller's surface is
        # 404 tool_not_found (it was the one path that skipped the check; hostile-input audit).
        invocation_tool_check(session=session, inv=inv)
    return invocation_advance(inv=inv, session=session)


def invocation_advance(*, inv: Invocation, session: AgentSession, wait: bool = True) -> dict[str, Any]:
    """The answer for an existing call (a repeated invoke, or resume). A stable result is replayed
    as stored, even while execution is paused; an unstable one is refused while it is paused, or
    while the task rules of the session no longer let it run (invocation_task_recheck), and is
    otherwise re-evaluated under the row lock: a pending approval stays
    pending (or expires into ``denied``); an approved call is consumed and dispatched once; a call
    whose dispatch started with no answer past its deadline becomes ``reconciliation_required``;
    a call proven not sent and refused only for now (rate limit, pause) is tried again."""
    if result_is_stable(inv.result):
        return dict(inv.result or {})
    execution_pause_check(route=inv.route)
    try:
        invocation_task_recheck(session=session, inv=inv)
    except (TaskCancelled, TaskExpired, TaskScopeBlocked) as ended:
        if (settled := _task_ended_settle(inv.pk, ended)) is not None:
            return settled
        raise
    try:
        target = _current_target(inv=inv, session=session)
    except (ToolNotFound, CapabilityChanged):
        _approved_unrunnable(inv)
        raise
    with transaction.atomic():
        inv = invocation_lock(inv.pk)
        answer = _reevaluate(inv, target)
    if wait and answer.get("state") == State.IN_PROGRESS:
        return invocation_wait(inv=inv)
    return answer


def _task_ended_settle(pk: Any, ended: ApiError) -> dict[str, Any] | None:
    """A call refused only for now (its task paused as the dispatcher took it, a rate limit) whose
    task has since ended — cancelled, expired, or blocked — can never run: settled
    ``rejected_before_dispatch`` for good, its frozen arguments dropped. It read as retryable and
    kept them (encrypted) for ever, and each call of it was a 409. Its stable answer, or None for a
    call in another state (a pending approval may still be denied; the error answers it). The agent's
    coming back to it settles it, or the watchdog's next round (invocation_watchdog)."""
    with transaction.atomic():
        inv = invocation_lock(pk)
        if inv.state != State.REJECTED_BEFORE_DISPATCH or inv.journal_state != Journal.ABSENT:
            return None
        if result_is_stable(inv.result):
            return dict(inv.result or {})
        return invocation_settle(inv, answer_build(
            inv, state=State.REJECTED_BEFORE_DISPATCH, text=f"{ended.code}: {ended.message} {NOT_SENT_TEXT}"))


def _approved_unrunnable(inv: Invocation) -> None:
    """An approved call whose tool changed or left the caller's surface can never run: its approval
    is for the tool as it was frozen. Settled as ``rejected_before_dispatch`` (nothing was sent), as
    the dispatcher settles such a call (``delivery._prepare``), so that it stops holding its task's write
    reservation and stops reading as awaiting approval for good; the resume that found it still
    answers the refusal. A pending one is left as it is: it may still be denied, or its tool come
    back."""
    with transaction.atomic():
        inv = invocation_lock(inv.pk)
        if inv.state != State.AWAITING_APPROVAL:
            return
        approval = Approval.objects.select_for_update().filter(invocation=inv).first()
        if approval is None or approval.status != Approval.Status.APPROVED or approval.used_at is not None:
            return
        invocation_settle(inv, answer_build(
            inv, state=State.REJECTED_BEFORE_DISPATCH,
            text=f"The tool changed or is no longer available since this call was approved. "
                 f"{NOT_SENT_TEXT} Discover the tools again and make a new call if it is still needed."))


def _reevaluate(inv: Invocation, target: Target) -> dict[str, Any]:
    now = timezone.now()
    result: dict[str, Any] = dict(inv.result or {})
    if result_is_stable(result):
        return result
    if inv.state == State.AWAITING_APPROVAL:
        approval = Approval.objects.select_for_update().get(invocation=inv)
        if approval.status == Approval.Status.PENDING and approval.expires_at <= now:
            approval.status = Approval.Status.EXPIRED
            approval.save(update_fields=["status", "updated_at"])
        if approval.status == Approval.Status.PENDING:
            return result
        if approval.status != Approval.Status.APPROVED or approval.used_at is not None:
            return invocation_settle_denied(
                inv, expired=approval.status == Approval.Status.EXPIRED,
                comment=approval.comment if approval.status == Approval.Status.DENIED else "")
        if arguments_thaw(inv) is None:
            return invocation_settle_arguments_lost(inv)
        approval.used_at = now
        approval.save(update_fields=["used_at", "updated_at"])
        return _queue(inv, target)
    if inv.state == State.REJECTED_BEFORE_DISPATCH and inv.journal_state == Journal.ABSENT:
        arguments = arguments_thaw(inv)
        if arguments is None:
            return invocation_settle_arguments_lost(inv)
        # Refused only for now (rate limit, pause), it is tried again as a new call would be: a call
        # the route has since made need approval waits for one (an approved call has had its own).
        if not Approval.objects.filter(invocation=inv).exists():
            reasons = approval_reasons(target=target, arguments=arguments)
            if reasons:
                return _approval_open(inv, target, reasons=reasons, bound=bound_for_run(run_id=inv.run_id))
        return _queue(inv, target)
    if inv.state == State.IN_PROGRESS:
        return _in_progress_looked_after(inv, now=now)
    return result


def _in_progress_looked_after(inv: Invocation, *, now: datetime) -> dict[str, Any]:
    """A call in progress that a resume or the watchdog comes back to (its row locked): claimed
    with no answer past its dispatch deadline, it becomes uncertain; queued and unclaimed for
    TOOL_DISPATCH_REQUEUE_SECONDS, it goes to the dispatcher again (its message may have been lost
    with a broker restart), which claims it once. Its answer, as it stands after that."""
    if inv.journal_state == Journal.DISPATCHING and inv.dispatch_deadline and inv.dispatch_deadline <= now:
        return invocation_settle_uncertain(inv, reason="no answer was recorded before the dispatch deadline")
    if inv.journal_state == Journal.ABSENT:
        if arguments_thaw(inv) is None:
            return invocation_settle_arguments_lost(inv)
        if inv.updated_at <= now - timedelta(seconds=settings.TOOL_DISPATCH_REQUEUE_SECONDS):
            transition_save(inv, resends=inv.resends + 1)
            _send_after_commit(inv)
    return dict(inv.result or {})


def invocation_wait(*, inv: Invocation, seconds: float | None = None) -> dict[str, Any]:
    """Wait (bounded, TOOL_INVOCATION_WAIT_SECONDS) for a dispatched call to settle; its stored
    answer then, or ``in_progress`` as it stands. Woken by the dispatcher's Redis notice, with a
    poll of the row every half second in case a notice is lost."""
    deadline = time.monotonic() + (settings.TOOL_INVOCATION_WAIT_SECONDS if seconds is None else seconds)
    pubsub = None
    try:
        pubsub = redis_client().pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        pubsub.subscribe(settled_channel(inv.pk))
    except RedisError:
        pubsub = None
    try:
        while True:
            row = Invocation.objects.filter(pk=inv.pk).values_list("state", "result").first()
            if row is None:
                raise InvocationNotFound()
            state, result = row
            remaining = deadline - time.monotonic()
            if state != State.IN_PROGRESS or remaining <= 0:
                return dict(result or {})
            if pubsub is None:
                time.sleep(min(0.1, remaining))
                continue
            try:
                pubsub.get_message(timeout=min(0.5, remaining))
            except RedisError:
                pubsub = None
    finally:
        if pubsub is not None:
            with contextlib.suppress(RedisError):
                pubsub.close()


def invocation_get_for_session(*, session: AgentSession, invocation_id: str) -> Invocation:
    """This session's call ``invocation_id``; 404 ``invocation_not_found`` otherwise."""
    if not isinstance(invocation_id, str) or not re.fullmatch(r"[0-9a-f]{64}", invocation_id):
        raise InvocationNotFound()
    key = invocation_key(session_id=session.pk, invocation_id=invocation_id)
    inv = Invocation.objects.select_related("route", "approval").filter(idempotency_key=key).first()
    if inv is None:
        raise InvocationNotFound()
    return inv


def invocation_tool_check(*, session: AgentSession, inv: Invocation) -> None:
    """404 ``tool_not_found`` unless the call's tool is still on the caller's surface of its route."""
    if route_surface(route=inv.route, session=session).get(inv.tool_name) is None:
        raise ToolNotFound()


def invocation_resume(*, session: AgentSession, inv: Invocation) -> dict[str, Any]:
    """``POST .../resume``: the stored result, or an approved call executed once (the route was
    re-checked by the caller; the tool is re-checked here, for a stable result too)."""
    if result_is_stable(inv.result):
        invocation_tool_check(session=session, inv=inv)
    return invocation_advance(inv=inv, session=session)


WATCHDOG_BATCH = 200
_WATCHDOG_OUTCOMES: dict[str, str] = {State.IN_PROGRESS: "requeued", State.RECONCILIATION_REQUIRED: "uncertain"}


def invocation_watchdog(*, now: datetime | None = None) -> dict[str, int]:
    """Beat (every TOOL_WATCHDOG_INTERVAL_SECONDS): calls that no agent comes back for are not left
    holding their task's permits. A call queued but not claimed for TOOL_DISPATCH_REQUEUE_SECONDS
    (its message lost with a broker restart, or never sent by a process that died after commit)
    goes to the dispatcher again, which claims it once; a claimed call with no answer past its
    dispatch deadline becomes ``reconciliation_required``, as a resume would make it; a queued call
    whose frozen arguments cannot be read is settled; so is a call whose approval expired with
    nobody deciding (``denied``, as a resume would make it: it gives back its task's write
    reservation and drops its frozen arguments); so is a call waiting for its approval (pending, or
    approved and not resumed) whose agent session ended for good, which nobody can ever resume
    (approvals.approval_session_ended); and so is a call refused only for now (a pause)
    whose task has since ended (cancelled, blocked, expired), as the agent's coming back to it
    would (_task_ended_settle: its frozen arguments were kept until then, for ever if it never came
    back). Rows another transaction holds are left for the next round."""
    now = now or timezone.now()
    counts = {"requeued": 0, "uncertain": 0, "settled": 0}
    lapsed = Invocation.objects.filter(state=State.AWAITING_APPROVAL, approval__status=Approval.Status.PENDING,
                                       approval__expires_at__lte=now)
    counts["settled"] += len(_each_locked(lapsed, lambda inv: approval_lapse(inv, now=now)))
    stranded = Invocation.objects.filter(session_ended_for_good_q(now, "session__"),
                                         state=State.AWAITING_APPROVAL).filter(
        models.Q(approval__status=Approval.Status.PENDING, approval__expires_at__gt=now)
        | models.Q(approval__status=Approval.Status.APPROVED, approval__used_at__isnull=True))
    counts["settled"] += sum(_each_locked(stranded, lambda inv: approval_session_ended(inv, now=now)))
    refused = Invocation.objects.filter(state=State.REJECTED_BEFORE_DISPATCH, journal_state=Journal.ABSENT,
                                        result__auto_retry_allowed=True, run_id__in=ended_task_runs(now=now))
    for pk, run_id in list(refused.order_by("updated_at").values_list("pk", "run_id")[:WATCHDOG_BATCH]):
        ended = run_task_ended(run_id=run_id)
        if ended is None:
            continue
        with transaction.atomic():
            if not refused.select_for_update(of=("self",), skip_locked=True).filter(pk=pk).exists():
                continue  # held by another transaction (left for the next round), or settled meanwhile
            if _task_ended_settle(pk, ended) is not None:
                counts["settled"] += 1
    queued = Invocation.objects.filter(
        state=State.IN_PROGRESS, journal_state=Journal.ABSENT,
        updated_at__lte=now - timedelta(seconds=settings.TOOL_DISPATCH_REQUEUE_SECONDS))
    overdue = Invocation.objects.filter(state=State.IN_PROGRESS, journal_state=Journal.DISPATCHING,
                                        dispatch_deadline__lte=now)
    for rows in (queued, overdue):
        # As a resume would: still in progress, sent to the dispatcher again; else settled (its arguments lost).
        for state in _each_locked(rows, lambda inv: str(_in_progress_looked_after(inv, now=now).get("state"))):
            counts[_WATCHDOG_OUTCOMES.get(state, "settled")] += 1
    return counts


_T = TypeVar("_T")


def _each_locked(rows: models.QuerySet[Invocation], act: Callable[[Invocation], _T]) -> list[_T]:
    """`act` on up to WATCHDOG_BATCH of `rows`, oldest first, each row locked in a transaction of
    its own (and read again: one another transaction holds, or that left `rows` meanwhile, is left
    for the next round); what `act` returned for each."""
    done: list[_T] = []
    for pk in list(rows.order_by("updated_at").values_list("pk", flat=True)[:WATCHDOG_BATCH]):
        with transaction.atomic():
            inv = rows.select_for_update(of=("self",), skip_locked=True).select_related("route").filter(pk=pk).first()
            if inv is not None:
                done.append(act(inv))
    return done


_DISPATCH_STATES: dict[str, str] = {Journal.ABSENT: "not_dispatched", Journal.RESPONSE_RECORDED: "attempted",
                    Journal.COMPLETED: "attempted", Journal.DISPATCHING: "unknown", Journal.UNCERTAIN: "unknown"}
_RESULT_KEYS = frozenset({"schema_version", "invocation_id", "route", "tool", "state", "ok", "auto_retry_allowed",
                          "text", "business_status", "approval_id", "retry_after_ms", "rate_limit"})


def _result_valid(inv: Invocation, result: Any) -> bool:
    return (isinstance(result, dict) and set(result) <= _RESULT_KEYS and result.get("state") in State.values
            and result.get("invocation_id") == inv.invocation_id and isinstance(result.get("ok"), bool)
            and isinstance(result.get("text"), str) and result.get("ok") == (result.get("state") == State.EXECUTED))


def invocation_receipt(*, inv: Invocation) -> dict[str, Any]:
    """``bailing.agent-invocation-receipt.v1``: what the hub recorded of one call. Read-only: it
    changes nothing, dispatches nothing and consumes no approval. A stored result that does not
    hold together is ``null``, never a made-up success; a journal whose last entry disagrees with
    the call's state is ``evidence_degraded``."""
    # A missing reverse one-to-one raises RelatedObjectDoesNotExist, an AttributeError.
    approval: Approval | None = getattr(inv, "approval", None)
    last = InvocationJournalEntry.objects.filter(invocation=inv).order_by("-created_at").values_list(
        "state", flat=True).first()
    journal_state: str = inv.journal_state
    if (last or Journal.ABSENT) != inv.journal_state:
        journal_state = "evidence_degraded"
    elif journal_state not in Journal.values:
        journal_state = "unknown"
    result = inv.result if _result_valid(inv, inv.result) else None
    return {
        "schema_version": RECEIPT_SCHEMA,
        # Both say what reading this receipt does (§2 fixes them), not what the call did: that is
        # dispatch_state, journal_state and result.
        "read_only": True,
        "business_operation_performed": False,
        "invocation_id": inv.invocation_id,
        "agent_run_id": str(inv.run_id),
        "route": inv.route.key,
        "tool": inv.tool_name,
        "observed_at": timezone.now().isoformat(),
        "result": result,
        "result_source": "job" if result is not None else "none",
        "dispatch_state": _DISPATCH_STATES.get(inv.journal_state, "unknown"),
        "approval": {"status": approval_status(approval), "approval_id": str(approval.pk) if approval else None},
        "journal_state": journal_state,
    }


def inspection_capabilities() -> dict[str, Any]:
    return {"schema_version": INSPECTION_SCHEMA, "receipt_schema": RECEIPT_SCHEMA, "read_only": True}
