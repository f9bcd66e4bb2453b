"""documents.body_window: a page's bytes read from the sections it overlaps are the bytes of the
whole body (its sections' texts joined by a blank line, each new section under its heading lines)
at every offset, with the chapter path of the section the offset falls in; a document that changes
between its digest and its window is not served."""

import pytest

from apps.knowledge.models import Chunk
from apps.runtime.knowledge import documents
from apps.runtime.knowledge.documents import body_window, document_revision, readable_body, section_heading
from apps.runtime.knowledge.scope import knowledge_scope_get
from tests.runtime.knowledge_helpers import ingest_texts

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

# Three sections of one-, two- and three-byte characters.
MARKDOWN = ("# Intro\n\nPlain ASCII words here.\n\n# Über\n\nÄpfel und Öl, ß.\n\n"
            "# 第三章\n\n退款政策规定七天之内可以退货。")


def _sections(document, *, kind):
    rows = Chunk.objects.filter(document=document, kind=kind).order_by("index")
    rows = rows.exclude(text="") if kind == "parent" else rows.filter(disabled=False)
    return list(rows.values_list("text", "chapter_path"))


def _expected_path(sections, offset):
    """The chapter path of the section byte `offset` is in: its heading lines are its own, a
    separator's bytes belong to the section after it, the body's end to the last section."""
    end, previous = -2, None
    for text, path in sections:
        heading = section_heading(path, previous)
        end += 2 + len(text.encode()) + (len(heading.encode()) + 2 if heading else 0)
        previous = path
        if offset < end:
            return path
    return sections[-1][1]


def _body(sections):
    return readable_body((None, text, path) for text, path in sections)


def _assert_every_window(document, scope, sections):
    body = _body(sections).encode()
    revision = document_revision(title=document.filename, body=body.decode())
    for length in (1, 2, 7, len(body) + 5):
        for offset in range(len(body) + 1):
            window = body_window(document_id=document.pk, scope=scope, offset=offset, length=length)
            assert window is not None
            assert (window.data, window.total_bytes, window.revision) == (body[offset:offset + length], len(body),
                                                                         revision), (offset, length)
            assert window.chapter_path == _expected_path(sections, offset), (offset, length)


def test_every_window_of_a_body_of_parents_is_the_body_there(kb, kroute):
    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    sections = _sections(document, kind="parent")
    assert len(sections) == 3 and {path for _, path in sections} == {"Intro", "Über", "第三章"}
    _assert_every_window(document, knowledge_scope_get(route=kroute), sections)


def test_a_body_of_markdown_sections_is_the_markdown_with_its_headings(kb, kroute):
    """A page that runs into the next section shows that section's heading where it begins."""
    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    window = body_window(document_id=document.pk, scope=knowledge_scope_get(route=kroute), offset=0, length=4096)
    assert window.data.decode() == MARKDOWN
    assert window.chapter_path == "Intro"


def test_an_emptied_parent_is_no_section(kb, kroute):
    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    Chunk.objects.filter(document=document, kind="parent", chapter_path="Über").update(text="")
    sections = _sections(document, kind="parent")
    assert [path for _, path in sections] == ["Intro", "第三章"]
    _assert_every_window(document, knowledge_scope_get(route=kroute), sections)


def test_a_document_without_parents_is_read_from_its_enabled_children(kb, kroute):
    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    Chunk.objects.filter(document=document, kind="child").update(parent=None)
    Chunk.objects.filter(document=document, kind="parent").delete()
    children = Chunk.objects.filter(document=document, kind="child").order_by("index")
    assert children.count() >= 3
    Chunk.objects.filter(pk=children[1].pk).update(disabled=True)
    sections = _sections(document, kind="child")
    assert len(sections) == children.count() - 1
    _assert_every_window(document, knowledge_scope_get(route=kroute), sections)


