"""The builder API: shapes, scoping, and every error code with its status, changing nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.knowledge import ingest, services
from apps.knowledge.models import Chunk, Document, IndexGeneration, KnowledgeBase
from apps.projects.models import Membership
from apps.projects.tokens import operator_token_create, operator_token_revoke
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import FIXTURES, upload
from tests.knowledge.pdfs import pdf_build, pdf_catalog_in_object_stream, pdf_encrypt, without_brotli
from tests.projects.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

BASE = "/api/v1/builder"



@pytest.fixture
def kb(owner):
    return KnowledgeBaseFactory(project=owner.project)


def _counts():
    return (KnowledgeBase.objects.count(), Document.objects.count(), Chunk.objects.count(),
            IndexGeneration.objects.count())


def _error(response, status, code):
    assert (response.status_code, response.json()["error"]) == (status, code), response.json()
    return response.json()


def _upload(client, kb_id, *files):
    return client.post(f"{BASE}/knowledge-bases/{kb_id}/documents",
                       {"files": [open(FIXTURES / name, "rb") if isinstance(name, str) else name for name in files]},
                       format="multipart")


def _create_body(owner, model, **overrides):
    return {"project_id": str(owner.project_id), "name": "退款政策", "description": "售后与退款FAQ",
            "embedding_model_id": str(model.pk), "embedding_dim": model.dimension,
            "chunk_strategy": {"strategy": "auto", "min_chars": 256, "max_chars": 768, "overlap_chars": 96},
            **overrides}


# Knowledge bases


def test_create_answers_the_knowledge_base_in_the_envelope(client, owner):
    model = EmbeddingModelFactory()
    response = client.post(f"{BASE}/knowledge-bases", _create_body(owner, model), format="json")
    assert response.status_code == 201
    data = response.json()["data"]
    assert (data["name"], data["embedding_dim"], data["chunk_strategy"]) == (
        "退款政策", 32, {"strategy": "auto", "min_chars": 256, "max_chars": 768, "overlap_chars": 96})
    assert data["index"]["active_generation"]["number"] == 1
    assert data["index"]["rebuild"] is None


def test_a_session_write_without_its_csrf_token_says_what_is_missing_and_creates_nothing(owner):
    from django.test import Client

    model = EmbeddingModelFactory()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner.user)
    response = browser.post(f"{BASE}/knowledge-bases", _create_body(owner, model), content_type="application/json")
    assert (response.status_code, response.json()["error"]) == (403, "forbidden")
    assert "send the csrftoken cookie's value as the X-CSRFToken header" in response.json()["message"]
    assert not KnowledgeBase.objects.filter(project=owner.project).exists()


def test_create_without_a_strategy_uses_the_default(client, owner, settings):
    body = _create_body(owner, EmbeddingModelFactory())
    del body["chunk_strategy"]
    response = client.post(f"{BASE}/knowledge-bases", body, format="json")
    assert response.json()["data"]["chunk_strategy"] == settings.KNOWLEDGE_DEFAULT_CHUNK_STRATEGY


def test_create_with_another_dimension_is_422(client, owner):
    before = _counts()
    response = client.post(f"{BASE}/knowledge-bases", _create_body(owner, EmbeddingModelFactory(), embedding_dim=1536),
                           format="json")
    _error(response, 422, "embedding_dimension_mismatch")
    assert _counts() == before


def test_create_with_an_unknown_embedding_model_is_422(client, owner):
    body = _create_body(owner, EmbeddingModelFactory(), embedding_model_id="00000000-0000-0000-0000-000000000001")
    before = _counts()
    _error(client.post(f"{BASE}/knowledge-bases", body, format="json"), 422, "embedding_model_not_found")
    assert _counts() == before


def test_create_with_an_invalid_strategy_is_422_naming_the_field(client, owner):
    body = _create_body(owner, EmbeddingModelFactory(), chunk_strategy={"strategy": "semantic"})
    before = _counts()
    payload = _error(client.post(f"{BASE}/knowledge-bases", body, format="json"), 422, "invalid_knowledge_base")
    assert list(payload["fields"]) == ["chunk_strategy.strategy"]
    assert _counts() == before


def test_create_without_a_project_is_422(client, owner):
    body = _create_body(owner, EmbeddingModelFactory())
    del body["project_id"]
    before = _counts()
    payload = _error(client.post(f"{BASE}/knowledge-bases", body, format="json"), 422, "invalid_knowledge_base")
    assert list(payload["fields"]) == ["project_id"]
    assert _counts() == before


def test_create_in_a_project_the_operator_cannot_see_is_404(client, owner):
    other = MembershipFactory()
    body = _create_body(owner, EmbeddingModelFactory(), project_id=str(other.project_id))
    before = _counts()
    _error(client.post(f"{BASE}/knowledge-bases", body, format="json"), 404, "project_not_found")
    assert _counts() == before


def test_a_viewer_cannot_create(api_client):
    viewer = MembershipFactory(role=Membership.Role.VIEWER)
    api_client.force_login(viewer.user)
    before = _counts()
    _error(api_client.post(f"{BASE}/knowledge-bases", _create_body(viewer, EmbeddingModelFactory()), format="json"),
           403, "forbidden")
    assert _counts() == before


def test_a_duplicate_name_is_409(client, owner, kb):
    before = _counts()
    body = _create_body(owner, EmbeddingModelFactory(), name=kb.name)
    _error(client.post(f"{BASE}/knowledge-bases", body, format="json"), 409, "knowledge_base_name_taken")
    assert _counts() == before


@pytest.mark.parametrize("name", ["AUDIT dup", "Audit\u00a0Dup", "Audit\u200b Dup", "\uff21udit Dup"])
def test_a_name_that_reads_as_a_taken_one_is_409_on_create_and_rename(client, owner, name):
    KnowledgeBaseFactory(project=owner.project, name="Audit Dup")
    other = KnowledgeBaseFactory(project=owner.project, name="Other")
    before = _counts()
    body = _create_body(owner, EmbeddingModelFactory(), name=name)
    _error(client.post(f"{BASE}/knowledge-bases", body, format="json"), 409, "knowledge_base_name_taken")
    _error(client.patch(f"{BASE}/knowledge-bases/{other.pk}", {"name": name}, format="json"), 409,
           "knowledge_base_name_taken")
    assert _counts() == before and KnowledgeBase.objects.get(pk=other.pk).name == "Other"
    # Its own name, cased otherwise, is a rename of itself.
    assert client.patch(f"{BASE}/knowledge-bases/{other.pk}", {"name": "OTHER"}, format="json").status_code == 200


def test_list_shows_only_visible_knowledge_bases_in_constant_queries(client, owner, django_assert_num_queries):
    for _ in range(3):
        KnowledgeBaseFactory(project=owner.project)
    KnowledgeBaseFactory()  # another project's
    with django_assert_num_queries(5):  # session, user, count, knowledge bases, their generations
        response = client.get(f"{BASE}/knowledge-bases")
    assert response.json()["meta"]["total"] == 3
    assert {kb["project_id"] for kb in response.json()["data"]} == {str(owner.project_id)}


def test_get_an_unknown_knowledge_base_is_404(client):
    _error(client.get(f"{BASE}/knowledge-bases/00000000-0000-0000-0000-000000000002"), 404, "knowledge_base_not_found")


def test_get_another_projects_knowledge_base_is_404(client):
    _error(client.get(f"{BASE}/knowledge-bases/{KnowledgeBaseFactory().pk}"), 404, "knowledge_base_not_found")


def test_patch_changes_the_strategy_for_the_next_rebuild(client, kb):
    response = client.patch(f"{BASE}/knowledge-bases/{kb.pk}",
                            {"chunk_strategy": {"strategy": "by_paragraph"}, "require_confirmation": True},
                            format="json")
    data = response.json()["data"]
    assert data["chunk_strategy"]["strategy"] == "by_paragraph"
    assert data["require_confirmation"] is True
    assert data["index"]["active_generation"]["chunk_strategy"]["strategy"] == "auto"


def test_a_partial_strategy_keeps_the_fields_it_does_not_name(client, kb):
    url = f"{BASE}/knowledge-bases/{kb.pk}"
    first = client.patch(url, {"chunk_strategy": {"strategy": "fixed", "max_chars": 400, "overlap_chars": 40}},
                         format="json").json()["data"]["chunk_strategy"]
    assert (first["strategy"], first["max_chars"], first["overlap_chars"]) == ("fixed", 400, 40)
    data = client.patch(url, {"chunk_strategy": {"max_chars": 500}}, format="json").json()["data"]
    assert data["chunk_strategy"] == {**first, "max_chars": 500}


def test_patch_of_the_embedding_model_is_refused(client, kb):
    other = EmbeddingModelFactory()
    response = client.patch(f"{BASE}/knowledge-bases/{kb.pk}", {"embedding_model_id": str(other.pk)}, format="json")
    _error(response, 422, "embedding_model_frozen")
    kb.refresh_from_db()
    assert kb.embedding_model_id != other.pk


def test_embedding_models_are_listed(client):
    model = EmbeddingModelFactory()
    names = [m["name"] for m in client.get(f"{BASE}/embedding-models").json()["data"]]
    assert model.name in names


# Documents


def test_upload_of_several_files_creates_pending_documents(client, kb):
    response = _upload(client, kb.pk, "policy.zh.md", "products.csv")
    assert response.status_code == 201
    assert [(d["filename"], d["file_type"], d["status"]) for d in response.json()["data"]] == [
        ("policy.zh.md", "markdown", "pending"), ("products.csv", "csv", "pending")]


def test_upload_without_a_file_is_422(client, kb):
    before = _counts()
    payload = _error(client.post(f"{BASE}/knowledge-bases/{kb.pk}/documents", {}, format="multipart"),
                     422, "file_required")
    assert payload["message"] == "At least one file is required."
    assert _counts() == before


def test_upload_to_an_unknown_knowledge_base_is_404(client):
    before = _counts()
    _error(_upload(client, "00000000-0000-0000-0000-000000000003", "plain.txt"), 404, "knowledge_base_not_found")
    assert _counts() == before


def test_upload_of_an_unsupported_type_is_415_and_accepts_none_of_the_files(client, kb):
    before = _counts()
    notes = upload("notes.docx", b"PK\x03\x04...")
    notes.seek(0)
    _error(_upload(client, kb.pk, "plain.txt", notes), 415, "unsupported_file_type")
    assert _counts() == before


def test_upload_of_a_file_whose_content_disagrees_with_its_extension_is_415(client, kb):
    before = _counts()
    _error(_upload(client, kb.pk, upload("report.pdf", b"just text")), 415, "unsupported_file_type")
    assert _counts() == before


def test_upload_of_a_file_over_the_limit_is_413(client, kb, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 100
    before = _counts()
    payload = _error(_upload(client, kb.pk, "policy.zh.md"), 413, "file_too_large")
    assert payload["max_bytes"] == 100
    assert _counts() == before


def test_upload_body_over_the_whole_limit_is_413_before_it_is_read(client, kb, settings):
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 100
    settings.KNOWLEDGE_UPLOAD_MAX_FILES = 1
    before = _counts()
    big = upload("big.txt", "字".encode() * 400_000)
    _error(_upload(client, kb.pk, big), 413, "file_too_large")
    assert _counts() == before


def test_the_default_upload_limit_is_fifty_mebibytes():
    from bailinghub import settings as project_settings

    assert project_settings.KNOWLEDGE_UPLOAD_MAX_BYTES == 50 * 1024 * 1024


def test_upload_of_a_file_that_cannot_be_converted_is_422(client, kb):
    before = _counts()
    payload = _error(_upload(client, kb.pk, "broken.json"), 422, "document_conversion_failed")
    assert payload["message"].startswith("Document conversion failed: broken.json: The file is not valid JSON")
    assert _counts() == before


@pytest.mark.parametrize("name", ["encrypted.pdf", "corrupt.pdf"])
def test_upload_of_an_unreadable_pdf_is_422(client, kb, name):
    before = _counts()
    _error(_upload(client, kb.pk, name), 422, "document_conversion_failed")
    assert _counts() == before


def test_upload_of_a_pdf_under_a_security_handler_pypdf_lacks_is_422(client, kb):
    """Certificate security or Microsoft's rights management: pypdf raises NotImplementedError
    opening it, which was a 500."""
    data = pdf_encrypt(pdf_build([[("Refunds take seven days.", 11)]]), user_password="", owner_password="owner",
                       handler="/MicrosoftIRMServices")
    before = _counts()
    payload = _error(_upload(client, kb.pk, upload("protected.pdf", data)), 422, "document_conversion_failed")
    assert payload["message"] == ("Document conversion failed: protected.pdf: The PDF is protected by a security "
                                  "handler that cannot be opened here (such as certificate security or rights "
                                  "management); upload an unprotected copy.")
    assert _counts() == before


@without_brotli
def test_upload_of_a_pdf_whose_catalog_needs_a_decoder_this_server_lacks_is_422(client, kb):
    """Its catalog sits in a Brotli-compressed object stream: pypdf raises DependencyError, which
    is no PyPdfError, and the upload was a 500."""
    data = pdf_catalog_in_object_stream(pdf_build([[("Refunds take seven days.", 11)]]), "/BrotliDecode")
    before = _counts()
    payload = _error(_upload(client, kb.pk, upload("packed.pdf", data)), 422, "document_conversion_failed")
    assert payload["message"] == ("Document conversion failed: packed.pdf: The PDF uses a compression or encryption "
                                  "method this server has no decoder for; upload a copy saved with standard settings "
                                  "(or its text as a .txt file).")
    assert _counts() == before


def test_upload_of_a_csv_with_a_cell_over_128_kib_is_accepted_and_indexed(client, kb):
    """It was 422 document_conversion_failed: 'The file is not valid CSV: field larger than field
    limit (131072).'"""
    data = ("sku,description\nA-1," + "Refunds take seven days. " * 8000 + "\n").encode()
    response = client.post(f"{BASE}/knowledge-bases/{kb.pk}/documents", {"files": [upload("catalogue.csv", data)]},
                           format="multipart")
    assert response.status_code == 201, response.json()
    [document] = response.json()["data"]
    assert ingest.document_ingest(document_id=document["id"]) == "completed"
    children = Chunk.objects.filter(document_id=document["id"], kind=Chunk.Kind.CHILD)
    assert children.count() > 1
    assert Document.objects.get(pk=document["id"]).status == Document.Status.COMPLETED


