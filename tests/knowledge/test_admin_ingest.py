"""The KB page's uploads and live ingestion status, through the test client: batch uploads that
name each refused file, the body limits of admin uploads, HTML error pages outside the API, and
the JSON status endpoint the page polls."""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from apps.knowledge import ingest, leases, services
from apps.knowledge.models import Document, DocumentContent, KnowledgeBase
from apps.projects.models import Membership
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import FIXTURES, upload
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def kb(owner):
    return KnowledgeBaseFactory(project=owner.project)


def _ingested(kb, name):
    [document] = services.document_upload(kb=kb, files=[upload(name)])
    ingest.document_ingest(document_id=document.pk)
    document.refresh_from_db()
    return document


def _queued(kb, name, *, at):
    [document] = services.document_upload(kb=kb, files=[upload(name)])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.QUEUED, queued_at=at)
    return document


def _held(kb, name, *, heartbeat_ago):
    """A document a worker holds (embedding), its last heartbeat `heartbeat_ago` seconds ago."""
    [document] = services.document_upload(kb=kb, files=[upload(name)])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, run_token=uuid.uuid4(),
                                                   heartbeat_at=timezone.now() - dt.timedelta(seconds=heartbeat_ago))
    return document


def _files(*items: tuple[str, bytes]) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(name, data) for name, data in items]


def _fixture(name: str) -> tuple[str, bytes]:
    return name, (FIXTURES / name).read_bytes()


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


# Batch uploads


def test_a_batch_keeps_its_good_files_and_names_each_bad_one_with_its_reason(browser, kb):
    files = _files(_fixture("plain.txt"), _fixture("policy.zh.md"), ("setup.exe", b"MZ\x90\x00binary"),
                   ("empty.txt", b""), _fixture("broken.json"))
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": files})
    assert response.status_code == 302
    assert response["Location"] == f"/admin/knowledge/knowledgebase/{kb.pk}/change/"
    assert sorted(Document.objects.filter(knowledge_base=kb).values_list("filename", flat=True)) == [
        "plain.txt", "policy.zh.md"]
    notes = _messages(response)
    assert notes[0] == ("Uploaded 2 documents: plain.txt, policy.zh.md. They are queued for indexing; their "
                        "progress shows below.")
    assert len(notes) == 4
    assert notes[1:3] == [
        "Not uploaded: setup.exe — unsupported type: .exe is not supported; upload one of: csv, json, "
        "markdown, md, pdf, text, txt.",
        "Not uploaded: empty.txt — empty (0 bytes).",
    ]
    assert notes[3] == ("Not uploaded: broken.json — cannot be read: the file is not valid JSON: "
                        "expected a value at line 1, column 12.")


def test_the_refusals_are_shown_on_the_kb_page_after_the_upload(browser, kb):
    files = _files(_fixture("plain.txt"), ("notes.docx", b"PK\x03\x04"))
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": files}, follow=True)
    page = response.content.decode()
    assert response.status_code == 200
    assert "Not uploaded: notes.docx — unsupported type: .docx is not supported" in page
    assert "Uploaded 1 document: plain.txt. It is queued for indexing; its progress shows below." in page


def test_a_file_without_an_extension_is_refused_in_one_sentence_and_nothing_is_stored(browser, kb):
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/",
                            {"files": _files(("README", b"plain words"))})
    assert _messages(response) == [
        "Not uploaded: README — unsupported type: a file without an extension is not supported; upload one "
        "of: csv, json, markdown, md, pdf, text, txt."]
    assert not Document.objects.filter(knowledge_base=kb).exists()


def test_the_file_picker_accepts_every_extension_the_refusal_names(browser, kb):
    page = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    accept = re.search(r'<input type="file" name="files"[^>]* accept="([^"]*)"', page).group(1)
    assert sorted(accept.split(",")) == [".csv", ".json", ".markdown", ".md", ".pdf", ".text", ".txt"]


def test_a_file_over_the_json_body_limit_is_accepted_by_the_admin_upload(browser, kb, settings):
    settings.BAILING_JSON_BODY_MAX_BYTES = 1_048_576
    data = ("退款政策。" * 140_000).encode()  # about 2 MiB of text: over the JSON limit, under the file limit
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/",
                            {"files": _files(("big.txt", data))})
    assert response.status_code == 302
    document = Document.objects.get(knowledge_base=kb)
    assert (document.filename, document.size) == ("big.txt", len(data))
    assert len(DocumentContent.objects.get(document=document).data) == len(data)


