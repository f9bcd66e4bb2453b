"""A read-only ledger for operators: conversations by route and principal, their messages and
runs (states, revisions, timings), and memory notes per route. Nothing here writes: ledger rows
change only in `apps.ledger.services`. Route filters offer only the routes of rows the operator
may see (RelatedOnlyFieldListFilter), never other projects' route names."""

from __future__ import annotations

import json

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from apps.ledger.models import Conversation, MemoryNote, Message, Run
from apps.projects.admin import ProjectScopedAdminMixin


class ReadOnlyAdminMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    """Shown inside a conversation the operator may already see (project-scoped there)."""

    extra = 0
    can_delete = False

    def has_view_permission(self, request, obj=None):
        return True


class MessageInline(ReadOnlyInline):
    model = Message
    fields = readonly_fields = ["sequence", "role", "kind", "client_message_id", "content", "created_at"]
    ordering = ["sequence"]


class RunInline(ReadOnlyInline):
    model = Run
    fields = readonly_fields = ["run_link", "client_turn_id", "state", "profile_revision", "capability_revision",
                                "prepare_ms", "created_at", "completed_at"]
    ordering = ["created_at"]

    @admin.display(description="Run")
    def run_link(self, obj: Run) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:ledger_run_change", args=[obj.pk]), obj.pk)


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "route__project"
    list_display = ["client_conversation_id", "route", "on_behalf_of", "principal_id", "message_count",
                    "last_message_at", "created_at"]
    list_filter = [("route", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["client_conversation_id", "on_behalf_of", "principal_id"]
    list_select_related = ["route", "route__project"]
    fields = readonly_fields = ["route", "session", "client_conversation_id", "on_behalf_of", "principal_id",
                                "message_count", "last_message_at", "created_at"]
    inlines = [MessageInline, RunInline]


@admin.register(Run)
class RunAdmin(ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "route__project"
    list_display = ["id", "route", "conversation", "client_turn_id", "state", "knowledge_delivery", "context_bytes",
                    "prepare_ms", "knowledge_ms", "created_at", "completed_at"]
    list_filter = ["state", ("route", admin.RelatedOnlyFieldListFilter), "knowledge_delivery"]
    search_fields = ["=id", "client_turn_id", "user_message_id", "conversation__client_conversation_id",
                     "conversation__on_behalf_of"]
    list_select_related = ["route", "route__project", "conversation"]
    fields = readonly_fields = [
        "id", "route", "conversation", "session", "client_turn_id", "user_message_id", "state", "request_hash",
        "knowledge_delivery", "profile_revision", "capability_revision", "context_bytes", "context_tokens",
        "context_stats", "prepare_ms", "knowledge_ms", "created_at", "context_ready_at", "assistant_message_id",
        "model", "runtime", "usage", "completion_fingerprint", "completed_at", "context_pretty",
    ]

    @admin.display(description="Frozen context")
    def context_pretty(self, obj: Run) -> str:
        return format_html("<pre style='white-space: pre-wrap'>{}</pre>",
                           json.dumps(obj.context, ensure_ascii=False, indent=2))


@admin.register(MemoryNote)
class MemoryNoteAdmin(ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "project"
    list_display = ["scope", "route", "project", "on_behalf_of", "short_content", "updated_at"]
    list_filter = ["scope", ("route", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["on_behalf_of", "content"]
    list_select_related = ["route", "project"]
    fields = readonly_fields = ["scope", "project", "route", "on_behalf_of", "content", "created_by_session",
                                "created_at", "updated_at"]

    @admin.display(description="Content")
    def short_content(self, obj: MemoryNote) -> str:
        return obj.content if len(obj.content) <= 80 else obj.content[:79] + "…"
