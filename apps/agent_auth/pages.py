"""BailingHub's own authorization page, for projects whose users are BailingHub accounts.

A client points `agent_authorize_url` at `/agent-auth/authorize` (at an address of this hub,
selectors.client_sign_in_page: only such a client's requests are decided here — a client whose
page is a business system's has its backend decide, for principals of its own); a logged-in
member of the client's project sees the client, the device and the requested routes, then
approves (choosing routes) or denies. CSRF-protected, never framed, never cached, and after a
decision it navigates only to the loopback URL BailingHub generated for the request — no URL is
taken from the browser.

These pages are for people: every refusal is an HTML page that says what happened and what to
do, with the HTTP status of the error, and a refused decision changes nothing.
"""

from __future__ import annotations

import uuid
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.views import csrf as django_csrf
from django.views.decorators.clickjacking import xframe_options_deny
from django.views.decorators.csrf import csrf_protect

from apps.agent_auth.errors import (
    AccessDenied,
    AlreadyProcessed,
    AuthorizationExpired,
    ForeignClient,
    InvalidClient,
    InvalidRequest,
    NotFound,
)
from apps.agent_auth.models import AgentAuthorization
from apps.agent_auth.selectors import SignInPage, authorization_page_route_choices, client_sign_in_page
from apps.agent_auth.services import (
    CLIENT_DISABLED_MESSAGE,
    authorization_approve_by_user,
    authorization_deny_by_user,
)
from apps.core.errors import ApiError
from apps.core.middleware import body_timed_out
from apps.core.request_body import BODY_TIMED_OUT
from apps.projects.selectors import project_role

_Response = TypeVar("_Response", bound=HttpResponseBase)


class AuthenticatedHttpRequest(HttpRequest):
    """A request behind login_required: its user is a signed-in account, never AnonymousUser."""

    user: User

LOGIN_URL = reverse_lazy("agent-auth-login")
PAGE_PATHS = ("/agent-auth/authorize", "/agent-auth/login")

NOT_FOUND_MESSAGE = ("This sign-in request does not exist. Check that you opened the whole link the agent "
                     "gave you, or start again from the agent.")
EXPIRED_MESSAGE = "This request has expired: nothing was granted. Start again from the agent."
# Neither names the application: the page may be open to someone outside its project.
FOREIGN_CLIENT_MESSAGE = ("This application sends its users to its own site to approve agents, not to "
                          "BailingHub: this page cannot decide its requests. Start again from the agent, which "
                          "opens the right page. Nothing was changed.")
UNKNOWN_HOST_MESSAGE = ("This application's sign-in page is set to BailingHub's page at {host}, an address this "
                        "hub does not know as its own, so this page cannot decide its requests. If {host} is this "
                        "hub, an administrator adds it to ALLOWED_HOSTS. Nothing was changed.")
NOT_MEMBER_MESSAGE = ("You are signed in as {user}, who is not a member of the project this application "
                      "belongs to, so you cannot decide this request. Nothing was changed.")


def _page_headers(response: _Response) -> _Response:
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    response["Content-Security-Policy"] = "frame-ancestors 'none'"
    # `same-origin`: the page URL names the authorization, so no other site (the loopback callback
    # included) gets it as a Referer — while the page's own form posts keep a real Origin, which
    # Django's CSRF check needs (`no-referrer` made browsers send `Origin: null`).
    response["Referrer-Policy"] = "same-origin"
    return response


def _error_page(request: HttpRequest, *, status: int, title: str, message: str,
                authorization: AgentAuthorization | None = None) -> HttpResponse:
    login_url = ""
    if authorization is not None:
        login_url = f"{reverse('agent-auth-login')}?{urlencode({'next': request.get_full_path()})}"
    context = {"title": title, "message": message, "login_url": login_url}
    return _page_headers(render(request, "agent_auth/error.html", context, status=status))


def _authorization(request: HttpRequest) -> AgentAuthorization | None:
    try:
        authorization_id = uuid.UUID(request.GET.get("authorization_id", ""))
    except ValueError:
        return None
    return (
        AgentAuthorization.objects.select_related("client", "client__project")
        .filter(pk=authorization_id)
        .first()
    )


def _status_label(authorization: AgentAuthorization) -> str:
    # An exchanged request is an approved one whose code the agent has already used.
    return "approved" if authorization.status == AgentAuthorization.Status.EXCHANGED else authorization.status


def _render(request: AuthenticatedHttpRequest, authorization: AgentAuthorization, *, notice: str = "",
            status: int = 200) -> HttpResponse:
    choices = authorization_page_route_choices(authorization=authorization, user=request.user)
    chosen = {route.key for route in choices}
    context = {
        "authorization": authorization,
        "client": authorization.client,
        "status": authorization.status_at(timezone.now()),
        "status_label": _status_label(authorization),
        "choices": choices,
        "unavailable": [key for key in authorization.requested_routes if key not in chosen],
        "notice": notice,
    }
    return _page_headers(render(request, "agent_auth/authorize.html", context, status=status))


