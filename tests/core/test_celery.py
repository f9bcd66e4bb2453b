import uuid

import pytest

from apps.core.tasks import ping


@pytest.mark.django_db(transaction=True)
def test_a_task_round_trips_through_a_real_worker_on_redis(celery_worker_session):
    value = uuid.uuid4().hex
    result = ping.delay(value)
    assert result.get(timeout=30) == {"pong": value}
    assert result.status == "SUCCESS"
