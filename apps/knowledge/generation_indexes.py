"""Indexes of one index generation's chunks, so a search of one KB reads no other KB's entries.

A generation with more than `generation_index_min_rows` indexed children (KNOWLEDGE_RETRIEVAL)
gets two partial indexes of its own (pipeline.sql):
- an HNSW index of its vectors. A smaller generation is scanned exactly through the
  (generation, document) B-tree, which costs about 5 µs a row here;
- a GIN index of its keyword terms. A smaller one is searched through the shared GIN index, a
  term's postings in every KB intersected with the generation's lexeme. Beside nine other KBs
  of 100k chunks, the generation's own index read phase 1 of the keyword channel in less than
  half the time (bench/README.md).
The retrieval engine reads `IndexGeneration.vector_indexed` and `keyword_indexed` to choose.

When indexes are built:
- a rebuild builds its generation's indexes before the generation switches active, so the new
  generation is never searched without them;
- a document that brings its generation over the threshold builds them at the end of its ingest;
- the watchdog builds any that is still missing (a worker killed mid-build, a generation from
  before the keyword indexes) and drops the indexes of generations that are no longer live
  (retired and purged, failed, or of a deleted KB).

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
from django.db.models import Q

from apps.knowledge.models import IndexGeneration, KeywordTermStat
from apps.knowledge.pipeline.retrieval_settings import retrieval_settings
from apps.knowledge.pipeline.sql import (
    KEYWORD_INDEX_PREFIX,
    VECTOR_INDEX_PREFIX,
    index_drop_sql,
    keyword_index_create_sql,
    keyword_index_name,
    vector_index_create_sql,
    vector_index_name,
)

logger = logging.getLogger("bailinghub.knowledge")

# Namespace of this module's advisory locks (the second key is a hash of the generation id).
_LOCK_NAMESPACE = 0x6B76


def _indexed_rows(generation_id) -> int:
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
    builds, which on a million chunks take longer than the watchdog waits for a heartbeat."""

    def __init__(self, beat: Callable[[], None], interval: float):
        super().__init__(name="generation-index-heartbeat", daemon=True)
        self.beat, self.interval = beat, interval
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(self.interval):
                try:
                    self.beat()
                except Exception:  # a lost lease or a dropped connection: the build finishes anyway
                    logger.warning("An index build's heartbeat failed", exc_info=True)
                    return
        finally:
            connection.close()  # this thread's own connection

    def __enter__(self) -> _Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stopped.set()
        self.join()


def _builds(generation: IndexGeneration, *, concurrently: bool) -> list[tuple[str, str, str]]:
    """(flag field, index name, CREATE INDEX) for each index the generation still lacks."""
    builds = []
    if not generation.vector_indexed:
        dimension = generation.knowledge_base.embedding_model.dimension
        knobs = retrieval_settings()
        create = vector_index_create_sql(generation.pk, dimension, concurrently=concurrently, m=knobs.vector_index_m,
                                         ef_construction=knobs.vector_index_ef_construction)
        builds.append(("vector_indexed", vector_index_name(generation.pk), create))
    if not generation.keyword_indexed:
        builds.append(("keyword_indexed", keyword_index_name(generation.pk),
                       keyword_index_create_sql(generation.pk, concurrently=concurrently)))
    return builds


