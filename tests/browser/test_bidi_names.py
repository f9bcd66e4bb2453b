"""A name an operator typed with an invisible direction control (U+202E, right-to-left override)
in a real browser. Django's "was added successfully" message and the breadcrumbs put the name in a
link, and the override ran on past the link, laying the words after it out backwards
(“Handbook .woleb niaga ti tide yam uoY .yllufsseccus dedda saw ”2v): such a name is now refused,
and one stored before is isolated where it is shown (messages that name objects: tests/core/test_bidi.py).
Screenshots in /tmp/shots/."""

from __future__ import annotations

from apps.knowledge.models import KnowledgeBase
from tests.browser.layout import SHOTS
from tests.browser.test_rtl_ids import _CHAR_LEFTS
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory

NAME = "Handbook \u202e v2"


def _left_to_right(page, selector: str, text: str) -> bool:
    lefts = page.locator(selector).first.evaluate(_CHAR_LEFTS, text)
    assert lefts is not None, f"{text!r} not under {selector}"
    return [left for left, _ in lefts] == sorted(left for left, _ in lefts)


def test_a_name_with_an_override_is_refused_and_one_stored_earlier_reads_safely(logged_in_page, project):
    """The add form refuses the name beside its field (apps.core.validators.validate_shown_name); a
    knowledge base that has such a name from before (stored by code, or before names were checked)
    still cannot lay its page's trail out backwards."""
    model = EmbeddingModelFactory()
    page = logged_in_page
    page.goto("/admin/knowledge/knowledgebase/add/")
    page.select_option("#id_project", label=project.name)
    page.fill("#id_name", NAME)
    page.select_option("#id_embedding_model", index=1)
    page.click("input[name=_continue]")
    page.wait_for_selector(".errorlist")
    assert "Invisible direction controls (such as U+202E) are not allowed" in page.locator(
        ".field-name .errorlist").inner_text()
    assert not KnowledgeBase.objects.exists()

    kb = KnowledgeBaseFactory(project=project, embedding_model=model, name=NAME)
    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/search/")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "bidi-name-playground.png"))
    assert _left_to_right(page, "div.breadcrumbs", "Search playground")
