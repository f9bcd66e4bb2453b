"""BailingHub's own authorization page, driven like a browser with a logged-in user."""

from datetime import timedelta
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone

from apps.agent_auth.models import AgentAuthorization, AgentSession
from apps.projects.models import Membership
from tests.agent_auth.factories import AgentClientFactory, pkce_pair
from tests.agent_auth.helpers import session_for
from tests.projects.factories import MembershipFactory, UserFactory
from tests.routes.factories import RouteFactory

REDIRECT_URI = "http://127.0.0.1:53682/callback"


@pytest.fixture
def page_client(route, other_route):
    """A client whose authorization page is BailingHub's own."""
    return AgentClientFactory(project=route.project, allowed_routes=[route.key, other_route.key],
                              agent_authorize_url="https://testserver/agent-auth/authorize")


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
    assert (url.scheme, url.netloc, url.path) == ("https", "testserver", "/agent-auth/authorize")
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


def test_the_sign_in_pages_name_the_hubs_icon(browser):
    """Without an icon of their own the browser asked for /favicon.ico at every agent sign-in, a 404
    and a warning in the web log each time; the console's pages name the hub's icon."""
    login = browser.get("/agent-auth/login").content.decode()
    assert '<link rel="icon" type="image/svg+xml" href="/static/bailinghub/favicon.svg">' in login


@pytest.mark.parametrize("path", ["/agent-auth/login", "/admin/login/"])
def test_every_page_names_the_icon_from_one_template(browser, path):
    """The icon's link was spelled in both base templates (the sign-in pages' and the console's):
    a change to one left the other naming the old icon. Both include bailinghub/icon.html, once."""
    response = browser.get(path)
    assert [template.name for template in response.templates].count("bailinghub/icon.html") == 1
    assert response.content.decode().count('rel="icon"') == 1


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
    assert response["Referrer-Policy"] == "same-origin"
    assert '<meta name="referrer" content="same-origin">' in html
    assert "no-referrer" not in html


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
    assert response["Content-Type"].startswith("text/html")
    assert "Choose routes among those offered. Nothing was changed." in response.content.decode()
    assert 'name="decision"' in response.content.decode()  # the form is offered again
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
    assert response.status_code == 400
    assert "Choose at least one route to approve. Nothing was changed." in response.content.decode()
    assert _state() == ("pending", None, 0)


def test_a_user_outside_the_project_sees_why_and_no_details(browser, started, page_client):
    outsider = UserFactory(is_staff=False, username="outsider")
    path, _ = started
    browser.force_login(outsider)
    page = browser.get(path)
    html = page.content.decode()
    assert page.status_code == 403
    assert page["Content-Type"].startswith("text/html")
    assert "signed in as outsider, who is not a member of the project" in html
    assert 'name="decision"' not in html
    assert "laptop" not in html and page_client.app_id not in html
    assert f'href="/agent-auth/login?next={quote(path, safe="")}"' in html


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_user_outside_the_project_cannot_decide(browser, started, decision):
    path, _ = started
    browser.force_login(UserFactory(is_staff=False))
    browser.get("/agent-auth/login")  # a CSRF cookie, so the refusal is about membership
    response = _post(browser, path, {"decision": decision, "routes": ["store-assistant"]})
    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")
    assert "not a member of the project" in response.content.decode()
    assert _state() == ("pending", None, 0)


FOREIGN = "This application sends its users to its own site to approve agents, not to BailingHub"
UNKNOWN_HOST = "page at business.example.com, an address this hub does not know as its own"


@pytest.mark.parametrize(("url", "said"), [
    ("https://business.example.com/agent/authorize", FOREIGN),
    ("https://testserver/agent-auth/authorizex", FOREIGN),
    ("https://testserver/agent-auth/authorize/", FOREIGN),  # a path the router does not serve
    ("https://business.example.com/agent-auth/authorize", UNKNOWN_HOST),  # our path, not our host
])
@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_client_whose_users_approve_on_its_own_site_is_not_decided_here(browser, started, member, page_client,
                                                                          url, said, decision):
    # Its backend decides, for a principal of its own: a hub account approving here would give
    # the business's client a session nobody there granted.
    type(page_client).objects.filter(pk=page_client.pk).update(agent_authorize_url=url)
    path, _ = started
    browser.force_login(member)
    page = browser.get(path)
    html = page.content.decode()
    assert (page.status_code, page["Content-Type"].split(";")[0]) == (403, "text/html")
    assert said in html
    assert 'name="decision"' not in html and "laptop" not in html and page_client.name not in html
    browser.get("/agent-auth/login")  # a CSRF cookie, so the refusal is about the client
    response = _post(browser, path, {"decision": decision, "routes": ["store-assistant"]})
    assert response.status_code == 403 and "cannot decide its requests" in response.content.decode()
    assert _state() == ("pending", None, 0)


