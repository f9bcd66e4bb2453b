"""Fault injection: whatever died (a run mid-stage, beat, the web process before it enqueued,
Redis losing a queued message), a document or rebuild never stays running past its lease. Real
Redis and PostgreSQL; real `celery worker` processes where a worker's start matters."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from apps.knowledge import ingest, rebuild, services, watchdog
from apps.knowledge.dispatch import DOCUMENT_INGEST, KB_REBUILD
from apps.knowledge.leases import lease_stale_before, task_claim_token
from apps.knowledge.models import Chunk, Document, EmbeddingCache, IndexGeneration, KnowledgeBase
from apps.knowledge.runs import connection_broke
from bailinghub import embedded
from bailinghub.celery import app as celery_app
from tests.knowledge.database_outage import DatabaseOutage
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import EmbeddingsEndpoint, ingest_texts, upload, wait_for, wait_for_status
from tests.knowledge.test_worker import _database_url

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def _worker(queue: str, *, stale_seconds: int, watchdog_seconds: int = 60,
            settings: dict[str, str] | None = None, pool: str = "solo", concurrency: int = 1) -> subprocess.Popen:
    env = {
        **os.environ,
        "DEBUG": "true",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": django_settings.REDIS_URL,
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "CELERY_RESULT_BACKEND": django_settings.CELERY_RESULT_BACKEND,
        "KNOWLEDGE_TASK_QUEUE": queue,
        "KNOWLEDGE_HEARTBEAT_STALE_SECONDS": str(stale_seconds),
        "KNOWLEDGE_WATCHDOG_INTERVAL_SECONDS": str(watchdog_seconds),
        "OMP_NUM_THREADS": "1",
        **(settings or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bailinghub", "worker", "--pool", pool,
         "--concurrency", str(concurrency), "--queues", queue, "--without-mingle", "--without-gossip",
         "--without-heartbeat", "--loglevel", "WARNING"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _stop(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(30)
    except subprocess.TimeoutExpired:
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)


def _stale(document_id, seconds: int) -> bool:
    document = Document.objects.get(pk=document_id)
    moment = document.heartbeat_at or document.created_at
    return moment < timezone.now() - timedelta(seconds=seconds)


def test_a_task_redelivered_while_a_dead_runs_heartbeat_is_fresh_completes_after_its_lease(
        settings, celery_worker_session):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 2
    kb = KnowledgeBaseFactory()
    with transaction.atomic():
        [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
        # A run that died mid-parse a moment ago: its heartbeat is fresh. The upload's message,
        # sent at commit, plays the message redelivered to the next worker. No beat runs.
        Document.objects.filter(pk=document.pk).update(status=Document.Status.PARSING, run_token=uuid.uuid4(),
                                                       attempts=1, heartbeat_at=timezone.now())
    finished = wait_for_status(document.pk, "completed", "failed", timeout=60)
    assert (finished.status, finished.attempts, finished.run_token) == ("completed", 2, None)


def test_a_rebuild_redelivered_while_a_dead_runs_heartbeat_is_fresh_activates_after_its_lease(
        settings, celery_worker_session):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 2
    settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = 0
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"policy.md": "# 退款\n\n七天无理由退款。\n"})
    with transaction.atomic():
        generation = services.knowledge_base_rebuild(kb=kb)
        IndexGeneration.objects.filter(pk=generation.pk).update(run_token=uuid.uuid4(), attempts=1,
                                                                heartbeat_at=timezone.now())
    wait_for(lambda: IndexGeneration.objects.filter(pk=generation.pk).exclude(status="building").first(),
             timeout=60, message="the rebuild to finish")
    generation.refresh_from_db()
    assert (generation.status, generation.attempts) == ("active", 2)


def test_a_document_whose_queued_message_redis_lost_is_completed_when_a_worker_starts(settings):
    queue = f"{celery_app.conf.task_default_queue}-lost"
    settings.KNOWLEDGE_TASK_QUEUE = queue
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 1
    [document] = services.document_upload(kb=KnowledgeBaseFactory(), files=[upload("plain.txt")])
    with celery_app.connection_for_write() as broker:
        client = broker.default_channel.client
        assert client.llen(queue) == 1
        client.delete(queue)  # what a Redis restart without persistence does to the queue
    assert Document.objects.get(pk=document.pk).status == "queued"
    wait_for(lambda: _stale(document.pk, 1), timeout=10, message="the queued document's lease to run out")

    worker = _worker(queue, stale_seconds=1)
    try:
        finished = wait_for_status(document.pk, "completed", "failed", timeout=120)
    finally:
        _stop(worker)
    assert (finished.status, finished.attempts) == ("completed", 1)


def test_a_running_worker_hands_over_work_whose_message_was_lost_with_beat_dead(settings):
    """No beat, and the worker already past its start: its own watchdog timer re-queues a document
    whose message never reached the broker (or was lost there)."""
    queue = f"{celery_app.conf.task_default_queue}-timer"
    settings.KNOWLEDGE_TASK_QUEUE = queue
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 1
    kb = KnowledgeBaseFactory()
    worker = _worker(queue, stale_seconds=1, watchdog_seconds=1)
    try:
        [first] = services.document_upload(kb=kb, files=[upload("first.txt", b"first document text")])
        assert wait_for_status(first.pk, "completed", "failed", timeout=120).status == "completed"  # it runs
        with transaction.atomic():
            [lost] = services.document_upload(kb=kb, files=[upload("second.txt", b"second document text")])
            connection.run_on_commit.clear()  # its message never reaches the broker
        finished = wait_for_status(lost.pk, "completed", "failed", timeout=120)
    finally:
        _stop(worker)
    assert (finished.status, finished.attempts) == ("completed", 1)


def test_a_document_committed_by_a_web_process_that_died_before_enqueueing_is_completed(
        settings, celery_worker_session):

    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 1
    with transaction.atomic():
        [document] = services.document_upload(kb=KnowledgeBaseFactory(), files=[upload("plain.txt")])
        connection.run_on_commit.clear()  # the process dies right after COMMIT: nothing is sent
    assert Document.objects.get(pk=document.pk).status == "pending"
    wait_for(lambda: _stale(document.pk, 1), timeout=10, message="the pending document's lease to run out")

    assert watchdog.knowledge_watchdog()["requeued"] == 1  # what beat runs every minute
    finished = wait_for_status(document.pk, "completed", "failed", timeout=60)
    assert (finished.status, finished.attempts) == ("completed", 1)


class _PrivateRedis:
    """A redis-server of this test's own, on a Unix socket, to kill and start again (the session's
    Redis serves the other tests)."""

    def __init__(self, directory: Path):
        self.socket = directory / "redis.sock"
        self.url = f"redis+socket://{self.socket}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [embedded.redis_server_binary(), "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm",
             "700", "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.socket.exists, timeout=10, message="redis-server to listen")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def _uploaded_unsent(kb, name: str, data: bytes) -> Document:
    with transaction.atomic():
        [document] = services.document_upload(kb=kb, files=[upload(name, data)])
        connection.run_on_commit.clear()  # sent below, to the test's own broker
    return document


def _send_to(broker_url: str, document: Document, queue: str) -> None:
    with celery_app.connection_for_write(broker_url) as broker:
        celery_app.send_task(DOCUMENT_INGEST, args=[str(document.pk)], kwargs={"run_token": None}, queue=queue,
                             connection=broker)


def test_a_worker_survives_a_redis_restart_while_its_task_holds_an_unacknowledged_message(settings):
    """kombu 5.7 stopped the worker here ("Unrecoverable error: AttributeError ... 'hostname'", see
    bailinghub.broker): it must consume again once Redis is back, and the running task finish."""
    queue = f"{celery_app.conf.task_default_queue}-redis-restart"
    directory = Path(tempfile.mkdtemp(prefix="redis-restart-", dir="/tmp"))
    redis = _PrivateRedis(directory)
    redis.start()
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options={"delay_seconds": 0.2, "batch_size": 1}))
    # Two processes: with one free, the worker is waiting on Redis (BRPOP) and sees it go at once.
    worker = _worker(queue, stale_seconds=600, pool="prefork", concurrency=2,
                     settings={"CELERY_BROKER_URL": redis.url, "CELERY_RESULT_BACKEND": redis.url})
    try:
        running = _uploaded_unsent(kb, "sections.md", _sections(12))
        _send_to(redis.url, running, queue)
        wait_for(lambda: Document.objects.filter(pk=running.pk, status="embedding", progress_done__gte=2).exists(),
                 timeout=120, message="the worker to be embedding")
        redis.kill()
        redis.start()
        later = _uploaded_unsent(kb, "later.txt", b"a document sent once Redis is back")
        _send_to(redis.url, later, queue)
        finished = wait_for_status(later.pk, "completed", "failed", timeout=60)
        alive = worker.poll() is None
    finally:
        _stop(worker)
        redis.kill()
        shutil.rmtree(directory, ignore_errors=True)
    assert (alive, finished.status, finished.attempts) == (True, "completed", 1)
    running.refresh_from_db()
    assert (running.status, running.attempts) == ("completed", 1)
    assert Chunk.objects.filter(document=running, kind=Chunk.Kind.CHILD).count() == 12


def _ingest_in_thread(document) -> tuple[threading.Thread, dict]:
    """The document's ingestion started in a thread (a worker beside the test); its result lands in
    the dict under "result"."""
    from apps.knowledge import ingest

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = ingest.document_ingest(document_id=document.pk)
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    return worker, outcome


def test_a_document_deleted_while_its_pdf_is_parsed_stops_the_parse_at_its_next_heartbeat(settings):
    from tests.knowledge.test_ingest_limits import _pdf, _stored, _text_ops

    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 1
    settings.KNOWLEDGE_MAX_TEXT_RATIO = 10_000
    document = _stored(KnowledgeBaseFactory(), "long.pdf", "pdf", _pdf(content=_text_ops(2_000), pages=200))
    worker, outcome = _ingest_in_thread(document)
    try:
        wait_for(lambda: Document.objects.filter(pk=document.pk, status="parsing").exists(), timeout=30,
                 message="the parse to start")
        services.document_delete(document=document)
    finally:
        worker.join(120)
    assert outcome == {"result": "lease_lost"}
    assert not Document.objects.filter(pk=document.pk).exists()


def _waiting_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row and row[0])


def test_a_knowledge_base_deleted_while_a_worker_writes_chunks_waits_for_it_and_leaves_none(ingest_unconsumed):
    """The test plays the worker: the upload's own task goes where no worker takes it."""
    from apps.knowledge import selectors
    from apps.knowledge.models import Chunk, KnowledgeBase
    from apps.knowledge.pipeline.chunkers import document_chunk
    from apps.knowledge.pipeline.index import chunks_create
    from apps.knowledge.pipeline.parsers import document_parse
    from apps.knowledge.pipeline.strategy import strategy_from_snapshot
    from tests.knowledge.helpers import FIXTURES

    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    generation = selectors.generation_active(kb=kb)
    chunked = document_chunk(parsed=document_parse(file_type="markdown", data=(FIXTURES / "policy.zh.md").read_bytes()),
                             strategy=strategy_from_snapshot(generation.chunk_strategy))
    deleter: dict = {}

    def delete() -> None:
        deleter["pid"] = connection.cursor().connection.info.backend_pid
        try:
            services.knowledge_base_delete(kb=kb)
        except Exception as exc:
            deleter["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=delete)
    try:
        # What the pipeline does when it creates a document's chunks (ingest._document_chunks_ensure).
        with transaction.atomic():
            locked = Document.objects.select_for_update(of=("self",)).get(pk=document.pk)
            thread.start()
            wait_for(lambda: "pid" in deleter and _waiting_on_a_lock(deleter["pid"]), timeout=30,
                     message="the deletion to wait for the document")
            chunks_create(generation=generation, document=locked, chunked=chunked)
    finally:
        thread.join(60)
    assert "error" not in deleter
    assert not KnowledgeBase.objects.filter(pk=kb.pk).exists()
    assert Chunk.objects.filter(document_id=document.pk).count() == 0


def _connections_drop() -> int:
    """End every other connection to the test database, as a database restart or a failover does
    (the server is back at once)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


def test_a_document_whose_database_connection_drops_mid_embedding_completes_on_its_own(
        settings, celery_worker_session):
    """Without spending an attempt: one attempt is all it has here."""
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 4
    settings.KNOWLEDGE_MAX_ATTEMPTS = 1
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options={"delay_seconds": 0.2, "batch_size": 1}))
    text = "\n\n".join(f"## 第{i}节\n\n第{i}条规定的内容。" for i in range(12))
    [document] = services.document_upload(kb=kb, files=[upload("sections.md", f"# 规章\n\n{text}\n".encode())])
    wait_for(lambda: Document.objects.filter(pk=document.pk, status="embedding", progress_done__gte=2).exists(),
             message="the worker to be embedding")
    assert _connections_drop() >= 1
    finished = wait_for_status(document.pk, "completed", "failed")
    assert (finished.status, finished.error_code, finished.attempts, finished.connection_losses) == (
        "completed", "", 1, 1)
    children = Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD)
    assert sorted(children.values_list("index", flat=True)) == list(range(12))


def test_a_rebuild_whose_database_connection_drops_mid_build_activates_on_its_own(settings, celery_worker_session):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 4
    settings.KNOWLEDGE_MAX_ATTEMPTS = 1
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options={"delay_seconds": 0.2, "batch_size": 1}))
    ingest_texts(kb, {"rules.md": "# 规章\n\n" + "\n\n".join(f"## 第{i}节\n\n第{i}条规定的内容。" for i in range(12))})
    EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).delete()  # the rebuild embeds again
    generation = services.knowledge_base_rebuild(kb=kb)
    wait_for(lambda: IndexGeneration.objects.filter(pk=generation.pk, status="building", progress_total=1).exists()
             and Chunk.objects.filter(generation=generation).exists(), message="the rebuild to be embedding")
    assert _connections_drop() >= 1
    wait_for(lambda: IndexGeneration.objects.filter(pk=generation.pk).exclude(status="building").first(),
             message="the rebuild to finish")
    generation.refresh_from_db()
    assert (generation.status, generation.error_code, generation.attempts, generation.connection_losses) == (
        "active", "", 1, 1)
    assert IndexGeneration.objects.filter(knowledge_base=kb, status="active").count() == 1


@pytest.fixture
def database_outage():
    """A forwarder through which one worker reaches the test database, to stop and start for it
    alone (tests.knowledge.database_outage); a short directory: a socket path has 107 bytes."""
    directory = Path(tempfile.mkdtemp(prefix="pg-outage-", dir="/tmp"))
    outage = DatabaseOutage(directory)
    outage.up()
    yield outage
    outage.down()
    shutil.rmtree(directory, ignore_errors=True)


def _sections(count: int) -> bytes:
    text = "\n\n".join(f"## 第{i}节\n\n第{i}条规定的内容。" for i in range(count))
    return f"# 规章\n\n{text}\n".encode()


# The worker's lease (8 s) outlasts the outage (3 s) and its wait for the database (20 s) outlasts
# both; with one attempt, a run that waited for its lease to run out would fail ingest_stalled.
STALE_FOR_AN_HOUR = 3600  # a test that waited the dead run's lease out would time out instead
_OUTAGE_WORKER = {"KNOWLEDGE_MAX_ATTEMPTS": "1", "KNOWLEDGE_DATABASE_WAIT_SECONDS": "20"}


@contextmanager
def _worker_behind(database_outage, settings, queue_suffix: str, *, worker_settings: dict[str, str] | None = None,
                   **worker) -> Iterator[KnowledgeBase]:
    """A KB embedding a passage every 0.2 s, and a worker of its own queue whose database is
    `database_outage`'s (stopped at the end)."""
    queue = f"{celery_app.conf.task_default_queue}-{queue_suffix}"
    settings.KNOWLEDGE_TASK_QUEUE = queue
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options={"delay_seconds": 0.2, "batch_size": 1}))
    environment = {**_OUTAGE_WORKER, **(worker_settings or {}), "DATABASE_URL": database_outage.url}
    process = _worker(queue, settings=environment, **worker)
    try:
        yield kb
    finally:
        _stop(process)


