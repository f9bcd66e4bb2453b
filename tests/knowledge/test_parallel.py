"""The vector channel beside the keyword channel, on a second connection (outside transactions)."""

import threading
import time

import pytest
from django.db import DatabaseError, InterfaceError, OperationalError, connection, connections, transaction

from apps.core import dblimits
from apps.knowledge import services
from apps.knowledge.models import KnowledgeBase
from apps.knowledge.pipeline import parallel
from apps.knowledge.pipeline.retrieve import SearchOptions, search
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

pytestmark = pytest.mark.django_db(transaction=True)

# Of different lengths ("另见附录" i times), so that doc0, the shortest, is the keyword channel's
# second in every run. When all were alike, its second and third were two of nineteen tied
# documents in chunk-id order (random per run), and once in a full suite they were the two the
# vector channel had chosen: the channels agreed, and a test that needs them to disagree failed.
TEXTS = {f"doc{i}.txt": f"退款政策第{i}条：商品签收后{i}天内可申请退款{'，另见附录' * i}，refund window {i} days."
         for i in range(20)}


@pytest.fixture
def kb():
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, TEXTS)
    yield kb
    services.knowledge_base_delete(kb=KnowledgeBase.objects.get(pk=kb.pk))


def _backend_pid():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_outside_a_transaction_the_worker_runs_on_its_own_connection():
    assert parallel.enabled()
    future = parallel.run_beside(_backend_pid)
    assert future is not None
    assert future.result(timeout=30) != _backend_pid()


def test_inside_a_transaction_nothing_runs_beside():
    with transaction.atomic():
        assert not parallel.enabled()
        assert parallel.run_beside(_backend_pid) is None


def test_parallel_and_sequential_hybrid_searches_agree(kb, settings):
    options = SearchOptions(mode="hybrid", top_k=10, explain=True)
    settings.KNOWLEDGE_SEARCH_PARALLEL = True
    parallel.shutdown()  # no worker yet: only a search that hands its vector channel over starts one
    beside = search(kbs=[kb], query="签收后7天内退款 refund", options=options)  # the embedding too
    assert parallel._executor is not None
    vector_beside = search(kbs=[kb], query="签收后7天内退款 refund",
                           options=SearchOptions(mode="hybrid", top_k=10, explain=True, embed_beside=False))
    parallel.shutdown()
    settings.KNOWLEDGE_SEARCH_PARALLEL = False
    sequential = search(kbs=[kb], query="签收后7天内退款 refund", options=options)
    assert parallel._executor is None
    assert len(beside.hits) == 10
    expected = [(h.chunk_id, h.score, h.explain) for h in sequential.hits]
    assert [(h.chunk_id, h.score, h.explain) for h in beside.hits] == expected
    assert [(h.chunk_id, h.score, h.explain) for h in vector_beside.hits] == expected
    for result in (beside, vector_beside, sequential):
        assert {"query_embedding_ms", "vector_ms", "keyword_ms"} <= set(result.timings_ms)
        assert result.timings_ms["query_embedding_ms"] > 0


