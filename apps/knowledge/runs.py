"""What every pipeline run shares — a document's ingestion (apps.knowledge.ingest) and a
generation's build (apps.knowledge.rebuild) — and what it does when its database or its time
runs out. Tasks (apps.knowledge.tasks) only call those two. Every run is safe to repeat:

- A run *claims* its document (or generation) with a lease (apps.knowledge.leases): a fresh
  `run_token` and a heartbeat; every write checks the token, so a run that lost its claim
  (document deleted, watchdog handed the work to another worker) stops without writing. A task
  that finds another run's live lease (a redelivered message while the dead run's heartbeat is
  still fresh) sends itself again for when that lease runs out, rather than dropping the work.
- A run works for one time slice (KNOWLEDGE_TASK_SLICE_SECONDS), then a new task goes on with
  the same claim (SliceOver).
- Nothing stays running past its lease, whatever died (apps.knowledge.watchdog).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from apps.knowledge import dispatch
from apps.knowledge.leases import lease_release
from apps.knowledge.models import Document, IndexGeneration

logger = logging.getLogger("bailinghub.knowledge")


class PipelineError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def retry_countdown(busy_until: datetime) -> float:
    """Seconds until another run's lease runs out (and a moment more), at most one lease."""
    remaining = (busy_until - timezone.now()).total_seconds()
    return min(max(remaining, 0.0), float(settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS)) + 1.0


def slice_deadline() -> float:
    return time.monotonic() + settings.KNOWLEDGE_TASK_SLICE_SECONDS


def heartbeat_seconds() -> float:
    return max(0.2, min(10.0, settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS / 4))


def work_mark_failed(row: Document | IndexGeneration, code: str, message: str) -> None:
    """Fail a document or a generation (in the caller's transaction, on its locked row): its error
    for the operator, its lease let go. The connection losses its claim counted are saved with it."""
    row.status = type(row).Status.FAILED
    row.error_code = code
    row.error_message = message[:2000]
    row.failed_at = timezone.now()
    row.run_token = None
    row.save(update_fields=["status", "error_code", "error_message", "failed_at", "run_token", "connection_losses",
                            "updated_at"])


class SliceOver(Exception):
    """This task has run its time slice; a new task continues the same run."""


# The database went away under a run (a restart, a failover, a connection dropped between them):
# nothing is wrong with the document or the rebuild, so it is not failed — an operator would find
# a sound document failed with "an unexpected error" after every database restart. The run gives
# its attempt back and the work is sent again: attempts count runs whose worker went away, and a
# database restart ends every run in flight at once, so charging them would fail sound documents
# with advice about the file. Losses have their own bound (KNOWLEDGE_MAX_CONNECTION_LOSSES), so a
# database that keeps dropping connections (or a document whose query crashes the server) still
# ends, failed with a message that names the database. With the database still down, nothing can
# be recorded, so the run first waits for it, with a growing pause, up to
# KNOWLEDGE_DATABASE_WAIT_SECONDS: a restart shorter than that costs nothing (the attempt is given
# back and the work sent again at once); a longer outage is left to the lease, which runs out, and
# to the watchdog, which sends the work as for a worker that died. The wait writes only under the
# run's token, so a run the watchdog handed over meanwhile stops without writing. A task delivered
# while the database is down waits the same way before it claims its work (its message is gone
# once it fails, and the work with it until the watchdog sends it again).
# Only the connection breaking counts (no SQLSTATE: the client lost it; class 08; the server
# shutting down or starting) and a deadlock or serialization failure: other OperationalErrors (a
# statement timeout, a value PostgreSQL cannot store) would fail the same way every time.
_TRANSIENT_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "40P01", "40001"})


def connection_broke(exc: BaseException) -> bool:
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES


def connections_lost_message(losses: int, work: str, then: str) -> str:
    return (f"The database connection was lost {losses} times while {work} (a database restart, a failover, or a "
            f"connection pooler or network dropping connections; a deadlock the database broke counts too); the "
            f"worker's log has each one. {then}")


_T = TypeVar("_T")


