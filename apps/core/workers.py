"""Whether a Celery queue's workers move: the console's one judgement for work that waits in a
queue — documents waiting to be ingested (apps.knowledge.selectors), tool calls waiting to be
dispatched (apps.tools.selectors).

A queue's activity is what its workers hold now and the newest word from them: ``{"count": n,
"heartbeat_at": datetime | None, "busy_until": datetime | None}`` (a document's heartbeat, a call's
claim; until when what they hold may go on without a word: a call's send runs silent up to its
dispatch deadline). A queue moves while its workers hold something and have spoken within
WORKER_SILENT_SECONDS, or are still within busy_until; an item queued in a queue that does not
move waits for a worker no one runs (or one stuck). Work of several kinds on one Celery queue (tool
calls and small documents share the default queue) is one activity: queue_activity_merge. Each app
names at start (queue_work_register, from its AppConfig.ready) what its workers hold on a queue, so
that either app's judgement of a queue counts the other's work there (queue_activity) while neither
imports the other.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from apps.core.health import check_broker

# A live worker takes a queued item within seconds, and one holding a document speaks every few
# seconds (a heartbeat after each embedding batch); a minute without a word is worth saying, long
# before a watchdog hands the work on. A call's send speaks once, at its claim, and may then wait
# on the business system until its deadline (busy_until) without being silent.
WORKER_SILENT_SECONDS = 60


# While the broker does not answer, nothing queued reaches a worker, however well the workers run:
# the console said to check the workers (healthy all along) while /readyz said "redis".
BROKER_DOWN_TEXT = ("the task broker (Redis) cannot be reached: nothing queued reaches a worker until it is back, "
                    "and the watchdogs send the work again then; check that Redis is running (/readyz says so too)")


def broker_down_text() -> str:
    """BROKER_DOWN_TEXT while the Celery broker does not answer (check_broker), else nothing."""
    return BROKER_DOWN_TEXT if check_broker() == "unavailable" else ""


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
    """Its workers hold something and have spoken within WORKER_SILENT_SECONDS, or what they hold
    is still within the time it may take without a word (busy_until: a send before its deadline)."""
    if not activity.get("count"):
        return False
    busy_until = activity.get("busy_until")
    return queue_silence(activity, now=now) < WORKER_SILENT_SECONDS or (busy_until is not None and busy_until > now)


def queue_activity_merge(*activities: Mapping[str, Any]) -> dict[str, Any]:
    """One Celery queue's activity from the kinds of work its workers take from it (the default
    queue's small documents and tool calls): what they hold together and the newest word from any,
    so that the queue moves when any of them does — workers busy ingesting a bulk upload are not
    missing ones for a call queued behind it. A kind holding work with no word yet (a claim that has
    not reported) is the newest word there is."""
    holding = [activity for activity in activities if activity.get("count")]
    heartbeats: list[datetime | None] = [activity.get("heartbeat_at") for activity in holding]
    spoken = [heartbeat for heartbeat in heartbeats if heartbeat is not None]
    busy = [until for activity in holding if (until := activity.get("busy_until")) is not None]
    return {"count": sum(int(activity["count"]) for activity in holding),
            "heartbeat_at": max(spoken) if spoken and len(spoken) == len(heartbeats) else None,
            "busy_until": max(busy, default=None)}


# Each kind of queued work (its app's name for it) and what its workers hold on a given Celery queue:
# one activity per part of that work sent there, none when it sends nothing there.
QueueWork = Callable[[str], Iterable[Mapping[str, Any]]]
_QUEUE_WORK: dict[str, QueueWork] = {}


T = TypeVar("T")
_READINGS: ContextVar[dict[Hashable, Any] | None] = ContextVar("queue_readings", default=None)


@contextmanager
def queue_readings_shared() -> Iterator[None]:
    """Within it, what the workers hold is read once per kind of work and lane (worker_reading):
    a page that judges both documents and tool calls on the default queue read each kind twice,
    once as its own and once as the other's (the dashboard's two repeated statements)."""
    token = _READINGS.set({})
    try:
        yield
    finally:
        _READINGS.reset(token)


def worker_reading(key: Hashable, read: Callable[[], T]) -> T:
    """`read()`, or within queue_readings_shared what it gave for `key` before."""
    readings = _READINGS.get()
    if readings is None:
        return read()
    if key not in readings:
        readings[key] = read()
    return cast(T, readings[key])


def queue_work_register(kind: str, work: QueueWork) -> None:
    """At start (an app's ready()): `work(queue)` reads what the workers hold of this kind of work
    on a Celery queue."""
    _QUEUE_WORK[kind] = work


def queue_activity(queue: str, *, kind: str, held: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A Celery queue's activity as one kind of work on it judges it: what its workers hold of that
    kind (`held`, which its app has read) merged with every other kind registered on that queue —
    workers busy sending tool calls move the queue for a document queued behind them, and workers
    busy ingesting move it for a call. One statement or so per other kind sent to that queue."""
    others = [activity for other, work in _QUEUE_WORK.items() if other != kind for activity in work(queue)]
    return queue_activity_merge(*held, *others)


def _queued_before(*, now: datetime) -> datetime:
    """Items queued before this have waited long enough for a live worker to have taken them."""
    return now - timedelta(seconds=WORKER_SILENT_SECONDS)


@dataclass(frozen=True)
class QueueHalt:
    """A queue that does not move, and why: its workers hold work but went silent `silent` seconds
    ago (`holding`), or they hold nothing (silent 0). The items queued before `stalled_before` wait
    on it for nothing: behind silent workers, every one (the silence is theirs, whenever the item
    came); with nothing held, those that have waited WORKER_SILENT_SECONDS (a worker may still be
    on its way to the others)."""

    holding: bool
    silent: float
    stalled_before: datetime


def queue_halt(activity: Mapping[str, Any], *, now: datetime) -> QueueHalt | None:
    """None while the queue moves; otherwise how it stands still. The one judgement behind both the
    console's per-item signs (queue_stall: a call's page, a KB page's rows) and its per-project
    counts (the dashboard's documents and calls waiting for a worker)."""
    if queue_moves(activity, now=now):
        return None
    if activity.get("count"):
        return QueueHalt(holding=True, silent=queue_silence(activity, now=now), stalled_before=now)
    return QueueHalt(holding=False, silent=0.0, stalled_before=_queued_before(now=now))


def queue_stall(activity: Mapping[str, Any], *, queued_at: datetime | None, now: datetime) -> QueueStall | None:
    """For one item queued at `queued_at`: None while its queue moves; otherwise why it waits.
    Behind work whose workers went silent a minute it waits from its first second (the silence is
    theirs, whenever it came); with nothing held, only once it has waited WORKER_SILENT_SECONDS (a
    worker may still be on its way)."""
    halt = queue_halt(activity, now=now)
    if halt is None:
        return None
    if halt.holding:
        return QueueStall(holding=True, seconds=halt.silent)
    if queued_at is None or queued_at > halt.stalled_before:
        return None
    return QueueStall(holding=False, seconds=(now - queued_at).total_seconds())
