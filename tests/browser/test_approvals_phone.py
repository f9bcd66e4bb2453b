"""The approval queue on a phone, and an approval asked by an agent that acts for the operator who
opens it. Screenshots land in /tmp/shots/."""

from __future__ import annotations

from pathlib import Path

import pytest
from rest_framework.test import APIClient

from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.browser.layout import assert_changelist_fits
from tests.routes.factories import RouteFactory
from tests.tools.approval_helpers import pending_approval, session_signed_in_on_page
from tests.tools.factories import STORE_SPEC, ToolProviderFactory

SHOTS = Path("/tmp/shots")
PROMPT = "Approve this stock adjustment of more than 100 units for the outlet's back room"


@pytest.fixture
def route(project):
    route = RouteFactory(project=project, key="store-assistant", name="Store assistant", tools_direct_enabled=True)
    provider = ToolProviderFactory(project=project, name="outlet-shop", spec=STORE_SPEC)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["stock_adjust",
                                                                                       "order_refund"])],
                    write_tools=["stock_adjust", "order_refund"], tools_direct_enabled=True)
    return route


@pytest.fixture
def agent_client(route):
    return AgentClientFactory(project=route.project, name="Counter assistant", app_id="counter-app",
                              allowed_routes=[route.key])


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _approvals(agent_client, count: int) -> None:
    token = session_for(agent_client, principal=PRINCIPAL).access_token
    for n in range(1, count + 1):
        approval = pending_approval(APIClient(), token, n=n, tool="stock_adjust",
                                    arguments={"sku": f"SKU-{n}", "quantity": 500})
        approval.prompt = PROMPT
        approval.save(update_fields=["prompt"])  # a test's fixture: the ACC prompt as h4's shop had it


def _queue_of_three(page, agent_client, *, width: int, height: int):
    """The approvals queue holding three pending approvals, at `width` px (a screenshot of it)."""
    _approvals(agent_client, 3)
    page.set_viewport_size({"width": width, "height": height})
    page.goto("/admin/tools/approval/")
    _shot(page, f"approvals-queue-{width}")
    return page


def test_the_approval_queue_is_readable_on_a_phone(logged_in_page, agent_client):
    """At 390 px the six columns squeezed the prompt to 3–4 characters a line and the table
    scrolled sideways (h4's 80-mobile-approvals.png): each approval is a card there."""
    page = _queue_of_three(logged_in_page, agent_client, width=390, height=844)
    assert page.locator("#result_list tbody tr").count() == 3
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    box = page.locator("#changelist .results")
    assert box.evaluate("e => e.scrollWidth <= e.clientWidth")
    prompt = page.locator("#result_list .field-prompt_text").first
    assert prompt.evaluate("e => e.getBoundingClientRect().width") > 300
    assert PROMPT in prompt.inner_text()


def test_the_approval_queue_keeps_its_columns_on_a_desktop(logged_in_page, agent_client):
    page = _queue_of_three(logged_in_page, agent_client, width=1366, height=768)
    assert page.locator("#result_list thead th").count() == 5
    _shot(page, "approval-queue-1366")
    assert_changelist_fits(page, last_header="asked · expires")


@pytest.mark.parametrize("width", [1366, 390])
def test_approving_ones_own_agents_call_asks_to_say_so(logged_in_page, agent_client, operator, width):
    """h4's B8: the operator approved the refund their own agent asked for, in one click, unwarned."""
    approval = pending_approval(APIClient(), session_signed_in_on_page(agent_client, operator).access_token)
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/admin/tools/approval/{approval.pk}/change/")
    assert "You are the person this agent acts for." in page.locator("#approval-self").inner_text()
    page.click("#approve-button")
    page.wait_for_load_state()
    _shot(page, f"approval-self-refused-{width}")
    assert "approving it yourself needs the box" in page.locator(".errornote").inner_text()
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    page.check("#id_own_call")
    page.click("#approve-button")
    page.wait_for_url(f"**/admin/tools/approval/{approval.pk}/change/")
    _shot(page, f"approval-self-approved-{width}")
    approval.refresh_from_db()
    assert approval.status == "approved"
