"""Leases: one run at a time holds a document or a generation, and proves it is alive.

A row with `run_token`, `heartbeat_at` and `attempts` is leased by the run whose token it
carries, until its heartbeat is older than KNOWLEDGE_HEARTBEAT_STALE_SECONDS. Every write of a
run goes through `lease_heartbeat`, which fails (LeaseLost) once the row is gone or another run
holds it. Documents and generations use these same functions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

# A Celery task's claim is named by the task's id and the attempt (uuid5 in this namespace), so the
# worker's main process, which sees the child running a task die, can tell whether that task held
# the row (apps.knowledge.tasks.PipelineRequest). Any other claim's token is random. The same
# message claims twice only when it is handed out again, its first run dead (or past the broker's
# visibility timeout, beyond the task's hard time limit).
_TASK_CLAIMS = uuid.UUID("6a0f3c57-1d2b-4e8a-9c5e-2b7d4f1a8e30")


class LeaseLost(Exception):
    """The row is gone, or another run holds it now."""


@dataclass(frozen=True)
class Claim:
    """What `lease_claim` found: `token` when this run holds the lease; `busy_until` when another
    run's lease is live until then; neither when there is nothing to run."""

    token: uuid.UUID | None = None
    busy_until: datetime | None = None


def lease_stale_before() -> datetime:
    """Heartbeats before this are dead runs' heartbeats."""
    return timezone.now() - timedelta(seconds=settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS)


def lease_expires_at(row) -> datetime | None:
    """When the lease of the run holding `row` runs out (None when no run holds it)."""
    if not row.run_token or not row.heartbeat_at:
        return None
    return row.heartbeat_at + timedelta(seconds=settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS)


def lease_live(row) -> bool:
    """Whether a run holds `row` and its heartbeat is fresh."""
    expires = lease_expires_at(row)
    return expires is not None and expires > timezone.now()


def task_claim_token(task_id: str, attempt: int) -> uuid.UUID:
    """The token of attempt `attempt`'s claim by the Celery task `task_id`."""
    return uuid.uuid5(_TASK_CLAIMS, f"{task_id}:{attempt}")


def lease_claim(row, *, run_token: str | None, task_id: str | None = None,
                update_fields: tuple[str, ...] = ()) -> Claim:
    """Claim `row` (locked FOR UPDATE by the caller) for a run. The run that holds it continues
    (under the continuing Celery task's own token, `task_claim_token`); a live lease of another run
    is not taken (busy_until says until when); a free or expired one is taken with a new token
    (the Celery task's own) and one more attempt. The caller checks attempts and status before;
    `update_fields` are saved along (changes the caller made)."""
    now = timezone.now()
    if run_token and row.run_token and str(row.run_token) == run_token:
        # A Celery task continuing the run takes a token of its own: the run is known by the task
        # running it now, and the message continued it no longer names it (handed out again after
        # its process died, it went on as that run without spending an attempt).
        if task_id:
            row.run_token = task_claim_token(task_id, row.attempts)
        row.heartbeat_at = now
        row.save(update_fields=["run_token", "heartbeat_at", "updated_at", *update_fields])
        return Claim(token=row.run_token)
    if lease_live(row):
        return Claim(busy_until=lease_expires_at(row))
    row.attempts += 1
    row.run_token = task_claim_token(task_id, row.attempts) if task_id else uuid.uuid4()
    row.heartbeat_at = now
    row.save(update_fields=["run_token", "attempts", "heartbeat_at", "updated_at", *update_fields])
    return Claim(token=row.run_token)


def lease_heartbeat(queryset: models.QuerySet | models.Manager, *, pk, token, **fields) -> None:
    """Prove the run holding row `pk` of `queryset` is alive (and write `fields` with it);
    LeaseLost when the row is gone or is not this run's any more."""
    now = timezone.now()
    if not queryset.filter(pk=pk, run_token=token).update(heartbeat_at=now, updated_at=now, **fields):
        raise LeaseLost()


def lease_release(row) -> None:
    """Let go of `row` (the caller saves run_token and heartbeat_at): the next run claims it at once."""
    row.run_token = None
    row.heartbeat_at = timezone.now()


def lease_expire(queryset: models.QuerySet | models.Manager, *, pk, held_by: Iterable) -> int:
    """Give back at once the lease on row `pk` of `queryset` when a token in `held_by` holds it
    (None in it: or no run does): no token, and a heartbeat set back past the lease, so the next
    claim takes it (with one attempt more) and the watchdog's next pass sends it again if nothing
    else does. Returns how many rows it gave back (0 or 1)."""
    tokens = list(held_by)
    held = Q(run_token__in=[token for token in tokens if token])
    if None in tokens:
        held |= Q(run_token__isnull=True)
    now = timezone.now()
    stale = now - timedelta(seconds=settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS + 1)
    return queryset.filter(held, pk=pk).update(run_token=None, heartbeat_at=stale, updated_at=now)
