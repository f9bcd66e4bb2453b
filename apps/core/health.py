"""Liveness and readiness checks."""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor


def check_database() -> str:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:  # any driver error means "not ready"; the detail stays in the log
        return "unavailable"
    return "ok"


def check_redis() -> str:
    return _ping(settings.REDIS_URL)


def _ping(url: str) -> str:
    """ok | unavailable: whether the Redis at `url` answers within a second."""
    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    except (redis.RedisError, OSError):
        return "unavailable"
    finally:
        client.close()
    return "ok"


# How long a process trusts its last look at the broker: the console's pages ask on every load (the
# KB page every two seconds), and a broker that does not answer costs each look its one second.
BROKER_LOOK_SECONDS = 10.0
_BROKER_LOOK: dict[str, tuple[float, str]] = {}  # "last": (monotonic time, state)


def check_broker() -> str:
    """ok | unavailable | unknown (a broker other than Redis): whether the Celery broker answers,
    asked at most every BROKER_LOOK_SECONDS per process."""
    now = time.monotonic()
    last = _BROKER_LOOK.get("last")
    if last is not None and now - last[0] < BROKER_LOOK_SECONDS:
        return last[1]
    url = settings.CELERY_BROKER_URL
    if url.startswith("redis+socket://"):
        url = "unix://" + url.removeprefix("redis+socket://")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        return "unknown"
    state = _ping(url)
    _BROKER_LOOK["last"] = (now, state)
    return state


def broker_look_forget() -> None:
    """The next check_broker asks the broker again (tests; a page that must know now)."""
    _BROKER_LOOK.clear()


def check_migrations() -> str:
    try:
        connection = connections[DEFAULT_DB_ALIAS]
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception:
        return "unavailable"
    return "pending" if plan else "ok"


def readiness() -> dict[str, str]:
    checks = {"database": check_database(), "redis": check_redis()}
    checks["migrations"] = check_migrations() if checks["database"] == "ok" else "unknown"
    return checks
