"""A failed document's actions: Retry only where another attempt may pass. A file the parser cannot
read fails the same way on every retry (h4's A12: a JSON syntax error offered only Retry), so its
page says so and offers to upload a corrected file or delete it."""

import pytest
from django.contrib.messages import get_messages

from apps.knowledge import ingest, services
from apps.knowledge.models import Document, DocumentContent
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import FIXTURES, upload

pytestmark = pytest.mark.django_db


def _ingested(kb, name: str) -> Document:
    [document] = services.document_upload(kb=kb, files=[upload(name)])
    ingest.document_ingest(document_id=document.pk)
    document.refresh_from_db()
    return document


@pytest.fixture
def kb(owner):
    return KnowledgeBaseFactory(project=owner.project)


@pytest.fixture
def broken(kb) -> Document:
    """A JSON file with a syntax error, failed as the pipeline fails it. The upload checks a small file
    at once, so the syntax error is written into the stored bytes after it, as a large file reaches
    the worker (h4's 5.7 MB JSON with a trailing comma)."""
    [document] = services.document_upload(kb=kb, files=[upload("broken.json", (FIXTURES / "orders.json").read_bytes())])
    DocumentContent.objects.filter(document=document).update(data=b'{"orders": [1, 2,]}')
    ingest.document_ingest(document_id=document.pk)
    document.refresh_from_db()
    assert (document.status, document.error_code) == (Document.Status.FAILED, "document_conversion_failed")
    return document


@pytest.fixture
def transient(kb) -> Document:
    """A document whose embedding endpoint was down: another attempt may pass."""
    document = _ingested(kb, "plain.txt")
    Document.objects.filter(pk=document.pk).update(status=Document.Status.FAILED, error_code="embedding_failed",
                                                   error_message="The embeddings endpoint timed out.")
    document.refresh_from_db()
    return document


def _page(browser, document: Document) -> str:
    return browser.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode()


def test_a_parse_failure_says_a_retry_cannot_fix_it_and_offers_upload_and_delete(browser, kb, broken):
    page = _page(browser, broken)
    assert 'id="document-fix" data-error="document_conversion_failed"' in page
    assert "Retrying cannot fix this." in page
    assert f'href="/admin/knowledge/knowledgebase/{kb.pk}/change/#kb-upload" class="button" ' \
           'id="document-upload-corrected"' in page
    assert f'href="/admin/knowledge/document/{broken.pk}/delete/" class="deletelink" id="document-delete"' in page
    assert f"/admin/knowledge/document/{broken.pk}/retry/" not in page


def test_a_transient_failure_keeps_its_retry(browser, transient):
    page = _page(browser, transient)
    assert f'action="/admin/knowledge/document/{transient.pk}/retry/"' in page
    assert 'id="document-fix"' not in page


def test_a_fetched_page_that_cannot_be_parsed_is_fetched_again_not_uploaded(browser, broken):
    Document.objects.filter(pk=broken.pk).update(source_url="https://docs.example.com/broken.json")
    page = _page(browser, broken)
    assert "Correct the page at its address, then fetch it again" in page
    assert 'id="document-upload-corrected"' not in page
    assert f'action="/admin/knowledge/document/{broken.pk}/refetch/"' in page


def test_the_retry_action_leaves_a_parse_failure_as_it_is_and_says_why(browser, broken, transient):
    response = browser.post("/admin/knowledge/document/", {"action": "retry_documents",
                                                           "_selected_action": [str(broken.pk), str(transient.pk)]})
    assert [str(message) for message in get_messages(response.wsgi_request)] == [
        "Not retried: broken.json — it failed on its own content, and a retry reads the same bytes. Upload a "
        "corrected file on the knowledge base's page, then delete the failed one.",
        "Queued 1 document."]
    assert dict(Document.objects.values_list("filename", "status")) == {"broken.json": "failed",
                                                                        "plain.txt": "queued"}