def test_the_worker_walks_an_hnsw_index_with_its_session_settings_set_once(settings, monkeypatch):
    """On the worker's own connection the walk's settings (ef_search, no sort) stay for its session:
    set by the first search, not again (no transaction, no SET LOCAL on the walk's path), and the
    hits are the sequential search's, which sets them in a transaction of its own."""
    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40, "hybrid_vector_ef_search": 123}
    kb = KnowledgeBaseFactory(chunk_strategy={"strategy": "by_paragraph", "min_chars": 0, "max_chars": 200,
                                              "overlap_chars": 0})
    ingest_texts(kb, {"big.txt": "\n\n".join(f"段落 {i} 关于订单 {i % 37} 的说明" for i in range(120))})
    made = [kb]
    try:
        from apps.knowledge import selectors

        assert selectors.generation_active(kb=kb).vector_indexed
        options = SearchOptions(mode="hybrid", top_k=5, explain=True, rollup=False, embed_beside=False)
        settings.KNOWLEDGE_SEARCH_PARALLEL = False
        sequential = search(kbs=[kb], query="订单 7 的说明", options=options)
        settings.KNOWLEDGE_SEARCH_PARALLEL = True
        parallel.shutdown()  # a new worker: a connection without the settings
        statements = []
        real = parallel.session_settings

        def counted(values):
            before = getattr(connection, parallel._SESSION_SET, None)
            real(values)
            statements.append((dict(values), before != getattr(connection, parallel._SESSION_SET, None)))

        monkeypatch.setattr(parallel, "session_settings", counted)
        first = search(kbs=[kb], query="订单 7 的说明", options=options)
        second = search(kbs=[kb], query="订单 8 的说明", options=options)
        assert [set_now for _, set_now in statements] == [True, False]
        assert statements[0][0] == {"hnsw.ef_search": "123", "enable_sort": "off"}
        assert [(h.chunk_id, h.score) for h in first.hits] == [(h.chunk_id, h.score) for h in sequential.hits]
        assert len(second.hits) == 5

        def session():
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_setting('hnsw.ef_search'), current_setting('enable_sort')")
                return cursor.fetchone()

        assert parallel.run_beside(session).result(timeout=30) == ("123", "off")
        assert session() != ("123", "off")  # the caller's own connection never has them

        # An exact scan (a KB too small for an index of its own) on the same worker sorts again.
        from apps.knowledge.pipeline import vector_channel

        sorting = []
        real_query = vector_channel._vector_query

        def spied(dim, *, generations, **kwargs):
            if isinstance(generations, list):
                with connection.cursor() as cursor:
                    cursor.execute("SELECT current_setting('enable_sort')")
                    sorting.append(cursor.fetchone()[0])
            return real_query(dim, generations=generations, **kwargs)

        monkeypatch.setattr(vector_channel, "_vector_query", spied)
        small = KnowledgeBaseFactory()
        made.append(small)
        ingest_texts(small, {f"s{i}.txt": f"退款规则第{i}条" for i in range(8)})  # under the 40 rows of an index
        assert not selectors.generation_active(kb=small).vector_indexed
        assert len(search(kbs=[small], query="退款", options=options).hits) == 5
        assert sorting == ["on"]
        assert [set_now for _, set_now in statements] == [True, False, True]
    finally:
        for each in made:
            services.knowledge_base_delete(kb=KnowledgeBase.objects.get(pk=each.pk))


def _watch_query_embeddings(monkeypatch) -> list[tuple[str, str]]:
    """(thread name, query) of each query the engine embeds from now on."""
    from apps.knowledge.pipeline import embedders

    seen: list[tuple[str, str]] = []
    real = embedders.embedder_for

    def watched(model):
        embedder = real(model)

        class Watched:
            def embed_knowledge_query(self, text):
                seen.append((threading.current_thread().name, text))
                return embedder.embed_knowledge_query(text)

        return Watched()

    monkeypatch.setattr("apps.knowledge.pipeline.retrieve.embedder_for", watched)
    return seen


def test_the_query_is_embedded_on_the_worker_beside_the_keyword_channel(kb, monkeypatch):
    seen = _watch_query_embeddings(monkeypatch)
    search(kbs=[kb], query="退款", options=SearchOptions(mode="hybrid", top_k=3))
    search(kbs=[kb], query="退款", options=SearchOptions(mode="hybrid", top_k=3, embed_beside=False))
    search(kbs=[kb], query="退款", options=SearchOptions(mode="vector", top_k=3))
    threads = [thread for thread, _ in seen]
    assert threads[0].startswith("bailinghub-search")
    assert threads[1:] == [threading.current_thread().name] * 2


def test_an_error_in_the_worker_reaches_the_caller_and_the_next_search_still_works(kb):
    def fail():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1/0")

    with pytest.raises(Exception, match="division by zero"):
        parallel.run_beside(fail).result(timeout=30)
    result = search(kbs=[kb], query="退款", options=SearchOptions(mode="hybrid", top_k=3))
    assert len(result.hits) == 3


def test_a_busy_worker_is_not_queued_behind():
    import threading

    release = threading.Event()
    first = parallel.run_beside(release.wait, 30)
    try:
        assert first is not None
        assert parallel.run_beside(_backend_pid) is None  # busy: the caller runs its channel itself
    finally:
        release.set()
    assert first.result(timeout=30) is True
    assert parallel.run_beside(_backend_pid).result(timeout=30) != _backend_pid()


def test_a_worker_connection_the_server_dropped_is_opened_again(settings):
    """A terminated backend costs the next search nothing but a new connection: its work fails on
    the kept connection and runs again, once, on a new one."""
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"]
    first = parallel.run_beside(_backend_pid).result(timeout=30)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [first])
        assert cursor.fetchone() == (True,)
    second = parallel.run_beside(_backend_pid).result(timeout=30)
    assert second not in (first, _backend_pid())
    assert parallel.run_beside(_backend_pid).result(timeout=30) == second  # kept open


