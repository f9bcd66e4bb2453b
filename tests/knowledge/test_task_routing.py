"""Which queue ingestion tasks go to: large documents and rebuilds to their own queue, so small
uploads never wait behind them (apps.knowledge.tasks.task_route, the Celery router)."""

import pytest
from celery.signals import before_task_publish
from django.db import transaction

from apps.knowledge import services
from apps.knowledge.tasks import DOCUMENT_INGEST, KB_REBUILD, document_queue
from bailinghub.celery import app as celery_app
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload, wait_for_status

THRESHOLD = 4096


@pytest.fixture
def threshold(settings):
    settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES = THRESHOLD
    settings.KNOWLEDGE_TASK_QUEUE = None
    return settings


def _document(size: int):
    [document] = services.document_upload(kb=KnowledgeBaseFactory(), files=[upload("a.txt", b"x" * size)])
    return document


def _routed_queue(name: str, args, options=None) -> str:
    return celery_app.amqp.router.route(dict(options or {}), name, args, {})["queue"].name


@pytest.mark.parametrize(("size", "large"), [(0, False), (THRESHOLD - 1, False), (THRESHOLD, True),
                                             (50 * 1024 * 1024, True)])
def test_a_document_from_the_threshold_up_goes_to_the_large_queue(threshold, size, large):
    assert document_queue(size=size) == (threshold.KNOWLEDGE_LARGE_TASK_QUEUE if large else None)


@pytest.mark.django_db
def test_the_router_sends_a_small_document_to_the_default_queue(threshold):
    document = _document(THRESHOLD - 1)
    assert _routed_queue(DOCUMENT_INGEST, [str(document.pk)]) == celery_app.conf.task_default_queue


@pytest.mark.django_db
def test_the_router_sends_a_large_document_to_the_large_queue(threshold):
    document = _document(THRESHOLD)
    assert _routed_queue(DOCUMENT_INGEST, [str(document.pk)]) == threshold.KNOWLEDGE_LARGE_TASK_QUEUE


@pytest.mark.django_db
def test_the_router_sends_rebuilds_to_the_large_queue(threshold):
    assert _routed_queue(KB_REBUILD, ["00000000-0000-0000-0000-000000000000"]) == threshold.KNOWLEDGE_LARGE_TASK_QUEUE


@pytest.mark.django_db
def test_a_pinned_knowledge_queue_wins_over_the_size_route(threshold):
    document = _document(THRESHOLD)
    assert _routed_queue(DOCUMENT_INGEST, [str(document.pk)], {"queue": "pinned"}) == "pinned"


@pytest.mark.django_db(transaction=True)
def test_uploads_are_published_by_size_and_both_queues_complete(threshold, celery_worker_session):
    published = []

    def record(sender=None, routing_key=None, **kwargs):
        published.append((sender, routing_key))

    before_task_publish.connect(record)
    try:
        kb = KnowledgeBaseFactory()
        with transaction.atomic():
            small, large = services.document_upload(kb=kb, files=[upload("small.txt", "小文件。".encode()),
                                                                  upload("large.txt", b"word " * THRESHOLD)])
        finished = [wait_for_status(document.pk, "completed", "failed").status for document in (small, large)]
    finally:
        before_task_publish.disconnect(record)
    assert published == [(DOCUMENT_INGEST, celery_app.conf.task_default_queue),
                         (DOCUMENT_INGEST, threshold.KNOWLEDGE_LARGE_TASK_QUEUE)]
    assert finished == ["completed", "completed"]
