"""Operator screens for RAG answers: each route's question history with its feedback (a filtered
RagQuery list), an answer's detail with its evidence and trace, the route's quality report with
charts, and the KB playground's RAG mode (ask a KB a question; nothing is recorded).

Records are read-only here: they change only through apps.ledger.rag (feedback through the API)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.http import Http404, HttpResponseNotAllowed
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from apps.answers import charts, selectors, services
from apps.core.timefmt import local_time
from apps.knowledge import selectors as knowledge_selectors
from apps.knowledge.pipeline.retrieve import SearchOptions
from apps.ledger.models import RAG_QUESTION_MAX_CHARS, RagQuery
from apps.projects.admin import ProjectScopedAdminMixin, ReadOnlyAdminMixin
from apps.projects.selectors import project_list_visible
from apps.routes.admin import RouteListFilter
from apps.routes.models import Route

REPORT_DAY_CHOICES = (7, 30, 90)


def outcome_of(query: RagQuery) -> tuple[str, str]:
    """(css class, label) of an answer's outcome."""
    if query.error_code == "DEPENDENCY_UNAVAILABLE":
        return "rag-failed", "dependency unavailable"
    if not query.useful:
        return "rag-empty", "not found"
    if not query.grounded:
        return "rag-ungrounded", "ungrounded"
    return "rag-ok", "answered"


class AskForm(forms.Form):
    question = forms.CharField(max_length=RAG_QUESTION_MAX_CHARS, strip=True,
                               widget=forms.TextInput(attrs={"size": 70, "autofocus": True}))


