"""The console's page that creates a task from existing agent sessions: a project, a policy, and up
to MEMBER_ROWS member rows (a session, one of its workspaces, a conversation id, tools of that
workspace's surface), with the session search and the tools box the page loads as rows are filled.

Every write goes through ``apps.tasks.services.task_create`` with a request_id rendered into the
form, so a double submit creates one task. The tool checkboxes come from the route's surface
(``apps.tools.surface``); the admin may import tools, the task services may not. TaskAdmin
(apps.runtime.admin_tasks) takes in the views below (TaskCreateViews)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.exceptions import PermissionDenied
from django.db.models import BooleanField, ExpressionWrapper, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import JSONObject
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import ngettext

from apps.agent_auth.models import AgentSession
from apps.agent_auth.selectors import session_live_q, session_route_keys, session_route_keys_in_order
from apps.core.validators import uuid_parse, validate_shown_name
from apps.projects.admin import autocomplete_page, autocomplete_words
from apps.projects.models import Project
from apps.projects.selectors import project_list_editable
from apps.routes.admin import RouteKeyField, RouteKeySearchSelect, project_routes, routes_listed
from apps.routes.models import Route
from apps.routes.validators import ROUTE_KEY_RE
from apps.tasks import selectors, services
from apps.tasks.errors import TaskInvalid, TaskRequestConflict
from apps.tasks.models import Task, TaskMember
from apps.tools.surface import route_surface, route_surfaces

MEMBER_ROWS = 4
# A row's tools box offers a filter by name past this many tools: 40 boxes were 40 stops of the
# Tab key between a member's conversation id and the next member.
TOOLS_FILTER_MIN = 12
SESSIONS_PER_PAGE = 20
_REQUEST_PREFIX = "console:"


def fresh_request_id() -> str:
    """A request id for a form that creates or controls a task: a double submit repeats it."""
    return f"{_REQUEST_PREFIX}{uuid.uuid4()}"


def session_label(session: AgentSession) -> str:
    """What identifies a session to an operator — never a token — and the workspaces it may use,
    the only ones a member row of it can name."""
    who = session.on_behalf_of or "—"
    workspaces = ", ".join(session_route_keys_in_order(session)) or "none"
    label = (f"{session.client.app_id} · {who} (principal {session.principal_id}) · {session.device_label} "
             f"— workspaces: {workspaces}")
    # A session of a task is task-enforced for good: once its tasks ended it works again only in a
    # new task, and the operator picking it should know. Named: a task it may still work in, else
    # its newest (live_sessions).
    last = getattr(session, "last_task", None)
    if not last:
        return label
    state = last["state"]
    if not last["usable"] and state != Task.State.CANCELLED:
        expires_at = datetime.fromisoformat(last["expires_at"]) if last["expires_at"] else None
        state = "expired" if expires_at is not None and expires_at <= timezone.now() else Task.State.BLOCKED
    name = last["name"] or f"task {last['id']}"
    return f"{label} — in {name} ({state})"


# ---- the forms -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolOption:
    route: str
    name: str
    readonly: bool

    @property
    def value(self) -> str:
        return f"{self.route}:{self.name}"


def route_tool_options(routes: list[Route]) -> dict[str, list[ToolOption]]:
    """The tools an operator may grant on each of `routes`, by route key, as the operator's view of
    the surface shows them; a member's own surface is checked again on submit. A route without
    agent-direct tools has none and is not walked. A fixed number of queries whatever the routes."""
    direct = sorted((route for route in routes if route.tools_direct_enabled), key=lambda route: route.key)
    options: dict[str, list[ToolOption]] = {route.key: [] for route in routes}
    for route, surface in zip(direct, route_surfaces(routes=direct, session=None), strict=True):
        options[route.key] = [ToolOption(route=route.key, name=tool.name, readonly=bool(tool.definition["readonly"]))
                              for tool in surface.tools]
    return options


def posted_route_keys(data: Any, prefix: str) -> list[str]:
    """The route keys a posted member row names: its workspace and the route of each tool it sent
    (`route:name`). Only what could be a route key, so junk is never looked up."""
    values = [data.get(f"{prefix}-workspace") or "",
              *(value.partition(":")[0] for value in data.getlist(f"{prefix}-allowed_tools"))]
    return [value for value in dict.fromkeys(values) if ROUTE_KEY_RE.fullmatch(value)]


class ProjectPickForm(forms.Form):
    project = forms.ModelChoiceField(queryset=Project.objects.none(), empty_label=None,
                                     error_messages={"invalid_choice": "Choose a project you may change."})

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        project_field = self.fields["project"]
        assert isinstance(project_field, forms.ModelChoiceField)
        project_field.queryset = project_list_editable(user=user).order_by("name")


_WRITE_CALLS_RANGE = f"Empty (unlimited) or 0 to {services.WRITE_CALLS_MAX}."
_CONCURRENT_RANGE = f"1 to {services.CONCURRENT_MAX}."


class TaskPolicyForm(forms.Form):
    """The shape, and the service's ranges (its bounds and words), so that every field's error shows
    at once: checked by the service alone, a budget out of range was said only once a too-long
    name had been put right (browser audit). The service checks them again."""

    name = forms.CharField(required=False, max_length=200, validators=[validate_shown_name],
                           widget=forms.TextInput(attrs={"class": "vTextField"}))
    max_write_calls = forms.IntegerField(
        required=False, label="Write budget (max write calls)", min_value=0, max_value=services.WRITE_CALLS_MAX,
        error_messages={"min_value": _WRITE_CALLS_RANGE, "max_value": _WRITE_CALLS_RANGE},
        help_text="Empty: unlimited. 0: read only. Every call of a write tool counts, idempotent ones included.")
    max_concurrent = forms.IntegerField(
        initial=1, label="Max concurrent calls", min_value=1, max_value=services.CONCURRENT_MAX,
        error_messages={"min_value": _CONCURRENT_RANGE, "max_value": _CONCURRENT_RANGE},
        help_text=f"Dispatch permits in flight at once, reads included (1 to {services.CONCURRENT_MAX}).")
    expires_at = forms.DateTimeField(required=False, label="Expires at",
                                     widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                     help_text=f"Empty: never. In {settings.TIME_ZONE}, the console's time zone.")
    request_id = forms.RegexField(regex=r"^[A-Za-z0-9._:-]{1,128}$", widget=forms.HiddenInput,
                                  error_messages={"required": "Reload the page and submit again.",
                                                  "invalid": "Reload the page and submit again."})

    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise forms.ValidationError("Must be in the future.")
        return expires_at


# Past this many active sessions in the project, a member's session is picked by searching
# (TaskAdmin.sessions_view) rather than from a select of them all: at 3,300 active sessions the
# create page was four selects of 3,300 options, 2.1 MB rendered in 2.7 s.
SESSION_CHOICES_MAX = 200


class SessionChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: AgentSession) -> str:
        return session_label(obj)


def session_workspaces(session: AgentSession) -> list[str]:
    """The workspaces a member row of `session` may name, as its session option gives them to
    tasks.js (data-routes, or `routes` in a search result): what apps.tasks.services checks a
    member's workspace against."""
    return sorted(session_route_keys(session))


