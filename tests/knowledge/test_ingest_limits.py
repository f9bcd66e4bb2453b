"""Hostile documents in the pipeline: each fails with its code and a reason, in bounded work."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zlib

import pytest

from apps.knowledge import ingest, services
from apps.knowledge.models import Chunk, Document, DocumentContent
from apps.knowledge.pipeline.parsers import (
    ConversionFailed,
    DocumentTooLarge,
    TextBudget,
    document_check,
    document_parse,
)
from apps.knowledge.pipeline.parsers import json_ as json_parser
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload
from tests.memory import memory_peak

pytestmark = pytest.mark.django_db


def _stored(kb, filename: str, file_type: str, data: bytes) -> Document:
    """A document as stored by an upload, without the upload's checks (a file accepted before a
    limit existed, or one the cheap upload check cannot judge)."""
    document = Document.objects.create(knowledge_base=kb, filename=filename, file_type=file_type, size=len(data),
                                       content_hash=hashlib.sha256(data).hexdigest())
    DocumentContent.objects.create(document=document, data=data)
    return document


def test_a_json_document_nested_950_levels_fails_conversion_with_the_reason():
    document = _stored(KnowledgeBaseFactory(), "deep.json", "json", b"[" * 950 + b"1" + b"]" * 950)
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "document_conversion_failed")
    assert document.error_message == ("Document conversion failed: The file is not valid JSON: "
                                      "nested deeper than 64 levels.")


def test_a_json_document_with_a_4300_digit_integer_fails_conversion_with_the_reason():
    document = _stored(KnowledgeBaseFactory(), "big.json", "json", b'{"id": ' + b"9" * 4300 + b"}")
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "document_conversion_failed")
    assert "an integer of 4300 digits is too long" in document.error_message


def _pdf(*, content: bytes, pages: int) -> bytes:
    """A PDF whose `pages` pages all draw the one FlateDecode content stream `content`."""
    stream = zlib.compress(content, 9)
    page_numbers = [5 + index for index in range(pages)]
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Count %d /Kids [%s] >>" % (pages, b" ".join(b"%d 0 R" % n for n in page_numbers)),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        4: b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream),
    }
    for number in page_numbers:
        objects[number] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                           b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>")
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = out.tell()
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, objects[number]))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offsets[number] for number in sorted(objects)))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def _text_ops(repeats: int) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td " + b"(bailing expansion text ) Tj " * repeats + b"ET"


# About 20 KB each: one stream inflating to 9 MB, or 150 pages drawing one 150 KB stream.
INFLATING_PDF = {"content": _text_ops(300_000), "pages": 1}
SHARED_STREAM_PDF = {"content": _text_ops(5_000), "pages": 150}


@pytest.mark.parametrize("shape", [INFLATING_PDF, SHARED_STREAM_PDF], ids=["inflating stream", "shared stream"])
def test_a_pdf_expansion_bomb_fails_too_large_naming_the_cap_without_chunks(shape):
    data = _pdf(**shape)
    assert len(data) < 40_000
    document = _stored(KnowledgeBaseFactory(), "bomb.pdf", "pdf", data)
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "document_too_large_after_conversion")
    cap = 20 * len(data)
    assert document.error_message == (
        f"Document too large after conversion: its text exceeds {cap:,} characters, the cap for a file of "
        f"{len(data):,} bytes (KNOWLEDGE_MAX_TEXT_RATIO = 20 times its size, at most KNOWLEDGE_MAX_TEXT_CHARS = "
        "20,000,000). Split the document."
    )
    assert Chunk.objects.filter(document_id=document.pk).count() == 0


def test_an_inflating_pdf_stream_is_refused_before_its_text_is_extracted():
    budget = TextBudget(max_chars=20 * 30_000)
    with pytest.raises(DocumentTooLarge):
        document_parse(file_type="pdf", data=_pdf(**INFLATING_PDF), budget=budget)
    assert budget.used == 0


def test_a_pdf_stream_inflating_past_pypdfs_ceiling_fails_naming_that_ceiling_and_stores_nothing():
    """A 73 KB file whose one content stream inflates past pypdf's 75,000,000 bytes failed as too
    large after conversion, "its text exceeds" 20 times the file's size: a cap its text never reached."""
    data = _pdf(content=_text_ops(1) + b" " * 75_000_000, pages=1)
    document = _stored(KnowledgeBaseFactory(), "inflating.pdf", "pdf", data)
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "document_conversion_failed")
    assert document.error_message == (
        "Document conversion failed: The PDF has a compressed stream that inflates to more than 75,000,000 bytes, "
        "the most the PDF reader decompresses of one (pypdf's zlib_maximum_output_length): its text cannot be read "
        "here. Upload its text as a .txt file.")
    assert Chunk.objects.filter(document_id=document.pk).count() == 0


