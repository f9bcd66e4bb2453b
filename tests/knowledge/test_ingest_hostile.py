"""Ingestion under hostile or odd input: each bad file ends in a documented outcome (FAILED with
its own code, or text stored clean), in work bounded by the file; a good file comes out right.
Found by an audit of the pipeline (2026-12-04); each test failed before its fix."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from unittest import mock

import pytest

from apps.knowledge import ingest, rebuild, services
from apps.knowledge.models import Chunk, Document, DocumentContent, IndexGeneration
from apps.knowledge.pipeline import parsers, terms
from apps.knowledge.pipeline.parsers import pdf as pdf_parser
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload
from tests.knowledge.pdfs import pdf_build, pdf_objects, pdf_write

pytestmark = pytest.mark.django_db


def _ingested(name: str, data: bytes, **kb) -> Document:
    """Upload through the service (so the upload check runs) and run the pipeline once."""
    [document] = services.document_upload(kb=KnowledgeBaseFactory(**kb), files=[upload(name, data)])
    ingest.document_ingest(document_id=document.pk)
    document.refresh_from_db()
    return document


def _children(document: Document) -> list[Chunk]:
    return list(Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD).order_by("index"))


def _stored_clean(document: Document) -> bool:
    """No NUL and no lone surrogate in what was stored for the document."""
    for chunk in Chunk.objects.filter(document=document):
        for value in (chunk.text, chunk.chapter_path or ""):
            if "\x00" in value or any("\ud800" <= char <= "\udfff" for char in value):
                return False
    return True


# PDF outlines are placed in work linear in the entries and the lines.


def test_placing_a_pdf_outline_keys_each_line_and_title_once():
    """4,000 outline entries on a page of 4,000 lines took 26 s: every entry re-keyed and compared
    every line of its page. Now each line and each title is keyed once."""
    entries = lines = 300
    data = pdf_build([[(f"line {i} of the body", 12) for i in range(lines)]],
                     outline=[(f"Heading {i}", 0, 0) for i in range(entries)])
    calls = 0
    original = pdf_parser._key

    def counted(text: str) -> str:
        nonlocal calls
        calls += 1
        return original(text)

    with mock.patch.object(pdf_parser, "_key", counted):
        parsed = parsers.document_parse(file_type="pdf", data=data)
    assert calls <= 2 * (entries + lines), f"{calls:,} keys for {entries} entries x {lines} lines"
    # No line carries a title: every heading goes in before the first line, the last one nearest.
    assert [section.headings for section in parsed.sections] == [(f"Heading {entries - 1}",)]
    assert parsed.plain_text().endswith(f"line {lines - 1} of the body")


def _placed_by_reading(pages, entries):
    """The placement rule read literally: each title at the first line at or after the previous
    heading on its page that carries it (pdf_parser._carries), else inserted there."""
    by_page: dict[int, list[tuple[int, str]]] = {}
    for page, level, title in entries:
        if 0 <= page < len(pages):
            by_page.setdefault(page, []).append((level, title))
    placed = []
    for number, lines in enumerate(pages):
        items = list(lines)
        cursor = 0
        for level, title in by_page.get(number, []):
            wanted = pdf_parser._key(title)
            found = next((index for index, item in enumerate(items) if index >= cursor
                          and isinstance(item, pdf_parser._Line)
                          and pdf_parser._carries(pdf_parser._key(item.text), wanted)), None)
            if found is None:
                items.insert(cursor, pdf_parser._Heading(level, title))
                cursor += 1
            else:
                items[found] = pdf_parser._Heading(level, title)
                cursor = found + 1
        placed.append(items)
    return placed


def test_pdf_outline_placement_follows_the_rule_on_random_pages():
    rng = random.Random(11)
    words = ["Scope", "2.1 Scope", "第三章总则", "总则", "Annex", "Appendix A Terms", "Terms", "a", "", "1.", "Scope "]
    for _ in range(400):
        pages = [[pdf_parser._Line(rng.choice(words), 12.0) for _ in range(rng.randrange(0, 8))]
                 for _ in range(rng.randrange(1, 4))]
        entries = [(rng.randrange(-1, 4), rng.randrange(1, 3), rng.choice(words) or "x")
                   for _ in range(rng.randrange(0, 8))]
        assert pdf_parser._outline_headings(pages, entries) == _placed_by_reading(pages, entries), (pages, entries)


# Heading paths ride in every chunk's embedded and indexed text: they are spent from the text cap.


def test_heading_paths_repeated_past_the_text_cap_fail_the_document_as_too_large():
    """A 9.5 KB markdown file of six ~990-character headings over 200 tiny chunks embedded and
    indexed 1,144,050 characters, six times its cap; now it fails, saying why."""
    words = iter(f"w{n}" for n in range(10_000))
    headings = "".join(f"{'#' * level} {' '.join(next(words) for _ in range(200))[:990]}\n\n"
                       for level in range(1, 7))
    body = "\n\n".join(f"Item {n} is done." for n in range(200))
    document = _ingested("deep.md", (headings + body).encode(),
                         chunk_strategy={"strategy": "auto", "min_chars": 0, "max_chars": 32, "overlap_chars": 0})
    assert (document.status, document.error_code) == (Document.Status.FAILED, "document_too_large_after_conversion")
    assert "heading paths" in document.error_message
    assert not Chunk.objects.filter(document=document).exists()


def test_a_document_of_short_headings_over_small_chunks_still_completes():
    body = "".join(f"## Part {n}\n\nItem {n} is done.\n\n" for n in range(50))
    document = _ingested("parts.md", f"# Guide\n\n{body}".encode(),
                         chunk_strategy={"strategy": "auto", "min_chars": 0, "max_chars": 32, "overlap_chars": 0})
    assert document.status == Document.Status.COMPLETED, document.error_message
    assert {chunk.chapter_path for chunk in _children(document)} == {f"Guide / Part {n}" for n in range(50)}


# Keyword term counts come from one pass over the text.


def test_term_frequencies_count_as_substring_counts_do():
    """term_frequencies read each CJK term with str.count, one scan of the text per term (32,000
    distinct characters: 3 s); its counts, non-overlapping ones included, are kept."""
    rng = random.Random(1)
    alphabet = "哈哈哈国家國家ab 1。，𠀀かカ한" + "".join(chr(0x4E00 + n) for n in range(40))
    for _ in range(500):  # few terms (counted one by one) and many (counted in one pass)
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([rng.randrange(0, 60), 400])))
        wanted = [*dict.fromkeys(terms.keyword_terms(text)), "哈哈", "家国", "x", "国"]
        normal = terms.normalise(text)
        words = Counter(terms.word_terms(normal))
        expected = Counter({term: n for term in wanted
                            if (n := normal.count(term) if terms.is_cjk_term(term) else words[term])})
        assert terms.term_frequencies(text, wanted) == expected, text
    assert terms.term_frequencies("哈哈哈哈哈", ["哈哈", "哈"]) == Counter({"哈哈": 2, "哈": 5})


# Outline titles are cut; NUL and lone surrogates never reach the database.


def test_a_pdf_outline_title_of_a_megabyte_is_cut_and_the_document_completes():
    """A 1 MB bookmark title went into every child's keyword text, and PostgreSQL refused the
    tsvector ("string is too long for tsvector"): ingest_error, "retry the document"."""
    rng = random.Random(3)
    title = " ".join("".join(chr(rng.randrange(97, 123)) for _ in range(60)) for _ in range(17_000))
    document = _ingested("bookmarked.pdf", pdf_build([[("Scope", 18), ("The scope of this text.", 12)]],
                                                     outline=[(title, 0, 0)]))
    assert (document.status, document.error_code) == (Document.Status.COMPLETED, ""), document.error_message
    [path] = {chunk.chapter_path for chunk in _children(document)}
    assert len(path) == pdf_parser.OUTLINE_TITLE_MAX_CHARS and path.endswith("…")
    assert title.startswith(path[:-1])


@pytest.mark.parametrize(("data", "stored"), [
    (b'{"note": "before\\u0000after"}', "beforeafter"),
    (b'{"key\\u0000": "value"}', "key: value"),
    (b'{"note": "broken \\ud800 pair"}', "broken \ufffd pair"),
], ids=["nul_in_value", "nul_in_key", "lone_surrogate_in_value"])
def test_json_escapes_postgresql_cannot_store_are_cleaned(data, stored):
    """A JSON string may escape NUL or half a surrogate pair: the upload was accepted and the
    pipeline failed with ingest_error (psycopg refused NUL, UTF-8 the surrogate). NUL is dropped
    (as text files lose theirs) and a lone surrogate becomes U+FFFD."""
    document = _ingested("record.json", data)
    assert (document.status, document.error_code) == (Document.Status.COMPLETED, ""), document.error_message
    assert _stored_clean(document)
    assert any(stored in chunk.text for chunk in _children(document)), [chunk.text for chunk in _children(document)]


@pytest.mark.parametrize(("pages", "outline", "path"), [
    # Bookmark titles written as NUL-terminated UTF-16 (<FEFF ... 0000>), as some writers do.
    ([[("Scope", 18), ("The scope of this text.", 12)]], [("Scope\x00", 0, 0)], "Scope"),
    # A ToUnicode map sending a glyph to an unpaired surrogate (a broken CMap).
    ([[("Hello \ud800 world.", 12)]], [], None),
    # The same in a line set large: a size-derived heading.
    ([[("Big\udc00Title", 24), ("Body text that is long enough to be the body.", 12),
       ("More body text here for its weight.", 12)]], [], None),
], ids=["nul_terminated_bookmark_title", "lone_surrogate_in_text", "lone_surrogate_in_heading"])
def test_pdf_text_postgresql_cannot_store_is_cleaned_not_an_unexpected_error(pages, outline, path):
    """pdf.py stripped NUL from page text but not from outline titles, and nothing replaced the
    lone surrogates pypdf reads through a broken ToUnicode map: psycopg refused both (ingest_error)."""
    document = _ingested("odd.pdf", pdf_build(pages, outline=outline))
    assert (document.status, document.error_code) == (Document.Status.COMPLETED, ""), (
        document.status, document.error_code, document.error_message)
    assert _stored_clean(document)
    if path is not None:
        assert {chunk.chapter_path for chunk in _children(document)} == {path}


# A rebuild fails, naming the document, when a completed document now converts to no text.


def test_a_rebuild_fails_naming_a_document_that_now_converts_to_no_text(settings):
    """generation_build: "One document failing fails the rebuild: the operator is told which
    one." A completed document whose conversion now gives no text (a parser upgrade that drops
    what it used to read; here its stored bytes stand for that) got no chunks, so the rebuild
    listed it again and again: "continued" slice after slice, never failing, and every other
    rebuild refused (rebuild_in_progress) for good."""
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("note.txt", b"Hello world. Some text here.")])
    assert ingest.document_ingest(document_id=document.pk) == "completed"
    DocumentContent.objects.filter(document=document).update(data=b"   \n  ")
    generation = services.knowledge_base_rebuild(kb=kb)
    settings.KNOWLEDGE_TASK_SLICE_SECONDS = 0
    outcomes = [rebuild.generation_build(generation_id=generation.pk)]
    while outcomes[-1] == "continued" and len(outcomes) < 4:
        token = IndexGeneration.objects.get(pk=generation.pk).run_token
        outcomes.append(rebuild.generation_build(generation_id=generation.pk, run_token=str(token)))
    generation.refresh_from_db()
    assert (outcomes[-1], generation.status, generation.error_code) == (
        "failed", IndexGeneration.Status.FAILED, "document_empty"), (outcomes, generation.status)
    assert "note.txt" in generation.error_message


# A text of only invisible formatting characters is empty.


def test_a_text_of_only_zero_width_characters_fails_as_empty():
    """str.strip() keeps U+200B/U+200C/U+200D/U+2060: the document completed with one invisible
    chunk, embedded and searchable."""
    document = _ingested("blank.txt", "\u200b\u200c\u200d\u2060\n\u200b\n".encode())
    assert (document.status, document.error_code) == (Document.Status.FAILED, "document_empty"), (
        document.status, [chunk.text for chunk in _children(document)])


# PDF page counts: a readable PDF is not refused at upload, a page tree past the limit is not "damaged".


@pytest.mark.parametrize("count", [b"0", b"-1", b"1.0"])
def test_a_pdf_whose_page_tree_has_pages_is_not_refused_at_upload_for_its_declared_count(count):
    """The upload check reads /Count instead of walking the tree, and refused "The PDF has no
    pages." (422) for a /Count of 0, negative or real, while the pipeline reads the file fine."""
    objects = pdf_objects(pdf_build([[("Readable text on a real page.", 12)]]))
    objects[2] = b"<< /Type /Pages /Kids [10 0 R] /Count " + count + b" >>"
    data = pdf_write(objects)
    assert parsers.document_parse(file_type="pdf", data=data).plain_text() == "Readable text on a real page."
    [document] = services.document_upload(kb=KnowledgeBaseFactory(), files=[upload("count.pdf", data)])
    assert document.status in (Document.Status.PENDING, Document.Status.QUEUED)


