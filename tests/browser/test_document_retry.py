"""A document that failed on its own bytes, in Chromium: its page says a retry cannot fix it and
offers a corrected upload or deletion (h4's A12). Screenshots land in /tmp/shots/."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.knowledge import ingest, services
from apps.knowledge.models import DocumentContent
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import FIXTURES, upload

SHOTS = Path("/tmp/shots")


@pytest.mark.parametrize("width", [1366, 390])
def test_a_json_syntax_error_offers_a_corrected_upload_not_a_retry(logged_in_page, project, width,
                                                                    ingest_unconsumed):
    # ingest_unconsumed: the session's worker (an earlier browser test started it) once ingested
    # the upload before its bytes were broken, the document completed, and the page had nothing to fix.
    kb = KnowledgeBaseFactory(project=project, name="Outlet handbook")
    [document] = services.document_upload(kb=kb, files=[upload("products.json",
                                                               (FIXTURES / "orders.json").read_bytes())])
    DocumentContent.objects.filter(document=document).update(data=b'{"products": [{"sku": "A-1"},]}')
    ingest.document_ingest(document_id=document.pk)
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/admin/knowledge/document/{document.pk}/change/")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"document-parse-failed-{width}.png"), full_page=True)
    assert "Retrying cannot fix this." in page.locator("#document-fix").inner_text()
    assert page.locator("#document-actions input[value=Retry]").count() == 0
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    page.click("#document-upload-corrected")
    page.wait_for_url(f"**/admin/knowledge/knowledgebase/{kb.pk}/change/#kb-upload")
    assert page.locator("#kb-upload-form").is_visible()