def _outage(database_outage, seconds: float = 3) -> None:
    database_outage.down()
    time.sleep(seconds)
    database_outage.up()


def test_a_document_whose_database_stops_for_a_moment_mid_embedding_completes_without_spending_an_attempt(
        settings, database_outage):
    with _worker_behind(database_outage, settings, "outage", stale_seconds=8, watchdog_seconds=1) as kb:
        [document] = services.document_upload(kb=kb, files=[upload("sections.md", _sections(12))])
        wait_for(lambda: Document.objects.filter(pk=document.pk, status="embedding", progress_done__gte=2).exists(),
                 timeout=120, message="the worker to be embedding")
        _outage(database_outage)
        finished = wait_for_status(document.pk, "completed", "failed", timeout=120)
    assert (finished.status, finished.error_code, finished.attempts, finished.connection_losses) == (
        "completed", "", 1, 1)
    children = Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD)
    assert sorted(children.values_list("index", flat=True)) == list(range(12))


def test_a_document_whose_database_stops_for_longer_than_its_wait_goes_on_once_it_is_back(settings, database_outage):
    """Down longer than KNOWLEDGE_DATABASE_WAIT_SECONDS (a failover), the run left the work to the
    watchdog: five minutes after the database was back, and an attempt spent. Here the watchdog
    would take an hour."""
    # Down 9 s: past the run's wait (4 s, from when it meets the outage), within its continuation's
    # (4 s later, waiting 4 s more before it claims).
    worker = {"KNOWLEDGE_DATABASE_WAIT_SECONDS": "4"}
    with _worker_behind(database_outage, settings, "long-outage", stale_seconds=STALE_FOR_AN_HOUR,
                        worker_settings=worker) as kb:
        [document] = services.document_upload(kb=kb, files=[upload("sections.md", _sections(12))])
        wait_for(lambda: Document.objects.filter(pk=document.pk, status="embedding", progress_done__gte=2).exists(),
                 timeout=120, message="the worker to be embedding")
        _outage(database_outage, seconds=9)
        finished = wait_for_status(document.pk, "completed", "failed", timeout=120)
    # The lost connection is counted (by the continuation's claim), the attempt is not spent.
    assert (finished.status, finished.error_code, finished.attempts, finished.connection_losses) == (
        "completed", "", 1, 1)
    children = Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD)
    assert sorted(children.values_list("index", flat=True)) == list(range(12))