def _child_texts(document_id) -> list[str]:
    return list(Chunk.objects.filter(document_id=document_id, kind=Chunk.Kind.CHILD).order_by("index")
                .values_list("text", flat=True))


# Bytes GB18030 decodes too, as they were indexed: "Herr M黮ler aus M黱chen …" and "捞 巩辑绰 …".
@pytest.mark.parametrize(("name", "text", "encoding"), [
    ("gruss.txt", "Herr Müller aus München grüßt Frau Öztürk", "cp1252"),
    ("반품.txt", "이 문서는 반품 절차를 설명합니다. 배송비는 고객이 부담합니다.", "euc_kr"),
])
def test_upload_of_text_that_gb18030_also_decodes_is_indexed_as_written(client, kb, name, text, encoding):
    response = _upload(client, kb.pk, upload(name, f"{text}\n".encode(encoding)))
    assert response.status_code == 201, response.json()
    [document] = response.json()["data"]
    assert ingest.document_ingest(document_id=document["id"]) == "completed"
    assert _child_texts(document["id"]) == [text]


def test_upload_of_text_in_an_encoding_not_read_here_is_422(client, kb):
    before = _counts()
    data = "Съешь же ещё этих мягких французских булок, да выпей чаю.".encode("cp1251")
    payload = _error(_upload(client, kb.pk, upload("menu.txt", data)), 422, "document_conversion_failed")
    assert payload["message"] == ("Document conversion failed: menu.txt: The text is not recognised as UTF-8, UTF-16, "
                                  "Chinese GB18030 or Big5, Japanese Shift-JIS or EUC-JP, Korean EUC-KR, or Western "
                                  "European Windows-1252; save it as UTF-8 and upload it again.")
    assert _counts() == before


