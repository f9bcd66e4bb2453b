"""Each section of the console (the second breadcrumb on every page, Django's app index) lists its
models; it once showed the dashboard's "not a member of any project" to a project's owner."""

from __future__ import annotations

from pathlib import Path

import pytest

SHOTS = Path("/tmp/shots")

SECTIONS = [
    ("agent_auth", "agentsession", "Agent sessions"),
    ("knowledge", "knowledgebase", "Knowledge bases"),
    ("ledger", "run", "Runs"),
    ("projects", "project", "Projects"),
    ("routes", "route", "Routes"),
    ("tasks", "task", "Tasks"),
    ("tools", "toolprovider", "Tool providers"),
]


@pytest.mark.parametrize(("app_label", "model", "model_name"), SECTIONS)
def test_a_section_page_lists_its_models(logged_in_page, app_label, model, model_name):
    page = logged_in_page
    page.goto(f"/admin/{app_label}/")
    link = page.locator(f"#content-main .app-{app_label} tr.model-{model} th a")
    assert link.inner_text() == model_name
    assert link.get_attribute("href") == f"/admin/{app_label}/{model}/"
    assert "not a member" not in page.locator("#content").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"section-{app_label}.png"), full_page=True)
