"""Operator screens for a knowledge base's documents: the list of every KB's documents, a document's
page (its fields, its chunks, what to do about a failure) and its actions — retry, confirm, fetch
again, turn off and on, delete — each through apps.knowledge.services. The KB's own page
(apps.knowledge.admin) shows its documents with the same progress bar and the same row actions."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpResponseRedirect, JsonResponse
from django.template.defaultfilters import filesizeformat
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import ngettext

from apps.core.errors import ApiError
from apps.core.timefmt import time_ago
from apps.knowledge import selectors, services
from apps.knowledge.admin_chunks import chunk_urls
from apps.knowledge.models import Document, KnowledgeBase
from apps.projects.admin import ProjectScopedAdminMixin
from apps.routes.admin import DropDownPastLinksMixin


def progress_bar(done: int, total: int, *, complete: bool = False) -> str:
    if complete:
        done = total = max(total, 1)
    return format_html('<progress value="{}" max="{}" style="width:8em"></progress> {}/{}', done, max(total, 1),
                       done, total)


# The pipeline's failures that the same bytes meet again (apps/knowledge/ingest.py, rebuild.py): the file cannot
# be parsed, holds no text, or converts to more text than a document may hold. A retry reads the
# stored bytes again and fails the same way; an embedding endpoint down, a worker lost, a time limit
# or a database hiccup (embedding_failed, ingest_*) may pass on another attempt.
RETRY_CANNOT_FIX = frozenset({"document_conversion_failed", "document_empty", "document_too_large_after_conversion"})


def retry_cannot_fix(document: Document) -> bool:
    """A failed document whose failure lies in its own bytes: retrying it as it is cannot help."""
    return document.status == Document.Status.FAILED and document.error_code in RETRY_CANNOT_FIX


def document_actions(rows: list[dict[str, Any]], *, can_change: bool) -> None:
    """The KB page's action of each document row (the page and its polling read the same):
    `retry_url` for a failure another attempt may get past, `advice_url` (the document's page, with
    what to do instead) for one in its own bytes, `confirm_url` for one awaiting confirmation."""
    for row in rows:
        failed = can_change and row["status"] == Document.Status.FAILED
        cannot_fix = row.get("error_code") in RETRY_CANNOT_FIX
        row["retry_url"] = (reverse("admin:knowledge_document_retry", args=[row["id"]])
                            if failed and not cannot_fix else None)
        # Straight to the advice: it sits below the document's fields, past the fold.
        row["advice_url"] = (reverse("admin:knowledge_document_change", args=[row["id"]]) + "#document-fix"
                             if failed and cannot_fix else None)
        row["confirm_url"] = (reverse("admin:knowledge_document_confirm", args=[row["id"]])
                              if can_change and row["status"] == Document.Status.AWAITING_CONFIRMATION else None)


class KnowledgeBaseListFilter(DropDownPastLinksMixin, admin.RelatedFieldListFilter):
    """A filter by knowledge base that offers the KBs of the projects the operator can see, read from
    the KB table, a KB with no documents yet too (the distinct KBs of the documents offered none
    while one KB had them all, so the list had no such filter); past a few dozen, a drop-down
    (DropDownPastLinksMixin). Counts ("Show counts") are one GROUP BY."""

    def __init__(self, field, request, params, model, model_admin, field_path):
        self.all_chosen(params, f"{field_path}__{field.target_field.name}__exact")
        super().__init__(field, request, params, model, model_admin, field_path)

    def field_choices(self, field, request, model_admin):
        kbs = KnowledgeBase.objects.select_related("project").only("id", "name", "project__name")
        if not request.user.is_superuser:
            kbs = kbs.filter(project_id__in=ProjectScopedAdminMixin.visible_project_ids(request))
        kbs = sorted(kbs, key=lambda kb: (kb.name, kb.project.name))
        # KB names are unique within a project: across projects, the project tells them apart.
        several = len({kb.project_id for kb in kbs}) > 1
        return [(kb.pk, f"{kb.name} · {kb.project.name}" if several else kb.name) for kb in kbs]

    def get_facet_queryset(self, changelist):
        filtered = changelist.get_queryset(self.request, exclude_parameters=self.expected_parameters())
        counts = dict(filtered.order_by().values_list(self.field_path).annotate(rows=Count("pk")))
        return {f"{pk}__c": counts.get(pk, 0) for pk, _ in self.lookup_choices}

    def choices(self, changelist):
        return self.drop_down(changelist, list(super().choices(changelist)), [pk for pk, _ in self.lookup_choices])


@admin.register(Document)
class DocumentAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "knowledge_base__project"
    # Five columns, so the list fits beside the sidebar and the filters at 1366 px (nine ran 330 px
    # past its box); the document's page has every field.
    list_display = ["filename", "where", "file_type", "state", "updated"]
    list_filter = ["status", "enabled", "file_type", ("knowledge_base", KnowledgeBaseListFilter)]
    search_fields = ["filename", "error_message"]
    list_select_related = ["knowledge_base"]
    actions = ["retry_documents", "confirm_documents", "refetch_documents", "turn_off_documents", "turn_on_documents"]
    fields = readonly_fields = ("knowledge_base", "filename", "source_url", "fetched_at", "file_type", "size_shown",
                                "content_hash", "status_badge", "in_search",
                                "error_code", "error_message", "attempts", "connection_losses", "passages", "queued_at",
                                "parsing_started_at", "chunking_started_at", "awaiting_confirmation_at", "confirmed_at",
                                "embedding_started_at", "completed_at", "failed_at", "heartbeat_at")

    def get_queryset(self, request):
        return super().get_queryset(request).defer("error_message")

    def has_add_permission(self, request):
        return False  # uploads happen on the knowledge base page

    @admin.display(description="Status", ordering="status")
    def status_badge(self, obj: Document) -> str:
        return format_html('<span class="bh-doc-badge bh-doc-{}">{}</span>', obj.status, obj.get_status_display())

    @admin.display(description="Size", ordering="size")
    def size_shown(self, obj: Document) -> str:
        return f"{filesizeformat(obj.size)} ({obj.size:,} bytes)" if obj.size >= 1024 else filesizeformat(obj.size)

    @admin.display(description="In search")
    def in_search(self, obj: Document) -> str:
        if obj.enabled:
            return "On: searches and agents read it once it is completed."
        return format_html('<span class="bh-badge bh-off">off</span> {}',
                           "Searches and agents do not read it; its chunks and index stay.")

    @admin.display(description="Source", ordering="source_url")
    def source(self, obj: Document) -> str:
        if not obj.source_url:
            return "upload"
        shown = obj.source_url if len(obj.source_url) <= 40 else obj.source_url[:39] + "…"
        return format_html('<a href="{}" rel="noopener noreferrer" target="_blank" title="{}">{}</a>',
                           obj.source_url, obj.source_url, shown)

    @admin.display(description="Progress")
    def progress(self, obj: Document) -> str:
        return progress_bar(obj.progress_done, obj.progress_total, complete=obj.status == Document.Status.COMPLETED)

    @admin.display(description="Progress")
    def passages(self, obj: Document) -> str:
        """The progress counted in what it counts: passages, not the chunks listed under it (a
        document of 31 chunks read "5/5" beside "Chunks (31)": 26 of them repeated others' text)."""
        return format_html('{} passages<div class="help">{}</div>', self.progress(obj),
                           "The distinct texts the embedder reads: each chunk and each of its sentence windows, "
                           "a text that repeats counted once. They need not match the chunks below.")

    @admin.display(description="Knowledge base · source", ordering="knowledge_base__name")
    def where(self, obj: Document) -> str:
        return format_html('{}<br><span class="bh-muted">{}</span>', obj.knowledge_base.name, self.source(obj))

    @admin.display(description="Status", ordering="status")
    def state(self, obj: Document) -> str:
        """The badge, the progress under it once there is any to count, and a failed document's
        error code."""
        progress = format_html("<br>{}", self.progress(obj)) if obj.progress_total else ""
        error = format_html('<br><code class="bh-doc-error">{}</code>', obj.error_code) if obj.error_code else ""
        off = "" if obj.enabled else format_html(' <span class="bh-badge bh-off" title="{}">off</span>',
                                                 "Searches and agents do not read it.")
        return format_html("{}{}{}{}", self.status_badge(obj), off, progress, error)

    @admin.display(description="Updated", ordering="updated_at")
    def updated(self, obj: Document) -> str:
        attempts = ngettext("%(count)d attempt", "%(count)d attempts", obj.attempts) % {"count": obj.attempts}
        return format_html('{}<br><span class="bh-muted">{}</span>', time_ago(obj.updated_at), attempts)

    def _each(self, request, queryset, service, done_text: Callable[[int], str], history: str) -> None:
        """Run a document service on each selected document the operator may change, writing
        `history` to the history of each one done."""
        done = 0
        # The service's own reason, with the documents it refused: "Not in a state for this" told
        # nobody that only a document registered by URL is fetched again (browser audit).
        refused: dict[str, list[str]] = {}
        editable = self.editable_project_ids(request)
        for document in queryset.select_related("knowledge_base"):
            if document.knowledge_base.project_id not in editable:
                refused.setdefault("Your role in its project does not allow this.", []).append(document.filename)
                continue
            try:
                service(document=document)
                done += 1
            except ApiError as exc:
                refused.setdefault(exc.message, []).append(document.filename)
            else:
                self.log_change(request, document, history)
        if done:
            self.message_user(request, done_text(done), messages.SUCCESS)
        for reason, names in refused.items():
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            self.message_user(request, f"Not done for {', '.join(names[:10])}{more}: {reason}", messages.WARNING)

    @admin.action(description="Retry the selected failed documents", permissions=["change"])
    def retry_documents(self, request, queryset):
        unfixable = list(queryset.filter(status=Document.Status.FAILED, error_code__in=RETRY_CANNOT_FIX)
                         .values_list("filename", flat=True))
        if unfixable:
            self.message_user(request, format_html(
                "Not retried: {} — {} on {} own content, and a retry reads the same bytes. Upload a corrected file "
                "on the knowledge base's page, then delete the failed one.", ", ".join(unfixable[:10]),
                ngettext("it failed", "they failed", len(unfixable)), ngettext("its", "their", len(unfixable))),
                messages.WARNING)
            queryset = queryset.exclude(status=Document.Status.FAILED, error_code__in=RETRY_CANNOT_FIX)
            if not queryset.exists():
                return
        self._each(request, queryset, services.document_retry, lambda n: ngettext(
            "Queued %(count)d document.", "Queued %(count)d documents.", n) % {"count": n},
            history="Queued for another attempt.")

    @admin.action(description="Confirm the selected documents awaiting confirmation", permissions=["change"])
    def confirm_documents(self, request, queryset):
        self._each(request, queryset, services.document_confirm, lambda n: ngettext(
            "Confirmed %(count)d document.", "Confirmed %(count)d documents.", n) % {"count": n},
            history="Confirmed for indexing.")

    @admin.action(description="Fetch the selected URL documents again", permissions=["change"])
    def refetch_documents(self, request, queryset):
        self._each(request, queryset, services.document_refetch, lambda n: ngettext(
            "Queued %(count)d document to fetch again.", "Queued %(count)d documents to fetch again.", n)
            % {"count": n}, history="Queued to fetch its URL again.")

    @admin.action(description="Turn the selected documents off (searches and agents stop reading them)",
                  permissions=["change"])
    def turn_off_documents(self, request, queryset):
        self._each(request, queryset, partial(services.document_set_enabled, enabled=False), lambda n: ngettext(
            "Turned %(count)d document off.", "Turned %(count)d documents off.", n) % {"count": n},
            history="Turned off.")

    @admin.action(description="Turn the selected documents on", permissions=["change"])
    def turn_on_documents(self, request, queryset):
        self._each(request, queryset, partial(services.document_set_enabled, enabled=True), lambda n: ngettext(
            "Turned %(count)d document on.", "Turned %(count)d documents on.", n) % {"count": n},
            history="Turned on.")

    def delete_model(self, request, obj):
        request._bh_deleted_from_kb = obj.knowledge_base_id
        services.document_delete(document=obj)

    def response_delete(self, request, obj_display, obj_id):
        """From a document's delete page back to its knowledge base's page, where the operator came
        from (Django's default is the list of every KB's documents)."""
        response = super().response_delete(request, obj_display, obj_id)
        kb_id = getattr(request, "_bh_deleted_from_kb", None)
        if response.status_code == 302 and kb_id is not None:  # not a popup's answer
            return HttpResponseRedirect(reverse("admin:knowledge_knowledgebase_change", args=[kb_id]))
        return response

    def delete_queryset(self, request, queryset):
        for document in queryset:
            services.document_delete(document=document)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/retry/", wrap(self.retry_view), name="knowledge_document_retry"),
            path("<path:object_id>/confirm/", wrap(self.confirm_view), name="knowledge_document_confirm"),
            path("<path:object_id>/refetch/", wrap(self.refetch_view), name="knowledge_document_refetch"),
            path("<path:object_id>/turn-off/", wrap(self.turn_off_view), name="knowledge_document_turn_off"),
            path("<path:object_id>/turn-on/", wrap(self.turn_on_view), name="knowledge_document_turn_on"),
            *chunk_urls(self),
            *super().get_urls(),
        ]

    def _act(self, request, object_id, service, done_message: str):
        document = self.get_object(request, object_id)
        if document is None:
            raise Http404
        if not self.has_change_permission(request, document):
            raise PermissionDenied
        wants_json = request.headers.get("Accept", "").startswith("application/json")
        if request.method == "POST":
            try:
                document = service(document=document)
            except ApiError as exc:
                if wants_json:  # the KB page's script shows it beside the document
                    return JsonResponse({"error": exc.code, "message": exc.message}, status=exc.status)
                self.message_user(request, exc.message, messages.ERROR)
            else:
                self.log_change(request, document, done_message)
                if wants_json:
                    return JsonResponse({"id": str(document.pk), "status": document.status, "message": done_message})
                self.message_user(request, done_message, messages.SUCCESS)
        target = request.POST.get("next") or reverse("admin:knowledge_document_change", args=[document.pk])
        return HttpResponseRedirect(target if target.startswith("/admin/") else "/admin/")

    def retry_view(self, request, object_id):
        return self._act(request, object_id, services.document_retry, "Queued for another attempt.")

    def confirm_view(self, request, object_id):
        return self._act(request, object_id, services.document_confirm, "Confirmed; embedding starts shortly.")

    def refetch_view(self, request, object_id):
        return self._act(request, object_id, services.document_refetch,
                         "Queued: the URL is fetched again and re-indexed if it changed.")

    def turn_off_view(self, request, object_id):
        return self._act(request, object_id, partial(services.document_set_enabled, enabled=False),
                         "Turned off: searches and agents no longer read this document.")

    def turn_on_view(self, request, object_id):
        return self._act(request, object_id, partial(services.document_set_enabled, enabled=True),
                         "Turned on: searches and agents read this document again.")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        document = self.get_object(request, object_id)
        if document is not None:
            extra_context["chunks"] = list(
                selectors.chunk_list_preview(document=document).defer("embedding", "search_vector")[:500]
            )
            extra_context["can_change"] = self.has_change_permission(request, document)
            extra_context["retry_cannot_fix"] = retry_cannot_fix(document)
        # Every field is read-only: nothing to save here (retry, confirm, turning off and on, and delete
        # have their own buttons).
        extra_context.update(show_save=False, show_save_and_continue=False, show_save_and_add_another=False)
        return super().change_view(request, object_id, form_url, extra_context)
