"""The worker's side of a governed tool call: the dispatcher task's body (``invocation_dispatch``)
claims a call that the state machine (apps.tools.invocations) queued and proved not sent, prepares
its signed request (or settles why it is not sent), hands it to apps.tools.dispatch — the only code
that sends the HTTP — and records the business system's answer as the call's settled state."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.agent_auth.errors import AgentClientDisabled, AudienceNotAllowed, InvalidRoute, RouteUnavailable
from apps.agent_auth.selectors import session_live, session_route_get
from apps.tasks.errors import TaskPaused
from apps.tasks.metering import charge_settle, dispatch_task_refusal

from . import dispatch
from .call_checks import execution_fingerprint
from .crypto import SecretUnreadable
from .invocation_transitions import (
    NO_NEW_WRITE,
    NOT_SENT_TEXT,
    TEXT_MAX_CHARS,
    Journal,
    State,
    answer_build,
    arguments_thaw,
    invocation_settle,
    invocation_settle_arguments_lost,
    invocation_settle_uncertain,
    transition_save,
)
from .models import Approval, Invocation, InvocationJournalEntry, Tool
from .selectors import provider_secret
from .surface import route_approval_forced, route_surface

logger = logging.getLogger("bailinghub.tools")


def invocation_dispatch(*, invocation_pk: str) -> str:
    """The dispatcher task's body: claim a call proven not sent (journal ``dispatching``,
    committed), send it once, record the answer. Run twice, or after a worker died mid-send, it
    never sends again: a claimed call is left to the send in flight until its deadline, and past
    it, with no answer, becomes ``uncertain`` (a second message — the watchdog's, or one
    redelivered — must not settle a call another worker is still sending). An HTTP answer that
    reaches a send the watchdog gave up on is kept as evidence beside that verdict."""
    with transaction.atomic():
        inv = Invocation.objects.select_for_update(of=("self",)).select_related(
            "route", "provider", "project", "session__client", "session__authorization",
        ).filter(pk=invocation_pk).first()
        if inv is None or inv.state != State.IN_PROGRESS:
            return "settled"
        if inv.journal_state == Journal.DISPATCHING:
            if inv.dispatch_deadline is not None and inv.dispatch_deadline > timezone.now():
                return "in_flight"
            invocation_settle_uncertain(inv, reason="the dispatcher stopped while the call was being sent")
            return "uncertain"
        if inv.journal_state != Journal.ABSENT:
            return "settled"
        prepared = _prepare(inv)
        if isinstance(prepared, str):
            return prepared
        request, timeout_ms = prepared
        now = timezone.now()
        transition_save(
            inv, journal=Journal.DISPATCHING, detail={"method": request.method, "target": request.target[:500]},
            dispatched_at=now,
            dispatch_deadline=now + timedelta(milliseconds=timeout_ms, seconds=settings.TOOL_DISPATCH_GRACE_SECONDS))
    outcome = dispatch.request_send(request, timeout_ms=timeout_ms, max_bytes=settings.TOOL_RESPONSE_MAX_BYTES)
    with transaction.atomic():
        found = Invocation.objects.select_for_update(of=("self",)).select_related("route").filter(
            pk=invocation_pk).first()
        if found is None:
            return "deleted"
        inv = found
        if inv.journal_state == Journal.UNCERTAIN and outcome.kind == "response" and outcome.status is not None:
            logger.warning("Invocation %s: the business system answered (HTTP %s) after the call was marked "
                           "uncertain; the answer is kept in its journal.", inv.pk, outcome.status)
            return _late_answer_kept(inv, outcome)
        if inv.journal_state != Journal.DISPATCHING:
            logger.warning("Invocation %s: an outcome (%s) came after it was marked %s; kept in the log only.",
                           inv.pk, outcome.reason or outcome.kind, inv.journal_state)
            return "late"
        return _record(inv, outcome)


def _prepare(inv: Invocation) -> tuple[dispatch.OutboundRequest, int] | str:
    """The signed request of a claimed call, or why it is not sent (its state is then settled)."""
    if inv.project.tool_execution_paused:
        invocation_settle(inv, answer_build(
            inv, state=State.REJECTED_BEFORE_DISPATCH, auto_retry_allowed=True,
            text=f"Tool execution is paused for this project. {NOT_SENT_TEXT} Resume this same invocation later."))
        return "paused"
    refusal = dispatch_task_refusal(invocation_pk=inv.pk)
    if refusal is not None:
        paused = isinstance(refusal, TaskPaused)
        invocation_settle(inv, answer_build(
            inv, state=State.REJECTED_BEFORE_DISPATCH, auto_retry_allowed=paused,
            text=f"{refusal.code}: {refusal.message} {NOT_SENT_TEXT}"
                 + (" Resume this same invocation once the task is resumed." if paused else "")))
        return "task_refused"
    arguments = arguments_thaw(inv)
    if arguments is None:
        invocation_settle_arguments_lost(inv)
        return "frozen_lost"
    provider = inv.provider
    tool = Tool.objects.filter(provider=provider, name=inv.tool_name).first() if provider else None
    if (provider is None or tool is None or not provider.enabled or not tool.enabled
            or execution_fingerprint(route_key=inv.route.key, provider=provider, compiled=tool.compiled)
            != inv.execution_fingerprint):
        invocation_settle(inv, answer_build(
            inv, state=State.REJECTED_BEFORE_DISPATCH,
            text=f"The tool changed or was switched off since this call was made. {NOT_SENT_TEXT}"))
        return "tool_changed"
    withdrawn = _access_withdrawn(inv)
    if withdrawn:
        invocation_settle(inv, answer_build(inv, state=State.REJECTED_BEFORE_DISPATCH, text=(
            f"{withdrawn} {NOT_SENT_TEXT} Make a new call if it is still needed and allowed.")))
        return "access_withdrawn"
    if route_approval_forced(route=inv.route, name=inv.tool_name, readonly=inv.readonly) and not (
            Approval.objects.filter(invocation=inv).exists()):
        # Refused for now, as a paused one is: the agent's resume re-evaluates it as a new call, and
        # the route's rule then opens its approval (invocations._reevaluate).
        invocation_settle(inv, answer_build(
            inv, state=State.REJECTED_BEFORE_DISPATCH, auto_retry_allowed=True,
            text=f"Since this call was made, its route asks an approver to decide calls of this tool. {NOT_SENT_TEXT} "
                 "Resume this same invocation to ask for the approval."))
        return "approval_required"
    try:
        request = dispatch.request_build(
            base_url=provider.base_url, compiled=tool.compiled, arguments=arguments,
            secret=provider_secret(provider=provider), job_id=str(inv.pk), idempotency_key=inv.idempotency_key,
            on_behalf_of=inv.on_behalf_of, timestamp=int(time.time()))
    except dispatch.ArgumentUnplaceable as exc:
        invocation_settle(inv, answer_build(
            inv, state=State.REJECTED_BEFORE_DISPATCH,
            text=f"The arguments cannot be sent: {exc.field}: {exc.message} {NOT_SENT_TEXT}"))
        return "unplaceable"
    except SecretUnreadable:
        invocation_settle(inv, answer_build(
            inv, state=State.REJECTED_BEFORE_DISPATCH,
            text=f"The provider's signing secret cannot be read by this hub. {NOT_SENT_TEXT}"))
        return "secret_unreadable"
    return request, int(tool.compiled.get("timeout_ms") or 30000)


def _access_withdrawn(inv: Invocation) -> str:
    """Why the agent session that made ``inv`` may no longer make it, or "": the rules of the agent's
    next request (the session and its client, the route as that session may use it, the tool on its
    surface), read again by the worker. The request that queued a call checked them; a call waits in
    the queue for a while (a busy worker, a message the watchdog sends again after a broker outage),
    and an operator's withdrawal in between is the agent's answer, not the business system's."""
    session = inv.session
    if not session.client.enabled or not session_live(session=session, now=timezone.now()):
        return "Since this call was made, the agent session that made it was revoked or ended, or its client disabled."
    try:
        route = session_route_get(session=session, key=inv.route.key, require_runtime=True)
    except (InvalidRoute, RouteUnavailable, AudienceNotAllowed, AgentClientDisabled) as exc:
        return f"Since this call was made, its route is no longer available to its agent session ({exc.code})."
    if not route.tools_direct_enabled:  # its surface is then empty: the tool was not what went
        return "Since this call was made, its route's direct tools were switched off (agent_direct_disabled)."
    if route_surface(route=route, session=session).get(inv.tool_name) is None:
        return "Since this call was made, its tool was taken off its route for its agent session."
    return ""


