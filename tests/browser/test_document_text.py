"""A document's page in Chromium, as a person reads its chunks: a right-to-left override in the
text is shown as its escape, not obeyed, and a word longer than the window breaks inside the
table rather than widening the page (browser audit: high, medium)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

SHOTS = Path("/tmp/shots")


def test_a_chunks_override_reads_as_its_escape_on_the_document_page(logged_in_page, project):
    kb = KnowledgeBaseFactory(project=project, name="门店知识库")
    document = ingest_texts(kb, {"kettle.txt": "Deluxe kettle price: \u202e0051 CNY (fifteen hundred)."})["kettle.txt"]
    page = logged_in_page
    page.goto(f"/admin/knowledge/document/{document.pk}/change/")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "document-override.png"), full_page=True)
    # What is drawn, left to right: the digits in their stored order, the control named.
    assert page.locator("#document-chunks td.dc-text").inner_text() == (
        "Deluxe kettle price: \\u202e0051 CNY (fifteen hundred).")


@pytest.mark.parametrize(("width", "text_width"), [(1366, 600), (390, 300)])
def test_a_20000_character_word_does_not_widen_the_document_page(logged_in_page, project, width, text_width):
    """It made the page 5,219 px wide at 1366 px (5,260 at 390), the Embedded column 4,000 px off screen."""
    kb = KnowledgeBaseFactory(project=project, name="Handbook")
    document = ingest_texts(kb, {"longword.txt": "x" * 20_000 + "\n"})["longword.txt"]
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/admin/knowledge/document/{document.pk}/change/")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#document-chunks").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / f"document-longword-{width}.png"))
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    embedded = page.locator("#document-chunks tbody tr").first.locator("td.dc-embedded")
    assert embedded.evaluate("e => e.getBoundingClientRect().right") <= width
    # Its text takes the width there is: in five columns at 390 px it was a few characters wide.
    text = page.locator("#document-chunks td.dc-text").first
    assert text.evaluate("e => e.getBoundingClientRect().width") >= text_width