class _SessionRoutesMixin:
    """A session select whose options name the workspaces their session may use (data-routes:
    {session id: route keys} in `routes`), for tasks.js."""

    routes: dict[str, list[str]]

    def create_option(self, name: str, value: Any, label: Any, selected: Any, index: int,
                      subindex: int | None = None, attrs: dict[str, Any] | None = None) -> dict[str, Any]:
        option = super().create_option(name, value, label, selected, index, subindex, attrs)  # type: ignore[misc]
        routes = self.routes.get(str(value))
        if routes is not None:
            option["attrs"]["data-routes"] = " ".join(routes)
        return option


class SessionSearchSelect(_SessionRoutesMixin, AutocompleteSelect):
    """Django's autocomplete, asking the create page's own search of the project's active sessions.
    The session a refused form kept is rendered with its workspaces (data-routes), as the plain
    select's options are; one found by searching brings them in its result."""

    def __init__(self, *, project: Project) -> None:
        super().__init__(TaskMember._meta.get_field("session"), admin.site, attrs={"style": "width: 100%"})
        self.project = project
        self.routes: dict[str, list[str]] = {}

    def get_url(self) -> str:
        return reverse("admin:tasks_task_sessions", args=[self.project.pk])

    def optgroups(self, name: str, value: Any, attrs: dict[str, Any] | None = None) -> Any:
        picked = [str(v) for v in value if v and uuid_parse(str(v)) is not None]
        self.routes = {str(s.pk): session_workspaces(s)
                       for s in live_sessions(self.project).filter(pk__in=picked)} if picked else {}
        return super().optgroups(name, value, attrs)


