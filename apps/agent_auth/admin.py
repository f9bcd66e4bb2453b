"""Operator screens for Agent Auth. Tokens are shown once, in a message; sessions and
authorizations change only through services (revoke action), never through a form."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils.html import format_html

from apps.agent_auth.models import AgentAuthorization, AgentClient, AgentSession
from apps.agent_auth.services import agent_client_token_rotate, session_revoke
from apps.projects.admin import ProjectScopedAdminMixin


def connection_snippets(*, client: AgentClient, hub_url: str) -> list[str]:
    """One secret-free JSON snippet per allowed route, for the agent host's configuration."""
    return [
        json.dumps({"hubUrl": hub_url, "clientAppId": client.app_id, "workspace": key}, indent=2, ensure_ascii=False)
        for key in (client.allowed_routes or [])
    ]


def _token_message(request, client: AgentClient, token: str, verb: str) -> None:
    messages.warning(
        request,
        format_html(
            "{} client token for {} — copy it now, it will not be shown again: <code>{}</code>",
            verb, client.app_id, token,
        ),
    )


@admin.register(AgentClient)
class AgentClientAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    list_display = ["app_id", "name", "project", "enabled", "routes", "client_token_rotated_at"]
    list_filter = ["enabled", "project"]
    search_fields = ["app_id", "name"]
    list_select_related = ["project"]
    readonly_fields = ["client_token_rotated_at", "created_at", "updated_at"]
    fields = ["project", "app_id", "name", "enabled", "allowed_routes", "agent_authorize_url",
              "authorization_rate_limit", "client_token_rotated_at", "created_at", "updated_at"]
    actions = ["rotate_client_token"]
    change_form_template = "agent_auth/admin/agentclient_change_form.html"

    @admin.display(description="Routes")
    def routes(self, obj: AgentClient) -> str:
        return ", ".join(obj.allowed_routes or [])

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            _token_message(request, obj, agent_client_token_rotate(client=obj), "New")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        client = self.get_object(request, object_id)
        if client is not None:
            extra_context["connection_snippets"] = connection_snippets(
                client=client, hub_url=request.build_absolute_uri("/").rstrip("/")
            )
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.action(description="Rotate the client token (the old one stops working at once)",
                  permissions=["change"])
    def rotate_client_token(self, request, queryset):
        editable = self.editable_project_ids(request)
        for client in queryset:
            if request.user.is_superuser or client.project_id in editable:
                _token_message(request, client, agent_client_token_rotate(client=client), "Rotated")


class RevokeReasonForm(forms.Form):
    reason = forms.CharField(max_length=400, widget=forms.TextInput(attrs={"size": 60}))


@admin.register(AgentSession)
class AgentSessionAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "client__project"
    list_display = ["device_label", "principal_id", "on_behalf_of", "routes", "client", "last_used_at",
                    "refresh_expires_at", "revoked"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "client"]
    search_fields = ["device_label", "principal_id", "on_behalf_of", "client__app_id"]
    list_select_related = ["client", "client__project"]
    actions = ["revoke_sessions"]
    readonly_fields = fields = [
        "client", "device_label", "principal", "principal_id", "audience", "on_behalf_of", "allowed_routes",
        "created_at", "last_used_at", "access_expires_at", "refresh_expires_at", "revoked_at", "revoked_by",
        "revoked_reason", "authorization",
    ]

    @admin.display(description="Routes")
    def routes(self, obj: AgentSession) -> str:
        return ", ".join(obj.allowed_routes or [])

    @admin.display(description="Revoked", boolean=True)
    def revoked(self, obj: AgentSession) -> bool:
        return obj.revoked_at is not None

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_revoke_permission(self, request) -> bool:
        return request.user.is_staff and (request.user.is_superuser or bool(self.editable_project_ids(request)))

    @admin.action(description="Revoke the selected sessions…", permissions=["revoke"])
    def revoke_sessions(self, request, queryset):
        if not request.user.is_superuser:
            queryset = queryset.filter(client__project__in=self.editable_project_ids(request))
        form = RevokeReasonForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            reason = form.cleaned_data["reason"]
            revoked = 0
            for session in queryset:
                if session.revoked_at is None:
                    session_revoke(session=session, revoked_by=AgentSession.RevokedBy.OPERATOR,
                                   reason=f"{request.user.get_username()}: {reason}")
                    revoked += 1
            self.message_user(request, f"Revoked {revoked} session(s).", messages.SUCCESS)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Revoke agent sessions",
            "opts": self.model._meta,
            "sessions": queryset,
            "form": form,
            "action": "revoke_sessions",
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "agent_auth/admin/session_revoke.html", context)


@admin.register(AgentAuthorization)
class AgentAuthorizationAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "client__project"
    list_display = ["created_at", "client", "device_label", "status", "requested", "expires_at", "decided_at"]
    list_filter = ["status", "client"]
    search_fields = ["device_label", "client__app_id", "on_behalf_of"]
    list_select_related = ["client", "client__project"]
    readonly_fields = fields = [
        "client", "status", "device_label", "requested_routes", "redirect_uri", "requester_ip", "expires_at",
        "decided_at", "decided_by", "principal", "on_behalf_of", "allowed_routes", "code_expires_at",
        "code_used_at", "created_at",
    ]

    @admin.display(description="Requested routes")
    def requested(self, obj: AgentAuthorization) -> str:
        return ", ".join(obj.requested_routes or [])

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
