"""Agent sign-in through BailingHub's own authorization page, in Chromium.

The test plays the agent host (an SDK): it starts its loopback callback server, creates a PKCE
authorization over HTTP, and opens the authorization URL in the browser; the operator signs in and
decides; the callback server receives what the browser was sent to.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from apps.agent_auth.models import AgentAuthorization, AgentSession
from tests.agent_auth.factories import AgentClientFactory, pkce_pair
from tests.browser.conftest import OPERATOR_PASSWORD
from tests.local_server import LocalServer
from tests.projects.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.routes.factories import RouteFactory

SHOTS = Path("/tmp/shots")


class LoopbackCallback(LocalServer):
    """The agent host's one-shot loopback server: records the query of each request to /callback."""

    def __init__(self) -> None:
        received: list[dict[str, list[str]]] = []
        arrived = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                parts = urlsplit(self.path)
                if parts.path == "/callback":
                    received.append(parse_qs(parts.query))
                    arrived.set()
                body = b"<!doctype html><title>Agent</title><p id=done>You can close this window.</p>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.received, self.arrived = received, arrived
        super().__init__(Handler)
        self.redirect_uri = f"http://127.0.0.1:{self.port}/callback"


@pytest.fixture
def callback():
    with LoopbackCallback() as server:
        yield server


@pytest.fixture
def hub(live_server) -> str:
    """The hub as the agent host reaches it: plain http is allowed only on an IP-literal loopback."""
    return live_server.url.replace("localhost", "127.0.0.1")


@pytest.fixture
def store_route(project):
    return RouteFactory(project=project, key="store-assistant", name="门店助手")


@pytest.fixture
def desktop_client(project, store_route, hub):
    return AgentClientFactory(project=project, app_id="store-desktop", name="Store desktop",
                              allowed_routes=[store_route.key], agent_authorize_url=f"{hub}/agent-auth/authorize")


def _http(method: str, url: str, body: dict | None = None, headers: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _start_authorization(hub: str, client, callback) -> tuple[str, str]:
    """What the SDK does: a PKCE authorization; returns (authorization_url, verifier)."""
    verifier, challenge = pkce_pair()
    status, body = _http("POST", f"{hub}/agent-auth/v1/authorizations", {
        "client_app_id": client.app_id, "redirect_uri": callback.redirect_uri, "state": "sdk-state-42",
        "requested_routes": ["store-assistant"], "device_label": "Ada's MacBook", "code_challenge": challenge,
        "code_challenge_method": "S256",
    })
    assert status == 201, body
    return body["authorization_url"], verifier


def _sign_in_on_the_authorization_page(page, authorization_url: str, operator) -> None:
    page.goto(authorization_url)
    assert urlsplit(page.url).path == "/agent-auth/login"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "agent_auth_login.png"), full_page=True)
    page.fill("input[name=username]", operator.username)
    page.fill("input[name=password]", OPERATOR_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: urlsplit(url).path == "/agent-auth/authorize")


def test_the_operator_approves_and_the_agent_gets_a_working_session(page, operator, hub, desktop_client, callback):
    authorization_url, verifier = _start_authorization(hub, desktop_client, callback)
    _sign_in_on_the_authorization_page(page, authorization_url, operator)

    assert page.locator("#client").inner_text() == "Store desktop (store-desktop)"
    assert page.locator("#device").inner_text() == "Ada's MacBook"
    assert page.locator("#requested-routes").inner_text() == "store-assistant"
    assert page.locator("input[name=routes][value=store-assistant]").is_checked()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "agent_authorize_page.png"), full_page=True)

    page.click("button[value=approve]")
    assert callback.arrived.wait(10)
    page.wait_for_selector("#done")
    [query] = callback.received
    assert query["state"] == ["sdk-state-42"]
    assert query["code"][0].startswith("bhc_")
    assert AgentAuthorization.objects.get().decided_by == operator

    status, tokens = _http("POST", f"{hub}/agent-auth/v1/token", {
        "grant_type": "authorization_code", "client_app_id": "store-desktop", "code": query["code"][0],
        "redirect_uri": callback.redirect_uri, "code_verifier": verifier,
    })
    assert status == 200, tokens
    status, workspaces = _http("GET", f"{hub}/agent-api/v1/workspaces",
                               headers={"Authorization": f"Bearer {tokens['access_token']}"})
    assert status == 200
    assert [workspace["route"] for workspace in workspaces["workspaces"]] == ["store-assistant"]
    assert AgentSession.objects.get().on_behalf_of == "operator"


