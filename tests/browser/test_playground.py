"""The search playground in Chromium: a search shows hits with their chapter path, scores and a
readable explanation; the search lands in the operator's recent list and runs again in one click."""

from __future__ import annotations

import re
from pathlib import Path

from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.knowledge.test_admin_search import POLICY

SHOTS = Path("/tmp/shots")


def test_an_operator_searches_and_runs_a_recent_search_again(logged_in_page, project):
    page = logged_in_page
    kb = KnowledgeBaseFactory(project=project, name="After-sales")
    ingest_texts(kb, {"policy.md": POLICY})

    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    page.click("#kb-search-link")
    assert page.locator("#pg-no-index").count() == 0
    page.fill("input[name=query]", "无理由退款")
    page.fill("input[name=top_k]", "2")
    page.click("#pg-form input[type=submit]")
    page.wait_for_selector("#pg-results")
    first = page.locator("#hit-1")
    assert first.locator(".pg-path").get_attribute("data-chapter-path") == "售后政策 / 退款 / 七天无理由"
    assert re.match(r"Ranked 1st by meaning \(cosine 0\.\d{3}\) and 1st by keywords", first.locator(".pg-why")
                    .inner_text())
    assert page.locator("#hit-2 .pg-explain td.pg-num").nth(2).inner_text() == "2"  # keyword rank, not "—"

    page.fill("input[name=query]", "换货")
    page.select_option("select[name=mode]", "keyword")
    page.click("#pg-form input[type=submit]")
    page.wait_for_selector("#pg-results")
    assert page.locator("#pg-recent .pg-recent-query").all_inner_texts() == ["换货", "无理由退款"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "playground.png"), full_page=True)

    page.locator("#pg-recent tr.pg-recent-row", has_text="无理由退款").locator(".pg-rerun").click()
    page.wait_for_selector("#pg-results")
    assert page.input_value("input[name=query]") == "无理由退款"
    assert page.input_value("input[name=top_k]") == "2"
    assert page.input_value("select[name=mode]") == "hybrid"
    assert page.locator(".pg-hit").count() == 2
    assert page.locator("#pg-recent .pg-recent-query").all_inner_texts() == ["无理由退款", "换货"]