def test_a_file_over_the_per_file_limit_is_named_and_the_others_are_stored(browser, kb, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 2000
    files = _files(("large.txt", b"a sentence. " * 200), _fixture("plain.txt"))
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": files})
    assert response.status_code == 302
    assert list(Document.objects.filter(knowledge_base=kb).values_list("filename", flat=True)) == ["plain.txt"]
    assert _messages(response)[1] == (
        "Not uploaded: large.txt — too large: 2.3\xa0KB, over the limit of 2.0\xa0KB a file.")


def test_too_many_files_refuse_the_whole_batch(browser, kb, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_FILES = 2
    files = _files(*[(f"{n}.txt", b"text.") for n in range(3)])
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": files})
    assert response.status_code == 302
    assert _messages(response) == [
        "Nothing was uploaded: one upload takes up to 2 files at once, 50.0\xa0MB each; choose fewer files."]
    assert Document.objects.count() == 0


def test_an_upload_without_files_says_so(browser, kb):
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {})
    assert response.status_code == 302
    assert _messages(response) == ["Nothing was uploaded: choose at least one file."]
    assert Document.objects.count() == 0


def test_an_oversize_upload_is_an_html_page_with_a_way_back_and_stores_nothing(browser, kb, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 1000
    settings.KNOWLEDGE_UPLOAD_MAX_FILES = 2
    back = f"http://testserver/admin/knowledge/knowledgebase/{kb.pk}/change/"
    files = _files(("huge.txt", b"x. " * 400_000))  # 1.2 MB: over two files of 1000 bytes plus 1 MiB
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": files},
                            HTTP_REFERER=back)
    page = response.content.decode()
    assert response.status_code == 413
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert "<title>Upload too large | " in page
    assert ("Nothing was uploaded: the upload is over 1.0\xa0MB; one upload takes up to 2 files at once, "
            "1000\xa0bytes each. Upload fewer or smaller files.") in page
    assert f'<a class="button" id="bh-error-back" href="{back}">Go back</a>' in page
    assert "bailinghub/console.css" in page
    assert Document.objects.count() == 0


def test_more_files_than_a_request_may_carry_is_a_console_page_saying_so(owner, kb, settings):
    """Choosing over DATA_UPLOAD_MAX_NUMBER_FILES files was Django's bare "Bad Request (400)": the
    form is read (by the CSRF check, before the view) and refused before the KB page can say why."""
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 3
    browser = Client(enforce_csrf_checks=True)  # as a browser's post is checked
    browser.force_login(owner.user)
    back = f"http://testserver/admin/knowledge/knowledgebase/{kb.pk}/change/"
    form = browser.get(back).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/",
                            {"csrfmiddlewaretoken": token,
                             "files": _files(*((f"{n}.txt", b"text") for n in range(4)))}, HTTP_REFERER=back)
    page = response.content.decode()
    assert response.status_code == 400
    assert "<title>Bad request | " in page
    assert "The request has more than 3 files. Nothing was saved." in page
    assert f'<a class="button" id="bh-error-back" href="{back}">Go back</a>' in page
    assert Document.objects.count() == 0


def test_a_console_request_for_a_host_not_served_stays_a_plain_400(browser):
    """The console's error page reads the request's host (to trust its Referer): not for this one."""
    response = browser.get("/admin/", HTTP_HOST="evil.example", HTTP_REFERER="http://evil.example/")
    assert response.status_code == 400


def test_an_oversize_page_links_to_the_console_when_the_referer_is_another_site(browser, kb, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 1000
    settings.KNOWLEDGE_UPLOAD_MAX_FILES = 1
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/",
                            {"files": _files(("huge.txt", b"x. " * 400_000))},
                            HTTP_REFERER="https://evil.example/phish")
    assert response.status_code == 413
    assert '<a class="button" id="bh-error-back" href="/admin/">Go back</a>' in response.content.decode()


def test_an_oversize_admin_form_post_is_html_too(browser, settings):
    settings.BAILING_JSON_BODY_MAX_BYTES = 1000
    response = browser.post("/admin/knowledge/knowledgebase/add/", {"name": "x" * 2000})
    assert response.status_code == 413
    assert response["Content-Type"].startswith("text/html")
    assert "this page accepts at most 1000\xa0bytes" in response.content.decode()


def test_an_oversize_api_request_keeps_its_json_error(api_client, settings):
    settings.BAILING_JSON_BODY_MAX_BYTES = 1000
    response = api_client.post("/api/v1/builder/knowledge-bases", {"name": "x" * 2000}, format="json")
    assert response.status_code == 413
    assert response.json()["error"] == "request_too_large"


