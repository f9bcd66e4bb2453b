"""How long a block of work's statements may wait: `lock_timeout` and `statement_timeout` set on
the connection for the block, then put back.

One agent request asks for the limits several times (its scope, each embedding model's retrieval,
the validation of the hits), each piece catching its own failure. Nested blocks with the limits
already in force set nothing: the outermost block sets them once and resets them once (a knowledge
search ran four more statements per request before 2026-12-04). Work done on the caller's behalf on
another connection (apps.knowledge.pipeline.parallel) reads the limits in force with `in_force()`,
without a round trip.

Outside a transaction none is opened — a search embeds its query between statements and must not
sit idle in one — so the limits are set on the session and reset afterwards. Inside one (a
caller's atomic block, a test) they are local to it, and every block, nested or not, is a
savepoint: a failed statement rolls back to it instead of aborting the caller's transaction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from django.db import connection, transaction

NAMES = ("lock_timeout", "statement_timeout")
_ATTRIBUTE = "bailing_limits_in_force"


def in_force() -> list[str] | None:
    """The limits a `limited` block of this thread's connection set, e.g. ["2000ms", "10000ms"];
    None outside one."""
    return getattr(connection, _ATTRIBUTE, None)


def set_settings(values: Mapping[str, str], *, local: bool = False) -> None:
    """Set these settings ({name: value}) on this thread's connection (`local`: until its
    transaction ends), in one statement. The limits are two of them; the vector channel's walk
    sets its own the same way."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join("set_config(%s, %s, %s)" for _ in values),
                       [item for name, value in values.items() for item in (name, value, local)])


def apply(values: list[str], *, local: bool = False) -> None:
    """Set this thread's connection's limits (`local`: until its transaction ends). One statement."""
    set_settings(dict(zip(NAMES, values, strict=True)), local=local)


def reset() -> None:
    """Put this thread's connection's limits back to the server's defaults. One round trip."""
    with connection.cursor() as cursor:
        cursor.execute("RESET lock_timeout; RESET statement_timeout")


@contextlib.contextmanager
def limited(*, lock_timeout_ms: int, statement_timeout_ms: int) -> Iterator[None]:
    """Statements inside give up after these limits; their DatabaseError is the caller's."""
    values = [f"{lock_timeout_ms}ms", f"{statement_timeout_ms}ms"]
    outer = in_force()
    if connection.in_atomic_block:
        with transaction.atomic():
            if outer != values:
                apply(values, local=True)  # released with the savepoint's transaction, not before
            setattr(connection, _ATTRIBUTE, values)
            try:
                yield
            finally:
                setattr(connection, _ATTRIBUTE, outer)
        if outer is not None and outer != values:
            apply(outer, local=True)
        return
    if outer == values:
        yield
        return
    apply(values, local=False)
    setattr(connection, _ATTRIBUTE, values)
    try:
        yield
    finally:
        setattr(connection, _ATTRIBUTE, outer)
        if outer is not None:
            apply(outer, local=False)
        else:
            reset()
