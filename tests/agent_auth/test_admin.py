import json
import re

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.agent_auth.models import AgentAuthorization, AgentClient, AgentSession
from apps.agent_auth.selectors import client_get_by_token
from apps.agent_auth.services import authorization_deny, session_revoke
from apps.projects.models import Membership
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import authorization_for, session_for
from tests.projects.factories import MembershipFactory
from tests.queries import get_statements

TOKEN_RE = re.compile(r"bhk_[A-Za-z0-9_-]{43}")


def _admin(membership) -> Client:
    client = Client()
    client.force_login(membership.user)
    return client


@pytest.fixture
def owner(route):
    return MembershipFactory(project=route.project, role=Membership.Role.OWNER)


@pytest.fixture
def viewer(route):
    return MembershipFactory(project=route.project, role=Membership.Role.VIEWER)


def _client_form(route, **changes):
    data = {"project": str(route.project.pk), "app_id": "store-desktop", "name": "Store desktop", "enabled": "on",
            "allowed_routes": ["store-assistant", "hr-helpdesk"],
            "agent_authorize_url": "https://business.example.com/agent/authorize",
            "authorization_rate_limit": "10"}
    data.update(changes)
    return data


def test_creating_a_client_shows_its_token_once_on_its_page(route, other_route, owner):
    admin = _admin(owner)
    response = admin.post("/admin/agent_auth/agentclient/add/", _client_form(route))
    assert response.status_code == 302
    client = AgentClient.objects.get(app_id="store-desktop")
    assert response["Location"] == f"/admin/agent_auth/agentclient/{client.pk}/change/"
    assert client.allowed_routes == ["store-assistant", "hr-helpdesk"]
    shown = TOKEN_RE.findall(admin.get(response["Location"]).content.decode())
    assert len(shown) == 1
    assert client_get_by_token(token=shown[0]) == client
    assert TOKEN_RE.findall(admin.get(response["Location"]).content.decode()) == []


def _cookies_and_session(admin) -> str:
    """Everything the browser holds and the session row keeps, as text."""
    from django.contrib.sessions.models import Session

    cookies = " ".join(f"{name}={morsel.value}" for name, morsel in admin.cookies.items())
    sessions = " ".join(str(row.get_decoded()) for row in Session.objects.all())
    return cookies + " " + sessions


def test_a_new_client_token_never_travels_in_a_cookie_and_leaves_the_session_once_shown(route, other_route, owner):
    """Messages went in Django's default `messages` cookie, signed, not encrypted: the redirect after
    the add carried the token to the browser's cookie jar and back in clear."""
    admin = _admin(owner)
    response = admin.post("/admin/agent_auth/agentclient/add/", _client_form(route))
    assert "messages" not in response.cookies
    [token] = TOKEN_RE.findall(admin.get(response["Location"]).content.decode())
    assert token not in _cookies_and_session(admin)


def test_a_rotated_client_token_never_travels_in_a_cookie(agent_client, owner):
    admin = _admin(owner)
    response = admin.post(f"/admin/agent_auth/agentclient/{agent_client.pk}/rotate-token/")
    assert "messages" not in response.cookies
    [token] = TOKEN_RE.findall(admin.get(response["Location"]).content.decode())
    assert token not in _cookies_and_session(admin)


def test_a_client_needs_existing_routes_and_a_safe_authorization_url(route, owner):
    admin = _admin(owner)
    for changes in ({"allowed_routes": ["store-assistant", "payroll"]},
                    {"agent_authorize_url": "http://business.example.com/authorize"}):
        response = admin.post("/admin/agent_auth/agentclient/add/", _client_form(route, **changes))
        assert response.status_code == 200
        assert response.context["adminform"].form.errors
    assert AgentClient.objects.count() == 0


@pytest.mark.parametrize("url", [
    "https://business.example .com/agent/authorize",
    "https://business.example.com/agent\tauthorize",
    "https://business.example.com/agent/\x01authorize",
    "https://business.example.com/agent/\u202eexe.authorize",
    "https://business.example.com/agent/authorize\u200f",
])
def test_an_authorization_url_with_spaces_or_invisible_characters_is_refused_beside_its_field(route, other_route, owner,
                                                                                              url):
    """The browser walk saved "https://exa mple.com/auth" and a U+202E override: the agent's user was
    to be sent to a page no browser can open, or to one that reads other than it is."""
    response = _admin(owner).post("/admin/agent_auth/agentclient/add/", _client_form(route, agent_authorize_url=url))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"agent_authorize_url": [
        "The URL must not contain spaces, control characters or invisible formatting characters (such as U+202E)."]}
    assert AgentClient.objects.count() == 0