def test_a_pdf_of_pages_sharing_a_stream_stops_at_the_page_that_spends_its_budget():
    budget = TextBudget(max_chars=400_000)
    with pytest.raises(DocumentTooLarge):
        document_parse(file_type="pdf", data=_pdf(**SHARED_STREAM_PDF), budget=budget)
    # Each page draws 150,005 bytes of content giving 115,000 characters: the third page's
    # content is over what is left of the budget, so two pages of 150 were extracted.
    assert budget.used == 2 * 5_000 * 23


def test_pdf_extraction_reports_progress_while_it_runs():
    calls = []
    budget = TextBudget(max_chars=10**9, on_progress=lambda: calls.append(1), progress_seconds=0)
    document_parse(file_type="pdf", data=_pdf(content=_text_ops(3), pages=4), budget=budget)
    # Once per run of text (one a page here) and once at the end of each page.
    assert len(calls) == 4 + 4


def test_a_json_document_whose_key_paths_multiply_its_text_fails_too_large():
    keys = ["k" * 60] * 10
    value: object = [0] * 2000
    for key in reversed(keys):
        value = {key: value}
    data = json.dumps(value).encode()
    document = _stored(KnowledgeBaseFactory(), "paths.json", "json", data)
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert document.error_code == "document_too_large_after_conversion"
    assert f"its text exceeds {20 * len(data):,} characters" in document.error_message


def test_a_document_over_the_chunk_cap_fails_too_large_naming_the_cap(settings):
    settings.KNOWLEDGE_MAX_CHUNKS = 10
    kb = KnowledgeBaseFactory(chunk_strategy={"strategy": "by_paragraph", "min_chars": 0, "max_chars": 200,
                                              "overlap_chars": 0})
    data = "\n\n".join(f"第{i}段：退款规定。" for i in range(30)).encode()
    document = _stored(kb, "many.txt", "txt", data)
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.error_code, document.error_message) == (
        "document_too_large_after_conversion",
        "Document too large after conversion: it makes more than 10 chunks, the cap per document "
        "(KNOWLEDGE_MAX_CHUNKS). Split the document or use larger chunks.",
    )
    assert Chunk.objects.filter(document_id=document.pk).count() == 0


def test_a_document_that_failed_too_large_is_deleted_with_everything_it_had():
    document = _stored(KnowledgeBaseFactory(), "bomb.pdf", "pdf", _pdf(**INFLATING_PDF))
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    services.document_delete(document=document)
    assert not Document.objects.filter(pk=document.pk).exists()
    assert not DocumentContent.objects.filter(document_id=document.pk).exists()


def test_a_csv_stops_at_the_row_that_spends_its_budget_before_reading_the_rest():
    # The last line is malformed: reading every row first would fail on it instead.
    data = b"name,value\n" + b"refund,30 days\n" * 1000 + b'a,"b"c\n'
    with pytest.raises(DocumentTooLarge):
        document_parse(file_type="csv", data=data, budget=TextBudget(max_chars=1000))


def _check_peak(file_type: str, data: bytes) -> int:
    """The most memory the upload check of `data` held at once (bytes, tracemalloc)."""
    with memory_peak() as peak:
        document_check(file_type=file_type, data=data)
    return peak.bytes


def test_the_csv_upload_check_holds_no_rows():
    data = b"a,b\n" + b"1,2\n" * 250_000
    peak = _check_peak("csv", data)
    # The decoded text and a row at a time (rows kept as lists of cells were 29 times the file).
    assert peak < 3 * len(data)