@pytest.mark.parametrize("allowed", [["*"], [".example.com", "testserver"]])
def test_a_host_pattern_in_allowed_hosts_names_no_host_of_this_hub(browser, started, member, page_client, settings,
                                                                  allowed):
    # "*" (common behind a proxy) or ".example.com" would let a sibling site's page at our path pass.
    settings.ALLOWED_HOSTS = allowed
    type(page_client).objects.filter(pk=page_client.pk).update(
        agent_authorize_url="https://shop.example.com/agent-auth/authorize")
    path, _ = started
    browser.force_login(member)
    page = browser.get(path)
    assert page.status_code == 403 and "an address this hub does not know as its own" in page.content.decode()


def test_the_services_refuse_a_foreign_clients_request_whoever_calls_them(started, member, page_client):
    from apps.agent_auth.errors import ForeignClient
    from apps.agent_auth.services import authorization_approve_by_user, authorization_deny_by_user

    type(page_client).objects.filter(pk=page_client.pk).update(
        agent_authorize_url="https://business.example.com/agent/authorize")
    authorization = AgentAuthorization.objects.get()
    with pytest.raises(ForeignClient):
        authorization_approve_by_user(authorization_id=authorization.pk, user=member,
                                      allowed_routes=["store-assistant"])
    with pytest.raises(ForeignClient):
        authorization_deny_by_user(authorization_id=authorization.pk, user=member)
    assert _state() == ("pending", None, 0)


@pytest.mark.parametrize(("url", "allowed"), [
    ("https://testserver/agent-auth/authorize", ["*"]),  # the host the page was reached at
    ("http://[::1]:8000/agent-auth/authorize", ["[::1]", "testserver"]),  # named in ALLOWED_HOSTS
    ("https://HUB.example.com/agent-auth/authorize", ["hub.example.com", "testserver"]),
    ("http://127.0.0.1:8000/agent-auth/authorize", ["testserver"]),  # WEB_ORIGIN
])
def test_a_client_sent_to_this_hubs_page_at_an_address_of_this_hub_is_decided_here(browser, started, member,
                                                                                   page_client, settings, url,
                                                                                   allowed):
    settings.ALLOWED_HOSTS = allowed
    settings.WEB_ORIGIN = "http://127.0.0.1:8000"
    type(page_client).objects.filter(pk=page_client.pk).update(agent_authorize_url=url)
    path, _ = started
    browser.force_login(member)
    assert browser.get(path).status_code == 200
    response = _post(browser, path, {"decision": "approve", "routes": ["store-assistant"]})
    assert response.status_code == 302
    assert _state()[0] == "approved"


