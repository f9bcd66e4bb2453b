"""Work the broker refused (Redis down when a document was uploaded or a rebuild started) is sent
again by the watchdog's next pass: the row's lease is given back (no run, a heartbeat past the
lease). Before, the row waited for the lease a live run would hold to run out (five minutes after
the broker was back), and the console said no worker was running. The broker here is a real
address nothing listens on."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import timedelta

import pytest
from celery import current_app
from django.utils import timezone

from apps.knowledge import dispatch, leases, services, watchdog
from apps.knowledge.models import Document, IndexGeneration
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload


@pytest.mark.django_db(transaction=True)
def test_a_document_the_broker_refused_is_sent_again_by_the_watchdogs_next_pass(broker_down, caplog):
    kb = KnowledgeBaseFactory()
    with caplog.at_level(logging.WARNING, logger="bailinghub.knowledge"):
        [document] = services.document_upload(kb=kb, files=[upload("notes.txt", b"A note on orders.")])
    document.refresh_from_db()
    # Saved and queued, as before; its heartbeat is past the lease: the next pass takes it.
    assert document.status == Document.Status.QUEUED
    assert document.heartbeat_at < leases.lease_stale_before()
    assert any("Could not send knowledge.document_ingest" in r.getMessage() for r in caplog.records)
    assert watchdog.knowledge_watchdog()["requeued"] == 1


@pytest.mark.django_db(transaction=True)
def test_a_rebuild_the_broker_refused_is_sent_again_by_the_watchdogs_next_pass(broker_down):
    kb = KnowledgeBaseFactory()
    generation = services.knowledge_base_rebuild(kb=kb)
    generation.refresh_from_db()
    assert generation.status == IndexGeneration.Status.BUILDING
    assert generation.heartbeat_at < leases.lease_stale_before()
    assert watchdog.knowledge_watchdog()["requeued"] == 1


@pytest.mark.django_db(transaction=True)
def test_a_document_sent_is_left_to_its_lease(ingest_unconsumed):
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("notes.txt", b"A note on orders.")])
    document.refresh_from_db()
    assert document.heartbeat_at >= leases.lease_stale_before()
    assert watchdog.knowledge_watchdog()["requeued"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_send_that_failed_leaves_a_row_another_run_holds_alone(broker_down):
    """A task that found another run's lease live sends itself again for later; when that send
    fails, the live run keeps its heartbeat (set back, the watchdog took its lease from it, or
    failed it as stalled on its last attempt). The run's own continuation is set back."""
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("notes.txt", b"A note on orders.")])
    run, now = uuid.uuid4(), timezone.now()
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, run_token=run, heartbeat_at=now)

    dispatch.document_send(document.pk, countdown=30)  # the other task's retry
    assert Document.objects.get(pk=document.pk).heartbeat_at == now
    dispatch.document_send(document.pk, run_token=run)  # the run's own next slice
    given_back = Document.objects.get(pk=document.pk)
    assert (given_back.run_token, given_back.heartbeat_at < leases.lease_stale_before()) == (None, True)


def _queued_a_while(ingest_unconsumed) -> Document:
    """An upload whose ingestion message waits on the test's own queue, queued two minutes ago."""
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("notes.txt", b"A note on orders.")])
    Document.objects.filter(pk=document.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=120))
    assert dispatch.queue_length(ingest_unconsumed) == 1
    return document


def _broker_lost_its_messages(queue: str) -> None:
    """What a Redis restarted without its data leaves: the queue's list is gone."""
    with current_app.connection_for_write() as connection:
        connection.default_channel.client.delete(queue)


@pytest.mark.django_db(transaction=True)
def test_a_queued_document_whose_message_the_broker_lost_is_sent_again_within_a_minute(ingest_unconsumed):
    """A Redis restarted without its data lost the message: the document waited its lease out, five
    minutes after the broker was back, with idle workers beside it."""
    document = _queued_a_while(ingest_unconsumed)
    _broker_lost_its_messages(ingest_unconsumed)
    assert watchdog.knowledge_watchdog()["requeued"] == 1
    assert dispatch.queue_length(ingest_unconsumed) == 1  # its message is back on its queue
    document.refresh_from_db()
    assert (document.status, document.run_token, document.attempts) == (Document.Status.QUEUED, None, 0)
    assert document.heartbeat_at > timezone.now() - timedelta(seconds=30)
    assert watchdog.knowledge_watchdog()["requeued"] == 0  # one loss, one send


@pytest.mark.django_db(transaction=True)
def test_a_queued_document_whose_message_still_waits_on_its_queue_is_left_to_it(ingest_unconsumed):
    _queued_a_while(ingest_unconsumed)
    assert watchdog.knowledge_watchdog()["requeued"] == 0
    assert dispatch.queue_length(ingest_unconsumed) == 1