def test_a_rebuild_whose_database_stops_for_a_moment_activates_without_spending_an_attempt(
        settings, database_outage):
    with _worker_behind(database_outage, settings, "outage-rebuild", stale_seconds=8, watchdog_seconds=1) as kb:
        [document] = services.document_upload(kb=kb, files=[upload("sections.md", _sections(12))])
        assert wait_for_status(document.pk, "completed", "failed", timeout=120).status == "completed"
        active = IndexGeneration.objects.get(knowledge_base=kb, status="active")
        EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).delete()  # the rebuild embeds again
        generation = services.knowledge_base_rebuild(kb=kb)
        wait_for(lambda: Chunk.objects.filter(generation=generation, embedding__isnull=True).exists()
                 and EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).count() >= 2,
                 timeout=120, message="the rebuild to be embedding")
        _outage(database_outage)
        wait_for(lambda: IndexGeneration.objects.filter(pk=generation.pk).exclude(status="building").first(),
                 timeout=120, message="the rebuild to finish")
    generation.refresh_from_db()
    assert (generation.status, generation.error_code, generation.attempts, generation.connection_losses) == (
        "active", "", 1, 1)
    active.refresh_from_db()
    assert active.status == "retired"
    assert Chunk.objects.filter(generation=generation, kind=Chunk.Kind.CHILD).count() == 12


