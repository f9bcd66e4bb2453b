import time
import uuid

import pytest

from apps.core.tasks import ping


@pytest.mark.django_db(transaction=True)
def test_a_task_round_trips_through_a_real_worker_on_redis(celery_worker_session):
    value = uuid.uuid4().hex
    result = ping.delay(value)
    assert result.get(timeout=30) == {"pong": value}
    assert result.status == "SUCCESS"


def _scheduled(task_id: str) -> bool:
    from celery.worker import state

    return any(request.id == task_id for request in list(state.scheduled_requests))


@pytest.mark.django_db(transaction=True)
def test_a_task_left_scheduled_by_a_test_is_dropped_unrun(celery_worker_session):
    """A countdown task still waiting when its test ends must not run inside a later test."""
    from celery.exceptions import TaskRevokedError

    from tests.conftest import drop_scheduled_tasks

    kept = ping.apply_async(("kept",), countdown=1)
    left = ping.apply_async(("left",), countdown=1)
    deadline = time.monotonic() + 30
    while not (_scheduled(kept.id) and _scheduled(left.id)):
        assert time.monotonic() < deadline, "the worker never took the countdown tasks"
        time.sleep(0.02)
    assert {kept.id, left.id} <= set(drop_scheduled_tasks())
    from celery.worker import state

    state.revoked.discard(kept.id)  # the control: a countdown task that is not dropped runs
    assert kept.get(timeout=30) == {"pong": "kept"}
    with pytest.raises(TaskRevokedError):
        left.get(timeout=30)
    assert left.status == "REVOKED"
