"""An HNSW index and a GIN index per big index generation (apps.knowledge.generation_indexes), as
the vector and keyword channels read them."""

import logging
import re
import threading

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from apps.knowledge import generation_indexes, leases, rebuild, selectors, services, watchdog
from apps.knowledge.models import Chunk, IndexGeneration
from apps.knowledge.pipeline import vector_channel
from apps.knowledge.pipeline.embedders import embedder_for
from apps.knowledge.pipeline.keyword_channel import _keyword_phase1, keyword_candidates, keyword_scorer, phase1_terms
from apps.knowledge.pipeline.retrieve import SearchOptions, search
from apps.knowledge.pipeline.sql import keyword_index_name, vector_index_name
from apps.knowledge.pipeline.vector_channel import _vector_query, vector_candidates
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

pytestmark = pytest.mark.django_db

STRATEGY = {"strategy": "by_paragraph", "min_chars": 0, "max_chars": 200, "overlap_chars": 0}


@pytest.fixture(autouse=True)
def small_threshold(settings):
    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40}


def _paragraphs(prefix: str, count: int) -> str:
    return "\n\n".join(f"{prefix}段落 {i} 关于订单 {i % 37} 的说明" for i in range(count))


def _kb(model, prefix: str, count: int):
    kb = KnowledgeBaseFactory(embedding_model=model, chunk_strategy=STRATEGY)
    ingest_texts(kb, {f"{prefix}.txt": _paragraphs(prefix, count)})
    return kb


def _indexes_on_chunks(method: str = "hnsw") -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'knowledge_chunk' "
                       "AND indexdef LIKE %s", [f"%USING {method} %"])
        return dict(cursor.fetchall())


def _own_indexes() -> set[str]:
    return {*_indexes_on_chunks("hnsw"), *_indexes_on_chunks("gin")}


def _same_ranking(first, second) -> bool:
    """Equal scores in order (the hashing embedder makes ties, whose order either way is arbitrary)
    and the same rows above the last score."""
    def scores(rows):
        return [round(row[1], 6) for row in rows]

    def above_last(rows):
        return {row[0] for row in rows if round(row[1], 6) > scores(rows)[-1]}

    return scores(first) == scores(second) and above_last(first) == above_last(second)


def _plan(model, generation_id) -> str:
    probe = "[" + ",".join(["0.1"] * model.dimension) + "]"
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")
        sql, params = _vector_query(model.dimension, vector=probe, generations=generation_id, limit=10,
                                    extra_columns=("", []))
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_a_generation_over_the_threshold_gets_an_index_of_its_own_that_its_searches_walk_alone():
    model = EmbeddingModelFactory()
    big, other = _kb(model, "大库", 60), _kb(model, "他库", 60)
    generation, other_generation = selectors.generation_active(kb=big), selectors.generation_active(kb=other)

    assert generation.vector_indexed and other_generation.vector_indexed
    definition = _indexes_on_chunks()[vector_index_name(generation.pk)]
    assert f"hnsw (((embedding)::vector({model.dimension})) vector_cosine_ops)" in definition
    assert f"WHERE ((generation_id = '{generation.pk}'::uuid) AND ((kind)::text = 'child'::text))" in definition
    plan = _plan(model, generation.pk)
    assert f"Index Scan using {vector_index_name(generation.pk)}" in plan
    assert vector_index_name(other_generation.pk) not in plan

    assert generation.keyword_indexed and other_generation.keyword_indexed
    definition = _indexes_on_chunks("gin")[keyword_index_name(generation.pk)]
    assert "USING gin (search_vector)" in definition
    assert f"WHERE (((generation_id)::text = '{generation.pk}'::text) AND ((kind)::text = 'child'::text))" in definition


def _graph(index_name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [index_name])
        return sorted(cursor.fetchone()[0])