@admin.register(RagQuery)
class RagQueryAdmin(ReadOnlyAdminMixin, ProjectScopedAdminMixin, admin.ModelAdmin):
    list_display = ("question_short", "route", "outcome", "confidence_shown", "feedback", "latency", "created")
    list_display_links = ("question_short",)
    list_filter = (("route", RouteListFilter), "grounded", "useful", "helpful", "error_code", "created_at")
    list_select_related = ("route",)
    search_fields = ("question",)
    # No date drill-down (as on the ledger's lists): it read every row on each load; the created_at
    # filter slices by date instead.
    change_list_template = "admin/answers/ragquery/change_list.html"

    @admin.display(description="Question", ordering="question")
    def question_short(self, obj: RagQuery) -> str:
        return obj.question[:90] + ("…" if len(obj.question) > 90 else "")

    # As in the ledger's lists: "2026-12-05 16:46 UTC" in the console's time zone, on two lines if it must
    # (a date and time on one line pushed the column out of the box at 1366 px).
    @admin.display(description="Created at", ordering="created_at")
    def created(self, obj: RagQuery) -> str:
        return local_time(obj.created_at)

    @admin.display(description="Confidence", ordering="confidence")
    def confidence_shown(self, obj: RagQuery) -> str:
        return f"{obj.confidence:.2f}"

    @admin.display(description="Latency", ordering="latency_ms")
    def latency(self, obj: RagQuery) -> str:
        return f"{obj.latency_ms} ms"

    @admin.display(description="Outcome")
    def outcome(self, obj: RagQuery) -> str:
        css, label = outcome_of(obj)
        return format_html('<span class="rag-badge {}">{}</span>', css, label)

    @admin.display(description="Feedback", ordering="helpful")
    def feedback(self, obj: RagQuery) -> str:
        if obj.helpful is None:
            return "—"
        label = "helpful" if obj.helpful else "not helpful"
        note = f" — {obj.feedback_note[:60]}" if obj.feedback_note else ""
        return format_html('<span class="rag-feedback-{}">{}</span>{}', "yes" if obj.helpful else "no", label, note)

    def get_urls(self):
        own = [
            path("report/<uuid:route_id>/", self.admin_site.admin_view(self.report_view),
                 name="ledger_ragquery_report"),
            path("ask/<uuid:kb_id>/", self.admin_site.admin_view(self.ask_view), name="ledger_ragquery_ask"),
        ]
        return own + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        # Routes that have answers, asked once a route (an index probe each): a join over the answers
        # with a DISTINCT over whole route rows (prompts and all) read every answer on every page.
        answered = RagQuery.objects.filter(route=OuterRef("pk"))
        routes = (Route.objects.filter(Exists(answered), project__in=project_list_visible(user=request.user))
                  .only("name", "key").order_by("project__name", "key"))
        extra_context = {**(extra_context or {}), "report_routes": [
            (route, reverse("admin:ledger_ragquery_report", args=[route.pk])) for route in routes]}
        return super().changelist_view(request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        query = self.get_object(request, unquote(object_id))
        if query is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_permission(request, query):
            raise PermissionDenied
        css, label = outcome_of(query)
        context = {
            **self.admin_site.each_context(request),
            "title": "RAG answer",
            "subtitle": None,
            "opts": self.opts,
            "original": query,
            "outcome_css": css,
            "outcome_label": label,
            "route_history_url": reverse("admin:ledger_ragquery_changelist") + "?" + urlencode(
                {"route__id__exact": query.route_id}),
            "report_url": reverse("admin:ledger_ragquery_report", args=[query.route_id]),
        }
        return TemplateResponse(request, "admin/answers/ragquery/detail.html", context)

    def _route_visible(self, request, route_id) -> Route:
        route = Route.objects.filter(pk=route_id, project__in=project_list_visible(user=request.user)).select_related(
            "project").first()
        if route is None:
            raise Http404("No such route.")
        return route

    def report_view(self, request, route_id):
        """A route's quality report: figures, volume and helpful rate per day (SVG), what was left
        unanswered. `?days=` 7, 30 or 90."""
        route = self._route_visible(request, route_id)
        try:
            days = int(request.GET.get("days", 30))
        except ValueError:
            days = 30
        if days not in REPORT_DAY_CHOICES:
            days = 30
        report = selectors.rag_report(route=route, days=days)
        labels = [day["date"] for day in report["per_day"]]
        context = {
            **self.admin_site.each_context(request),
            "title": f"RAG quality: {route.name}",
            "subtitle": None,
            "opts": self.opts,
            "route": route,
            "report": report,
            "day_choices": [(d, d == days) for d in REPORT_DAY_CHOICES],
            "volume_chart": charts.volume_bars(labels=labels, values=[d["volume"] for d in report["per_day"]]),
            "helpful_chart": charts.rate_line(labels=labels, rates=[d["helpful_rate"] for d in report["per_day"]]),
            "history_url": reverse("admin:ledger_ragquery_changelist") + "?" + urlencode(
                {"route__id__exact": route.pk}),
            "days_with_queries": [d for d in reversed(report["per_day"]) if d["volume"]],
        }
        return TemplateResponse(request, "admin/answers/ragquery/report.html", context)

    def ask_view(self, request, kb_id):
        """The KB playground's RAG mode: answer a question from this KB with the configured
        generator, showing the answer, its evidence and trace. Read-only: nothing is recorded.
        The form posts: a question may have 2000 characters, 18 KB percent-encoded in CJK, past
        any request line gunicorn accepts. A GET with `?question=` still asks, for a short link."""
        kb = knowledge_selectors.knowledge_base_list_visible(user=request.user).filter(pk=kb_id).first()
        if kb is None:
            raise Http404("No such knowledge base.")
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
        if request.method == "POST":
            form = AskForm(request.POST)
        else:
            form = AskForm(request.GET) if "question" in request.GET else AskForm()
        answer = None
        if form.is_bound and form.is_valid():
            answer = services.rag_answer_kbs(kbs=[kb], question=form.cleaned_data["question"],
                                             options=SearchOptions(top_k=5, mode="hybrid"))
        context = {
            **self.admin_site.each_context(request),
            "title": f"Ask (RAG mode): {kb.name}",
            "subtitle": None,
            "opts": self.opts,
            "kb": kb,
            "form": form,
            "answer": answer,
            "search_url": reverse("admin:knowledge_knowledgebase_search", args=[kb.pk]),
            "kb_url": reverse("admin:knowledge_knowledgebase_change", args=[kb.pk]),
        }
        return TemplateResponse(request, "admin/answers/ragquery/ask.html", context)
