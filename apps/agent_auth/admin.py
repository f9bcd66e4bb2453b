"""Operator screens for Agent Auth. Tokens are shown once, in a message; sessions and
authorizations change only through services (revoke action), never through a form."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IS_POPUP_VAR
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.forms.renderers import BaseRenderer
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import ngettext

from apps.agent_auth.models import ROUTES_NOT_IN_PROJECT, AgentAuthorization, AgentClient, AgentSession
from apps.agent_auth.selectors import SessionEnd, session_approver_current_expression, session_end, session_live_q
from apps.agent_auth.services import agent_client_token_rotate, session_revoke
from apps.core.bidi import IdentifierFieldsMixin, identifier_html, text_html
from apps.core.secret_messages import secret_message
from apps.core.timefmt import local_time
from apps.core.validators import uuid_parse, validate_shown_text
from apps.projects.admin import ProjectScopedAdminMixin, ReadOnlyAdminMixin
from apps.projects.models import Project
from apps.routes.admin import (
    ROUTE_CHOICES_MAX,
    RouteKeySearchSelectMultiple,
    RouteKeysField,
    project_routes,
    route_key_label,
    routes_listed,
)
from apps.routes.models import Route


@dataclass(frozen=True)
class ConnectionSnippet:
    route: str
    json: str  # for an SDK's configuration
    mcp_login: str  # the MCP bridge's sign-in (clients/mcp), the same three values


def connection_snippets(*, client: AgentClient, hub_url: str) -> list[ConnectionSnippet]:
    """How an agent host connects, per allowed route, without a secret: the agent signs in through
    the browser. The sign-in line was only in the README and `make run`'s first output."""
    return [
        ConnectionSnippet(
            route=key,
            json=json.dumps({"hubUrl": hub_url, "clientAppId": client.app_id, "workspace": key}, indent=2,
                            ensure_ascii=False),
            mcp_login=shlex.join(["bailinghub-mcp", "login", "--hub", hub_url, "--client-app-id", client.app_id,
                                  "--workspace", key]),
        )
        for key in (client.allowed_routes or [])
    ]


def _token_message(request: HttpRequest, client: AgentClient, token: str, verb: str) -> None:
    secret_message(request, lead=f"{verb} client token for {client.app_id} — copy it now, it will not be shown again",
                   secret=token, element_id="client-token")


def own_authorize_url(request: HttpRequest) -> str:
    """This hub's authorization page as agents must be sent to it. Plain http is accepted only on
    an IP-literal loopback (see validate_agent_authorize_url), so a local `localhost` becomes 127.0.0.1."""
    url = request.build_absolute_uri(reverse("agent-auth-authorize"))
    parts = urlsplit(url)
    if parts.scheme == "http" and parts.hostname == "localhost":
        url = urlunsplit(parts._replace(netloc=parts.netloc.replace("localhost", "127.0.0.1", 1)))
    return url


class AuthorizeUrlWidget(forms.TextInput):
    """The URL field with a one-click choice of BailingHub's own authorization page."""

    def __init__(self, *, own_url: str, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs={"class": "vTextField", "style": "width: 34em", **(attrs or {})})
        self.own_url = own_url

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None,
               renderer: BaseRenderer | None = None) -> SafeString:
        field = super().render(name, value, attrs, renderer)
        field_id = (attrs or {}).get("id", f"id_{name}")
        return format_html(
            '<div>{} <button type="button" class="button" id="use-own-authorize-page" data-url="{}" '
            "onclick=\"document.getElementById('{}').value = this.dataset.url\">Use this hub's page</button>"
            '<div class="help" style="margin-left:0">This hub\'s own page, for projects whose users sign in to '
            "BailingHub itself: <code>{}</code></div></div>",
            field, self.own_url, field_id, self.own_url,
        )