def test_the_hnsw_graph_is_built_with_the_configured_links_and_construction_candidates(settings):
    model = EmbeddingModelFactory()
    default = selectors.generation_active(kb=_kb(model, "默认", 60))
    assert _graph(vector_index_name(default.pk)) == ["ef_construction=64", "m=16"]

    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40, "vector_index_m": 24,
                                    "vector_index_ef_construction": 200}
    denser = selectors.generation_active(kb=_kb(model, "稠密", 60))
    assert _graph(vector_index_name(denser.pk)) == ["ef_construction=200", "m=24"]
    # Built before the change, a graph keeps what it was built with; the search walks each its own.
    assert _graph(vector_index_name(default.pk)) == ["ef_construction=64", "m=16"]
    assert f"Index Scan using {vector_index_name(denser.pk)}" in _plan(model, denser.pk)


def test_keyword_indexes_have_no_pending_list_and_hold_rows_written_after_the_build(settings):
    """fastupdate = off: a row indexed after the build is in the index's tree, not in a pending
    list every search would scan until a vacuum (199 ms a query after one KB's ingestion)."""
    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40}
    model = EmbeddingModelFactory()
    kb = _kb(model, "甲", 60)
    generation = selectors.generation_active(kb=kb)
    assert _graph("knowledge_chunk_terms_gin") == ["fastupdate=off"]
    assert _graph(keyword_index_name(generation.pk)) == ["fastupdate=off"]
    ingest_texts(kb, {"later.txt": "后来加入的段落，提到独特词语蓝鲸。"})
    with connection.cursor() as cursor:
        for name in ("knowledge_chunk_terms_gin", keyword_index_name(generation.pk)):
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [name])
            assert cursor.fetchone() == (0,)  # nothing was waiting
    hits = search(kbs=[kb], query="蓝鲸", options=SearchOptions(mode="keyword", top_k=1)).hits
    assert [hit.title for hit in hits] == ["later.txt"]


