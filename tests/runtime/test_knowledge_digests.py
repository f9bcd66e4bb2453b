"""A search reads a hit document's whole body (for its revision) once, until the document changes.

Transactional: the digests are kept only for what committed transactions wrote."""

import pytest
from django.db import transaction

from apps.knowledge.models import Chunk, Document
from apps.runtime.knowledge import documents
from apps.runtime.knowledge.documents import document_revision
from tests.runtime.knowledge_helpers import REFUND, document_body, read, search

pytest_plugins = ["tests.runtime.knowledge_fixtures"]
pytestmark = pytest.mark.django_db(transaction=True)

QUERY = "退款政策 七天无理由退货"


@pytest.fixture
def body_reads(monkeypatch):
    """The document ids each whole-body read was for."""
    documents.forget_body_digests()
    reads = []
    real = documents.document_sections

    def counted(*, document_ids, scope):
        reads.append(sorted(map(str, document_ids)))
        return real(document_ids=document_ids, scope=scope)

    monkeypatch.setattr(documents, "document_sections", counted)
    yield reads
    documents.forget_body_digests()


def _refund_hint(api_client, ksession, kroute):
    body = search(api_client, ksession.access_token, kroute.key, QUERY, limit=1).json()
    assert [hint["title"] for hint in body["hints"]] == ["退款.md"]
    return body["hints"][0]


def test_the_body_is_read_once_and_again_only_after_the_document_changed(api_client, ksession, kroute, docs,
                                                                          body_reads):
    refund = docs["退款.md"]
    first = _refund_hint(api_client, ksession, kroute)
    assert len(body_reads) == 1
    assert _refund_hint(api_client, ksession, kroute)["revision"] == first["revision"]
    assert len(body_reads) == 1  # the digest kept: no second read of the body

    # Any write of one of its rows is a change, even one that leaves the text alone.
    Chunk.objects.filter(document=refund, kind="child").update(metadata={"touched": True})
    assert _refund_hint(api_client, ksession, kroute)["revision"] == first["revision"]
    assert len(body_reads) == 2

    # New text: a new revision, the protocol's own, and a read by the new reference works.
    parent = Chunk.objects.get(document=refund, kind="parent")
    Chunk.objects.filter(pk=parent.pk).update(text=parent.text + "\n\n另：赠品须一并退回。")
    changed = _refund_hint(api_client, ksession, kroute)
    assert changed["revision"] != first["revision"]
    assert changed["revision"] == document_revision(title="退款.md", body=document_body(refund))
    assert len(body_reads) == 3
    page = read(api_client, ksession.access_token, kroute.key, changed["ref"]).json()
    assert page["revision"] == changed["revision"] and "赠品" in page["content"]
    # The old reference names the old revision: the document changed.
    old = read(api_client, ksession.access_token, kroute.key, first["ref"])
    assert (old.status_code, old.json()["error"]) == (409, "knowledge_changed")

    # A renamed document is another revision too (its title is hashed with the body).
    Document.objects.filter(pk=refund.pk).update(filename="退款政策.md")
    body = search(api_client, ksession.access_token, kroute.key, QUERY, limit=1).json()
    assert body["hints"][0]["title"] == "退款政策.md"
    assert body["hints"][0]["revision"] == document_revision(title="退款政策.md", body=document_body(refund))
    assert len(body_reads) == 4


def test_nothing_is_kept_from_inside_a_transaction_that_wrote(api_client, ksession, kroute, docs, body_reads):
    refund = docs["退款.md"]
    with transaction.atomic():
        Chunk.objects.filter(document=refund, kind="child").update(metadata={"touched": True})
        for _ in range(2):
            assert _refund_hint(api_client, ksession, kroute)["summary"] == REFUND
        assert len(body_reads) == 2
    _refund_hint(api_client, ksession, kroute)
    _refund_hint(api_client, ksession, kroute)
    assert len(body_reads) == 3


def test_only_the_hit_pieces_are_read_once_the_digest_is_kept(api_client, ksession, kroute, docs, body_reads):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _refund_hint(api_client, ksession, kroute)
    with CaptureQueriesContext(connection) as queries:
        _refund_hint(api_client, ksession, kroute)
    sql = [q["sql"] for q in queries.captured_queries]
    # No read of a document's sections in order; one read of the hit's piece by id.
    assert not [q for q in sql if 'ORDER BY "knowledge_chunk"."document_id"' in q]
    by_id = '"knowledge_chunk"."id" AS "id", "knowledge_chunk"."text" AS "text" FROM "knowledge_chunk"'
    pieces = [q for q in sql if by_id in q]
    assert len(pieces) == 1 and '"knowledge_chunk"."id" IN' in pieces[0], sql


def test_the_kept_digests_are_bounded_and_keyed_by_the_servers_life(api_client, ksession, kroute, docs, body_reads,
                                                                     monkeypatch):
    from django.db import connection

    monkeypatch.setattr(documents, "DIGESTS_KEPT", 2)
    search(api_client, ksession.access_token, kroute.key, "退款 配送 保修", limit=3)
    assert len(documents._digests) == 2  # three documents seen, the oldest let go
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time()::text")
        started = cursor.fetchone()[0]
    # Transaction ids repeat after a restore or a failover, never within one server's life.
    assert {key[0] for key in documents._digests} == {started}


def test_a_section_emptied_by_its_disabled_children_is_no_source_for_a_hint(api_client, ksession, kroute, docs,
                                                                            body_reads):
    refund = docs["退款.md"]
    _refund_hint(api_client, ksession, kroute)
    Chunk.objects.filter(document=refund, kind="parent").update(text="")  # as chunk overrides leave it
    body = search(api_client, ksession.access_token, kroute.key, QUERY, limit=3).json()
    assert "退款.md" not in [hint["title"] for hint in body["hints"]]