# The status endpoint


def test_the_status_endpoint_reports_each_document_with_its_stage_and_reason(browser, kb):
    completed = _ingested(kb, "policy.zh.md")
    failed = _ingested(kb, "no-text.pdf")
    response = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/")
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    body = response.json()
    rows = {row["filename"]: row for row in body["documents"]}
    assert {k: rows["policy.zh.md"][k] for k in ("id", "status", "status_label", "percent", "stage", "retry_url")} == {
        "id": str(completed.pk), "status": "completed", "status_label": "Completed", "percent": 100,
        "stage": "5 passages embedded", "retry_url": None}
    assert {k: rows["no-text.pdf"][k] for k in ("status", "percent", "error_code", "retry_url", "advice_url")} == {
        "status": "failed", "percent": 0, "error_code": failed.error_code, "retry_url": None,
        "advice_url": f"/admin/knowledge/document/{failed.pk}/change/#document-fix"}  # a retry reads the same scan
    assert rows["no-text.pdf"]["error_message"] == ("Document conversion failed: The PDF has no extractable text "
                                                    "(scanned pages need OCR first).")
    assert (body["settled"], body["active_chunks"]) == (True, 5)
    assert {k: body["generation"][k] for k in ("number", "status", "percent", "text")} == {
        "number": 1, "status": "active", "percent": 100, "text": "serving searches"}


def test_queued_documents_show_their_place_in_the_shared_queue(browser, kb):
    now = timezone.now()
    elsewhere = KnowledgeBaseFactory()
    _queued(elsewhere, "plain.txt", at=now - dt.timedelta(seconds=30))
    _queued(kb, "plain.txt", at=now - dt.timedelta(seconds=20))
    mine = _queued(kb, "policy.zh.md", at=now - dt.timedelta(seconds=10))
    body = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()
    row = next(r for r in body["documents"] if r["id"] == str(mine.pk))
    assert (row["queue_position"], row["stage"], row["percent"]) == (3, "queued — 3rd in line", 0)
    assert (body["settled"], body["active_chunks"]) == (False, None)


def test_a_document_being_embedded_shows_its_stage_progress(browser, kb):
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, progress_done=3,
                                                   progress_total=4)
    [row] = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()["documents"]
    assert (row["status"], row["percent"], row["stage"]) == ("embedding", 85, "embedding 3/4 passages")
    # The builder API says the same percent (it said 75: the share of passages embedded alone).
    api = browser.get(f"/api/v1/builder/documents/{document.pk}").json()["data"]
    assert api["progress"] == {"embedded": 3, "total": 4, "percent": 85}


def test_a_document_being_chunked_reads_the_same_percent_in_the_console_and_the_api(browser, kb):
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.CHUNKING)
    [row] = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()["documents"]
    api = browser.get(f"/api/v1/builder/documents/{document.pk}").json()["data"]
    assert (row["percent"], api["progress"]["percent"]) == (25, 25)


def test_a_document_whose_worker_went_silent_says_so_and_when_it_is_handed_over(browser, kb, settings):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 300
    settings.KNOWLEDGE_WATCHDOG_INTERVAL_SECONDS = 60
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    held = dict(status=Document.Status.EMBEDDING, progress_done=3, progress_total=4, run_token=uuid.uuid4())
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/status/"

    Document.objects.filter(pk=document.pk).update(**held, heartbeat_at=timezone.now() - dt.timedelta(seconds=20))
    assert browser.get(url).json()["documents"][0]["stage"] == "embedding 3/4 passages"

    Document.objects.filter(pk=document.pk).update(heartbeat_at=timezone.now() - dt.timedelta(seconds=180))
    assert browser.get(url).json()["documents"][0]["stage"] == (
        "embedding 3/4 passages — no word from its worker for 3 min; another worker takes it over in 2 min "
        "if it stays silent")

    Document.objects.filter(pk=document.pk).update(heartbeat_at=timezone.now() - dt.timedelta(seconds=400))
    assert browser.get(url).json()["documents"][0]["stage"] == (
        "embedding 3/4 passages — no word from its worker for 7 min; another worker takes it over when a "
        "worker's watchdog next runs (every 60 s)")

    # Given back at once (a killed pool process: no token, the heartbeat set back past the lease),
    # no worker is silent and nothing has waited yet; after a minute with nobody taking it, nobody
    # consumes its queue, and the row says so, counted from when it was handed back.
    Document.objects.filter(pk=document.pk).update(run_token=uuid.uuid4())
    assert leases.lease_expire(Document.objects, pk=document.pk, held_by=[
        Document.objects.get(pk=document.pk).run_token]) == 1
    assert browser.get(url).json()["documents"][0]["stage"] == "embedding 3/4 passages"
    Document.objects.filter(pk=document.pk).update(updated_at=timezone.now() - dt.timedelta(seconds=400))
    assert browser.get(url).json()["documents"][0]["stage"] == (
        "embedding 3/4 passages — waiting 7 min for a worker to take it (again); if this goes on, check that "
        "the Celery workers are running")