def test_a_pdf_whose_page_count_and_kids_are_indirect_objects_is_taken_at_upload():
    objects = pdf_objects(pdf_build([[("Readable text on a real page.", 12)]]))
    objects[2] = b"<< /Type /Pages /Kids 90 0 R /Count 91 0 R >>"
    objects[90], objects[91] = b"[10 0 R]", b"1"
    data = pdf_write(objects)
    assert parsers.document_parse(file_type="pdf", data=data).plain_text() == "Readable text on a real page."
    parsers.document_check(file_type="pdf", data=data)


def test_a_pdf_whose_page_tree_is_empty_is_still_refused_at_upload():
    objects = pdf_objects(pdf_build([[("Readable text on a real page.", 12)]]))
    objects[2] = b"<< /Type /Pages /Kids [] /Count 0 >>"
    with pytest.raises(parsers.ConversionFailed, match="The PDF has no pages"):
        parsers.document_check(file_type="pdf", data=pdf_write(objects))


def test_a_pdf_over_pypdfs_page_tree_limit_fails_saying_it_has_too_many_pages():
    """A 6 KB file of 1,000,000 blank pages (one page, referred to a million times) passes
    pypdf's page-tree limit; it was reported as "The PDF is damaged and cannot be read."; it is
    now refused at KNOWLEDGE_PDF_MAX_PAGES, before pypdf's walk."""
    objects = pdf_objects(pdf_build([[("x", 12)]]))
    objects[10] = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << >> >>"
    del objects[11]
    kid = 10
    for level in range(3):
        objects[100 + level] = (b"<< /Type /Pages /Kids [" + f"{kid} 0 R ".encode() * 100
                                + f"] /Count {100 ** (level + 1)} >>".encode())
        kid = 100 + level
    objects[2] = f"<< /Type /Pages /Kids [{kid} 0 R] /Count 1000000 >>".encode()
    data = pdf_write(objects)
    document = Document.objects.create(knowledge_base=KnowledgeBaseFactory(), filename="huge.pdf", file_type="pdf",
                                       size=len(data), content_hash=hashlib.sha256(data).hexdigest())
    DocumentContent.objects.create(document=document, data=data)
    assert ingest.document_ingest(document_id=document.pk) == "failed"
    document.refresh_from_db()
    assert document.error_code == "document_conversion_failed"
    assert "The PDF has more than 10,000 pages" in document.error_message, document.error_message
