"""BailingHub's own authorization page, driven like a browser with a logged-in user."""

from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from apps.agent_auth.models import AgentAuthorization, AgentSession
from apps.projects.models import Membership
from tests.agent_auth.factories import AgentClientFactory, pkce_pair
from tests.projects.factories import MembershipFactory, UserFactory
from tests.routes.factories import RouteFactory

REDIRECT_URI = "http://127.0.0.1:53682/callback"


@pytest.fixture
def page_client(route, other_route):
    """A client whose authorization page is BailingHub's own."""
    return AgentClientFactory(project=route.project, allowed_routes=[route.key, other_route.key],
                              agent_authorize_url="https://hub.example.com/agent-auth/authorize")


@pytest.fixture
def member(route):
    return MembershipFactory(project=route.project, role=Membership.Role.EDITOR, user=UserFactory(is_staff=False)).user


@pytest.fixture
def browser():
    return Client(enforce_csrf_checks=True)


@pytest.fixture
def started(api_client, page_client):
    """What the agent host did: created the authorization; returns (page path, verifier)."""
    verifier, challenge = pkce_pair()
    response = api_client.post("/agent-auth/v1/authorizations", {
        "client_app_id": page_client.app_id, "redirect_uri": REDIRECT_URI, "state": "page-state-1",
        "requested_routes": ["store-assistant", "hr-helpdesk"], "device_label": "Ada's <b>laptop</b>",
        "code_challenge": challenge, "code_challenge_method": "S256",
    }, format="json")
    url = urlsplit(response.json()["authorization_url"])
    assert (url.scheme, url.netloc, url.path) == ("https", "hub.example.com", "/agent-auth/authorize")
    return f"{url.path}?{url.query}", verifier


def _post(browser, path, data):
    data = {"csrfmiddlewaretoken": browser.cookies["csrftoken"].value, **data}
    return browser.post(path, data)


def _state():
    authorization = AgentAuthorization.objects.get()
    return authorization.status, authorization.code_hash, AgentSession.objects.count()


def test_the_page_requires_login(browser, started):
    path, _ = started
    response = browser.get(path)
    assert response.status_code == 302
    assert urlsplit(response["Location"]).path == "/agent-auth/login"
    assert parse_qs(urlsplit(response["Location"]).query)["next"] == [path]


def test_a_post_without_login_changes_nothing(browser, started):
    path, _ = started
    response = browser.post(path, {"decision": "approve", "routes": ["store-assistant"]})
    assert response.status_code == 403
    assert _state() == ("pending", None, 0)


def test_a_post_with_a_csrf_token_but_without_login_goes_to_login(browser, started):
    path, _ = started
    browser.get("/agent-auth/login")
    response = _post(browser, path, {"decision": "approve", "routes": ["store-assistant"]})
    assert response.status_code == 302
    assert urlsplit(response["Location"]).path == "/agent-auth/login"
    assert _state() == ("pending", None, 0)


def test_the_login_page_signs_in_and_returns_to_the_request(browser, started, member):
    path, _ = started
    login = browser.get("/agent-auth/login", {"next": path})
    assert login.status_code == 200
    assert login["X-Frame-Options"] == "DENY"
    assert login["Cache-Control"] == "no-store"
    response = browser.post("/agent-auth/login", {
        "username": member.username, "password": "correct horse battery staple", "next": path,
        "csrfmiddlewaretoken": browser.cookies["csrftoken"].value,
    })
    assert response.status_code == 302
    assert response["Location"] == path


def test_the_login_page_does_not_follow_an_offsite_next(browser, member):
    browser.get("/agent-auth/login")
    response = browser.post("/agent-auth/login", {
        "username": member.username, "password": "correct horse battery staple", "next": "https://evil.example/",
        "csrfmiddlewaretoken": browser.cookies["csrftoken"].value,
    })
    assert response.status_code == 302
    assert response["Location"] == "/admin/"


def test_the_page_shows_client_device_and_routes(browser, started, member, page_client):
    path, _ = started
    browser.force_login(member)
    response = browser.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    assert page_client.name in html and page_client.app_id in html
    assert "Ada&#x27;s &lt;b&gt;laptop&lt;/b&gt;" in html  # the device label is the agent's text: escaped
    assert 'value="store-assistant"' in html and 'value="hr-helpdesk"' in html
    assert response["X-Frame-Options"] == "DENY"
    assert response["Cache-Control"] == "no-store"
    assert response["Content-Security-Policy"] == "frame-ancestors 'none'"
    assert response["Referrer-Policy"] == "no-referrer"


