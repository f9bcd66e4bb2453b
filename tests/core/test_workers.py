"""Whether a queue's workers move (apps.core.workers): the one judgement behind the console's
"waiting for a worker" signs for documents and for tool calls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.core import workers
from apps.core.timefmt import short_duration
from apps.core.workers import (
    WORKER_SILENT_SECONDS,
    QueueHalt,
    QueueStall,
    queue_activity,
    queue_activity_merge,
    queue_halt,
    queue_moves,
    queue_silence,
    queue_stall,
)

NOW = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)


def _ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_a_minute_is_the_silence_worth_saying():
    assert WORKER_SILENT_SECONDS == 60


@pytest.mark.parametrize(("activity", "moves"), [
    ({"count": 1, "heartbeat_at": _ago(5)}, True),
    ({"count": 3, "heartbeat_at": _ago(59)}, True),
    ({"count": 1, "heartbeat_at": None}, True),  # claimed, not reported yet: not a silence
    ({"count": 1, "heartbeat_at": _ago(60)}, False),
    ({"count": 2, "heartbeat_at": _ago(600)}, False),
    ({"count": 0, "heartbeat_at": None}, False),  # nothing held: nothing says a worker is there
    ({}, False),
])
def test_a_queue_moves_while_its_workers_hold_work_and_speak(activity, moves):
    assert queue_moves(activity, now=NOW) is moves


def _later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize(("activity", "moves"), [
    ({"count": 1, "heartbeat_at": _ago(120), "busy_until": _later(480)}, True),  # a slow send, in its time
    ({"count": 1, "heartbeat_at": _ago(600), "busy_until": _ago(1)}, False),  # past its deadline, silent
    ({"count": 1, "heartbeat_at": _ago(120), "busy_until": None}, False),
    ({"count": 0, "heartbeat_at": None, "busy_until": _later(480)}, False),  # nothing held
])
def test_work_within_the_time_it_may_take_silently_moves_the_queue(activity, moves):
    """A claimed call waits on its business system up to its timeout (600 s at most) without a word:
    a worker sending it is at work, not silent."""
    assert queue_moves(activity, now=NOW) is moves


IDLE = {"count": 0, "heartbeat_at": None, "busy_until": None}


@pytest.mark.parametrize(("activities", "moves"), [
    ([{"count": 3, "heartbeat_at": _ago(5)}, IDLE], True),  # workers busy with documents move the queue
    ([IDLE, {"count": 1, "heartbeat_at": _ago(90), "busy_until": _later(60)}], True),
    ([{"count": 3, "heartbeat_at": _ago(5)}, {"count": 1, "heartbeat_at": _ago(300), "busy_until": _ago(10)}], True),
    ([{"count": 1, "heartbeat_at": None}, {"count": 1, "heartbeat_at": _ago(300)}], True),  # one claim not reported
    ([{"count": 1, "heartbeat_at": _ago(120)}, {"count": 1, "heartbeat_at": _ago(300), "busy_until": _ago(10)}],
     False),
    ([IDLE, IDLE], False),
    ([], False),
])
def test_a_queue_shared_by_two_kinds_of_work_moves_when_either_does(activities, moves):
    merged = queue_activity_merge(*activities)
    assert queue_moves(merged, now=NOW) is moves
    assert queue_moves(merged, now=NOW) is any(queue_moves(activity, now=NOW) for activity in activities)


def test_merged_activity_holds_both_kinds_and_their_newest_word():
    assert queue_activity_merge({"count": 2, "heartbeat_at": _ago(120)},
                                {"count": 1, "heartbeat_at": _ago(300), "busy_until": _ago(10)},
                                {"count": 0, "heartbeat_at": _ago(1), "busy_until": _later(5)}) == {
        "count": 3, "heartbeat_at": _ago(120), "busy_until": _ago(10)}


@pytest.fixture
def registered(monkeypatch):
    """Two kinds of work as their apps name them at start: documents on "shared" and "large", calls
    on "shared" (a send in flight) — and what each read of them asked for."""
    asked: list[tuple[str, str]] = []

    def documents(queue):
        asked.append(("documents", queue))
        return [{"count": 0, "heartbeat_at": None}] if queue in ("shared", "large") else []

    def calls(queue):
        asked.append(("calls", queue))
        return [{"count": 1, "heartbeat_at": _ago(120), "busy_until": _later(480)}] if queue == "shared" else []

    monkeypatch.setattr(workers, "_QUEUE_WORK", {})
    workers.queue_work_register("documents", documents)
    workers.queue_work_register("calls", calls)
    return asked


@pytest.mark.parametrize(("queue", "moves"), [("shared", True), ("large", False)])
def test_a_queue_counts_the_other_kinds_of_work_sent_to_it(registered, queue, moves):
    """Documents queued on the default queue behind workers busy on slow sends (within their
    deadline) are in line; on the large documents' queue no call is sent, and nothing moves it."""
    activity = queue_activity(queue, kind="documents", held=[IDLE])
    assert (queue_moves(activity, now=NOW), registered) == (moves, [("calls", queue)])


