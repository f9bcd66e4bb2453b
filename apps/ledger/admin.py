"""A read-only ledger for operators: conversations, messages and runs (states, tool calls, revisions,
timings, the frozen context), and memory notes per route, each filterable by route and by date. Nothing
here writes: ledger rows change only in `apps.ledger.services`. Route filters offer only the
routes of the projects the operator may see (RouteListFilter), never other projects' route names."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from functools import cache
from typing import Any

from django.contrib import admin
from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import Case, CharField, Count, F, Min, OuterRef, Value, When
from django.db.models.functions import JSONObject
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from apps.agent_auth.selectors import SessionEnd, session_approver_current_expression, session_end
from apps.core.bidi import IdentifierFieldsMixin, identifier_html, text_html
from apps.core.timefmt import local_time
from apps.ledger.models import MESSAGE_TERMS_CHARS, Conversation, MemoryNote, Message, Run
from apps.ledger.selectors import message_search, run_search
from apps.projects.admin import ProjectScopedAdminMixin, ReadOnlyAdminMixin
from apps.projects.selectors import project_list_visible
from apps.routes.admin import RouteListFilter
from apps.tools.admin_invocations import InvocationInline

_RUN_SESSION_ENDS = {
    SessionEnd.REVOKED: "the session was revoked",
    SessionEnd.EXPIRED: "the session has ended",
    SessionEnd.AUTHORIZATION_DELETED: "the session's authorization record was deleted",
    SessionEnd.APPROVER_LEFT: "the account that approved the session left the project",
}


def run_state(run: Run) -> SafeString:
    """The run's state, and for a run left open whether its session can still complete it: a run of
    a revoked or expired session, or of one whose approving account left the project, stays
    "Context ready" for good (nothing can complete it)."""
    state = run.get_state_display()
    if run.state != Run.State.CONTEXT_READY:
        return format_html("{}", state)
    # The lists annotate approver_current (session_approver_current_expression).
    end = session_end(session=run.session, now=timezone.now(), approver_current=getattr(run, "approver_current", True))
    if end is None:
        return format_html("{}", state)
    return format_html('{}<br><span class="bh-muted">never completed: {}</span>', state, _RUN_SESSION_ENDS[end])


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    """Shown inside a conversation the operator may already see (project-scoped there)."""

    extra = 0
    can_delete = False

    def has_view_permission(self, request, obj=None):
        return True


# A conversation's page shows its newest messages and runs, up to these many: a conversation of
# thousands of turns printed every one of them.
MESSAGE_ROWS_MAX = 200
RUN_ROWS_MAX = 100


class MessageInline(ReadOnlyInline):
    model = Message
    fields = readonly_fields = ("sequence", "role", "kind", "message_id", "content", "created_at")
    ordering = ["sequence"]
    conversation: Conversation | None = None  # the page's, set by ConversationAdmin.get_inline_instances

    @admin.display(description="Client message id")
    def message_id(self, obj: Message) -> SafeString:
        return identifier_html(obj.client_message_id)

    def get_queryset(self, request):
        queryset = super().get_queryset(request).defer("search_terms")  # the search's, often larger than the text
        if self.conversation is not None:
            queryset = queryset.filter(sequence__gt=self.conversation.message_count - MESSAGE_ROWS_MAX)
        return queryset


class RunInline(ReadOnlyInline):
    model = Run
    # The revisions are cut to their first 12 characters (the whole one in their title): in full, two
    # 64-character columns made the table 1608 px wide, and Prepare ms and both times were off-screen.
    fields = readonly_fields = ("run_link", "turn_id", "state_shown", "tool_calls", "profile_revision_short",
                                "capability_revision_short", "prepare_ms", "created_at", "completed_at")
    ordering = ["created_at"]

    conversation: Conversation | None = None  # the page's, set by ConversationAdmin.get_inline_instances

    class Media:
        css = {"all": ["ledger/ledger.css"]}

    @admin.display(description="Client turn id")
    def turn_id(self, obj: Run) -> SafeString:
        return identifier_html(obj.client_turn_id)

    def get_queryset(self, request):
        # The table never shows a run's frozen context (up to 64 KiB each): not read.
        queryset = super().get_queryset(request).select_related("session").defer("context_snapshot").annotate(
            approver_current=session_approver_current_expression("session__"), call_groups=run_call_groups())
        if self.conversation is not None:
            newest = list(Run.objects.filter(conversation=self.conversation).order_by("-created_at")
                          .values_list("created_at", flat=True)[RUN_ROWS_MAX - 1:RUN_ROWS_MAX])
            if newest:
                queryset = queryset.filter(created_at__gte=newest[0])
        return queryset

    @admin.display(description="State")
    def state_shown(self, obj: Run) -> SafeString:
        return run_state(obj)

    @admin.display(description="Tool calls")
    def tool_calls(self, obj: Run) -> SafeString:
        return call_groups_summary(getattr(obj, "call_groups", None) or [])

    @admin.display(description="Profile revision")
    def profile_revision_short(self, obj: Run) -> SafeString | str:
        return revision_short(obj.profile_revision)

    @admin.display(description="Capability revision")
    def capability_revision_short(self, obj: Run) -> SafeString | str:
        return revision_short(obj.capability_revision)

    @admin.display(description="Run")
    def run_link(self, obj: Run) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:ledger_run_change", args=[obj.pk]), obj.pk)


def run_call_groups() -> ArraySubquery:
    """A run's tool calls grouped by state, tool and approval, in the order first asked: each group is
    {"state", "tool", "approval", "n"}, the approval read as approval_reading reads it (a pending one
    past its expiry is "expired"). An annotation of the Runs table's own query: its runs' calls cost it
    no query, not one per run. The calls are reached by name through their relation to the run
    (related_name "invocations")."""
    approval = Case(When(invocations__approval__status="pending",
                         invocations__approval__expires_at__lte=timezone.now(), then=Value("expired")),
                    default=F("invocations__approval__status"), output_field=CharField())
    return ArraySubquery(
        Run.objects.filter(pk=OuterRef("pk"), invocations__isnull=False)
        .values(call_state=F("invocations__state"), tool=F("invocations__tool_name"), approval=approval)
        .annotate(n=Count("*"), first_asked=Min("invocations__created_at"))
        .order_by("first_asked")
        .values(call=JSONObject(state="call_state", tool="tool", approval="approval", n="n")))


@cache
def _choice_labels(*path: str) -> dict[str, str]:
    """value: label of the choices of the field that `path` reaches from Run, in their order (the
    states of a tool call and of its approval, as the tools app names them)."""
    model: Any = Run
    for relation in path[:-1]:
        model = model._meta.get_field(relation).related_model
    return {str(value): str(label) for value, label in model._meta.get_field(path[-1]).flatchoices}


def _counted(counts: Counter[str], labels: dict[str, str]) -> str:
    return ", ".join(f"{counts[value]} {label}" for value, label in labels.items() if counts[value])


def call_groups_summary(groups: list[dict[str, Any]]) -> SafeString:
    """'5 tool calls: 4 executed, 1 denied', then what their approvals came to, then the tools called."""
    if not groups:
        return format_html('<span class="bh-muted">{}</span>', "no tool calls")
    states: Counter[str] = Counter()
    approvals: Counter[str] = Counter()
    tools: Counter[str] = Counter()  # in the order first asked
    for group in groups:
        states[group["state"]] += group["n"]
        tools[group["tool"]] += group["n"]
        if group["approval"]:
            approvals[group["approval"]] += group["n"]
    calls, asked = states.total(), approvals.total()
    lines = [format_html("{} tool call{}: {}", calls, pluralize(calls),
                         _counted(states, _choice_labels("invocations", "state")))]
    if asked:
        lines.append(format_html('<span class="bh-muted">{} approval{}: {}</span>', asked, pluralize(asked),
                                 _counted(approvals, _choice_labels("invocations", "approval", "status"))))
    lines.append(format_html('<span class="bh-muted">{}</span>', ", ".join(
        tool if n == 1 else f"{tool}\u00a0×{n}" for tool, n in tools.items())))
    return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in lines))


def revision_short(revision: str) -> SafeString | str:
    """A 64-hex revision as its first 12 characters, the whole one in the title (as on the route page)."""
    if not revision:
        return "—"
    return format_html('<code title="{}">{}…</code>', revision, revision[:12])


@admin.register(Conversation)
class ConversationAdmin(IdentifierFieldsMixin, ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "route__project"
    # Between the sidebar and the filters, at 1366 px, about 720 px are left: with the principal in a
    # column of its own and the route and both times kept on one line each, Last message at and Created
    # at were cut off. The principal reads under whom the conversation is on behalf of; the route and
    # the times may break (a time between its date and its clock).
    list_display = ["client_conversation_id", "route_shown", "asker", "messages", "last_message", "created"]
    list_filter = [("route", RouteListFilter), ("created_at", admin.DateFieldListFilter)]
    date_hierarchy = "created_at"
    search_fields = ["client_conversation_id", "on_behalf_of", "principal_id"]
    list_select_related = ["route", "route__project"]
    fields = readonly_fields = ("route", "session", "client_conversation_id", "on_behalf_of", "principal_id",
                                "message_count", "history", "last_message_at", "created_at")
    inlines = [MessageInline, RunInline]
    # Chosen by the agent: shown left to right as stored (apps.core.bidi).
    identifier_fields = ("client_conversation_id", "on_behalf_of", "principal_id")

    def get_inline_instances(self, request, obj=None):
        instances = super().get_inline_instances(request, obj)
        for inline in instances:
            if isinstance(inline, MessageInline | RunInline):
                inline.conversation = obj
        return instances

    @admin.display(description="Route", ordering="route")
    def route_shown(self, obj: Conversation) -> SafeString:
        return text_html(obj.route)

    @admin.display(description="On behalf of · principal", ordering="on_behalf_of")
    def asker(self, obj: Conversation) -> SafeString:
        return format_html('{}<br><span class="bh-muted">principal {}</span>', identifier_html(obj.on_behalf_of),
                           identifier_html(obj.principal_id))

    @admin.display(description="Messages", ordering="message_count")
    def messages(self, obj: Conversation) -> int:
        return obj.message_count

    @admin.display(description="Last message", ordering="last_message_at")
    def last_message(self, obj: Conversation) -> str:
        return local_time(obj.last_message_at) if obj.last_message_at else "—"

    @admin.display(description="Created", ordering="created_at")
    def created(self, obj: Conversation) -> str:
        return local_time(obj.created_at)

    @admin.display(description="History")
    def history(self, obj: Conversation) -> SafeString:
        messages = format_html('<a href="{}?conversation__id__exact={}">all its messages</a>',
                               reverse("admin:ledger_message_changelist"), obj.pk)
        runs = format_html('<a href="{}?conversation__id__exact={}">all its runs</a>',
                           reverse("admin:ledger_run_changelist"), obj.pk)
        run_count = Run.objects.filter(conversation=obj).count()
        shown_messages = (f"the newest {MESSAGE_ROWS_MAX} of {obj.message_count} messages"
                          if obj.message_count > MESSAGE_ROWS_MAX
                          else f"its {obj.message_count} message{pluralize(obj.message_count)}")
        shown_runs = (f"the newest {RUN_ROWS_MAX} of {run_count} runs" if run_count > RUN_ROWS_MAX
                      else f"its {run_count} run{pluralize(run_count)}")
        return format_html("Below: {} and {}. See {} and {} in their lists.", shown_messages, shown_runs,
                           messages, runs)


# The run page's last fieldset, under the run's tool calls.
RUN_CONTEXT_FIELDS = ("stats_pretty", "context_pretty")


class ProjectListFilter(admin.RelatedFieldListFilter):
    """A filter by the rows' project (through their route) that offers the projects the operator
    can see, read from the project table: the landing page's "runs in the last 24 h" tile links a
    project's runs with it."""

    def field_choices(self, field, request, model_admin):
        return list(project_list_visible(user=request.user).order_by("name").values_list("pk", "name"))