def test_upload_of_utf16_without_a_bom_is_accepted_and_indexed(client, kb):
    """It was 415 unsupported_file_type: its NUL bytes made it binary."""
    data = "sku,name\r\nA-1,保温杯\r\nB-2,Travel mug\r\n".encode("utf-16-le")
    response = _upload(client, kb.pk, upload("products.csv", data))
    assert response.status_code == 201, response.json()
    [document] = response.json()["data"]
    assert (document["file_type"], ingest.document_ingest(document_id=document["id"])) == ("csv", "completed")
    assert _child_texts(document["id"]) == ["sku: A-1; name: 保温杯\n\nsku: B-2; name: Travel mug"]


def test_upload_of_utf16_that_does_not_decode_is_415_as_binary(client, kb):
    before = _counts()
    data = "Refunds\n".encode("utf-16-le") + b"\x00\xd8" + "seven days\n".encode("utf-16-le")  # a lone surrogate
    payload = _error(_upload(client, kb.pk, upload("notes.txt", data)), 415, "unsupported_file_type")
    assert payload["message"] == "Unsupported file type: notes.txt is named .txt but its content is binary, not text."
    assert _counts() == before


def test_a_viewer_cannot_upload(api_client, kb):
    viewer = MembershipFactory(project=kb.project, role=Membership.Role.VIEWER)
    api_client.force_login(viewer.user)
    before = _counts()
    _error(_upload(api_client, kb.pk, "plain.txt"), 403, "forbidden")
    assert _counts() == before