def test_the_pdf_upload_check_does_not_walk_the_page_tree():
    data = _pdf(content=b"BT /F1 12 Tf 72 720 Td (a) Tj ET", pages=5000)
    peak = _check_peak("pdf", data)
    # Reading the cross-reference table takes about 11 times the file; walking the 5,000 pages
    # took 33 (in the web process: a 50 MB file of tiny pages, most of a minute and a gigabyte).
    assert peak < 20 * len(data)


def test_a_pdf_whose_page_tree_does_not_hold_its_declared_pages_fails_in_the_pipeline_as_damaged():
    data = _pdf(content=_text_ops(1), pages=1).replace(b"/Kids [5 0 R]", b"/Kids [5 0 R 2 0 R]")
    document = _stored(KnowledgeBaseFactory(), "loop.pdf", "pdf", data)
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.error_code, document.error_message) == (
        "document_conversion_failed", "Document conversion failed: The PDF is damaged and cannot be read.")


def _flat_json(count: int, *, tail: bytes = b"}") -> bytes:
    return b"{" + b",".join(b'"k%08d": %d' % (i, i) for i in range(count)) + tail


def test_a_large_json_upload_check_does_not_hold_the_document_as_objects():
    data = _flat_json(400_000)  # 7.2 MB: over FULL_CHECK_MAX_BYTES
    assert len(data) > json_parser.FULL_CHECK_MAX_BYTES
    peak = _check_peak("json", data)
    # The decoded text and the nesting check's copies of it; the strict parse held ~10 times the file.
    assert peak < 3 * len(data)


@pytest.mark.parametrize(("data", "reason"), [
    (b"  x" + b" " * 10, "The file is not valid JSON: expected a value at line 1, column 3."),
    (b"[" * 100 + b"]" * 100, "nested deeper than 64 levels"),
    (b'{"a": "\xff\xff\xff"}', "The text is not recognised as UTF-8"),
])
def test_a_large_json_file_is_still_refused_at_upload_when_a_look_shows_it_is_not_json(monkeypatch, data, reason):
    monkeypatch.setattr(json_parser, "FULL_CHECK_MAX_BYTES", 8)
    with pytest.raises(ConversionFailed, match=re.escape(reason)):
        document_check(file_type="json", data=data)


def test_a_large_json_file_that_is_invalid_further_in_is_accepted_and_fails_in_the_pipeline_with_the_reason(
        monkeypatch):
    monkeypatch.setattr(json_parser, "FULL_CHECK_MAX_BYTES", 1024)
    data = _flat_json(200, tail=b', "k00000001": 2}')
    kb = KnowledgeBaseFactory()
    batch = services.document_upload_batch(kb=kb, files=[upload("late.json", data)])
    assert batch.refused == []
    (document,) = batch.documents
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.error_code, document.error_message) == (
        "document_conversion_failed",
        "Document conversion failed: The file is not valid JSON: duplicate key 'k00000001'.",
    )
    assert Chunk.objects.filter(document_id=document.pk).count() == 0


def test_a_json_file_under_the_full_check_size_is_still_parsed_in_full_at_upload():
    data = _flat_json(200, tail=b', "k00000001": 2}')
    with pytest.raises(ConversionFailed, match="duplicate key 'k00000001'"):
        document_check(file_type="json", data=data)


# PDF pages: each is ~2.5 KB of Python objects in the worker however empty (99,000 empty pages, a
# 10 MB file, took 310 MB and 7 s to fail as "no extractable text").

TOO_MANY_PAGES = ("The PDF has more than 3 pages, more than a document may (KNOWLEDGE_PDF_MAX_PAGES). "
                  "Split it into smaller files.")


def _unflattened(monkeypatch) -> None:
    """pypdf's page list is never built: it holds an object for every page, however many."""
    from pypdf import PdfReader

    def refused(*_args, **_kwargs):
        raise AssertionError("pypdf walked the whole page tree")

    monkeypatch.setattr(PdfReader, "_flatten", refused)


def test_a_pdf_of_more_pages_than_allowed_is_refused_before_pypdf_walks_its_pages(settings, monkeypatch):
    settings.KNOWLEDGE_PDF_MAX_PAGES = 3
    _unflattened(monkeypatch)
    with pytest.raises(ConversionFailed) as failed:
        document_parse(file_type="pdf", data=_pdf(content=_text_ops(1), pages=4))
    assert str(failed.value) == TOO_MANY_PAGES


