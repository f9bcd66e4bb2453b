"""Whether a Celery queue's workers move: the console's one judgement for work that waits in a
queue — documents waiting to be ingested (apps.knowledge.selectors), tool calls waiting to be
dispatched (apps.tools.selectors).

A queue's activity is what its workers hold now and the newest word from them: ``{"count": n,
"heartbeat_at": datetime | None}`` (a document's heartbeat, a call's claim). A queue moves while
its workers hold something and have spoken within WORKER_SILENT_SECONDS; an item queued at least
that long in a queue that does not move waits for a worker no one runs (or one stuck).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

# A live worker takes a queued item within seconds, and one holding work speaks every few seconds
# (a heartbeat after each embedding batch, a claim per call); a minute without either is worth
# saying, long before a watchdog hands the work on.
WORKER_SILENT_SECONDS = 60


@dataclass(frozen=True)
class QueueStall:
    """Why an item waits: its queue's workers hold work but went silent `seconds` ago (`holding`),
    or nothing is being worked on and the item has waited `seconds`."""

    holding: bool
    seconds: float


def queue_silence(activity: Mapping[str, Any], *, now: datetime) -> float:
    """Seconds since the newest word from what a queue's workers hold; 0 before its first one (a
    claim that has not reported yet is not a silence)."""
    heartbeat = activity.get("heartbeat_at")
    return (now - heartbeat).total_seconds() if heartbeat else 0.0


def queue_moves(activity: Mapping[str, Any], *, now: datetime) -> bool:
    """Its workers hold something and have spoken within WORKER_SILENT_SECONDS."""
    return bool(activity.get("count")) and queue_silence(activity, now=now) < WORKER_SILENT_SECONDS


def queued_before(*, now: datetime) -> datetime:
    """Items queued before this have waited long enough for a live worker to have taken them."""
    return now - timedelta(seconds=WORKER_SILENT_SECONDS)


def queue_stall(activity: Mapping[str, Any], *, queued_at: datetime | None, now: datetime) -> QueueStall | None:
    """For one item queued at `queued_at`: None while its queue moves, or while it has waited less
    than WORKER_SILENT_SECONDS (a worker may still be on its way); otherwise why it waits."""
    if queued_at is None or queued_at > queued_before(now=now) or queue_moves(activity, now=now):
        return None
    if activity.get("count"):
        return QueueStall(holding=True, seconds=queue_silence(activity, now=now))
    return QueueStall(holding=False, seconds=(now - queued_at).total_seconds())