def _completed(kb, name="policy.zh.md"):
    [document] = services.document_upload(kb=kb, files=[upload(name)])
    ingest.document_ingest(document_id=document.pk)
    return document


def test_documents_are_listed_in_constant_queries(client, kb, django_assert_num_queries):
    for _ in range(3):
        _completed(kb, "plain.txt")
    with django_assert_num_queries(5):
        response = client.get(f"{BASE}/knowledge-bases/{kb.pk}/documents")
    assert [d["status"] for d in response.json()["data"]] == ["completed"] * 3
    assert response.json()["data"][0]["progress"] == {"embedded": 1, "total": 1, "percent": 100}


def test_get_an_unknown_document_is_404(client):
    _error(client.get(f"{BASE}/documents/00000000-0000-0000-0000-000000000004"), 404, "document_not_found")


def test_chunks_preview_has_chapter_paths(client, kb):
    document = _completed(kb)
    data = client.get(f"{BASE}/documents/{document.pk}/chunks").json()["data"]
    assert [c["chapter_path"] for c in data] == ["售后政策", "售后政策 / 退款", "售后政策 / 退款 / 七天无理由",
                                                 "售后政策 / 退款 / 质量问题", "售后政策 / 换货"]
    assert data[2]["content"].startswith("自签收之日起七天内")
    assert data[0]["embedded"] is True


