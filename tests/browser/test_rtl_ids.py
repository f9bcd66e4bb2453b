"""Right-to-left ids in a real browser: an agent acting for مستخدم@example.com (principal مستخدم) in
conversation conv-مستخدم-935e06 asks for a call needing approval. On the approval queue, the
approval's page and the ledger's conversations, an id that mixes scripts is laid out in its stored
order, left to right, character by character (the bidi algorithm showed conv-935-مستخدمe06); one in
Arabic letters only reads right to left, as Arabic does; and the words before an id stay before it.
Screenshots land in /tmp/shots/."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.browser.layout import SHOTS
from tests.routes.factories import RouteFactory
from tests.tools.approval_helpers import pending_approval
from tests.tools.factories import STORE_SPEC, ToolProviderFactory

CONVERSATION = "conv-مستخدم-935e06"
PRINCIPAL_ID = "مستخدم"
ON_BEHALF_OF = "مستخدم@example.com"

# The left edge of each character of `text`, found in the text nodes under `el`, in stored order.
_CHAR_LEFTS = """(el, text) => {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(text);
    if (at < 0) continue;
    return [...text].map((_, i) => {
      const range = document.createRange();
      range.setStart(node, at + i);
      range.setEnd(node, at + i + 1);
      const box = range.getBoundingClientRect();
      return [Math.round(box.left * 10) / 10, Math.round(box.top)];
    });
  }
  return null;
}"""

# The top and left edges of the first character of `text` under `el`.
_TEXT_LEFT = """(el, text) => {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(text);
    if (at < 0) continue;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + 1);
    const box = range.getBoundingClientRect();
    return [Math.round(box.top), box.left];
  }
  return null;
}"""


@pytest.fixture
def approval(project):
    route = RouteFactory(project=project, key="store-assistant", name="门店助手", tools_direct_enabled=True)
    provider = ToolProviderFactory(project=project, name="store", spec=STORE_SPEC)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["stock_adjust"])],
                    write_tools=["stock_adjust"], tools_direct_enabled=True)
    agent = session_for(AgentClientFactory(project=project, name="Counter assistant", app_id="counter-app",
                                           allowed_routes=[route.key]),
                        principal={**PRINCIPAL, "id": PRINCIPAL_ID}, on_behalf_of=ON_BEHALF_OF)
    return pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                            arguments={"sku": "SKU-1", "quantity": 500}, conversation=CONVERSATION)


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def assert_left_to_right(element, text: str) -> None:
    """Each character of `text` comes after the one stored before it as a left-to-right text reads:
    right of it on the same line, or on a later line (a long id may wrap in a narrow column)."""
    lefts = element.evaluate(_CHAR_LEFTS, text)
    assert lefts is not None, f"{text} is not shown"
    reading = [(top, left) for left, top in lefts]
    assert reading == sorted(set(reading)), lefts


def assert_right_to_left(element, text: str) -> None:
    """Each character of `text` lies left of the one stored before it, on one line: as its script reads."""
    lefts = element.evaluate(_CHAR_LEFTS, text)
    assert lefts is not None, f"{text} is not shown"
    assert len({top for _, top in lefts}) == 1, lefts
    assert [left for left, _ in lefts] == sorted({left for left, _ in lefts}, reverse=True), lefts


def assert_reads_before(element, first: str, then: str) -> None:
    """`first` starts before `then`: on a line above, or left of it on the same line."""
    assert element.evaluate(_TEXT_LEFT, first) < element.evaluate(_TEXT_LEFT, then)


def test_the_approval_queue_shows_the_agents_ids_in_stored_order(logged_in_page, approval):
    page = logged_in_page
    page.goto("/admin/tools/approval/")
    row = page.locator("#result_list tbody tr")
    _shot(page, "rtl-approvals")
    run = row.locator(".bh-run")
    assert_left_to_right(run, CONVERSATION)
    assert_reads_before(run, "in conversation", CONVERSATION)
    asker = row.locator(".bh-asker")
    assert_left_to_right(asker, ON_BEHALF_OF)
    assert_right_to_left(asker.locator(".bh-muted"), PRINCIPAL_ID)


def test_an_approvals_page_shows_the_agents_ids_in_stored_order(logged_in_page, approval):
    page = logged_in_page
    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    _shot(page, "rtl-approval-detail")
    run = page.locator("#approval-run")
    assert_left_to_right(run, CONVERSATION)
    assert_reads_before(run, "· conversation", CONVERSATION)
    assert_left_to_right(page.locator("#approval-asker"), ON_BEHALF_OF)
    assert_right_to_left(page.locator("#approval-asker .bh-muted"), PRINCIPAL_ID)


def test_the_conversations_list_shows_the_agents_ids_in_stored_order(logged_in_page, approval):
    page = logged_in_page
    page.goto("/admin/ledger/conversation/")
    _shot(page, "rtl-conversations")
    row = page.locator("#result_list tbody tr")
    assert_left_to_right(row.locator(".field-client_conversation_id"), CONVERSATION)
    asker = row.locator(".field-asker")
    assert_left_to_right(asker, ON_BEHALF_OF)
    assert_right_to_left(asker.locator(".bh-muted"), PRINCIPAL_ID)


def test_an_id_overrides_the_bidi_algorithm_inside_an_isolate(logged_in_page, approval):
    page = logged_in_page
    page.goto("/admin/tools/approval/")
    ident = page.locator("#result_list .bh-run .bh-ident")
    assert ident.evaluate("e => [getComputedStyle(e).unicodeBidi, getComputedStyle(e).direction]") == [
        "isolate-override", "ltr"]
