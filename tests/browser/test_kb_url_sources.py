"""External sources in Chromium: a refused URL is shown beside the field on the KB page, in the
console's look; a registered one is listed with its URL; the KB form's reranker errors sit beside
their fields."""

from __future__ import annotations

from pathlib import Path

from apps.knowledge import services
from apps.knowledge.models import Document, KnowledgeBase
from tests.knowledge.factories import KnowledgeBaseFactory

SHOTS = Path("/tmp/shots")


def test_a_refused_url_shows_beside_the_field(logged_in_page, project):
    kb = KnowledgeBaseFactory(project=project)
    page = logged_in_page
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    page.fill("#kb-url-form input[name=url]", "http://169.254.169.254/latest/meta-data")
    page.click("#kb-url-submit")
    error = page.locator("#kb-url-errors .errorlist")
    assert "private, loopback" in error.inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#kb-upload").screenshot(path=str(SHOTS / "kbx-url-refused.png"))
    assert not Document.objects.filter(knowledge_base=kb).exists()


def test_a_url_document_is_listed_with_its_url(logged_in_page, project, settings):
    settings.KNOWLEDGE_URL_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    kb = KnowledgeBaseFactory(project=project)
    services.document_register_url(kb=kb, url="http://127.0.0.1:9/handbook/refunds.md")
    page = logged_in_page
    page.goto("/admin/knowledge/document/")
    link = page.locator("a[href='http://127.0.0.1:9/handbook/refunds.md']")
    assert link.inner_text() == "http://127.0.0.1:9/handbook/refunds.md"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "kbx-document-list.png"), full_page=True)


def test_a_bad_reranker_key_variable_shows_beside_its_field(logged_in_page, project):
    kb = KnowledgeBaseFactory(project=project)
    page = logged_in_page
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    page.fill("input[name=rerank_base_url]", "https://rerank.example.com/v1")
    page.fill("input[name=rerank_model]", "bge-reranker-v2-m3")
    page.fill("input[name=rerank_api_key_env]", "sk-live-123")
    page.click("input[name=_continue]")
    row = page.locator(".field-rerank_api_key_env")
    assert "environment variable" in row.locator(".errorlist").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    row.locator("xpath=ancestor::fieldset").screenshot(path=str(SHOTS / "kbx-reranker-error.png"))
    assert KnowledgeBase.objects.get(pk=kb.pk).rerank_base_url == ""
