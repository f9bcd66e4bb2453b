"""The read-only ledger of governed tool calls: every call's list and page, and a run's calls under
the run in the conversation ledger (InvocationInline). Writes happen only in apps.tools.invocations,
approvals and delivery; a call waiting for a person is decided on its approval's page
(apps.tools.admin_approvals)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import admin, messages
from django.db.models import BooleanField, Case, QuerySet, Value, When
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from apps.core.bidi import IdentifierFieldsMixin, identifier_html, text_html
from apps.core.timefmt import local_clock, local_time
from apps.core.workers import broker_down_text
from apps.projects.admin import ProjectScopedAdminMixin, ReadOnlyAdminMixin
from apps.routes.admin import DropDownPastLinksMixin, RouteListFilter

from .admin_approvals import approval_reading, invocation_state_badge, reading_badge
from .models import Approval, Invocation, InvocationJournalEntry
from .selectors import (
    dispatch_queue_is_own,
    dispatch_queue_name,
    invocation_dispatch_stall,
    invocation_passed_over,
    invocation_tool_names,
)


class InvocationStateFilter(admin.SimpleListFilter):
    title = "approval"
    parameter_name = "approval"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("none", "No approval needed"), ("needed", "Approval needed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "none":
            return queryset.filter(approval__isnull=True)
        if self.value() == "needed":
            return queryset.filter(approval__isnull=False)
        return queryset


class ToolNameFilter(DropDownPastLinksMixin, admin.SimpleListFilter):
    """By tool: the names called in the operator's projects, read down the (project, tool_name) index
    (invocation_tool_names), not Django's DISTINCT over every call they may see, a scan that grew with
    the ledger. Past ROUTE_FILTER_LINKS names, a drop-down, as the route filter."""

    title = "tool name"
    parameter_name = "tool_name"  # Django's own filter's, so its links keep working

    def __init__(self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any) -> None:
        self.all_chosen(params, self.parameter_name)
        super().__init__(request, params, model, model_admin)
        self.lookup_kwarg = self.parameter_name  # what the drop-down's template names its select

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        projects = None if request.user.is_superuser else list(ProjectScopedAdminMixin.visible_project_ids(request))
        return [(name, name) for name in invocation_tool_names(project_ids=projects)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        name = self.value()
        if name and "\x00" in name:  # PostgreSQL takes no NUL in text: Django's filter was a 500
            messages.error(request, "No tool name holds a NUL character: no call is listed.")
            return queryset.none()
        return queryset.filter(tool_name=name) if name else queryset

    def choices(self, changelist: Any) -> Any:
        return self.drop_down(changelist, list(super().choices(changelist)), [name for name, _ in self.lookup_choices])


def journal_summary(entries: list[InvocationJournalEntry]) -> SafeString:
    if not entries:
        return format_html('<span class="bh-muted">{}</span>', "absent: never dispatched")
    return format_html('<ol class="bh-journal">{}</ol>', format_html_join(
        "", '<li data-journal="{}"><code>{}</code> <span class="bh-muted" title="{}">{}</span></li>',
        ((entry.state, entry.state, entry.created_at.isoformat(timespec="milliseconds"),
          local_clock(entry.created_at)) for entry in entries)))


def approval_summary(inv: Invocation) -> SafeString:
    approval: Approval | None = getattr(inv, "approval", None)
    if approval is None:
        return format_html('<span class="bh-muted">{}</span>', "not needed")
    reading = approval_reading(approval)
    who = ""
    if approval.decided_at is not None:
        who = format_html(" by {} at {}", text_html(approval.approver_label),
                          local_time(approval.decided_at, "Y-m-d H:i:s T"))
    return format_html('<a href="{}">{}</a>{}', reverse("admin:tools_approval_change", args=[approval.pk]),
                       reading_badge(reading), who)


def timings(inv: Invocation) -> SafeString:
    rows = [("asked", inv.created_at), ("dispatched", inv.dispatched_at), ("responded", inv.responded_at),
            ("settled", inv.settled_at)]
    parts = format_html_join(" · ", "{} {}", ((label, local_clock(value))
                                              for label, value in rows if value is not None))
    if inv.duration_ms is not None:
        return format_html("{} · <strong>{} ms</strong>", parts, inv.duration_ms)
    return parts


class InvocationInline(ReadOnlyAdminMixin, admin.TabularInline):
    """A run's tool calls, under the run in the ledger (the run page is already project-scoped)."""

    model = Invocation
    fk_name = "run"
    extra = 0
    can_delete = False
    show_change_link = True
    fields = readonly_fields = ("tool_name", "state_badge", "business_status", "journal", "approval_state",
                                "call_timings")
    ordering = ["created_at"]

    class Media:
        css = {"all": ["tools/approvals.css"]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Invocation]:
        queryset: QuerySet[Invocation] = super().get_queryset(request)
        return (queryset.select_related("approval").prefetch_related("journal")
                .defer("frozen_arguments", "result"))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return True

    @admin.display(description="State")
    def state_badge(self, obj: Invocation) -> SafeString:
        return invocation_state_badge(obj)

    @admin.display(description="Journal")
    def journal(self, obj: Invocation) -> SafeString:
        return journal_summary(list(obj.journal.all()))

    @admin.display(description="Approval")
    def approval_state(self, obj: Invocation) -> SafeString:
        return approval_summary(obj)

    @admin.display(description="Timings")
    def call_timings(self, obj: Invocation) -> SafeString:
        return timings(obj)


