"""The pipeline through real Celery workers on the real Redis and PostgreSQL: the session's
worker thread, and for the crash test real `celery worker` processes that are SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings as django_settings
from django.db import connection, transaction

from apps.core.tasks import ping
from apps.knowledge import ingest, selectors, services, watchdog
from apps.knowledge.models import Chunk, Document, EmbeddingCache, IndexGeneration
from bailinghub.celery import app as celery_app
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import FIXTURES, EmbeddingsEndpoint, upload, wait_for, wait_for_status

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/api/v1/builder"
ROOT = Path(__file__).resolve().parents[2]



def _upload(client, kb, name):
    with open(FIXTURES / name, "rb") as handle:
        response = client.post(f"{BASE}/knowledge-bases/{kb.pk}/documents", {"files": [handle]}, format="multipart")
    assert response.status_code == 201, response.json()
    return response.json()["data"][0]["id"]


def _drain():
    """The session worker runs one task at a time: once a ping comes back, what was queued
    before it has finished."""
    assert ping.delay("drain").get(timeout=60) == {"pong": "drain"}


def test_an_upload_is_completed_by_a_worker_with_its_chunks(client, owner, celery_worker_session):
    kb = KnowledgeBaseFactory(project=owner.project)
    document_id = _upload(client, kb, "policy.zh.md")
    document = wait_for_status(document_id, "completed", "failed")
    assert (document.status, document.progress_done, document.progress_total) == ("completed", 5, 5)
    assert Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD, embedding__isnull=False).count() == 5
    assert client.get(f"{BASE}/documents/{document_id}").json()["data"]["progress"]["percent"] == 100


def test_confirmation_holds_a_document_until_it_is_confirmed(client, owner, celery_worker_session):
    kb = KnowledgeBaseFactory(project=owner.project, require_confirmation=True)
    document_id = _upload(client, kb, "policy.zh.md")
    wait_for_status(document_id, "awaiting_confirmation")
    _drain()
    assert Document.objects.get(pk=document_id).status == "awaiting_confirmation"
    assert Chunk.objects.filter(document_id=document_id, embedding__isnull=False).count() == 0
    assert client.post(f"{BASE}/documents/{document_id}/confirm").status_code == 200
    assert wait_for_status(document_id, "completed", "failed").status == "completed"
    assert Chunk.objects.filter(document_id=document_id, embedding__isnull=False).count() == 5


def test_a_failed_document_completes_after_a_retry(client, owner, celery_worker_session):
    with EmbeddingsEndpoint(statuses=[400]) as endpoint:
        model = EmbeddingModelFactory(provider="openai", options={"base_url": endpoint.url})
        kb = KnowledgeBaseFactory(project=owner.project, embedding_model=model)
        document_id = _upload(client, kb, "policy.zh.md")
        failed = wait_for_status(document_id, "failed", "completed")
        assert (failed.status, failed.error_code) == ("failed", "embedding_failed")
        assert client.post(f"{BASE}/documents/{document_id}/retry-index").status_code == 200
        completed = wait_for_status(document_id, "completed", "failed")
    assert (completed.status, completed.error_code, completed.error_message) == ("completed", "", "")
    assert Chunk.objects.filter(document_id=document_id, kind=Chunk.Kind.CHILD).count() == 5


def test_deleting_while_indexing_leaves_no_vectors_behind(client, owner, celery_worker_session):
    model = EmbeddingModelFactory(options={"delay_seconds": 0.2, "batch_size": 1})
    kb = KnowledgeBaseFactory(project=owner.project, embedding_model=model)
    document_id = _upload(client, kb, "policy.zh.md")
    wait_for(lambda: Document.objects.filter(pk=document_id, status="embedding", progress_done__gte=1).exists(),
             message="embedding to start")
    assert client.delete(f"{BASE}/documents/{document_id}").status_code == 204
    _drain()
    assert Chunk.objects.filter(document_id=document_id).count() == 0
    assert not Document.objects.filter(pk=document_id).exists()


def test_delete_is_502_and_keeps_the_document_when_vectors_cannot_be_removed(client, owner, settings,
                                                                           ingest_unconsumed):
    settings.KNOWLEDGE_DELETE_LOCK_TIMEOUT_MS = 200
    # ingest_unconsumed: the session's worker (an earlier test here started it) took the ingest
    # first once, the chunks were not there yet to be held, and the delete went through.
    kb = KnowledgeBaseFactory(project=owner.project)
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    assert ingest.document_ingest(document_id=document.pk) == "completed"
    held, release = threading.Event(), threading.Event()

    def hold_a_chunk():  # another session (an indexer, a vacuum...) holding the vectors
        try:
            with transaction.atomic():
                list(Chunk.objects.select_for_update().filter(document_id=document.pk)[:1])
                held.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_a_chunk)
    holder.start()
    held.wait(30)
    try:
        response = client.delete(f"{BASE}/documents/{document.pk}")
    finally:
        release.set()
        holder.join()
    assert (response.status_code, response.json()["error"]) == (502, "document_vectors_removal_failed")
    assert response.json()["message"].startswith("Failed to remove document vectors")
    assert Document.objects.get(pk=document.pk).status == "completed"
    assert Chunk.objects.filter(document_id=document.pk).count() == 10


def _database_url() -> str:
    db = django_settings.DATABASES["default"]
    user = quote(db.get("USER") or "")
    password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or ""
    if host.startswith("/"):
        return f"postgres://{user}{password}@/{db['NAME']}?host={quote(host)}"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{user}{password}@{host}{port}/{db['NAME']}"


def _worker(queue: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "DEBUG": "true",
        "DATABASE_URL": _database_url(),  # the test database pytest-django created
        "REDIS_URL": django_settings.REDIS_URL,
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "CELERY_RESULT_BACKEND": django_settings.CELERY_RESULT_BACKEND,
        "KNOWLEDGE_TASK_QUEUE": queue,
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bailinghub", "worker", "--pool", "solo", "--queues", queue,
         "--without-mingle", "--without-gossip", "--without-heartbeat", "--loglevel", "WARNING"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _stop(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGKILL)
    worker.wait(30)


def test_a_worker_killed_mid_embedding_is_replaced_and_finishes_without_duplicates(settings):
    # Its own queue: the session's worker thread (if running) must not take these tasks.
    queue = f"{celery_app.conf.task_default_queue}-crash"
    settings.KNOWLEDGE_TASK_QUEUE = queue
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 1
    model = EmbeddingModelFactory(options={"delay_seconds": 0.3, "batch_size": 1})
    kb = KnowledgeBaseFactory(embedding_model=model)
    text = "\n\n".join(f"## 第{i}节\n\n第{i}条规定的内容。" for i in range(12))
    [document] = services.document_upload(kb=kb, files=[upload("sections.md", f"# 规章\n\n{text}\n".encode())])

    first = _worker(queue)
    try:
        wait_for(lambda: Document.objects.filter(pk=document.pk, status="embedding", progress_done__gte=3).exists(),
                 timeout=120, message="the first worker to be embedding")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    killed = Document.objects.get(pk=document.pk)
    assert (killed.status, killed.run_token is not None) == ("embedding", True)
    assert killed.progress_done < 12

    wait_for(lambda: watchdog.knowledge_watchdog()["requeued"] == 1, timeout=30, interval=0.5,
             message="the watchdog to re-queue the stale document")
    second = _worker(queue)
    try:
        finished = wait_for_status(document.pk, "completed", "failed", timeout=120)
    finally:
        _stop(second)
    assert (finished.status, finished.attempts, finished.progress_done) == ("completed", 2, 12)
    children = Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD)
    assert children.count() == 12
    assert sorted(children.values_list("index", flat=True)) == list(range(12))
    assert children.filter(embedding__isnull=True).count() == 0
    assert EmbeddingCache.objects.filter(embedding_model=model).count() == 12


def test_searches_during_a_rebuild_see_one_whole_generation(owner, settings, celery_worker_session):
    settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = 0
    model = EmbeddingModelFactory(options={"delay_seconds": 0.05, "batch_size": 2})
    kb = KnowledgeBaseFactory(project=owner.project, embedding_model=model,
                              chunk_strategy={"strategy": "by_section", "min_chars": 0, "max_chars": 2000,
                                              "overlap_chars": 0})
    documents = services.document_upload(kb=kb, files=[upload(f"policy-{i}.md", (FIXTURES / "policy.zh.md")
                                                               .read_bytes()) for i in range(4)])
    for document in documents:
        wait_for_status(document.pk, "completed")
    old = selectors.generation_active(kb=kb)
    services.knowledge_base_update(kb=kb, chunk_strategy={"strategy": "fixed", "min_chars": 0, "max_chars": 32,
                                                          "overlap_chars": 0})
    generation = services.knowledge_base_rebuild(kb=kb)

    seen = []
    while True:
        rows = list(selectors.chunk_queryset_searchable(kbs=[kb]).values_list("generation_id", flat=True))
        generations = set(rows)
        seen.append((len(rows), generations))
        assert rows, "a search saw no chunks"
        assert len(generations) == 1, "a search saw two generations at once"
        if generations == {generation.pk}:
            break
        assert not IndexGeneration.objects.filter(pk=generation.pk, status="failed").exists()
    counts = {next(iter(g)): n for n, g in seen}
    assert counts == {old.pk: 20, generation.pk: 28}
    assert len(seen) > 1
