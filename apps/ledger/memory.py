"""Memory assembly for a turn, as pure functions over messages already read from the ledger.

`memory_assemble` takes the conversation's messages *before* the turn (newest first) and the
route's memory settings and returns `memory.summary`, `memory.recent` and the `memory_refs`
numbers. Budgets:

- `recent_messages`: at most this many of the newest messages;
- `per_message_chars`: each message's content is cut to this many characters (`truncated: true`);
- `recent_budget_chars`: the characters of all recent contents together; the newest messages
  come first and the first one that no longer fits ends the window (older ones are left out);
- `summary_enabled` / `summary_max_chars`: the messages older than the window are digested into
  one line each (newest kept when it is too long) — a deterministic extract, not a model summary.

An assistant message recognised as `bailing.authorization-execution-summary.v1` is re-projected
through a whitelist and shrinks by whole invocation entries (counted in `omitted_invocations`),
never to half a JSON; when not even an empty summary fits, a plain omission note stands in.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from apps.core.jsonbytes import compact_json
from apps.routes.validators import TOOL_NAME_RE

EXECUTION_SUMMARY_SCHEMA = "bailing.authorization-execution-summary.v1"
EXECUTION_SUMMARY_KIND = "authorization_execution_summary"
INVOCATION_ID_RE = re.compile(r"^[0-9a-f]{64}$")
INVOCATION_STATES = (
    "executed", "business_rejected", "awaiting_approval", "denied", "rejected_before_dispatch",
    "reconciliation_required", "in_progress",
)
# States without a trustworthy final result: the host must inspect the original invocation.
PENDING_STATES = ("awaiting_approval", "reconciliation_required", "in_progress")
SUMMARY_LINE_MAX_CHARS = 200
# How many messages older than the recent window the summary may draw from.
SUMMARY_SCAN_MESSAGES = 100


def token_count(text: str) -> int:
    """Tokens of `text`: tiktoken `cl100k_base` when it is installed, else `4 + ceil(len/4)`."""
    encoding = _cl100k()
    if encoding is not None:
        return len(encoding.encode(text, disallowed_special=()))
    return 4 + math.ceil(len(text) / 4)


_ENCODING: Any = ...


def _cl100k():
    global _ENCODING
    if _ENCODING is ...:
        try:
            import tiktoken

            _ENCODING = tiktoken.get_encoding("cl100k_base")
        except Exception:  # not installed, or its data cannot be loaded offline
            _ENCODING = None
    return _ENCODING


@dataclass(frozen=True)
class LedgerMessage:
    """What memory needs of a stored message."""

    sequence: int
    role: str
    kind: str
    content: str


@dataclass(frozen=True)
class MemorySettings:
    recent_messages: int
    recent_budget_chars: int
    per_message_chars: int
    summary_enabled: bool
    summary_max_chars: int


@dataclass
class AssembledMemory:
    summary: str | None
    recent: list[dict[str, Any]]
    summary_upto_id: int
    prior_messages: int
    stats: dict[str, int] = field(default_factory=dict)


def execution_summary_parse(content: str) -> dict[str, Any] | None:
    """The whitelisted projection of an authorization execution summary, or None when `content`
    is not one. Only the whole content as one JSON object with the schema marker counts.

    Kept per invocation: `invocation_id` (64 hex), `tool`, `last_known_state` and, for a pending
    state, `next_action: "inspect_original"`. Entries failing the whitelist are dropped and
    counted as omitted; everything else (business responses, free text) is left behind.
    """
    text = content.strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # nested past the interpreter's limit: a 500 of every completion
        return None
    if not isinstance(data, dict) or data.get("schema_version") != EXECUTION_SUMMARY_SCHEMA:
        return None
    raw_entries = data.get("invocations")
    if not isinstance(raw_entries, list):
        return None
    entries = [entry for entry in (_invocation_projection(raw) for raw in raw_entries) if entry is not None]
    given_omitted = _non_negative_int(data.get("omitted_invocations"))
    given_total = _non_negative_int(data.get("total_invocations"))
    total = max(given_total, len(raw_entries) + given_omitted)
    return {
        "schema_version": EXECUTION_SUMMARY_SCHEMA,
        "invocations": entries,
        "total_invocations": total,
        "omitted_invocations": total - len(entries),
    }


def _non_negative_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return min(value, 1_000_000)
    return 0


def _invocation_projection(raw: Any) -> dict[str, str] | None:
    if not isinstance(raw, dict):
        return None
    invocation_id, tool, state = raw.get("invocation_id"), raw.get("tool"), raw.get("last_known_state")
    if not (isinstance(invocation_id, str) and INVOCATION_ID_RE.fullmatch(invocation_id)):
        return None
    if not (isinstance(tool, str) and TOOL_NAME_RE.fullmatch(tool)):
        return None
    if state not in INVOCATION_STATES:
        return None
    entry = {"invocation_id": invocation_id, "tool": tool, "last_known_state": state}
    if state in PENDING_STATES:
        entry["next_action"] = "inspect_original"
    return entry


def execution_summary_fit(summary: dict[str, Any], allowance: int) -> tuple[str, int]:
    """(content, omitted_invocations) of `summary` within `allowance` characters.

    Whole invocation entries are left out until the JSON fits — settled ones before pending
    ones, later ones before earlier ones; the kept entries stay in their order. When even no
    entry fits, a plain-text omission note (cut to the allowance) replaces the JSON.
    """
    entries = summary["invocations"]
    total = summary["total_invocations"]
    # Drop order: settled entries from the end first, then pending ones from the end.
    drop_order = [i for i in reversed(range(len(entries))) if "next_action" not in entries[i]]
    drop_order += [i for i in reversed(range(len(entries))) if "next_action" in entries[i]]
    kept = set(range(len(entries)))
    for index in [None, *drop_order]:
        if index is not None:
            kept.discard(index)
        projected = {
            "schema_version": EXECUTION_SUMMARY_SCHEMA,
            "invocations": [entry for i, entry in enumerate(entries) if i in kept],
            "total_invocations": total,
            "omitted_invocations": total - len(kept),
        }
        text = compact_json(projected)
        if len(text) <= allowance:
            return text, total - len(kept)
    note = f"Authorization execution summary omitted ({total} invocations) to fit the memory budget."
    return note[:allowance], total


def _recent_entry(message: LedgerMessage, allowance: int) -> dict[str, Any] | None:
    """The `memory.recent` entry of `message` within `allowance` characters, or None when it
    does not fit (which ends the window)."""
    if allowance <= 0:
        return None
    if message.role == "assistant" and message.kind == EXECUTION_SUMMARY_KIND:
        summary = execution_summary_parse(message.content)
        if summary is not None:
            content, omitted = execution_summary_fit(summary, allowance)
            return {
                "role": "assistant",
                "kind": EXECUTION_SUMMARY_KIND,
                "source": "agent_client",
                "trust": "reference_only",
                "content": content,
                "omitted_invocations": omitted,
            }
    return {"role": message.role, "kind": "message", "content": message.content, "truncated": False}


def memory_assemble(*, messages: Iterable[LedgerMessage], prior_messages: int,
                    settings: MemorySettings) -> AssembledMemory:
    """`memory` and the `memory_refs` numbers from `messages` (newest first, before this turn)."""
    newest_first = [message for message in messages if message.content]
    recent_reversed: list[dict[str, Any]] = []
    remaining = settings.recent_budget_chars
    consumed = 0
    truncated = 0
    for message in newest_first[: settings.recent_messages]:
        allowance = min(settings.per_message_chars, remaining)
        entry = _recent_entry(message, allowance)
        if entry is None:
            break
        if entry["kind"] == "message":
            if len(entry["content"]) > settings.per_message_chars:
                entry["content"] = entry["content"][: settings.per_message_chars]
                entry["truncated"] = True
            if len(entry["content"]) > remaining:
                break  # left out, not truncated: it was counted as both
            if entry["truncated"]:
                truncated += 1
        remaining -= len(entry["content"])
        recent_reversed.append(entry)
        consumed += 1

    older = newest_first[consumed:]
    summary, summary_upto = None, 0
    if settings.summary_enabled and settings.summary_max_chars > 0 and older:
        summary, summary_upto = _summary_of(older[:SUMMARY_SCAN_MESSAGES], settings.summary_max_chars)
    return AssembledMemory(
        summary=summary,
        recent=list(reversed(recent_reversed)),
        summary_upto_id=summary_upto,
        prior_messages=prior_messages,
        stats={"recent_included": consumed, "recent_truncated": truncated,
               "recent_left_out": len(newest_first) - consumed},
    )


def _summary_line(message: LedgerMessage) -> str:
    if message.role == "assistant" and message.kind == EXECUTION_SUMMARY_KIND:
        summary = execution_summary_parse(message.content)
        if summary is not None:
            return f"assistant: [authorization execution summary: {summary['total_invocations']} invocations]"
    text = " ".join(message.content.split())
    if len(text) > SUMMARY_LINE_MAX_CHARS:
        text = text[: SUMMARY_LINE_MAX_CHARS - 1] + "…"
    return f"{message.role}: {text}"


def _summary_of(older_newest_first: list[LedgerMessage], max_chars: int) -> tuple[str | None, int]:
    """One line per older message, oldest first; the oldest lines go first when over budget."""
    lines: list[str] = []
    used = 0
    for message in older_newest_first:
        line = _summary_line(message)
        cost = len(line) + (1 if lines else 0)
        if used + cost > max_chars:
            if not lines:
                lines.append(line[:max_chars])
            break
        lines.append(line)
        used += cost
    if not lines:
        return None, 0
    return "\n".join(reversed(lines)), older_newest_first[0].sequence