class LastDayFilter(admin.SimpleListFilter):
    """The rows created in the 24 hours before the list is read, as the landing page counts them
    (apps.runtime.dashboard: runs_last_day); the created date filter slices by calendar day."""

    title = "age"
    parameter_name = "within"
    LAST_DAY = "24h"

    def lookups(self, request, model_admin):
        return [(self.LAST_DAY, "Last 24 hours")]

    def queryset(self, request, queryset):
        if self.value() == self.LAST_DAY:
            return queryset.filter(created_at__gte=timezone.now() - timedelta(days=1))
        return queryset


@admin.register(Run)
class RunAdmin(IdentifierFieldsMixin, ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "route__project"
    # Few columns, so the list fits beside the filters; the run page has everything else. Between the
    # sidebar and the filters, at 1366 px, about 720 px are left: with the route, the conversation and the
    # knowledge delivery in columns of their own (a route and a conversation are kept on one line each),
    # Prepare ms was cut off. The conversation reads under its route, the delivery under the context's size.
    list_display = ["created_at", "route_conversation", "state_shown", "context_size", "prepare_ms"]
    list_filter = ["state", ("route__project", ProjectListFilter), ("route", RouteListFilter), LastDayFilter,
                   ("created_at", admin.DateFieldListFilter), "knowledge_delivery"]
    # No date drill-down: it read every row of the list (DISTINCT months, MIN/MAX) on each load, 350 ms
    # at 200,000 messages and growing with the ledger; the created_at filter slices by date instead.
    # The search is selectors.run_search (get_search_results), by exact ids on indexed columns: a
    # substring match of the ids read every run of the operator's projects, for the page and again
    # for its count (330 to 430 ms at 100,000 runs). The fields named here only show the search box.
    search_fields = ["client_turn_id"]
    search_help_text = ("Finds the runs whose run id, client turn id, user message id, conversation id or "
                        "on-behalf-of user is exactly each word you type (quote one with spaces in it).")
    list_select_related = ["route", "route__project", "conversation", "session"]
    fields = readonly_fields = (
        "id", "route", "in_conversation", "session", "client_turn_id", "user_message_id", "state_shown", "request_hash",
        "knowledge_delivery", "profile_revision", "capability_revision", "context_bytes", "context_tokens",
        "prepare_ms", "knowledge_ms", "created_at", "context_ready_at", "assistant_message_id",
        "model", "runtime", "usage_pretty", "completion_fingerprint", "completed_at", *RUN_CONTEXT_FIELDS,
    )
    # The run's tool calls: state, business status, journal, approval and timings of each. Shown between
    # the run's facts and its frozen context (admin/ledger/run/change_form.html): under the context, often
    # thousands of pixels tall, they came about 5000 px down the page.
    inlines = [InvocationInline]
    identifier_fields = ("client_turn_id", "user_message_id", "assistant_message_id")

    def get_fieldsets(self, request, obj=None):
        # Split from get_fields, which shows the identifier fields left to right (IdentifierFieldsMixin).
        fields = self.get_fields(request, obj)
        return [(None, {"fields": [name for name in fields if name not in RUN_CONTEXT_FIELDS]}),
                ("Frozen context", {"fields": list(RUN_CONTEXT_FIELDS)})]

    @admin.display(description="Route · conversation", ordering="route")
    def route_conversation(self, obj: Run) -> SafeString:
        return format_html('{}<br><span class="bh-muted">{}</span>', text_html(obj.route),
                           conversation_label(obj.conversation))

    @admin.display(description="Conversation")
    def in_conversation(self, obj: Run) -> SafeString:
        return conversation_link(obj.conversation)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(approver_current=session_approver_current_expression("session__"))

    def get_search_results(self, request, queryset, search_term):
        return run_search(queryset=queryset, text=search_term), False

    @admin.display(description="State", ordering="state")
    def state_shown(self, obj: Run) -> SafeString:
        return run_state(obj)

    @admin.display(description="Context · delivery", ordering="context_bytes")
    def context_size(self, obj: Run) -> SafeString:
        return format_html('{} bytes<br><span class="bh-muted">knowledge {}</span>', obj.context_bytes,
                           obj.get_knowledge_delivery_display().lower())

    @admin.display(description="Context")
    def context_pretty(self, obj: Run) -> SafeString:
        return format_html(
            '<div class="bh-context">{}</div><details class="bh-raw"><summary>The context as JSON</summary>'
            '{}</details>',
            readable(obj.context), scroll_box(pretty_json(obj.context)),
        )

    @admin.display(description="Context stats")
    def stats_pretty(self, obj: Run) -> SafeString:
        return scroll_box(pretty_json(obj.context_stats))

    @admin.display(description="Usage")
    def usage_pretty(self, obj: Run) -> str:
        return scroll_box(pretty_json(obj.usage)) if obj.usage else "—"


@admin.register(Message)
class MessageAdmin(IdentifierFieldsMixin, ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "conversation__route__project"
    list_display = ["created_at", "route", "conversation_link", "sequence", "role", "kind", "short_content"]
    list_filter = [("conversation__route", RouteListFilter), "role",
                   ("created_at", admin.DateFieldListFilter)]
    # No date drill-down: it read every row of the list (DISTINCT months, MIN/MAX) on each load, 350 ms
    # at 200,000 messages and growing with the ledger; the created_at filter slices by date instead.
    # The search is selectors.message_search (get_search_results), by indexed terms and exact ids: a
    # substring match of the content and the ids read every message of the operator's projects
    # (1 to 2 s at 200,000 messages). The fields named here only show the search box.
    search_fields = ["content"]
    search_help_text = (f"Finds the messages that contain every word, \"quoted phrase\" or Chinese phrase you type "
                        f"(whole words; a phrase's words in that order; a message's first {MESSAGE_TERMS_CHARS:,} "
                        "characters), or whose conversation id, on-behalf-of user, message id or run id is exactly "
                        "one of them.")
    # A search's page does not also count the whole list ("N total"): another read of every message.
    show_full_result_count = False
    list_select_related = ["conversation", "conversation__route"]
    fields = readonly_fields = ("in_conversation", "run", "sequence", "role", "kind", "client_message_id",
                                "content_text", "created_at")
    identifier_fields = ("client_message_id",)

    @admin.display(description="Conversation")
    def in_conversation(self, obj: Message) -> SafeString:
        return conversation_link(obj.conversation)

    def get_queryset(self, request):
        return super().get_queryset(request).defer("search_terms")  # the search's, often larger than the text

    def get_search_results(self, request, queryset, search_term):
        return message_search(queryset=queryset, text=search_term), False

    @admin.display(description="Route", ordering="conversation__route__key")
    def route(self, obj: Message) -> str:
        return str(obj.conversation.route)

    @admin.display(description="Conversation")
    def conversation_link(self, obj: Message) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:ledger_conversation_change",
                                                          args=[obj.conversation_id]),
                           identifier_html(obj.conversation.client_conversation_id))

    @admin.display(description="Content")
    def short_content(self, obj: Message) -> str:
        return obj.content if len(obj.content) <= 100 else obj.content[:99] + "…"

    @admin.display(description="Content")
    def content_text(self, obj: Message) -> SafeString:
        return scroll_box(obj.content)


