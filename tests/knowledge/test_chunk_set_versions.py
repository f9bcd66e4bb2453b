"""The version of each document's chunk rows in a generation (models.ChunkSetVersion), kept by
triggers on knowledge_chunk: every statement that writes a pair's rows gives it a new version,
whoever runs it; the pair's last row takes it away."""

import pytest
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from apps.knowledge import selectors
from apps.knowledge.models import Chunk, ChunkSetVersion, Document
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

pytestmark = pytest.mark.django_db

TEXTS = {
    "a.md": "# 第一章\n\n退款须在七天内申请。\n\n# 第二章\n\n配送需要三天。",
    "b.md": "# Weather\n\nIt will rain in the mountains.",
}


@pytest.fixture
def kb_docs():
    kb = KnowledgeBaseFactory()
    return kb, ingest_texts(kb, TEXTS)


def _versions() -> dict:
    return {(v.document_id, v.generation_id): v.version for v in ChunkSetVersion.objects.all()}


def test_ingested_documents_have_one_version_per_generation(kb_docs):
    kb, docs = kb_docs
    generation = selectors.generation_active(kb=kb)
    assert Chunk.objects.filter(document=docs["a.md"]).count() > 2  # the premise: several rows
    assert set(_versions()) == {(docs["a.md"].pk, generation.pk), (docs["b.md"].pk, generation.pk)}


def test_any_write_of_a_row_gives_its_document_a_new_version_and_no_other(kb_docs):
    kb, docs = kb_docs
    generation = selectors.generation_active(kb=kb).pk
    a, b = (docs["a.md"].pk, generation), (docs["b.md"].pk, generation)
    before = _versions()
    Chunk.objects.filter(document_id=a[0], kind="child").update(metadata={"touched": True})  # the ORM, text unchanged
    after_orm = _versions()
    assert after_orm[a] > before[a]
    assert after_orm[b] == before[b]
    with connection.cursor() as cursor:  # raw SQL counts as much
        cursor.execute("UPDATE knowledge_chunk SET disabled = disabled WHERE document_id = %s", [b[0]])
    after_raw = _versions()
    assert after_raw[b] > after_orm[b]
    assert after_raw[a] == after_orm[a]
    assert set(after_raw) == {a, b} and after_raw[a] != after_raw[b]


def test_deleting_rows_keeps_a_new_version_and_the_last_row_takes_it_away(kb_docs):
    _kb, docs = kb_docs
    a = docs["a.md"].pk
    key = next(key for key in _versions() if key[0] == a)
    before = _versions()[key]
    first = Chunk.objects.filter(document_id=a, kind="child").order_by("index").first()
    Chunk.objects.filter(pk=first.pk).delete()
    assert _versions()[key] > before
    Chunk.objects.filter(document_id=a).delete()
    assert key not in _versions()
    assert len(_versions()) == 1  # b.md's


def test_deleting_a_document_leaves_no_version_behind(kb_docs):
    kb, docs = kb_docs
    docs["a.md"].delete()  # Django deletes the rows in its own order; no foreign key to trip
    assert {document_id for document_id, _ in _versions()} == {docs["b.md"].pk}
    kb.delete()
    assert _versions() == {}
    assert not Document.objects.exists()


def test_a_rolled_back_write_leaves_the_version_as_it_was(kb_docs):
    _kb, docs = kb_docs
    before = _versions()
    with pytest.raises(RuntimeError), transaction.atomic():
        Chunk.objects.filter(document=docs["a.md"]).update(metadata={"x": 1})
        assert _versions() != before  # seen inside
        raise RuntimeError("roll back")
    assert _versions() == before


def test_the_migration_gives_every_existing_pair_a_version():
    """Rows written before migration 0011 (no triggers yet) get their versions from it."""
    kb = KnowledgeBaseFactory()
    docs = ingest_texts(kb, TEXTS)
    generation = selectors.generation_active(kb=kb)
    with connection.cursor() as cursor:
        # The windows' foreign keys are checked now: a table with pending checks cannot be dropped.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.migrate([("knowledge", "0010_keyword_index_per_generation")])
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('knowledge_chunksetversion'), count(*) FROM pg_trigger "
                       "WHERE tgname LIKE 'knowledge_chunk_set_versions%%'")
        assert cursor.fetchone() == (None, 0)
        cursor.execute("UPDATE knowledge_chunk SET metadata = '{}' WHERE document_id = %s", [docs["a.md"].pk])
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    versions = _versions()
    assert set(versions) == {(docs["a.md"].pk, generation.pk), (docs["b.md"].pk, generation.pk)}
    assert len(set(versions.values())) == 2
