"""The route page of the console, with what routes alone cannot show: the knowledge bases the
route reads (bound through apps.knowledge.services) and a dry-run of a turn's knowledge.

Registered here because it needs routes, knowledge and the runtime's own turn code, and imports
only point down the app list. The dry-run calls the very function a turn uses to compute its
inline knowledge (apps.runtime.turns._knowledge_inline): the operator sees what an agent would
get, and nothing is written — no conversation, run or message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import display_for_value
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, Subquery
from django.shortcuts import redirect
from django.template.defaultfilters import pluralize
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from apps.agent_auth.models import AgentClient, AgentSession
from apps.agent_auth.services import route_grants_rekey
from apps.knowledge import selectors as knowledge_selectors
from apps.knowledge import services as knowledge_services
from apps.knowledge.admin import RowAutocompleteSelect, search_in_named_project
from apps.knowledge.models import Document, IndexGeneration, KnowledgeBase, RouteKnowledgeBinding
from apps.ledger.models import Conversation, MemoryNote, RagQuery, Run
from apps.projects.admin import NamedCellsInlineMixin, ProjectScopedAdminMixin, listed_unless_over
from apps.routes.admin import RouteAdmin
from apps.routes.models import Route
from apps.runtime.errors import KnowledgeUnavailable
from apps.runtime.route_tools_form import RouteToolsForm, source_field_name, tools_form_for
from apps.runtime.turns import KNOWLEDGE_QUERY_MAX_CHARS, TurnRequest, _knowledge_inline
from apps.tools.builder import route_dry_run as route_capabilities_dry_run
from apps.tools.models import Invocation, RouteToolSource, Tool, ToolProvider
from apps.tools.route_tools import POLICY_FIELDS, UNSET, route_tools_set

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class _BindingState(TypedDict):
    active_generation: int | None
    building: bool
    documents_total: int
    documents_completed: int
    documents_off: int


class _RouteSources(TypedDict):
    knowledge_source_read: int
    knowledge_source_off: int

DRY_RUN_PARAM = "dry_run"
# A route's page offers every provider of its project as tool picks up to this many providers; past
# it, the picks of the route's own sources and of the providers the operator adds (ADD_SOURCE_PARAM):
# 280 providers of 10 tools were 2,800 boxes, a 1.1 MB page 73,000 px tall.
ROUTE_PAGE_PROVIDERS_ALL = 20
ADD_SOURCE_PARAM = "add_source"
ADD_SOURCE_FORM = "bh-add-source"
TOOLS_FIELDSET = "Tools (agent direct)"
KNOWLEDGE_FIELDSET = "Knowledge"


# Past this many knowledge bases in the route's project, a binding row's knowledge base is picked by
# searching (autocomplete) rather than from a select of them all: at 2,000 KBs the route page was
# 14,000 options in its seven selects (the rows, the new one and the template for more), 1.5 MB
# rendered in 1.0 to 1.4 s.
BINDING_CHOICES_MAX = 100


class BindingInline(NamedCellsInlineMixin, admin.TabularInline):
    """One row per knowledge base the route reads; the choices are the route's project's KBs (past
    BINDING_CHOICES_MAX, found by searching them)."""

    model = RouteKnowledgeBinding
    extra = 1
    fields = ["knowledge_base", "embedding_model", "index_state", "documents"]
    readonly_fields = ["embedding_model", "index_state", "documents"]
    verbose_name = "knowledge base this route reads"
    verbose_name_plural = "knowledge bases this route reads"

    def get_queryset(self, request):
        active = IndexGeneration.objects.filter(knowledge_base=OuterRef("knowledge_base"),
                                                status=IndexGeneration.Status.ACTIVE).order_by()  # one at most
        return super().get_queryset(request).select_related("route", "knowledge_base__embedding_model").annotate(
            active_generation=Subquery(active.values("number")[:1]),
            building=Exists(IndexGeneration.objects.filter(knowledge_base=OuterRef("knowledge_base"),
                                                           status=IndexGeneration.Status.BUILDING)),
            documents_total=Count("knowledge_base__documents"),
            documents_completed=Count("knowledge_base__documents",
                                      filter=Q(knowledge_base__documents__status=Document.Status.COMPLETED)),
            documents_off=Count("knowledge_base__documents", filter=Q(knowledge_base__documents__enabled=False)),
        )

    def get_formset(self, request, obj=None, **kwargs):
        kbs = KnowledgeBase.objects.filter(project_id=obj.project_id if obj else None).select_related(
            "embedding_model").order_by("name")
        listed = listed_unless_over(kbs, BINDING_CHOICES_MAX)
        # Read by formfield_for_foreignkey, which super().get_formset calls without the route.
        request._bh_binding_searched = searched = listed is None
        request._bh_binding_project = obj.project_id if obj else None
        formset = super().get_formset(request, obj, **kwargs)
        # Every row's select offers the same choices: read them once, not once per row.
        choices = [("", "---------"), *((kb.pk, f"{kb.name} · {kb.embedding_model.name}") for kb in listed or [])]

        class BindingForm(formset.form):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                if not searched:
                    self.fields["knowledge_base"].choices = choices
                elif self.instance.knowledge_base_id is not None:
                    widget = self.fields["knowledge_base"].widget
                    widget = getattr(widget, "widget", widget)  # inside the admin's add/change links
                    widget.row_labels = {str(self.instance.knowledge_base_id): str(self.instance.knowledge_base)}

        field = BindingForm.base_fields["knowledge_base"]
        field.queryset = kbs
        field.help_text = "Knowledge bases of this route's project."
        formset.form = BindingForm
        return formset

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "knowledge_base" and getattr(request, "_bh_binding_searched", False):
            kwargs["widget"] = RowAutocompleteSelect(db_field, self.admin_site,
                                                     project_id=getattr(request, "_bh_binding_project", None))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    # The parent route's permissions decide (project membership), not Django model permissions.
    def has_view_permission(self, request, obj=None):
        if obj is None:  # asked by get_queryset, which the parent route already scopes
            return request.user.is_staff
        return request.user.is_superuser or obj.project_id in ProjectScopedAdminMixin.visible_project_ids(request)

    def has_add_permission(self, request, obj=None):
        return obj is not None and (request.user.is_superuser
                                    or obj.project_id in ProjectScopedAdminMixin.editable_project_ids(request))

    has_change_permission = has_delete_permission = has_add_permission

    @admin.display(description="Embedding model")
    def embedding_model(self, binding: RouteKnowledgeBinding) -> str:
        if binding._state.adding:  # the empty row for a new binding
            return "—"
        model = binding.knowledge_base.embedding_model
        return f"{model.name} ({model.dimension} dims)"

    @admin.display(description="Index")
    def index_state(self, binding: WithAnnotations[RouteKnowledgeBinding, _BindingState]) -> str:
        if binding._state.adding:  # the empty row for a new binding
            return "—"
        if binding.active_generation is not None:
            state = f"ready (generation #{binding.active_generation})"
            state = state + ", rebuilding" if binding.building else state
        else:
            state = "building its first index" if binding.building else "not ready: no active index"
        return state if binding.knowledge_base.enabled else f"turned off, agents do not read it; {state}"

    @admin.display(description="Documents")
    def documents(self, binding: WithAnnotations[RouteKnowledgeBinding, _BindingState]) -> str:
        if binding._state.adding:  # the empty row for a new binding
            return "—"
        counted = f"{binding.documents_completed} of {binding.documents_total} completed"
        return f"{counted}, {binding.documents_off} turned off" if binding.documents_off else counted


class DryRunForm(forms.Form):
    dry_run = forms.CharField(
        label="Question", max_length=KNOWLEDGE_QUERY_MAX_CHARS, strip=True,
        widget=forms.TextInput(attrs={"size": 70, "placeholder": "What a user would ask, e.g. 退货需要小票吗？"}),
        error_messages={"required": "Type a question to see the knowledge a turn would carry."},
    )
    page_title = forms.CharField(
        label="Page title", max_length=200, required=False, strip=True,
        help_text="Optional: the page the user is on; used when the route boosts by page.",
    )


@dataclass
class DryRunEntry:
    ref: str
    title: str
    content: str
    score: float | None
    document_id: str | None


@dataclass
class DryRun:
    question: str
    entries: list[DryRunEntry]
    stats: dict
    bytes: int
    failure: str = ""


def route_dry_run(*, route: Route, question: str, page_title: str = "") -> DryRun:
    """The inline knowledge of a turn asking `question` on `route`, computed as a turn computes it.
    Writes nothing."""
    request = TurnRequest(client_conversation_id="console-dry-run", client_turn_id="console-dry-run",
                          user_message_id="console-dry-run", user_input=question,
                          page_context={"title": page_title} if page_title else {},
                          knowledge_delivery=Run.KnowledgeDelivery.INLINE)
    try:
        knowledge = _knowledge_inline(route=route, request=request)
    except KnowledgeUnavailable:
        return DryRun(question=question, entries=[], stats={}, bytes=0,
                      failure="Knowledge search is unavailable right now (the embedding model did not answer); "
                              "an agent's turn would be refused with knowledge_unavailable.")
    refs = {ref["ref"]: ref for ref in knowledge.refs}
    entries = [
        DryRunEntry(ref=entry["ref"], title=entry["title"], content=entry["content"],
                    score=refs.get(entry["ref"], {}).get("score"), document_id=refs.get(entry["ref"], {}).get("doc_id"))
        for entry in knowledge.entries
    ]
    return DryRun(question=question, entries=entries, stats=knowledge.stats,
                  bytes=sum(len(e.content.encode("utf-8")) for e in entries))


@dataclass(frozen=True)
class ProviderPicks:
    """The providers whose tools a route's page offers as picks (`shown`, each with its compiled
    tools), and the other providers of its project (`others`), offered to be added as a source."""

    shown: list[ToolProvider]
    others: list[ToolProvider]
    added: list[str]  # the ids asked for with ADD_SOURCE_PARAM that are shown (kept on the next add)


def _project_providers(route: Route | None, *, added: list[str]) -> ProviderPicks:
    """The picks of the route's project's providers, all of them up to ROUTE_PAGE_PROVIDERS_ALL;
    past that, those of the route's own sources and of the providers in `added`. At most four queries."""
    if route is None:
        return ProviderPicks(shown=[], others=[], added=[])
    providers = list(ToolProvider.objects.filter(project_id=route.project_id).only("id", "name", "enabled")
                     .order_by("name"))
    if len(providers) <= ROUTE_PAGE_PROVIDERS_ALL:
        keep = {provider.pk for provider in providers}
    else:
        keep = set(RouteToolSource.objects.filter(route=route).values_list("provider_id", flat=True))
        keep |= {provider.pk for provider in providers if str(provider.pk) in added}
    # Never the spec or the compile report (megabytes for a large API): the page lists the tools.
    shown: list[ToolProvider] = list(
        ToolProvider.objects.filter(pk__in=keep).defer("spec", "compile_report").order_by("name")
        .prefetch_related(Prefetch("tools", queryset=Tool.objects.order_by("position"), to_attr="compiled_tools")))
    return ProviderPicks(shown=shown, others=[provider for provider in providers if provider.pk not in keep],
                         added=[str(provider.pk) for provider in shown if str(provider.pk) in added])


