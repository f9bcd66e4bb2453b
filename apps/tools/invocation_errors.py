"""Errors of governed tool invocations and approval decisions, each with its contract code."""

from __future__ import annotations

from typing import Any

from apps.core.errors import ApiError

ARGUMENTS_MAX_BYTES = 1024 * 1024
REQUEST_BODY_MAX_BYTES = 2 * 1024 * 1024


class ArgumentsTooLarge(ApiError):
    """413 before anything is dispatched: the arguments or the whole HTTP body are over budget."""

    code = "arguments_too_large"
    status = 413
    message = "The tool call is too large; nothing was dispatched."

    @classmethod
    def arguments(cls, *, actual_bytes: int) -> ArgumentsTooLarge:
        return cls(f"The arguments are {actual_bytes} bytes as compact UTF-8 JSON; at most "
                   f"{ARGUMENTS_MAX_BYTES} are accepted. Nothing was dispatched.",
                   **too_large_extra(limit_scope="arguments", max_bytes=ARGUMENTS_MAX_BYTES),
                   actual_bytes=actual_bytes)


def too_large_extra(*, limit_scope: str, max_bytes: int) -> dict[str, Any]:
    return {"origin": "core", "dispatch": "not_dispatched", "limit_scope": limit_scope, "max_bytes": max_bytes}


def body_too_large_payload(*, max_bytes: int, observed_bytes: int) -> dict[str, Any]:
    """The 413 of the streamed body check (apps.core.middleware), in the invocation contract's shape."""
    return {"code": ArgumentsTooLarge.code,
            "message": f"The request body passed {max_bytes} bytes (reading stopped at {observed_bytes}); "
                       "nothing was dispatched.",
            **too_large_extra(limit_scope="request_body", max_bytes=max_bytes), "observed_bytes": observed_bytes}


class InvocationConflict(ApiError):
    code = "invocation_conflict"
    status = 409
    message = ("This invocation_id was already used for another call (route, tool, arguments or revision "
               "differ); use a new invocation_id for a new call.")


class InvocationNotFound(ApiError):
    code = "invocation_not_found"
    status = 404
    message = "No invocation with this id for this session."


class ExecutionPaused(ApiError):
    code = "execution_paused"
    status = 503
    message = "Tool execution is paused for this project by an operator; nothing was dispatched. Receipts still work."

    retry_after = 60


class RunNotActive(ApiError):
    code = "run_not_active"
    status = 409
    message = "This run is not open: it is still being prepared or has finished."


class ApprovalNotFound(ApiError):
    code = "approval_not_found"
    status = 404
    message = "Approval not found."


class ApprovalAlreadyDecided(ApiError):
    code = "approval_already_decided"
    status = 409
    message = "This approval was already decided with another decision; a decision is final."


class ApprovalExpired(ApiError):
    code = "approval_expired"
    status = 409
    message = "This approval expired before it was decided; it reads as denied."


class ApprovalCallCannotRun(ApiError):
    code = "approval_call_cannot_run"
    status = 409
    message = ("The agent session that made this call has ended for good (revoked, expired or its authorization "
               "deleted), and only that session can resume it: the call can never run, so it cannot be approved. "
               "Deny it instead. Nothing was recorded.")
