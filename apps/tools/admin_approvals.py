"""Operator screens for governed tool calls that wait on a person: the approval queue and the
per-project execution pause (the calls themselves, read-only: apps.tools.admin_invocations).

Nothing here decides or changes a governed row itself: a decision goes through
``apps.tools.approvals.approval_decide`` (the one decision service, which the builder API calls
too) and the pause switch through ``apps.projects.services.project_tool_execution_set``. The approval
queue reads a call's frozen arguments only when they are small (they can be 1 MiB, encrypted) and
shows a line of them, so that two calls of one tool can be told apart; an approval's own page
decrypts them whatever their size, shows a bounded preview, and serves the whole snapshot on demand
from a separate URL. Other lists never load them.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import (
    Case,
    F,
    Func,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince, timeuntil

from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import session_approver_current_q, session_live_q
from apps.core.bidi import identifier_html, json_bidi_controls_escaped, text_html
from apps.core.timefmt import local_time, time_ago
from apps.core.validators import validate_shown_text
from apps.projects.admin import ProjectScopedAdminMixin, ReadOnlyAdminMixin
from apps.projects.selectors import project_list_editable, project_list_visible
from apps.projects.services import project_tool_execution_set
from apps.routes.admin import RouteListFilter

from . import approvals, invocation_transitions, invocations, selectors
from .invocation_errors import ApprovalAlreadyDecided, ApprovalCallCannotRun, ApprovalExpired, ApprovalNotFound
from .models import Approval, Invocation, InvocationJournalEntry, Tool

# What an approval's page shows of the frozen arguments before the operator asks for all of them.
ARGUMENTS_PREVIEW_CHARS = 4096
# The queue loads a call's frozen arguments (encrypted text) up to this length, for its line of them;
# larger ones are read on the approval's page only. LIST_ARGUMENTS_CHARS: the line's length.
LIST_ARGUMENTS_MAX_STORED = 4096
LIST_ARGUMENTS_CHARS = 160
LIST_VALUE_CHARS = 40
PAUSE_PANEL_PROJECTS = 50
_DECISION_ID_PREFIX = "console:"

Status = Approval.Status


class OctetLength(Func):
    """PostgreSQL's octet_length: a stored value's size read from its header, where length() (in
    characters) decompresses the whole value first, up to 1 MiB of frozen arguments a row."""

    function = "OCTET_LENGTH"
    output_field = IntegerField()


def approval_reading(approval: Approval, *, now: datetime | None = None) -> str:
    """pending | approved | denied | expired — what an operator reads: an approval past its expiry
    that nobody decided is ``expired`` (which the agent reads as denied)."""
    now = now or timezone.now()
    if approval.status == Status.EXPIRED or (approval.status == Status.PENDING and approval.expires_at <= now):
        return "expired"
    return str(approval.status)


_READING_LABELS = {"pending": "pending", "approved": "approved", "denied": "denied",
                   "expired": "expired · reads as denied"}
_READING_CLASSES = {"pending": "bh-warn", "approved": "bh-ok", "denied": "bh-bad", "expired": "bh-off"}
_RISK_CLASSES = {"low": "bh-ok", "medium": "bh-warn", "high": "bh-bad"}


def reading_badge(reading: str) -> SafeString:
    return format_html('<span class="bh-badge {}" data-status="{}">{}</span>', _READING_CLASSES.get(reading, ""),
                       reading, _READING_LABELS.get(reading, reading))


def risk_badge(risk: str, *, named: bool = False) -> SafeString:
    """The risk level's badge; `named` says "risk" in it, where it stands beside the status's badge
    (the queue's "Status · risk": "pending" and "medium" were two amber badges, neither named)."""
    return format_html('<span class="bh-badge {}" data-risk="{}">{}</span>', _RISK_CLASSES.get(risk, ""), risk,
                       f"{risk} risk" if named else risk)


_STATE_CLASSES = {"executed": "bh-ok", "business_rejected": "bh-bad", "denied": "bh-bad",
                  "rejected_before_dispatch": "bh-off", "reconciliation_required": "bh-bad",
                  "in_progress": "bh-warn", "awaiting_approval": "bh-warn"}


def invocation_state_badge(inv: Invocation) -> SafeString:
    return format_html('<span class="bh-badge {}" data-state="{}">{}</span>', _STATE_CLASSES.get(inv.state, ""),
                       inv.state, inv.get_state_display())


_REASON_TEXTS = {"risk_high": "high-risk tool", "approval_required": "the tool requires approval",
                 "route_forced": "the route requires approval for this tool"}
_RULE_PREFIX = "approval_when: "


def approval_reason_text(reason: str) -> str:
    """An approval reason (call_checks.approval_reasons' rule name) as an operator reads it."""
    if reason.startswith(_RULE_PREFIX):
        return f"the arguments match the tool's approval rule “{reason[len(_RULE_PREFIX):]}”"
    return _REASON_TEXTS.get(reason, reason)


def approval_reasons_html(reasons: list[str]) -> SafeString:
    """The reasons as sentences, each with its rule name in a title (what the API and logs say)."""
    if not reasons:
        return mark_safe("—")
    return format_html_join(", ", '<span class="bh-reason" title="{}">{}</span>',
                            ((reason, approval_reason_text(reason)) for reason in reasons))


# What an approver reads when the agent's resume would be refused (invocations.invocation_blocker).
BLOCKER_TEXTS = {
    "capability_changed": (
        "This call can no longer run as it was asked: the tool changed since then (its provider's spec was "
        "re-imported or its base URL changed how the call is sent). Approving runs nothing: the agent's resume is "
        "refused (capability_changed) and it has to make a new call with the current tool."),
    "tool_not_found": (
        "This call can no longer run: its tool is no longer on the route for this agent (the provider was deleted "
        "or switched off, or the tool was removed, switched off or taken off the route). Approving runs nothing: "
        "the agent's resume is refused (tool_not_found)."),
    # selectors.session_blocker: only the session that made a call can resume it.
    "session_revoked": (
        "This call can never run: the agent session that made it was revoked, and only that session can resume it "
        "(the agent signed in again is a new session, whose resume of this call is refused: invocation_not_found). "
        "It cannot be approved."),
    "session_expired": (
        "This call can never run: the agent session that made it expired, and only that session can resume it "
        "(the agent signed in again is a new session, whose resume of this call is refused: invocation_not_found). "
        "It cannot be approved."),
    "session_authorization_deleted": (
        "This call can never run: the agent session that made it ended when its authorization record was deleted, "
        "and only that session can resume it (the agent signed in again is a new session, whose resume of this call "
        "is refused: invocation_not_found). It cannot be approved."),
    "session_approver_left": (
        "This call cannot run now: the agent session that made it ended when the account that approved its sign-in "
        "left the project (or was deactivated), and only that session can resume it. It works again only if that "
        "account is made a member again; approving runs nothing until then."),
}
# The queue's line of the same (BLOCKER_TEXTS says it whole on the approval's page).
_BLOCKER_LINES = {
    "capability_changed": "its tool changed since it was asked",
    "tool_not_found": "its tool is no longer on the route",
    "session_revoked": "its agent session was revoked",
    "session_expired": "its agent session expired",
    "session_authorization_deleted": "its agent session's authorization was deleted",
    "session_approver_left": "the account that approved its agent's sign-in left the project",
}


def call_blocker(inv: Invocation, *, approver_current: bool | None = None) -> str:
    """Why the agent's resume of ``inv`` would be refused, or ``""``: its session ended
    (selectors.session_blocker: it is the one session that can resume it), else its tool
    (invocations.invocation_blocker). ``approver_current``: a list's annotation, else read."""
    return (selectors.session_blocker(session=inv.session, approver_current=approver_current)
            or invocations.invocation_blocker(inv=inv))


def _waiting(approval: Approval, reading: str) -> bool:
    """A call still waiting for its approval: pending, or approved and not yet resumed."""
    return approval.invocation.state == Invocation.State.AWAITING_APPROVAL and (
        reading == "pending" or (reading == "approved" and approval.used_at is None))


class FrozenArguments:
    """The frozen arguments of one invocation, as the approval page shows them: pretty JSON, a
    bounded preview, or why there is nothing to show."""

    HIDDEN = ("Hidden from you: the tool marks its arguments sensitive (audit.sensitive), so only members who may "
              "decide its approvals see them.")

    def __init__(self, invocation: Invocation, *, hidden: bool = False) -> None:
        self.total_bytes = invocation.arguments_bytes
        self.sha256 = invocation.arguments_sha256
        self.absent_reason = ""
        self.text = ""
        if hidden:
            self.absent_reason = self.HIDDEN
            return
        if not invocation.frozen_arguments:
            self.absent_reason = ("No longer kept: the call has a stable result, and its frozen arguments are deleted "
                                  "then." if invocation.result is not None else "Nothing was frozen for this call.")
            return
        # The engine owns the crypto and the integrity check (the decrypted JSON must hash to the
        # invocation's arguments_sha256).
        value = invocation_transitions.arguments_thaw(invocation)
        if value is None:
            self.absent_reason = ("The frozen arguments cannot be read (their encryption key is gone or they do not "
                                  "match their hash): approving would execute nothing.")
            return
        # Its bidi controls as JSON escapes (\u202e): an agent's override in one value redrew the rest of
        # its line; escaped, the text is still the JSON that hashes to the SHA-256 shown beside it.
        self.text = json_bidi_controls_escaped(json.dumps(value, ensure_ascii=False, indent=2))

    @property
    def available(self) -> bool:
        return not self.absent_reason

    @property
    def truncated(self) -> bool:
        return len(self.text) > ARGUMENTS_PREVIEW_CHARS

    @property
    def preview(self) -> str:
        if not self.truncated:
            return self.text
        cut = self.text[:ARGUMENTS_PREVIEW_CHARS]
        # End on a whole line when one is near, so the preview does not stop mid-value.
        line_end = cut.rfind("\n")
        return cut[:line_end] if line_end > ARGUMENTS_PREVIEW_CHARS // 2 else cut


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[(Status.APPROVED.value, "Approve"), (Status.DENIED.value, "Deny")],
                                 error_messages={"required": "Press Approve or Deny.",
                                                 "invalid_choice": "Press Approve or Deny."})
    comment = forms.CharField(
        required=False, max_length=2000, strip=True, validators=[validate_shown_text],
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80, "maxlength": 2000}),
        help_text="Kept with the decision and shown to other operators; a denial's comment is also told to the "
                  "agent's model (its first 500 characters), so it can explain or correct: never paste a password or "
                  "key here (known credential shapes are removed, others are not). At most 2,000 characters.")
    # A fresh key per rendered form: sending the same form twice replays, it never decides twice.
    decision_id = forms.RegexField(regex=r"^[A-Za-z0-9._:-]{1,128}$", widget=forms.HiddenInput,
                                   error_messages={"required": "Reload the page and decide again.",
                                                   "invalid": "Reload the page and decide again."})

    # Shown, and required to approve, only when the approver is the person the agent acts for.
    own_call = forms.BooleanField(required=False, label="I approve a call made on my own behalf")

    OWN_CALL_REQUIRED = ("The agent makes this call on your behalf: approving it yourself needs the box "
                         "“I approve a call made on my own behalf” ticked, or another owner or editor to decide. "
                         "Nothing was recorded.")

    @classmethod
    def fresh(cls) -> DecisionForm:
        return cls(initial={"decision_id": f"{_DECISION_ID_PREFIX}{uuid.uuid4()}"})