def test_a_parsing_document_with_a_silent_worker_says_so_too(browser, kb):
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.PARSING, run_token=uuid.uuid4(),
                                                   heartbeat_at=timezone.now() - dt.timedelta(seconds=75))
    [row] = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()["documents"]
    assert row["stage"].startswith("parsing — no word from its worker for 75 s; another worker takes it over in ")


def test_large_and_small_documents_wait_in_their_own_lines(browser, kb, settings):
    settings.KNOWLEDGE_TASK_QUEUE = None
    settings.KNOWLEDGE_LARGE_DOCUMENT_BYTES = 1000
    now = timezone.now()
    big = "A long line of text. " * 100
    large_first = _queued(kb, "plain.txt", at=now - dt.timedelta(seconds=30))
    Document.objects.filter(pk=large_first.pk).update(size=len(big))
    [large] = services.document_upload(kb=kb, files=[upload("big.txt", big.encode())])
    Document.objects.filter(pk=large.pk).update(status=Document.Status.QUEUED, queued_at=now - dt.timedelta(seconds=20))
    small = _queued(kb, "policy.zh.md", at=now - dt.timedelta(seconds=10))
    rows = {r["id"]: r for r in browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()["documents"]}
    assert rows[str(large.pk)]["stage"] == "queued — 2nd in line for large documents"
    assert rows[str(small.pk)]["stage"] == "queued — 1st in line"


def test_a_queued_document_also_says_how_many_documents_are_being_worked_on(browser, kb):
    [working] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=working.pk).update(status=Document.Status.PARSING)
    waiting = _queued(kb, "policy.zh.md", at=timezone.now())
    body = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()
    row = next(r for r in body["documents"] if r["id"] == str(waiting.pk))
    assert row["stage"] == "queued — 1st in line; 1 document ingesting now"


def test_a_rebuild_shows_its_generation_progress(browser, kb):
    _ingested(kb, "policy.zh.md")
    generation = services.knowledge_base_rebuild(kb=kb)
    type(generation).objects.filter(pk=generation.pk).update(progress_done=1, progress_total=4)
    body = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()
    assert {k: body["generation"][k] for k in ("number", "status", "done", "total", "percent")} == {
        "number": 2, "status": "building", "done": 1, "total": 4, "percent": 25}
    assert body["settled"] is False


def test_a_rebuild_whose_worker_went_silent_says_so(browser, kb, settings):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 300
    _ingested(kb, "policy.zh.md")
    generation = services.knowledge_base_rebuild(kb=kb)
    type(generation).objects.filter(pk=generation.pk).update(
        progress_done=1, progress_total=4, run_token=uuid.uuid4(),
        heartbeat_at=timezone.now() - dt.timedelta(seconds=120))
    body = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()
    assert body["generation"]["text"] == (
        "1/4 documents — searches keep using the active generation until this one is complete; no word from its "
        "worker for 2 min; another worker takes it over in 3 min if it stays silent")


