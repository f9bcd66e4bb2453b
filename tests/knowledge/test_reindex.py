"""Keyword indexes written with an older tokenisation are rewritten in place by reindex_keywords."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from apps.knowledge import ingest, services
from apps.knowledge.models import Chunk, IndexGeneration, KeywordTermStat
from apps.knowledge.pipeline.retrieve import SearchOptions, search
from apps.knowledge.pipeline.terms import ANALYZER
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import upload

pytestmark = pytest.mark.django_db

TEXTS = {
    "returns.txt": "Refunds are issued within seven days. Returned items must be unused.",
    "tw.txt": "退貨政策：商品於七天內可申請退款。",
}


@pytest.fixture
def model():
    # One model for every KB of a test: registering a model creates an index, which PostgreSQL
    # refuses inside a transaction that has already written chunks.
    return EmbeddingModelFactory()


def _kb_with_old_index(model):
    """A KB ingested now, then made to look indexed by analyzer 1 (words unstemmed, Han unfolded)."""
    kb = KnowledgeBaseFactory(embedding_model=model)
    for document in services.document_upload(kb=kb, files=[upload(n, t.encode()) for n, t in TEXTS.items()]):
        assert ingest.document_ingest(document_id=document.pk) == "completed"
    generation = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    old_terms = {
        "returns.txt": ["refunds", "are", "issued", "within", "seven", "days", "returned", "items", "must", "be",
                        "unused"],
        "tw.txt": ["退", "貨", "政", "策", "退貨", "貨政", "政策", "商", "品", "於", "七", "天", "內", "可", "申",
                   "請", "退", "款", "退款"],
    }
    with connection.cursor() as cursor:
        for name, terms in old_terms.items():
            cursor.execute(
                "UPDATE knowledge_chunk SET search_vector = array_to_tsvector(%s::text[]) "
                "WHERE generation_id = %s AND kind = 'child' AND document_id = "
                "(SELECT id FROM knowledge_document WHERE knowledge_base_id = %s AND filename = %s)",
                [[*sorted(set(terms)), "#g" + generation.pk.hex], generation.pk, kb.pk, name],
            )
        cursor.execute("DELETE FROM knowledge_keywordtermstat WHERE generation_id = %s", [generation.pk])
    IndexGeneration.objects.filter(pk=generation.pk).update(keyword_analyzer=1)
    return kb, generation


def _stats(generation) -> dict[str, int]:
    return dict(KeywordTermStat.objects.filter(generation=generation).values_list("term", "df"))


def _keyword_docs(kb, query):
    result = search(kbs=[kb], query=query, options=SearchOptions(mode="keyword", top_k=5))
    return {hit.document_id for hit in result.hits}


def test_reindex_rewrites_old_generations_so_stems_and_folded_characters_match(model):
    kb, generation = _kb_with_old_index(model)
    assert _keyword_docs(kb, "refund") == set()  # the stale index cannot match the stemmed query
    out = StringIO()
    call_command("reindex_keywords", stdout=out)
    assert "2 chunks rewritten in 1 knowledge bases" in out.getvalue()
    generation.refresh_from_db()
    assert generation.keyword_analyzer == ANALYZER
    docs = {d.filename: d.pk for d in kb.documents.all()}
    assert _keyword_docs(kb, "refund") == {docs["returns.txt"]}
    assert _keyword_docs(kb, "退货") == {docs["tw.txt"]}
    stats = _stats(generation)
    assert (stats["#n"], stats["refund"], stats["退货"], stats.get("refunds", 0)) == (2, 1, 1, 0)


def test_reindex_matches_a_fresh_ingest_and_a_second_run_changes_nothing(model):
    fresh = KnowledgeBaseFactory(embedding_model=model)
    for document in services.document_upload(kb=fresh, files=[upload(n, t.encode()) for n, t in TEXTS.items()]):
        ingest.document_ingest(document_id=document.pk)
    _, generation = _kb_with_old_index(model)
    call_command("reindex_keywords", stdout=StringIO())
    fresh_generation = IndexGeneration.objects.get(knowledge_base=fresh, status="active")
    assert _stats(generation) == _stats(fresh_generation)
    vectors = (Chunk.objects.filter(generation=generation, kind="child").order_by("text")
               .values_list("text", "embedding"))
    before = [(text, list(vector)) for text, vector in vectors]
    out = StringIO()
    call_command("reindex_keywords", stdout=out)
    assert "0 chunks rewritten in 0 knowledge bases" in out.getvalue()
    assert [(text, list(vector)) for text, vector in vectors] == before  # embeddings never touched


def test_reindex_of_an_unknown_kb_is_refused_and_changes_nothing(model):
    kb, generation = _kb_with_old_index(model)
    with pytest.raises(CommandError, match="no knowledge base with id 00000000-0000-0000-0000-000000000000"):
        call_command("reindex_keywords", "--kb", str(kb.pk), "--kb", "00000000-0000-0000-0000-000000000000")
    with pytest.raises(CommandError, match="--kb takes knowledge base ids"):
        call_command("reindex_keywords", "--kb", "not-a-uuid")
    generation.refresh_from_db()
    assert (generation.keyword_analyzer, _stats(generation)) == (1, {})


def test_reindex_limited_to_one_kb_leaves_the_others(model):
    _, first_generation = _kb_with_old_index(model)
    second, second_generation = _kb_with_old_index(model)
    call_command("reindex_keywords", "--kb", str(second.pk), stdout=StringIO())
    first_generation.refresh_from_db()
    second_generation.refresh_from_db()
    assert (first_generation.keyword_analyzer, second_generation.keyword_analyzer) == (1, ANALYZER)


def _positions(generation) -> set:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT u.positions IS NULL FROM knowledge_chunk c, unnest(c.search_vector) u "
                       "WHERE c.generation_id = %s AND c.kind = 'child' AND left(u.lexeme, 1) <> '#'",
                       [generation.pk])
        return {row[0] for row in cursor.fetchall()}


def test_force_rewrites_a_current_generation_that_older_code_wrote_without_frequencies(model):
    """A worker still running the code before analyzer 3 can write terms without their frequencies
    into a generation created at 3 during an upgrade: the stored-frequency path reads them as
    absent. --force rewrites the named KB's live generations whatever their analyzer says."""
    kb = KnowledgeBaseFactory(embedding_model=model)
    for document in services.document_upload(kb=kb, files=[upload(n, t.encode()) for n, t in TEXTS.items()]):
        ingest.document_ingest(document_id=document.pk)
    generation = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    stats = _stats(generation)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE knowledge_chunk SET search_vector = strip(search_vector) WHERE generation_id = %s",
                       [generation.pk])
    assert _positions(generation) == {True} and generation.keyword_analyzer == ANALYZER
    assert _keyword_docs(kb, "refund") == set()  # the frequencies read as absent

    out = StringIO()
    call_command("reindex_keywords", stdout=out)
    assert "0 chunks rewritten" in out.getvalue()  # without --force the generation looks current
    call_command("reindex_keywords", "--kb", str(kb.pk), "--force", stdout=out)

    assert _positions(generation) == {False}
    assert _stats(generation) == stats
    docs = {d.filename: d.pk for d in kb.documents.all()}
    assert _keyword_docs(kb, "refund") == {docs["returns.txt"]}


def test_force_without_named_kbs_is_refused_and_changes_nothing(model):
    _kb, generation = _kb_with_old_index(model)
    with pytest.raises(CommandError, match="name them with --kb"):
        call_command("reindex_keywords", "--force")
    generation.refresh_from_db()
    assert (generation.keyword_analyzer, _stats(generation)) == (1, {})