def test_a_document_delivered_while_its_workers_database_is_stopped_is_claimed_once_it_is_back(
        settings, database_outage):
    """The task waits for the database before it claims: failed there, its message would be gone,
    and the document left queued until the watchdog found its lease stale (here: 10 minutes)."""
    with _worker_behind(database_outage, settings, "outage-claim", stale_seconds=600) as kb:
        queue = settings.KNOWLEDGE_TASK_QUEUE
        [first] = services.document_upload(kb=kb, files=[upload("first.txt", b"first document text")])
        assert wait_for_status(first.pk, "completed", "failed", timeout=120).status == "completed"  # it runs
        database_outage.down()
        [document] = services.document_upload(kb=kb, files=[upload("second.txt", b"second document text")])
        with celery_app.connection_for_write() as broker:
            client = broker.default_channel.client
            wait_for(lambda: client.llen(queue) == 0, message="the worker to take the message")
        time.sleep(3)
        database_outage.up()
        finished = wait_for_status(document.pk, "completed", "failed", timeout=60)
    assert (finished.status, finished.attempts, finished.connection_losses) == ("completed", 1, 0)


def _connection_broken_in_every_run(rows, pk) -> set:
    """Drop the database connections once in each run that claims row `pk` of `rows`, as soon as its
    claim is committed, until the row is no longer in progress; the run tokens it broke."""
    broken: set = set()

    def settled() -> bool:
        row = rows.filter(pk=pk).values("status", "run_token").get()
        if row["status"] in ("completed", "failed", "active", "awaiting_confirmation"):
            return True
        if row["run_token"] is not None and row["run_token"] not in broken:
            broken.add(row["run_token"])
            _connections_drop()
        return False

    wait_for(settled, timeout=120, message="the work to settle while every run loses its connection")
    return broken