def test_phase_one_reads_a_new_generations_own_index_before_the_statistics_know_it():
    """The planner's statistics know the table but not a generation grown since its last ANALYZE
    (on a big table, a long time): phase 1 must still read that generation's own GIN index. With
    `generation_id = …` in the clause the planner read the generation's B-tree instead, matching
    every chunk against every term (255 ms instead of 0.9 ms on 11,727 chunks)."""
    model = EmbeddingModelFactory()
    other = selectors.generation_active(kb=_kb(model, "他库", 60))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE knowledge_chunk")
    generation = selectors.generation_active(kb=_kb(model, "大库", 60))
    scorer = keyword_scorer(generation_ids=[generation.pk], query="订单 7 的说明", stored_tf=True)
    with CaptureQueriesContext(connection) as queries:
        _keyword_phase1([generation.pk], scorer, 10, own_index=[generation.pk])
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a few hundred rows: cheaper still
        cursor.execute("EXPLAIN " + queries.captured_queries[-1]["sql"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert f"Bitmap Index Scan on {keyword_index_name(generation.pk)}" in plan, plan
    assert "knowledge_chunk_terms_gin" not in plan  # the shared index
    assert keyword_index_name(other.pk) not in plan
    # One scan for all the query's terms, however many: the planner tests the table's partial
    # indexes once, not once per term.
    assert len(phase1_terms(scorer)) > 3
    assert plan.count("Index Cond: (search_vector @@") == 1


def test_a_keyword_search_through_the_generations_own_index_ranks_as_through_the_shared_one():
    model = EmbeddingModelFactory()
    big, small = _kb(model, "大库", 60), _kb(model, "小库", 12)
    _kb(model, "他库", 60)  # the same words in another KB: none of its chunks may come back
    generations = [selectors.generation_active(kb=big).pk, selectors.generation_active(kb=small).pk]

    def ranked(own_index):
        hits, _ = keyword_candidates(generation_ids=generations, query="段落 7 关于订单", limit=30,
                                     stored_tf=True, own_index=own_index)
        return hits

    own, mixed, shared = ranked(generations), ranked(generations[:1]), ranked([])
    assert len(shared) == 30
    assert own == mixed == shared
    assert set(Chunk.objects.filter(pk__in=[hit[0] for hit in own]).values_list(
        "generation__knowledge_base", flat=True)) == {big.pk, small.pk}


def test_no_index_spans_the_kbs_of_a_model():
    model = EmbeddingModelFactory()
    generation = selectors.generation_active(kb=_kb(model, "大库", 60))
    indexes = _indexes_on_chunks()
    assert vector_index_name(generation.pk) in indexes  # not true of an empty list alone
    assert all("generation_id = " in definition for definition in indexes.values())
    assert not any(str(model.pk) in definition for definition in indexes.values())


def test_a_small_generation_gets_no_index_and_is_scanned_exactly():
    kb = _kb(EmbeddingModelFactory(), "小库", 12)
    generation = selectors.generation_active(kb=kb)

    assert not generation.vector_indexed and not generation.keyword_indexed
    assert not {vector_index_name(generation.pk), keyword_index_name(generation.pk)} & _own_indexes()
    result = search(kbs=[kb], query="小库段落 3", options=SearchOptions(mode="vector", top_k=5, rollup=False))
    assert len(result.hits) == 5


def test_a_search_through_the_index_finds_what_an_exact_scan_finds_and_only_in_its_kb():
    model = EmbeddingModelFactory()
    big = _kb(model, "大库", 60)
    _kb(model, "他库", 60)  # same model, same words: its vectors must not come back
    generation = selectors.generation_active(kb=big)
    vector = embedder_for(model).embed_query("订单 7 的说明")

    walked = vector_candidates(model=model, generation_ids=[generation.pk], query_vector=vector, limit=10,
                               indexed=[generation.pk], filtered_rows=60, need=10)
    scanned = vector_candidates(model=model, generation_ids=[generation.pk], query_vector=vector, limit=10,
                                indexed=[], filtered_rows=60, need=10)
    assert _same_ranking(walked, scanned)
    assert len(walked) == 10
    assert set(Chunk.objects.filter(pk__in=[row[0] for row in walked]).values_list(
        "generation__knowledge_base", flat=True)) == {big.pk}
    result = search(kbs=[big], query="订单 7 的说明", options=SearchOptions(mode="vector", top_k=10, rollup=False))
    assert {hit.knowledge_base_id for hit in result.hits} == {big.pk}
    assert _same_ranking([(hit.chunk_id, hit.score) for hit in result.hits], scanned)


def test_two_kbs_searched_together_merge_their_indexed_and_scanned_generations_by_score():
    model = EmbeddingModelFactory()
    big, small = _kb(model, "大库", 60), _kb(model, "小库", 12)
    generations = [selectors.generation_active(kb=big).pk, selectors.generation_active(kb=small).pk]
    vector = embedder_for(model).embed_query("订单 7 的说明")

    mixed = vector_candidates(model=model, generation_ids=generations, query_vector=vector, limit=20,
                              indexed=generations[:1], filtered_rows=72, need=10)
    scanned = vector_candidates(model=model, generation_ids=generations, query_vector=vector, limit=20,
                                indexed=[], filtered_rows=72, need=10)
    assert _same_ranking(mixed, scanned)
    scores = [row[1] for row in mixed]
    assert scores == sorted(scores, reverse=True)


def test_a_starved_index_answer_is_completed_by_an_exact_scan(settings):
    """Disabled chunks are filtered after the index scan: with the nearest rows disabled, the
    index returns fewer than asked, and the channel scans the generation instead."""
    model = EmbeddingModelFactory()
    kb = _kb(model, "大库", 300)
    generation = selectors.generation_active(kb=kb)
    vector = embedder_for(model).embed_query("大库段落 7 关于订单 7 的说明")
    nearest = [row[0] for row in vector_candidates(model=model, generation_ids=[generation.pk],
                                                   query_vector=vector, limit=200, indexed=[], need=200)]
    Chunk.objects.filter(pk__in=nearest).update(disabled=True)

    def candidates(fallback_max: int):
        settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40, "vector_ef_search": 1,
                                        "vector_exact_fallback_max": fallback_max}
        return vector_candidates(model=model, generation_ids=[generation.pk], query_vector=vector, limit=12,
                                 indexed=[generation.pk], filtered_rows=300, need=0)

    starved, completed = candidates(0), candidates(20_000)
    exact = vector_candidates(model=model, generation_ids=[generation.pk], query_vector=vector, limit=12,
                              indexed=[], need=12)
    assert len(starved) < 12  # the premise, on this server: ef_search 24 reaches only disabled rows
    assert _same_ranking(completed, exact)
    assert len(exact) == 12
    assert not set(nearest) & {row[0] for row in completed}


def test_the_generations_size_is_read_only_when_an_index_answer_comes_back_short(settings):
    """The walk starts at once: how many chunks the generations hold (whether a short answer may be
    completed by a scan) is read only when the answer is short."""
    model = EmbeddingModelFactory()
    kb = _kb(model, "大库", 60)
    generation = selectors.generation_active(kb=kb)
    vector = embedder_for(model).embed_query("大库段落 7 关于订单 7 的说明")

    def size_reads(**knobs) -> tuple[int, list[str]]:
        settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40, **knobs}
        with CaptureQueriesContext(connection) as queries:
            rows = vector_candidates(model=model, generation_ids=[generation.pk], query_vector=vector, limit=12,
                                     indexed=[generation.pk], need=10)
        reads = [q["sql"] for q in queries.captured_queries if "knowledge_keywordtermstat" in q["sql"]]
        return len(rows), reads

    assert size_reads() == (12, [])
    nearest = [row[0] for row in vector_candidates(model=model, generation_ids=[generation.pk], query_vector=vector,
                                                   limit=30, indexed=[], need=30)]
    Chunk.objects.filter(pk__in=nearest).update(disabled=True)
    found, reads = size_reads(vector_ef_search=1)  # the walk at ef_search 24 reaches disabled rows only
    assert found == 12 and len(reads) == 1 and "#n" in reads[0]  # 60 rows: small enough to complete by a scan


