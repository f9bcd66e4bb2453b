"""The Documents list in Chromium at 1366×768, the admin's sidebar and filters open: its five columns
fit in the list's box beside a filename and a knowledge base name as long as they may be, a URL
source and a failed document's error code. With nine columns it ran about 330 px past its box, where
the error code, the attempts and the update time were behind a scrollbar. Screenshots land in
/tmp/shots/."""

from __future__ import annotations

import pytest

from apps.knowledge.models import Document
from tests.browser.layout import assert_changelist_fits, changelist_at_1366
from tests.knowledge.factories import KnowledgeBaseFactory

LONG_FILENAME = "quarterly-inventory-reconciliation-report_" * 5 + ".md"
LONG_KB = "知识库" * 30 + "k" * 60
URL = "https://docs.example.com/handbooks/after-sales/refunds-and-returns-policy-2026.md"


@pytest.fixture
def documents(project):
    kb = KnowledgeBaseFactory(project=project, name=LONG_KB)
    common = {"knowledge_base": kb, "file_type": "markdown", "size": 10, "content_hash": "0" * 64}
    Document.objects.create(filename=LONG_FILENAME, status=Document.Status.COMPLETED, progress_done=3,
                            progress_total=3, attempts=1, **common)
    Document.objects.create(filename="refunds.md", source_url=URL, status=Document.Status.EMBEDDING,
                            progress_done=2, progress_total=5, attempts=1, **common)
    Document.objects.create(filename="broken.pdf", status=Document.Status.FAILED, attempts=3,
                            error_code="document_conversion_failed", error_message="no text", **common)


def test_every_column_of_the_documents_list_fits_at_1366(logged_in_page, documents):
    page = logged_in_page
    changelist_at_1366(page, "/admin/knowledge/document/", rows=3, shot="documents-list-1366.png")
    assert_changelist_fits(page, last_header="updated")
    failed = page.locator("#result_list tbody tr", has_text="broken.pdf")
    assert failed.locator(".bh-doc-error").inner_text() == "document_conversion_failed"
    assert "3 attempts" in failed.locator(".field-updated").inner_text()
    assert failed.locator("progress").count() == 0  # nothing counted before it failed
    fetched = page.locator("#result_list tbody tr", has_text="refunds.md")
    assert fetched.locator(f"a[href='{URL}']").get_attribute("title") == URL
    assert fetched.locator("progress").get_attribute("value") == "2"