def _source_adder(picks: ProviderPicks, *, params: list[tuple[str, str]]) -> SafeString:
    """The "add a tool source" drop-down, submitted by the GET form the page's template writes
    outside the admin's form (ADD_SOURCE_FORM): it reopens the page with that provider's picks, and
    the page's other parameters (`params`: the list's filters that Save returns to)."""
    kept = format_html_join("", '<input type="hidden" name="{}" value="{}" form="{}">', (
        *((ADD_SOURCE_PARAM, pk, ADD_SOURCE_FORM) for pk in picks.added),
        *((name, value, ADD_SOURCE_FORM) for name, value in params if name != ADD_SOURCE_PARAM)))
    options = format_html_join("", '<option value="{}">{}</option>', (
        (provider.pk, provider.name + ("" if provider.enabled else " (switched off)")) for provider in picks.others))
    return format_html(
        '<p class="bh-source-adder" id="tool-sources">Below: the tools of {} of the project\'s {} providers (this '
        'route\'s sources and those you add). '
        '<label for="id_{}">Add a source:</label> <select name="{}" id="id_{}" form="{}">{}</select>{} '
        '<button type="submit" class="button" form="{}">Show its tools</button> '
        '<span class="bh-muted">(reopens this page: save your changes first)</span></p>',
        len(picks.shown), len(picks.shown) + len(picks.others), ADD_SOURCE_PARAM, ADD_SOURCE_PARAM, ADD_SOURCE_PARAM,
        ADD_SOURCE_FORM, options, kept, ADD_SOURCE_FORM)