def test_a_document_whose_database_connection_breaks_in_every_run_fails_naming_the_database(
        settings, celery_worker_session):
    """Connection losses have their own bound: the document is not sent round for ever, and the
    operator is told it was the database, not the file; a retry once it is stable completes it."""
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 4
    settings.KNOWLEDGE_MAX_ATTEMPTS = 2
    settings.KNOWLEDGE_MAX_CONNECTION_LOSSES = 3
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options={"delay_seconds": 0.2, "batch_size": 1}))
    text = "\n\n".join(f"## 第{i}节\n\n第{i}条规定的内容。" for i in range(12))
    [document] = services.document_upload(kb=kb, files=[upload("sections.md", f"# 规章\n\n{text}\n".encode())])

    broken = _connection_broken_in_every_run(Document.objects, document.pk)

    failed = Document.objects.get(pk=document.pk)
    assert (len(broken), failed.status, failed.error_code, failed.attempts, failed.connection_losses,
            failed.run_token) == (3, "failed", "ingest_connection_lost", 1, 3, None)
    assert failed.error_message.startswith("The database connection was lost 3 times while this document was "
                                           "ingested")
    assert failed.error_message.endswith("Retry the document once the database is stable.")

    services.document_retry(document=failed)
    finished = wait_for_status(document.pk, "completed", "failed")
    assert (finished.status, finished.error_code, finished.attempts, finished.connection_losses) == (
        "completed", "", 1, 0)


def test_a_rebuild_whose_database_connection_breaks_in_every_run_fails_and_keeps_the_active_index(
        settings, celery_worker_session):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 4
    settings.KNOWLEDGE_MAX_ATTEMPTS = 2
    settings.KNOWLEDGE_MAX_CONNECTION_LOSSES = 3
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options={"delay_seconds": 0.2, "batch_size": 1}))
    ingest_texts(kb, {"rules.md": "# 规章\n\n" + "\n\n".join(f"## 第{i}节\n\n第{i}条规定的内容。" for i in range(12))})
    active = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).delete()  # the rebuild embeds again
    generation = services.knowledge_base_rebuild(kb=kb)

    broken = _connection_broken_in_every_run(IndexGeneration.objects, generation.pk)

    generation.refresh_from_db()
    assert (len(broken), generation.status, generation.error_code, generation.attempts,
            generation.connection_losses) == (3, "failed", "rebuild_connection_lost", 1, 3)
    assert generation.error_message.startswith("The database connection was lost 3 times while the index was "
                                               "rebuilt")
    assert list(IndexGeneration.objects.filter(knowledge_base=kb, status="active")) == [active]
    assert not Chunk.objects.filter(generation=generation).exists()


def test_a_statement_timeout_is_not_taken_for_a_lost_connection():
    """It would time out again at every attempt: the document fails at once, with the reason logged."""
    with pytest.raises(OperationalError) as raised, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = 1")
        cursor.execute("SELECT pg_sleep(1)")
    assert (raised.value.__cause__.sqlstate, connection_broke(raised.value)) == ("57014", False)


