"""Shared fixtures. Tests run against the real PostgreSQL+pgvector and Redis (embedded or from
DATABASE_URL/REDIS_URL); nothing here mocks the database or the broker."""

from __future__ import annotations

import uuid

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from rest_framework.test import APIClient

from bailinghub.celery import app as celery_app

# The whole suite's log output is scanned for credentials; one found fails the session.
pytest_plugins = ["tests.log_scanner", "pytester"]

# Each test session gets its own queue, so several suites (or `make run`'s worker) can share
# one Redis without taking each other's tasks.
celery_app.conf.task_default_queue = f"tests-{uuid.uuid4().hex[:12]}"
settings.KNOWLEDGE_LARGE_TASK_QUEUE = f"{celery_app.conf.task_default_queue}-large"


# Tests run with DEBUG off (Django's test runner), where tool providers' secrets need a configured
# key; one key per test session.
TOOL_SECRET_KEY = Fernet.generate_key().decode()


@pytest.fixture(autouse=True)
def tool_secret_keys(settings):
    settings.TOOL_SECRET_KEYS = [TOOL_SECRET_KEY]


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Operators log in in many tests; the production hasher's million rounds cost about a second
    each on two cores. Tests check who may do what, not the hasher."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


# Whether this process's session worker is up: once started it stays up for the rest of the
# session and takes every task any later test queues.
_session_worker = {"running": False}


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


@pytest.fixture(autouse=True)
def background_tasks_finished():
    """No test leaves a task running behind it while the session's worker is up: a task still
    writing when the test's teardown truncates the tables deadlocks with it (or writes into the
    next test). That includes a test that never asked for the worker but queued a task (an upload
    does) after an earlier test in this process started it: the worker takes it all the same (a
    TRUNCATE once deadlocked with such a task's row lock, tests/mcp's denied login)."""
    yield
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


@pytest.fixture(scope="session", autouse=True)
def search_worker_closed_before_teardown(django_db_setup):
    """Hybrid searches outside a transaction run their vector channel on a worker thread with its
    own connection (apps.knowledge.pipeline.parallel); close it before the test database is
    dropped, which an open connection would block."""
    yield
    from apps.knowledge.pipeline import parallel

    parallel.shutdown()