def test_the_operator_denies_and_the_agent_gets_access_denied(page, operator, hub, desktop_client, callback):
    authorization_url, _ = _start_authorization(hub, desktop_client, callback)
    _sign_in_on_the_authorization_page(page, authorization_url, operator)

    page.click("button[value=deny]")
    assert callback.arrived.wait(10)
    assert callback.received == [{"error": ["access_denied"], "state": ["sdk-state-42"]}]
    assert AgentAuthorization.objects.get().status == "denied"
    assert AgentSession.objects.count() == 0


def test_a_page_left_open_in_another_tab_explains_it_was_already_decided(page, operator, hub, desktop_client,
                                                                         callback):
    authorization_url, _ = _start_authorization(hub, desktop_client, callback)
    _sign_in_on_the_authorization_page(page, authorization_url, operator)
    second_tab = page.context.new_page()
    second_tab.goto(authorization_url)
    page.click("button[value=deny]")
    assert callback.arrived.wait(10)

    second_tab.click("button[value=approve]")
    notice = second_tab.locator(".errornote")
    assert notice.inner_text() == ("This request has already been denied: your answer was not recorded. "
                                   "You can close this page.")
    assert second_tab.locator("button[value=approve]").count() == 0
    second_tab.screenshot(path=str(SHOTS / "agent_authorize_already_decided.png"), full_page=True)
    assert callback.received == [{"error": ["access_denied"], "state": ["sdk-state-42"]}]
    assert AgentAuthorization.objects.get().status == "denied"


def test_a_page_approved_too_late_explains_it_expired_and_grants_nothing(page, operator, hub, desktop_client,
                                                                         callback):
    authorization_url, _ = _start_authorization(hub, desktop_client, callback)
    _sign_in_on_the_authorization_page(page, authorization_url, operator)
    AgentAuthorization.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    page.click("button[value=approve]")
    assert page.locator(".errornote").inner_text() == (
        "This request has expired: nothing was granted. Start again from the agent.")
    page.screenshot(path=str(SHOTS / "agent_authorize_expired.png"), full_page=True)
    assert callback.received == []
    assert AgentAuthorization.objects.get().status == "pending"
    assert AgentSession.objects.count() == 0


def test_a_user_outside_the_clients_project_is_told_so_and_decides_nothing(page, hub, desktop_client, callback):
    outsider = UserFactory(username="outsider", is_staff=False, password=OPERATOR_PASSWORD)
    MembershipFactory(user=outsider, project=ProjectFactory(name="Other shop"))
    authorization_url, _ = _start_authorization(hub, desktop_client, callback)
    _sign_in_on_the_authorization_page(page, authorization_url, outsider)

    assert page.locator("h1").inner_text() == "You cannot decide this request"
    assert "signed in as outsider, who is not a member of the project" in page.locator(".errornote").inner_text()
    assert page.locator("button[name=decision]").count() == 0
    assert "Store desktop" not in page.content()
    page.screenshot(path=str(SHOTS / "agent_authorize_not_a_member.png"), full_page=True)
    assert callback.received == []
    assert AgentAuthorization.objects.get().status == "pending"


def test_on_a_phone_the_page_fits_and_a_decided_request_reads_as_news_not_as_an_error(page, operator, hub,
                                                                                       desktop_client, callback):
    page.set_viewport_size({"width": 390, "height": 844})
    authorization_url, _ = _start_authorization(hub, desktop_client, callback)
    _sign_in_on_the_authorization_page(page, authorization_url, operator)

    # The console's stylesheet alone kept the page 980 px wide, the card and Approve cut off at the right.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    approve = page.locator("button[value=approve]").bounding_box()
    assert approve is not None and approve["x"] + approve["width"] <= 390
    page.screenshot(path=str(SHOTS / "agent_authorize_phone.png"), full_page=True)

    page.click("button[value=approve]")
    assert callback.arrived.wait(10)
    page.goto(authorization_url)
    decided = page.locator("#decided")
    assert (decided.inner_text(), decided.get_attribute("class")) == (
        "This request has already been approved. You can close this page.", "success")
    assert page.locator(".errornote").count() == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(SHOTS / "agent_authorize_phone_decided.png"), full_page=True)
