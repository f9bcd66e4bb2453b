"""Sending a pipeline or dispatcher task needs the broker only. Tasks sent by name ignore their
results, and the sender must say so: otherwise Celery's Redis result backend first subscribes the
sender to the task's result channel, and with Redis down it retried that for 20 seconds (an upload
answered after 19 s) before the send failed. Real Redis brokers the messages, to queues of this
test's own (emptied after); the result store is a Redis socket where no server listens."""

from __future__ import annotations

import uuid

import pytest
from celery.backends.redis import RedisBackend

from apps.core.redis import redis_client
from apps.knowledge import dispatch
from apps.tools import invocations
from bailinghub.celery import app as celery_app


@pytest.fixture
def queues(settings):
    settings.KNOWLEDGE_TASK_QUEUE = f"test-sending-{uuid.uuid4().hex[:12]}"
    settings.TOOL_DISPATCH_QUEUE = f"test-sending-{uuid.uuid4().hex[:12]}"
    yield settings.KNOWLEDGE_TASK_QUEUE, settings.TOOL_DISPATCH_QUEUE
    redis_client().delete(settings.KNOWLEDGE_TASK_QUEUE, settings.TOOL_DISPATCH_QUEUE)


@pytest.fixture
def result_store_down(tmp_path):
    """This thread's result backend is a Redis that is not running."""
    dead = RedisBackend(app=celery_app, url=f"socket://{tmp_path / 'no-redis.sock'}")
    saved = celery_app._local.__dict__.get("backend")
    celery_app._local.backend = dead
    yield
    if saved is None:
        del celery_app._local.backend
    else:
        celery_app._local.backend = saved


@pytest.mark.django_db
@pytest.mark.parametrize(("send", "queue"), [
    (lambda: dispatch.document_send(uuid.uuid4()), 0),
    (lambda: dispatch.document_send(uuid.uuid4(), run_token=uuid.uuid4(), countdown=5), 0),
    (lambda: dispatch.generation_send(uuid.uuid4()), 0),
    (lambda: invocations._send_after_commit(invocations.Invocation(pk=uuid.uuid4())), 1),
], ids=["document", "document-continued", "generation", "tool-dispatch"])
def test_a_task_is_sent_while_the_result_store_is_unreachable(queues, result_store_down,
                                                              django_capture_on_commit_callbacks, send, queue):
    with django_capture_on_commit_callbacks(execute=True):
        send()
    assert redis_client().llen(queues[queue]) == 1
