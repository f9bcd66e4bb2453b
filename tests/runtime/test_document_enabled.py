"""A document turned off: no search brings it (in any channel: it never takes a candidate's place),
no reference into it reads (409 knowledge_changed), no turn carries it; its chunks and index stay,
and turned on again it is read as before."""

import pytest

from apps.knowledge import ingest, selectors, services
from apps.knowledge.models import Chunk, Document, KnowledgeBase
from apps.knowledge.pipeline.retrieve import SearchOptions
from apps.knowledge.selectors import knowledge_search
from tests.knowledge.factories import KnowledgeBaseFactory
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
    services.document_enable(document=docs["退款.md"], enabled=False)
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
    services.document_enable(document=docs["退款.md"], enabled=False)
    refused = read(api_client, ksession.access_token, kroute.key, ref)
    assert (refused.status_code, refused.json()["error"]) == (409, "knowledge_changed")
    assert refused["Cache-Control"] == "no-store"
    services.document_enable(document=docs["退款.md"], enabled=True)
    again = read(api_client, ksession.access_token, kroute.key, ref)
    assert (again.status_code, again.json()["content"]) == (200, first.json()["content"])


def test_a_turn_carries_no_document_turned_off(api_client, ksession, kroute, docs):
    services.document_enable(document=docs["退款.md"], enabled=False)
    response = open_turn(api_client, ksession.access_token, kroute.key, user_input="退款政策是什么？")
    assert response.status_code == 200, response.content
    titles = {entry["title"] for entry in response.json()["context"]["knowledge"]}
    assert "退款.md" not in titles


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
    services.document_enable(document=crowded["旧政策.md"], enabled=False)
    titles = {hit.title for hit in knowledge_search(kbs=[kb], query=QUERY, options=options).hits}
    assert titles == {"新政策.md"}


def test_a_document_turned_off_stays_off_through_a_rebuild(kb, crowded):
    services.document_enable(document=crowded["旧政策.md"], enabled=False)
    generation = services.knowledge_base_rebuild(kb=kb)
    assert ingest.generation_build(generation_id=generation.pk) == "activated"
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
        services.document_enable(document=documents["旧政策.md"], enabled=False)
        for mode in ("keyword", "vector", "hybrid"):
            hits = knowledge_search(kbs=[kb], query=QUERY, options=SearchOptions(top_k=5, mode=mode)).hits
            assert {hit.title for hit in hits} == {"新政策.md"}, mode
    finally:
        services.knowledge_base_delete(kb=KnowledgeBase.objects.get(pk=kb.pk))