def test_a_viewer_reads_the_status_without_retry_links(owner, kb):
    failed = _ingested(kb, "no-text.pdf")
    viewer = MembershipFactory(project=owner.project, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(viewer.user)
    [row] = client.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()["documents"]
    assert (row["id"], row["status"], row["retry_url"]) == (str(failed.pk), "failed", None)


def test_another_projects_kb_status_is_not_found(browser):
    other = KnowledgeBaseFactory()
    _ingested(other, "plain.txt")
    response = browser.get(f"/admin/knowledge/knowledgebase/{other.pk}/status/")
    assert response.status_code == 404
    assert b"plain.txt" not in response.content


def test_the_status_endpoint_needs_a_login(kb):
    response = Client().get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_a_document_failed_by_lost_database_connections_says_so_beside_its_attempts(browser, kb,
                                                                                   django_assert_num_queries):
    lost, crashed = services.document_upload(kb=kb, files=[upload("plain.txt"), upload("policy.zh.md")])
    Document.objects.filter(pk=lost.pk).update(status=Document.Status.FAILED, attempts=1, connection_losses=10,
                                               error_code="ingest_connection_lost")
    Document.objects.filter(pk=crashed.pk).update(status=Document.Status.FAILED, attempts=3,
                                                  error_code="ingest_attempts_exhausted")
    with django_assert_num_queries(9):  # none per failed document: the losses are read with the rows
        body = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()
    stages = {row["filename"]: row["stage"] for row in body["documents"]}
    assert stages == {"plain.txt": "failed after 1 attempt and 10 lost database connections",
                      "policy.zh.md": "failed after 3 attempts"}


def test_a_kb_with_more_documents_than_its_page_shows_counts_them_all_and_links_to_them(browser, kb, monkeypatch,
                                                                                      django_assert_num_queries):
    # Its line counted the rows drawn: "200 completed" over a KB of 2,000 completed documents.
    monkeypatch.setattr("apps.knowledge.admin.DOCUMENTS_ON_KB_PAGE", 2)
    _ingested(kb, "no-text.pdf")
    _ingested(kb, "plain.txt")
    _ingested(kb, "policy.zh.md")
    html = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    assert "Documents (3, newest 2 shown)" in html
    assert html.count('<tr data-document-id="') == 2
    assert "<span data-bh-summary>2 completed · 1 failed</span>" in html
    assert (f'<a href="/admin/knowledge/document/?knowledge_base__id__exact={kb.pk}">All 3 documents of this '
            "knowledge base</a>") in html
    with django_assert_num_queries(10):  # a settled KB's nine (no queue places) and the count of them all
        body = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()
    assert (len(body["documents"]), body["document_total"], body["summary"]) == (2, 3, "2 completed · 1 failed")
    assert body["settled"] is True
    # The oldest, not drawn, queued again from the documents list: the page keeps watching.
    Document.objects.filter(filename="no-text.pdf").update(status=Document.Status.QUEUED)
    body = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()
    assert (body["summary"], body["settled"]) == ("1 queued · 2 completed", False)
    assert "no-text.pdf" not in [row["filename"] for row in body["documents"]]


def test_a_kb_its_page_shows_whole_is_counted_from_its_rows_and_links_nowhere_else(browser, kb):
    _ingested(kb, "no-text.pdf")
    _queued(kb, "plain.txt", at=timezone.now())
    html = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    assert "Documents (2)" in html and "data-bh-all-documents" not in html
    assert "<span data-bh-summary>1 queued · 1 failed</span>" in html


def test_the_status_endpoint_runs_a_fixed_number_of_queries(browser, kb, django_assert_num_queries):
    now = timezone.now()
    for n in range(6):
        _queued(kb, "plain.txt", at=now - dt.timedelta(seconds=n))
    _ingested(kb, "plain.txt")
    # session, user, visible projects, the KB and its project, editable projects; then documents,
    # queue places, documents being worked on, the tool calls being sent on their queue (the default
    # one, shared) and the latest generation
    with django_assert_num_queries(11):
        response = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/")
    assert len(response.json()["documents"]) == 7


def test_retry_from_the_page_script_answers_json_and_requeues(browser, kb):
    failed = _ingested(kb, "no-text.pdf")
    response = browser.post(f"/admin/knowledge/document/{failed.pk}/retry/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert response.json() == {"id": str(failed.pk), "status": "queued", "message": "Queued for another attempt."}
    failed.refresh_from_db()
    assert (failed.status, failed.error_code) == ("queued", "")


def test_retry_of_a_completed_document_is_refused_as_json_and_changes_nothing(browser, kb):
    completed = _ingested(kb, "plain.txt")
    response = browser.post(f"/admin/knowledge/document/{completed.pk}/retry/", HTTP_ACCEPT="application/json")
    assert response.status_code == 409
    assert response.json()["error"] == "invalid_document_state"
    completed.refresh_from_db()
    assert completed.status == "completed"


# The KB and document pages


def test_the_kb_page_shows_completed_as_a_solid_badge(browser, kb):
    _ingested(kb, "plain.txt")
    page = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    assert '<span class="bh-doc-badge bh-doc-completed" data-field="status">Completed</span>' in page
    assert 'data-settled="true"' in page
    assert f'data-status-url="/admin/knowledge/knowledgebase/{kb.pk}/status/"' in page


def test_a_project_operator_sees_the_kbs_index_generations(browser, kb):
    services.knowledge_base_rebuild(kb=kb)
    response = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    formsets = {f.formset.prefix: f for f in response.context["inline_admin_formsets"]}
    assert [g.number for g in formsets["generations"].formset.queryset] == [2, 1]
    assert 'id="generations-group"' in response.content.decode()


def test_a_document_page_is_read_only_without_save_buttons(browser, kb):
    document = _ingested(kb, "plain.txt")
    page = browser.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode()
    assert 'name="_continue"' not in page
    assert 'name="_save"' not in page
    assert 'name="_addanother"' not in page


def test_a_viewer_reads_the_strategy_on_the_kb_page(owner, kb):
    viewer = MembershipFactory(project=owner.project, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(viewer.user)
    response = client.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    page = response.content.decode()
    assert response.status_code == 200
    assert '<div class="readonly">200</div>' in page  # max_chars of the factory's strategy
    assert 'id="kb-upload"' not in page


def test_the_document_list_shows_statuses_as_badges(browser, kb):
    _ingested(kb, "plain.txt")
    page = browser.get("/admin/knowledge/document/").content.decode()
    assert '<span class="bh-doc-badge bh-doc-completed">Completed</span>' in page


def test_a_missing_console_page_is_a_console_404_with_a_way_back(browser, settings):
    settings.DEBUG = False
    other = KnowledgeBaseFactory()
    response = browser.get(f"/admin/knowledge/knowledgebase/{other.pk}/status/")
    page = response.content.decode()
    assert (response.status_code, response["Content-Type"]) == (404, "text/html; charset=utf-8")
    assert "<title>Not found | " in page
    assert "belongs to a project you are not a member of" in page
    assert '<a class="button" id="bh-error-back" href="/admin/">Go back</a>' in page


def test_a_viewer_refused_an_upload_gets_a_console_403(owner, kb):
    viewer = MembershipFactory(project=owner.project, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(viewer.user)
    response = client.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": _files(_fixture("plain.txt"))})
    assert (response.status_code, response["Content-Type"]) == (403, "text/html; charset=utf-8")
    assert "Your role in this project does not allow this." in response.content.decode()
    assert Document.objects.count() == 0


def test_a_document_whose_passages_are_not_counted_yet_says_embedding_without_0_of_0(browser, kb):
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, progress_done=0,
                                                   progress_total=0)
    [row] = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()["documents"]
    assert (row["status"], row["stage"]) == ("embedding", "embedding")


def test_a_file_whose_content_the_kb_already_has_is_uploaded_with_a_warning(browser, kb):
    name, data = _fixture("plain.txt")
    browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": _files((name, data))})
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/",
                            {"files": _files(("copy.txt", data), ("again.txt", b"Fresh words. " * 3),
                                             ("again-2.txt", b"Fresh words. " * 3))})
    notes = _messages(response)
    assert notes[0] == "Uploaded 1 document: plain.txt. It is queued for indexing; its progress shows below."
    assert notes[1:] == [
        "Uploaded 3 documents: copy.txt, again.txt, again-2.txt. They are queued for indexing; their progress "
        "shows below.",
        "The file copy.txt has the same content as plain.txt, already in this knowledge base: searches will find "
        "its passages twice. Delete one of them unless that is intended.",
        "The file again-2.txt has the same content as again.txt, already in this knowledge base: searches will "
        "find its passages twice. Delete one of them unless that is intended.",
    ]
    assert Document.objects.filter(knowledge_base=kb).count() == 4  # a warning, not a refusal


def test_the_same_content_warning_shows_the_file_names_as_typed(browser, kb):
    # The admin capitalises each message's first letter: one that began with the file name showed
    # "Returns.md has the same content as returns.md".
    data = b"# Returns\n\nUnopened items within 30 days."
    browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": _files(("returns.md", data))})
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/",
                            {"files": _files(("returns.md", data))}, follow=True)
    page = response.content.decode()
    assert response.status_code == 200
    assert ('<li class="warning">The file returns.md has the same content as returns.md, already in this knowledge '
            "base: searches will find its passages twice. Delete one of them unless that is intended.</li>") in page


def test_a_file_of_only_white_space_is_refused_at_upload_as_an_empty_one_is(browser, kb):
    """It was queued, then failed in the worker with "The document has no text to index"."""
    files = _files(("blank.md", b"  \n\t\n   \n"), ("invisible.txt", "\u200b\u2060\n".encode()),
                   _fixture("plain.txt"))
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": files})
    assert response.status_code == 302
    assert list(Document.objects.filter(knowledge_base=kb).values_list("filename", flat=True)) == ["plain.txt"]
    notes = _messages(response)
    assert "Not uploaded: blank.md — no text, only white space." in notes
    assert "Not uploaded: invisible.txt — no text, only white space." in notes


@pytest.mark.parametrize(("failed", "link"), [
    (1, "The 1 failed document of this knowledge base"),
    (2, "All 2 failed documents of this knowledge base"),
])
def test_the_link_to_the_failed_documents_counts_them_in_words(browser, kb, failed, link):
    documents = services.document_upload(kb=kb, files=[upload("plain.txt"), upload("policy.zh.md")])
    Document.objects.filter(pk__in=[d.pk for d in documents[:failed]]).update(
        status=Document.Status.FAILED, error_code="ingest_attempts_exhausted")
    page = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    [text] = re.findall(r'status__exact=failed">([^<]*)</a>', page)
    assert text == link


@pytest.mark.parametrize(("error_code", "action"), [("document_conversion_failed", "advice"),
                                                    ("document_empty", "advice"), ("embedding_failed", "retry"),
                                                    ("ingest_time_limit", "retry")])
def test_a_failed_row_offers_retry_only_where_another_attempt_may_pass(browser, kb, error_code, action):
    """A failure in the file's own bytes fails the same way on every retry (h4's trial: a JSON syntax
    error offered only Retry on the KB page): its row links to the document's page, which says what
    helps; the page and its polling offer the same."""
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.FAILED, error_code=error_code,
                                                   error_message="It failed.")
    [row] = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()["documents"]
    retry = f"/admin/knowledge/document/{document.pk}/retry/"
    advice = f"/admin/knowledge/document/{document.pk}/change/#document-fix"
    assert (row["retry_url"], row["advice_url"]) == ((retry, None) if action == "retry" else (None, advice))
    page = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    assert (f'action="{retry}"' in page, f'href="{advice}" class="bh-nowrap"' in page) == (
        action == "retry", action == "advice")


