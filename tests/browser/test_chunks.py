"""A document's chunks in Chromium: read them, disable one and see it vanish from a playground
search, enable it again, and edit another's text with the change recorded."""

from __future__ import annotations

from pathlib import Path

from apps.knowledge.models import Chunk, ChunkEdit
from apps.knowledge.services import chunk_text_edit
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.knowledge.test_chunk_overrides import DAMAGED, EDITED, HANDBOOK

SHOTS = Path("/tmp/shots")


def _handbook(project):
    kb = KnowledgeBaseFactory(project=project, name="Handbook")
    document = ingest_texts(kb, {"handbook.md": HANDBOOK})["handbook.md"]
    return kb, document


def _playground_titles(page, kb, query: str) -> list[str]:
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/search/")
    page.fill("input[name=query]", query)
    page.select_option("select[name=mode]", "keyword")
    page.click("#pg-form input[type=submit]")
    page.wait_for_selector("#pg-results")
    return [text for text in page.locator(".pg-hit .pg-content").all_inner_texts()]


def test_an_operator_disables_a_chunk_and_it_vanishes_from_the_playground(logged_in_page, project):
    page = logged_in_page
    kb, document = _handbook(project)
    damaged = Chunk.objects.get(document=document, kind="child", text=DAMAGED)
    assert any("photographs" in text for text in _playground_titles(page, kb, "photographs"))

    page.goto(f"/admin/knowledge/document/{document.pk}/change/")
    page.click("#document-chunks-link")
    row = page.locator(f"#chunk-{damaged.pk}")
    assert row.locator(".ck-chapter").inner_text() == "Handbook / Refunds"
    assert row.locator(".ck-text").inner_text() == DAMAGED
    assert row.locator(".ck-section-same").inner_text() == "Section 0, as above"
    first = page.locator("tr.ck-row[data-index='0']")
    first.locator("details.ck-section summary").click()
    assert first.locator(".ck-section-text").inner_text().endswith(DAMAGED)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "chunks-page.png"), full_page=True)

    row.locator("input.ck-disable").click()
    page.wait_for_selector(f"#chunk-{damaged.pk}.ck-disabled")
    assert "is disabled" in page.locator(".messagelist").inner_text()
    assert page.locator(f"#chunk-{damaged.pk} .ck-badge.ck-off").inner_text() == "disabled"
    page.screenshot(path=str(SHOTS / "chunks-disabled.png"), full_page=True)

    assert _playground_titles(page, kb, "photographs") == []
    page.screenshot(path=str(SHOTS / "playground-after-disable.png"), full_page=True)

    page.goto(f"/admin/knowledge/document/{document.pk}/chunks/")
    page.locator(f"#chunk-{damaged.pk} input.ck-enable").click()
    page.wait_for_selector(f"#chunk-{damaged.pk}:not(.ck-disabled)")
    assert any("photographs" in text for text in _playground_titles(page, kb, "photographs"))


def test_an_operator_edits_a_chunks_text_and_sees_the_change_recorded(logged_in_page, project, operator):
    page = logged_in_page
    kb, document = _handbook(project)
    damaged = Chunk.objects.get(document=document, kind="child", text=DAMAGED)
    page.goto(f"/admin/knowledge/document/{document.pk}/chunks/")
    page.locator(f"#chunk-{damaged.pk} a.ck-edit").click()

    page.fill("textarea[name=text]", "   ")
    page.click("#ck-edit-form input[type=submit]")
    assert page.locator("#ck-edit-form .errorlist").inner_text() == "This field is required."
    assert Chunk.objects.get(pk=damaged.pk).text == DAMAGED

    page.fill("textarea[name=text]", EDITED)
    page.click("#ck-edit-form input[type=submit]")
    page.wait_for_selector(f"#chunk-{damaged.pk} .ck-badge.ck-edited")
    assert page.locator(f"#chunk-{damaged.pk} .ck-text").inner_text() == EDITED
    history = page.locator("#ck-history tr.ck-edit-row").first.inner_text()
    assert "operator" in history and "Text edited" in history
    page.screenshot(path=str(SHOTS / "chunks-edited.png"), full_page=True)
    assert ChunkEdit.objects.get().user == operator
    assert any(EDITED in text for text in _playground_titles(page, kb, "pictures emailed"))


def test_the_chunks_page_is_readable_in_a_phone_width_window(logged_in_page, project, operator):
    """At 390 px the fixed-layout table left the text column one character wide (a chunk read one
    letter a line) and the changes table ran the page 66 px past the window."""
    _, document = _handbook(project)
    damaged = Chunk.objects.get(document=document, kind="child", text=DAMAGED)
    chunk_text_edit(chunk=damaged, text=EDITED, user=operator)
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/admin/knowledge/document/{document.pk}/chunks/")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "chunks-390.png"), full_page=True)
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    widths = page.locator(".ck-text").evaluate_all("es => es.map(e => e.getBoundingClientRect().width)")
    assert len(widths) >= 2 and min(widths) >= 250
    assert page.locator(f"#chunk-{damaged.pk} input.ck-disable").is_visible()
    assert page.locator("#ck-history .ck-diff").first.evaluate("e => e.getBoundingClientRect().width") >= 150


def test_the_open_chunks_button_stays_one_button_on_a_phone(logged_in_page, project):
    """At 390 px the link's label wrapped inline: two ragged fragments of a button, the second
    one's background hanging off the first."""
    page = logged_in_page
    _kb, document = _handbook(project)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/admin/knowledge/document/{document.pk}/change/")
    link = page.locator("#document-chunks-link")
    assert link.evaluate("e => e.getClientRects().length") == 1
    box = link.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