class SessionSelect(_SessionRoutesMixin, forms.Select):
    """The plain select of a member's session: each option names the workspaces its session may use
    (data-routes), so that tasks.js offers only those in the row's workspace select."""

    def __init__(self, *, routes: dict[str, list[str]]) -> None:
        super().__init__()
        self.routes = routes


def live_sessions(project: Project) -> QuerySet[AgentSession]:
    """The project's sessions a task can be made of, in the order the create form offers them."""
    now = timezone.now()
    # For its label (session_label): the newest task the session may still work in, else its newest.
    memberships = TaskMember.objects.filter(session=OuterRef("pk")).annotate(
        usable=ExpressionWrapper(selectors.membership_usable_q(now), output_field=BooleanField()),
    ).order_by("-usable", "-task__created_at", "-task_id")
    return AgentSession.objects.select_related("client").filter(
        session_live_q(now), client__project=project,
    ).annotate(
        last_task=Subquery(memberships.values(last=JSONObject(
            id="task_id", name="task__name", state="task__state", expires_at="task__expires_at", usable="usable"))[:1]),
    ).order_by("client__app_id", "on_behalf_of", "created_at")


class MemberForm(forms.Form):
    session = forms.ChoiceField(required=False, label="Agent session")
    workspace = forms.ChoiceField(required=False, label="Workspace")
    # Kept exactly as typed, as the builder API keeps it: turns name their conversation exactly, and a
    # trimmed id named another conversation than the agent's, where the session could never bind a turn.
    client_conversation_id = forms.CharField(required=False, max_length=255, label="Client conversation id",
                                             strip=False, widget=forms.TextInput(attrs={"class": "vTextField"}))
    allowed_tools = forms.MultipleChoiceField(required=False, label="Tools", widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args: Any, project: Project, sessions: list[AgentSession] | None,
                 routes: list[str] | None, tools: list[ToolOption], **kwargs: Any) -> None:
        """`sessions`, `routes`: the choices of the project's, or None when they are searched for.
        `tools`: the tools of the routes the posted row names (its workspace, its tools' routes), the
        choices its tools are checked against; a tool of a route it does not name is no choice, as
        one of a route without it is not."""
        super().__init__(*args, **kwargs)
        if sessions is not None:
            self.fields["session"].widget = SessionSelect(routes={str(s.pk): session_workspaces(s) for s in sessions})
            self._set_choices("session", [("", "— none —")] + [(str(s.pk), session_label(s)) for s in sessions])
        else:
            self.fields["session"] = SessionChoiceField(
                queryset=live_sessions(project), required=False, label="Agent session",
                widget=SessionSearchSelect(project=project))
        if routes is not None:
            self._set_choices("workspace", [("", "—")] + [(key, key) for key in routes])
        else:
            self.fields["workspace"] = RouteKeyField(project_routes(project.pk), required=False, label="Workspace",
                                                     widget=RouteKeySearchSelect(project_id=project.pk))
        self.tools = tools
        self._set_choices("allowed_tools", [(tool.value, tool.name) for tool in tools])

    def _set_choices(self, name: str, choices: list[tuple[str, str]]) -> None:
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)
        field.choices = choices

    def clean_session(self) -> str:
        session = self.cleaned_data["session"]
        return str(session.pk) if isinstance(session, AgentSession) else session

    @property
    def used(self) -> bool:
        data = getattr(self, "cleaned_data", {})
        return bool(data.get("session"))


