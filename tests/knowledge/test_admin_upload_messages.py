"""The console's upload refusals read one way, from one place (apps.knowledge.admin_uploads): a
refused file is "Not uploaded: <file> — <reason>.", an upload refused whole "Nothing was uploaded:
<reason>.", sizes are sizes. They came in three shapes ("<file> — Unsupported file type: …",
"<file> is empty (0 bytes).", "Document conversion failed: <file>: …") and in byte counts."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.knowledge.models import Document
from tests.knowledge.factories import KnowledgeBaseFactory

pytestmark = pytest.mark.django_db

REFUSED = [
    ("setup.exe", b"MZ\x90\x00binary",
     "unsupported type: .exe is not supported; upload one of: csv, json, markdown, md, pdf, text, txt."),
    ("scan.pdf", b"just text, not a PDF", "unsupported type: scan.pdf is named .pdf but is not a PDF."),
    ("broken.json", b'{"a": 1,,}', "cannot be read: the file is not valid JSON: expected a key in double quotes "
                                    "at line 1, column 9."),
    ("empty.txt", b"", "empty (0 bytes)."),
    ("blank.md", b"  \n\t\n", "no text, only white space."),
    ("large.txt", b"A sentence. " * 200, "too large: 2.3\xa0KB, over the limit of 2.0\xa0KB a file."),
]


@pytest.fixture
def kb(browser, owner):
    return KnowledgeBaseFactory(project=owner.project)


def _upload(browser, kb, files):
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/",
                            {"files": [SimpleUploadedFile(name, data) for name, data in files]})
    assert response.status_code == 302
    return [str(message) for message in get_messages(response.wsgi_request)]


@pytest.mark.parametrize(("name", "data", "reason"), REFUSED, ids=[name for name, _, _ in REFUSED])
def test_a_refused_file_is_named_first_then_its_reason(browser, kb, settings, name, data, reason):
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 2000
    assert _upload(browser, kb, [(name, data)]) == [f"Not uploaded: {name} — {reason}"]
    assert not Document.objects.exists()


def test_every_refusal_of_a_batch_reads_the_same_way(browser, kb, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 2000
    notes = _upload(browser, kb, [(name, data) for name, data, _ in REFUSED] + [("plain.txt", b"Plain words.")])
    assert notes[0].startswith("Uploaded 1 document: plain.txt.")
    assert all(re.fullmatch(r"Not uploaded: \S+ — [a-z][^—]*\.", note) for note in notes[1:]), notes
    assert not [note for note in notes if "2400" in note]  # large.txt's size in bytes, once shown as such


def test_too_many_files_say_nothing_was_uploaded_and_the_limits(browser, kb, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_FILES = 1
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 1000
    assert _upload(browser, kb, [("a.txt", b"A."), ("b.txt", b"B.")]) == [
        "Nothing was uploaded: one upload takes up to 1 file at once, 1000\xa0bytes each; choose fewer files."]
    assert not Document.objects.exists()


def test_no_file_says_nothing_was_uploaded(browser, kb):
    assert _upload(browser, kb, []) == ["Nothing was uploaded: choose at least one file."]


def test_the_upload_form_states_the_limits_in_the_refusals_words(browser, kb, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_FILES = 1
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 1000
    page = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    assert "txt, md, json, csv or pdf — up to 1 file at once, 1000\xa0bytes each." in page