def test_a_rebuild_indexes_its_generation_before_the_switch_and_the_purge_drops_the_old_index(settings):
    settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = 0
    kb = _kb(EmbeddingModelFactory(), "大库", 60)
    old = selectors.generation_active(kb=kb)
    building = services.knowledge_base_rebuild(kb=kb)

    assert rebuild.generation_build(generation_id=building.pk) == "activated"
    new = selectors.generation_active(kb=kb)
    assert new.pk == building.pk and new.vector_indexed and new.keyword_indexed
    indexes = _own_indexes()
    assert {vector_index_name(new.pk), keyword_index_name(new.pk)} <= indexes
    assert not {vector_index_name(old.pk), keyword_index_name(old.pk)} & indexes
    assert not IndexGeneration.objects.filter(pk=old.pk).exists()


def test_the_watchdog_builds_a_missing_index_and_drops_the_index_of_a_deleted_kb():
    model = EmbeddingModelFactory()
    kept, deleted = _kb(model, "大库", 60), _kb(model, "他库", 60)
    kept_generation, deleted_generation = selectors.generation_active(kb=kept), selectors.generation_active(kb=deleted)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX {vector_index_name(kept_generation.pk)}")
        cursor.execute(f"DROP INDEX {keyword_index_name(kept_generation.pk)}")
    IndexGeneration.objects.filter(pk=kept_generation.pk).update(vector_indexed=False, keyword_indexed=False)
    services.knowledge_base_delete(kb=deleted)
    assert {vector_index_name(deleted_generation.pk), keyword_index_name(deleted_generation.pk)} <= _own_indexes()

    outcome = watchdog.knowledge_watchdog()

    # At least: another test's transactional flush may have left an index of its own behind.
    assert outcome["generation_indexes_built"] >= 1 and outcome["generation_indexes_dropped"] >= 1
    indexes = _own_indexes()
    assert {vector_index_name(kept_generation.pk), keyword_index_name(kept_generation.pk)} <= indexes
    assert not {vector_index_name(deleted_generation.pk), keyword_index_name(deleted_generation.pk)} & indexes
    kept_generation.refresh_from_db()
    assert kept_generation.vector_indexed and kept_generation.keyword_indexed