def _response_text(outcome: dispatch.Outcome) -> str:
    text = outcome.body.decode("utf-8", errors="replace")
    if not 200 <= (outcome.status or 0) < 300 and _is_html(outcome.content_type):
        # An error page (a proxy's 502, a framework's 404) went to the model as kilobytes of markup.
        # Its text first, then cut: a page cut inside its styles lost its words and the cut's notice.
        text = f"[an HTML page, shown as its text] {html_page_text(text)}"
    if outcome.truncated:
        text = text[: TEXT_MAX_CHARS - 120] + f"… [the answer was cut: {outcome.reason}]"
    return text


def _is_html(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml")


class _PageText(HTMLParser):
    """The words of an HTML page as a reader sees them: no markup, scripts or styles."""

    _HIDDEN = frozenset({"script", "style", "template", "noscript", "head"})
    _KEPT_IN_HEAD = frozenset({"title"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":  # a head left open (its end tag is optional) ends here
            self.hidden = [name for name in self.hidden if name not in ("head", *self._KEPT_IN_HEAD)]
        if tag in self._HIDDEN:
            self.hidden.append(tag)
        elif tag in self._KEPT_IN_HEAD and self.hidden == ["head"]:
            self.hidden.append(tag)  # a page's title is worth reading: marked, then kept below

    def handle_endtag(self, tag: str) -> None:
        if self.hidden and self.hidden[-1] == tag:
            self.hidden.pop()

    def handle_data(self, data: str) -> None:
        if not self.hidden or self.hidden[-1] in self._KEPT_IN_HEAD:
            self.parts.append(data)


def html_page_text(page: str) -> str:
    """`page`'s text, its white space runs made one space."""
    parser = _PageText()
    try:
        parser.feed(page)
        parser.close()
    except Exception:  # html.parser is lenient; anything it still trips on leaves the page as it was
        return page
    return " ".join(" ".join(parser.parts).split())


def _late_answer_kept(inv: Invocation, outcome: dispatch.Outcome) -> str:
    """An HTTP answer to a send that outlived its dispatch deadline (a worker frozen or starved
    past the grace), after the watchdog settled the call as uncertain. The call's result stays the
    verdict its agent was given (§2 replays a stable result as-is; a person checks the business
    system): the answer is kept as evidence beside it, a journal entry the invocation's page shows
    (``uncertain`` still, so the receipt's journal agrees). Its task counts the write as used and
    frees the permit (§5: a trusted HTTP answer came): held as uncertain, one slow send held the
    task's permit for good, and with one permit every later call of it was TASK_DISPATCH_UNCERTAIN."""
    InvocationJournalEntry.objects.create(invocation=inv, state=Journal.UNCERTAIN, detail={"late_answer": {
        "status": outcome.status, "bytes": len(outcome.body), "truncated": outcome.truncated,
        "elapsed_ms": outcome.elapsed_ms}})
    charge_settle(invocation_pk=inv.pk, outcome="trusted", late=True)
    return "late_answer_kept"


def _record(inv: Invocation, outcome: dispatch.Outcome) -> str:
    """The call's settled state from what the send brought back."""
    now = timezone.now()
    timing: dict[str, Any] = {"responded_at": now, "duration_ms": outcome.elapsed_ms}
    if outcome.kind == "not_sent":
        invocation_settle(
            inv, answer_build(inv, state=State.REJECTED_BEFORE_DISPATCH,
                              text=f"The business system could not be reached ({outcome.reason}). {NOT_SENT_TEXT}"),
            journal=Journal.COMPLETED, detail={"outcome": "not_sent", "reason": outcome.reason}, **timing)
        return "not_sent"
    if outcome.kind != "response" or outcome.status is None:
        invocation_settle_uncertain(inv, reason=outcome.reason or "no answer",
                                    detail={"elapsed_ms": outcome.elapsed_ms})
        return "uncertain"
    status = outcome.status
    # The answer is recorded and the call completed in one transaction: both journal entries,
    # one row update.
    InvocationJournalEntry.objects.create(
        invocation=inv, state=Journal.RESPONSE_RECORDED,
        detail={"status": status, "bytes": len(outcome.body), "truncated": outcome.truncated,
                "reason": outcome.reason, "elapsed_ms": outcome.elapsed_ms})
    text = _response_text(outcome)
    task_outcome = None
    if 200 <= status < 300:
        answer = answer_build(inv, state=State.EXECUTED, text=text, business_status=status)
    elif status >= 500 and not inv.readonly:
        # As a redirect's below: the agent reconciles, and the task counts the write as used (an
        # HTTP answer came: §5's trusted answer) and frees its permit. Held as uncertain, one 5xx
        # held the permit for good: with one permit, every later call of the task, reads too,
        # was TASK_DISPATCH_UNCERTAIN.
        answer = answer_build(inv, state=State.RECONCILIATION_REQUIRED, business_status=status,
                              text=f"The business system failed (HTTP {status}) and may or may not have applied the "
                                   f"change. {NO_NEW_WRITE}\n\n{text}")
        task_outcome = "trusted"
    elif 300 <= status < 400:
        redirect = f"The business system answered with a redirect (HTTP {status}), which is not followed"
        if inv.readonly:
            answer = answer_build(inv, state=State.BUSINESS_REJECTED, business_status=status, text=f"{redirect}.")
        else:
            # A 303 after a POST is how a form says "done, look here": the write may have been applied,
            # so the agent is told to reconcile, not that nothing happened. Its task counts the write
            # as used (an HTTP answer came: §5's trusted answer), and its permit is free again.
            answer = answer_build(inv, state=State.RECONCILIATION_REQUIRED, business_status=status,
                                  text=f"{redirect}; it may or may not have applied the change. {NO_NEW_WRITE}")
            task_outcome = "trusted"
    else:
        answer = answer_build(inv, state=State.BUSINESS_REJECTED, business_status=status, text=text)
    invocation_settle(inv, answer, journal=Journal.COMPLETED, detail={"state": answer["state"]},
                      task_outcome=task_outcome, **timing)
    return str(answer["state"])