def test_rotating_shows_the_new_token_once_and_kills_the_old(agent_client, owner):
    admin = _admin(owner)
    response = admin.post("/admin/agent_auth/agentclient/", {
        "action": "rotate_client_token", "_selected_action": [str(agent_client.pk)]})
    assert response.status_code == 302
    shown = TOKEN_RE.findall(admin.get(response["Location"]).content.decode())
    assert len(shown) == 1 and shown[0] != agent_client.token
    assert client_get_by_token(token=agent_client.token) is None
    assert client_get_by_token(token=shown[0]) == agent_client
    assert TOKEN_RE.findall(admin.get(response["Location"]).content.decode()) == []


def test_a_viewer_cannot_rotate(agent_client, viewer):
    admin = _admin(viewer)
    admin.post("/admin/agent_auth/agentclient/", {
        "action": "rotate_client_token", "_selected_action": [str(agent_client.pk)]})
    assert client_get_by_token(token=agent_client.token) == agent_client


def test_the_change_page_has_a_secret_free_connection_snippet(agent_client, owner):
    html = _admin(owner).get(f"/admin/agent_auth/agentclient/{agent_client.pk}/change/").content.decode()
    snippets = re.findall(r'<pre id="snippet-\d+"[^>]*>(.*?)</pre>', html, re.S)
    decoded = [json.loads(snippet.replace("&quot;", '"')) for snippet in snippets]
    assert decoded == [
        {"hubUrl": "http://testserver", "clientAppId": agent_client.app_id, "workspace": "store-assistant"},
        {"hubUrl": "http://testserver", "clientAppId": agent_client.app_id, "workspace": "hr-helpdesk"},
    ]
    logins = re.findall(r'<pre id="mcp-login-\d+"[^>]*>(.*?)</pre>', html, re.S)
    assert logins == [
        f"bailinghub-mcp login --hub http://testserver --client-app-id {agent_client.app_id} --workspace {key}"
        for key in ("store-assistant", "hr-helpdesk")
    ]
    assert "bhk_" not in html and agent_client.client_token_hash not in html


def test_sessions_are_listed_with_their_details(agent_client, owner):
    for _ in range(3):
        session_for(agent_client)
    admin = _admin(owner)
    admin.get("/admin/agent_auth/agentsession/")
    with CaptureQueriesContext(connection) as three:
        response = admin.get("/admin/agent_auth/agentsession/")
    session_for(agent_client)
    with CaptureQueriesContext(connection) as four:
        admin.get("/admin/agent_auth/agentsession/")
    assert response.status_code == 200
    html = response.content.decode()
    for text in ("Ada&#x27;s laptop", "ada@example.com", ">Active<", "store-assistant, hr-helpdesk"):
        assert text in html
    assert len(four) == len(three)


def _revoke(admin, sessions, **extra):
    return admin.post("/admin/agent_auth/agentsession/", {
        "action": "revoke_sessions", "_selected_action": [str(s.pk) for s in sessions], **extra})


def test_revoking_asks_for_a_reason_then_revokes(agent_client, owner):
    issued = session_for(agent_client)
    admin = _admin(owner)
    ask = _revoke(admin, [issued.session])
    assert ask.status_code == 200
    assert "Reason" in ask.content.decode()
    assert AgentSession.objects.get().revoked_at is None
    done = _revoke(admin, [issued.session], apply="1", reason="laptop stolen")
    assert done.status_code == 302
    session = AgentSession.objects.get()
    assert (session.revoked_by, session.revoked_by_name, session.revoked_reason) == (
        "operator", owner.user.username, "laptop stolen")
    listed = admin.get("/admin/agent_auth/agentsession/").content.decode()
    assert f"Revoked by <bdi>{owner.user.username}</bdi>: <bdi>laptop stolen</bdi>" in listed