def database_retried(write: Callable[[], _T]) -> _T:
    """`write()`, and again on a new connection after a growing pause (0.25 s, doubling, at most
    5 s) while the connection keeps breaking, for up to KNOWLEDGE_DATABASE_WAIT_SECONDS; the last
    error once they are spent, and at once any error that is not the connection breaking."""
    deadline = time.monotonic() + settings.KNOWLEDGE_DATABASE_WAIT_SECONDS
    pause = 0.25
    while True:
        try:
            return write()
        except DatabaseError as exc:
            left = deadline - time.monotonic()
            if not connection_broke(exc) or left <= 0:
                raise
        connection.close()  # the broken one is not reused; the next query connects again
        time.sleep(min(pause, left))
        pause = min(pause * 2, 5.0)


def connection_loss_recover(task_name: str, pk, token, send, fail) -> None:
    """Let go of the run's lease, giving its attempt back, and send the work again shortly, on a
    new connection, waiting for the database up to KNOWLEDGE_DATABASE_WAIT_SECONDS; `fail(row,
    losses)` once it has lost KNOWLEDGE_MAX_CONNECTION_LOSSES. With the database down for longer
    (a failover), the run sends itself on for as long again (task `task_name`, its token: it goes
    on as this run, and waits for the database that long once more before it claims); down past
    that, the lease runs out and the watchdog sends the work once it is back. (It left the work
    to the watchdog at once: a minute's failover cost each document five minutes and an attempt.)"""
    queryset = dispatch.task_rows(task_name)

    @transaction.atomic
    def give_back() -> None:
        row = queryset.select_for_update(of=("self",)).filter(pk=pk, run_token=token).first()
        if row is None:  # handed over meanwhile (the wait outlasted the lease), or gone
            return
        if connection_loss_counted(row, fail):
            return
        row.attempts = max(0, row.attempts - 1)
        lease_release(row)
        row.save(update_fields=["run_token", "heartbeat_at", "attempts", "connection_losses", "updated_at"])
        send(pk, countdown=heartbeat_seconds())

    connection.close()  # the broken one; the next query connects again
    wait = settings.KNOWLEDGE_DATABASE_WAIT_SECONDS
    try:
        database_retried(give_back)
    except DatabaseError as exc:
        if not connection_broke(exc) or wait <= 0:
            logger.warning("Giving back %s after its lost connection failed; the watchdog hands it over once its "
                           "lease runs out.", pk, exc_info=True)
            return
        logger.warning("The database is still unavailable after %s s; %s goes on in %s s, or is handed over by the "
                       "watchdog once it is back.", wait, pk, wait)
        dispatch.run_send_on(task_name, pk, run_token=token, countdown=wait)


def connection_loss_counted(row, fail) -> bool:
    """One more connection lost by `row`'s run (counted by its continuation when the database was
    down at the loss); True when it was the last one allowed, and `fail(row, losses)` has failed
    the row. Without the count, work that takes its own database down (an index build that runs
    the server out of memory, say) went round for ever."""
    row.connection_losses += 1
    if row.connection_losses >= settings.KNOWLEDGE_MAX_CONNECTION_LOSSES:
        fail(row, row.connection_losses)
        return True
    return False


# A task that runs past CELERY_TASK_SOFT_TIME_LIMIT is interrupted (SoftTimeLimitExceeded) wherever
# it is. Taken for an unexpected error, a document failed with "retry the document, and report
# it": retried, it ran into the same limit again, as long later. Work fails saying which limit, and
# where (ingest.document_time_limit_message, rebuild.generation_time_limit_message).


@dataclass(frozen=True)
class TimeLimit:
    name: str  # "its task's time limit (SETTING = N s)"
    note: str = ""  # a sentence more, or none
    raise_it: str = "raise the limit (and CELERY_TASK_TIME_LIMIT)"


def soft_time_limit() -> TimeLimit:
    return TimeLimit(
        f"its task's time limit (CELERY_TASK_SOFT_TIME_LIMIT = {settings.CELERY_TASK_SOFT_TIME_LIMIT:,} s)")


def hard_time_limit(seconds: float) -> TimeLimit:
    return TimeLimit(f"its task's hard time limit (CELERY_TASK_TIME_LIMIT = {round(seconds):,} s)",
                     "Its worker process was stopped: the soft limit (CELERY_TASK_SOFT_TIME_LIMIT) is not set below "
                     "that one, or could not interrupt the run (stuck inside one call). ",
                     "raise the limit, with CELERY_TASK_SOFT_TIME_LIMIT below it")
