"""Shared fixtures. Tests run against the real PostgreSQL+pgvector and Redis (embedded or from
DATABASE_URL/REDIS_URL); nothing here mocks the database or the broker."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from celery.signals import after_task_publish
from cryptography.fernet import Fernet
from django.conf import settings
from django.test import TransactionTestCase
from rest_framework.test import APIClient

from apps.core.health import broker_look_forget
from bailinghub.celery import app as celery_app
from bailinghub.embedded import redis_server_binary

# The whole suite's log output is scanned for credentials; one found fails the session.
pytest_plugins = ["tests.log_scanner", "pytester"]

# Each test session gets its own queue, so several suites (or `make run`'s worker) can share
# one Redis without taking each other's tasks.
celery_app.conf.task_default_queue = f"tests-{uuid.uuid4().hex[:12]}"
settings.KNOWLEDGE_LARGE_TASK_QUEUE = f"{celery_app.conf.task_default_queue}-large"
# The database the settings name, before a test database replaces it in the connection's settings.
CONFIGURED_DATABASE = settings.DATABASES["default"]["NAME"]


# Tests run with DEBUG off (Django's test runner), where tool providers' secrets need a configured
# key; one key per test session.
TOOL_SECRET_KEY = Fernet.generate_key().decode()


@pytest.fixture(autouse=True)
def tool_secret_keys(settings):
    settings.TOOL_SECRET_KEYS = [TOOL_SECRET_KEY]


@pytest.fixture(autouse=True)
def broker_looked_at_afresh():
    """Each test asks the broker itself (a process keeps its last look for BROKER_LOOK_SECONDS: one
    test's unreachable broker would be the next one's)."""
    broker_look_forget()
    yield
    broker_look_forget()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Operators log in in many tests; the production hasher's million rounds cost about a second
    each on two cores. Tests check who may do what, not the hasher."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _other_transactions_ended(connection, *, seconds: float = 60.0) -> None:
    """Waits (a while) until no other connection to the test database is inside a transaction: a
    test's thread or the session's worker finishing late holds locks the emptying would meet
    half-way. One that does not end in time is left to the lock's own wait, which fails loudly."""
    import time

    deadline = time.monotonic() + seconds
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL")
            if not cursor.fetchone()[0] or time.monotonic() > deadline:
                return
            time.sleep(0.05)


def _tables_emptied(database: str) -> None:
    """What `flush` does after a transactional test, by DELETE instead of one TRUNCATE of every
    table. TRUNCATE makes new files for each table and index (about 0.6 s for this schema, after
    every transactional test); DELETE of the few rows a test leaves costs milliseconds. Django's
    foreign keys are DEFERRABLE INITIALLY DEFERRED, so the order of the deletes does not matter
    inside the one transaction. The tables are checked empty afterwards (a trigger could have
    written one again: knowledge_chunk's keeps knowledge_chunksetversion); if one is not, the
    ordinary TRUNCATE runs. The post_migrate signal is sent as flush sends it (content types and
    permissions are made again)."""
    from django.core.management.color import no_style
    from django.core.management.sql import emit_post_migrate_signal, sql_flush
    from django.db import connections, transaction

    connection = connections[database]
    tables = sorted(connection.introspection.django_table_names(only_existing=True, include_views=False))
    if not tables:
        return
    quote = connection.ops.quote_name
    _other_transactions_ended(connection)
    with transaction.atomic(using=database), connection.cursor() as cursor:
        # As TRUNCATE's lock would, wait first for writes another connection still has open (a
        # test's thread finishing late): DELETE alone would not see their rows, and they would
        # appear in the next test. EXCLUSIVE, not SHARE ROW EXCLUSIVE: a transaction that has so
        # far only locked rows (SELECT ... FOR UPDATE) would pass the weaker lock, then wait for
        # it to write while the DELETE waits for its row lock — a deadlock (a fresh clone's
        # teardown of a turn test once). A connection stuck in its transaction fails here, loudly.
        cursor.execute("SET LOCAL lock_timeout = '120s'")
        cursor.execute(f"LOCK TABLE {', '.join(quote(table) for table in tables)} IN EXCLUSIVE MODE")
        for table in tables:
            cursor.execute(f"DELETE FROM {quote(table)}")  # noqa: S608 -- the models' own table names
        cursor.execute(" UNION ALL ".join(f"(SELECT 1 FROM {quote(table)} LIMIT 1)"  # noqa: S608 -- the same names
                                          for table in tables))
        if cursor.fetchall():
            connection.ops.execute_sql_flush(sql_flush(no_style(), connection, reset_sequences=False))
    emit_post_migrate_signal(0, False, database)


