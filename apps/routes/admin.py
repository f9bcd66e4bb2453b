"""The route's operator screen. Its knowledge bindings and the dry-run of a turn need the knowledge
and runtime apps, which routes may not import: `RouteAdmin` is registered by apps.runtime.admin
as a subclass that adds them (RouteConsoleAdmin)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import AutocompleteSelect
from django.contrib.postgres.forms import SimpleArrayField
from django.core.exceptions import ValidationError
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, JsonResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from apps.core.timefmt import local_time
from apps.projects.admin import (
    ProjectScopedAdminMixin,
    autocomplete_page,
    autocomplete_words,
    listed_unless_over,
    unique_in_project,
)
from apps.projects.selectors import project_list_editable
from apps.routes.models import ROUTE_KEY_CONSTRAINT, ROUTE_KEY_TAKEN, ROUTE_NAME_CONSTRAINT, ROUTE_NAME_TAKEN, Route
from apps.routes.selectors import route_profile


class BlankItemsIgnoredArrayField(SimpleArrayField):
    """A comma-separated list where blank items (`a,,b`, a trailing comma, `, ,`) are dropped
    rather than each refused as "Item N in the array did not validate: This field is required.";
    a list left empty is then judged as a whole (Route.clean)."""

    def to_python(self, value: Any) -> Any:  # a list (SimpleArrayField is a CharField in the stubs)
        if isinstance(value, str):
            value = [item.strip() for item in value.split(self.delimiter) if item.strip()]
        return super().to_python(value)


class DropDownPastLinksMixin:
    """A list filter whose choices, past ROUTE_FILTER_LINKS, are a drop-down with a Filter button
    (admin/bh_route_filter.html; a link each was a sidebar of hundreds of links). The drop-down's
    form keeps the list's other parameters (filters, search, ordering) and sends its own empty for
    "All", which `all_chosen` takes as no filter."""

    template = "admin/bh_route_filter.html"
    as_select = False
    kept_params: list[tuple[str, str]] = []

    @staticmethod
    def all_chosen(params: dict[str, Any], name: str) -> bool:
        """Drop the drop-down's "All" (`name` sent empty) from `params`; whether it was."""
        if params.get(name) in ([""], ""):
            params.pop(name)
            return True
        return False

    def drop_down(self, changelist: Any, choices: list[Any], values: list[Any]) -> list[Any]:
        """`choices` (the first is "All") as the drop-down reads them past ROUTE_FILTER_LINKS: the
        others' values, in order."""
        self.as_select = len(choices) > ROUTE_FILTER_LINKS
        if self.as_select:
            self.kept_params = [(name, value) for name, values in changelist.filter_params.items()
                                if name not in self.expected_parameters() for value in values]  # type: ignore[attr-defined]
            for choice, value in zip(choices[1:], values, strict=False):
                choice["value"] = value
        return choices