def test_a_search_whose_worker_connection_died_finds_the_same_hits(kb, monkeypatch):
    """The worker embeds the query, then its walk fails on the dead connection and runs again on a
    new one: the query is embedded once, its vector handed over once, and the hits are the same."""
    options = SearchOptions(mode="hybrid", top_k=5, explain=True)
    before = search(kbs=[kb], query="签收后7天内退款", options=options)
    worker = parallel.run_beside(_backend_pid).result(timeout=30)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [worker])
    seen = _watch_query_embeddings(monkeypatch)
    after = search(kbs=[kb], query="签收后7天内退款", options=options)
    assert [query for _, query in seen] == ["签收后7天内退款"]
    assert [(h.chunk_id, h.score) for h in after.hits] == [(h.chunk_id, h.score) for h in before.hits]
    assert len(after.hits) == 5
    assert parallel.run_beside(_backend_pid).result(timeout=30) not in (worker, _backend_pid())


def _terminate_soon(pid, after=0.3):
    """Terminate backend `pid` `after` seconds into its pg_sleep. (Counted from the killer's start,
    a worker thread slow to start the job was terminated while idle: its first statement then
    failed at once, was rightly run again on a new connection, and nothing was raised.)"""
    def terminate():
        with connections["default"].cursor() as cursor:  # this thread's own connection
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s AND state = 'active'", [pid])
                row = cursor.fetchone()
                if row and "pg_sleep" in row[0]:
                    break
                time.sleep(0.01)
            time.sleep(after)
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        connections["default"].close()

    thread = threading.Thread(target=terminate)
    thread.start()
    return thread


@pytest.mark.parametrize("first", ["SELECT 1", None], ids=["after a statement completed", "during its first"])
def test_a_job_whose_backend_is_terminated_while_it_runs_is_not_run_again(first):
    """Only a connection found dead by a job's first statement gets another try: a job killed while
    it runs (an operator stopping a runaway walk) or after a statement completed (which may have
    written) fails with its error, once."""
    worker = parallel.run_beside(_backend_pid).result(timeout=30)  # limits kept: the job runs no check
    runs = []

    def job():
        runs.append(1)
        with connection.cursor() as cursor:
            if first:
                cursor.execute(first)
            cursor.execute("SELECT pg_sleep(3)")

    killer = _terminate_soon(worker)
    with pytest.raises((OperationalError, InterfaceError)):
        parallel.run_beside(job).result(timeout=30)
    killer.join()
    assert runs == [1]
    assert parallel.run_beside(_backend_pid).result(timeout=30) not in (worker, _backend_pid())


def test_a_healthy_worker_connection_is_not_checked_with_a_round_trip_of_its_own(monkeypatch):
    parallel.run_beside(_backend_pid).result(timeout=30)  # the worker's connection is open
    checks = []
    wrapper = type(connections["default"])  # the backend's class, which every thread's connection is
    original = wrapper.is_usable

    def is_usable(self):
        checks.append(threading.current_thread().name)
        return original(self)

    monkeypatch.setattr(wrapper, "is_usable", is_usable)
    assert parallel.run_beside(_backend_pid).result(timeout=30) != _backend_pid()
    assert [name for name in checks if name.startswith("bailinghub-search")] == []


def test_the_worker_runs_under_the_callers_timeouts():
    def limits():
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")
            return cursor.fetchone()

    with dblimits.limited(lock_timeout_ms=1234, statement_timeout_ms=5000):
        assert parallel.run_beside(limits).result(timeout=30) == ("1234ms", "5s")
        assert parallel.run_beside(limits).result(timeout=30) == ("1234ms", "5s")  # kept, not set again
        with dblimits.limited(lock_timeout_ms=100, statement_timeout_ms=200):
            assert parallel.run_beside(limits).result(timeout=30) == ("100ms", "200ms")
    # Outside a block: the server's defaults, whatever the worker's connection had before.
    assert parallel.run_beside(limits).result(timeout=30) == ("0", "0")


def test_the_worker_sets_limits_only_when_they_change(monkeypatch):
    parallel.run_beside(_backend_pid).result(timeout=30)  # the worker's connection is open
    statements = []
    real = parallel._set_limits
    monkeypatch.setattr(parallel, "_set_limits", lambda limits: (statements.append(limits), real(limits)))
    for _ in range(3):
        parallel.run_beside(_backend_pid).result(timeout=30)
    with dblimits.limited(lock_timeout_ms=1234, statement_timeout_ms=5000):
        for _ in range(3):
            parallel.run_beside(_backend_pid).result(timeout=30)
    parallel.run_beside(_backend_pid).result(timeout=30)
    assert statements == [["1234ms", "5000ms"], None]


