"""One Redis client per process (and per URL), from settings.REDIS_URL."""

from __future__ import annotations

import functools

import redis
from django.conf import settings


@functools.lru_cache(maxsize=4)
def _client_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=30)


def redis_client() -> redis.Redis:
    """The shared client for the configured Redis; it keeps its own connection pool."""
    return _client_for(settings.REDIS_URL)