def test_the_kb_page_says_how_its_chunks_and_a_documents_passages_differ(browser, kb):
    """The index box counted chunks and the rows passages, with nothing saying the two differ."""
    _ingested(kb, "policy.zh.md")
    page = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    assert ("a document's progress counts passages, the distinct texts the embedder reads: each chunk and each of "
            "its sentence windows, a text that repeats counted once") in " ".join(page.split())


def test_the_chunk_count_on_the_kb_page_is_what_searches_can_return(browser, kb):
    """A document still embedding has its chunks in the active generation already, and one turned
    off keeps its own: the page's "what searches return" counted both (5,014 chunks while a
    3 MB upload embedded, when searches could return a hundred). It counts the searchable ones."""
    searchable = _ingested(kb, "policy.zh.md")
    embedding = _ingested(kb, "plain.txt")
    turned_off = _ingested(kb, "policy.zh.md")
    Document.objects.filter(pk=embedding.pk).update(status=Document.Status.EMBEDDING)
    Document.objects.filter(pk=turned_off.pk).update(enabled=False)
    assert searchable.chunks.filter(kind="child").count() == 5
    page = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    assert re.search(r"Chunks searches can return: <span data-bh-chunks>5</span>", page)

    Document.objects.filter(pk=embedding.pk).update(status=Document.Status.FAILED)  # settled: polling counts
    body = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()
    assert (body["settled"], body["active_chunks"]) == (True, 5)


