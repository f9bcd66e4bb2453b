"""Operator screens for knowledge: KB pages with upload, documents and their progress, failures
and retry, chunk preview, rebuild and its progress; embedding models.
Every write goes through apps.knowledge.services.
A KB's search playground (read-only, GET) runs selectors.knowledge_search with explain."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from apps.core.errors import ApiError
from apps.knowledge import selectors, services
from apps.knowledge.models import Document, EmbeddingModel, IndexGeneration, KnowledgeBase, RouteKnowledgeBinding
from apps.knowledge.pipeline.embedders import EmbeddingFailed, embedder_class
from apps.knowledge.pipeline.retrieve import SearchOptions
from apps.knowledge.pipeline.strategy import StrategyInvalid, strategy_parse
from apps.knowledge.pipeline.terms import ANALYZER as KEYWORD_ANALYZER
from apps.knowledge.playground import PlaygroundSearchForm, playground_hits, playground_timings
from apps.projects.admin import ProjectScopedAdminMixin

DOCUMENTS_ON_KB_PAGE = 200


def progress_bar(done: int, total: int, *, complete: bool = False) -> str:
    if complete:
        done = total = max(total, 1)
    return format_html('<progress value="{}" max="{}" style="width:8em"></progress> {}/{}', done, max(total, 1),
                       done, total)


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


class UploadForm(forms.Form):
    files = MultipleFileField(required=False, help_text="txt, md/markdown, json, csv or pdf; several at once.")


class KnowledgeBaseForm(forms.ModelForm):
    chunk_strategy = forms.JSONField(
        required=False,
        help_text='{"strategy": "auto", "min_chars": 256, "max_chars": 768, "overlap_chars": 96} — strategy is '
                  "auto, by_section, by_paragraph, fixed or legacy. Applies at the next rebuild.",
    )

    class Meta:
        model = KnowledgeBase
        fields = ["project", "name", "description", "embedding_model", "chunk_strategy", "require_confirmation"]

    def clean_chunk_strategy(self):
        from django.conf import settings

        try:
            return strategy_parse(self.cleaned_data.get("chunk_strategy"),
                                  defaults=settings.KNOWLEDGE_DEFAULT_CHUNK_STRATEGY).public()
        except StrategyInvalid as exc:
            raise forms.ValidationError(str(exc)) from exc


class GenerationInline(admin.TabularInline):
    model = IndexGeneration
    extra = 0
    can_delete = False
    fields = ["number", "status", "strategy", "progress", "keyword_index", "error", "started_at", "activated_at"]
    readonly_fields = fields
    ordering = ["-number"]

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="Strategy")
    def strategy(self, obj: IndexGeneration) -> str:
        s = obj.chunk_strategy
        return f"{s.get('strategy')} {s.get('min_chars')}–{s.get('max_chars')}, overlap {s.get('overlap_chars')}"

    @admin.display(description="Documents")
    def progress(self, obj: IndexGeneration) -> str:
        return progress_bar(obj.progress_done, obj.progress_total, complete=obj.status == "active")

    @admin.display(description="Keyword index")
    def keyword_index(self, obj: IndexGeneration) -> str:
        if obj.keyword_analyzer == KEYWORD_ANALYZER:
            return "current"
        return (f"written by analyzer {obj.keyword_analyzer} (now {KEYWORD_ANALYZER}): "
                "run manage.py reindex_keywords")

    @admin.display(description="Error")
    def error(self, obj: IndexGeneration) -> str:
        return f"{obj.error_code}: {obj.error_message}" if obj.error_code else ""


class RouteBindingInline(admin.TabularInline):
    model = RouteKnowledgeBinding
    extra = 0
    verbose_name = "route reading this knowledge base"
    verbose_name_plural = "routes reading this knowledge base"

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "route":
            from apps.routes.models import Route

            kwargs["queryset"] = Route.objects.filter(project__in=ProjectScopedAdminMixin.editable_project_ids(request))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    form = KnowledgeBaseForm
    list_display = ["name", "project", "embedding_model", "strategy", "document_count", "require_confirmation"]
    list_filter = ["project", "embedding_model"]
    search_fields = ["name", "description"]
    list_select_related = ["project", "embedding_model"]
    inlines = [GenerationInline, RouteBindingInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(document_total=Count("documents"))

    def get_readonly_fields(self, request, obj=None):
        return ["project", "embedding_model", "embedding_dim"] if obj else []

    def get_fields(self, request, obj=None):
        fields = ["project", "name", "description", "embedding_model", "chunk_strategy", "require_confirmation"]
        return [*fields[:4], "embedding_dim", *fields[4:]] if obj else fields

    @admin.display(description="Strategy")
    def strategy(self, obj: KnowledgeBase) -> str:
        return obj.chunk_strategy.get("strategy", "")

    @admin.display(description="Documents", ordering="document_total")
    def document_count(self, obj: KnowledgeBase) -> int:
        return obj.document_total

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            services.knowledge_base_update(kb=obj, name=data["name"], description=data["description"],
                                           chunk_strategy=data["chunk_strategy"],
                                           require_confirmation=data["require_confirmation"])
            return
        kb = services.knowledge_base_create(
            project=data["project"], name=data["name"], description=data["description"],
            embedding_model=data["embedding_model"], embedding_dim=data["embedding_model"].dimension,
            chunk_strategy=data["chunk_strategy"], require_confirmation=data["require_confirmation"],
            user=request.user,
        )
        obj.pk, obj.embedding_dim = kb.pk, kb.embedding_dim
        obj.created_at, obj.updated_at = kb.created_at, kb.updated_at
        obj._state.adding = False

    def delete_model(self, request, obj):
        services.knowledge_base_delete(kb=obj)

    def delete_queryset(self, request, queryset):
        for kb in queryset:
            services.knowledge_base_delete(kb=kb)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/upload/", wrap(self.upload_view), name="knowledge_knowledgebase_upload"),
            path("<path:object_id>/rebuild/", wrap(self.rebuild_view), name="knowledge_knowledgebase_rebuild"),
            path("<path:object_id>/search/", wrap(self.search_view), name="knowledge_knowledgebase_search"),
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
        kb = self._editable(request, object_id)
        if request.method != "POST":
            return self._back(kb)
        form = UploadForm(request.POST, request.FILES)
        if not form.is_valid():
            self.message_user(request, "The upload could not be read.", messages.ERROR)
            return self._back(kb)
        try:
            documents = services.document_upload(kb=kb, files=form.cleaned_data["files"], user=request.user)
        except ApiError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            self.message_user(request, f"Uploaded {len(documents)} document(s); they are queued for indexing.",
                              messages.SUCCESS)
        return self._back(kb)

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
        """The search playground. Whoever may view the KB page may search (it changes nothing);
        a GET with the form's parameters runs the search, so results can be linked."""
        kb = self.get_object(request, unquote(object_id))
        if kb is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_or_change_permission(request, kb):
            raise PermissionDenied
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
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
        }
        return TemplateResponse(request, "admin/knowledge/knowledgebase/search.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        kb = self.get_object(request, object_id)
        if kb is not None:
            documents = list(selectors.document_list(kb=kb)[:DOCUMENTS_ON_KB_PAGE])
            extra_context.update({
                "upload_form": UploadForm(),
                "documents": [(d, progress_bar(d.progress_done, d.progress_total, complete=d.status == "completed"))
                              for d in documents],
                "document_total": kb.document_total,
                "report": selectors.knowledge_base_report(kb=kb, failures_limit=20),
                "latest_generation": selectors.generation_latest(kb=kb),
                "can_change": self.has_change_permission(request, kb),
            })
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(Document)
class DocumentAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "knowledge_base__project"
    list_display = ["filename", "knowledge_base", "file_type", "status", "progress", "error_code", "attempts",
                    "updated_at"]
    list_filter = ["status", "file_type", "knowledge_base"]
    search_fields = ["filename", "error_message"]
    list_select_related = ["knowledge_base"]
    actions = ["retry_documents", "confirm_documents"]
    fields = ["knowledge_base", "filename", "file_type", "size", "content_hash", "status", "error_code",
              "error_message", "attempts", "progress", "queued_at", "parsing_started_at", "chunking_started_at",
              "awaiting_confirmation_at", "confirmed_at", "embedding_started_at", "completed_at", "failed_at",
              "heartbeat_at"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).defer("error_message")

    def has_add_permission(self, request):
        return False  # uploads happen on the knowledge base page

    @admin.display(description="Progress")
    def progress(self, obj: Document) -> str:
        return progress_bar(obj.progress_done, obj.progress_total, complete=obj.status == Document.Status.COMPLETED)

    def _each(self, request, queryset, service, verb: str) -> None:
        done, refused = 0, []
        editable = self.editable_project_ids(request)
        for document in queryset.select_related("knowledge_base"):
            if document.knowledge_base.project_id not in editable:
                refused.append(document.filename)
                continue
            try:
                service(document=document)
                done += 1
            except ApiError:
                refused.append(document.filename)
        if done:
            self.message_user(request, f"{verb} {done} document(s).", messages.SUCCESS)
        if refused:
            self.message_user(request, f"Not in a state for this: {', '.join(refused[:10])}", messages.WARNING)

    @admin.action(description="Retry the selected failed documents", permissions=["change"])
    def retry_documents(self, request, queryset):
        self._each(request, queryset, services.document_retry, "Queued")

    @admin.action(description="Confirm the selected documents awaiting confirmation", permissions=["change"])
    def confirm_documents(self, request, queryset):
        self._each(request, queryset, services.document_confirm, "Confirmed")

    def delete_model(self, request, obj):
        services.document_delete(document=obj)

    def delete_queryset(self, request, queryset):
        for document in queryset:
            services.document_delete(document=document)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/retry/", wrap(self.retry_view), name="knowledge_document_retry"),
            path("<path:object_id>/confirm/", wrap(self.confirm_view), name="knowledge_document_confirm"),
            *super().get_urls(),
        ]

    def _act(self, request, object_id, service, done_message: str):
        document = self.get_object(request, object_id)
        if document is None:
            raise Http404
        if not self.has_change_permission(request, document):
            raise PermissionDenied
        if request.method == "POST":
            try:
                service(document=document)
                self.message_user(request, done_message, messages.SUCCESS)
            except ApiError as exc:
                self.message_user(request, exc.message, messages.ERROR)
        target = request.POST.get("next") or reverse("admin:knowledge_document_change", args=[document.pk])
        return HttpResponseRedirect(target if target.startswith("/admin/") else "/admin/")

    def retry_view(self, request, object_id):
        return self._act(request, object_id, services.document_retry, "Queued for another attempt.")

    def confirm_view(self, request, object_id):
        return self._act(request, object_id, services.document_confirm, "Confirmed; embedding starts shortly.")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        document = self.get_object(request, object_id)
        if document is not None:
            extra_context["chunks"] = list(
                selectors.chunk_list_preview(document=document).defer("embedding", "search_vector")[:500]
            )
            extra_context["can_change"] = self.has_change_permission(request, document)
        extra_context["show_save"] = False
        return super().change_view(request, object_id, form_url, extra_context)


class EmbeddingModelForm(forms.ModelForm):
    class Meta:
        model = EmbeddingModel
        fields = ["name", "provider", "dimension", "options"]

    def clean(self):
        data = super().clean()
        provider, dimension = data.get("provider"), data.get("dimension")
        if provider and dimension:
            try:
                native = embedder_class(provider).native_dimension
            except EmbeddingFailed as exc:
                raise forms.ValidationError(str(exc)) from exc
            if native is not None and native != dimension:
                raise forms.ValidationError({"dimension": f"The {provider} provider embeds in {native} dimensions."})
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