def test_approve_on_the_page_redirects_to_the_loopback_with_a_code(api_client, browser, started, member):
    path, verifier = started
    browser.force_login(member)
    browser.get(path)
    response = _post(browser, path, {"decision": "approve", "routes": ["store-assistant"]})
    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT_URI
    query = parse_qs(location.query)
    assert query["state"] == ["page-state-1"]
    assert response["Cache-Control"] == "no-store"
    token = api_client.post("/agent-auth/v1/token", {
        "grant_type": "authorization_code", "client_app_id": AgentAuthorization.objects.get().client.app_id,
        "code": query["code"][0], "redirect_uri": REDIRECT_URI, "code_verifier": verifier,
    }, format="json")
    assert token.status_code == 200
    session = AgentSession.objects.get()
    assert session.principal == {"id": str(member.pk), "tenant": session.client.project.slug, "roles": ["editor"],
                                 "channel": "bailinghub"}
    assert session.on_behalf_of == member.username
    assert session.allowed_routes == ["store-assistant"]
    assert AgentAuthorization.objects.get().decided_by == member
    workspaces = api_client.get("/agent-api/v1/workspaces",
                                HTTP_AUTHORIZATION=f"Bearer {token.json()['access_token']}")
    assert [w["route"] for w in workspaces.json()["workspaces"]] == ["store-assistant"]


def test_deny_on_the_page_redirects_with_access_denied(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    response = _post(browser, path, {"decision": "deny"})
    assert response.status_code == 302
    assert response["Location"] == f"{REDIRECT_URI}?error=access_denied&state=page-state-1"
    assert _state() == ("denied", None, 0)


def test_a_cross_site_post_without_the_csrf_token_is_refused(browser, started, member):
    path, _ = started
    browser.force_login(member)
    response = browser.post(path, {"decision": "approve", "routes": ["store-assistant"]})
    assert response.status_code == 403
    assert _state() == ("pending", None, 0)


def test_a_post_from_another_origin_is_refused(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    response = browser.post(path, {"decision": "approve", "routes": ["store-assistant"],
                                   "csrfmiddlewaretoken": browser.cookies["csrftoken"].value},
                            HTTP_ORIGIN="https://evil.example")
    assert response.status_code == 403
    assert _state() == ("pending", None, 0)


def test_the_page_never_takes_a_redirect_from_the_browser(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    response = _post(browser, path + "&redirect_uri=https://evil.example/",
                     {"decision": "deny", "redirect_uri": "https://evil.example/", "next": "https://evil.example/"})
    assert response["Location"].startswith(REDIRECT_URI + "?")


def test_a_route_chosen_outside_the_offer_is_refused(browser, started, member, route):
    RouteFactory(project=route.project, key="payroll")
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    response = _post(browser, path, {"decision": "approve", "routes": ["store-assistant", "payroll"]})
    assert response.status_code == 403
    assert response.json()["error"] == "route_not_allowed"
    assert _state() == ("pending", None, 0)


def test_a_route_with_an_audience_list_is_not_offered(browser, started, member, other_route):
    other_route.audience_policy = "listed"
    other_route.allowed_audiences = ["hr"]
    other_route.save()
    path, _ = started
    browser.force_login(member)
    html = browser.get(path).content.decode()
    assert 'value="hr-helpdesk"' not in html
    response = _post(browser, path, {"decision": "approve", "routes": ["hr-helpdesk"]})
    assert response.status_code == 403
    assert _state() == ("pending", None, 0)


def test_approving_without_a_route_asks_again(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    response = _post(browser, path, {"decision": "approve"})
    assert response.status_code == 200
    assert "Choose at least one route" in response.content.decode()
    assert _state() == ("pending", None, 0)


def test_a_user_outside_the_project_cannot_decide(browser, started):
    outsider = UserFactory(is_staff=False)
    path, _ = started
    browser.force_login(outsider)
    page = browser.get(path)
    assert page.status_code == 200
    assert 'name="decision"' not in page.content.decode()
    browser.get("/agent-auth/login")  # a CSRF cookie, so the refusal is about membership
    for decision in ("approve", "deny"):
        response = _post(browser, path, {"decision": decision, "routes": ["store-assistant"]})
        assert response.status_code == 403
        assert response.json()["error"] == "access_denied"
    assert _state() == ("pending", None, 0)


def test_a_decided_request_shows_its_state_and_cannot_be_decided_again(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    _post(browser, path, {"decision": "deny"})
    response = _post(browser, path, {"decision": "approve", "routes": ["store-assistant"]})
    assert response.status_code == 200
    assert "already been denied" in response.content.decode()
    assert _state() == ("denied", None, 0)


def test_an_expired_request_says_so(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)  # the page was opened in time, the button pressed too late
    AgentAuthorization.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _post(browser, path, {"decision": "approve", "routes": ["store-assistant"]})
    assert response.status_code == 200
    assert "expired" in response.content.decode()
    assert _state() == ("pending", None, 0)


@pytest.mark.parametrize(
    "query", ["", "?authorization_id=nope", "?authorization_id=00000000-0000-0000-0000-000000000000"]
)
def test_an_unknown_request_is_404(browser, member, query):
    browser.force_login(member)
    assert browser.get("/agent-auth/authorize" + query).status_code == 404
