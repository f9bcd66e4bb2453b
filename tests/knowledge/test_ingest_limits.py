"""Hostile documents in the pipeline: each fails with its code and a reason, in bounded work."""

from __future__ import annotations

import hashlib

import pytest

from apps.knowledge import ingest
from apps.knowledge.models import Document, DocumentContent
from tests.knowledge.factories import KnowledgeBaseFactory

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