def test_confirm_of_a_document_not_awaiting_confirmation_is_409(client, kb):
    document = _completed(kb)
    _error(client.post(f"{BASE}/documents/{document.pk}/confirm"), 409, "invalid_document_state")
    document.refresh_from_db()
    assert document.status == "completed"


def test_confirm_of_an_unknown_document_is_404(client):
    _error(client.post(f"{BASE}/documents/00000000-0000-0000-0000-000000000005/confirm"), 404, "document_not_found")


def test_confirm_moves_an_awaiting_document_on(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project, require_confirmation=True)
    document = _completed(kb)
    response = client.post(f"{BASE}/documents/{document.pk}/confirm")
    assert (response.status_code, response.json()["data"]["status"]) == (200, "embedding")


def test_retry_of_a_document_that_did_not_fail_is_409(client, kb):
    document = _completed(kb)
    _error(client.post(f"{BASE}/documents/{document.pk}/retry-index"), 409, "invalid_document_state")
    document.refresh_from_db()
    assert (document.status, document.attempts) == ("completed", 1)


def test_retry_of_a_failed_document_queues_it(client, kb):
    document = _completed(kb, "no-text.pdf")
    response = client.post(f"{BASE}/documents/{document.pk}/retry-index")
    assert response.json()["data"]["status"] == "queued"


def test_retry_of_an_unknown_document_is_404(client):
    _error(client.post(f"{BASE}/documents/00000000-0000-0000-0000-000000000008/retry-index"), 404,
           "document_not_found")


def test_delete_is_204_and_removes_the_vectors(client, kb):
    document = _completed(kb)
    response = client.delete(f"{BASE}/documents/{document.pk}")
    assert (response.status_code, response.content) == (204, b"")
    assert Chunk.objects.filter(document_id=document.pk).count() == 0


def test_delete_of_an_unknown_document_is_404(client, kb):
    _completed(kb)
    before = _counts()
    _error(client.delete(f"{BASE}/documents/00000000-0000-0000-0000-000000000006"), 404, "document_not_found")
    assert _counts() == before