def test_a_kinds_own_work_is_what_it_read_itself(registered):
    assert queue_activity("shared", kind="calls", held=[{"count": 2, "heartbeat_at": _ago(5)}]) == {
        "count": 2, "heartbeat_at": _ago(5), "busy_until": None}
    assert registered == [("documents", "shared")]


def test_silence_counts_from_the_newest_word():
    assert (queue_silence({"count": 1, "heartbeat_at": _ago(125)}, now=NOW),
            queue_silence({"count": 1, "heartbeat_at": None}, now=NOW)) == (125.0, 0.0)


def test_an_item_queued_a_minute_with_nothing_held_waits_since_it_was_queued():
    assert queue_stall({"count": 0, "heartbeat_at": None}, queued_at=_ago(300), now=NOW) == QueueStall(
        holding=False, seconds=300.0)


def test_an_item_behind_silent_workers_waits_since_their_last_word():
    assert queue_stall({"count": 2, "heartbeat_at": _ago(120)}, queued_at=_ago(400), now=NOW) == QueueStall(
        holding=True, seconds=120.0)


@pytest.mark.parametrize("queued_at", [_ago(10), None])
def test_an_item_just_come_behind_workers_silent_a_minute_is_told_at_once(queued_at):
    """Their silence is measured from their last word, whenever the item came: the KB page read
    "1 document ingesting now" for a minute (for ever, with no queue time) behind workers known to
    be silent."""
    assert queue_stall({"count": 2, "heartbeat_at": _ago(600)}, queued_at=queued_at, now=NOW) == QueueStall(
        holding=True, seconds=600.0)


@pytest.mark.parametrize(("activity", "queued_at"), [
    ({"count": 0, "heartbeat_at": None}, _ago(59)),  # a worker may still be on its way
    ({"count": 1, "heartbeat_at": _ago(5)}, _ago(600)),  # in line behind work that moves
    ({"count": 0, "heartbeat_at": None}, None),  # never queued
])
def test_nothing_is_said_while_the_queue_moves_or_the_item_is_fresh(activity, queued_at):
    assert queue_stall(activity, queued_at=queued_at, now=NOW) is None


@pytest.mark.parametrize(("seconds", "text"), [(45, "45 s"), (89.9, "89 s"), (300, "5 min"), (3 * 3600, "3 h")])
def test_a_wait_reads_in_its_unit(seconds, text):
    assert short_duration(seconds) == text


@pytest.mark.parametrize(("activity", "halt"), [
    ({"count": 1, "heartbeat_at": _ago(5)}, None),
    ({"count": 2, "heartbeat_at": _ago(120)}, QueueHalt(holding=True, silent=120.0, stalled_before=NOW)),
    ({"count": 0, "heartbeat_at": None}, QueueHalt(holding=False, silent=0.0, stalled_before=_ago(60))),
])
def test_a_queue_that_stands_still_says_whether_its_workers_hold_work_and_which_items_wait_on_it(activity, halt):
    """The dashboard's counts and the pages' per-item signs read this one judgement: behind silent
    workers every queued item waits on them; with nothing held, those queued a minute."""
    assert queue_halt(activity, now=NOW) == halt
