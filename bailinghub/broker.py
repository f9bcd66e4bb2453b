"""The Redis broker transport: kombu's, with one fix so a worker survives a Redis restart.

With kombu 5.7 / Celery 5.7, a worker that loses Redis while it holds an unacknowledged message (an
`acks_late` task running) died with `Unrecoverable error: AttributeError("'NoneType' object has no
attribute 'hostname'")`. On the connection error, Celery's consumer
(`Consumer.on_connection_error_after_connected`) first calls `connection.collect()`, which sets the
transport's `client` (the kombu Connection) to None but keeps the connection's default channel, then
`connection.close()`, which closes that channel again. Closing it restores its unacknowledged
messages (`QoS.restore_unacked`), which needs a new Redis connection pool, built by
`Channel._connparams` from `self.connection.client.hostname`: `client` is None by then, so an
AttributeError — not a connection error — escapes and stops the worker. The same channel's pool is
needed again when the running task acknowledges its message. It is the same over TCP (`redis://`)
and a Unix socket (`redis+socket://`): both reach `conninfo.hostname` first.

Here a channel keeps the connection details it was opened with and builds a pool from them when its
transport has let go of them — or when the channel itself was closed (kombu then sets its
`connection` to None), which a running task's acknowledgement meets the same way; everything else
is kombu's. If Redis is still down, the restore fails
with a connection error, which Celery ignores as it reconnects (the message is still in Redis's
unacked set, restored after the visibility timeout; the knowledge watchdog re-sends stale work in any
case); once Redis is back, the running task's acknowledgement reaches it.

`celery_transport_register()` (bailinghub.celery) makes this the transport for `redis://`,
`rediss://` and `redis+socket://` broker URLs in every process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kombu import transport as kombu_transport
from kombu.transport import redis as kombu_redis


@dataclass(frozen=True)
class _ConnectionDetails:
    """What `Channel._connparams` reads from its transport: the kombu Connection and the default port."""

    client: Any
    default_port: int


class Channel(kombu_redis.Channel):
    def __init__(self, connection, *args, **kwargs):
        self._connection_details = _ConnectionDetails(client=connection.client,
                                                      default_port=connection.default_port)
        super().__init__(connection, *args, **kwargs)

    def _connparams(self, asynchronous=False):
        transport = self.connection
        if transport is not None and transport.client is not None:
            return super()._connparams(asynchronous=asynchronous)
        # collected (or closed): build the pool from the details this channel was opened with
        self.connection = self._connection_details
        try:
            return super()._connparams(asynchronous=asynchronous)
        finally:
            self.connection = transport


class Transport(kombu_redis.Transport):
    Channel = Channel


def celery_transport_register() -> None:
    """Use this transport for the redis schemes kombu resolves through its aliases."""
    for scheme in ("redis", "rediss"):
        kombu_transport.TRANSPORT_ALIASES[scheme] = "bailinghub.broker:Transport"