@pytest.mark.django_db(transaction=True)
def test_after_a_failed_send_the_uploads_other_documents_go_to_the_watchdog_unsent(broker_down, caplog):
    """Against a hung broker each send waited its timeouts out: an upload of twenty files held its
    web thread two minutes. One send is tried; the others go to the watchdog at once."""
    kb = KnowledgeBaseFactory()
    files = [upload(f"note-{n}.txt", f"Note {n} on orders.".encode()) for n in range(3)]
    with caplog.at_level(logging.WARNING, logger="bailinghub.knowledge"):
        documents = services.document_upload(kb=kb, files=files)
    said = [r.getMessage() for r in caplog.records if r.name == "bailinghub.knowledge"]
    assert [message.split(" for ")[0] for message in said] == [
        "Could not send knowledge.document_ingest",
        "2 more documents of this upload were not sent; the watchdog sends them."]
    stale = leases.lease_stale_before()
    assert [Document.objects.get(pk=d.pk).heartbeat_at < stale for d in documents] == [True, True, True]
    assert watchdog.knowledge_watchdog()["requeued"] == 3


@pytest.mark.django_db(transaction=True)
def test_the_uploads_answer_says_the_documents_are_queued_once_they_are(ingest_unconsumed):
    """It said "pending" with no queued_at for rows already queued."""
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("notes.txt", b"A note on orders.")])
    stored = Document.objects.get(pk=document.pk)
    assert (document.status, document.queued_at, stored.status) == (
        Document.Status.QUEUED, stored.queued_at, Document.Status.QUEUED)
    assert document.queued_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_queued_document_in_a_backlog_longer_than_the_lease_is_not_sent_again_while_it_waits(ingest_unconsumed):
    """Each pass sent such a document again, a message more on a queue the workers had yet to reach."""
    document = _queued_a_while(ingest_unconsumed)
    Document.objects.filter(pk=document.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=600))
    assert watchdog.knowledge_watchdog()["requeued"] == 0
    assert dispatch.queue_length(ingest_unconsumed) == 1


@pytest.mark.django_db(transaction=True)
def test_queued_documents_waiting_their_turn_take_no_place_of_a_pass_from_work_a_run_held(ingest_unconsumed,
                                                                                           monkeypatch):
    """Passed over, queued documents waiting their turn took every place of a pass in a backlog of
    over a thousand, and a killed worker's document was never handed on."""
    monkeypatch.setattr(watchdog, "WATCHDOG_BATCH", 1)
    _queued_a_while(ingest_unconsumed)
    Document.objects.update(heartbeat_at=timezone.now() - timedelta(seconds=900))
    [held] = services.document_upload(kb=KnowledgeBaseFactory(), files=[upload("held.txt", b"Held by a run.")])
    Document.objects.filter(pk=held.pk).update(status=Document.Status.PARSING, run_token=uuid.uuid4(),
                                               heartbeat_at=timezone.now() - timedelta(seconds=600))
    assert watchdog.knowledge_watchdog()["requeued"] == 1
    held.refresh_from_db()
    assert (held.run_token, held.heartbeat_at > timezone.now() - timedelta(seconds=30)) == (None, True)



def test_a_run_whose_database_is_down_sends_itself_on_to_the_queue_it_came_from():
    """The router reads the database to choose a document's queue, and the database is down: a
    continuation goes back to the queue its message was delivered from — a large document's stays
    with the workers that take large ones."""
    from celery._state import _task_stack

    import apps.knowledge.tasks  # noqa: F401  (registers the pipeline's tasks)

    queue = f"test-sent-on-{uuid.uuid4().hex[:8]}"
    task = current_app.tasks[dispatch.DOCUMENT_INGEST]
    task.push_request(delivery_info={"routing_key": queue, "exchange": ""})
    _task_stack.push(task)
    document_id, run = uuid.uuid4(), uuid.uuid4()
    try:
        dispatch.run_send_on(dispatch.DOCUMENT_INGEST, document_id, run_token=run, countdown=0)
    finally:
        _task_stack.pop()
        task.pop_request()
        with current_app.connection_for_write() as connection:
            client = connection.default_channel.client
            sent = client.lrange(queue, 0, -1)
            client.delete(queue, f"_kombu.binding.{queue}")
    assert len(sent) == 1
    headers = json.loads(sent[0])["headers"]
    assert (headers["task"], headers["argsrepr"]) == (dispatch.DOCUMENT_INGEST, repr([str(document_id)]))
    assert f"'run_token': '{run}'" in headers["kwargsrepr"] and "'connection_lost': True" in headers["kwargsrepr"]