class _HungEmbeddings(EmbeddingsEndpoint):
    """An embeddings endpoint that takes every request and never answers in time."""

    def answer(self, path, body, headers):
        time.sleep(3)
        return super().answer(path, body, headers)


def test_an_embeddings_endpoint_that_hangs_fails_the_document_before_its_lease_runs_out(settings):
    """Retrying a hung endpoint outlasted the lease (the defaults: 6 attempts of 60 s, 6.5 minutes
    of a 5-minute lease), so the watchdog handed the document to a second worker while the first
    still waited, and so on: the endpoint's failure was never recorded, and the document failed
    out of attempts as if its worker had been killed."""
    from tests.knowledge.test_ingest_limits import _stored

    # Retries may take half the lease: two attempts of 1.5 s in 3 s, with 3 s to spare for parsing
    # on a loaded machine before the watchdog would take the document (2 s of lease once left none).
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 6
    with _HungEmbeddings() as endpoint:
        model = EmbeddingModelFactory(provider="openai", options={
            "base_url": endpoint.url, "timeout_seconds": 1.5, "max_retries": 5, "backoff_seconds": 0})
        # Stored without the upload's dispatch: a Celery worker left running by an earlier test
        # took the queued ingestion beside this one ("rescheduled").
        document = _stored(KnowledgeBaseFactory(embedding_model=model), "plain.txt", "txt",
                           "退货政策：质量问题三十天内可退。".encode())
        worker, outcome = _ingest_in_thread(document)
        try:
            while worker.is_alive():  # the watchdog, on a short timer
                watchdog.knowledge_watchdog()
                worker.join(0.1)
        finally:
            worker.join(60)
    document.refresh_from_db()
    assert outcome == {"result": "failed"}
    assert (document.status, document.error_code, document.attempts) == ("failed", "embedding_failed", 1)
    assert document.error_message.startswith("The embedding endpoint kept failing after 2 attempts (connection "
                                             "failed: timed out)")


def _time_limit_reached(worker: subprocess.Popen) -> None:
    """What a prefork pool does to the process running a task that reaches its soft time limit
    (SIGUSR1: SoftTimeLimitExceeded is raised in the task). Sent by the test rather than waited
    for: with a 2 s limit the pool let the task run 12 s in one run of this file out of two here
    (celery/celery#6873 reports the same)."""
    [child] = wait_for(lambda: Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split(),
                       message="the worker's pool process")
    os.kill(int(child), signal.SIGUSR1)


# make run's and compose's pool, and the default limit, so that the message is known.
TIME_LIMITED = {"CELERY_TASK_SOFT_TIME_LIMIT": "3300", "CELERY_TASK_TIME_LIMIT": "3600"}
SLOW_EMBEDDING = {"delay_seconds": 0.2, "batch_size": 1}
RULES = "# 规章\n\n" + "\n\n".join(f"## 第{i}节\n\n第{i}条规定的内容。" for i in range(40))


def test_a_document_past_its_tasks_time_limit_fails_naming_the_limit(settings):
    """It failed as an unexpected error ("retry the document, and report it if it recurs"): retried,
    it ran into the same limit again."""
    queue = f"{celery_app.conf.task_default_queue}-limit"
    settings.KNOWLEDGE_TASK_QUEUE = queue
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options=SLOW_EMBEDDING))
    [document] = services.document_upload(kb=kb, files=[upload("rules.md", RULES.encode())])
    worker = _worker(queue, stale_seconds=300, settings=TIME_LIMITED, pool="prefork")
    try:
        wait_for(lambda: Document.objects.filter(pk=document.pk, status="embedding", progress_done__gte=2).exists(),
                 timeout=120, message="the worker to be embedding")
        _time_limit_reached(worker)
        finished = wait_for_status(document.pk, "completed", "failed", timeout=120)
    finally:
        _stop(worker)
    assert (finished.status, finished.error_code, finished.attempts, finished.run_token) == (
        "failed", "ingest_time_limit", 1, None)
    assert finished.error_message == (
        "The pipeline ran past its task's time limit (CELERY_TASK_SOFT_TIME_LIMIT = 3,300 s) while embedding it. "
        "Embedding goes on in a new task every KNOWLEDGE_TASK_SLICE_SECONDS (600 s), which must be well under the "
        "limit; if it is, one batch took this long: the embedding model is too slow or does not answer.")
    assert 2 <= finished.progress_done < 40
    assert not Chunk.objects.filter(document=document, embedding__isnull=False).exists()