def generation_index_ensure(generation_id, *, heartbeat: Callable[[], None] | None = None,
                            heartbeat_seconds: float = 10.0) -> str:
    """Build the generation's own indexes if it has outgrown the shared ones and lacks them.
    Returns what happened: indexed, exists, small, busy (another process is building them) or
    gone. `heartbeat`, if given, is called every `heartbeat_seconds` while an index is built."""
    generation = (IndexGeneration.objects.select_related("knowledge_base__embedding_model")
                  .filter(pk=generation_id, status__in=IndexGeneration.LIVE).first())
    if generation is None:
        return "gone"
    if generation.vector_indexed and generation.keyword_indexed:
        return "exists"
    if _indexed_rows(generation.pk) <= retrieval_settings().generation_index_min_rows:
        return "small"
    concurrently = not connection.in_atomic_block
    if concurrently and not _try_lock(generation.pk):
        return "busy"
    try:
        generation.refresh_from_db(fields=["vector_indexed", "keyword_indexed"])  # another worker's build
        builds = _builds(generation, concurrently=concurrently)
        if not builds:
            return "exists"
        with connection.cursor() as cursor:
            # pgvector builds the graph in memory while it fits (100k × 384 floats ≈ 200 MB with
            # the graph); past that it inserts row by row, several times slower. GIN sorts its
            # entries in the same memory.
            cursor.execute("SELECT set_config('maintenance_work_mem', %s, %s)",
                           [settings.KNOWLEDGE_VECTOR_INDEX_BUILD_MEMORY, connection.in_atomic_block])
        try:
            for flag, name, create in builds:
                if _index_state(name) is False:
                    _ddl(index_drop_sql(name, concurrently=concurrently))
                if heartbeat is None:
                    _ddl(create)
                else:
                    with _Heartbeat(heartbeat, heartbeat_seconds):
                        _ddl(create)
                IndexGeneration.objects.filter(pk=generation.pk).update(**{flag: True})
        finally:
            if not connection.in_atomic_block:
                with connection.cursor() as cursor:
                    cursor.execute("RESET maintenance_work_mem")
    finally:
        if concurrently:
            _unlock(generation.pk)
    logger.info("Built the indexes of generation %s: %s", generation.pk, ", ".join(name for _, name, _ in builds))
    return "indexed"


def active_generations_index(*, knowledge_base_ids=None) -> int:
    """Build the indexes active generations (of these KBs, or of all: the watchdog's pass) should
    have and do not; returns how many generations it indexed. A building generation gets its
    indexes from its rebuild, just before its switch (rebuild._generation_run): built earlier, by a
    document completed meanwhile or the watchdog, the rest of the rebuild wrote into them row by
    row, and the switch met their build still running."""
    built = 0
    # Pre-filtered by the keyword statistics' chunk count ("#n", kept per generation as chunks are
    # written): one query, rather than counting the rows of every small KB's generations.
    unindexed = IndexGeneration.objects.filter(Q(vector_indexed=False) | Q(keyword_indexed=False),
                                               status=IndexGeneration.Status.ACTIVE)
    if knowledge_base_ids is not None:
        unindexed = unindexed.filter(knowledge_base_id__in=knowledge_base_ids)
    big = KeywordTermStat.objects.filter(generation_id__in=unindexed.values("pk"), term="#n",
                                         df__gt=retrieval_settings().generation_index_min_rows)
    for generation_id in big.values_list("generation_id", flat=True):
        if generation_index_ensure(generation_id) == "indexed":
            built += 1
    return built


def stale_indexes_drop() -> int:
    """Drop the indexes of generations that are no longer live; returns how many generations'
    (like active_generations_index, which counts the generations it indexed)."""
    prefixes = (VECTOR_INDEX_PREFIX, KEYWORD_INDEX_PREFIX)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname = 'knowledge_chunk' AND c.relname LIKE ANY(%s)",
            [[prefix.replace("_", r"\_") + "%" for prefix in prefixes]],
        )
        names = [row[0] for row in cursor.fetchall()]
    by_generation: dict[uuid.UUID, list[str]] = {}
    for name in names:
        prefix = next(prefix for prefix in prefixes if name.startswith(prefix))
        try:
            by_generation.setdefault(uuid.UUID(name.removeprefix(prefix)), []).append(name)
        except ValueError:
            continue
    live = set(IndexGeneration.objects.filter(pk__in=by_generation, status__in=IndexGeneration.LIVE)
               .values_list("pk", flat=True))
    dropped = 0
    concurrently = not connection.in_atomic_block
    for generation_id, generation_names in by_generation.items():
        if generation_id in live:
            continue
        for name in generation_names:
            _ddl(index_drop_sql(name, concurrently=concurrently))
        dropped += 1
    return dropped
