"""Builder API bodies for tasks: exact fields, JSON types only."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.core.fields import (
    BoundedListField,
    ExactFieldsSerializer,
    JSONDateTimeField,
    JSONIntegerField,
    JSONStringField,
    JSONUUIDField,
)
from apps.core.validators import uuid_parse, validate_shown_name
from apps.tasks.models import Task
from apps.tasks.selectors import member_out, task_counters, task_policy
from apps.tasks.services import CONCURRENT_MAX, MEMBERS_MAX, TOOLS_PER_MEMBER_MAX, WRITE_CALLS_MAX

REQUEST_ID_MAX = 128


def exact_key(value: str) -> None:
    """An idempotency key is matched exactly: one with spaces at its edges (or of spaces only) is
    refused, not trimmed into another request's key."""
    if value != value.strip():
        raise serializers.ValidationError("Spaces at the start or end of a request_id are not allowed.")


class MemberIn(ExactFieldsSerializer):
    session_id = JSONStringField(max_length=64)

    def validate_session_id(self, value: str) -> str:
        """A UUID in either case is the session's id as the hub writes it (lower case); anything
        else is kept, to be refused as naming no session."""
        parsed = uuid_parse(value)
        return str(parsed) if parsed is not None else value

    # The contract's member shape names it; the session decides it, so a given one must be the session's.
    client_app_id = JSONStringField(max_length=128, required=False)
    workspace = JSONStringField(max_length=64)
    # Exactly as a turn sends it (no trimming): a trimmed id names another conversation.
    client_conversation_id = JSONStringField(max_length=255, trim_whitespace=False)
    allowed_tools = BoundedListField(child=JSONStringField(max_length=64), max_length=TOOLS_PER_MEMBER_MAX,
                                     required=False, default=list)


class PolicyIn(ExactFieldsSerializer):
    max_write_calls = JSONIntegerField(min_value=0, max_value=WRITE_CALLS_MAX, allow_null=True, required=False,
                                       default=None)
    max_concurrent = JSONIntegerField(min_value=1, max_value=CONCURRENT_MAX, required=False, default=1)
    expires_at = JSONDateTimeField(allow_null=True, required=False, default=None)


class TaskCreateIn(ExactFieldsSerializer):
    request_id = JSONStringField(max_length=REQUEST_ID_MAX, trim_whitespace=False, validators=[exact_key])
    project_id = JSONUUIDField()
    name = JSONStringField(max_length=200, required=False, allow_blank=True, default="",
                           validators=[validate_shown_name])
    members = BoundedListField(child=MemberIn(), min_length=1, max_length=MEMBERS_MAX)
    policy = PolicyIn(required=False)


class TaskControlIn(ExactFieldsSerializer):
    request_id = JSONStringField(max_length=REQUEST_ID_MAX, trim_whitespace=False, validators=[exact_key])
    expected_revision = JSONIntegerField(min_value=1, max_value=2**31 - 1)
    action = serializers.ChoiceField(choices=["pause", "resume", "cancel"])


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def task_out(task: Task) -> dict[str, Any]:
    return {"id": str(task.pk), "project_id": str(task.project_id), "name": task.name, "state": task.state,
            "revision": task.revision, "ledger_sequence": task.ledger_sequence, "scope_hash": task.scope_hash,
            "member_count": getattr(task, "member_total", None) or task.members.count(),
            "policy": task_policy(task), "counters": task_counters(task), "blocked_reason": task.blocked_reason,
            "request_id": task.request_id, "created_at": _iso(task.created_at), "updated_at": _iso(task.updated_at)}


def task_detail_out(task: Task, *, runs: list[dict[str, Any]]) -> dict[str, Any]:
    ledger = [{"sequence": entry.sequence, "kind": entry.kind, "actor": entry.actor, "revision": entry.revision,
               "state": entry.state, "at": _iso(entry.created_at)}
              for entry in task.ledger.order_by("-sequence")[:50]]
    return {**task_out(task), "members": [member_out(m) for m in task.members.all()], "runs": runs,
            "ledger": ledger}