def arguments_line(value: dict[str, Any], *, limit: int) -> SafeString:
    """`name=value, …` on one line (JSON values), at most `limit` characters, the last cut with an
    ellipsis. Each pair is isolated and its bidi controls are JSON escapes (\u202e): an agent's
    right-to-left override in one value reordered the rest of the line (quantity=500 could read as
    005)."""
    pairs: list[str] = []
    room = limit
    for name, item in value.items():
        shown = json_bidi_controls_escaped(json.dumps(item, ensure_ascii=False))
        if len(shown) > LIST_VALUE_CHARS:  # each value cut on its own: a long first one hid the rest
            size = f"{len(item):,} characters" if isinstance(item, str) else f"{len(shown):,} characters of JSON"
            shown = f"{shown[:LIST_VALUE_CHARS - 1]}… ({size})"
        pair = f"{json_bidi_controls_escaped(json.dumps(name, ensure_ascii=False))[1:-1]}={shown}"
        room -= 2 if pairs else 0
        if len(pair) > room:
            if room > 0:
                pairs.append(f"{pair[:room - 1]}…")
            elif pairs:  # no room for a word of the next: say there is more
                pairs[-1] += "…"
            break
        pairs.append(pair)
        room -= len(pair)
    return format_html_join(", ", "<bdi>{}</bdi>", ((pair,) for pair in pairs))