class RouteListFilter(DropDownPastLinksMixin, admin.RelatedFieldListFilter):
    """A filter by route that offers the routes of the projects the operator can see, read from the
    route table. RelatedOnlyFieldListFilter read the distinct routes of the whole list instead: 30 to
    50 ms at 100,000 runs or 200,000 messages, on every load, growing with the ledger. A route of the
    operator's with no rows here is offered too, and gives an empty list.

    Past ROUTE_FILTER_LINKS routes the choices are a drop-down (DropDownPastLinksMixin); counts
    ("Show counts") are one GROUP BY, not a count per route."""

    def __init__(self, field, request, params, model, model_admin, field_path):
        # The drop-down sends one parameter: empty for "All" (no filter, rather than a route id of
        # ""), NO_ROUTE for the rows without a route (the links' `__isnull=True`).
        lookup = f"{field_path}__{field.target_field.name}__exact"
        if not self.all_chosen(params, lookup) and params.get(lookup) in ([NO_ROUTE], NO_ROUTE):
            params.pop(lookup)
            params[f"{field_path}__isnull"] = ["True"]
        super().__init__(field, request, params, model, model_admin, field_path)

    def field_choices(self, field, request, model_admin):
        routes = Route.objects.select_related("project").only("id", "key", "name", "project__name")
        if not request.user.is_superuser:
            routes = routes.filter(project_id__in=ProjectScopedAdminMixin.visible_project_ids(request))
        routes = sorted(routes, key=lambda route: (route.key, route.project.name))
        # Route keys are unique within a project: across projects, the project tells them apart.
        several = len({route.project_id for route in routes}) > 1
        return [(route.pk, f"{route} · {route.project.name}" if several else str(route)) for route in routes]

    def get_facet_queryset(self, changelist):
        filtered = changelist.get_queryset(self.request, exclude_parameters=self.expected_parameters())
        counts = dict(filtered.order_by().values_list(self.field_path).annotate(rows=Count("pk")))
        # "__c" is the rows without a route, where the field allows none (memory notes of a project).
        return {**{f"{pk}__c": counts.get(pk, 0) for pk, _ in self.lookup_choices}, "__c": counts.get(None, 0)}

    def choices(self, changelist):
        choices = self.drop_down(changelist, list(super().choices(changelist)), [pk for pk, _ in self.lookup_choices])
        if self.as_select and self.include_empty_choice:
            choices[-1]["value"] = NO_ROUTE
        return choices


ROUTE_FILTER_LINKS = 30
NO_ROUTE = "none"  # the drop-down's value for the rows without a route


# Past this many routes in a project, a console field that picks its route keys (an agent client's
# allowed routes, a task member's workspace) finds them by searching (RouteAdmin.keys_view) rather
# than listing them all: at 2,000 routes the agent client page was 2,000 checkboxes (415 KB in
# 0.36 s) and the task create page four selects of 2,000 keys.
ROUTE_CHOICES_MAX = 100
ROUTES_PER_PAGE = 20
# As many keys as a field may hold (an agent client's allowed routes, ROUTE_LIST_MAX), and more than
# a search field labels on a page sent back with an error.
ROUTE_KEYS_POSTED_MAX = 128


def project_routes(project_id: Any) -> QuerySet[Route]:
    """A project's routes as a route key field offers them: by key, without their prompts."""
    return Route.objects.filter(project_id=project_id).only("id", "project_id", "key", "name").order_by("key")


def routes_listed(routes: QuerySet[Route]) -> list[Route] | None:
    """`routes` to list as choices, or None past ROUTE_CHOICES_MAX: they are then searched."""
    return listed_unless_over(routes, ROUTE_CHOICES_MAX)


def route_key_label(route: Route) -> str:
    return f"{route.name} ({route.key})"