def test_a_rebuild_past_its_tasks_time_limit_fails_naming_the_limit_and_keeps_the_active_index(settings):
    queue = f"{celery_app.conf.task_default_queue}-limit"
    settings.KNOWLEDGE_TASK_QUEUE = queue
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options=SLOW_EMBEDDING))
    ingest_texts(kb, {"rules.md": RULES})
    active = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    searchable = sorted(Chunk.objects.filter(generation=active).values_list("pk", flat=True))
    EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).delete()  # the rebuild embeds again
    generation = services.knowledge_base_rebuild(kb=kb)
    worker = _worker(queue, stale_seconds=300, settings=TIME_LIMITED, pool="prefork")
    try:
        wait_for(lambda: EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).count() >= 2,
                 timeout=120, message="the rebuild to be embedding")
        _time_limit_reached(worker)
        wait_for(lambda: IndexGeneration.objects.filter(pk=generation.pk).exclude(status="building").first(),
                 timeout=120, message="the rebuild to finish")
    finally:
        _stop(worker)
    generation.refresh_from_db()
    assert (generation.status, generation.error_code, generation.attempts, generation.run_token) == (
        "failed", "rebuild_time_limit", 1, None)
    assert generation.error_message == (
        "The rebuild ran past its task's time limit (CELERY_TASK_SOFT_TIME_LIMIT = 3,300 s); the active index is "
        "unchanged. Embedding goes on in a new task every KNOWLEDGE_TASK_SLICE_SECONDS (600 s), which must be well "
        "under the limit; otherwise a document took this long to convert, or its index to build: raise the limit "
        "(and CELERY_TASK_TIME_LIMIT), then start the rebuild again.")
    assert IndexGeneration.objects.get(knowledge_base=kb, status="active").pk == active.pk
    assert sorted(Chunk.objects.filter(generation=active).values_list("pk", flat=True)) == searchable
    assert not Chunk.objects.filter(generation=generation).exists()


# A worker's pool process that dies under a task (kill -9, out of memory): the worker's main process
# gives the run's lease back. (One killed at the hard time limit is in test_pipeline_request: in a
# whole suite's run the pool once let a task with a 5 s limit run its 20 s to the end.)


def _pool_process(worker: subprocess.Popen) -> int:
    [child] = wait_for(lambda: Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split(),
                       message="the worker's pool process")
    return int(child)


def test_a_document_whose_pool_process_is_killed_is_claimed_again_at_once_not_after_the_dead_runs_lease(settings):
    """Celery hands the message out again at once; the new task met the dead run's lease, live for
    five more minutes by default, and waited it out (the console showed "embedding 11 %")."""
    queue = f"{celery_app.conf.task_default_queue}-lost"
    settings.KNOWLEDGE_TASK_QUEUE = queue
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options=SLOW_EMBEDDING))
    [document] = services.document_upload(kb=kb, files=[upload("rules.md", RULES.encode())])
    worker = _worker(queue, stale_seconds=STALE_FOR_AN_HOUR, pool="prefork")
    try:
        wait_for(lambda: Document.objects.filter(pk=document.pk, status="embedding", progress_done__gte=2).exists(),
                 timeout=120, message="the worker to be embedding")
        os.kill(_pool_process(worker), signal.SIGKILL)
        finished = wait_for_status(document.pk, "completed", "failed", timeout=120)
    finally:
        _stop(worker)
    assert (finished.status, finished.attempts, finished.run_token, finished.progress_done) == (
        "completed", 2, None, 40)
    assert Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD, embedding__isnull=False).count() == 40


def test_a_rebuild_whose_pool_process_is_killed_is_claimed_again_at_once(settings):
    queue = f"{celery_app.conf.task_default_queue}-lost"
    settings.KNOWLEDGE_TASK_QUEUE = queue
    kb = KnowledgeBaseFactory(embedding_model=EmbeddingModelFactory(options=SLOW_EMBEDDING))
    ingest_texts(kb, {"rules.md": RULES})
    EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).delete()  # the rebuild embeds again
    generation = services.knowledge_base_rebuild(kb=kb)
    worker = _worker(queue, stale_seconds=STALE_FOR_AN_HOUR, pool="prefork")
    try:
        wait_for(lambda: EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).count() >= 2,
                 timeout=120, message="the rebuild to be embedding")
        os.kill(_pool_process(worker), signal.SIGKILL)
        wait_for(lambda: IndexGeneration.objects.filter(pk=generation.pk).exclude(status="building").first(),
                 timeout=120, message="the rebuild to finish")
    finally:
        _stop(worker)
    generation.refresh_from_db()
    assert (generation.status, generation.attempts, generation.run_token) == ("active", 2, None)
    assert Chunk.objects.filter(generation=generation, kind=Chunk.Kind.CHILD, embedding__isnull=False).count() == 40


def _held(document, *, token, attempts: int) -> None:
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, run_token=token,
                                                   attempts=attempts, heartbeat_at=timezone.now())


def test_a_lost_tasks_own_claim_is_given_back_and_claimed_again_with_one_attempt_more(ingest_unconsumed):
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("notes.txt", b"A note on orders.")])
    claim = ingest._document_claim(document.pk, None, "task-1")
    assert claim.token == task_claim_token("task-1", 1)

    assert watchdog.pipeline_run_lost(task_name=DOCUMENT_INGEST, object_id=document.pk, task_id="task-1") is True
    given_back = Document.objects.get(pk=document.pk)
    assert (given_back.run_token, given_back.attempts) == (None, 1)
    assert given_back.heartbeat_at < lease_stale_before()
    again = ingest._document_claim(document.pk, None, "task-1")  # the same message, handed out again
    assert (again.token, again.busy_until) == (task_claim_token("task-1", 2), None)
    assert Document.objects.get(pk=document.pk).attempts == 2