_django_fixture_teardown = TransactionTestCase._fixture_teardown


def _fixture_teardown(self) -> None:
    # Only the plain case (what every transactional test here is): a subset of apps, a serialized
    # rollback or a reset of sequences keeps Django's own teardown.
    if self.available_apps is not None or self.serialized_rollback or self.reset_sequences:
        return _django_fixture_teardown(self)
    for database in self._databases_names(include_mirrors=False):
        _tables_emptied(database)


TransactionTestCase._fixture_teardown = _fixture_teardown


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


# Whether this process's session worker is up: once started it stays up for the rest of the
# session and takes every task any later test queues.
_session_worker = {"running": False}


@pytest.fixture(scope="session")
def embedded_var_dir():
    """Makes a var dir for a separate embedded PostgreSQL and Redis, outside pytest's own temporary
    folder. Run as root, pgserver runs postgres as the user `pgserver` and opens the folders above
    its data directory to it; a pytest session starting meanwhile on the machine closes
    /tmp/pytest-of-root to its owner again, and the postgres of a test there could not restart
    ("could not access directory … Permission denied"). Removed at the end of the session."""
    made: list[Path] = []

    def make(name: str) -> Path:
        made.append(Path(tempfile.mkdtemp(prefix=f"bailing-{name}-")))
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def celery_worker_session(django_db_setup, django_db_blocker):
    """A real Celery worker (solo pool, in a thread) on the configured Redis broker.

    Tasks it runs see committed data only: use it from `transaction=True` tests.
    """
    from celery.contrib.testing.worker import start_worker

    with django_db_blocker.unblock(), start_worker(celery_app, pool="solo", perform_ping_check=False,
                                                   queues=[celery_app.conf.task_default_queue,
                                                           settings.KNOWLEDGE_LARGE_TASK_QUEUE],
                                                   shutdown_timeout=30) as worker:
        _session_worker["running"] = True
        try:
            yield worker
        finally:
            _session_worker["running"] = False


@pytest.fixture
def ingest_unconsumed(settings):
    """Ingestion tasks go to a queue no worker consumes, for a test that uploads a document and then
    sets its state by hand (or ingests it itself): once an earlier test in the process started the
    session's worker, that worker takes an upload's task within milliseconds and ingests the
    document before, or while, the test changes it. The queue is the test's own: its messages and
    kombu's binding of it are dropped from the broker at its end."""
    queue = f"test-ingest-unconsumed-{uuid.uuid4().hex[:8]}"
    settings.KNOWLEDGE_TASK_QUEUE = queue
    yield queue
    with celery_app.connection_for_write() as connection:
        connection.default_channel.client.delete(queue, f"_kombu.binding.{queue}")


@pytest.fixture(autouse=True)
def background_tasks_finished():
    """No test leaves a task running behind it while the session's worker is up: a task still
    writing when the test's teardown truncates the tables deadlocks with it (or writes into the
    next test). That includes a test that never asked for the worker but queued a task (an upload
    does) after an earlier test in this process started it: the worker takes it all the same (a
    TRUNCATE once deadlocked with such a task's row lock, tests/mcp's denied login).

    A task sent with a countdown (an ingest's retry, a heartbeat's next check) waits in the
    worker's timer, in none of those lists, or still in Redis; it is revoked (drop_scheduled_tasks:
    before the wait, and after it for those the test's last tasks sent), or it would run inside
    whichever test is under way when its time comes."""
    yield
    drop_scheduled_tasks()
    if not _session_worker["running"]:
        return
    import time

    from celery.worker import state

    queues = (celery_app.conf.task_default_queue, settings.KNOWLEDGE_LARGE_TASK_QUEUE)
    deadline = time.monotonic() + 120
    with celery_app.connection_for_write() as connection:
        client = connection.default_channel.client
        while state.active_requests or state.reserved_requests or any(client.llen(queue) for queue in queues):
            if time.monotonic() > deadline:
                raise AssertionError(f"background tasks still running after the test: {len(state.active_requests)}")
            time.sleep(0.05)
    drop_scheduled_tasks()


