"""Per-tool ``execution.rate_limit`` across every process: a fixed-window counter in Redis."""

from __future__ import annotations

import time
from dataclasses import dataclass

from apps.core.redis import redis_client

WINDOW_SECONDS = {"1s": 1, "1m": 60, "1h": 3600, "1d": 86400}

# INCR the window's counter; over the limit, take the attempt back so refusals do not extend the wait.
_TAKE = """
local used = redis.call('INCR', KEYS[1])
if used == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if used > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
  return -1
end
return used
"""


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    retry_after_ms: int = 0


def rate_limit_take(*, key: str, count: int, window: str, now: float | None = None) -> RateDecision:
    """Take one call from the tool's budget of ``count`` per ``window``; when it is spent, how long
    until the next window opens."""
    seconds = WINDOW_SECONDS[window]
    at = time.time() if now is None else now
    start = int(at // seconds) * seconds
    redis_key = f"bailinghub:tools:rate:{key}:{window}:{start}"
    used = int(redis_client().eval(_TAKE, 1, redis_key, count, seconds * 1000 + 1000))
    if used >= 0:
        return RateDecision(allowed=True)
    return RateDecision(allowed=False, retry_after_ms=max(1, int((start + seconds - at) * 1000)))