def conversation_label(conversation: Conversation) -> SafeString:
    """A conversation as its __str__ reads, with each id left to right as stored (apps.core.bidi)."""
    return format_html("{} ({})", identifier_html(conversation.client_conversation_id),
                       identifier_html(conversation.on_behalf_of))


def conversation_link(conversation: Conversation) -> SafeString:
    return format_html('<a href="{}">{}</a>', reverse("admin:ledger_conversation_change", args=[conversation.pk]),
                       conversation_label(conversation))


def scroll_box(text: str) -> SafeString:
    """`text` in a .bh-pre box, which stops at 24em and scrolls: it takes the keyboard's focus, or
    only a mouse could scroll it (axe scrollable-region-focusable)."""
    return format_html('<pre class="bh-pre" tabindex="0">{}</pre>', text)


def pretty_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False)


def readable(value: Any) -> SafeString:
    """The frozen context as nested, labelled blocks: text keeps its real line breaks (JSON would
    show them as `\\n`), short scalars stay on one line."""
    if isinstance(value, dict):
        if not value:
            return mark_safe('<span class="bh-muted">{}</span>')
        return format_html('<dl class="bh-tree">{}</dl>', format_html_join(
            "", "<dt>{}</dt><dd>{}</dd>", ((key, readable(item)) for key, item in value.items())))
    if isinstance(value, list):
        if not value:
            return mark_safe('<span class="bh-muted">[]</span>')
        return format_html('<ol class="bh-tree-list" start="0">{}</ol>', format_html_join(
            "", "<li>{}</li>", ((readable(item),) for item in value)))
    if isinstance(value, str):
        if "\n" in value or len(value) > 120:
            return scroll_box(value)
        if not value:
            return mark_safe('<span class="bh-muted">""</span>')
        return format_html('<span class="bh-str">{}</span>', value)
    return format_html("<code>{}</code>", json.dumps(value))


@admin.register(MemoryNote)
class MemoryNoteAdmin(IdentifierFieldsMixin, ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "project"
    list_display = ["scope", "route", "project", "on_behalf_of", "principal_id", "short_content", "updated_at"]
    list_filter = ["scope", ("route", RouteListFilter)]
    search_fields = ["on_behalf_of", "principal_id", "content"]
    list_select_related = ["route", "project"]
    fields = readonly_fields = ("scope", "project", "route", "on_behalf_of", "principal_tenant", "principal_id",
                                "content", "created_by_session",
                                "created_at", "updated_at")
    identifier_fields = ("on_behalf_of", "principal_tenant", "principal_id")

    @admin.display(description="Content")
    def short_content(self, obj: MemoryNote) -> str:
        return obj.content if len(obj.content) <= 80 else obj.content[:79] + "…"
