"""PDFs through the real ingestion pipeline (in-process): recovered headings become the chunks'
chapter_path, and normalised text is what keyword search finds."""

import pytest
from django.db import transaction

from apps.knowledge import ingest, services
from apps.knowledge.models import Chunk, Document
from apps.knowledge.pipeline.retrieve import SearchOptions, search
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload
from tests.knowledge.pdfs import pdf_build, pdf_content_filtered, pdf_encrypt, without_brotli

pytestmark = pytest.mark.django_db


def _ingest_pdf(kb, name: str, data: bytes):
    with transaction.atomic():
        [document] = services.document_upload(kb=kb, files=[upload(name, data)])
        assert ingest.document_ingest(document_id=document.pk) == "completed"
    return document


def _chapter_paths(document) -> list[str | None]:
    return list(Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD).order_by("index")
                .values_list("chapter_path", flat=True))


def test_a_pdf_outline_gives_its_chunks_chapter_paths():
    pages = [[("售后政策", 11), ("本政策适用于所有订单。", 11), ("退款", 11), ("七天内可退款。", 11)],
             [("换货", 11), ("质量问题可以换货。", 11)]]
    data = pdf_build(pages, outline=[("售后政策", 0, 0), ("退款", 0, 1), ("换货", 1, 1)])
    document = _ingest_pdf(KnowledgeBaseFactory(), "policy.pdf", data)
    assert _chapter_paths(document) == ["售后政策", "售后政策 / 退款", "售后政策 / 换货"]


def test_pdf_headings_set_in_larger_type_give_its_chunks_chapter_paths():
    pages = [[("第一章 总则", 20), ("本规定适用于全部门店。", 11), ("1.1 退款", 15), ("七天内可无理由退款。", 11)],
             [("第二章 附则", 20), ("本规定自发布之日起施行。", 11)]]
    document = _ingest_pdf(KnowledgeBaseFactory(), "rules.pdf", pdf_build(pages))
    assert _chapter_paths(document) == ["第一章 总则", "第一章 总则 / 1.1 退款", "第二章 附则"]


def test_a_plain_pdf_has_chunks_without_chapter_paths():
    pages = [[("Refund policy.", 12), ("Refunds take seven days.", 12)], [("Exchanges are free.", 12)]]
    document = _ingest_pdf(KnowledgeBaseFactory(), "plain.pdf", pdf_build(pages))
    assert set(_chapter_paths(document)) == {None}


def test_a_kangxi_radical_in_a_pdf_is_stored_and_found_as_the_ideograph():
    kb = KnowledgeBaseFactory()
    document = _ingest_pdf(kb, "people.pdf", pdf_build([[("⼈⼒资源部负责招聘。", 11)]]))
    result = search(kbs=[kb], query="人力", options=SearchOptions(mode="keyword", top_k=3))
    assert [(hit.document_id, hit.content) for hit in result.hits] == [(document.pk, "人力资源部负责招聘。")]


def test_a_pdf_whose_page_uses_a_filter_pypdf_lacks_fails_with_its_reason():
    """pypdf raises NotImplementedError for an unknown stream filter: the document failed as an
    unexpected error ('report it if it recurs'), and retrying could never help."""
    data = pdf_build([[("Refunds take seven days.", 11)]])
    content = data.find(b">>\nstream\nBT")
    data = data[:content] + b" /Filter /NoSuchDecode " + data[content:]
    with transaction.atomic():
        [document] = services.document_upload(kb=KnowledgeBaseFactory(), files=[upload("odd.pdf", data)])
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.status, document.error_code, document.error_message) == (
        Document.Status.FAILED, "document_conversion_failed",
        "Document conversion failed: The PDF is damaged and its text cannot be extracted.")
    assert not Chunk.objects.filter(document=document).exists()


@without_brotli
def test_a_pdf_whose_page_needs_a_decoder_this_server_lacks_fails_with_its_reason():
    """pypdf raises DependencyError, which is no PyPdfError: the document failed as an unexpected
    error ('report it if it recurs'), and retrying could never help."""
    data = pdf_content_filtered(pdf_build([[("Refunds take seven days.", 11)]]), "/BrotliDecode")
    with transaction.atomic():
        [document] = services.document_upload(kb=KnowledgeBaseFactory(), files=[upload("brotli.pdf", data)])
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.status, document.error_code, document.error_message) == (
        Document.Status.FAILED, "document_conversion_failed",
        "Document conversion failed: The PDF uses a compression or encryption method this server has no decoder "
        "for; upload a copy saved with standard settings (or its text as a .txt file).")
    assert not Chunk.objects.filter(document=document).exists()


def test_a_pdf_that_opens_without_a_password_is_ingested():
    """Encrypted with only an owner password (printing or copying restricted), as many published
    PDFs are: every viewer opens it without asking. It was refused at upload with 'The PDF is
    encrypted; upload a copy without a password.', a password the operator does not have."""
    data = pdf_encrypt(pdf_build([[("Refunds take seven days.", 11)]]), user_password="", owner_password="owner")
    document = _ingest_pdf(KnowledgeBaseFactory(), "restricted.pdf", data)
    assert list(Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD).values_list("text", flat=True)) == [
        "Refunds take seven days."]