def test_the_watchdog_gives_a_generation_from_before_keyword_indexes_its_own():
    kb = _kb(EmbeddingModelFactory(), "大库", 60)
    generation = selectors.generation_active(kb=kb)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX {keyword_index_name(generation.pk)}")
    IndexGeneration.objects.filter(pk=generation.pk).update(keyword_indexed=False)

    assert watchdog.knowledge_watchdog()["generation_indexes_built"] >= 1

    assert keyword_index_name(generation.pk) in _indexes_on_chunks("gin")
    generation.refresh_from_db()
    assert generation.vector_indexed and generation.keyword_indexed


def test_ensure_is_idempotent_and_leaves_a_small_generation_alone():
    model = EmbeddingModelFactory()
    big, small = _kb(model, "大库", 60), _kb(model, "小库", 12)
    assert generation_indexes.generation_index_ensure(selectors.generation_active(kb=big).pk) == "exists"
    assert generation_indexes.generation_index_ensure(selectors.generation_active(kb=small).pk) == "small"
    retired = IndexGeneration.objects.create(knowledge_base=small, number=9, status=IndexGeneration.Status.RETIRED,
                                             chunk_strategy=STRATEGY)
    assert generation_indexes.generation_index_ensure(retired.pk) == "gone"


@pytest.mark.django_db(transaction=True)
def test_a_worker_builds_the_index_concurrently_and_one_build_at_a_time(settings):
    """Outside a transaction the index is built CONCURRENTLY (other KBs keep writing), under an
    advisory lock: a second worker finding the lock held leaves the build to the first."""
    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 10**6}  # nothing indexed while ingesting
    kb = _kb(EmbeddingModelFactory(), "大库", 60)
    generation = selectors.generation_active(kb=kb)
    assert not generation.vector_indexed
    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40}
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)",
                           [generation_indexes._LOCK_NAMESPACE, generation_indexes._lock_key(generation.pk)])
        assert generation_indexes.generation_index_ensure(generation.pk) == "busy"
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")
    finally:
        other.close()

    assert generation_indexes.generation_index_ensure(generation.pk) == "indexed"
    names = [vector_index_name(generation.pk), keyword_index_name(generation.pk)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                       "WHERE c.relname = ANY(%s)", [names])
        assert dict(cursor.fetchall()) == dict.fromkeys(names, True)
    generation.refresh_from_db()
    assert generation.vector_indexed and generation.keyword_indexed
    services.knowledge_base_delete(kb=kb)
    assert generation_indexes.stale_indexes_drop() >= 1  # a flush leaves indexes: leave none behind
    assert not {vector_index_name(generation.pk), keyword_index_name(generation.pk)} & _own_indexes()


def _filled_rebuild(settings):
    """A KB over the threshold and its rebuild with every document written, not yet switched."""
    kb = _kb(EmbeddingModelFactory(), "大库", 60)
    old = selectors.generation_active(kb=kb)
    building = services.knowledge_base_rebuild(kb=kb)
    settings.KNOWLEDGE_TASK_SLICE_SECONDS = 0
    assert rebuild.generation_build(generation_id=building.pk) == "continued"  # its one document, then the slice
    return kb, old, building


def _hold_build_lock(generation_id):
    """Another session holding the generation's index build (as a killed run's CREATE INDEX
    CONCURRENTLY does, going on in PostgreSQL)."""
    other = connections.create_connection("default")
    other.inc_thread_sharing()
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, %s)",
                       [generation_indexes._LOCK_NAMESPACE, generation_indexes._lock_key(generation_id)])
    return other


def _release(other) -> None:
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock_all()")


