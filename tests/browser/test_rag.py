"""RAG answers in Chromium, as the seeded operator: the question history with its feedback, an
answer's detail with its cited evidence, the route's report with its SVG charts, and the KB
playground's RAG mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.answers.services import rag_query_answer
from apps.knowledge.models import RouteKnowledgeBinding
from apps.ledger.models import RagQuery
from apps.ledger.rag import rag_query_feedback
from tests.answers.factories import RagQueryFactory
from tests.browser.contrast import contrast_ratio
from tests.browser.layout import assert_changelist_fits, changelist_at_1366
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import FIXTURES, ingest_texts
from tests.routes.factories import RouteFactory

SHOTS = Path("/tmp/shots")
POLICY = (FIXTURES / "policy.zh.md").read_text(encoding="utf-8")


def _seed(project):
    kb = KnowledgeBaseFactory(project=project, name="After-sales")
    ingest_texts(kb, {"policy.md": POLICY})
    route = RouteFactory(project=project, key="store-help", name="门店问答")
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=kb)
    answered = rag_query_answer(route=route, question="质量问题的商品可以在多少天内退款？")
    rag_query_feedback(query=RagQuery.objects.get(pk=answered.query_id), helpful=True, note="准确")
    missed = rag_query_answer(route=route, question="木星有几颗卫星？")
    rag_query_feedback(query=RagQuery.objects.get(pk=missed.query_id), helpful=False, note="知识库里没有")
    for days_ago, helpful in ((1, True), (1, False), (2, True), (3, True), (5, False), (6, True)):
        RagQueryFactory(route=route, days_ago=days_ago, helpful=helpful, latency_ms=80 + 20 * days_ago)
    return route


def test_operator_reads_history_detail_and_report(logged_in_page, project):
    page = logged_in_page
    route = _seed(project)
    SHOTS.mkdir(parents=True, exist_ok=True)

    page.goto(f"/admin/ledger/ragquery/?route__id__exact={route.pk}")
    assert page.locator("#result_list tbody tr").count() == 8
    assert page.locator("#result_list .rag-feedback-no").count() == 3
    page.screenshot(path=str(SHOTS / "rag_history.png"), full_page=True)

    page.locator("#result_list a", has_text="质量问题的商品可以在多少天内退款").click()
    page.wait_for_selector("#rag-answer")
    assert page.inner_text("#rag-answer") == "质量问题的商品可以在三十天内退款。[1]"
    assert page.inner_text("#rag-outcome") == "answered"
    assert "售后政策 / 退款 / 质量问题" in page.inner_text("#rag-evidence-1")
    assert "helpful — 准确" in page.inner_text("#rag-feedback")
    page.screenshot(path=str(SHOTS / "rag_detail.png"), full_page=True)

    page.click("text=Quality report")
    page.wait_for_selector("#rag-volume-chart")
    assert page.inner_text("#rag-volume") == "8"
    assert page.inner_text("#rag-helpful-rate") == "62 %"  # 5 of 8 with feedback
    assert page.locator("#rag-volume-chart rect.rag-bar").count() == 30
    assert page.locator("#rag-helpful-chart circle.rag-dot").count() == 6  # days with feedback
    assert "木星有几颗卫星？" in page.inner_text("#rag-unanswered")
    page.click("text=7 days")
    page.wait_for_selector("#rag-volume-chart")
    assert page.locator("#rag-volume-chart rect.rag-bar").count() == 7
    page.screenshot(path=str(SHOTS / "rag_report.png"), full_page=True)


def test_operator_asks_the_playground_in_rag_mode(logged_in_page, project):
    page = logged_in_page
    kb = KnowledgeBaseFactory(project=project, name="After-sales")
    ingest_texts(kb, {"policy.md": POLICY})

    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/search/?query=换货")
    page.click("#pg-rag-mode button")
    page.wait_for_selector("#rag-result")
    assert page.input_value("input[name=question]") == "换货"
    page.fill("input[name=question]", "换货收费吗？")
    page.click("#rag-ask-form input[type=submit]")
    page.wait_for_selector("#rag-result")
    assert page.inner_text("#rag-answer") == "换货不收取费用。[1]"
    assert page.locator("#rag-evidence-1.rag-cited").count() == 1
    page.screenshot(path=str(SHOTS / "rag_playground.png"), full_page=True)

    page.fill("input[name=question]", "问" * 2001)
    page.evaluate("document.querySelector('input[name=question]').removeAttribute('maxlength')")
    page.fill("input[name=question]", "问" * 2001)
    page.click("#rag-ask-form input[type=submit]")
    page.wait_for_selector("#rag-ask-form .errorlist")
    assert page.locator("#rag-result").count() == 0
    assert RagQuery.objects.count() == 0
    page.screenshot(path=str(SHOTS / "rag_playground_error.png"), full_page=True)


def test_the_rag_mode_question_fits_a_phone_width_window(logged_in_page, project):
    """At 390 px the question box (70 characters wide) ran the page 169 px past the window."""
    kb = KnowledgeBaseFactory(project=project, name="After-sales")
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/admin/ledger/ragquery/ask/{kb.pk}/")
    page.screenshot(path=str(SHOTS / "rag_ask_390.png"), full_page=True)
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    assert page.locator("input[name=question]").evaluate("e => e.getBoundingClientRect().right") <= 390
    assert page.locator("#rag-ask-form input[type=submit]").evaluate("e => e.getBoundingClientRect().right") <= 390


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_cited_passage_and_the_feedback_read_in_both_themes(logged_in_page, project, scheme):
    """In the dark theme a cited passage kept its pale blue box under the theme's light text (1.1:1),
    and "not helpful" stayed dark red on near-black."""
    route = _seed(project)
    page = logged_in_page
    page.emulate_media(color_scheme=scheme)
    page.goto(f"/admin/ledger/ragquery/?route__id__exact={route.pk}")
    page.screenshot(path=str(SHOTS / f"rag_history_{scheme}.png"), full_page=True)
    assert contrast_ratio(page.locator("#result_list .rag-feedback-no").first) >= 4.5
    assert contrast_ratio(page.locator("#result_list .rag-feedback-yes").first) >= 4.5
    page.locator("#result_list a", has_text="质量问题的商品可以在多少天内退款").click()
    page.wait_for_selector("#rag-answer")
    page.screenshot(path=str(SHOTS / f"rag_detail_{scheme}.png"), full_page=True)
    assert contrast_ratio(page.locator("#rag-evidence-1.rag-cited .rag-quote")) >= 4.5


def test_the_reports_charts_read_in_the_dark_theme(logged_in_page, project):
    """The charts kept the light theme's grey labels (3.3:1 on near-black, at 11 px) and dark green line
    (2.9:1)."""
    route = _seed(project)
    page = logged_in_page
    page.emulate_media(color_scheme="dark")
    page.goto(f"/admin/ledger/ragquery/report/{route.pk}/")
    page.screenshot(path=str(SHOTS / "rag_report_dark.png"), full_page=True)
    assert contrast_ratio(page.locator("#rag-helpful-chart .rag-tick").first, colour="fill") >= 4.5
    assert contrast_ratio(page.locator("#rag-helpful-chart .rag-line").first, colour="stroke") >= 3
    assert contrast_ratio(page.locator("#rag-helpful-chart .rag-dot").first, colour="fill") >= 3


def test_every_column_of_the_question_history_fits_at_1366(logged_in_page, project):
    """With the sidebar and the filters open, "Created at" was behind a scrollbar (only "C" showed)."""
    route = _seed(project)
    changelist_at_1366(logged_in_page, f"/admin/ledger/ragquery/?route__id__exact={route.pk}", rows=8,
                       shot="list-widths-rag-queries.png")
    assert_changelist_fits(logged_in_page, last_header="created at")


def test_the_reports_periods_are_evenly_spaced(logged_in_page, project):
    """The links' margin (meant for the answer page's links) made "Last 7 days   · 30 days · 90 days"."""
    route = _seed(project)
    page = logged_in_page
    page.goto(f"/admin/ledger/ragquery/report/{route.pk}/")
    periods = page.locator(".rag-links").first
    week, month, quarter = (periods.locator(selector).evaluate("e => e.getBoundingClientRect()")
                            for selector in ("a[href='?days=7']", "strong", "a[href='?days=90']"))
    assert abs((month["left"] - week["right"]) - (quarter["left"] - month["right"])) < 1