def _missing_object_redirect(model_admin: admin.ModelAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """Django's own answer to a missing object (a message and the admin index); the method is
    private, so the stubs do not declare it."""
    response: HttpResponse = model_admin._get_obj_does_not_exist_redirect(  # type: ignore[attr-defined]
        request, model_admin.opts, object_id)
    return response


ALLOWED_ROUTES_HELP = "The routes of the client's project that its agents may ask for."


class RouteCheckboxes(forms.CheckboxSelectMultiple):
    """A new client's route ticks, each naming (``data-projects``) the projects with a route of its key:
    the form's script then shows only the routes of the project chosen above it. The save still
    refuses another project's key (AgentClient.clean), for a browser without the script."""

    def __init__(self, projects_by_key: dict[str, list[str]]) -> None:
        super().__init__()
        self.projects_by_key = projects_by_key

    def create_option(self, name: str, value: Any, label: Any, selected: Any, index: int,
                      subindex: int | None = None, attrs: dict[str, Any] | None = None) -> dict[str, Any]:
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        option["attrs"]["data-projects"] = " ".join(self.projects_by_key.get(str(value), []))
        return option

    class Media:
        js = ["agent_auth/client_routes.js"]


def _add_form_project(request: HttpRequest) -> str | None:
    """The project a new client's form is for, when it is known: on a posted form the project it
    names, on an opened one the one the address names (``?project=``), either if the operator may
    change it; else the one project they may change. The routes offered are that project's, on the
    page and in the save alike: a save that offered every project's routes could swap the ticked
    boxes for the searched field past ROUTE_CHOICES_MAX and drop them. Other keys are refused by
    AgentClient.clean, naming them."""
    editable = {str(pk) for pk in ProjectScopedAdminMixin.editable_project_ids(request)}
    named = (request.POST if request.method == "POST" else request.GET).get("project", "")
    if named in editable or (request.user.is_superuser and _is_project(named)):
        return named
    return next(iter(editable)) if len(editable) == 1 and not request.user.is_superuser else None


def _is_project(value: str) -> bool:
    parsed = uuid_parse(value)
    return parsed is not None and Project.objects.filter(pk=parsed).exists()


def _route_choices(routes: list[Route]) -> list[tuple[str, str]]:
    several_projects = len({route.project_id for route in routes}) > 1
    labels: dict[str, list[str]] = {}
    for route in routes:
        label = route_key_label(route) + (f" · {route.project.name}" if several_projects else "")
        labels.setdefault(route.key, []).append(label)
    return [(key, " / ".join(names)) for key, names in labels.items()]


def allowed_routes_field(request: HttpRequest, client: AgentClient | None) -> forms.Field | None:
    """The allowed routes of `client`: ticked from its project's routes, or past ROUTE_CHOICES_MAX
    picked by searching them; either takes only its project's. A new client's are ticked from the
    routes of the projects the operator may change (its project is picked on the same form), or,
    past ROUTE_CHOICES_MAX of them, picked on its page once it is saved (None)."""
    if client is not None:
        routes = project_routes(client.project_id)
        listed = routes_listed(routes)
        if listed is None:
            return RouteKeysField(routes, label="Allowed routes", required=False, help_text=ALLOWED_ROUTES_HELP,
                                  widget=RouteKeySearchSelectMultiple(project_id=client.project_id))
    else:
        queryset = Route.objects.select_related("project").only("id", "key", "name", "project__name").order_by(
            "project__name", "key")
        project_id = _add_form_project(request)
        if project_id is not None:
            queryset = queryset.filter(project_id=project_id)
        elif not request.user.is_superuser:
            queryset = queryset.filter(project__in=ProjectScopedAdminMixin.editable_project_ids(request))
        listed = routes_listed(queryset)
        if listed is None:
            return None
        projects_by_key: dict[str, list[str]] = {}
        for route in listed:
            projects_by_key.setdefault(route.key, []).append(str(route.project_id))
        return forms.MultipleChoiceField(label="Allowed routes", choices=_route_choices(listed), required=False,
                                         error_messages={"invalid_choice": ROUTES_NOT_IN_PROJECT},
                                         widget=RouteCheckboxes(projects_by_key),
                                         help_text="The routes of the project chosen above that its agents may ask "
                                                   "for.")
    return forms.MultipleChoiceField(label="Allowed routes", choices=_route_choices(listed), required=False,
                                     widget=forms.CheckboxSelectMultiple, help_text=ALLOWED_ROUTES_HELP)


@admin.register(AgentClient)
class AgentClientAdmin(IdentifierFieldsMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    list_display = ["app_id", "name", "project", "enabled", "routes", "client_token_rotated_at"]
    list_filter = ["enabled", "project"]
    search_fields = ["app_id", "name"]
    list_select_related = ["project"]
    readonly_fields = ["client_token_rotated_at", "created_at", "updated_at"]
    fields = ["project", "app_id", "name", "enabled", "allowed_routes", "agent_authorize_url",
              "authorization_rate_limit", "client_token_rotated_at", "created_at", "updated_at"]
    actions = ["rotate_client_token"]
    change_form_template = "agent_auth/admin/agentclient_change_form.html"
    # Left to right as stored (apps.core.bidi): the list's column; the form keeps its input.
    identifier_fields = ("app_id",)

    @admin.display(description="Routes")
    def routes(self, obj: AgentClient) -> str:
        return ", ".join(obj.allowed_routes or [])

    def _allowed_routes_field(self, request: HttpRequest, obj: AgentClient | None) -> forms.Field | None:
        # get_fields and get_form both need it, for the same client, in one request.
        cache = request.__dict__.setdefault("_bh_allowed_routes_field", {})
        key = obj.pk if obj is not None else None
        if key not in cache:
            cache[key] = allowed_routes_field(request, obj)
        return cache[key]  # type: ignore[no-any-return]

    def get_fields(self, request: HttpRequest, obj: AgentClient | None = None) -> Any:
        fields = list(super().get_fields(request, obj))
        if obj is None and "allowed_routes" in fields and self._allowed_routes_field(request, None) is None:
            fields[fields.index("allowed_routes")] = "routes_after_save"
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: AgentClient | None = None) -> list[str]:
        # A client stays in its project, as a route does: moved, its sessions (approved by the old
        # project's business backend for the old project's users) resolved their route keys in the
        # new project, and the new project's members read the old one's sessions and authorizations.
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "project"] if obj is not None else [*fields, "routes_after_save"]

    @admin.display(description="Allowed routes")
    def routes_after_save(self, obj: AgentClient) -> str:
        return (f"Picked on the client's page once it is saved: past {ROUTE_CHOICES_MAX} routes they are found "
                "by searching its project's routes.")

    def get_form(self, request: HttpRequest, obj: AgentClient | None = None, change: bool = False,
                 **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        field = self._allowed_routes_field(request, obj)
        if "allowed_routes" in form.base_fields and field is not None:
            form.base_fields["allowed_routes"] = field
        return form

    def formfield_for_dbfield(self, db_field: models.Field[Any, Any], request: HttpRequest,
                              **kwargs: Any) -> forms.Field | None:
        if db_field.name == "allowed_routes":
            # Its choices depend on the client (get_form), which this is not told.
            return forms.MultipleChoiceField(label="Allowed routes", required=False)
        if db_field.name == "agent_authorize_url":
            kwargs["widget"] = AuthorizeUrlWidget(own_url=own_authorize_url(request))
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        editable = self.editable_project_ids(request)
        if "project" not in initial and len(editable) == 1:
            initial["project"] = next(iter(editable))
        return initial

    def save_model(self, request: HttpRequest, obj: AgentClient, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            _token_message(request, obj, agent_client_token_rotate(client=obj), "New")
        if not obj.allowed_routes:  # saved, but not yet of use: say so rather than let it fail at sign-in
            messages.warning(request, f"{obj.name} allows no routes: its agents cannot be authorized for any "
                                      "workspace until you choose at least one under Allowed routes.")

    def response_add(self, request: HttpRequest, obj: AgentClient,
                     post_url_continue: str | None = None) -> HttpResponse:
        # The new client's own page: its one-time token, its connection snippet, its rotate button.
        response = super().response_add(request, obj, post_url_continue)
        if "_addanother" in request.POST or IS_POPUP_VAR in request.POST:
            return response
        return HttpResponseRedirect(self._change_url(obj))

    def _change_url(self, obj: AgentClient) -> str:
        return reverse(f"{self.admin_site.name}:agent_auth_agentclient_change", args=[obj.pk])

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra_context = dict(extra_context or {})
        client = self.get_object(request, object_id)
        if client is not None:
            extra_context["connection_snippets"] = connection_snippets(
                client=client, hub_url=request.build_absolute_uri("/").rstrip("/")
            )
            extra_context["can_rotate"] = self.has_change_permission(request, client)
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self) -> list[URLPattern]:
        rotate = path("<path:object_id>/rotate-token/", self.admin_site.admin_view(self.rotate_token_view),
                      name="agent_auth_agentclient_rotate_token")
        return [rotate, *super().get_urls()]

    def rotate_token_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        client = self.get_object(request, object_id)
        if client is None:
            return _missing_object_redirect(self, request, object_id)
        if request.method != "POST":
            return HttpResponseRedirect(self._change_url(client))
        if not self.has_change_permission(request, client):
            raise PermissionDenied
        self._rotate(request, client)
        return HttpResponseRedirect(self._change_url(client))

    @admin.action(description="Rotate the client token (the old one stops working at once)",
                  permissions=["change"])
    def rotate_client_token(self, request: HttpRequest, queryset: QuerySet[AgentClient]) -> None:
        editable = self.editable_project_ids(request)
        for client in queryset:
            if request.user.is_superuser or client.project_id in editable:
                self._rotate(request, client)

    def _rotate(self, request: HttpRequest, client: AgentClient) -> None:
        """A new client token, shown once, and a line in the client's history: who rotated it, when."""
        token = agent_client_token_rotate(client=client)
        self.log_change(request, client, "Rotated the client token: the previous one stopped working.")
        _token_message(request, client, token, "Rotated")


class RevokeReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=400, widget=forms.TextInput(attrs={"size": 60, "class": "vTextField"}),
        error_messages={"required": "Give a reason: it is kept with the session for the audit trail."},
        validators=[validate_shown_text],  # shown in the session list beside the words "Revoked by …"
    )


class SessionStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("active", "Active"), ("revoked", "Revoked"), ("expired", "Expired"),
                ("approver_left", "Its approver left (or its authorization was deleted)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        if self.value() == "active":
            return queryset.filter(session_live_q(now))
        if self.value() == "approver_left":
            return queryset.filter(revoked_at__isnull=True, refresh_expires_at__gt=now, approver_current=False)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, refresh_expires_at__lte=now)
        return queryset


_SESSION_ENDS = {
    SessionEnd.EXPIRED: "Expired",
    SessionEnd.AUTHORIZATION_DELETED: "Ended: its authorization record was deleted, so nothing says who approved it",
    SessionEnd.APPROVER_LEFT: ("Ended: the account that approved it is no longer a member of the project (or is "
                               "inactive)"),
}


@admin.register(AgentSession)
class AgentSessionAdmin(IdentifierFieldsMixin, ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "client__project"
    list_display = ["device_label", "on_behalf_of", "app", "routes", "last_used_at", "state"]
    list_filter = [SessionStateFilter, "client"]
    search_fields = ["device_label", "principal_id", "on_behalf_of", "client__app_id"]
    list_select_related = ["client", "client__project"]
    actions = ["revoke_sessions"]
    readonly_fields = fields = (
        "client", "device_label", "principal", "principal_id", "audience", "on_behalf_of", "allowed_routes",
        "created_at", "last_used_at", "access_expires_at", "refresh_expires_at", "revoked_at", "revoker",
        "revoked_reason", "authorization",
    )
    # Chosen by the agent host or the business backend: left to right as stored (apps.core.bidi).
    identifier_fields = ("principal_id", "on_behalf_of")

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # The dashboard's sessions tile opens one project's sessions. The list is scoped to the
        # operator's projects already, so the parameter shows nothing more; it has no sidebar
        # filter, which would name every project.
        return lookup == "client__project__id__exact" or super().lookup_allowed(lookup, value, request)

    @admin.display(description="Routes")
    def routes(self, obj: AgentSession) -> str:
        return ", ".join(obj.allowed_routes or [])

    @admin.display(description="Revoked by")
    def revoker(self, obj: AgentSession) -> str:
        """Who ended the session; an operator by name (sessions revoked before the name was kept carry
        it at the start of the reason)."""
        if obj.revoked_at is None:
            return "—"
        who = obj.get_revoked_by_display()
        return format_html("{}: {}", who, text_html(obj.revoked_by_name)) if obj.revoked_by_name else who

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentSession]:
        queryset: QuerySet[AgentSession] = super().get_queryset(request)
        return queryset.annotate(approver_current=session_approver_current_expression())

    @admin.display(description="State")
    def state(self, obj: AgentSession) -> str:
        if obj.revoked_at is not None:
            if obj.revoked_by_name:
                return format_html("Revoked by {}: {}", text_html(obj.revoked_by_name), text_html(obj.revoked_reason))
            return format_html("Revoked ({}): {}", obj.get_revoked_by_display(), text_html(obj.revoked_reason))
        end = session_end(session=obj, now=timezone.now(), approver_current=getattr(obj, "approver_current", True))
        return _SESSION_ENDS[end] if end is not None else "Active"

    @admin.display(description="Client", ordering="client__app_id")
    def app(self, obj: AgentSession) -> SafeString:
        return identifier_html(obj.client.app_id)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.is_staff and (request.user.is_superuser or bool(self.editable_project_ids(request)))

    change_form_template = "agent_auth/admin/agentsession_change_form.html"

    def _revoke_page(self, request: HttpRequest, sessions: Iterable[AgentSession], form: RevokeReasonForm, *,
                     action: str = "") -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Revoke agent sessions",
            "opts": self.model._meta,
            "sessions": sessions,
            "form": form,
            "action": action,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "agent_auth/admin/session_revoke.html", context)

    def _revoke(self, request: HttpRequest, sessions: Iterable[AgentSession], reason: str) -> int:
        revoked = 0
        for session in sessions:
            if session.revoked_at is None:
                session_revoke(session=session, revoked_by=AgentSession.RevokedBy.OPERATOR, reason=reason,
                               revoked_by_name=request.user.get_username())
                revoked += 1
        self.message_user(request, ngettext("Revoked %(count)d session.", "Revoked %(count)d sessions.", revoked)
                          % {"count": revoked}, messages.SUCCESS)
        return revoked

    @admin.action(description="Revoke the selected sessions…", permissions=["revoke"])
    def revoke_sessions(self, request: HttpRequest, queryset: QuerySet[AgentSession]) -> TemplateResponse | None:
        if not request.user.is_superuser:
            queryset = queryset.filter(client__project__in=self.editable_project_ids(request))
        form = RevokeReasonForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            self._revoke(request, queryset, form.cleaned_data["reason"])
            return None
        return self._revoke_page(request, queryset, form, action="revoke_sessions")

    def _may_revoke(self, request: HttpRequest, session: AgentSession) -> bool:
        return session.revoked_at is None and (
            request.user.is_superuser or session.client.project_id in self.editable_project_ids(request)
        )

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        session = self.get_object(request, object_id)
        extra_context = {**(extra_context or {}),
                         "can_revoke": session is not None and self._may_revoke(request, session)}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self) -> list[URLPattern]:
        revoke = path("<path:object_id>/revoke/", self.admin_site.admin_view(self.revoke_view),
                      name="agent_auth_agentsession_revoke")
        return [revoke, *super().get_urls()]

    def revoke_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One session's revoke page, opened from the session's own page."""
        session = self.get_object(request, object_id)
        if session is None:
            return _missing_object_redirect(self, request, object_id)
        if session.revoked_at is not None:
            # Opened again from a page read before the revocation (another tab, the back button): it
            # said "your role does not allow this" to the project's owner.
            messages.info(request, format_html("This session was already revoked, {}.",
                                               local_time(session.revoked_at, "Y-m-d H:i:s T")))
            return HttpResponseRedirect(reverse(f"{self.admin_site.name}:agent_auth_agentsession_change",
                                                args=[session.pk]))
        if not self._may_revoke(request, session):
            raise PermissionDenied
        form = RevokeReasonForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            self._revoke(request, [session], form.cleaned_data["reason"])
            return HttpResponseRedirect(reverse(f"{self.admin_site.name}:agent_auth_agentsession_change",
                                                args=[session.pk]))
        return self._revoke_page(request, [session], form)


@admin.register(AgentAuthorization)
class AgentAuthorizationAdmin(IdentifierFieldsMixin, ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "client__project"
    # Between the sidebar and the filters, at 1366 px, about 720 px are left: seven columns, three of them
    # dates kept on one line, ran past them and Decided at was cut off. The expiry reads under the creation
    # time, the device under the client and the decision time under the status; the page has them all.
    list_display = ["created", "client_device", "status_decided", "requested"]
    list_filter = ["status", "client"]
    search_fields = ["device_label", "client__app_id", "on_behalf_of"]
    list_select_related = ["client", "client__project"]
    readonly_fields = fields = (
        "client", "status", "device_label", "requested_routes", "redirect_uri", "requester_ip", "expires_at",
        "decided_at", "decided_by_name", "principal", "on_behalf_of", "allowed_routes", "code_expires_at",
        "code_used_at", "created_at",
    )
    identifier_fields = ("on_behalf_of",)

    @admin.display(description="Decided by")
    def decided_by_name(self, obj: AgentAuthorization) -> str:
        # The name, not the admin's link to the user's page: only a site administrator may open that
        # page, and the operator who decided followed the link to "Not allowed".
        return obj.decided_by.get_username() if obj.decided_by else "—"

    @admin.display(description="Created · expires", ordering="created_at")
    def created(self, obj: AgentAuthorization) -> SafeString:
        return format_html('{}<br><span class="bh-muted">expires {}</span>', local_time(obj.created_at),
                           local_time(obj.expires_at))

    @admin.display(description="Client · device", ordering="client")
    def client_device(self, obj: AgentAuthorization) -> SafeString:
        return format_html('{} ({})<br><span class="bh-muted">{}</span>', text_html(obj.client.name),
                           identifier_html(obj.client.app_id), text_html(obj.device_label))

    @admin.display(description="Status · decided", ordering="status")
    def status_decided(self, obj: AgentAuthorization) -> SafeString:
        decided = f"decided {local_time(obj.decided_at)}" if obj.decided_at else "not decided"
        return format_html('{}<br><span class="bh-muted">{}</span>', obj.get_status_display(), decided)

    @admin.display(description="Requested routes")
    def requested(self, obj: AgentAuthorization) -> str:
        return ", ".join(obj.requested_routes or [])