def test_a_queued_document_no_worker_takes_says_so_after_a_minute(browser, kb):
    """With the workers stopped, an upload read "queued — 1st in line" for as long as nobody
    looked at the workers; after a minute with nothing ingesting in its lane, it says so."""
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/status/"
    fresh = _queued(kb, "plain.txt", at=timezone.now() - dt.timedelta(seconds=20))
    row = next(r for r in browser.get(url).json()["documents"] if r["id"] == str(fresh.pk))
    assert row["stage"] == "queued — 1st in line"  # a worker may still be on its way

    Document.objects.filter(pk=fresh.pk).update(queued_at=timezone.now() - dt.timedelta(minutes=3))
    row = next(r for r in browser.get(url).json()["documents"] if r["id"] == str(fresh.pk))
    assert row["stage"] == ("queued — 1st in line — no worker has started on it in 3 min; "
                            "if this goes on, check that the Celery workers are running")


def test_queued_documents_behind_silent_workers_say_so(browser, kb):
    """Workers killed mid-ingest: the rows they held say "no word from its worker"; the queued
    rows behind them said "2 documents ingesting now" with nothing ingesting at all."""
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/status/"
    waiting = _queued(kb, "plain.txt", at=timezone.now() - dt.timedelta(minutes=4))
    held = _held(kb, "policy.zh.md", heartbeat_ago=5)
    row = next(r for r in browser.get(url).json()["documents"] if r["id"] == str(waiting.pk))
    assert row["stage"] == "queued — 1st in line; 1 document ingesting now"  # it moves

    Document.objects.filter(pk=held.pk).update(heartbeat_at=timezone.now() - dt.timedelta(minutes=2))
    row = next(r for r in browser.get(url).json()["documents"] if r["id"] == str(waiting.pk))
    assert row["stage"] == ("queued — 1st in line; 1 document ingesting now — no word from the workers "
                            "ingesting them for 2 min; if this goes on, check that the Celery workers are running")