_ROW_NUMBERS = frozenset(str(index) for index in range(MEMBER_ROWS))


def _prefixes() -> list[str]:
    return [f"m{index}" for index in range(MEMBER_ROWS)]


def tool_picks(form: MemberForm, *, index: int, workspace: str, listed: list[ToolOption] | None) -> dict[str, Any]:
    """What a row's tools box shows (admin/tasks/task/_tools.html): the tools of its workspace
    (`listed`, None when it names no route), the ones sent checked; and, kept checked after them, a
    tool sent of another of the project's routes, which the row's error names."""
    checked = set(form["allowed_tools"].value() or []) if form.is_bound else set()
    options = list(listed or [])
    shown = {option.value for option in options}
    options += [option for option in form.tools if option.value in checked and option.value not in shown]
    tools = [{"option": option, "checked": option.value in checked, "id": f"id_m{index}-tool-{position}",
              "foreign": option.route != workspace} for position, option in enumerate(options)]
    return {"row": index, "html_name": form["allowed_tools"].html_name,
            "workspace": workspace if listed is not None else "", "tools": tools,
            "filtered": len(tools) > TOOLS_FILTER_MIN}


_MEMBER_FIELDS = {"session_id": "session", "workspace": "workspace",
                  "client_conversation_id": "client_conversation_id", "allowed_tools": "allowed_tools"}
_POLICY_FIELDS = {"policy.max_write_calls": "max_write_calls", "policy.max_concurrent": "max_concurrent",
                  "policy.expires_at": "expires_at"}


