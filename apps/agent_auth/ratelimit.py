"""Sliding-window rate limit kept in Redis, shared by every web process."""

from __future__ import annotations

import math
import time
import uuid

import redis

from apps.agent_auth.errors import AgentAuthUnavailable, RateLimited
from apps.core.redis import redis_client

# Atomically: forget hits older than the window, refuse when `limit` remain, else record this one.
# Returns {1, 0} when admitted, {0, ms until the oldest hit leaves the window} when refused.
_SLIDING_WINDOW = """
local key, now, window, limit, member = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
if redis.call('ZCARD', key) >= limit then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, math.max(1, tonumber(oldest[2]) + window - now)}
end
redis.call('ZADD', key, now, member)
redis.call('PEXPIRE', key, window)
return {1, 0}
"""


def rate_limit_hit(*, key: str, limit: int, window_seconds: int = 60) -> None:
    """Count one hit against `key`; raise 429 `rate_limited` with Retry-After when over `limit`.

    Fails closed: without Redis nothing is admitted (503 `agent_auth_unavailable`).
    """
    now_ms = int(time.time() * 1000)
    try:
        admitted, wait_ms = redis_client().eval(
            _SLIDING_WINDOW, 1, f"bh:ratelimit:{key}", now_ms, window_seconds * 1000, limit, uuid.uuid4().hex
        )
    except (redis.RedisError, OSError) as exc:
        raise AgentAuthUnavailable() from exc
    if not admitted:
        retry_after = max(1, math.ceil(int(wait_ms) / 1000))
        raise RateLimited(
            "Too many authorization requests; retry later.",
            headers={"Retry-After": str(retry_after)},
            retry_after=retry_after,
        )
