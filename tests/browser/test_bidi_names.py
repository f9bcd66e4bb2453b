"""A name an operator typed with an invisible direction control (U+202E, right-to-left override)
in a real browser: Django's "was added successfully" message and the breadcrumbs put the name in a
link, and the override ran on past the link, laying the words after it out backwards
(“Handbook .woleb niaga ti tide yam uoY .yllufsseccus dedda saw ”2v). Screenshots in /tmp/shots/."""

from __future__ import annotations

from apps.knowledge.models import KnowledgeBase
from tests.browser.layout import SHOTS
from tests.browser.test_rtl_ids import _CHAR_LEFTS
from tests.knowledge.factories import EmbeddingModelFactory

NAME = "Handbook \u202e v2"


def _left_to_right(page, selector: str, text: str) -> bool:
    lefts = page.locator(selector).first.evaluate(_CHAR_LEFTS, text)
    assert lefts is not None, f"{text!r} not under {selector}"
    return [left for left, _ in lefts] == sorted(left for left, _ in lefts)


def test_words_after_a_name_with_an_override_read_left_to_right(logged_in_page, project):
    EmbeddingModelFactory()
    page = logged_in_page
    page.goto("/admin/knowledge/knowledgebase/add/")
    page.select_option("#id_project", label=project.name)
    page.fill("#id_name", NAME)
    page.select_option("#id_embedding_model", index=1)
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "bidi-name-added.png"))
    kb = KnowledgeBase.objects.get(name=NAME)
    assert _left_to_right(page, ".messagelist .success", "was added successfully")

    page.goto(f"/admin/knowledge/knowledgebase/{kb.pk}/search/")
    page.screenshot(path=str(SHOTS / "bidi-name-playground.png"))
    assert _left_to_right(page, "div.breadcrumbs", "Search playground")


def test_a_message_naming_an_object_names_its_direction_controls(logged_in_page, project):
    """Messages the console writes itself name an object without a link ("Task … created with 1
    member(s)", "… allows no routes: …"): the override ran to the end of the message. The control
    is shown by name, as the console shows it in an id."""
    page = logged_in_page
    page.goto("/admin/agent_auth/agentclient/add/")
    page.select_option("#id_project", label=project.name)
    page.fill("#id_app_id", "counter-app")
    page.fill("#id_name", "Counter \u202e assistant")
    page.fill("#id_agent_authorize_url", "https://shop.example.com/authorize")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .warning")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "bidi-name-message.png"))
    warning = page.locator(".messagelist li", has_text="allows no routes")
    assert warning.inner_text().startswith("Counter <U+202E> assistant allows no routes")
    assert _left_to_right(page, ".messagelist li:has-text('allows no routes')", "allows no routes")