def test_a_decided_request_shows_its_state_and_cannot_be_decided_again(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    _post(browser, path, {"decision": "deny"})
    response = _post(browser, path, {"decision": "approve", "routes": ["store-assistant"]})
    assert response.status_code == 409
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "This request has already been denied: your answer was not recorded." in html
    assert 'name="decision"' not in html
    assert _state() == ("denied", None, 0)


def test_an_expired_request_says_so(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)  # the page was opened in time, the button pressed too late
    AgentAuthorization.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _post(browser, path, {"decision": "approve", "routes": ["store-assistant"]})
    assert response.status_code == 410
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "This request has expired: nothing was granted. Start again from the agent." in html
    assert 'name="decision"' not in html
    assert _state() == ("pending", None, 0)


@pytest.mark.parametrize(
    "query", ["", "?authorization_id=nope", "?authorization_id=00000000-0000-0000-0000-000000000000"]
)
def test_an_unknown_request_is_an_html_404(browser, member, query):
    browser.force_login(member)
    response = browser.get("/agent-auth/authorize" + query)
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert "This sign-in request does not exist." in response.content.decode()
    assert response["Cache-Control"] == "no-store"
    assert response["X-Frame-Options"] == "DENY"


def test_a_same_origin_post_with_the_browsers_origin_header_is_accepted(browser, started, member):
    """What Chromium sends from the page itself: its own Origin (a no-referrer page sent "null")."""
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    response = browser.post(path, {"decision": "deny", "csrfmiddlewaretoken": browser.cookies["csrftoken"].value},
                            HTTP_ORIGIN="http://testserver", HTTP_REFERER=f"http://testserver{path}")
    assert response.status_code == 302
    assert response["Location"] == f"{REDIRECT_URI}?error=access_denied&state=page-state-1"
    assert response["Referrer-Policy"] == "same-origin"
    assert _state() == ("denied", None, 0)


def test_a_post_with_a_null_origin_is_refused_as_an_html_page(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    response = browser.post(path, {"decision": "approve", "routes": ["store-assistant"],
                                   "csrfmiddlewaretoken": browser.cookies["csrftoken"].value},
                            HTTP_ORIGIN="null")
    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")
    assert "Your answer was not accepted" in response.content.decode()
    assert "Nothing was changed." in response.content.decode()
    assert response["X-Frame-Options"] == "DENY"
    assert _state() == ("pending", None, 0)


def test_an_expired_request_opened_late_is_a_410_page(browser, started, member):
    path, _ = started
    AgentAuthorization.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    browser.force_login(member)
    response = browser.get(path)
    assert response.status_code == 410
    html = response.content.decode()
    assert "This request has expired: nothing was granted." in html
    assert 'name="decision"' not in html


def test_a_request_another_member_approved_cannot_be_decided_again(browser, started, member, route):
    path, _ = started
    browser.force_login(member)
    browser.get(path)  # both have the page open
    first = MembershipFactory(project=route.project, role=Membership.Role.EDITOR).user
    first_browser = Client(enforce_csrf_checks=True)
    first_browser.force_login(first)
    first_browser.get(path)
    _post(first_browser, path, {"decision": "approve", "routes": ["store-assistant"]})
    before = _state()
    response = _post(browser, path, {"decision": "deny"})
    assert response.status_code == 409
    assert "This request has already been approved: your answer was not recorded." in response.content.decode()
    assert _state() == before
    assert AgentAuthorization.objects.get().decided_by == first


def test_a_request_with_a_tampered_decision_changes_nothing(browser, started, member):
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    response = _post(browser, path, {"decision": "approve-all", "routes": ["store-assistant"]})
    assert response.status_code == 400
    assert "Choose Approve or Deny. Nothing was changed." in response.content.decode()
    assert _state() == ("pending", None, 0)


def test_another_method_is_an_html_405(browser, started, member):
    path, _ = started
    browser.force_login(member)
    response = browser.options(path)
    assert response.status_code == 405
    assert response["Allow"] == "GET, POST"
    assert response["Content-Type"].startswith("text/html")
    assert _state() == ("pending", None, 0)


def test_a_login_form_without_its_csrf_token_is_refused_as_an_html_page(browser, started):
    path, _ = started
    response = browser.post("/agent-auth/login", {"username": "x", "password": "y", "next": path})
    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")
    assert "Your answer was not accepted" in response.content.decode()


def test_the_json_api_keeps_json_errors(api_client):
    response = api_client.get("/agent-auth/v1/no-such-endpoint")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_a_request_whose_code_was_used_reads_as_approved(api_client, browser, started, member):
    path, verifier = started
    browser.force_login(member)
    browser.get(path)
    location = urlsplit(_post(browser, path, {"decision": "approve", "routes": ["store-assistant"]})["Location"])
    api_client.post("/agent-auth/v1/token", {
        "grant_type": "authorization_code", "client_app_id": AgentAuthorization.objects.get().client.app_id,
        "code": parse_qs(location.query)["code"][0], "redirect_uri": REDIRECT_URI, "code_verifier": verifier,
    }, format="json")
    response = browser.get(path)
    assert response.status_code == 200
    assert "This request has already been approved. You can close this page." in response.content.decode()
    assert AgentAuthorization.objects.get().status == "exchanged"


def test_a_csrf_refusal_elsewhere_is_not_the_sign_in_page(browser):
    response = browser.post("/admin/login/", {"username": "x", "password": "y"})
    assert response.status_code == 403
    assert "Your answer was not accepted" not in response.content.decode()


def _page_tokens(api_client, browser, started, member) -> dict:
    """The agent host's tokens after `member` approved on the page."""
    path, verifier = started
    browser.force_login(member)
    browser.get(path)
    location = urlsplit(_post(browser, path, {"decision": "approve", "routes": ["store-assistant"]})["Location"])
    return api_client.post("/agent-auth/v1/token", {
        "grant_type": "authorization_code", "client_app_id": AgentAuthorization.objects.get().client.app_id,
        "code": parse_qs(location.query)["code"][0], "redirect_uri": REDIRECT_URI, "code_verifier": verifier,
    }, format="json").json()


@pytest.mark.parametrize("leave", ["membership_deleted", "account_deactivated", "account_deleted"])
def test_a_session_approved_on_the_page_ends_when_its_approver_leaves_the_project(api_client, browser, started,
                                                                                   member, leave):
    """The session acts for the account that approved it: once that account is no longer a member
    (or no longer active), its agent reads and refreshes nothing more."""
    tokens = _page_tokens(api_client, browser, started, member)
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {tokens['access_token']}"}
    assert api_client.get("/agent-api/v1/workspaces/store-assistant/bootstrap", **bearer).status_code == 200
    if leave == "membership_deleted":
        Membership.objects.filter(user=member).delete()
    elif leave == "account_deleted":
        member.delete()  # the authorization's decided_by becomes NULL
        assert AgentAuthorization.objects.get().decided_by_id is None
    else:
        member.is_active = False
        member.save(update_fields=["is_active"])
    before = AgentSession.objects.values_list("access_token_hash", "revoked_at").get()
    response = api_client.get("/agent-api/v1/workspaces/store-assistant/bootstrap", **bearer)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    refreshed = api_client.post("/agent-auth/v1/token", {
        "grant_type": "refresh_token", "client_app_id": tokens["client_app_id"],
        "refresh_token": tokens["refresh_token"]}, format="json")
    assert refreshed.status_code == 400
    assert refreshed.json()["error"] == "invalid_grant"
    assert AgentSession.objects.values_list("access_token_hash", "revoked_at").get() == before


def test_a_session_approved_on_the_page_holds_while_its_approver_is_a_member(api_client, browser, started, member):
    tokens = _page_tokens(api_client, browser, started, member)
    Membership.objects.filter(user=member).update(role=Membership.Role.VIEWER)
    refreshed = api_client.post("/agent-auth/v1/token", {
        "grant_type": "refresh_token", "client_app_id": tokens["client_app_id"],
        "refresh_token": tokens["refresh_token"]}, format="json")
    assert refreshed.status_code == 200
    response = api_client.get("/agent-api/v1/workspaces/store-assistant/bootstrap",
                              HTTP_AUTHORIZATION=f"Bearer {refreshed.json()['access_token']}")
    assert response.status_code == 200


def test_the_console_lists_a_session_whose_approver_left_as_ended_not_active(api_client, browser, started, member,
                                                                              route):
    _page_tokens(api_client, browser, started, member)
    owner = Client()
    owner.force_login(MembershipFactory(project=route.project, role=Membership.Role.OWNER).user)
    listed = owner.get("/admin/agent_auth/agentsession/").content.decode()
    assert '<td class="field-state">Active</td>' in listed
    assert owner.get("/admin/agent_auth/agentsession/", {"state": "active"}).context["cl"].result_count == 1

    Membership.objects.filter(user=member).delete()
    listed = owner.get("/admin/agent_auth/agentsession/").content.decode()
    assert "Ended: the account that approved it is no longer a member of the project (or is inactive)" in listed
    assert '<td class="field-state">Active</td>' not in listed
    assert owner.get("/admin/agent_auth/agentsession/", {"state": "active"}).context["cl"].result_count == 0
    assert owner.get("/admin/agent_auth/agentsession/", {"state": "approver_left"}).context["cl"].result_count == 1


def test_page_decisions_made_before_the_flag_are_marked_by_the_migration(api_client, browser, started, member,
                                                                          route):
    _page_tokens(api_client, browser, started, member)
    backend = session_for(AgentClientFactory(project=route.project, allowed_routes=[route.key])).session
    AgentAuthorization.objects.update(decided_on_page=False)  # as the rows were before the migration
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.migrate([("agent_auth", "0005_session_revoked_by_name")])
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert dict(AgentAuthorization.objects.values_list("decided_by_id", "decided_on_page")) == {
        member.pk: True, None: False}
    assert AgentAuthorization.objects.get(decided_by=None).pk == backend.authorization_id


def test_a_session_whose_approver_left_is_no_task_member_no_active_session_and_its_run_says_so(
        api_client, browser, started, member, route):
    from apps.ledger.models import Run
    from apps.runtime.dashboard import dashboard_projects
    from apps.tasks.errors import TaskInvalid, TaskScopeBlocked
    from apps.tasks.models import Task
    from apps.tasks.services import MemberSpec, PolicySpec, task_create, task_members_verify
    from tests.ledger.helpers import open_turn

    tokens = _page_tokens(api_client, browser, started, member)
    session = AgentSession.objects.get()
    assert open_turn(api_client, tokens["access_token"], route.key).status_code == 200
    owner = MembershipFactory(project=route.project, role=Membership.Role.OWNER).user
    spec = MemberSpec(session_id=str(session.pk), workspace=route.key, client_conversation_id="c-1")
    task, _ = task_create(project=route.project, user=owner, request_id="t-1", members=[spec], policy=PolicySpec())
    [board] = dashboard_projects(user=owner)
    assert board.sessions_active == 1

    Membership.objects.filter(user=member).delete()
    with pytest.raises(TaskInvalid) as invalid:
        task_create(project=route.project, user=owner, request_id="t-2", members=[spec], policy=PolicySpec())
    assert invalid.value.message == "members[0].session_id: The account that approved the session has left the project."
    with pytest.raises(TaskScopeBlocked):
        task_members_verify(task=task)
    task.refresh_from_db()
    assert (task.state, task.blocked_reason) == (
        Task.State.BLOCKED, "the account that approved a member session left the project")
    [board] = dashboard_projects(user=owner)
    assert board.sessions_active == 0
    console = Client()
    console.force_login(owner)
    run = Run.objects.get()
    assert "never completed: the account that approved the session left the project" in console.get(
        f"/admin/ledger/run/{run.pk}/change/").content.decode()
    assert "never completed: the account that approved the session left the project" in console.get(
        "/admin/ledger/run/").content.decode()


def test_a_request_of_a_client_disabled_since_cannot_be_approved_or_denied(browser, started, member, page_client):
    """Disabling a client stops its business backend's decisions at once (401 for its client token):
    the hub's page, where its users decide, is held to the same rule."""
    path, _ = started
    browser.force_login(member)
    browser.get(path)  # the page was open when the operator disabled the client
    page_client.enabled = False
    page_client.save()
    for decision in ({"decision": "approve", "routes": ["store-assistant"]}, {"decision": "deny"}):
        response = _post(browser, path, decision)
        assert response.status_code == 400
        html = response.content.decode()
        assert "This application is disabled in BailingHub" in html
        assert 'name="decision"' not in html
        assert _state() == ("pending", None, 0)


def test_a_request_of_a_disabled_client_offers_no_decision(browser, started, member, page_client):
    path, _ = started
    page_client.enabled = False
    page_client.save()
    browser.force_login(member)
    response = browser.get(path)
    assert response.status_code == 400
    assert 'name="decision"' not in response.content.decode()


def test_a_request_decided_before_its_client_was_disabled_still_reads_as_decided(browser, started, member,
                                                                                 page_client):
    path, _ = started
    browser.force_login(member)
    browser.get(path)
    _post(browser, path, {"decision": "deny"})
    page_client.enabled = False
    page_client.save()
    response = browser.get(path)
    assert response.status_code == 200
    assert "This request has already been denied. You can close this page." in response.content.decode()
    assert "Not decided while disabled" not in response.content.decode()


def test_the_services_refuse_a_disabled_clients_request_whoever_calls_them(started, member, page_client):
    from apps.agent_auth.errors import InvalidClient
    from apps.agent_auth.services import authorization_approve_by_user, authorization_deny_by_user

    page_client.enabled = False
    page_client.save()
    authorization = AgentAuthorization.objects.get()
    with pytest.raises(InvalidClient):
        authorization_approve_by_user(authorization_id=authorization.pk, user=member,
                                      allowed_routes=["store-assistant"], request_host="testserver")
    with pytest.raises(InvalidClient):
        authorization_deny_by_user(authorization_id=authorization.pk, user=member, request_host="testserver")
    assert _state() == ("pending", None, 0)