def test_a_pdf_whose_page_count_understates_its_pages_is_refused_in_the_pipeline(settings, monkeypatch):
    settings.KNOWLEDGE_PDF_MAX_PAGES = 3
    data = _pdf(content=_text_ops(1), pages=4).replace(b"/Count 4", b"/Count 1")
    document_check(file_type="pdf", data=data)  # the upload check takes the declared count
    _unflattened(monkeypatch)
    with pytest.raises(ConversionFailed) as failed:
        document_parse(file_type="pdf", data=data)
    assert str(failed.value) == TOO_MANY_PAGES


def test_a_pdf_declaring_more_pages_than_allowed_is_refused_at_upload(settings):
    settings.KNOWLEDGE_PDF_MAX_PAGES = 3
    with pytest.raises(ConversionFailed) as failed:
        document_check(file_type="pdf", data=_pdf(content=_text_ops(1), pages=4))
    assert str(failed.value) == TOO_MANY_PAGES


def test_a_pdf_at_the_page_limit_is_read_whole(settings):
    settings.KNOWLEDGE_PDF_MAX_PAGES = 3
    data = _pdf(content=_text_ops(1), pages=3)
    document_check(file_type="pdf", data=data)
    parsed = document_parse(file_type="pdf", data=data)
    assert [block.page for section in parsed.sections for block in section.blocks] == [1, 2, 3]


def test_a_pdf_over_the_page_limit_fails_alone_leaving_the_kbs_other_documents_searchable(settings):
    kb = KnowledgeBaseFactory()
    [good] = services.document_upload(kb=kb, files=[upload("good.txt", b"Refunds take seven days.")])
    assert ingest.document_ingest(document_id=good.pk) == "completed"
    settings.KNOWLEDGE_PDF_MAX_PAGES = 3
    bad = _stored(kb, "pages.pdf", "pdf", _pdf(content=_text_ops(1), pages=4))
    assert ingest.document_ingest(document_id=bad.pk) == "failed"
    bad.refresh_from_db()
    assert (bad.status, bad.error_code, bad.error_message) == (
        "failed", "document_conversion_failed", f"Document conversion failed: {TOO_MANY_PAGES}")
    assert not Chunk.objects.filter(document_id=bad.pk).exists()
    good.refresh_from_db()
    assert good.status == "completed"
    assert [chunk.text for chunk in Chunk.objects.filter(document_id=good.pk, kind=Chunk.Kind.CHILD)] == [
        "Refunds take seven days."]


@pytest.mark.parametrize(("setting", "name", "file_type", "data", "message"), [
    ("KNOWLEDGE_JSON_MAX_VALUES", "values.json", "json", json.dumps(list(range(11))).encode(),
     "The file holds more than 10 JSON values, more than a document may (KNOWLEDGE_JSON_MAX_VALUES). "
     "Split the document."),
    ("KNOWLEDGE_MAX_PARAGRAPHS", "short.txt", "txt", b"a\n\nb\n\nc\n\nd" + b"\n\ne" * 7,
     "The document has more than 10 paragraphs, more than a document may (KNOWLEDGE_MAX_PARAGRAPHS). "
     "Split it into smaller files."),
    ("KNOWLEDGE_CSV_MAX_COLUMNS", "wide.csv", "csv", b"name\n" + b",".join([b"12"] * 11) + b"\n",
     "The row that starts at line 2 has more than 10 cells, more than a row may (KNOWLEDGE_CSV_MAX_COLUMNS). "
     "Check its delimiters, or split the file."),
], ids=["json values", "text paragraphs", "csv cells"])
def test_a_document_over_a_count_limit_fails_naming_the_limit_and_stores_nothing(settings, setting, name, file_type,
                                                                               data, message):
    setattr(settings, setting, 10)
    document = _stored(KnowledgeBaseFactory(), name, file_type, data)
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert (document.status, document.error_code, document.error_message) == (
        "failed", "document_conversion_failed", f"Document conversion failed: {message}")
    assert not Chunk.objects.filter(document_id=document.pk).exists()