def test_a_document_queued_seconds_ago_behind_silent_workers_is_told_so_at_once(browser, kb):
    """The silence is the workers', counted from their last heartbeat, whenever the document came:
    with the one-minute wait (right only when nothing is being ingested) the row read "1 document
    ingesting now" for a minute behind workers already known to be silent."""
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/status/"
    fresh = _queued(kb, "plain.txt", at=timezone.now() - dt.timedelta(seconds=10))
    _held(kb, "policy.zh.md", heartbeat_ago=120)
    row = next(r for r in browser.get(url).json()["documents"] if r["id"] == str(fresh.pk))
    assert row["stage"] == ("queued — 1st in line; 1 document ingesting now — no word from the workers "
                            "ingesting them for 2 min; if this goes on, check that the Celery workers are running")


def test_a_document_queued_seconds_ago_with_nothing_ingesting_is_only_in_line_yet(browser, kb):
    """With nothing being ingested a worker may still be on its way: a minute first."""
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/status/"
    fresh = _queued(kb, "plain.txt", at=timezone.now() - dt.timedelta(seconds=10))
    row = next(r for r in browser.get(url).json()["documents"] if r["id"] == str(fresh.pk))
    assert row["stage"] == "queued — 1st in line"


def test_a_turned_off_kb_says_so_at_the_top_of_its_page(browser, kb):
    """Turned off, the KB's page read "Active … serving searches" at its top, the one sign of it
    the Enabled box far down under Settings; the playground said it, the KB page did not."""
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/change/"
    assert 'id="kb-off"' not in browser.get(url).content.decode()
    KnowledgeBase.objects.filter(pk=kb.pk).update(enabled=False)
    page = browser.get(url).content.decode()
    notice = re.search(r'<p class="errornote" id="kb-off">(.*?)</p>', page, re.S)
    assert notice and "Agents, turns and routes' answers do not read this knowledge base" in notice.group(1)
    assert page.index('id="kb-off"') < page.index('id="kb-index"')


def test_a_silent_document_nobody_takes_over_stops_promising_a_watchdog(browser, kb, settings):
    """With every worker down (so no watchdog runs either), a killed run's row promised "another
    worker takes it over when a worker's watchdog next runs (every 60 s)" for as long as they stayed
    down; two intervals past the lease, it says nothing is taking it over and what to check."""
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 300
    settings.KNOWLEDGE_WATCHDOG_INTERVAL_SECONDS = 60
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(
        status=Document.Status.EMBEDDING, progress_done=3, progress_total=4, run_token=uuid.uuid4(),
        heartbeat_at=timezone.now() - dt.timedelta(seconds=600))
    [row] = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()["documents"]
    assert row["stage"] == (
        "embedding 3/4 passages — no word from its worker for 10 min; no worker has taken it over 5 min after it "
        "could: check that the Celery workers and their beat are running")


def test_a_rebuild_handed_back_with_no_worker_to_take_it_says_so(browser, kb):
    """The watchdog re-sent a killed rebuild to the large queue, whose worker was down: the line
    read "Building 4/15 documents — searches keep using the active generation …" as if it moved."""
    _ingested(kb, "policy.zh.md")
    generation = services.knowledge_base_rebuild(kb=kb)
    handed_back = timezone.now() - dt.timedelta(minutes=3)
    type(generation).objects.filter(pk=generation.pk).update(
        run_token=None, progress_done=4, progress_total=15, heartbeat_at=handed_back, updated_at=handed_back)
    body = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/status/").json()
    assert body["generation"]["text"].endswith(
        "— searches keep using the active generation until this one is complete; waiting 3 min for a worker to "
        "take it (again); if this goes on, check that the Celery workers are running")
