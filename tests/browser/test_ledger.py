"""Journey 10 in Chromium: the operator reads the ledger — runs, conversations and messages —
filtered by route and by date, and a run's frozen context as readable text."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.ledger.models import Conversation, Message, Run
from apps.routes.services import route_update
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import session_for
from tests.ledger.helpers import complete_run, open_turn
from tests.routes.factories import RouteFactory

SHOTS = Path("/tmp/shots")


def _follow(page, target) -> None:
    """Click a link or submit button and wait until the next page has loaded."""
    with page.expect_navigation():
        target.click()


@pytest.fixture
def clear_of_midnight():
    """Waits out the last two minutes of the local day. The admin's "Today" link is worked out when
    the page is drawn: rows written at 23:59:59 are yesterday's to a page drawn at 00:00:01, and the
    test's filtered list came back empty."""
    now = timezone.localtime()
    midnight = timezone.localtime(now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    left = (midnight - now).total_seconds()
    if left < 120:
        time.sleep(left + 1)


@pytest.fixture
def runs(project):
    """A turn on each of two routes; the HR one is ten days old."""
    store = RouteFactory(project=project, key="store-assistant", name="Store assistant")
    route_update(route=store, system_prompt="You are the store assistant.\nAnswer briefly.\nCite the policy.")
    hr = RouteFactory(project=project, key="hr-helpdesk", name="HR Helpdesk")
    opened = {}
    for route, question in ((store, "How many days for a refund?"), (hr, "How do I book leave?")):
        issued = session_for(AgentClientFactory(project=project, allowed_routes=[route.key]))
        run_id = open_turn(APIClient(), issued.access_token, route.key, user_input=question).json()["run_id"]
        complete_run(APIClient(), issued.access_token, run_id, content=f"Answer to: {question}")
        opened[route.key] = Run.objects.get(pk=run_id)
    old = timezone.now() - timedelta(days=10)
    Run.objects.filter(route=hr).update(created_at=old)
    Conversation.objects.filter(route=hr).update(created_at=old)
    Message.objects.filter(conversation__route=hr).update(created_at=old)
    return opened


def _result_rows(page) -> list[str]:
    return page.locator("#result_list tbody tr").all_inner_texts()


def test_the_run_list_filters_by_route(logged_in_page, runs):
    page = logged_in_page
    page.goto("/admin/ledger/run/")
    assert len(_result_rows(page)) == 2
    _follow(page, page.locator("#changelist-filter a", has_text="HR Helpdesk"))
    rows = _result_rows(page)
    assert len(rows) == 1
    assert "HR Helpdesk" in rows[0]


def test_the_run_list_filters_by_date(logged_in_page, runs):
    page = logged_in_page
    page.goto("/admin/ledger/run/")
    _follow(page, page.locator("#changelist-filter a", has_text="Past 7 days"))
    rows = _result_rows(page)
    assert len(rows) == 1
    assert "Store assistant" in rows[0]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "ledger_runs.png"), full_page=True)


def test_the_message_list_filters_by_route_and_date(clear_of_midnight, logged_in_page, runs):
    page = logged_in_page
    page.goto("/admin/ledger/message/")
    assert len(_result_rows(page)) == 4
    _follow(page, page.locator("#changelist-filter a", has_text="Store assistant"))
    _follow(page, page.locator("#changelist-filter a", has_text="Today"))
    rows = _result_rows(page)
    assert len(rows) == 2
    assert any("How many days for a refund?" in row for row in rows)
    assert not any("leave" in row for row in rows)


def test_a_conversation_shows_its_messages_and_runs(logged_in_page, runs):
    page = logged_in_page
    run = runs["store-assistant"]
    page.goto("/admin/ledger/conversation/")
    _follow(page, page.locator("#changelist-filter a", has_text="Store assistant"))
    _follow(page, page.locator("#result_list tbody tr th a").first)
    text = page.locator("#content-main").inner_text()
    assert "How many days for a refund?" in text
    assert "Answer to: How many days for a refund?" in text
    assert str(run.pk) in text


def test_a_run_shows_its_frozen_context_with_real_line_breaks(logged_in_page, runs):
    page = logged_in_page
    run = runs["store-assistant"]
    page.goto(f"/admin/ledger/run/{run.pk}/change/")
    context = page.locator(".bh-context")
    instructions = context.locator("dt:text-is('instructions') + dd pre")
    assert "You are the store assistant.\nAnswer briefly.\nCite the policy." in instructions.inner_text()
    assert "\\n" not in context.inner_text()
    assert page.locator(".bh-raw pre").is_hidden()  # the raw JSON waits behind its summary
    page.locator(".bh-raw summary").click()
    assert '"instructions":' in page.locator(".bh-raw pre").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "ledger_run.png"), full_page=True)
