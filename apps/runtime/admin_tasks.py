"""Operator screens for task control: the task list, and a task's page with its live counters and
the pause / resume / cancel buttons. Creating a task from existing agent sessions is
apps.runtime.admin_task_create (its forms and views, which TaskAdmin takes in).

Every write goes through ``apps.tasks.services`` (the builder API calls the same functions):
``task_create`` with a request_id rendered into the form, so a double submit creates one task, and
``task_control`` with the revision the page showed, so a stale page changes nothing. The tool
checkboxes come from the route's surface (``apps.tools.surface``); the admin may import tools, the
task services may not. Pages show states and counts, never tool arguments or business bodies.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import session_end
from apps.core.timefmt import local_time
from apps.core.validators import uuid_parse
from apps.projects.admin import ProjectScopedAdminMixin
from apps.tasks import selectors, services
from apps.tasks.errors import TaskRequestConflict, TaskRevisionConflict, TaskTransitionInvalid
from apps.tasks.models import Task, TaskLedgerEntry

from .admin_task_create import TaskCreateViews, fresh_request_id

LEDGER_SHOWN = 20
# A member's tools past this many are folded under their count on the task's page: 32 members of
# 40 tools each were a members table 5,900 px tall at 1366 px wide, 25,000 px at 390.
MEMBER_TOOLS_INLINE = 8
_STATE_CLASSES = {"active": "bh-ok", "paused": "bh-warn", "blocked": "bh-bad", "cancelled": "bh-off"}
_ACTION_LABELS = {"pause": "Pause", "resume": "Resume", "cancel": "Cancel task"}
# Which buttons a state offers; the service decides again under the row lock.
_ACTIONS_FROM = {
    Task.State.ACTIVE: ["pause", "cancel"],
    Task.State.PAUSED: ["resume", "cancel"],
    Task.State.BLOCKED: ["cancel"],
    Task.State.CANCELLED: [],
}


def state_badge(state: str) -> SafeString:
    return format_html('<span class="bh-badge {}" data-task-state="{}">{}</span>', _STATE_CLASSES.get(state, ""),
                       state, state)


def budget_text(task: Task) -> str:
    limit = "∞" if task.max_write_calls is None else str(task.max_write_calls)
    return f"{task.write_consumed} / {task.write_reserved} / {limit}"


def budget_note(task: Task) -> str:
    """What a full write budget means for the task's members, beside its counters (empty while
    writes are left): the state stays ``active``, so the counters alone did not say that every new
    write call is refused. 0 (read only) is said by the policy itself."""
    limit = task.max_write_calls
    if not limit or task.write_reserved + task.write_consumed < limit:
        return ""
    if task.write_consumed >= limit:
        return ("Used up: every new write call is refused (TASK_WRITE_BUDGET_EXHAUSTED); reads still run. A task's "
                "budget is frozen: for more writes, create a new task.")
    return ("Fully reserved by writes awaiting approval or dispatch: new write calls are refused "
            "(TASK_WRITE_BUDGET_EXHAUSTED) until one of them is denied or refused before it is sent.")


def permits_text(task: Task) -> str:
    return f"{task.active_permits} / {task.max_concurrent}"


def permits_note(task: Task) -> str:
    """What permits held by uncertain calls mean, beside the counter (empty when none is): they are
    never given back, so the counter alone read as calls still running."""
    uncertain = selectors.task_uncertain_permits(task)
    if not uncertain:
        return ""
    held = f"{uncertain} held by {'a call' if uncertain == 1 else 'calls'} whose outcome is uncertain, for good"
    if uncertain >= task.max_concurrent:
        return (f"{held}: no new call can run (TASK_DISPATCH_UNCERTAIN). Check the business system, then cancel "
                "the task and create another for what is left.")
    return f"{held}: {task.max_concurrent - uncertain} left for new calls."



# ---- the admin ------------------------------------------------------------------------------------


class ControlForm(forms.Form):
    action = forms.ChoiceField(choices=[(name, name) for name in _ACTION_LABELS],
                               error_messages={"required": "Press a button.", "invalid_choice": "Press a button."})
    expected_revision = forms.IntegerField(min_value=1, error_messages={"required": "Reload the page."})
    request_id = forms.RegexField(regex=r"^[A-Za-z0-9._:-]{1,128}$",
                                  error_messages={"required": "Reload the page.", "invalid": "Reload the page."})
    confirmed = forms.BooleanField(required=False)


class TaskCanRunFilter(admin.SimpleListFilter):
    """Whether a task can still run, before a read blocks it (selectors.task_can_run_q): its stored
    state stays active past its expiry, or after a member was revoked, until it is read."""

    title = "can run"
    parameter_name = "runs"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No: cancelled, blocked or expired")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        can_run = selectors.task_can_run_q(timezone.now())
        if self.value() == "yes":
            return queryset.filter(can_run)
        if self.value() == "no":
            return queryset.exclude(can_run)
        return queryset


@admin.register(Task)
class TaskAdmin(TaskCreateViews, ProjectScopedAdminMixin, admin.ModelAdmin):
    """Tasks of the operator's projects. Owners and editors create and control them; viewers read."""

    list_display = ["task_name", "state_badge", "member_count", "write_budget", "permits", "expiry", "created"]
    list_display_links = ["task_name"]
    list_filter = ["state", TaskCanRunFilter, "project"]
    # The name, the request id the task was created with, and its id or the start of it (as a URL shows it).
    search_fields = ["name", "request_id", "^id"]
    list_select_related = ["project"]
    ordering = ["-created_at", "-id"]
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[Task]:
        queryset: QuerySet[Task] = super().get_queryset(request)
        return queryset.annotate(member_total=Count("members"))

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Django's "Select task to change": a task is frozen, its page reads it and controls it.
        return super().changelist_view(request, {"title": "Tasks", **(extra_context or {})})

    def has_control_permission(self, request: HttpRequest, task: Task) -> bool:
        return request.user.is_superuser or task.project_id in self.editable_project_ids(request)

    @admin.display(description="Name", ordering="name")
    def task_name(self, obj: Task) -> str:
        return str(obj)

    @admin.display(description="State", ordering="state")
    def state_badge(self, obj: Task) -> SafeString:
        return state_badge(obj.state)

    @admin.display(description="Members", ordering="member_total")
    def member_count(self, obj: Task) -> int:
        return int(getattr(obj, "member_total", 0))

    @admin.display(description="Writes: consumed / reserved / max")
    def write_budget(self, obj: Task) -> str:
        return budget_text(obj)

    @admin.display(description="Permits: active / max")
    def permits(self, obj: Task) -> str:
        return permits_text(obj)

    @admin.display(description="Expires", ordering="expires_at")
    def expiry(self, obj: Task) -> str:
        if obj.expires_at is None:
            return "never"
        when = local_time(obj.expires_at)
        return f"expired {when}" if obj.expires_at <= timezone.now() else when

    @admin.display(description="Created", ordering="created_at")
    def created(self, obj: Task) -> str:
        return local_time(obj.created_at)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/control/", wrap(self.control_view), name="tasks_task_control"),
            path("<path:object_id>/live/", wrap(self.live_view), name="tasks_task_live"),
            path("sessions/<uuid:project_id>/", wrap(self.sessions_view), name="tasks_task_sessions"),
            path("tools/<uuid:project_id>/", wrap(self.tools_view), name="tasks_task_tools"),
            *super().get_urls(),
        ]

    # -- the task page --

    def _task(self, request: HttpRequest, object_id: str) -> Task:
        """Another project's task is a 404, as an unknown one."""
        pk = uuid_parse(str(object_id))
        if pk is None:
            raise Http404("No such task.")
        task = self.get_queryset(request).select_related("project", "created_by").filter(pk=pk).first()
        if task is None:
            raise Http404("No such task.")
        return task

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        task = self._task(request, object_id)
        if request.method == "POST":
            # The page has no form of its own: controls post to their own URL.
            return HttpResponseRedirect(reverse("admin:tasks_task_change", args=[task.pk]))
        return self._detail_page(request, task)

    def _detail_page(self, request: HttpRequest, task: Task, *, confirm: dict[str, Any] | None = None,
                     status: int = 200) -> TemplateResponse:
        can_control = self.has_control_permission(request, task)
        members = list(task.members.select_related("session", "session__client", "session__authorization")
                       .order_by("position"))
        # A revoked or expired member blocks the task: the page says so, as the agent's reads do.
        task = services.task_state_current(task=task, members=members)
        ledger = list(TaskLedgerEntry.objects.filter(task=task).order_by("-sequence")[:LEDGER_SHOWN])
        context = {
            **self.admin_site.each_context(request),
            "title": f"Task: {task}",
            "subtitle": None,
            "opts": self.opts,
            "task": task,
            "state_badge": state_badge(task.state),
            "budget": budget_text(task),
            "budget_note": budget_note(task),
            "permits": permits_text(task),
            "permits_note": permits_note(task),
            "policy": selectors.task_policy(task),
            "members": [{"member": m, "session_state": _session_state(m.session)} for m in members],
            "tools_inline": MEMBER_TOOLS_INLINE,
            "runs": selectors.task_runs_summary(task=task),
            "ledger": ledger,
            "can_control": can_control,
            "actions": [{"name": name, "label": _ACTION_LABELS[name]}
                        for name in _ACTIONS_FROM.get(Task.State(task.state), [])] if can_control else [],
            "request_id": fresh_request_id(),
            "confirm": confirm,
            "live_url": reverse("admin:tasks_task_live", args=[task.pk]),
            "expired": task.expires_at is not None and task.expires_at <= timezone.now(),
        }
        return TemplateResponse(request, "admin/tasks/task/detail.html", context, status=status)

    def live_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """The counters the task page refreshes: states and counts only."""
        task = services.task_state_current(task=self._task(request, object_id))
        # admin_view already marks it never-cache (no-store).
        return JsonResponse({"state": task.state, "revision": task.revision,
                             "ledger_sequence": task.ledger_sequence, "counters": selectors.task_counters(task),
                             "budget": budget_text(task), "budget_note": budget_note(task),
                             "permits": permits_text(task), "permits_note": permits_note(task)})

    def control_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        task = self._task(request, object_id)
        detail_url = reverse("admin:tasks_task_change", args=[task.pk])
        if request.method != "POST":
            return HttpResponseRedirect(detail_url)
        if not self.has_control_permission(request, task):
            raise PermissionDenied
        form = ControlForm(request.POST)
        if not form.is_valid():
            messages.error(request, "The control was not understood; reload the page and try again. Nothing changed.")
            return HttpResponseRedirect(detail_url)
        data = form.cleaned_data
        if data["action"] == "cancel" and not data["confirmed"]:
            task = services.task_state_current(task=task)  # a revoked member blocks it as the page would
            if data["expected_revision"] != task.revision:
                # Caught at the first click, not after the operator has confirmed a stale page.
                _changed_since_loaded(request, task)
                return HttpResponseRedirect(detail_url)
            return self._detail_page(request, task, confirm={"expected_revision": data["expected_revision"],
                                                             "request_id": data["request_id"]})
        try:
            services.task_control(task=task, user=request.user, request_id=data["request_id"],
                                  expected_revision=data["expected_revision"], action=data["action"])
        except TaskRevisionConflict:
            task.refresh_from_db()
            _changed_since_loaded(request, task)
        except TaskTransitionInvalid as error:
            messages.error(request, f"{error.message} Nothing was changed.")
        except TaskRequestConflict:
            messages.error(request, "This button was already used for a different control; reload the page. "
                                    "Nothing was changed.")
        else:
            done = {"pause": "Paused: no new dispatch permits; calls in flight may finish.",
                    "resume": "Resumed: new calls may dispatch again; the budget is as it was.",
                    "cancel": "Cancelled: final. Nothing was rolled back."}
            messages.success(request, done[data["action"]])
        return HttpResponseRedirect(detail_url)


def _changed_since_loaded(request: HttpRequest, task: Task) -> None:
    messages.error(request, f"The task changed since you loaded it (it is now {task.state}, revision "
                            f"{task.revision}); nothing was changed. Look at it again before deciding.")


def _session_state(session: AgentSession) -> str:
    end = session_end(session=session, now=timezone.now())
    return "active" if end is None else end.value.replace("_", " ")