class CreatePage:
    """The create form of one project: policy, member rows, and where each service error goes."""

    def __init__(self, project: Project, data: Any | None = None) -> None:
        self.project = project
        self.sessions = list(live_sessions(project)[:SESSION_CHOICES_MAX + 1])
        self.sessions_searched = len(self.sessions) > SESSION_CHOICES_MAX
        listed = routes_listed(project_routes(project.pk))
        self.routes = [route.key for route in listed] if listed is not None else None
        # A row offers only its workspace's tools, loaded when one is picked (TaskAdmin.tools_view):
        # every tools-enabled route's tools in each row were 48,000 boxes at 300 routes of 40 tools,
        # a 12.5 MB page. A posted row's are read here, all rows' routes in one go.
        keys = {prefix: posted_route_keys(data, prefix) if data is not None else [] for prefix in _prefixes()}
        wanted = {key for row_keys in keys.values() for key in row_keys}
        self.tools = route_tool_options(list(Route.objects.filter(project=project, key__in=wanted))) if wanted else {}
        self.policy = TaskPolicyForm(data, initial={"request_id": fresh_request_id(), "max_concurrent": 1})
        self.members = [MemberForm(data, prefix=prefix, project=project, routes=self.routes,
                                   tools=[tool for key in keys[prefix] for tool in self.tools.get(key, [])],
                                   sessions=None if self.sessions_searched else self.sessions)
                        for prefix in _prefixes()]
        self.errors: list[str] = []

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for index, form in enumerate(self.members):
            bound = form.is_bound and any(form[name].value() for name in ("session", "workspace",
                                                                          "client_conversation_id"))
            workspace = str(form["workspace"].value() or "") if form.is_bound else ""
            rows.append({"form": form, "index": index, "shown": index == 0 or bound or bool(form.errors),
                         "tools": tool_picks(form, index=index, workspace=workspace,
                                             listed=self.tools.get(workspace))})
        return rows

    def is_valid(self) -> bool:
        valid = self.policy.is_valid()
        for form in self.members:
            valid = form.is_valid() and valid
        return valid

    def used_rows(self) -> list[MemberForm]:
        return [form for form in self.members if form.used]

    def specs(self) -> list[services.MemberSpec]:
        out = []
        for form in self.used_rows():
            data = form.cleaned_data
            tools = []
            for value in data["allowed_tools"]:
                route, _, name = value.partition(":")
                if route != data["workspace"]:
                    form.add_error("allowed_tools", f"{name} is a tool of {route}, not of this workspace.")
                tools.append(name)
            out.append(services.MemberSpec(session_id=data["session"], workspace=data["workspace"],
                                           client_conversation_id=data["client_conversation_id"],
                                           allowed_tools=tuple(tools)))
        return out

    def check_surfaces(self, specs: list[services.MemberSpec]) -> None:
        """Each member's tools must be on the surface its own session sees on that workspace."""
        used = live_sessions(self.project).filter(pk__in=[spec.session_id for spec in specs])
        sessions = {str(s.pk): s for s in used}
        routes = {route.key: route for route in Route.objects.filter(
            project=self.project, key__in=[spec.workspace for spec in specs])}
        for form, spec in zip(self.used_rows(), specs, strict=True):
            session, route = sessions.get(spec.session_id), routes.get(spec.workspace)
            if session is None or route is None or not spec.allowed_tools or form.errors:
                continue
            visible = {tool.name for tool in route_surface(route=route, session=session).tools}
            missing = [name for name in spec.allowed_tools if name not in visible]
            if missing:
                form.add_error("allowed_tools", f"Not on this session's surface of {spec.workspace}: "
                                                f"{', '.join(missing)}.")

    def policy_spec(self) -> services.PolicySpec:
        data = self.policy.cleaned_data
        concurrent = data["max_concurrent"]
        return services.PolicySpec(max_write_calls=data["max_write_calls"],
                                   max_concurrent=1 if concurrent is None else concurrent,
                                   expires_at=data["expires_at"])

    def place(self, error: TaskInvalid) -> None:
        """Each of the service's field errors beside its field; the rest above the form."""
        used = self.used_rows()
        for name, field_messages in (error.extra.get("fields") or {}).items():
            for message in field_messages:
                self._place_one(name, message, used)
        if not (error.extra.get("fields") or {}):
            self.errors.append(error.message)

    def _place_one(self, name: str, message: str, used: list[MemberForm]) -> None:
        if name in _POLICY_FIELDS:
            self.policy.add_error(_POLICY_FIELDS[name], message)
            return
        if name.startswith("members[") and "]." in name:
            index_text, _, field_name = name[len("members["):].partition("].")
            if index_text.isdigit() and int(index_text) < len(used) and field_name in _MEMBER_FIELDS:
                used[int(index_text)].add_error(_MEMBER_FIELDS[field_name], message)
                return
        if name == "members":
            message = "Add at least one member: a session, its workspace and a conversation id." \
                if not used else message
        self.errors.append(message)

    @property
    def has_errors(self) -> bool:
        return bool(self.errors or self.policy.errors or any(form.errors for form in self.members))


# ---- the views -----------------------------------------------------------------------------------

if TYPE_CHECKING:
    _AdminBase = admin.ModelAdmin
else:
    _AdminBase = object