class RouteKeySearchSelect(AutocompleteSelect):
    """Django's autocomplete over one project's route keys (RouteAdmin.keys_view). The field it
    serves is a RouteKeyField or RouteKeysField of the project's routes, which takes only those."""

    def __init__(self, *, project_id: Any, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(Route._meta.get_field("key"), admin.site, attrs={"style": "width: 34em", **(attrs or {})})
        self.project_id = project_id

    def get_url(self) -> str:
        return reverse("admin:routes_route_keys", args=[self.project_id])

    def optgroups(self, name: str, value: Any, attr: Any = None) -> list[Any]:
        """The chosen keys, labelled from the field's routes in one query (Django's own reads a
        foreign key the field here is not). A posted key that is not one of them is left out, and
        so is one PostgreSQL cannot compare (a NUL)."""
        keys = [str(key) for key in value if key and "\x00" not in str(key)][:ROUTE_KEYS_POSTED_MAX]
        blank = not (self.is_required or self.allow_multiple_selected)
        options = [self.create_option(name, "", "", False, 0)] if blank else []
        routes = self.choices.queryset.filter(key__in=keys) if keys else []
        labels = {route.key: route_key_label(route) for route in routes}
        for key in dict.fromkeys(keys):
            if key in labels:
                options.append(self.create_option(name, key, labels[key], True, len(options)))
        return [(None, options, 0)]


class RouteKeySearchSelectMultiple(RouteKeySearchSelect, forms.SelectMultiple):
    pass


class RouteKeyField(forms.ModelChoiceField):
    """One route key of `queryset` (a project's routes), cleaned to the key ("" for none)."""

    def __init__(self, queryset: QuerySet[Route], **kwargs: Any) -> None:
        kwargs.setdefault("error_messages", {"invalid_choice": "No route with this key in the project."})
        super().__init__(queryset, to_field_name="key", **kwargs)

    def label_from_instance(self, obj: Route) -> str:
        return route_key_label(obj)

    def clean(self, value: Any) -> str:  # type: ignore[override]  # a key, not the route
        route = super().clean(value)
        return route.key if route is not None else ""


class RouteKeysField(forms.ModelMultipleChoiceField):
    """Route keys of `queryset` (a project's routes), cleaned to a list of keys in the order given.
    A key holding a NUL is refused as one that is not there (Django's own check)."""

    def __init__(self, queryset: QuerySet[Route], **kwargs: Any) -> None:
        kwargs.setdefault("error_messages", {"invalid_choice": "No route with the key %(value)s in the project."})
        super().__init__(queryset, to_field_name="key", **kwargs)

    def label_from_instance(self, obj: Route) -> str:
        return route_key_label(obj)

    def clean(self, value: Any) -> list[str]:  # type: ignore[override]  # keys, not routes
        keys = [str(key) for key in value] if isinstance(value, list | tuple) else value
        if isinstance(keys, list) and len(keys) > ROUTE_KEYS_POSTED_MAX:
            raise ValidationError(f"At most {ROUTE_KEYS_POSTED_MAX} routes.", code="too_many")
        super().clean(keys)
        return list(dict.fromkeys(keys or []))


# The comma-separated lists an operator types (the tool lists are picked from choices: route_tools_form).
ROUTE_LIST_FIELDS = ("allowed_audiences", "system_info_domains", "system_info_boundaries")


class RouteAdminForm(forms.ModelForm):
    class Meta:
        model = Route
        fields = "__all__"  # noqa: DJ007 -- the admin's fieldsets choose the fields shown
        field_classes = dict.fromkeys(ROUTE_LIST_FIELDS, BlankItemsIgnoredArrayField)

    def clean(self):
        data = super().clean()
        unique_in_project(self, "key", ROUTE_KEY_TAKEN)
        # As a KB's name: one that reads as another route's of the project (another case, a
        # no-break space, full-width letters) is taken, beside the field.
        unique_in_project(self, "name", ROUTE_NAME_TAKEN, lookalike=True)
        return data

    def clean_unattended_write_tools(self):
        # A blank legacy list means "not configured" (None), not "configured as empty".
        return self.cleaned_data.get("unattended_write_tools") or None


class RouteAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    form = RouteAdminForm
    unique_constraints = {ROUTE_KEY_CONSTRAINT: "", ROUTE_NAME_CONSTRAINT: ""}
    # Between the sidebar and the filters, at 1366 px, about 720 px are left: the switches' long headers
    # (kept on one line) and the update time (a date, kept on one line) ran past them, and Knowledge
    # enabled and Updated at were cut off. The key reads under the name, the switches have short headers
    # and the update time breaks between its date and its time.
    list_display = ["name_key", "project", "enabled", "agent_client", "tools_direct", "knowledge", "updated"]
    list_filter = ["enabled", "agent_client_enabled", "tools_direct_enabled", "knowledge_enabled", "project"]
    search_fields = ["key", "name", "description"]
    list_select_related = ["project"]
    # Meta's ordering, said here because the console's queryset counts (a GROUP BY drops it): the
    # route autocomplete (a KB's routes) paged routes in no order.
    ordering = ["project__name", "key"]
    readonly_fields = ["profile_revision", "created_at", "updated_at"]

    def get_urls(self):
        keys = path("keys/<uuid:project_id>/", self.admin_site.admin_view(self.keys_view), name="routes_route_keys")
        return [keys, *super().get_urls()]

    def keys_view(self, request: HttpRequest, project_id) -> JsonResponse:
        """The search of a route key field past ROUTE_CHOICES_MAX: the routes of a project the operator
        may change whose key or name holds each word of the term, by key, a page at a time, as
        Django's autocomplete reads them. Another project's (or none's) is a 404."""
        project = project_list_editable(user=request.user).filter(pk=project_id).first()
        if project is None:
            raise Http404("No such project.")
        routes = project_routes(project.pk)
        for word in autocomplete_words(request):
            routes = routes.filter(Q(key__icontains=word) | Q(name__icontains=word))
        rows, more = autocomplete_page(request, routes, per_page=ROUTES_PER_PAGE)
        return JsonResponse({"results": [{"id": route.key, "text": route_key_label(route)} for route in rows],
                             "pagination": {"more": more}})

    def get_readonly_fields(self, request, obj=None):
        # A route stays in its project: moved, it kept the old project's agent grants (route keys),
        # knowledge bindings and tool sources, and a route made later in the old project with its
        # key inherited the grants.
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "project"] if obj is not None else fields

    fieldsets = [
        (None, {"fields": ["project", "key", "name", "description", "enabled"]}),
        ("Audience", {"fields": ["audience_policy", "allowed_audiences"]}),
        ("Target", {"fields": ["system_prompt"]}),
        ("Agent client", {"fields": [
            "agent_client_enabled", "agent_client_instructions", "agent_client_active_tool_limit",
        ]}),
        ("System info", {"fields": [
            "system_info_name", "system_info_summary", "system_info_domains", "system_info_boundaries",
        ], "description": "What a local agent reads before choosing this workspace. Domains and boundaries: "
                          "comma-separated, at most six each."}),
        ("Tools (agent direct)", {"fields": [
            "tools_direct_enabled", "write_tools", "force_approval_tools", "unattended_write_tools",
            "max_tool_calls", "permission",
        ], "description": "Comma-separated exact operationIds."}),
        ("Knowledge", {"fields": [
            "knowledge_enabled", "knowledge_mode", "knowledge_top_k", "knowledge_max_docs",
            "knowledge_page_boost", "knowledge_score_threshold",
        ], "description": "How a turn searches the knowledge bases bound below (“Knowledge bases this route "
                          "reads”); try it in the dry-run panel at the bottom of the page."}),
        ("Memory", {"fields": [
            "memory_recent_messages", "memory_recent_budget_chars", "memory_per_message_chars",
            "memory_summary_enabled", "memory_summary_max_chars",
        ]}),
        ("Revision", {"fields": ["profile_revision", "created_at", "updated_at"]}),
    ]

    @admin.display(description="Route · key", ordering="name")
    def name_key(self, obj: Route) -> SafeString:
        return format_html('{}<br><code class="bh-muted">{}</code>', obj.name, obj.key)

    @admin.display(description="Agent client", boolean=True, ordering="agent_client_enabled")
    def agent_client(self, obj: Route) -> bool:
        return obj.agent_client_enabled

    @admin.display(description="Tools direct", boolean=True, ordering="tools_direct_enabled")
    def tools_direct(self, obj: Route) -> bool:
        return obj.tools_direct_enabled

    @admin.display(description="Knowledge", boolean=True, ordering="knowledge_enabled")
    def knowledge(self, obj: Route) -> bool:
        return obj.knowledge_enabled

    @admin.display(description="Updated", ordering="updated_at")
    def updated(self, obj: Route) -> str:
        return local_time(obj.updated_at)

    @admin.display(description="Profile revision")
    def profile_revision(self, obj: Route) -> str:
        if obj._state.adding:  # a new route's id is set before it is saved
            return "—"
        return route_profile(route=obj)["revision"]