def test_a_continuing_task_takes_a_token_of_its_own_and_given_back_is_claimed_with_one_attempt_more(
        ingest_unconsumed):
    """A continuation's message carries its run's token: handed out again after its process died,
    it went on as that run, spending no attempt — a slice that killed its worker did so for ever."""
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("notes.txt", b"A note on orders.")])
    run = uuid.uuid4()
    _held(document, token=run, attempts=1)
    continuing = ingest._document_claim(document.pk, str(run), "task-2")
    assert continuing.token == task_claim_token("task-2", 1)
    assert Document.objects.get(pk=document.pk).attempts == 1

    # Handed out again, with no word from the worker's main process, it is not that run.
    assert ingest._document_claim(document.pk, str(run), "task-2").busy_until is not None
    assert watchdog.pipeline_run_lost(task_name=DOCUMENT_INGEST, object_id=document.pk, task_id="task-2") is True
    again = ingest._document_claim(document.pk, str(run), "task-2")
    assert (again.token, again.busy_until) == (task_claim_token("task-2", 2), None)
    assert Document.objects.get(pk=document.pk).attempts == 2


def test_a_lost_or_killed_task_that_did_not_hold_the_work_leaves_the_run_holding_it_alone(ingest_unconsumed):
    """A task that found another run's lease live (and was sending itself again for later) died:
    that run goes on."""
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("notes.txt", b"A note on orders.")])
    run = uuid.uuid4()
    _held(document, token=run, attempts=1)
    before = Document.objects.values("status", "run_token", "attempts", "heartbeat_at", "error_code").get(
        pk=document.pk)

    assert watchdog.pipeline_run_lost(task_name=DOCUMENT_INGEST, object_id=document.pk, task_id="task-3") is False
    assert watchdog.pipeline_run_killed(task_name=DOCUMENT_INGEST, object_id=document.pk, task_id="task-3",
                                      seconds=3600) is False
    assert Document.objects.values("status", "run_token", "attempts", "heartbeat_at", "error_code").get(
        pk=document.pk) == before


def test_a_rebuild_killed_at_the_hard_time_limit_fails_naming_it_and_keeps_the_active_index(ingest_unconsumed):
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"policy.md": "# 退款\n\n七天无理由退款。\n"})
    active = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    generation = services.knowledge_base_rebuild(kb=kb)
    assert rebuild._generation_claim(generation.pk, None, "task-4").token == task_claim_token("task-4", 1)

    assert watchdog.pipeline_run_killed(task_name=KB_REBUILD, object_id=generation.pk, task_id="task-4",
                                      seconds=3600) is True
    generation.refresh_from_db()
    assert (generation.status, generation.error_code, generation.run_token) == ("failed", "rebuild_time_limit", None)
    assert generation.error_message == (
        "The rebuild ran past its task's hard time limit (CELERY_TASK_TIME_LIMIT = 3,600 s); the active index is "
        "unchanged. Its worker process was stopped: the soft limit (CELERY_TASK_SOFT_TIME_LIMIT) is not set below "
        "that one, or could not interrupt the run (stuck inside one call). Embedding goes on in a new task every "
        "KNOWLEDGE_TASK_SLICE_SECONDS (600 s), which must be well under the limit; otherwise a document took this "
        "long to convert, or its index to build: raise the limit, with CELERY_TASK_SOFT_TIME_LIMIT below it, then "
        "start the rebuild again.")
    assert IndexGeneration.objects.get(knowledge_base=kb, status="active").pk == active.pk


def _continuation_claimed(settings, losses_before: int):
    settings.KNOWLEDGE_MAX_CONNECTION_LOSSES = 10
    [document] = services.document_upload(kb=KnowledgeBaseFactory(), files=[upload("notes.txt", b"A note.")])
    run = uuid.uuid4()
    _held(document, token=run, attempts=1)
    Document.objects.filter(pk=document.pk).update(connection_losses=losses_before)
    claim = ingest._document_claim(document.pk, str(run), "task-5", connection_lost=True)
    return claim, Document.objects.get(pk=document.pk)


def test_a_continuation_sent_while_the_database_was_down_counts_the_lost_connection(ingest_unconsumed, settings):
    """It goes on as its run, spending no attempt; uncounted, work that took its own database down
    each time (an index build running the server out of memory, say) went round for ever."""
    claim, after = _continuation_claimed(settings, losses_before=0)
    assert (claim.token, after.status, after.attempts, after.connection_losses) == (
        task_claim_token("task-5", 1), "embedding", 1, 1)


def test_a_continuation_past_the_connection_losses_allowed_fails_naming_the_database(ingest_unconsumed, settings):
    claim, after = _continuation_claimed(settings, losses_before=9)
    assert (claim.token, after.status, after.error_code, after.connection_losses) == (
        None, "failed", "ingest_connection_lost", 10)
