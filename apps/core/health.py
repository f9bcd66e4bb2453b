"""Liveness and readiness checks."""

from __future__ import annotations

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
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    except (redis.RedisError, OSError):
        return "unavailable"
    finally:
        client.close()
    return "ok"


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
