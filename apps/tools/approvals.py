"""Approvals of governed tool calls: an approval's status as the agent and the builder API read it,
the one decision service (``approval_decide``, which the admin and the builder API call), and a
denied or expired approval settling its call as ``denied``. Deciding sends nothing: an approved call
runs when its agent resumes it (apps.tools.invocations), and a pending one that expires with nobody
deciding is settled by the watchdog (``approval_lapse``), as is a call whose agent session ended for
good before it was resumed (``approval_session_ended``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import SessionEnd, session_end_for_good
from apps.core.logging import redact
from apps.core.validators import BIDI_CONTROLS, uuid_parse
from apps.projects.models import Project

from .invocation_errors import ApprovalAlreadyDecided, ApprovalCallCannotRun, ApprovalExpired, ApprovalNotFound
from .invocation_transitions import NOT_SENT_TEXT, State, answer_build, invocation_lock, invocation_settle
from .models import Approval, Invocation

COMMENT_MAX_CHARS = 500  # of an approver's comment in a denied answer


def invocation_settle_denied(inv: Invocation, *, expired: bool, comment: str = "") -> dict[str, Any]:
    why = "expired before anyone decided" if expired else "was denied"
    said = f" The approver's comment: \u201c{_comment_text(comment)}\u201d" if comment.strip() else ""
    return invocation_settle(inv, answer_build(inv, state=State.DENIED,
                                               text=f"The approval for this call {why}.{said} {NOT_SENT_TEXT}"))


def _comment_text(comment: str) -> str:
    """The approver's reason as the agent reads it, so the model can explain or correct: one line,
    no direction controls (they would reorder the text around it), no credential, at most
    COMMENT_MAX_CHARS."""
    text = " ".join(redact("".join(char for char in comment if char not in BIDI_CONTROLS)).split())
    return text if len(text) <= COMMENT_MAX_CHARS else text[: COMMENT_MAX_CHARS - 1] + "\u2026"


def approval_lapse(inv: Invocation, *, now: datetime) -> None:
    """``inv`` (its row locked, so no decision is taken meanwhile) waits for an approval that
    expired undecided: the approval is marked expired and the call denied."""
    approval = Approval.objects.select_for_update().get(invocation=inv)
    if approval.status != Approval.Status.PENDING or approval.expires_at > now:
        return
    approval.status = Approval.Status.EXPIRED
    approval.save(update_fields=["status", "updated_at"])
    invocation_settle_denied(inv, expired=True)


# The approver of a pending approval that BailingHub denied because no resume of its call can ever run.
# Not a username Django lets anyone take (no spaces, no parentheses): no account reads as the hub.
HUB_APPROVER_LABEL = "BailingHub (automatic)"
HUB_DECISION_ID = "hub:session-ended"
_SESSION_ENDED = {SessionEnd.REVOKED: "was revoked", SessionEnd.EXPIRED: "expired",
                  SessionEnd.AUTHORIZATION_DELETED: "ended (its authorization record was deleted)"}


def approval_session_ended(inv: Invocation, *, now: datetime) -> bool:
    """``inv`` (its row locked, so no decision or resume is taken meanwhile) waits for its approval —
    pending, or approved and not yet resumed — while the agent session that made it ended for good
    (revoked, expired, its authorization deleted). Only that session can resume the call (its key
    holds the session's id; the agent signed in again gets ``invocation_not_found``), so it can never
    run: a pending approval is denied by BailingHub (no approver; its comment says why) and the call
    settled ``denied``; an approved one stays as it was decided and the call is settled
    ``rejected_before_dispatch``. Either way the call gives back its task's write reservation and
    drops its frozen arguments, and its text says why. False, changing nothing, when the call no
    longer waits or its session can still be used."""
    if inv.state != State.AWAITING_APPROVAL:
        return False
    end = session_end_for_good(session=AgentSession.objects.get(pk=inv.session_id), now=now)
    if end is None:
        return False
    approval = Approval.objects.select_for_update().get(invocation=inv)
    why = f"The agent session that made this call {_SESSION_ENDED[end]}"
    never = "Only that session can resume a call, so this one can never run"
    if approval.status == Approval.Status.PENDING and approval.expires_at > now:
        said = f"{why} before anyone decided its approval. {never}: BailingHub denied it."
        approval.status = Approval.Status.DENIED
        approval.decision_id = HUB_DECISION_ID
        approval.comment = said
        approval.approver = None
        approval.approver_label = HUB_APPROVER_LABEL
        approval.decided_at = now
        approval.save()
        invocation_settle(inv, answer_build(inv, state=State.DENIED, text=f"{said} {NOT_SENT_TEXT}"))
        return True
    if approval.status == Approval.Status.APPROVED and approval.used_at is None:
        invocation_settle(inv, answer_build(inv, state=State.REJECTED_BEFORE_DISPATCH, text=(
            f"{why} after the call was approved and before it was resumed. {never}. {NOT_SENT_TEXT}")))
        return True
    return False


def approval_status(approval: Approval | None, *, now: datetime | None = None) -> str:
    """none | pending | approved | denied — an expired approval reads as denied."""
    if approval is None:
        return "none"
    if approval.status == Approval.Status.PENDING:
        return "denied" if approval.expires_at <= (now or timezone.now()) else "pending"
    return "approved" if approval.status == Approval.Status.APPROVED else "denied"


def approval_decide(*, approval_id: uuid.UUID | str, projects: Iterable[Project] | models.QuerySet[Project],
                    decision_id: str, decision: str, comment: str = "", approver: Any = None) -> Approval:
    """Decide a pending approval once. ``decision_id`` is the idempotency key: the same decision
    again replays; any other decision on a decided approval is 409 ``approval_already_decided``;
    an expired one is 409 ``approval_expired`` (and reads as denied). Denying settles the call as
    ``denied``; approving sends nothing — the agent's resume executes the frozen arguments once.
    The comment is kept with known credential shapes removed (apps.core.logging.redact), as the
    agent is told it: kept whole, a password a person pasted was shown to every operator."""
    comment = redact(comment)
    expired = False
    with transaction.atomic():
        invocation_pk = (Approval.objects.filter(pk=approval_id, project__in=projects)
                         .values_list("invocation_id", flat=True).first() if _is_uuid(approval_id) else None)
        if invocation_pk is None:
            raise ApprovalNotFound()
        # The call first, then its approval: the order a resume takes them in (invocations._reevaluate), so
        # a decision and a resume of the same call wait for each other instead of deadlocking.
        inv = invocation_lock(invocation_pk)
        approval = Approval.objects.select_for_update().get(pk=approval_id)
        if approval.status in (Approval.Status.APPROVED, Approval.Status.DENIED):
            # Compared as kept: a comment decided before comments were kept redacted still replays.
            if (approval.decision_id == decision_id and approval.status == decision
                    and redact(approval.comment) == comment):
                return approval
            raise ApprovalAlreadyDecided(current_decision=approval.status)
        now = timezone.now()
        if (decision == Approval.Status.APPROVED and approval.status == Approval.Status.PENDING
                and approval.expires_at > now and inv.state == State.AWAITING_APPROVAL
                and session_end_for_good(session=AgentSession.objects.get(pk=inv.session_id), now=now)):
            # The console does not offer it; the builder API recorded it, and the watchdog then
            # settled the call unsent (review).
            raise ApprovalCallCannotRun()
        if approval.status == Approval.Status.EXPIRED or approval.expires_at <= now:
            approval.status = Approval.Status.EXPIRED
            approval.save(update_fields=["status", "updated_at"])
            if inv.state == State.AWAITING_APPROVAL:
                invocation_settle_denied(inv, expired=True)
            expired = True
        else:
            approval.status = decision
            approval.decision_id = decision_id
            approval.comment = comment
            approval.approver = approver if getattr(approver, "pk", None) else None
            approval.approver_label = str(getattr(approver, "username", "") or "")[:191]
            approval.decided_at = now
            approval.save()
            if decision == Approval.Status.DENIED and inv.state == State.AWAITING_APPROVAL:
                invocation_settle_denied(inv, expired=False, comment=comment)
    if expired:
        raise ApprovalExpired()
    return approval


def _is_uuid(value: Any) -> bool:
    return uuid_parse(value) is not None


def approval_answer(approval: Approval) -> dict[str, Any]:
    """The builder API's view of a decided approval."""
    return {
        "approval_id": str(approval.pk),
        "status": approval_status(approval),
        "decision_id": approval.decision_id or None,
        "comment": approval.comment,
        "approver": approval.approver_label or None,
        "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
        "expires_at": approval.expires_at.isoformat(),
        "tool": approval.tool_name,
    }
