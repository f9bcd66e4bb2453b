"""Task control errors (contracts-beyond-seeds §5). The TASK_* codes are the contract's, verbatim."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import DatabaseError, IntegrityError

from apps.core.errors import ApiError

logger = logging.getLogger("bailinghub.tasks")
P = ParamSpec("P")
R = TypeVar("R")


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


class TaskDispatchUncertain(ApiError):
    code = "TASK_DISPATCH_UNCERTAIN"
    status = 409
    message = ("Every dispatch permit of the task is held by a call whose outcome is uncertain (it may have "
               "reached the business system; no trusted answer was recorded). Such calls keep their permits, so "
               "retrying will not free one: the task can run no more calls.")


class TaskUnavailable(ApiError):
    code = "TASK_UNAVAILABLE"
    status = 503
    message = "Task control is unavailable; nothing was run without it."

    retry_after = 5


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


def task_control_required(func: Callable[P, R]) -> Callable[P, R]:
    """A check of task control that a database fault (a missing task table, a lost connection)
    turns into TASK_UNAVAILABLE: the contract says such faults block, and never fall back to
    running without the task. A unique-key race (IntegrityError) is left to its caller."""

    @functools.wraps(func)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except IntegrityError:
            raise
        except DatabaseError as exc:
            # With its traceback: a missing table and a defect in a query look alike to the caller.
            logger.error("task control unavailable in %s: %s", func.__name__, type(exc).__name__, exc_info=True)
            raise TaskUnavailable() from exc

    return checked
