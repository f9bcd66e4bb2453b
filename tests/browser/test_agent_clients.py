"""Registering an agent client in the console, in Chromium: its token is shown once, then rotated."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from apps.agent_auth.models import AgentClient
from tests.agent_auth.helpers import authorization_for
from tests.routes.factories import RouteFactory

SHOTS = Path("/tmp/shots")
TOKEN_RE = re.compile(r"^bhk_[A-Za-z0-9_-]{43}$")


@pytest.fixture
def routes(project):
    return [RouteFactory(project=project, key="store-assistant", name="Store assistant"),
            RouteFactory(project=project, key="hr-helpdesk", name="HR helpdesk")]


def _client_token_status(live_server, client: AgentClient, token: str) -> int:
    """What the business backend gets when it reads a pending authorization with this client token."""
    authorization = authorization_for(client)
    request = urllib.request.Request(f"{live_server.url}/agent-auth/v1/authorizations/{authorization.pk}",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _shown_token(page) -> str:
    token = page.locator("#client-token").inner_text()
    assert TOKEN_RE.match(token), token
    return token


def test_an_operator_registers_a_client_sees_its_token_once_and_rotates_it(logged_in_page, live_server, routes):
    page = logged_in_page
    page.goto("/admin/agent_auth/agentclient/add/")
    assert page.locator("select[name=project] option:checked").inner_text() == "Bailing Retail"
    page.fill("input[name=app_id]", "store-desktop")
    page.fill("input[name=name]", "Store desktop")
    page.check("input[name=allowed_routes][value=store-assistant]")
    page.click("#use-own-authorize-page")
    own_page = live_server.url.replace("localhost", "127.0.0.1") + "/agent-auth/authorize"
    assert page.input_value("input[name=agent_authorize_url]") == own_page
    page.click("input[name=_save]")

    client = AgentClient.objects.get(app_id="store-desktop")
    assert (client.allowed_routes, client.agent_authorize_url) == (["store-assistant"], own_page)
    page.wait_for_url(f"**/admin/agent_auth/agentclient/{client.pk}/change/")
    first = _shown_token(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "agent_client_token_once.png"), full_page=True)
    assert _client_token_status(live_server, client, first) == 200

    page.reload()
    assert page.locator("#client-token").count() == 0
    assert "bhk_" not in page.content()

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#rotate-token")
    page.wait_for_selector("#client-token")
    second = _shown_token(page)
    page.screenshot(path=str(SHOTS / "agent_client_token_rotated.png"), full_page=True)
    assert second != first
    assert _client_token_status(live_server, client, first) == 401
    assert _client_token_status(live_server, client, second) == 200


def test_a_plain_http_authorization_page_is_refused_next_to_the_field(logged_in_page, routes):
    page = logged_in_page
    page.goto("/admin/agent_auth/agentclient/add/")
    page.fill("input[name=app_id]", "store-desktop")
    page.fill("input[name=name]", "Store desktop")
    page.check("input[name=allowed_routes][value=store-assistant]")
    page.fill("input[name=agent_authorize_url]", "http://business.example.com/agent/authorize")
    page.click("input[name=_save]")
    error = page.locator(".field-agent_authorize_url .errorlist")
    assert "Plain http:// is only allowed on 127.0.0.1" in error.inner_text()
    assert AgentClient.objects.count() == 0


def test_past_the_route_limit_a_clients_routes_are_found_by_searching(logged_in_page, routes, monkeypatch):
    """The page stays usable with many routes: the chosen routes are shown, another is found by
    typing part of its name and saved."""
    from apps.routes import admin as routes_admin
    from tests.agent_auth.factories import AgentClientFactory

    client = AgentClientFactory(project=routes[0].project, allowed_routes=["store-assistant"])
    monkeypatch.setattr(routes_admin, "ROUTE_CHOICES_MAX", 1)
    page = logged_in_page
    page.goto(f"/admin/agent_auth/agentclient/{client.pk}/change/")
    chosen = page.locator(".field-allowed_routes .select2-selection__choice")
    assert chosen.count() == 1 and "Store assistant (store-assistant)" in chosen.inner_text()
    page.locator(".field-allowed_routes .select2-search__field").fill("helpdesk")
    page.locator(".select2-results__option", has_text="HR helpdesk (hr-helpdesk)").click()
    page.click("input[name=_save]")
    page.wait_for_url(re.compile(r".*/admin/agent_auth/agentclient/$"))
    client.refresh_from_db()
    assert client.allowed_routes == ["store-assistant", "hr-helpdesk"]
    page.goto(f"/admin/agent_auth/agentclient/{client.pk}/change/")
    page.screenshot(path=str(SHOTS / "agent-client-routes-searched.png"), full_page=True)