class RouteConsoleAdmin(RouteAdmin):
    change_form_template = "admin/routes/route/change_form.html"
    form = RouteToolsForm
    inlines = [BindingInline]

    # The knowledge switch with the bound knowledge bases read under it.
    list_display = [("knowledge_sources" if name == "knowledge" else name) for name in RouteAdmin.list_display]

    def get_search_results(self, request, queryset, search_term):
        """The route search of a KB page's binding row (the admin's autocomplete view) finds routes
        the row can take: of projects the operator may change, and of the KB's project when the row
        names it (knowledge.admin.search_in_named_project). It offered every route the operator could see, which the
        binding then refused."""
        queryset, duplicates = super().get_search_results(request, queryset, search_term)
        if (request.GET.get("app_label"), request.GET.get("model_name"), request.GET.get("field_name")) != (
                "knowledge", "routeknowledgebinding", "route"):
            return queryset, duplicates
        if not request.user.is_superuser:
            queryset = queryset.filter(project__in=self.editable_project_ids(request))
        return search_in_named_project(request, queryset), duplicates

    def _providers(self, request, obj) -> ProviderPicks:
        # get_fieldsets and get_form both need them, for the same route, in one request.
        cache = request.__dict__.setdefault("_route_tool_providers", {})
        key = obj.pk if obj is not None else None
        if key not in cache:
            cache[key] = _project_providers(obj, added=request.GET.getlist(ADD_SOURCE_PARAM))
        return cache[key]

    @admin.display(description="Tool sources")
    def tool_sources(self, route: Route):
        """For those who may only view the route: each source with its allow list."""
        sources = RouteToolSource.objects.filter(route=route).select_related("provider").order_by("position")
        return format_html_join(mark_safe("<br>"), "<strong>{}</strong>: {}", (
            (source.provider.name, ", ".join(source.allowed_tools) or "—") for source in sources)) or "—"

    def get_fieldsets(self, request, obj=None):
        adder: SafeString | str = ""
        if obj is not None and not self.has_change_permission(request, obj):
            sources = ["tool_sources"]
        else:
            picks = self._providers(request, obj)
            sources = [source_field_name(provider) for provider in picks.shown]
            params = [(name, value) for name, values in request.GET.lists() for value in values]
            adder = _source_adder(picks, params=params) if picks.others else ""
        fieldsets = []
        for name, options in super().get_fieldsets(request, obj):
            if name == TOOLS_FIELDSET:
                options = {**options, "fields": [
                    "tools_direct_enabled", "permission", *sources, "write_tools", "force_approval_tools",
                    "unattended_write_tools", "max_tool_calls"],
                    "description": (format_html(
                        "Tool sources: tick the tools of each provider this route allows (its compiled "
                        "operations). Write tools and forced approvals are picked from the sources' write "
                        "tools.{}", adder) if obj is not None else
                        "Save the route first: its tool sources are picked from its project's providers.")}
            elif name == KNOWLEDGE_FIELDSET and obj is None:
                # The add page has neither the bindings below nor the dry-run panel the help points to.
                options = {**options, "description": "How a turn searches the knowledge bases this route reads. "
                                                     "Save the route first: its page then binds them and "
                                                     "dry-runs a turn."}
            fieldsets.append((name, options))
        return fieldsets

    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["form"] = tools_form_for(self._providers(request, obj).shown)
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request, obj, form, change):
        """The route's own fields are saved as usual; its tools (sources and policy) only through
        route_tools_set, which checks them as a whole."""
        policy = {name: getattr(obj, name) for name in POLICY_FIELDS}
        stored = (Route.objects.filter(pk=obj.pk).values(*POLICY_FIELDS).get() if change
                  else {name: Route._meta.get_field(name).get_default() for name in POLICY_FIELDS})
        for name, value in stored.items():
            setattr(obj, name, value)
        with transaction.atomic():
            old_key = Route.objects.filter(pk=obj.pk).values_list("key", flat=True).first() if change else None
            super().save_model(request, obj, form, change)
            if old_key is not None and old_key != obj.key:  # its agents keep it under its new key
                route_grants_rekey(project_id=obj.project_id, old=old_key, new=obj.key)
            route_tools_set(route=obj, sources=form.tool_sources() if change else UNSET, **policy)
        for label, names in getattr(form, "dropped_picks", {}).items():
            self.message_user(request, f"{label}: {', '.join(names)} left out — no source above allows "
                                       f"{'it' if len(names) == 1 else 'them'}.", messages.INFO)

    def delete_model(self, request, obj):
        with transaction.atomic():
            route_grants_rekey(project_id=obj.project_id, old=obj.key, new=None)
            obj.delete()

    def delete_queryset(self, request, queryset):
        for route in queryset:
            self.delete_model(request, route)

    def get_deleted_objects(self, objs, request):
        """What deleting the routes takes with them, counted, and which agent grants they end. The
        ledger is kept: a route with conversations, runs, invocations or answers cannot be
        deleted, and the page says to turn it off instead (Django's list blamed the operator's
        account for lacking a permission no account has, after reading the whole history)."""
        routes = list(objs)
        perms_needed = set() if all(self.has_delete_permission(request, route) for route in routes) else {"route"}
        deleted, protected = [], []
        counts = {"routes": len(routes)}
        for route in routes:
            history = {
                "conversation": Conversation.objects.filter(route=route).count(),
                "run": Run.objects.filter(route=route).count(),
                "tool invocation": Invocation.objects.filter(route=route).count(),
                "knowledge answer": RagQuery.objects.filter(route=route).count(),
            }
            kept = ", ".join(f"{n:,} {name}{pluralize(n)}" for name, n in history.items() if n)
            if kept:
                protected.append(format_html("{}: the ledger keeps its {}. Turn the route off (untick Enabled) "
                                             "instead of deleting it.", route.name, kept))
                continue
            clients = list(AgentClient.objects.filter(project_id=route.project_id, allowed_routes__contains=[route.key])
                           .order_by("name").values_list("name", flat=True))
            sessions = AgentSession.objects.filter(client__project_id=route.project_id,
                                                   allowed_routes__contains=[route.key]).count()
            memories = MemoryNote.objects.filter(route=route).count()
            deleted.append(format_html("Route: {} ({})", route.name, route.key))
            lost = [f"Agent client {name} loses access to it" for name in clients]
            if sessions:
                verb = pluralize(sessions, "loses,lose")
                lost.append(f"{sessions:,} agent session{pluralize(sessions)} {verb} access to it")
            if memories:
                lost.append(f"{memories:,} memory note{pluralize(memories)} of its agents")
            deleted.append(lost)
            counts["memory notes"] = counts.get("memory notes", 0) + memories
            counts["agent client grants"] = counts.get("agent client grants", 0) + len(clients)
            counts["agent session grants"] = counts.get("agent session grants", 0) + sessions
        return deleted, {name: n for name, n in counts.items() if n}, perms_needed, protected

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            knowledge_source_read=Count("knowledge_bindings", filter=knowledge_selectors.route_source_filter()),
            knowledge_source_off=Count("knowledge_bindings",
                                       filter=knowledge_selectors.route_source_filter(enabled=False)))

    @admin.display(description="Knowledge", ordering="knowledge_source_read")
    def knowledge_sources(self, route: WithAnnotations[Route, _RouteSources]) -> SafeString:
        """Whether knowledge is on, then the bound knowledge bases its agents read, and how many more
        are bound but off (what the column sorts by: the sources read)."""
        read, off = route.knowledge_source_read, route.knowledge_source_off
        sources = f"{read} source{pluralize(read)}" + (f" (+{off} off)" if off else "")
        return format_html('{}<br><span class="bh-muted">{}</span>',
                           display_for_value(route.knowledge_enabled, "", boolean=True), sources)

    def get_inlines(self, request, obj):
        # A new route has no project's knowledge bases to offer yet: bind them once it is saved.
        return self.inlines if obj is not None else []

    def save_formset(self, request, form, formset, change):
        """Bindings change through the knowledge services, one row at a time."""
        if formset.model is not RouteKnowledgeBinding:
            return super().save_formset(request, form, formset, change)
        route = form.instance
        # What ModelAdmin's change message reads after a formset's save().
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for inline_form in formset.forms:
            data = getattr(inline_form, "cleaned_data", {})
            delete = bool(data.get("DELETE"))
            if not (inline_form.has_changed() or delete):
                continue
            previous_pk = None if inline_form.instance._state.adding else inline_form.initial.get("knowledge_base")
            chosen = data.get("knowledge_base")
            if previous_pk is not None and (delete or chosen.pk != previous_pk):
                knowledge_services.route_knowledge_unbind(route=route,
                                                          knowledge_base=KnowledgeBase.objects.get(pk=previous_pk))
                if delete:
                    formset.deleted_objects.append(inline_form.instance)
            if chosen is not None and not delete:
                binding = knowledge_services.route_knowledge_bind(route=route, knowledge_base=chosen)
                if previous_pk is None:
                    formset.new_objects.append(binding)
                else:
                    formset.changed_objects.append((binding, ["knowledge_base"]))
        return None

    def get_urls(self):
        dry_run = path("<path:object_id>/dry-run/", self.admin_site.admin_view(self.dry_run_view),
                       name="routes_route_dry_run")
        return [dry_run, *super().get_urls()]

    def dry_run_view(self, request, object_id):
        """The dry-run panel posts its question here: a question of up to 2000 Chinese characters is
        18 KB in a URL, past any web server's request line. It answers the route's page, whose own
        form still saves to the route's change URL; nothing of the route is written here."""
        change_url = reverse("admin:routes_route_change", args=[object_id])
        if request.method != "POST":
            return redirect(f"{change_url}?{request.GET.urlencode()}" if request.GET else change_url)
        question = request.POST.copy()
        request.method = "GET"  # render the page as its GET does; the route's form is never bound
        return self.change_view(request, object_id, form_url=change_url, extra_context={"dry_run_data": question})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        dry_run_data = extra_context.pop("dry_run_data", None)
        route = self.get_object(request, object_id)
        if route is not None and request.method in ("GET", "HEAD"):
            bound = list(knowledge_selectors.route_knowledge_bases(route=route))
            readable = sum(1 for kb in bound if kb.enabled)
            if dry_run_data is None and DRY_RUN_PARAM in request.GET:  # a link made before the panel posted
                dry_run_data = request.GET
            dry_run_form = DryRunForm(dry_run_data)
            extra_context.update({
                "dry_run_form": dry_run_form,
                "dry_run_sources": readable,
                "dry_run_sources_off": len(bound) - readable,
                "dry_run_capabilities": route_capabilities_dry_run(route=route),
                "dry_run": (route_dry_run(route=route, question=dry_run_form.cleaned_data["dry_run"],
                                          page_title=dry_run_form.cleaned_data["page_title"])
                            if dry_run_form.is_valid() else None),
            })
        return super().change_view(request, object_id, form_url, extra_context)


admin.site.register(Route, RouteConsoleAdmin)

# The task console composes tasks with the tool surface (the tools a member may be given), so it
# lives here, above both, rather than in apps.tasks (which tools depends on).
from apps.runtime import admin_tasks  # noqa: E402,F401
