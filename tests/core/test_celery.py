import uuid

import pytest

from apps.core.tasks import ping


@pytest.mark.django_db(transaction=True)
def test_a_task_round_trips_through_a_real_worker_on_redis(celery_worker_session):
    value = uuid.uuid4().hex
    result = ping.delay(value)
    assert result.get(timeout=30) == {"pong": value}
    assert result.status == "SUCCESS"



@pytest.mark.django_db(transaction=True)
def test_a_task_sent_for_later_by_a_test_is_dropped_unrun(celery_worker_session):
    """A countdown task still waiting when its test ends (in Redis or in the worker's timer) must
    not run inside a later test."""
    from celery.exceptions import TaskRevokedError

    from tests.conftest import drop_scheduled_tasks

    left = ping.apply_async(("left",), countdown=3)
    assert left.id in drop_scheduled_tasks()  # revoked by id, whether or not the worker has it yet
    kept = ping.apply_async(("kept",), countdown=1)  # the control: sent after the drop, it runs
    assert kept.get(timeout=30) == {"pong": "kept"}
    with pytest.raises(TaskRevokedError):
        left.get(timeout=30)
    assert left.status == "REVOKED"
    assert drop_scheduled_tasks() == [kept.id]  # each id once, and the list starts again


@pytest.mark.parametrize("url", ["redis+socket:///tmp/redis.sock", "redis://127.0.0.1:6379/0",
                                 "rediss://127.0.0.1:6380/0"])
def test_redis_broker_urls_use_the_transport_that_survives_a_redis_restart(url):
    from kombu import Connection

    from bailinghub.broker import Transport

    assert isinstance(Connection(url).transport, Transport)  # no connection is made


def test_a_channel_whose_connection_celery_collected_still_reaches_redis():
    """What Celery's consumer does on a broker connection error: collect() drops the transport's
    connection details, then close() restores the channel's unacknowledged messages, and a running
    task acknowledges its message, each through a new pool (stock kombu 5.7: an AttributeError on
    the details it no longer has, which stops the worker; bailinghub.broker)."""
    from bailinghub.celery import app

    with app.connection_for_write() as broker:
        channel = broker.default_channel
        broker.collect()
        with channel.conn_or_acquire() as client:
            assert client.ping() is True
