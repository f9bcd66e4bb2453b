"""A document turned off: no search brings it (in any channel: it never takes a candidate's place),
no reference into it reads (409 knowledge_changed), no turn carries it; its chunks and index stay,
and turned on again it is read as before."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.knowledge import ingest, rebuild, selectors, services
from apps.knowledge.models import Chunk, Document, KnowledgeBase
from apps.knowledge.pipeline import vector_channel
from apps.knowledge.pipeline.retrieve import SearchOptions
from apps.knowledge.selectors import knowledge_search
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload
from tests.ledger.helpers import open_turn
from tests.runtime.knowledge_helpers import first_ref, ingest_texts, read, search

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

QUERY = "退款政策 七天无理由退货"


def _titles(body: dict) -> list[str]:
    return [hint["title"] for hint in body["hints"]]


def test_a_document_turned_off_gives_no_hints_and_the_others_still_do(api_client, ksession, kroute, docs, clock):
    before = search(api_client, ksession.access_token, kroute.key, "退款 配送 保修", limit=3).json()
    assert {"退款.md", "配送.md"} <= set(_titles(before))
    chunks = Chunk.objects.filter(document=docs["退款.md"]).count()
    services.document_set_enabled(document=docs["退款.md"], enabled=False)
    body = search(api_client, ksession.access_token, kroute.key, "退款 配送 保修", limit=3).json()
    assert body["status"] == "ok"
    assert "退款.md" not in _titles(body) and "配送.md" in _titles(body)
    # Its rows stay: turning it on again needs no ingestion.
    refund = Document.objects.get(pk=docs["退款.md"].pk)
    assert (refund.status, refund.enabled) == (Document.Status.COMPLETED, False)
    assert Chunk.objects.filter(document=refund).count() == chunks


def test_a_ref_into_a_document_turned_off_is_changed_and_reads_again_once_it_is_on(api_client, ksession, kroute,
                                                                                    docs, clock):
    ref = first_ref(api_client, ksession.access_token, kroute.key, QUERY)
    first = read(api_client, ksession.access_token, kroute.key, ref)
    assert first.status_code == 200
    services.document_set_enabled(document=docs["退款.md"], enabled=False)
    refused = read(api_client, ksession.access_token, kroute.key, ref)
    assert (refused.status_code, refused.json()["error"]) == (409, "knowledge_changed")
    assert refused["Cache-Control"] == "no-store"
    services.document_set_enabled(document=docs["退款.md"], enabled=True)
    again = read(api_client, ksession.access_token, kroute.key, ref)
    assert (again.status_code, again.json()["content"]) == (200, first.json()["content"])


def test_a_turn_carries_no_document_turned_off(api_client, ksession, kroute, docs):
    def titles(n: int) -> set[str]:
        response = open_turn(api_client, ksession.access_token, kroute.key, n, user_input="退款和配送的政策是什么？")
        assert response.status_code == 200, response.content
        return {entry["title"] for entry in response.json()["context"]["knowledge"]}

    assert {"退款.md", "配送.md"} <= titles(1)
    services.document_set_enabled(document=docs["退款.md"], enabled=False)
    remaining = titles(2)
    assert "配送.md" in remaining and "退款.md" not in remaining


def test_a_document_turned_off_while_pending_stays_off_once_ingested(kb):
    text = "# 旧\n\n退款政策：七天无理由退货。"
    [document] = services.document_upload(kb=kb, files=[upload("旧政策.md", text.encode())])
    services.document_set_enabled(document=document, enabled=False)
    assert ingest.document_ingest(document_id=document.pk) == "completed"
    assert Document.objects.get(pk=document.pk).enabled is False
    assert knowledge_search(kbs=[kb], query=QUERY, options=SearchOptions(top_k=5)).hits == []


def _crowd(kb) -> dict[str, Document]:
    """An old policy of 60 sections that each match the query better than the new one does: in
    any channel its chunks fill the 50 candidates."""
    old = "\n\n".join(f"# 第{n}节\n\n退款政策：七天无理由退货。退款政策第{n}条，七天无理由退货。" for n in range(60))
    return ingest_texts(kb, {"旧政策.md": old, "新政策.md": "# 新政策\n\n新的退款政策：十五天内可以退货。"})


@pytest.fixture
def crowded(kb):
    return _crowd(kb)


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_a_document_turned_off_takes_no_candidate_place_from_the_others(kb, crowded, mode):
    options = SearchOptions(top_k=5, mode=mode)
    assert "新政策.md" not in {hit.title for hit in knowledge_search(kbs=[kb], query=QUERY, options=options).hits}
    services.document_set_enabled(document=crowded["旧政策.md"], enabled=False)
    titles = {hit.title for hit in knowledge_search(kbs=[kb], query=QUERY, options=options).hits}
    assert titles == {"新政策.md"}


def test_a_document_turned_off_stays_off_through_a_rebuild(kb, crowded):
    services.document_set_enabled(document=crowded["旧政策.md"], enabled=False)
    generation = services.knowledge_base_rebuild(kb=kb)
    assert rebuild.generation_build(generation_id=generation.pk) == "activated"
    hits = knowledge_search(kbs=[kb], query=QUERY, options=SearchOptions(top_k=5)).hits
    assert {hit.title for hit in hits} == {"新政策.md"}
    assert Document.objects.get(pk=crowded["旧政策.md"].pk).enabled is False


@pytest.mark.django_db(transaction=True)
def test_a_document_turned_off_takes_no_place_in_walks_of_a_generations_own_indexes(settings):
    """A generation large enough for HNSW and GIN indexes of its own: the walk and the posting
    reads skip the document too (the test above reads small generations by exact scans)."""
    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40}
    kb = KnowledgeBaseFactory()
    try:
        documents = _crowd(kb)
        generation = selectors.generation_active(kb=kb)
        assert (generation.vector_indexed, generation.keyword_indexed) == (True, True)
        services.document_set_enabled(document=documents["旧政策.md"], enabled=False)
        for mode in ("keyword", "vector", "hybrid"):
            hits = knowledge_search(kbs=[kb], query=QUERY, options=SearchOptions(top_k=5, mode=mode)).hits
            assert {hit.title for hit in hits} == {"新政策.md"}, mode
    finally:
        services.knowledge_base_delete(kb=KnowledgeBase.objects.get(pk=kb.pk))


def _exact_scans(kb, mode: str) -> tuple[set[str], int]:
    """The titles a search finds, and how many exact scans of the vector channel it made."""
    with CaptureQueriesContext(connection) as queries:
        hits = knowledge_search(kbs=[kb], query=QUERY, options=SearchOptions(top_k=5, mode=mode)).hits
    return {hit.title for hit in hits}, sum("+ 0, id LIMIT" in query["sql"] for query in queries.captured_queries)


@pytest.mark.django_db(transaction=True)
def test_a_walk_short_of_rows_scans_only_when_it_could_not_see_every_row(settings, monkeypatch):
    """A document turned off near the query leaves the walk short. A walk as wide as the
    generation's rows has seen every one: no exact scan of the generation follows (the wider walk
    of a narrower one is in tests/knowledge/test_generation_indexes.py). One that could neither see
    them all nor widen is followed by a scan."""
    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40, "vector_exact_fallback_max": 10}
    kb = KnowledgeBaseFactory()
    try:
        documents = _crowd(kb)
        assert selectors.generation_active(kb=kb).vector_indexed
        assert _exact_scans(kb, "vector") == ({"旧政策.md"}, 0)
        services.document_set_enabled(document=documents["旧政策.md"], enabled=False)
        assert _exact_scans(kb, "vector") == ({"新政策.md"}, 0)
        monkeypatch.setattr(vector_channel, "EF_SEARCH_MAX", 40)  # smaller than the generation's 61 rows
        assert _exact_scans(kb, "vector") == ({"新政策.md"}, 1)
    finally:
        services.knowledge_base_delete(kb=KnowledgeBase.objects.get(pk=kb.pk))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_one_search_over_a_kb_with_indexes_of_its_own_and_one_without(settings, mode):
    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 40}
    crowded = KnowledgeBaseFactory()
    small = KnowledgeBaseFactory(embedding_model=crowded.embedding_model)
    try:
        documents = _crowd(crowded)
        ingest_texts(small, {"小库.md": "# 小库\n\n另一条退款政策：三十天内可以退货。"})
        services.document_set_enabled(document=documents["旧政策.md"], enabled=False)
        hits = knowledge_search(kbs=[crowded, small], query=QUERY, options=SearchOptions(top_k=5, mode=mode)).hits
        assert {hit.title for hit in hits} == {"新政策.md", "小库.md"}
    finally:
        for kb in (crowded, small):
            services.knowledge_base_delete(kb=KnowledgeBase.objects.get(pk=kb.pk))