@pytest.mark.django_db(transaction=True)
def test_a_rebuild_switches_once_another_session_has_built_its_indexes(settings, ingest_unconsumed):
    """The next run found the build busy and switched anyway: the new generation's searches
    scanned every row until that build ended. It waits for it now."""
    settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = 0
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 2  # it looks again every half second
    kb, old, building = _filled_rebuild(settings)
    settings.KNOWLEDGE_TASK_SLICE_SECONDS = 60
    other = _hold_build_lock(building.pk)
    released = threading.Timer(1.5, _release, [other])
    released.start()
    try:
        token = IndexGeneration.objects.get(pk=building.pk).run_token
        assert rebuild.generation_build(generation_id=building.pk, run_token=str(token)) == "activated"
    finally:
        released.join()
        other.close()
    new = selectors.generation_active(kb=kb)
    assert new.pk == building.pk != old.pk and new.vector_indexed and new.keyword_indexed
    services.knowledge_base_delete(kb=kb)
    generation_indexes.stale_indexes_drop()  # a flush leaves indexes: leave none behind


@pytest.mark.django_db(transaction=True)
def test_a_rebuild_whose_indexes_stay_busy_switches_at_its_slices_end(settings, ingest_unconsumed, caplog):
    """A build that never ends (held behind a long transaction) does not hold the rebuild for
    ever: past its slice it switches without them, says so, and the watchdog builds them."""
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 2
    kb, _, building = _filled_rebuild(settings)
    settings.KNOWLEDGE_TASK_SLICE_SECONDS = 1
    other = _hold_build_lock(building.pk)
    try:
        token = IndexGeneration.objects.get(pk=building.pk).run_token
        with caplog.at_level(logging.WARNING, logger="bailinghub.knowledge"):
            assert rebuild.generation_build(generation_id=building.pk, run_token=str(token)) == "activated"
        new = selectors.generation_active(kb=kb)
        assert (new.pk, new.vector_indexed, new.keyword_indexed) == (building.pk, False, False)
        assert any("switches without its own indexes" in record.getMessage() for record in caplog.records)
        _release(other)
    finally:
        other.close()
    assert generation_indexes.active_generations_index(knowledge_base_ids=[kb.pk]) == 1
    services.knowledge_base_delete(kb=kb)
    generation_indexes.stale_indexes_drop()


def test_the_watchdog_and_completed_documents_leave_a_building_generation_to_its_rebuild(settings):
    """The building generation is indexed by its rebuild, before its switch: indexed by a document
    completed meanwhile or the watchdog, the rest of the rebuild wrote into the index row by row,
    and the switch found that build still running."""
    kb = _kb(EmbeddingModelFactory(), "大库", 60)
    building = services.knowledge_base_rebuild(kb=kb)
    settings.KNOWLEDGE_TASK_SLICE_SECONDS = 0
    assert rebuild.generation_build(generation_id=building.pk) == "continued"  # 60 rows written, not switched

    assert generation_indexes.active_generations_index(knowledge_base_ids=[kb.pk]) == 0
    assert generation_indexes.active_generations_index() == 0
    building.refresh_from_db()
    assert (building.status, building.vector_indexed, building.keyword_indexed) == (
        IndexGeneration.Status.BUILDING, False, False)
    assert Chunk.objects.filter(generation=building).count() > 40


def test_a_long_build_keeps_beating_and_the_beats_stop_with_it():
    """A rebuild's lease must stay alive through its index build (minutes on a million vectors)."""
    beats: list[int] = []
    enough = threading.Event()

    def beat():
        beats.append(1)
        if len(beats) >= 3:
            enough.set()

    with generation_indexes._Heartbeat(beat, 0.01):
        assert enough.wait(10)  # the "build": it ends once the heartbeat has beaten three times
    after = len(beats)
    enough.clear()
    assert not enough.wait(0.1)
    assert len(beats) == after


def test_a_failing_heartbeat_stops_beating_without_stopping_the_build():
    calls: list[int] = []

    def beat():
        calls.append(1)
        raise leases.LeaseLost()

    with generation_indexes._Heartbeat(beat, 0.01) as heartbeat:
        heartbeat.join(10)  # it ends by itself after the first failure
        assert not heartbeat.is_alive()
    assert calls == [1]