class TaskCreateViews(_AdminBase):
    """TaskAdmin's create page (add_view), and the two pieces it loads: a member row's session
    search and its tools box."""

    def add_view(self, request: HttpRequest, form_url: str = "",
                 extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        source = request.POST if request.method == "POST" else request.GET
        pick = ProjectPickForm(source if "project" in source else None, user=request.user)
        editable = list(project_list_editable(user=request.user).order_by("name")[:2])
        project: Project | None = None
        if pick.is_bound and pick.is_valid():
            project = pick.cleaned_data["project"]
        elif not pick.is_bound and len(editable) == 1:
            project = editable[0]
        if project is None:
            return self._create_page(request, pick=pick, page=None)
        if request.method != "POST":
            return self._create_page(request, pick=pick, page=CreatePage(project))
        page = CreatePage(project, request.POST)
        if not page.is_valid():
            return self._create_page(request, pick=pick, page=page, status=422)
        specs = page.specs()
        page.check_surfaces(specs)
        if page.has_errors:
            return self._create_page(request, pick=pick, page=page, status=422)
        try:
            task, created = services.task_create(
                project=project, user=request.user, request_id=page.policy.cleaned_data["request_id"],
                name=page.policy.cleaned_data["name"].strip(), members=specs, policy=page.policy_spec())
        except TaskInvalid as error:
            page.place(error)
            return self._create_page(request, pick=pick, page=page, status=422)
        except TaskRequestConflict:
            page.errors.append("This form was already used to create a different task. Reload the page and "
                               "submit again; nothing was created.")
            return self._create_page(request, pick=pick, page=page, status=409)
        if created:
            members = ngettext("{} member", "{} members", len(specs)).format(len(specs))
            messages.success(request, format_html(
                "Task {} created with {}. Its sessions must now carry the task binding on every turn.",
                str(task), members))
        else:
            messages.info(request, f"Task {task} was already created by this form; nothing new was created.")
        return HttpResponseRedirect(reverse("admin:tasks_task_change", args=[task.pk]))

    def sessions_view(self, request: HttpRequest, project_id: uuid.UUID) -> JsonResponse:
        """The create form's search of a member's session (past SESSION_CHOICES_MAX): the active
        sessions of a project the operator may change whose client, user, principal or device holds
        the term, a page at a time, as Django's autocomplete reads them."""
        project = project_list_editable(user=request.user).filter(pk=project_id).first()
        if project is None:
            raise Http404("No such project.")
        sessions = live_sessions(project)
        for word in autocomplete_words(request):
            sessions = sessions.filter(Q(client__app_id__icontains=word) | Q(on_behalf_of__icontains=word)
                                       | Q(principal_id__icontains=word) | Q(device_label__icontains=word))
        rows, more = autocomplete_page(request, sessions, per_page=SESSIONS_PER_PAGE)
        return JsonResponse({"results": [{"id": str(s.pk), "text": session_label(s), "routes": session_workspaces(s)}
                                         for s in rows],
                             "pagination": {"more": more}})

    def tools_view(self, request: HttpRequest, project_id: uuid.UUID) -> TemplateResponse:
        """The tools box of member row `row` for the workspace `workspace` (empty: none chosen yet),
        which the create form loads when a row's workspace is picked: that route's tools only, as the
        page renders them after a refused submit."""
        project = project_list_editable(user=request.user).filter(pk=project_id).first()
        row, workspace = request.GET.get("row", ""), request.GET.get("workspace", "")
        if project is None or row not in _ROW_NUMBERS:  # not isdigit: "²" is a digit int() refuses
            raise Http404("No such project or member row.")
        route = Route.objects.filter(project=project, key=workspace).first() if ROUTE_KEY_RE.fullmatch(workspace) \
            else None
        if workspace and route is None:
            raise Http404("No workspace with this key in the project.")
        form = MemberForm(prefix=f"m{row}", project=project, sessions=[], routes=[], tools=[])
        listed = route_tool_options([route])[route.key] if route is not None else None
        return TemplateResponse(request, "admin/tasks/task/_tools.html",
                                {"picks": tool_picks(form, index=int(row), workspace=workspace, listed=listed)})

    def _create_page(self, request: HttpRequest, *, pick: ProjectPickForm, page: CreatePage | None,
                     status: int = 200) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Create a task",
            "subtitle": None,
            "opts": self.opts,
            "pick": pick,
            "page": page,
            "media": page.members[0].media if page is not None else forms.Media(),
            "rows": page.rows() if page is not None else [],
            "member_rows": MEMBER_ROWS,
            "tools_url": reverse("admin:tasks_task_tools", args=[page.project.pk]) if page is not None else "",
        }
        return TemplateResponse(request, "admin/tasks/task/create.html", context, status=status)