@admin.register(Invocation)
class InvocationAdmin(IdentifierFieldsMixin, ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    """Every governed tool call, read-only. Writes happen only in apps.tools.invocations, approvals and delivery."""

    class Media:
        css = {"all": ["tools/approvals.css"]}  # the journal's table on a phone, as an approval's

    # As the Tools list: between the sidebar and the filters, at 1366 px, about 720 px are left, and nine
    # columns ran past them: Business status, Journal state, Approval, Duration ms and Run were behind a
    # scrollbar (only "BUSI" showed). The route reads under the tool, the business system's status and the
    # journal under the state, the run under the duration, and the time breaks between its date and its
    # clock (the admin keeps a date column on one line); the invocation's page has them all.
    list_display = ["created", "tool_route", "state_summary", "approval_state", "duration_run"]
    list_filter = ["state", ToolNameFilter, ("route", RouteListFilter), "journal_state",
                   InvocationStateFilter, ("created_at", admin.DateFieldListFilter)]
    search_fields = ["=invocation_id", "tool_name", "on_behalf_of", "principal_id"]
    list_select_related = ["route", "approval"]
    # No date drill-down: its DISTINCT days and MIN/MAX read every call of the list on each load (33 ms
    # at 50,000 calls, growing with the ledger); the created_at filter slices by date instead.
    fields = readonly_fields = (
        "invocation_id", "tool_name", "provider_name", "route", "run_link", "state_badge", "business_status",
        "journal_state", "approval_state", "principal_id", "on_behalf_of", "device", "readonly", "risk",
        "arguments_size", "arguments_sha256", "sent_as", "capability_revision", "execution_fingerprint",
        "call_timings", "result_pretty", "journal_entries",
    )

    # Chosen by the agent: shown left to right as stored (apps.core.bidi).
    identifier_fields = ("invocation_id", "principal_id", "on_behalf_of")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Invocation]:
        queryset: QuerySet[Invocation] = super().get_queryset(request)
        kept = Case(When(frozen_arguments="", then=Value(False)), default=Value(True), output_field=BooleanField())
        return queryset.defer("frozen_arguments").annotate(arguments_kept=kept)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> Any:
        changelist = super().get_changelist(request, **kwargs)

        class ResultNotLoaded(changelist):  # type: ignore[valid-type,misc]
            def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Invocation]:
                queryset: QuerySet[Invocation] = super().get_queryset(request, exclude_parameters)
                return queryset.defer("result")

        return ResultNotLoaded

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Invocation | None:
        obj: Invocation | None = (self.get_queryset(request).select_related("route", "session", "session__client")
                                  .filter(pk=object_id).first()) if _is_uuid(object_id) else None
        return obj

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Another project's call is a 404, as an unknown one.
        inv = self.get_object(request, object_id)
        if inv is None:
            raise Http404("No such invocation.")
        # Queued with every worker down, a call read "in progress · journal absent" for as long as
        # they stayed down (its agent read in_progress, and the watchdog sent it again, unseen).
        # Its message lost while the queue moved on, it read "in progress" with no sign at all.
        stall = invocation_dispatch_stall(inv=inv)
        extra_context = {**(extra_context or {}), "dispatch_stall": stall,
                         "dispatch_broker_down": bool(stall and broker_down_text()),
                         "dispatch_passed_over": invocation_passed_over(inv=inv),
                         "dispatch_queue": dispatch_queue_name(), "dispatch_queue_own": dispatch_queue_is_own(),
                         "late_answer": self._late_answer(inv), "signature_refused": self._signature_refused(inv)}
        return super().change_view(request, object_id, form_url, extra_context)

    @staticmethod
    def _signature_refused(inv: Invocation) -> dict[str, Any] | None:
        """A provider's 401 or 403: most often the business system does not verify the hub's
        signature with the provider's signing secret (one generated on Save, never configured on
        its side). The page named only the status; it names the secret to check, and where."""
        if inv.business_status not in (401, 403) or inv.provider_id is None:
            return None
        return {"status": inv.business_status, "provider": inv.provider_name,
                "url": reverse("admin:tools_toolprovider_change", args=[inv.provider_id]),
                "invalid_signature": "invalid_signature" in json.dumps(inv.result, ensure_ascii=False)}

    @staticmethod
    def _late_answer(inv: Invocation) -> dict[str, Any] | None:
        """The business system's answer that came after the call was marked uncertain
        (apps.tools.delivery keeps it in the journal, the result unchanged): what the person who
        checks the business system needs first, above the journal's JSON."""
        if inv.journal_state != Invocation.JournalState.UNCERTAIN:
            return None
        entry = (InvocationJournalEntry.objects.filter(invocation=inv, detail__has_key="late_answer")
                 .order_by("-created_at").first())
        if entry is None or not isinstance(entry.detail.get("late_answer"), dict):
            return None
        return {**entry.detail["late_answer"], "at": entry.created_at}

    @admin.display(description="State", ordering="state")
    def state_badge(self, obj: Invocation) -> SafeString:
        return invocation_state_badge(obj)

    @admin.display(description="Approval")
    def approval_state(self, obj: Invocation) -> SafeString:
        return approval_summary(obj)

    @admin.display(description="Created at", ordering="created_at")
    def created(self, obj: Invocation) -> str:
        return local_time(obj.created_at, "Y-m-d H:i:s T")

    @admin.display(description="Tool · route", ordering="tool_name")
    def tool_route(self, obj: Invocation) -> SafeString:
        return format_html('{}<br><span class="bh-muted">{}</span>', identifier_html(obj.tool_name),
                           text_html(obj.route))

    @admin.display(description="State · business · journal", ordering="state")
    def state_summary(self, obj: Invocation) -> SafeString:
        business = "—" if obj.business_status is None else obj.business_status
        return format_html('{}<br><span class="bh-muted">business {} · journal {}</span>',
                           invocation_state_badge(obj), business, obj.get_journal_state_display())

    @admin.display(description="Duration · run", ordering="duration_ms")
    def duration_run(self, obj: Invocation) -> SafeString:
        duration = "—" if obj.duration_ms is None else f"{obj.duration_ms} ms"
        return format_html('{}<br><span class="bh-muted">run {}</span>', duration, self.run_link(obj))

    @admin.display(description="Run")
    def run_link(self, obj: Invocation) -> SafeString:
        return format_html('<a href="{}" title="{}">{}…</a>', reverse("admin:ledger_run_change", args=[obj.run_id]),
                           obj.run_id, str(obj.run_id)[:8])

    @admin.display(description="Agent")
    def device(self, obj: Invocation) -> SafeString:
        return format_html("{} · {}", text_html(obj.session.device_label), identifier_html(obj.session.client.app_id))

    @admin.display(description="Arguments")
    def arguments_size(self, obj: Invocation) -> str:
        if getattr(obj, "arguments_kept", False):
            return f"{obj.arguments_bytes} bytes (kept encrypted until the result is stable)"
        if not obj.provider_name:
            return f"{obj.arguments_bytes} bytes (not kept: a built-in tool runs inside the hub)"
        if obj.journal_state == Invocation.JournalState.ABSENT:
            return f"{obj.arguments_bytes} bytes (not kept; the call was never sent to the business system)"
        # The hub deleted its copy; the business system's answer (the result below) may still repeat them.
        return (f"{obj.arguments_bytes} bytes (not kept: the hub deleted them once the result was stable; "
                "the business system's answer below may repeat some of them)")

    @admin.display(description="Sent with")
    def sent_as(self, obj: Invocation) -> SafeString:
        """The headers that name this call to the business system: once its arguments are deleted, they
        are how a person checking an uncertain write finds it there."""
        if obj.journal_state == Invocation.JournalState.ABSENT:
            return format_html('<span class="bh-muted">{}</span>', "not sent")
        return format_html(
            "<code>X-Bailing-Job-Id: {}</code><br><code>X-Bailing-Idempotency-Key: {}</code>"
            '<div class="help">The business system received the call with these headers: look it up there by '
            "them.</div>", obj.pk, obj.idempotency_key)

    @admin.display(description="Timings")
    def call_timings(self, obj: Invocation) -> SafeString:
        return timings(obj)

    @admin.display(description="Result")
    def result_pretty(self, obj: Invocation) -> SafeString:
        if obj.result is None:
            return format_html('<span class="bh-muted">{}</span>', "—")
        return format_html('<pre class="bh-pre" tabindex="0">{}</pre>',
                           json.dumps(obj.result, ensure_ascii=False, indent=2))

    @admin.display(description="Journal")
    def journal_entries(self, obj: Invocation) -> SafeString:
        entries = list(InvocationJournalEntry.objects.filter(invocation=obj).order_by("created_at"))
        if not entries:
            return journal_summary([])
        return format_html('<table class="bh-journal-table"><tbody>{}</tbody></table>', format_html_join(
            "", "<tr><td><code>{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
            ((entry.state, local_clock(entry.created_at, with_date=True),
              json.dumps(entry.detail, ensure_ascii=False, sort_keys=True) if entry.detail else "")
             for entry in entries)))


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
