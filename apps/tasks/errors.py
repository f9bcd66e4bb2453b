"""Task control errors (contracts-beyond-seeds §5). The TASK_* codes are the contract's, verbatim."""

from __future__ import annotations

from apps.core.errors import ApiError


class TaskNotFound(ApiError):
    code = "task_not_found"
    status = 404
    message = "No such task for this caller."


class TaskRequired(ApiError):
    code = "TASK_REQUIRED"
    status = 403
    message = "This session belongs to a task: every turn must carry its task_binding."


class TaskPaused(ApiError):
    code = "TASK_PAUSED"
    status = 409
    message = "The task is paused by an operator."


class TaskCancelled(ApiError):
    code = "TASK_CANCELLED"
    status = 409
    message = "The task was cancelled by an operator."


class TaskExpired(ApiError):
    code = "TASK_EXPIRED"
    status = 409
    message = "The task has expired."


class TaskScopeBlocked(ApiError):
    code = "TASK_SCOPE_BLOCKED"
    status = 409
    message = "The task's members or scope no longer match what was frozen; the task is blocked."


class TaskToolNotAllowed(ApiError):
    code = "TASK_TOOL_NOT_ALLOWED"
    status = 403
    message = "This tool is not among the tools the task allows this member."


class TaskWriteBudgetExhausted(ApiError):
    code = "TASK_WRITE_BUDGET_EXHAUSTED"
    status = 409
    message = "The task's write budget is used up."


class TaskConcurrencyExhausted(ApiError):
    code = "TASK_CONCURRENCY_EXHAUSTED"
    status = 429
    message = "The task already has as many calls in flight as it allows; retry when one finishes."


class TaskUnavailable(ApiError):
    code = "TASK_UNAVAILABLE"
    status = 503
    message = "Task control is unavailable; nothing was run without it."


class TaskInvalid(ApiError):
    code = "invalid_task"
    status = 422
    message = "The task is invalid."


class TaskRequestConflict(ApiError):
    code = "task_request_conflict"
    status = 409
    message = "This request_id was already used for a different request."


class TaskRevisionConflict(ApiError):
    code = "task_revision_conflict"
    status = 409
    message = "The task changed since the revision you read; read it again before deciding."


class TaskTransitionInvalid(ApiError):
    code = "task_transition_invalid"
    status = 409
    message = "The task cannot do this from its current state."


class ProjectReadOnly(ApiError):
    code = "forbidden"
    status = 403
    message = "Your role in this project does not allow changing tasks."
