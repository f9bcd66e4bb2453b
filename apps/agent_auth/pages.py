"""BailingHub's own authorization page, for projects whose users are BailingHub accounts.

A client points `agent_authorize_url` at `/agent-auth/authorize`; a logged-in member of the
client's project sees the client, the device and the requested routes, then approves (choosing
routes) or denies. CSRF-protected, never framed, never cached, and after a decision it navigates
only to the loopback URL BailingHub generated for the request — no URL is taken from the browser.
"""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse_lazy
from django.utils import timezone
from django.views.decorators.clickjacking import xframe_options_deny
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_http_methods

from apps.agent_auth.errors import AlreadyProcessed, AuthorizationExpired, InvalidRequest
from apps.agent_auth.models import AgentAuthorization
from apps.agent_auth.selectors import authorization_page_route_choices
from apps.agent_auth.services import authorization_approve_by_user, authorization_deny_by_user
from apps.projects.selectors import project_role

LOGIN_URL = reverse_lazy("agent-auth-login")


def _page_headers(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    response["Content-Security-Policy"] = "frame-ancestors 'none'"
    # The page URL names the authorization; never pass it on to the next page.
    response["Referrer-Policy"] = "no-referrer"
    return response


def _authorization_or_404(request: HttpRequest) -> AgentAuthorization:
    try:
        authorization_id = uuid.UUID(request.GET.get("authorization_id", ""))
    except ValueError as exc:
        raise Http404 from exc
    authorization = (
        AgentAuthorization.objects.select_related("client", "client__project")
        .filter(pk=authorization_id)
        .first()
    )
    if authorization is None:
        raise Http404
    return authorization


def _render(request: HttpRequest, authorization: AgentAuthorization, *, notice: str = "") -> HttpResponse:
    choices = authorization_page_route_choices(authorization=authorization, user=request.user)
    chosen = {route.key for route in choices}
    context = {
        "authorization": authorization,
        "client": authorization.client,
        "status": authorization.status_at(timezone.now()),
        "is_member": project_role(user=request.user, project=authorization.client.project) is not None,
        "choices": choices,
        "unavailable": [key for key in authorization.requested_routes if key not in chosen],
        "notice": notice,
    }
    return _page_headers(render(request, "agent_auth/authorize.html", context))


@xframe_options_deny
@require_http_methods(["GET", "POST"])
@csrf_protect
@login_required(login_url=LOGIN_URL)
def authorization_page(request: HttpRequest) -> HttpResponse:
    authorization = _authorization_or_404(request)
    if request.method == "GET":
        return _render(request, authorization)
    decision = request.POST.get("decision")
    try:
        if decision == "approve":
            routes = request.POST.getlist("routes")
            if not routes:
                return _render(request, authorization, notice="Choose at least one route to approve.")
            redirect_uri = authorization_approve_by_user(
                authorization_id=authorization.pk, user=request.user, allowed_routes=routes
            )
        elif decision == "deny":
            redirect_uri = authorization_deny_by_user(authorization_id=authorization.pk, user=request.user)
        else:
            raise InvalidRequest("decision must be approve or deny.")
    except (AlreadyProcessed, AuthorizationExpired):
        authorization.refresh_from_db()
        return _render(request, authorization)
    return _page_headers(HttpResponseRedirect(redirect_uri))


class AgentAuthLoginView(LoginView):
    template_name = "agent_auth/login.html"
    # Only when there is no safe `next` (LoginView drops off-site ones).
    next_page = reverse_lazy("admin:index")

    def dispatch(self, request, *args, **kwargs):
        return _page_headers(super().dispatch(request, *args, **kwargs))


login_page = xframe_options_deny(AgentAuthLoginView.as_view())