def test_a_timeout_on_the_worker_is_not_run_again():
    runs = []

    def slow():
        runs.append(1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")

    parallel.run_beside(_backend_pid).result(timeout=30)
    with dblimits.limited(lock_timeout_ms=100, statement_timeout_ms=100):
        parallel.run_beside(_backend_pid).result(timeout=30)  # the limits set: the next job sets nothing
        with pytest.raises(OperationalError, match="statement timeout"):
            parallel.run_beside(slow).result(timeout=30)
    assert runs == [1]
    assert parallel.run_beside(_backend_pid).result(timeout=30) != _backend_pid()


def test_an_embedding_error_on_the_worker_reaches_the_caller_waiting_for_the_vector(kb, monkeypatch):
    threads = []

    class Down:
        def embed_knowledge_query(self, text):
            threads.append(threading.current_thread().name)
            raise RuntimeError("embedder down")

    monkeypatch.setattr("apps.knowledge.pipeline.retrieve.embedder_for", lambda model: Down())
    with pytest.raises(RuntimeError, match="embedder down"):
        search(kbs=[kb], query="退款", options=SearchOptions(mode="hybrid", top_k=3))
    assert len(threads) == 1 and threads[0].startswith("bailinghub-search")
    monkeypatch.undo()
    assert len(search(kbs=[kb], query="退款", options=SearchOptions(mode="hybrid", top_k=3)).hits) == 3


def test_a_failed_keyword_statistics_read_frees_the_worker_waiting_for_the_scorer(kb, monkeypatch):
    """The vector channel starts before the caller reads the keyword statistics and takes the
    scorer from it afterwards: when that read fails, the worker must not wait for it forever."""
    def broken(**kwargs):
        raise DatabaseError("statistics unavailable")

    monkeypatch.setattr("apps.knowledge.pipeline.retrieve.keyword_scorer", broken)
    for embed_beside in (True, False):
        with pytest.raises(DatabaseError, match="statistics unavailable"):
            search(kbs=[kb], query="退款", options=SearchOptions(mode="hybrid", top_k=3, embed_beside=embed_beside))
        # The worker finishes its walk and frees its slot (it would hold it forever, waiting).
        assert parallel._free.acquire(timeout=30)
        parallel._free.release()
    monkeypatch.undo()
    assert len(search(kbs=[kb], query="退款", options=SearchOptions(mode="hybrid", top_k=3)).hits) == 3


def test_waiting_for_the_vector_ends_when_the_worker_stops_before_embedding():
    from concurrent.futures import Future

    from apps.knowledge.pipeline.retrieve import _query_vector_from

    embedded, beside = Future(), Future()
    beside.set_exception(ConnectionError("the worker's connection broke"))
    with pytest.raises(ConnectionError, match="connection broke"):
        _query_vector_from(embedded, beside)
    embedded = Future()
    embedded.set_result([0.5, 0.5])
    assert _query_vector_from(embedded, Future()) == [0.5, 0.5]  # not waiting for the vector channel


def test_where_the_channels_disagree_both_complete_each_others_candidates_alike_in_parallel_and_in_turn(
        kb, settings):
    """Three candidates a channel: keyword-only candidates get their cosines on this thread while
    the worker's vector channel runs, vector-only ones their BM25 in the vector channel's query;
    in turn (no worker) the same scores come from the same reads, after the vector channel."""
    query = "签收后7天内退款 refund window 7 days"
    options = SearchOptions(mode="hybrid", top_k=6, candidate_k=3, explain=True)
    settings.KNOWLEDGE_SEARCH_PARALLEL = True
    parallel.shutdown()
    beside = search(kbs=[kb], query=query, options=options)
    vector_beside = search(kbs=[kb], query=query, options=SearchOptions(
        mode="hybrid", top_k=6, candidate_k=3, explain=True, embed_beside=False))
    assert parallel._executor is not None
    parallel.shutdown()
    settings.KNOWLEDGE_SEARCH_PARALLEL = False
    sequential = search(kbs=[kb], query=query, options=options)
    found = [(h.chunk_id, h.score, h.explain) for h in sequential.hits]
    assert [(h.chunk_id, h.score, h.explain) for h in beside.hits] == found
    assert [(h.chunk_id, h.score, h.explain) for h in vector_beside.hits] == found
    explains = [h.explain for h in sequential.hits]
    assert any(e["keyword"]["rank"] is None for e in explains)  # the premise: the channels disagree
    assert any(e["vector"]["rank"] is None for e in explains)
    assert all(e["keyword"]["score"] is not None and e["vector"]["score"] is not None for e in explains)
