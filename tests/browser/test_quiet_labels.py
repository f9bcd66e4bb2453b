"""Two labels that read like errors (h4): "0 active agent sessions of 0" on a new project's
dashboard tile, and "no chapter" in italics on every playground hit of a flat file.
Screenshots land in /tmp/shots/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

SHOTS = Path("/tmp/shots")


@pytest.mark.parametrize("width", [1366, 390])
def test_a_new_projects_sessions_tile_and_a_flat_files_hit_read_plainly(logged_in_page, project, width):
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"dashboard-no-sessions-{width}.png"), full_page=True)
    assert page.locator("[data-stat=sessions_none]").inner_text() == "· no agent has signed in yet"
    kb = KnowledgeBaseFactory(project=project, name="Store policies")
    ingest_texts(kb, {"store-policies.txt": "Rain jackets can be returned within 30 days with the receipt."})
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/search/?query=rain+jacket&top_k=1")
    page.screenshot(path=str(SHOTS / f"playground-flat-file-{width}.png"), full_page=True)
    assert page.locator("#hit-1 .pg-no-chapter").inner_text() == "top of the document, under no heading"