def approver_relation(invocation: Invocation, user: Any) -> str:
    """How the approver relates to the person the agent acts for: ``self`` when the agent's session
    was signed in on BailingHub's own page by this very account (its principal is this account);
    ``same_name`` when a business backend signed it in for a user named as this account; else ``""``."""
    authorization = invocation.session.authorization
    if authorization is not None and authorization.decided_on_page and authorization.decided_by_id == user.pk:
        return "self"
    if invocation.on_behalf_of and invocation.on_behalf_of == user.get_username():
        return "same_name"
    return ""


class PauseForm(forms.Form):
    paused = forms.TypedChoiceField(choices=[("1", "pause"), ("0", "resume")], coerce=lambda value: value == "1",
                                    error_messages={"required": "Choose to pause or to resume."})


class ApprovalStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("pending", "Pending"), ("approved", "Approved"), ("denied", "Denied"),
                ("expired", "Expired (reads as denied)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        value = self.value()
        if value == "pending":
            return queryset.filter(status=Status.PENDING, expires_at__gt=now)
        if value == "expired":
            return queryset.filter(Q(status=Status.EXPIRED) | Q(status=Status.PENDING, expires_at__lte=now))
        if value in (Status.APPROVED, Status.DENIED):
            return queryset.filter(status=value)
        return queryset


class ApprovalSessionFilter(admin.SimpleListFilter):
    """Whether the agent session that made the call can still resume it (the landing page counts the
    pending approvals of live sessions as work, and those of ended ones apart)."""

    title = "agent session"
    parameter_name = "session"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("live", "Can still resume the call"), ("ended", "Ended: the call cannot run")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        live = session_live_q(timezone.now(), prefix="invocation__session__")
        if self.value() == "live":
            return queryset.filter(live)
        if self.value() == "ended":
            return queryset.exclude(live)
        return queryset


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    """The approval queue: pending first, then newest. Operators of a project see its approvals;
    owners and editors decide them."""

    # Few columns, so the list fits beside the filters; the approval's page has everything else. Status
    # and risk share one (the prompt, the text an approver reads, was left a word or two wide).
    list_display = ["tool", "status_and_risk", "prompt_text", "asked_by", "age"]
    list_display_links = ["tool"]
    list_filter = [ApprovalStatusFilter, ApprovalSessionFilter, ("invocation__route", RouteListFilter), "risk",
                   "project"]
    search_fields = ["tool_name", "prompt", "invocation__on_behalf_of", "invocation__principal_id",
                     "=invocation__run__conversation__client_conversation_id", "=invocation__invocation_id"]
    # The rows show each call's conversation id, which found nothing (browser audit).
    search_help_text = ("Finds the approvals whose tool, prompt, end user or principal holds the words, or whose "
                        "conversation id or invocation id is exactly what you type.")
    list_select_related = ["project", "invocation", "invocation__route", "invocation__session",
                           "invocation__session__client", "invocation__run__conversation"]
    change_list_template = "admin/tools/approval/change_list.html"
    list_per_page = 50

    def get_ordering(self, request: HttpRequest) -> list[Any]:
        """Pending (and not yet expired) first, then the newest."""
        queue_rank = Case(When(status=Status.PENDING, expires_at__gt=timezone.now(), then=Value(0)),
                          default=Value(1), output_field=IntegerField())
        return [queue_rank.asc(), "-created_at"]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> Any:
        changelist = super().get_changelist(request, **kwargs)

        class ArgumentsNotLoaded(changelist):  # type: ignore[valid-type,misc]
            """The list reads what it shows, in one query with its relations, and nothing else: never the
            frozen arguments, the result, the run's frozen context or the session's principal."""

            def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Approval]:
                queryset: QuerySet[Approval] = super().get_queryset(request, exclude_parameters)
                return queryset.only(*ApprovalAdmin.list_fields).annotate(**ApprovalAdmin.list_arguments)

            def get_results(self, request: HttpRequest) -> None:
                # Whether each row's session approver could still approve it (selectors.session_blocker),
                # for the page's rows in one query: as a column of the list, its joins went into the
                # count of every approval too.
                super().get_results(request)
                sessions = {row.invocation.session_id for row in self.result_list}
                current = set(AgentSession.objects.filter(session_approver_current_q(), pk__in=sessions)
                              .values_list("pk", flat=True)) if sessions else set()
                for row in self.result_list:
                    row.session_approver_current = row.invocation.session_id in current

        return ArgumentsNotLoaded

    # Every field the list's columns read, through list_select_related; another one read by a column
    # would be loaded row by row (tests pin the query count).
    list_fields = (
        "tool_name", "status", "risk", "prompt", "created_at", "expires_at", "used_at", "project__name",
        "invocation__state", "invocation__provider_name", "invocation__arguments_sha256", "invocation__on_behalf_of",
        "invocation__principal_id",
        "invocation__route__name", "invocation__route__key",
        "invocation__session__device_label", "invocation__session__revoked_at",
        "invocation__session__refresh_expires_at", "invocation__session__authorization_id",
        "invocation__session__client__name",
        "invocation__session__client__app_id",
        "invocation__run__conversation__client_conversation_id",
    )

    # The frozen arguments when they are small (else ""), their stored size, and whether the provider's
    # current tool marks them sensitive ("true"/"false"; None when the tool or its provider is gone).
    list_arguments = {
        "arguments_stored": OctetLength("invocation__frozen_arguments"),
        "arguments_small": Case(When(arguments_stored__lte=LIST_ARGUMENTS_MAX_STORED,
                                     then=F("invocation__frozen_arguments")),
                                default=Value(""), output_field=TextField()),
        "arguments_sensitive": Subquery(
            Tool.objects.filter(provider_id=OuterRef("invocation__provider_id"), name=OuterRef("tool_name"))
            .annotate(flag=Coalesce(KT("compiled__audit_sensitive"), Value("false"), output_field=TextField()))
            .values("flag")[:1]),
    }

    def has_decide_permission(self, request: HttpRequest, approval: Approval) -> bool:
        return approval.project_id in self.editable_project_ids(request)

    def _arguments(self, request: HttpRequest, approval: Approval) -> FrozenArguments:
        """The call's frozen arguments as this operator may read them: a tool that marks them
        sensitive (ACC `audit.sensitive`, read from the provider's current tool; a tool or provider no
        longer there counts as sensitive) shows them only to members who may decide."""
        inv = approval.invocation
        if self.has_decide_permission(request, approval):
            return FrozenArguments(inv)
        if inv.provider_id is None:  # a built-in tool has no provider name; a deleted provider's call keeps it
            sensitive = bool(inv.provider_name)
        else:
            compiled = (Tool.objects.filter(provider_id=inv.provider_id, name=inv.tool_name)
                        .values_list("compiled", flat=True).first())
            sensitive = compiled is None or bool(compiled.get("audit_sensitive"))
        return FrozenArguments(inv, hidden=sensitive)

    @admin.display(description="Tool", ordering="tool_name")
    def tool(self, obj: Approval) -> SafeString:
        provider = obj.invocation.provider_name
        return format_html('{}<br><span class="bh-muted">{}</span>', identifier_html(obj.tool_name),
                           format_html("from {}", text_html(provider)) if provider else "built in")

    @admin.display(description="Prompt · arguments")
    def prompt_text(self, obj: Approval) -> SafeString:
        line = format_html('<span class="bh-arguments-line">{}</span>', self._arguments_line(obj))
        shown = format_html("{}<br>{}", text_html(obj.prompt), line) if obj.prompt else line
        blocked = self._session_blocked(obj)
        return format_html("{}<br>{}", blocked, shown) if blocked else shown

    @staticmethod
    def _session_blocked(obj: Approval) -> SafeString:
        """Why a waiting call's agent session cannot resume it, as its page says it (BLOCKER_TEXTS);
        its tool's blocker needs the route's surface, a query a row: its page says that one."""
        reading = approval_reading(obj)
        if not _waiting(obj, reading):
            return mark_safe("")
        blocker = selectors.session_blocker(session=obj.invocation.session,
                                            approver_current=getattr(obj, "session_approver_current", None))
        if not blocker:
            return mark_safe("")
        can_never = blocker in selectors.SESSION_BLOCKERS_FOR_GOOD
        return format_html(
            '<strong class="bh-blocked" data-blocker="{}" title="{}">{}: {}.{}</strong>', blocker,
            BLOCKER_TEXTS[blocker], "Can never run" if can_never else "Cannot run now", _BLOCKER_LINES[blocker],
            " Deny it." if reading == "pending" else "")

    @staticmethod
    def _arguments_line(obj: Approval) -> SafeString:
        """A line of the call's arguments, or why the queue shows none (its page may still)."""
        inv = obj.invocation
        sensitive = getattr(obj, "arguments_sensitive", None)
        small = getattr(obj, "arguments_small", "")
        if not getattr(obj, "arguments_stored", None):  # deleted once the result was stable: on its page neither
            why = "No longer kept."
        elif inv.provider_name and sensitive is None:
            why = "The tool is no longer there: on the approval's page, for members who may decide."
        elif inv.provider_name and sensitive != "false":
            why = "Marked sensitive: on the approval's page, for members who may decide."
        elif not small:
            why = "Too long for the list: open the approval."
        else:
            value = invocation_transitions.frozen_arguments_read(small, sha256=inv.arguments_sha256)
            if value is not None:
                return arguments_line(value, limit=LIST_ARGUMENTS_CHARS)
            why = "Cannot be read: open the approval."
        return format_html('<span class="bh-muted">{}</span>', why)

    @admin.display(description="Asked by · from")
    def asked_by(self, obj: Approval) -> SafeString:
        # Names first, as on the approval's page; the app id and the route's key stay beside them as
        # secondary ids (.bh-id) and the run's id in its link's title, for support. Every value here
        # came from an agent or a person: identifiers read left to right, names keep their direction,
        # and none reorders the words between them (apps.core.bidi).
        inv = obj.invocation
        client, route, run = inv.session.client, inv.route, inv.run
        return format_html(
            '<span class="bh-asker">{} <span class="bh-muted">· principal {}</span></span>'
            '<span class="bh-agent">{} <span class="bh-muted">on {}</span> '
            '<span class="bh-id" title="The agent client\'s app id">{}</span></span>'
            '<span class="bh-route">{} · {} <span class="bh-id" title="The route\'s key">{}</span></span>'
            '<span class="bh-run"><a href="{}" title="The run\'s id: {}">Run</a> '
            '<span class="bh-muted">in conversation {}</span></span>',
            identifier_html(inv.on_behalf_of), identifier_html(inv.principal_id),
            text_html(client.name), text_html(inv.session.device_label), identifier_html(client.app_id),
            text_html(obj.project.name), text_html(route.name), identifier_html(route.key),
            reverse("admin:ledger_run_change", args=[run.pk]), run.pk,
            identifier_html(run.conversation.client_conversation_id))

    @admin.display(description="Asked · expires", ordering="created_at")
    def age(self, obj: Approval) -> SafeString:
        asked = time_ago(obj.created_at)
        if obj.status != Status.PENDING:
            return asked
        now = timezone.now()
        if obj.expires_at <= now:
            return format_html('{}<br><span class="bh-muted" title="{}">expired {} ago</span>', asked,
                               obj.expires_at.isoformat(timespec="seconds"), timesince(obj.expires_at, now))
        return format_html('{}<br><span class="bh-muted" title="{}">expires in {}</span>', asked,
                           obj.expires_at.isoformat(timespec="seconds"), timeuntil(obj.expires_at, now))

    @admin.display(description="Status · risk", ordering="status")
    def status_and_risk(self, obj: Approval) -> SafeString:
        return format_html('{} <span class="bh-risk">{}</span>', reading_badge(approval_reading(obj)),
                           risk_badge(obj.risk, named=True))

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/decide/", wrap(self.decide_view), name="tools_approval_decide"),
            path("<path:object_id>/arguments/", wrap(self.arguments_view), name="tools_approval_arguments"),
            path("execution/<uuid:project_id>/", wrap(self.execution_view), name="tools_approval_execution"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        visible = list(project_list_visible(user=request.user).order_by("name")[:PAUSE_PANEL_PROJECTS])
        editable = self.editable_project_ids(request)
        extra_context = {
            "title": "Approvals",  # not Django's "Select approval to view": the queue is where they are decided
            **(extra_context or {}),
            "execution_projects": [{"project": project, "can_switch": project.pk in editable} for project in visible],
            "paused_projects": [project for project in visible if project.tool_execution_paused],
        }
        return super().changelist_view(request, extra_context)

    def _approval(self, request: HttpRequest, object_id: str, *, arguments: bool = False) -> Approval:
        """The approval if this operator may see it; another project's approval is a 404, as an
        unknown one (no hint that it exists)."""
        queryset: QuerySet[Approval] = self.get_queryset(request).select_related(
            "project", "invocation", "invocation__route", "invocation__session", "invocation__session__client",
            "invocation__session__authorization", "approver", "invocation__run", "invocation__run__conversation",
        ).defer("invocation__run__context_snapshot", "invocation__run__active_tools_snapshot")
        if not arguments:
            queryset = queryset.defer("invocation__frozen_arguments")
        try:
            return queryset.get(pk=uuid.UUID(str(object_id)))
        except (ValueError, Approval.DoesNotExist):
            raise Http404("No such approval.") from None

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        approval = self._approval(request, object_id, arguments=True)
        return self._detail_page(request, approval, form=DecisionForm.fresh())

    def _detail_page(self, request: HttpRequest, approval: Approval, *, form: DecisionForm,
                     status: int = 200) -> TemplateResponse:
        inv = approval.invocation
        reading = approval_reading(approval)
        journal = list(InvocationJournalEntry.objects.filter(invocation=inv).order_by("created_at"))
        # The tool as the provider's spec describes it, while the provider still has it (a built-in has none).
        tool = (Tool.objects.filter(provider_id=inv.provider_id, name=inv.tool_name).only("pk", "description")
                .first() if inv.provider_id else None)
        # A call still waiting for its approval (pending, or approved and not yet resumed) may no
        # longer be able to run: its agent session ended, a re-import changed its tool, or the tool is
        # gone from the route.
        blocker = call_blocker(inv) if _waiting(approval, reading) else ""
        context = {
            **self.admin_site.each_context(request),
            "title": f"Approval: {approval.tool_name}",
            "subtitle": None,
            "opts": self.opts,
            "approval": approval,
            "invocation": inv,
            "tool": tool,
            "reading": reading,
            "reading_badge": reading_badge(reading),
            "risk_badge": risk_badge(approval.risk),
            "reasons": approval_reasons_html(list(approval.reasons or [])),
            "invocation_badge": invocation_state_badge(inv),
            "arguments": self._arguments(request, approval),
            "preview_chars": ARGUMENTS_PREVIEW_CHARS,
            "journal": [{"entry": entry, "detail": json.dumps(entry.detail, ensure_ascii=False, sort_keys=True)
                         if entry.detail else ""} for entry in journal],
            "result_text": (inv.result or {}).get("text", "") if isinstance(inv.result, dict) else "",
            "can_decide": reading == "pending" and self.has_decide_permission(request, approval),
            "may_decide_role": self.has_decide_permission(request, approval),
            "form": form,
            "paused": approval.project.tool_execution_paused,
            "blocker": blocker,
            "blocker_text": BLOCKER_TEXTS.get(blocker, ""),
            # Only a denial is offered: nothing can ever resume the call.
            "blocked_for_good": blocker in selectors.SESSION_BLOCKERS_FOR_GOOD,
            "approver_relation": approver_relation(inv, request.user),
            # Kept readable for every operator afterwards: the approver was the person the agent acts for.
            "self_approved": approval.approver is not None and approver_relation(inv, approval.approver) == "self",
        }
        return TemplateResponse(request, "admin/tools/approval/detail.html", context, status=status)

    def _detail_url(self, approval: Approval) -> str:
        return reverse("admin:tools_approval_change", args=[approval.pk])

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        approval = self._approval(request, object_id)
        if request.method != "POST":
            return HttpResponseRedirect(self._detail_url(approval))
        if not self.has_decide_permission(request, approval):
            raise PermissionDenied
        form = DecisionForm(request.POST)
        if not form.is_valid():
            return self._detail_page(request, approval, form=form)
        data = form.cleaned_data
        # Four eyes in the console: the contract names no refusal for this (the builder API decides
        # as before), so the console asks the person the agent acts for to say so, not to be stopped.
        blocker = (call_blocker(approval.invocation) if data["decision"] == Status.APPROVED
                   and _waiting(approval, approval_reading(approval)) else "")
        if blocker in selectors.SESSION_BLOCKERS_FOR_GOOD and approval.status == Status.PENDING:
            form.add_error(None, f"{BLOCKER_TEXTS[blocker]} Deny it instead. Nothing was recorded.")
            return self._detail_page(request, approval, form=form, status=400)
        if (data["decision"] == Status.APPROVED and not data["own_call"] and approval.status == Status.PENDING
                and approver_relation(approval.invocation, request.user) == "self"):
            form.add_error(None, DecisionForm.OWN_CALL_REQUIRED)
            return self._detail_page(request, approval, form=form, status=400)
        replay = approval.decision_id == data["decision_id"]
        try:
            decided = approvals.approval_decide(
                approval_id=approval.pk, projects=project_list_editable(user=request.user),
                decision_id=data["decision_id"], decision=data["decision"], comment=data["comment"],
                approver=request.user)
        except ApprovalNotFound:
            raise Http404("No such approval.") from None
        except ApprovalAlreadyDecided:
            approval.refresh_from_db()
            messages.error(request, format_html(
                "This approval was already {} by {} at {}; a decision is final, yours was not recorded.",
                approval.status, approval.approver_label or "another approver",
                local_time(approval.decided_at, "Y-m-d H:i:s T") if approval.decided_at else "?"))
        except ApprovalExpired:
            messages.warning(request, "This approval expired before it was decided: it reads as denied, and the "
                                      "call will not run. Nothing was recorded.")
        except ApprovalCallCannotRun as refused:  # its session ended after the check above
            messages.error(request, refused.message)
        else:
            if replay:
                messages.info(request, "This decision was already recorded.")
            elif decided.status == Status.APPROVED and blocker:
                messages.warning(request, f"Approved, but the call cannot run as things now are: "
                                          f"{_BLOCKER_LINES[blocker]}. The agent's resume is refused; see the page.")
            elif decided.status == Status.APPROVED:
                messages.success(request, "Approved. The agent's resume executes exactly the frozen arguments, once.")
            else:
                messages.success(request, "Denied. The call will not run; the agent reads it as denied.")
        return HttpResponseRedirect(self._detail_url(approval))

    def arguments_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The whole frozen snapshot as pretty JSON text, loaded only when the operator expands it."""
        approval = self._approval(request, object_id, arguments=True)
        frozen = self._arguments(request, approval)
        if frozen.absent_reason == FrozenArguments.HIDDEN:
            raise PermissionDenied
        if not frozen.available:
            return HttpResponse(frozen.absent_reason, status=410, content_type="text/plain; charset=utf-8")
        response = HttpResponse(frozen.text, content_type="text/plain; charset=utf-8")
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Disposition"] = "inline"
        return response

    def execution_view(self, request: HttpRequest, project_id: uuid.UUID) -> HttpResponse:
        """The execution pause switch of one project, behind a confirmation page."""
        project = project_list_visible(user=request.user).filter(pk=project_id).first()
        if project is None:
            raise Http404("No such project.")
        if project.pk not in self.editable_project_ids(request):
            raise PermissionDenied
        # Opened from the project's page, the switch leads back there (Cancel and done alike);
        # the URL is built here, never taken from the request.
        back = (reverse("admin:projects_project_change", args=[project.pk]) if request.GET.get("from") == "project"
                else reverse("admin:tools_approval_changelist"))
        form = PauseForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            paused = bool(form.cleaned_data["paused"])
            project_tool_execution_set(project=project, paused=paused, actor=request.user)
            if paused:
                messages.warning(request, f"Tool execution is paused for {project.name}: agents' calls and resumes "
                                          "dispatch nothing (503 execution_paused) until you resume it.")
            else:
                messages.success(request, f"Tool execution resumed for {project.name}.")
            return HttpResponseRedirect(back)
        pending = Approval.objects.filter(project=project, status=Status.PENDING,
                                          expires_at__gt=timezone.now()).count()
        context = {
            **self.admin_site.each_context(request),
            "title": f"Tool execution — {project.name}",
            "opts": self.opts,
            "project": project,
            "form": form,
            "pending": pending,
            "back": back,
        }
        return TemplateResponse(request, "admin/tools/approval/execution.html", context)