def _refusal(request: AuthenticatedHttpRequest, authorization: AgentAuthorization, error: ApiError) -> HttpResponse:
    """The page for a decision the services refused; the row is re-read so the page shows its state now."""
    authorization.refresh_from_db()
    if isinstance(error, ForeignClient):
        return _foreign(request, authorization)
    if isinstance(error, AccessDenied):
        return _error_page(request, status=403, title="You cannot decide this request",
                           message=NOT_MEMBER_MESSAGE.format(user=request.user.get_username()),
                           authorization=authorization)
    if isinstance(error, NotFound):
        return _error_page(request, status=404, title="Request not found", message=NOT_FOUND_MESSAGE)
    if isinstance(error, InvalidClient):
        return _disabled(request)
    if isinstance(error, AuthorizationExpired):
        return _render(request, authorization, notice=EXPIRED_MESSAGE, status=410)
    if isinstance(error, AlreadyProcessed):
        return _render(request, authorization, status=409,
                       notice=f"This request has already been {_status_label(authorization)}: your answer was not "
                              "recorded. You can close this page.")
    return _render(request, authorization, notice=f"{error.message} Nothing was changed.", status=error.status)


def _foreign(request: HttpRequest, authorization: AgentAuthorization) -> HttpResponse:
    page = client_sign_in_page(authorization.client, request_host=request.get_host())
    message = (UNKNOWN_HOST_MESSAGE.format(host=urlsplit(authorization.client.agent_authorize_url).netloc)
               if page == SignInPage.UNKNOWN_HOST else FOREIGN_CLIENT_MESSAGE)
    return _error_page(request, status=403, title="Not decided here", message=message)


def _disabled(request: HttpRequest) -> HttpResponse:
    return _error_page(request, status=InvalidClient.status, title="Not decided while disabled",
                       message=CLIENT_DISABLED_MESSAGE)


def _decide(request: AuthenticatedHttpRequest, authorization: AgentAuthorization) -> str:
    decision = request.POST.get("decision")
    if decision == "approve":
        routes = request.POST.getlist("routes")
        if not routes:
            raise InvalidRequest("Choose at least one route to approve.")
        return authorization_approve_by_user(authorization_id=authorization.pk, user=request.user,
                                             allowed_routes=routes, request_host=request.get_host())
    if decision == "deny":
        return authorization_deny_by_user(authorization_id=authorization.pk, user=request.user,
                                          request_host=request.get_host())
    raise InvalidRequest("Choose Approve or Deny.")


@xframe_options_deny
@csrf_protect
@login_required(login_url=LOGIN_URL)
def authorization_page(request: AuthenticatedHttpRequest) -> HttpResponse:
    if request.method not in ("GET", "POST"):
        response = _error_page(request, status=405, title="Not allowed",
                               message="Open this page from the link the agent gave you.")
        response["Allow"] = "GET, POST"
        return response
    authorization = _authorization(request)
    if authorization is None:
        return _error_page(request, status=404, title="Request not found", message=NOT_FOUND_MESSAGE)
    if client_sign_in_page(authorization.client, request_host=request.get_host()) != SignInPage.HERE:
        return _foreign(request, authorization)
    if project_role(user=request.user, project=authorization.client.project) is None:
        return _refusal(request, authorization, AccessDenied())
    if not authorization.client.enabled and authorization.status_at(timezone.now()) == "pending":
        return _disabled(request)  # one decided already reads as decided, as the page says it
    if request.method == "GET":
        status = 410 if authorization.status_at(timezone.now()) == "expired" else 200
        return _render(request, authorization, status=status)
    try:
        redirect_uri = _decide(request, authorization)
    except ApiError as error:
        return _refusal(request, authorization, error)
    return _page_headers(HttpResponseRedirect(redirect_uri))


class AgentAuthLoginView(LoginView):
    template_name = "agent_auth/login.html"
    # Only when there is no safe `next` (LoginView drops off-site ones); a URL name, resolved then.
    next_page = "admin:index"

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return _page_headers(super().dispatch(request, *args, **kwargs))


login_page = xframe_options_deny(AgentAuthLoginView.as_view())


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: on these pages the refusal is one of them; elsewhere Django's own page.
    A form whose body stopped arriving while CSRF read it for its token is no CSRF failure: 408."""
    if request.META.get(BODY_TIMED_OUT):
        return body_timed_out(request)
    if not request.path.startswith(PAGE_PATHS):
        return django_csrf.csrf_failure(request, reason=reason)
    return _error_page(
        request, status=403, title="Your answer was not accepted",
        message="The form was sent without this site's security check — it may have been open for too long, "
                "or it came from another site. Nothing was changed. Open the link from the agent again.",
    )
