"""A tool call no worker dispatches, in Chromium at a desktop's and a phone's width: an agent's call
sits queued on a dispatch queue no worker consumes; the dashboard names it in the project's header,
its link lists the queued calls, and the call's page says what to check. Screenshots in /tmp/shots/."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.tools.models import Invocation
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.routes.factories import RouteFactory
from tests.tools.approval_helpers import call, turn
from tests.tools.conftest import TEST_SECRET_KEY
from tests.tools.factories import STORE_SPEC, ToolProviderFactory
from tests.tools.surface_helpers import STORE_TOOLS

SHOTS = Path("/tmp/shots")
QUEUE = "test-browser-undelivered"


@pytest.fixture
def queued(project, settings):
    """A read an agent made, queued five minutes ago on a queue no worker consumes."""
    settings.TOOL_SECRET_KEYS = [TEST_SECRET_KEY]
    settings.TOOL_DISPATCH_QUEUE = QUEUE
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    route = RouteFactory(project=project, key="store-assistant", name="Store", tools_direct_enabled=True)
    provider = ToolProviderFactory(project=project, name="store", spec=STORE_SPEC)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=STORE_TOOLS)],
                    tools_direct_enabled=True)
    agent = session_for(AgentClientFactory(project=project, allowed_routes=[route.key]), principal=PRINCIPAL)
    api = APIClient()
    run = turn(api, agent.access_token, route_key=route.key, n=1)
    answer = call(api, agent.access_token, run, route_key=route.key, n=1, tool="product_lookup",
                  arguments={"sku": "TEA-1"}).json()
    assert answer["state"] == "in_progress", answer
    inv = Invocation.objects.get(invocation_id=answer["invocation_id"])
    Invocation.objects.filter(pk=inv.pk).update(queued_at=timezone.now() - timedelta(minutes=5))
    yield inv
    from bailinghub.celery import app

    with app.connection_for_write() as connection:
        connection.default_channel.client.delete(QUEUE)


@pytest.mark.parametrize("width", [1366, 390])
def test_a_call_no_worker_dispatches_is_named_and_its_page_says_what_to_check(logged_in_page, queued, width):
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/")
    sign = page.locator("#project-bailing-retail [data-stat=calls_waiting_for_a_worker]")
    assert sign.is_visible()
    assert sign.inner_text().startswith("1 tool call queued for 5\xa0minutes with no worker dispatching")
    box = sign.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"dashboard-calls-waiting-{width}.png"))

    sign.get_by_role("link", name="See the queued calls").click()
    page.wait_for_url(f"**/admin/tools/invocation/?project__id__exact={queued.project_id}"
                      "&state__exact=in_progress&journal_state__exact=absent")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    rows.first.locator("a").first.click()
    page.wait_for_url(f"**/admin/tools/invocation/{queued.pk}/change/**")
    note = page.locator("#dispatch-stall")
    assert note.is_visible()
    assert note.inner_text().startswith(
        "Waiting for a worker: no worker has taken it from the dispatch queue in 5 min. Check that a Celery worker "
        f"consumes the dispatch queue \u201c{QUEUE}\u201d")
    box = note.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    page.screenshot(path=str(SHOTS / f"invocation-waiting-{width}.png"))
