"""One HNSW index per index generation, so a search of one KB never walks other KBs' vectors.

A generation with more than `vector_index_min_rows` child vectors (KNOWLEDGE_RETRIEVAL) gets its
own partial index (pipeline.sql.generation_index_create_sql); a smaller one is scanned exactly
through the (generation, document) B-tree, which costs about 5 µs a row here. The retrieval
engine reads `IndexGeneration.vector_indexed` to choose.

When indexes are built:
- a rebuild builds its generation's index before the generation switches active, so the new
  generation is never searched without it;
- a document that brings its generation over the threshold builds it at the end of its ingest;
- the watchdog builds any that is still missing (a worker killed mid-build) and drops the indexes
  of generations that are no longer live (retired and purged, failed, or of a deleted KB).

Outside a transaction (workers) indexes are built and dropped CONCURRENTLY, so other KBs' writes
to knowledge_chunk go on meanwhile, under a session advisory lock per generation so two workers
never build one index twice. Inside one (tests, the admin's atomic requests) they are built
plainly, which holds a write lock on the table until the transaction ends.
"""

from __future__ import annotations

import logging
import threading
import uuid
import zlib
from collections.abc import Callable

from django.conf import settings
from django.db import connection

from apps.knowledge.models import IndexGeneration, KeywordTermStat
from apps.knowledge.pipeline.retrieval_settings import retrieval_settings
from apps.knowledge.pipeline.sql import (
    GENERATION_INDEX_PREFIX,
    generation_index_create_sql,
    generation_index_name,
    index_drop_sql,
)

logger = logging.getLogger("bailinghub.knowledge")

# Namespace of this module's advisory locks (the second key is a hash of the generation id).
_LOCK_NAMESPACE = 0x6B76


def _vector_rows(generation_id) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM knowledge_chunk WHERE generation_id = %s AND kind = 'child' "
            "AND embedding IS NOT NULL",
            [generation_id],
        )
        return int(cursor.fetchone()[0])


def _index_state(name: str) -> bool | None:
    """True: the index exists and is valid; False: a failed concurrent build left it invalid;
    None: no such index."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
            [name],
        )
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


def _lock_key(generation_id) -> int:
    return zlib.crc32(uuid.UUID(str(generation_id)).bytes) - 2**31


def _try_lock(generation_id) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [_LOCK_NAMESPACE, _lock_key(generation_id)])
        return bool(cursor.fetchone()[0])


def _unlock(generation_id) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [_LOCK_NAMESPACE, _lock_key(generation_id)])


def _ddl(statement: str) -> None:
    """Run index DDL on knowledge_chunk. Inside a transaction, first fire the foreign-key checks
    its inserts deferred: PostgreSQL refuses DDL on a table with pending trigger events."""
    with connection.cursor() as cursor:
        if connection.in_atomic_block:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(statement)
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        else:
            cursor.execute(statement)


class _Heartbeat(threading.Thread):
    """Calls `beat` every `interval` seconds on its own thread (and its own database connection)
    while a long statement runs on the caller's: a rebuild's lease stays alive through its index
    build, which on a million vectors takes longer than the watchdog waits for a heartbeat."""

    def __init__(self, beat: Callable[[], None], interval: float):
        super().__init__(name="vector-index-heartbeat", daemon=True)
        self.beat, self.interval = beat, interval
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(self.interval):
                try:
                    self.beat()
                except Exception:  # a lost lease or a dropped connection: the build finishes anyway
                    logger.warning("A vector index build's heartbeat failed", exc_info=True)
                    return
        finally:
            connection.close()  # this thread's own connection

    def __enter__(self) -> _Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stopped.set()
        self.join()


def generation_index_ensure(generation_id, *, heartbeat: Callable[[], None] | None = None,
                            heartbeat_seconds: float = 10.0) -> str:
    """Build the generation's vector index if it has outgrown exact scans and has none. Returns
    what happened: indexed, exists, small, busy (another process is building it) or gone.
    `heartbeat`, if given, is called every `heartbeat_seconds` while the index is being built."""
    generation = (IndexGeneration.objects.select_related("knowledge_base__embedding_model")
                  .filter(pk=generation_id, status__in=IndexGeneration.LIVE).first())
    if generation is None:
        return "gone"
    if generation.vector_indexed:
        return "exists"
    if _vector_rows(generation.pk) <= retrieval_settings().vector_index_min_rows:
        return "small"
    concurrently = not connection.in_atomic_block
    if concurrently and not _try_lock(generation.pk):
        return "busy"
    try:
        name = generation_index_name(generation.pk)
        dimension = generation.knowledge_base.embedding_model.dimension
        if _index_state(name) is False:
            _ddl(index_drop_sql(name, concurrently=concurrently))
        with connection.cursor() as cursor:
            # pgvector builds the graph in memory while it fits (100k × 384 floats ≈ 200 MB with
            # the graph); past that it inserts row by row, several times slower.
            cursor.execute("SELECT set_config('maintenance_work_mem', %s, %s)",
                           [settings.KNOWLEDGE_VECTOR_INDEX_BUILD_MEMORY, connection.in_atomic_block])
        try:
            if heartbeat is None:
                _ddl(generation_index_create_sql(generation.pk, dimension, concurrently=concurrently))
            else:
                with _Heartbeat(heartbeat, heartbeat_seconds):
                    _ddl(generation_index_create_sql(generation.pk, dimension, concurrently=concurrently))
        finally:
            if not connection.in_atomic_block:
                with connection.cursor() as cursor:
                    cursor.execute("RESET maintenance_work_mem")
        IndexGeneration.objects.filter(pk=generation.pk).update(vector_indexed=True)
    finally:
        if concurrently:
            _unlock(generation.pk)
    logger.info("Built the vector index of generation %s", generation.pk)
    return "indexed"


def live_generations_index(*, knowledge_base_ids=None) -> int:
    """Build the indexes live generations (of these KBs, or of all: the watchdog's pass) should
    have and do not; returns how many were built."""
    built = 0
    # Pre-filtered by the keyword statistics' chunk count ("#n", kept per generation as chunks are
    # written): one query, rather than counting the rows of every small KB's generations.
    unindexed = IndexGeneration.objects.filter(status__in=IndexGeneration.LIVE, vector_indexed=False)
    if knowledge_base_ids is not None:
        unindexed = unindexed.filter(knowledge_base_id__in=knowledge_base_ids)
    big = KeywordTermStat.objects.filter(generation_id__in=unindexed.values("pk"), term="#n",
                                         df__gt=retrieval_settings().vector_index_min_rows)
    for generation_id in big.values_list("generation_id", flat=True):
        if generation_index_ensure(generation_id) == "indexed":
            built += 1
    return built


def stale_indexes_drop() -> int:
    """Drop the vector indexes of generations that are no longer live."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname = 'knowledge_chunk' AND c.relname LIKE %s",
            [GENERATION_INDEX_PREFIX.replace("_", r"\_") + "%"],
        )
        names = [row[0] for row in cursor.fetchall()]
    by_generation = {}
    for name in names:
        try:
            by_generation[uuid.UUID(name.removeprefix(GENERATION_INDEX_PREFIX))] = name
        except ValueError:
            continue
    live = set(IndexGeneration.objects.filter(pk__in=by_generation, status__in=IndexGeneration.LIVE)
               .values_list("pk", flat=True))
    dropped = 0
    concurrently = not connection.in_atomic_block
    for generation_id, name in by_generation.items():
        if generation_id in live:
            continue
        _ddl(index_drop_sql(name, concurrently=concurrently))
        dropped += 1
    return dropped