# Ids of the tasks this process sent with a countdown or an eta since the last drop_scheduled_tasks.
_sent_for_later: list[str] = []


@after_task_publish.connect(weak=False)
def _note_sent_for_later(sender=None, headers=None, **kwargs) -> None:
    if headers and headers.get("eta"):
        _sent_for_later.append(headers["id"])


def drop_scheduled_tasks() -> list[str]:
    """Revokes every task sent for later (countdown or eta) since the last call, whether the
    session's worker holds it in its timer, has yet to take it from Redis, or is not running yet
    (revocation is by id, in this process: the worker drops the task, unrun, when it meets it).
    Returns the ids revoked now (one revoked earlier stays in the timer until its time comes)."""
    from celery.worker import state

    waiting = [*_sent_for_later, *(request.id for request in list(state.scheduled_requests))]
    dropped = [task_id for task_id in dict.fromkeys(waiting) if task_id not in state.revoked]
    _sent_for_later.clear()
    for task_id in dropped:
        state.revoked.add(task_id)
    return dropped


@pytest.fixture(scope="session", autouse=True)
def database_free_before_teardown(django_db_setup, django_db_blocker):
    """Nothing but this thread is connected to the test database when it is dropped: an open
    connection blocks DROP DATABASE ("is being accessed by other users").

    - Hybrid searches outside a transaction run their vector channel on a worker thread with its
      own connection (apps.knowledge.pipeline.parallel): closed by its own thread.
    - The live server's request threads (tests/mcp, tests/browser) keep theirs for as long as a
      client keeps its HTTP connection alive (CONN_MAX_AGE 60): the tool dispatcher's pooled
      client does, to the demo shop mounted there. Those threads are the server's, not ours to
      join, so what is left connected after the session's servers and worker have stopped (they
      are torn down first: they were set up after this fixture) is ended from the server side."""
    yield
    from django.db import connection

    from apps.knowledge.pipeline import parallel

    parallel.shutdown()
    if connection.settings_dict["NAME"] == CONFIGURED_DATABASE:
        # No test used the database, so none was made: this one is every xdist worker's, and ending
        # its idle connections ended another worker's new one, mid-connect, in its own teardown.
        return
    # On a new connection of its own: this thread's may have been ended from the server side by a
    # test that drops connections as a database restart does (a fresh clone's teardown once failed
    # with AdminShutdown on it, every test passed).
    connection.close()
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        # Idle ones only: a connection still running a statement now is a leak of a test's own
        # work, and DROP DATABASE is left to say so.
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle'")


@pytest.fixture
def private_redis(tmp_path: Path):
    """A real redis-server of our own on a Unix socket, so the test may stop it."""
    sock = tmp_path / "r.sock"
    process = subprocess.Popen(
        [redis_server_binary(), "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not sock.exists():
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.02)
    yield process, f"unix://{sock}?db=0"
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)  # a stopped one takes its SIGTERM only once it runs again
        process.terminate()
        process.wait(10)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def broker_down():
    """The Celery app's broker moved to an address that refuses connections, for this test."""
    conf = celery_app.conf
    saved = conf.broker_url, conf.broker_write_url
    conf.broker_url = conf.broker_write_url = f"redis://127.0.0.1:{_closed_port()}/0"
    celery_app._pool = None
    celery_app.amqp._producer_pool = None
    try:
        yield
    finally:
        conf.broker_url, conf.broker_write_url = saved
        celery_app._pool = None
        celery_app.amqp._producer_pool = None