def test_a_hybrid_search_ranks_the_same_through_the_indexes_an_exact_scan_and_a_starved_index(settings,
                                                                                            monkeypatch):
    """The vector channel reads its rows' BM25 columns in its own query, in each of its three
    forms (the generation's HNSW walk, an exact scan, the exact scan completing a short walk)."""
    model = EmbeddingModelFactory()
    kb = _kb(model, "大库", 60)
    generation = selectors.generation_active(kb=kb)
    assert generation.vector_indexed and generation.keyword_indexed
    query = "大库段落 7 关于订单 7 的说明"
    options = SearchOptions(mode="hybrid", top_k=10, candidate_k=8, explain=True, rollup=False)
    # The nearest rows disabled: a walk at the floor of ef_search (2 × 8) comes back short.
    nearest = [row[0] for row in vector_candidates(model=model, generation_ids=[generation.pk], query_vector=(
        embedder_for(model).embed_query(query)), limit=12, indexed=[], need=12)]
    Chunk.objects.filter(pk__in=nearest).update(disabled=True)

    def hits():
        with CaptureQueriesContext(connection) as queries:
            found = [(h.chunk_id, h.score, h.explain) for h in search(kbs=[kb], query=query, options=options).hits]
        # The vector channel's reads: ordered by distance (the keyword channel's read has the
        # cosine of its rows too, not its order), with the BM25 columns.
        vector_reads = [q["sql"] for q in queries.captured_queries
                        if "ORDER BY (embedding::vector(" in q["sql"] and "ts_filter" in q["sql"]]
        return found, vector_reads

    walked, reads = hits()
    assert len(reads) == 1 and " + 0" not in reads[0]
    assert len(walked) == 10
    assert not set(nearest) & {h[0] for h in walked}
    assert all(h[2]["vector"]["score"] is not None and h[2]["keyword"]["score"] is not None for h in walked)
    assert {h[2]["keyword"]["rank"] is None for h in walked} == {True, False}  # vector-only hits among them

    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_vector_ef_search": 1}
    widened, reads = hits()
    # The walk, then one as wide as pgvector allows, which sees all 60 rows: no scan.
    assert len(reads) == 2 and " + 0" not in reads[0] and " + 0" not in reads[1]
    monkeypatch.setattr(vector_channel, "EF_SEARCH_MAX", 16)  # no wider walk than the first
    starved, reads = hits()
    assert len(reads) == 2 and " + 0" not in reads[0] and " + 0" in reads[1]  # the walk, then a scan
    monkeypatch.undo()
    settings.KNOWLEDGE_RETRIEVAL = {}
    IndexGeneration.objects.filter(pk=generation.pk).update(vector_indexed=False, keyword_indexed=False)
    scanned, reads = hits()
    assert len(reads) == 1 and " + 0" in reads[0]
    assert starved == scanned

    def without_vector_ranks(found):  # the walk orders near-ties (1e-8 apart) by the index's float4 distances
        return [(chunk_id, score, {**explain, "vector": explain["vector"]["score"]})
                for chunk_id, score, explain in found]

    assert without_vector_ranks(walked) == without_vector_ranks(scanned)
    assert without_vector_ranks(widened) == without_vector_ranks(scanned)


@pytest.mark.parametrize(("mode", "expected"), [("hybrid", 123), ("vector", 345)])
def test_hybrid_search_walks_with_its_own_ef_search(settings, mode, expected):
    """Hybrid search walks a generation's HNSW index with hybrid_vector_ef_search (its keyword
    channel finds what a longer walk would), vector search with vector_ef_search; either never
    below twice the candidate limit."""
    kb = _kb(EmbeddingModelFactory(), "大库", 60)
    assert selectors.generation_active(kb=kb).vector_indexed
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_vector_ef_search": 123, "vector_ef_search": 345}

    def walks(candidate_k: int) -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            hits = search(kbs=[kb], query="大库段落 7 关于订单 7 的说明",
                          options=SearchOptions(mode=mode, top_k=3, candidate_k=candidate_k, rollup=False)).hits
        assert len(hits) == 3
        return [re.search(r"set_config\('hnsw.ef_search', '(\d+)', true\)", q["sql"]).group(1)
                for q in queries.captured_queries if "hnsw.ef_search" in q["sql"]]

    assert walks(8) == [str(expected)]
    assert walks(400) == ["800"]
