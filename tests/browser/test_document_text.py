"""A document's page in Chromium, as a person reads its chunks: a right-to-left override in the
text is shown as its escape, not obeyed (browser audit, high)."""

from __future__ import annotations

from pathlib import Path

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