@pytest.mark.parametrize(("sessions", "text"), [(1, "Revoked 1 session."), (2, "Revoked 2 sessions.")])
def test_revoking_counts_in_words_that_agree_with_the_number(agent_client, owner, sessions, text):
    issued = [session_for(agent_client).session for _ in range(sessions)]
    response = _revoke(_admin(owner), issued, apply="1", reason="laptop stolen")
    assert [str(message) for message in get_messages(response.wsgi_request)] == [text]


def test_revoking_without_a_reason_changes_nothing(agent_client, owner):
    issued = session_for(agent_client)
    response = _revoke(_admin(owner), [issued.session], apply="1", reason="")
    assert response.status_code == 200
    assert "Give a reason: it is kept with the session for the audit trail." in response.content.decode()
    assert AgentSession.objects.get().revoked_at is None


def test_a_viewer_sees_sessions_but_cannot_revoke(agent_client, viewer):
    issued = session_for(agent_client)
    admin = _admin(viewer)
    assert admin.get("/admin/agent_auth/agentsession/").status_code == 200
    _revoke(admin, [issued.session], apply="1", reason="no")
    assert AgentSession.objects.get().revoked_at is None


def test_sessions_cannot_be_edited_or_deleted_in_the_admin(agent_client, owner):
    issued = session_for(agent_client)
    admin = _admin(owner)
    url = f"/admin/agent_auth/agentsession/{issued.session.pk}/change/"
    assert admin.get(url).status_code == 200  # view only
    assert admin.post(url, {"device_label": "renamed"}).status_code == 403
    assert admin.post(f"/admin/agent_auth/agentsession/{issued.session.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AgentSession.objects.get().device_label == "Ada's laptop"


def test_another_projects_sessions_are_invisible(agent_client):
    session_for(agent_client)
    stranger = MembershipFactory(role=Membership.Role.OWNER)
    response = _admin(stranger).get("/admin/agent_auth/agentsession/")
    assert list(response.context["cl"].queryset) == []


def test_authorizations_are_read_only(agent_client, owner):
    authorization = authorization_for(agent_client)
    admin = _admin(owner)
    url = f"/admin/agent_auth/agentauthorization/{authorization.pk}/change/"
    page = admin.get(url)
    assert page.status_code == 200
    assert "code_challenge" not in page.content.decode()
    assert admin.post(url, {"status": "approved"}).status_code == 403
    assert AgentAuthorization.objects.get().status == "pending"


def test_an_authorizations_approver_is_named_without_a_link_an_operator_cannot_open(agent_client, owner):
    """"Decided by" linked to the user's admin page, which only a site administrator may open: the
    operator who decided followed it to "Not allowed"."""
    authorization = authorization_for(agent_client)
    authorization_deny(client=agent_client, authorization_id=authorization.pk, decided_by=owner.user)
    page = _admin(owner).get(f"/admin/agent_auth/agentauthorization/{authorization.pk}/change/").content.decode()
    decided_by = re.search(r'<div class="form-row field-decided_by_name">.*?<div class="readonly">(.*?)</div>', page,
                           re.S)
    assert decided_by is not None
    assert decided_by.group(1) == owner.user.get_username()
    assert "/admin/auth/user/" not in page


def test_a_client_of_another_project_cannot_be_opened(route):
    other = AgentClientFactory()
    owner = MembershipFactory(project=route.project)
    assert _admin(owner).get(f"/admin/agent_auth/agentclient/{other.pk}/change/").status_code == 302


def test_the_form_offers_this_hubs_authorization_page_in_one_click(route, owner):
    html = _admin(owner).get("/admin/agent_auth/agentclient/add/", HTTP_HOST="127.0.0.1:8000").content.decode()
    assert 'id="use-own-authorize-page" data-url="http://127.0.0.1:8000/agent-auth/authorize"' in html


def test_a_localhost_hub_offers_its_page_on_the_loopback_address(route, owner):
    html = _admin(owner).get("/admin/agent_auth/agentclient/add/", HTTP_HOST="localhost:8000").content.decode()
    assert 'data-url="http://127.0.0.1:8000/agent-auth/authorize"' in html


def test_a_client_on_this_hubs_page_is_created(route, owner):
    response = _admin(owner).post("/admin/agent_auth/agentclient/add/", _client_form(
        route, allowed_routes=["store-assistant"], agent_authorize_url="https://hub.example.com/agent-auth/authorize"))
    assert response.status_code == 302
    assert AgentClient.objects.get().agent_authorize_url == "https://hub.example.com/agent-auth/authorize"


def test_the_route_choices_are_the_operators_projects_routes(route, other_route, owner):
    from tests.routes.factories import RouteFactory

    RouteFactory(key="elsewhere")
    response = _admin(owner).get("/admin/agent_auth/agentclient/add/")
    field = response.context["adminform"].form.fields["allowed_routes"]
    assert [key for key, _ in field.choices] == ["hr-helpdesk", "store-assistant"]
    assert response.context["adminform"].form.initial["project"] == route.project.pk


def test_an_operator_without_model_permissions_can_register_a_client(route, other_route, owner):
    assert not owner.user.is_superuser and not owner.user.user_permissions.exists()
    admin = _admin(owner)
    assert admin.get("/admin/agent_auth/agentclient/add/").status_code == 200
    assert admin.post("/admin/agent_auth/agentclient/add/", _client_form(route)).status_code == 302
    assert AgentClient.objects.count() == 1


def test_the_rotate_button_shows_the_new_token_once_and_kills_the_old(agent_client, owner):
    admin = _admin(owner)
    page = admin.get(f"/admin/agent_auth/agentclient/{agent_client.pk}/change/").content.decode()
    assert 'id="rotate-token"' in page
    response = admin.post(f"/admin/agent_auth/agentclient/{agent_client.pk}/rotate-token/")
    assert response.status_code == 302
    assert response["Location"] == f"/admin/agent_auth/agentclient/{agent_client.pk}/change/"
    shown = TOKEN_RE.findall(admin.get(response["Location"]).content.decode())
    assert len(shown) == 1 and shown[0] != agent_client.token
    assert client_get_by_token(token=agent_client.token) is None
    assert client_get_by_token(token=shown[0]) == agent_client


ROTATIONS = {
    "button": lambda admin, pk: admin.post(f"/admin/agent_auth/agentclient/{pk}/rotate-token/"),
    "action": lambda admin, pk: admin.post("/admin/agent_auth/agentclient/", {
        "action": "rotate_client_token", "_selected_action": [str(pk)]}),
}


@pytest.mark.parametrize("how", ROTATIONS)
def test_a_rotation_is_in_the_clients_history_with_who_rotated_it_and_no_token(agent_client, owner, how):
    from django.contrib.admin.models import LogEntry

    admin = _admin(owner)
    ROTATIONS[how](admin, agent_client.pk)
    [entry] = LogEntry.objects.filter(object_id=str(agent_client.pk))
    assert (entry.user_id, entry.action_flag, entry.get_change_message()) == (
        owner.user.pk, 2, "Rotated the client token: the previous one stopped working.")
    assert len(TOKEN_RE.findall(admin.get("/admin/agent_auth/agentclient/").content.decode())) == 1  # shown once
    history = admin.get(f"/admin/agent_auth/agentclient/{agent_client.pk}/history/").content.decode()
    assert "Rotated the client token" in history and not TOKEN_RE.findall(history)


def test_opening_the_rotate_address_does_not_rotate(agent_client, owner):
    response = _admin(owner).get(f"/admin/agent_auth/agentclient/{agent_client.pk}/rotate-token/")
    assert response.status_code == 302
    assert client_get_by_token(token=agent_client.token) == agent_client


def test_a_client_stays_in_its_project(agent_client, owner):
    """An operator who edits two projects cannot move a client from one to the other: its sessions
    (approved for the first project's users) would then reach the second's route of the same key."""
    from tests.routes.factories import RouteFactory

    elsewhere = RouteFactory(key="store-assistant", name="Another project's assistant")
    MembershipFactory(project=elsewhere.project, user=owner.user, role=Membership.Role.EDITOR)
    issued = session_for(agent_client, routes=["store-assistant"])
    response = _admin(owner).post(f"/admin/agent_auth/agentclient/{agent_client.pk}/change/", {
        "project": str(elsewhere.project.pk), "app_id": agent_client.app_id, "name": agent_client.name,
        "enabled": "on", "allowed_routes": ["store-assistant"], "agent_authorize_url": agent_client.agent_authorize_url,
        "authorization_rate_limit": str(agent_client.authorization_rate_limit)})
    assert response.status_code == 302
    agent_client.refresh_from_db()
    assert agent_client.project_id == owner.project_id
    workspaces = Client().get("/agent-api/v1/workspaces", HTTP_AUTHORIZATION=f"Bearer {issued.access_token}").json()
    assert [workspace["name"] for workspace in workspaces["workspaces"]] == ["门店助手"]


def test_a_viewer_has_no_rotate_button_and_cannot_post_one(agent_client, viewer):
    admin = _admin(viewer)
    page = admin.get(f"/admin/agent_auth/agentclient/{agent_client.pk}/change/")
    assert page.status_code == 200
    assert 'id="rotate-token"' not in page.content.decode()
    response = admin.post(f"/admin/agent_auth/agentclient/{agent_client.pk}/rotate-token/")
    assert response.status_code == 403
    assert client_get_by_token(token=agent_client.token) == agent_client


def test_another_projects_client_cannot_be_rotated(route):
    other = AgentClientFactory()
    owner = MembershipFactory(project=route.project)
    response = _admin(owner).post(f"/admin/agent_auth/agentclient/{other.pk}/rotate-token/")
    assert response.status_code == 302  # "does not exist" for what the operator may not see
    assert client_get_by_token(token=other.token) == other


def test_the_console_names_the_app_agent_sign_in(owner):
    html = _admin(owner).get("/admin/agent_auth/").content.decode()
    assert "Agent sign-in" in html
    assert "AGENT_AUTH" not in html and "Agent_Auth" not in html


def test_sessions_filter_by_state(agent_client, owner):
    active, revoked = session_for(agent_client).session, session_for(agent_client).session
    session_revoke(session=revoked, revoked_by=AgentSession.RevokedBy.OPERATOR, reason="gone")
    admin = _admin(owner)
    for state, expected in (("active", [active]), ("revoked", [revoked]), ("expired", [])):
        response = admin.get("/admin/agent_auth/agentsession/", {"state": state})
        assert list(response.context["cl"].queryset) == expected


def _session_url(session, suffix=""):
    return f"/admin/agent_auth/agentsession/{session.pk}/{suffix}"


def test_a_session_is_revoked_from_its_own_page_with_a_reason(agent_client, owner):
    session = session_for(agent_client).session
    admin = _admin(owner)
    assert f'href="{_session_url(session, "revoke/")}"' in admin.get(_session_url(session, "change/")).content.decode()
    assert 'id="id_reason"' in admin.get(_session_url(session, "revoke/")).content.decode()
    response = admin.post(_session_url(session, "revoke/"), {"reason": "left the company"})
    assert response.status_code == 302
    assert response["Location"] == _session_url(session, "change/")
    session.refresh_from_db()
    assert (session.revoked_by, session.revoked_by_name, session.revoked_reason) == (
        "operator", owner.user.username, "left the company")
    page = admin.get(_session_url(session, "change/")).content.decode()
    assert "revoke/" not in page
    assert f"An operator: <bdi>{owner.user.username}</bdi>" in page


def test_a_session_page_revoke_without_a_reason_changes_nothing(agent_client, owner):
    session = session_for(agent_client).session
    response = _admin(owner).post(_session_url(session, "revoke/"), {"reason": ""})
    assert response.status_code == 200
    assert "Give a reason: it is kept with the session for the audit trail." in response.content.decode()
    assert AgentSession.objects.get().revoked_at is None


def test_a_revoke_reason_with_a_direction_override_is_refused_and_nothing_is_revoked(agent_client, owner):
    """The reason is shown after "Revoked by …" in the session list: `Lost laptop\u202e evil` read
    other than it was written (browser audit)."""
    session = session_for(agent_client).session
    response = _admin(owner).post(_session_url(session, "revoke/"), {"reason": "Lost laptop\u202e evil"})
    assert response.status_code == 200
    assert "Invisible direction controls (such as U+202E) are not allowed" in response.content.decode()
    assert AgentSession.objects.get().revoked_at is None


def test_a_viewer_cannot_revoke_from_the_session_page(agent_client, viewer):
    session = session_for(agent_client).session
    admin = _admin(viewer)
    assert "revoke/" not in admin.get(_session_url(session, "change/")).content.decode()
    assert admin.post(_session_url(session, "revoke/"), {"reason": "no"}).status_code == 403
    assert AgentSession.objects.get().revoked_at is None


def test_a_revoked_session_cannot_be_revoked_again(agent_client, owner):
    session = session_for(agent_client).session
    session_revoke(session=session, revoked_by=AgentSession.RevokedBy.AGENT, reason="signed out")
    admin = _admin(owner)
    # Opened from a page read before (another tab): said so, not "your role does not allow this".
    for opened in (admin.get(_session_url(session, "revoke/"), follow=True),
                   admin.post(_session_url(session, "revoke/"), {"reason": "again"}, follow=True)):
        assert opened.redirect_chain == [(_session_url(session, "change/"), 302)]
        assert "This session was already revoked," in opened.content.decode()
    assert (AgentSession.objects.get().revoked_by, AgentSession.objects.get().revoked_reason) == ("agent", "signed out")
    assert "Revoked (The agent): <bdi>signed out</bdi>" in admin.get("/admin/agent_auth/agentsession/").content.decode()


def test_another_projects_session_cannot_be_revoked(agent_client):
    session = session_for(agent_client).session
    stranger = MembershipFactory(role=Membership.Role.OWNER)
    assert _admin(stranger).post(_session_url(session, "revoke/"), {"reason": "x"}).status_code == 302
    assert AgentSession.objects.get().revoked_at is None


def test_a_client_saved_without_routes_is_kept_and_the_page_says_it_is_not_yet_of_use(route, owner):
    """It saved silently; its agents then failed at sign-in with no route to ask for."""
    admin = _admin(owner)
    response = admin.post("/admin/agent_auth/agentclient/add/", _client_form(route, allowed_routes=[]), follow=True)
    assert response.status_code == 200
    assert AgentClient.objects.get(app_id="store-desktop").allowed_routes == []
    page = response.content.decode()
    assert "Store desktop allows no routes: its agents cannot be authorized for any workspace" in page


def test_a_client_with_routes_gets_no_such_warning(route, other_route, owner):
    response = _admin(owner).post("/admin/agent_auth/agentclient/add/", _client_form(route), follow=True)
    assert "allows no routes" not in response.content.decode()


def _change_form(client, **changes):
    data = {"app_id": client.app_id, "name": client.name, "enabled": "on", "allowed_routes": client.allowed_routes,
            "agent_authorize_url": client.agent_authorize_url,
            "authorization_rate_limit": str(client.authorization_rate_limit)}
    data.update(changes)
    return data


@pytest.fixture
def searched(monkeypatch):
    """Past this many routes in a project, route keys are picked by searching."""
    from apps.routes import admin as routes_admin

    monkeypatch.setattr(routes_admin, "ROUTE_CHOICES_MAX", 1)


@pytest.fixture
def two_projects(agent_client, owner):
    """The owner edits a second project with a route of the same key and one of its own."""
    from tests.routes.factories import RouteFactory

    elsewhere = RouteFactory(key="store-assistant", name="Another project's assistant")
    RouteFactory(project=elsewhere.project, key="elsewhere-only")
    MembershipFactory(project=elsewhere.project, user=owner.user, role=Membership.Role.EDITOR)
    return elsewhere.project


def test_a_clients_page_offers_only_its_projects_routes(agent_client, owner, two_projects):
    """An operator of two projects was offered both projects' routes, which the save then refused."""
    response = _admin(owner).get(f"/admin/agent_auth/agentclient/{agent_client.pk}/change/")
    field = response.context["adminform"].form.fields["allowed_routes"]
    assert field.choices == [("hr-helpdesk", "HR Helpdesk (hr-helpdesk)"),
                             ("store-assistant", "门店助手 (store-assistant)")]


def test_past_the_route_limit_a_clients_routes_are_picked_by_searching(agent_client, owner, searched):
    admin = _admin(owner)
    url = f"/admin/agent_auth/agentclient/{agent_client.pk}/change/"
    html = admin.get(url).content.decode()
    assert 'type="checkbox" name="allowed_routes"' not in html
    select = re.search(r'<select name="allowed_routes".*?</select>', html, re.S).group(0)
    assert f'data-ajax--url="/admin/routes/route/keys/{agent_client.project_id}/"' in select
    assert re.findall(r'<option value="([^"]+)" selected>', select) == ["store-assistant", "hr-helpdesk"]
    assert admin.post(url, _change_form(agent_client, allowed_routes=["hr-helpdesk"])).status_code == 302
    agent_client.refresh_from_db()
    assert agent_client.allowed_routes == ["hr-helpdesk"]


@pytest.mark.parametrize("posted", [["store-assistant", "elsewhere-only"], ["no-such-route"], ["hr\x00helpdesk"],
                                    [f"route-{n}" for n in range(129)]])
@pytest.mark.parametrize("mode", ["listed", "searched"])
def test_a_client_takes_no_route_but_its_projects_and_changes_nothing(agent_client, owner, two_projects, posted,
                                                                      mode, monkeypatch):
    from apps.routes import admin as routes_admin

    if mode == "searched":
        monkeypatch.setattr(routes_admin, "ROUTE_CHOICES_MAX", 1)
    url = f"/admin/agent_auth/agentclient/{agent_client.pk}/change/"
    response = _admin(owner).post(url, _change_form(agent_client, name="Renamed", allowed_routes=posted))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["allowed_routes"]
    stored = AgentClient.objects.get(pk=agent_client.pk)
    assert (stored.name, stored.allowed_routes) == (agent_client.name, ["store-assistant", "hr-helpdesk"])


def test_past_the_route_limit_a_new_clients_routes_are_picked_once_it_is_saved(route, other_route, owner, searched):
    admin = _admin(owner)
    html = admin.get("/admin/agent_auth/agentclient/add/").content.decode()
    assert 'name="allowed_routes"' not in html
    assert "Picked on the client&#x27;s page once it is saved" in html
    response = admin.post("/admin/agent_auth/agentclient/add/", _client_form(route), follow=True)
    client = AgentClient.objects.get(app_id="store-desktop")
    assert (response.redirect_chain[-1][0], client.allowed_routes) == (
        f"/admin/agent_auth/agentclient/{client.pk}/change/", [])
    # Its page, where they are picked by searching (there is no box to tick).
    assert "until you choose at least one under Allowed routes" in response.content.decode()


def test_the_route_search_finds_the_projects_routes_by_key_or_name(agent_client, owner, two_projects):
    url = f"/admin/routes/route/keys/{agent_client.project_id}/"
    admin = _admin(owner)
    assert admin.get(url, {"term": "HR"}).json() == {
        "results": [{"id": "hr-helpdesk", "text": "HR Helpdesk (hr-helpdesk)"}], "pagination": {"more": False}}
    assert [row["id"] for row in admin.get(url).json()["results"]] == ["hr-helpdesk", "store-assistant"]


@pytest.mark.parametrize("query", [{"term": "store\x00"}, {"term": "store", "page": "9" * 30},
                                   {"term": "store", "page": "-1"}])
def test_a_hostile_route_search_is_no_500(agent_client, owner, query):
    response = _admin(owner).get(f"/admin/routes/route/keys/{agent_client.project_id}/", query)
    assert (response.status_code, [row["id"] for row in response.json()["results"]]) == (200, ["store-assistant"])


def test_the_route_search_of_a_project_the_operator_may_not_change_is_a_404(agent_client, viewer):
    from tests.routes.factories import RouteFactory

    admin = _admin(viewer)
    assert admin.get(f"/admin/routes/route/keys/{agent_client.project_id}/").status_code == 404
    assert admin.get(f"/admin/routes/route/keys/{RouteFactory().project_id}/").status_code == 404


def test_the_client_list_makes_as_many_queries_with_four_clients_as_with_one(agent_client, owner, route):
    admin = _admin(owner)
    with_one = get_statements(admin, "/admin/agent_auth/agentclient/")
    for _ in range(3):
        AgentClientFactory(project=route.project, allowed_routes=[route.key])
    assert get_statements(admin, "/admin/agent_auth/agentclient/") == with_one


def test_the_authorization_list_makes_as_many_queries_with_four_requests_as_with_one(agent_client, owner):
    admin = _admin(owner)
    authorization_for(agent_client)
    with_one = get_statements(admin, "/admin/agent_auth/agentauthorization/")
    for _ in range(3):
        authorization_for(agent_client)
    assert (get_statements(admin, "/admin/agent_auth/agentauthorization/"),
            AgentAuthorization.objects.count()) == (with_one, 4)