def test_an_offset_past_the_end_reads_nothing_and_names_the_last_section(kb, kroute):
    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    total = len(_body(_sections(document, kind="parent")).encode())
    window = body_window(document_id=document.pk, scope=knowledge_scope_get(route=kroute), offset=total + 10,
                         length=100)
    assert (window.data, window.total_bytes, window.chapter_path) == (b"", total, "第三章")


def test_a_document_without_sections_is_not_readable(kb, kroute):
    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    Chunk.objects.filter(document=document, kind="child").update(parent=None, disabled=True)
    Chunk.objects.filter(document=document, kind="parent").delete()
    assert body_window(document_id=document.pk, scope=knowledge_scope_get(route=kroute), offset=0,
                       length=100) is None


@pytest.mark.django_db(transaction=True)
def test_a_write_between_the_digest_and_the_window_is_not_served(kb, kroute, monkeypatch):
    """A chunk row written after the digest's version was read: the window is not served under
    the old revision (the read answers knowledge_changed)."""
    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    scope = knowledge_scope_get(route=kroute)
    assert body_window(document_id=document.pk, scope=scope, offset=0, length=100) is not None
    real = documents._digests_with_versions

    def then_written(document_ids, scope):
        found = real(document_ids, scope)
        Chunk.objects.filter(document=document, kind="child").update(metadata={"touched": True})
        return found

    monkeypatch.setattr(documents, "_digests_with_versions", then_written)
    assert body_window(document_id=document.pk, scope=scope, offset=0, length=100) is None
    monkeypatch.undo()
    assert body_window(document_id=document.pk, scope=scope, offset=0, length=100) is not None


def test_a_document_turned_off_between_the_digest_and_the_window_is_not_served(kb, kroute, monkeypatch):
    """Turning a document off changes no chunk version: the window's own statement checks it."""
    from apps.knowledge.models import Document

    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    scope = knowledge_scope_get(route=kroute)
    real = documents._digests_with_versions

    def then_turned_off(document_ids, scope):
        found = real(document_ids, scope)
        Document.objects.filter(pk=document.pk).update(enabled=False)
        return found

    monkeypatch.setattr(documents, "_digests_with_versions", then_turned_off)
    assert body_window(document_id=document.pk, scope=scope, offset=0, length=100) is None
    monkeypatch.undo()
    Document.objects.filter(pk=document.pk).update(enabled=True)
    assert body_window(document_id=document.pk, scope=scope, offset=0, length=100) is not None


def test_an_empty_window_is_refused(kb, kroute):
    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    with pytest.raises(ValueError, match="at least one byte"):
        body_window(document_id=document.pk, scope=knowledge_scope_get(route=kroute), offset=0, length=0)


@pytest.mark.parametrize(("path", "previous", "heading"), [
    ("A / B", None, "# A\n\n## B"),
    ("A / C", "A / B", "## C"),
    ("A / C / D", "A / B", "## C\n\n### D"),
    ("A / B", "A / B", None),  # a section cut into several parents
    ("A", "A / B", "# A"),  # text back under an outer heading
    (None, "A", None),
    ("", "A", None),
])
def test_a_section_opens_with_the_levels_of_its_path_it_does_not_share(path, previous, heading):
    assert section_heading(path, previous) == heading


@pytest.mark.parametrize("paths", [
    ["A / B", "A / B", "A"],
    [None, "", "X /  / Y"],
    ["退款 / 七天", "退款", "退款 / 七天"],
])
def test_every_window_agrees_with_the_body_whatever_the_paths(kb, kroute, paths):
    """The statement's headings are section_heading's: same path, a path back up, none, empty levels."""
    document = ingest_texts(kb, {"mixed.md": MARKDOWN})["mixed.md"]
    parents = list(Chunk.objects.filter(document=document, kind="parent").order_by("index"))
    for parent, path in zip(parents, paths, strict=True):
        Chunk.objects.filter(pk=parent.pk).update(chapter_path=path)
    _assert_every_window(document, knowledge_scope_get(route=kroute), _sections(document, kind="parent"))
