"""What every transition of a governed tool call is written with, shared by the state machine
(apps.tools.invocations), the approvals (apps.tools.approvals) and the worker's side of dispatch
(apps.tools.delivery): the answer an agent reads, the frozen arguments, the locked row's update with
its journal entry and its task's settlement, the notice to requests waiting for a call to settle,
and the two settlements that both the state machine and the worker reach (the arguments lost; no
trusted answer). Its public names are that interface between the tools modules (and the approvals
admin, which reads the frozen arguments); nothing outside apps.tools writes a call through them."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from apps.core.jsonbytes import compact_json
from apps.core.redis import redis_client
from apps.core.revisions import revision_of
from apps.tasks.metering import charge_settle

from .crypto import SecretUnreadable, secret_decrypt, secret_encrypt
from .models import Invocation, InvocationJournalEntry

logger = logging.getLogger("bailinghub.tools")

SCHEMA_VERSION = "bailing.agent-tool-invocation.v1"
TEXT_MAX_CHARS = 8192

State = Invocation.State
Journal = Invocation.JournalState
UNSTABLE_STATES = (State.IN_PROGRESS, State.AWAITING_APPROVAL)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

NOT_SENT_TEXT = "Nothing was sent to the business system."
NO_NEW_WRITE = ("Do not submit a new write and do not repeat it with another tool: a person must check the business "
                "system first. Resume this same invocation_id to read its recorded state.")


def _clean_text(text: str) -> str:
    text = _CONTROL.sub("\ufffd", text)
    return text if len(text) <= TEXT_MAX_CHARS else text[: TEXT_MAX_CHARS - 1] + "…"


def answer_build(inv: Invocation, *, state: str, text: str, business_status: int | None = None,
                 auto_retry_allowed: bool = False, **extra: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "invocation_id": inv.invocation_id,
        "route": inv.route.key,
        "tool": inv.tool_name,
        "state": state,
        "ok": state == State.EXECUTED,
        "auto_retry_allowed": auto_retry_allowed,
        "text": _clean_text(text),
    }
    if business_status is not None:
        answer["business_status"] = business_status
    answer.update({key: value for key, value in extra.items() if value is not None})
    return answer


def result_is_stable(result: Any) -> bool:
    """Replayed as-is: any state but ``in_progress`` and ``awaiting_approval``, and no automatic retry."""
    return (isinstance(result, dict) and result.get("state") not in UNSTABLE_STATES
            and result.get("auto_retry_allowed") is False)


def arguments_freeze(arguments: dict[str, Any]) -> str:
    return secret_encrypt(compact_json(arguments))


def arguments_thaw(inv: Invocation) -> dict[str, Any] | None:
    return frozen_arguments_read(inv.frozen_arguments, sha256=inv.arguments_sha256)


def frozen_arguments_read(frozen: str, *, sha256: str) -> dict[str, Any] | None:
    """The arguments `frozen` holds if they decrypt and hash to `sha256`, else None."""
    if not frozen:
        return None
    try:
        value = json.loads(secret_decrypt(frozen))
    except (SecretUnreadable, ValueError):
        return None
    if not isinstance(value, dict) or revision_of(value) != sha256:
        return None
    return value


def transition_save(inv: Invocation, *, journal: str | None = None, detail: dict[str, Any] | None = None,
                    **fields: Any) -> None:
    """One transition: the row's new fields and, for a dispatch step, its journal entry (the
    caller holds the row lock inside a transaction). A stable result drops the frozen arguments."""
    for name, value in fields.items():
        setattr(inv, name, value)
    if journal is not None:
        inv.journal_state = journal
    if result_is_stable(inv.result):
        inv.frozen_arguments = ""
        inv.settled_at = inv.settled_at or timezone.now()
    if inv.state != State.IN_PROGRESS and fields.get("state") is not None:
        pk = inv.pk
        transaction.on_commit(lambda: _notify_settled(pk))
    inv.save()
    if journal is not None:
        InvocationJournalEntry.objects.create(invocation=inv, state=journal, detail=detail or {})


# How a settled state settles what the call held of its task's budget (apps.tasks.metering).
_TASK_OUTCOME = {State.RECONCILIATION_REQUIRED: "uncertain", State.EXECUTED: "trusted",
                 State.BUSINESS_REJECTED: "trusted", State.REJECTED_BEFORE_DISPATCH: "released",
                 State.DENIED: "released"}


def invocation_settle(inv: Invocation, answer: dict[str, Any], *, journal: str | None = None,
                      detail: dict[str, Any] | None = None, task_outcome: str | None = None,
                      **fields: Any) -> dict[str, Any]:
    """`task_outcome` overrides what the state would settle of the task's budget."""
    transition_save(inv, journal=journal, detail=detail, state=answer["state"], result=answer,
                    business_status=answer.get("business_status"), **fields)
    outcome = task_outcome or _TASK_OUTCOME.get(answer["state"])
    if outcome is not None:  # in the same transaction as the answer
        charge_settle(invocation_pk=inv.pk, outcome=outcome)
    return answer


def invocation_lock(pk: Any) -> Invocation:
    return Invocation.objects.select_for_update(of=("self",)).select_related("route").get(pk=pk)


def invocation_settle_arguments_lost(inv: Invocation) -> dict[str, Any]:
    return invocation_settle(inv, answer_build(
        inv, state=State.REJECTED_BEFORE_DISPATCH,
        text=f"The exact arguments of this call are no longer available. {NOT_SENT_TEXT} "
             "Make a new call if it is still needed."))


def invocation_settle_uncertain(inv: Invocation, *, reason: str,
                                detail: dict[str, Any] | None = None) -> dict[str, Any]:
    answer = answer_build(inv, state=State.RECONCILIATION_REQUIRED,
                          text=f"The call may have reached the business system, but no trusted answer was recorded "
                               f"({reason}). It is not known whether it took effect. {NO_NEW_WRITE}")
    return invocation_settle(inv, answer, journal=Journal.UNCERTAIN, detail={"reason": reason, **(detail or {})})


def settled_channel(pk: Any) -> str:
    return f"bailinghub:tools:invocation-settled:{pk}"


def _notify_settled(pk: Any) -> None:
    # A wake-up for requests waiting on this call; they re-read the row, so a lost message only
    # costs them their fallback poll.
    try:
        redis_client().publish(settled_channel(pk), b"1")
    except RedisError:
        logger.warning("Invocation %s: could not notify waiting requests.", pk)
