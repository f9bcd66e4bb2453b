"""Revoking an agent session in the console, in Chromium: the agent's next call is refused."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from apps.agent_auth.authentication import REFUSED_ENDED
from apps.agent_auth.models import AgentSession
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import session_for
from tests.routes.factories import RouteFactory

SHOTS = Path("/tmp/shots")


@pytest.fixture
def issued(project):
    route = RouteFactory(project=project, key="store-assistant")
    client = AgentClientFactory(project=project, app_id="store-desktop", allowed_routes=[route.key])
    return session_for(client)


def _workspaces(live_server, access_token: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"{live_server.url}/agent-api/v1/workspaces",
                                     headers={"Authorization": f"Bearer {access_token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _choose_revoke(page) -> None:
    page.goto("/admin/agent_auth/agentsession/")
    page.check("input[name=_selected_action]")
    page.select_option("select[name=action]", "revoke_sessions")
    page.click("button[name=index]")
    page.wait_for_selector("#id_reason")


def test_an_operator_revokes_a_session_with_a_reason_and_the_agent_is_refused(logged_in_page, live_server, issued):
    assert _workspaces(live_server, issued.access_token)[0] == 200
    page = logged_in_page
    _choose_revoke(page)
    assert "Ada's laptop" in page.locator("#sessions-to-revoke").inner_text()
    page.fill("#id_reason", "laptop stolen")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "agent_session_revoke.png"), full_page=True)
    page.click("input[type=submit][value=Revoke]")

    assert page.locator(".messagelist .success").inner_text() == "Revoked 1 session."
    assert "Revoked by operator: laptop stolen" in page.locator("#result_list").inner_text()
    page.screenshot(path=str(SHOTS / "agent_session_revoked.png"), full_page=True)
    session = AgentSession.objects.get()
    assert (session.revoked_by, session.revoked_by_name, session.revoked_reason) == (
        "operator", "operator", "laptop stolen")
    status, body = _workspaces(live_server, issued.access_token)
    assert status == 401
    assert body == {"error": "unauthorized", "message": REFUSED_ENDED}


def test_revoking_without_a_reason_asks_for_one_and_changes_nothing(logged_in_page, live_server, issued):
    page = logged_in_page
    _choose_revoke(page)
    page.click("input[type=submit][value=Revoke]")
    error = page.locator(".form-row.errors .errorlist")
    assert error.inner_text() == "Give a reason: it is kept with the session for the audit trail."
    assert AgentSession.objects.get().revoked_at is None
    assert _workspaces(live_server, issued.access_token)[0] == 200


def test_an_operator_revokes_a_session_from_its_own_page(logged_in_page, live_server, issued):
    page = logged_in_page
    page.goto(f"/admin/agent_auth/agentsession/{issued.session.pk}/change/")
    page.click("#revoke-session")
    page.fill("#id_reason", "device lost")
    page.click("input[type=submit][value=Revoke]")
    page.wait_for_url(f"**/admin/agent_auth/agentsession/{issued.session.pk}/change/")
    assert page.locator(".messagelist .success").inner_text() == "Revoked 1 session."
    assert page.locator(".field-revoker .readonly").inner_text() == "An operator: operator"
    assert page.locator(".field-revoked_reason .readonly").inner_text() == "device lost"
    assert page.locator("#revoke-session").count() == 0
    assert _workspaces(live_server, issued.access_token)[0] == 401
