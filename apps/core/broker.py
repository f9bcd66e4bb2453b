"""What a send to the Celery broker raises when the broker is down, refuses, or does not answer
within BROKER_SOCKET_TIMEOUT_SECONDS: the senders catch these and leave the work to a watchdog;
anything else is a bug."""

from __future__ import annotations

from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

BROKER_ERRORS = (KombuOperationalError, RedisError, OSError)
