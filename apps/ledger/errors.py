"""Errors of the conversation ledger and memory notes, with the contract's codes."""

from __future__ import annotations

from apps.core.errors import ApiError


class TurnConflict(ApiError):
    code = "turn_conflict"
    status = 409
    message = "A different request was already made under this turn key (turn or user message id)."


class CompletionConflict(ApiError):
    code = "completion_conflict"
    status = 409
    message = "This run was already completed differently, or the assistant message id is taken."


class RunNotFound(ApiError):
    code = "run_not_found"
    status = 404
    message = "No such run for this session."


class MemoryNotFound(ApiError):
    code = "memory_not_found"
    status = 404
    message = "No such memory note."
