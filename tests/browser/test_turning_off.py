"""Turning knowledge off and on in Chromium: an operator turns a document off on its page and sees
the playground stop finding it, turns it on again, then unticks a knowledge base's Enabled box and
sees the list and the playground say it is off. Screenshots land in /tmp/shots/."""

from __future__ import annotations

from pathlib import Path

from apps.knowledge.models import Document, KnowledgeBase
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.knowledge.test_admin_search import POLICY

SHOTS = Path("/tmp/shots")


def _search(page, kb, query: str) -> list[str]:
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/search/")
    page.fill("input[name=query]", query)
    page.click("#pg-form input[type=submit]")
    page.wait_for_selector("#pg-results")
    return page.locator(".pg-hit h2").all_inner_texts()


def test_an_operator_turns_a_document_and_a_knowledge_base_off_and_on(logged_in_page, project):
    page = logged_in_page
    SHOTS.mkdir(parents=True, exist_ok=True)
    kb = KnowledgeBaseFactory(project=project, name="After-sales")
    documents = ingest_texts(kb, {"policy.md": POLICY, "delivery.md": "# 配送\n\n同城订单当天送达，外地三到五天。"})
    policy = documents["policy.md"]
    assert any("policy.md" in title for title in _search(page, kb, "无理由退款"))

    page.goto(f"/admin/knowledge/document/{policy.pk}/change/")
    page.click("#document-turn-off input[type=submit]")
    page.wait_for_selector("#document-turn-on")
    assert "Turned off: searches and agents no longer read this document." in page.locator(".messagelist").inner_text()
    assert "Searches and agents do not read it" in page.locator(".field-in_search").inner_text()
    page.screenshot(path=str(SHOTS / "document-off.png"), full_page=True)
    assert Document.objects.get(pk=policy.pk).enabled is False
    assert not any("policy.md" in title for title in _search(page, kb, "无理由退款"))

    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    row = page.locator("#kb-documents-table tr", has_text="policy.md")
    assert row.locator(".bh-badge.bh-off").inner_text() == "off"
    page.goto(f"/admin/knowledge/document/{policy.pk}/change/")
    page.click("#document-turn-on input[type=submit]")
    page.wait_for_selector("#document-turn-off")
    assert any("policy.md" in title for title in _search(page, kb, "无理由退款"))

    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    assert page.is_checked("input[name=enabled]")
    page.uncheck("input[name=enabled]")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/knowledge/knowledgebase/")
    assert KnowledgeBase.objects.get(pk=kb.pk).enabled is False
    row = page.locator("#result_list tbody tr", has_text="After-sales")
    assert row.locator(".field-on img").get_attribute("alt") == "False"
    page.screenshot(path=str(SHOTS / "kb-list-off.png"), full_page=True)
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/search/")
    assert "do not read this knowledge base" in page.locator("#pg-kb-off").inner_text()
    # The operator's own test still searches it.
    assert any("policy.md" in title for title in _search(page, kb, "无理由退款"))
    page.screenshot(path=str(SHOTS / "playground-kb-off.png"), full_page=True)


def test_the_knowledge_base_list_fits_at_1366_with_its_on_column(logged_in_page, project):
    """Six columns beside the sidebar and three filters (project, on, model): the model and the
    strategy share one, as a long name and two models' KBs need."""
    from tests.browser.layout import assert_changelist_fits, changelist_at_1366
    from tests.knowledge.factories import EmbeddingModelFactory
    from tests.projects.factories import MembershipFactory, ProjectFactory

    second = ProjectFactory(name="Bailing Wholesale " * 4, slug="bailing-wholesale")
    MembershipFactory(project=second, user=project.memberships.get().user)
    KnowledgeBaseFactory(project=project, name="售后政策与退换货规则" * 6, require_confirmation=True)
    KnowledgeBaseFactory(project=second, name="wholesale-price-lists-and-contracts" * 3, enabled=False,
                         embedding_model=EmbeddingModelFactory(name="multilingual-e5-small-long-name"))
    page = logged_in_page
    changelist_at_1366(page, "/admin/knowledge/knowledgebase/", rows=2, shot="kb-list-1366.png")
    assert_changelist_fits(page, last_header="confirm first")
    off = page.locator("#result_list tbody tr", has_text="wholesale-price-lists")
    assert off.locator(".field-on img").get_attribute("alt") == "False"
    assert "auto" in off.locator(".field-model_and_strategy").inner_text()


def test_the_kb_page_draws_the_off_badge_while_it_watches_ingestion(logged_in_page, project):
    """The KB page polls while a document is on its way; a document turned off (or on) meanwhile
    gains (or loses) its "off" badge without a reload."""
    kb = KnowledgeBaseFactory(project=project, name="Live")
    queued = Document.objects.create(knowledge_base=kb, filename="queued.md", file_type="markdown", size=10,
                                     content_hash="0" * 64, status=Document.Status.QUEUED)
    page = logged_in_page
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    row = page.locator(f'tr[data-document-id="{queued.pk}"]')
    assert row.locator("[data-field=off]").count() == 0
    Document.objects.filter(pk=queued.pk).update(enabled=False)
    row.locator("[data-field=off]").wait_for(timeout=15_000)
    assert row.locator("[data-field=off]").inner_text() == "off"
    Document.objects.filter(pk=queued.pk).update(enabled=True)
    row.locator("[data-field=off]").wait_for(state="detached", timeout=15_000)
    assert row.locator("[data-field=status]").inner_text() == "Queued"