def test_reports_count_statuses_and_give_failure_reasons(client, kb):
    _completed(kb)
    failed = _completed(kb, "no-text.pdf")
    report = client.get(f"{BASE}/knowledge-bases/{kb.pk}/documents/report").json()["data"]
    assert report["documents"]["total"] == 2
    assert (report["documents"]["by_status"]["completed"], report["documents"]["by_status"]["failed"]) == (1, 1)
    assert [(f["document_id"], f["error_code"]) for f in report["failures"]] == [
        (str(failed.pk), "document_conversion_failed")]
    assert report["chunks"] == {"children": 5, "parents": 5}
    document_report = client.get(f"{BASE}/documents/{failed.pk}/report").json()["data"]
    assert (document_report["status"], document_report["error_code"]) == ("failed", "document_conversion_failed")


def test_report_of_an_unknown_document_is_404(client):
    _error(client.get(f"{BASE}/documents/00000000-0000-0000-0000-000000000009/report"), 404, "document_not_found")


def test_report_of_an_unknown_knowledge_base_is_404(client):
    _error(client.get(f"{BASE}/knowledge-bases/00000000-0000-0000-0000-000000000007/documents/report"), 404,
           "knowledge_base_not_found")


# Rebuild


def test_rebuild_is_accepted_then_a_second_one_is_409(client, kb):
    first = client.post(f"{BASE}/knowledge-bases/{kb.pk}/rebuild")
    assert (first.status_code, first.json()["data"]["status"], first.json()["data"]["number"]) == (202, "building", 2)
    before = _counts()
    _error(client.post(f"{BASE}/knowledge-bases/{kb.pk}/rebuild"), 409, "rebuild_in_progress")
    assert _counts() == before
    assert client.get(f"{BASE}/knowledge-bases/{kb.pk}").json()["data"]["index"]["rebuild"]["status"] == "building"


def test_rebuild_of_an_unknown_knowledge_base_is_404(client):
    before = _counts()
    _error(client.post(f"{BASE}/knowledge-bases/00000000-0000-0000-0000-000000000008/rebuild"), 404,
           "knowledge_base_not_found")
    assert _counts() == before


# Tokens


def _token(owner, scopes, **kwargs):
    return operator_token_create(user=owner.user, name="ci", scopes=scopes, **kwargs)


def test_a_token_with_the_scope_may_create(api_client, owner):
    _, token = _token(owner, ["knowledge:create"])
    response = api_client.post(f"{BASE}/knowledge-bases", _create_body(owner, EmbeddingModelFactory()), format="json",
                               HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201


def test_a_token_without_the_scope_is_403(api_client, owner):
    _, token = _token(owner, ["knowledge:ingest"])
    before = _counts()
    response = api_client.post(f"{BASE}/knowledge-bases", _create_body(owner, EmbeddingModelFactory()), format="json",
                               HTTP_AUTHORIZATION=f"Bearer {token}")
    assert _error(response, 403, "insufficient_scope")["required_scope"] == "knowledge:create"
    assert _counts() == before


def test_a_token_needs_debug_for_the_chunk_preview(api_client, owner, kb):
    document = _completed(kb)
    _, token = _token(owner, ["knowledge:ingest"])
    _error(api_client.get(f"{BASE}/documents/{document.pk}/chunks", HTTP_AUTHORIZATION=f"Bearer {token}"), 403,
           "insufficient_scope")


def test_a_revoked_token_is_401(api_client, owner):
    row, token = _token(owner, ["knowledge:debug"])
    operator_token_revoke(token=row)
    _error(api_client.get(f"{BASE}/knowledge-bases", HTTP_AUTHORIZATION=f"Bearer {token}"), 401, "unauthorized")


def test_an_expired_token_is_401(api_client, owner):
    _, token = _token(owner, ["knowledge:debug"], expires_at=timezone.now() - timedelta(seconds=1))
    _error(api_client.get(f"{BASE}/knowledge-bases", HTTP_AUTHORIZATION=f"Bearer {token}"), 401, "unauthorized")


def test_only_the_hash_of_a_token_is_stored(owner):
    row, token = _token(owner, ["knowledge:debug"])
    row.refresh_from_db()
    assert token not in (row.token_hash, row.prefix, row.name)
    assert len(row.token_hash) == 64


def test_without_credentials_the_api_is_401(api_client):
    _error(api_client.get(f"{BASE}/knowledge-bases"), 401, "unauthorized")


def test_a_token_sees_only_its_users_projects(api_client, owner):
    KnowledgeBaseFactory()
    stranger = UserFactory()
    _, token = operator_token_create(user=stranger, name="x", scopes=["knowledge:debug"])
    response = api_client.get(f"{BASE}/knowledge-bases", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.json()["data"] == []
