"""Leases: one run at a time holds a document or a generation, and proves it is alive.

A row with `run_token`, `heartbeat_at` and `attempts` is leased by the run whose token it
carries, until its heartbeat is older than KNOWLEDGE_HEARTBEAT_STALE_SECONDS. Every write of a
run goes through `lease_heartbeat`, which fails (LeaseLost) once the row is gone or another run
holds it. Documents and generations use these same functions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


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


def lease_claim(row, *, run_token: str | None, update_fields: tuple[str, ...] = ()) -> Claim:
    """Claim `row` (locked FOR UPDATE by the caller) for a run. The run that holds it continues
    under its token; a live lease of another run is not taken (busy_until says until when); a
    free or expired one is taken with a new token and one more attempt. The caller checks
    attempts and status before; `update_fields` are saved along (changes the caller made)."""
    now = timezone.now()
    if run_token and row.run_token and str(row.run_token) == run_token:
        row.heartbeat_at = now
        row.save(update_fields=["heartbeat_at", "updated_at", *update_fields])
        return Claim(token=row.run_token)
    if lease_live(row):
        return Claim(busy_until=lease_expires_at(row))
    row.run_token = uuid.uuid4()
    row.attempts += 1
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
