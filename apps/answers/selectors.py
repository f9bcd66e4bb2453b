"""Reads for RAG answers: the route an operator may ask, its query records, and the quality report.

Scoping happens here once: a route is found only among the projects the operator can see, and
records are read only through their route.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import Aggregate, Count, FloatField, Q, QuerySet
from django.db.models.functions import Lower, Trim, TruncDate
from django.utils import timezone

from apps.answers.errors import RagQueryNotFound, RouteAmbiguous, RouteNotFound
from apps.ledger.models import RagQuery
from apps.projects.selectors import project_list_visible
from apps.routes.models import Route
from apps.routes.validators import ROUTE_KEY_RE

REPORT_DAYS_DEFAULT = 30
REPORT_DAYS_MAX = 365
TOP_UNANSWERED = 10


def route_get_for_operator(*, user, route_key: str, project_id: str | None = None) -> Route:
    """The route with this key in a project the operator can see; RouteNotFound otherwise. With
    the key in several of their projects, `project_id` names which (RouteAmbiguous without it). A
    key no route can have is not looked up (one with a NUL reached PostgreSQL, which refuses it: 500)."""
    if not ROUTE_KEY_RE.fullmatch(route_key):
        raise RouteNotFound()
    routes = Route.objects.filter(key=route_key, project__in=project_list_visible(user=user)).select_related("project")
    if project_id is not None:
        routes = routes.filter(project_id=project_id)
    found = list(routes[:2])
    if not found:
        raise RouteNotFound()
    if len(found) > 1:
        raise RouteAmbiguous(fields={"project_id": ["Several of your projects have this route key; name one."]})
    return found[0]


def rag_query_list(*, route: Route, feedback: str | None = None, grounded: bool | None = None) -> QuerySet[RagQuery]:
    """The route's records, newest first. `feedback`: helpful, unhelpful, none or any."""
    queryset = RagQuery.objects.filter(route=route)
    if feedback == "helpful":
        queryset = queryset.filter(helpful=True)
    elif feedback == "unhelpful":
        queryset = queryset.filter(helpful=False)
    elif feedback == "none":
        queryset = queryset.filter(helpful__isnull=True)
    elif feedback == "any":
        queryset = queryset.filter(helpful__isnull=False)
    if grounded is not None:
        queryset = queryset.filter(grounded=grounded)
    return queryset.order_by("-created_at", "-id")


def rag_query_get(*, route: Route, query_id) -> RagQuery:
    query = RagQuery.objects.filter(route=route, pk=query_id).first()
    if query is None:
        raise RagQueryNotFound()
    return query


class Percentile(Aggregate):
    """PostgreSQL's continuous percentile of an expression."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, *, fraction: float, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _figure_expressions() -> dict[str, Any]:
    """The report's figures as aggregates, for the whole window or per day."""
    return {
        "volume": Count("id"),
        "with_feedback": Count("id", filter=Q(helpful__isnull=False)),
        "helpful": Count("id", filter=Q(helpful=True)),
        "answered": Count("id", filter=Q(error_code="")),
        "ungrounded": Count("id", filter=Q(error_code="", grounded=False)),
        "no_answer": Count("id", filter=Q(useful=False)),
        "unavailable": Count("id", filter=Q(error_code="DEPENDENCY_UNAVAILABLE")),
        "p50": Percentile("latency_ms", fraction=0.5),
        "p95": Percentile("latency_ms", fraction=0.95),
    }


def _figures(queryset: QuerySet[RagQuery]) -> dict[str, Any]:
    return queryset.aggregate(**_figure_expressions())


def _summary(figures: dict[str, Any]) -> dict[str, Any]:
    return {
        "volume": figures["volume"],
        "feedback_count": figures["with_feedback"],
        "helpful_rate": _rate(figures["helpful"], figures["with_feedback"]),
        "ungrounded_rate": _rate(figures["ungrounded"], figures["answered"]),
        "no_answer_rate": _rate(figures["no_answer"], figures["volume"]),
        "dependency_unavailable": figures["unavailable"],
        "latency_ms": {"p50": None if figures["p50"] is None else round(figures["p50"], 1),
                       "p95": None if figures["p95"] is None else round(figures["p95"], 1)},
    }


def rag_report(*, route: Route, days: int = REPORT_DAYS_DEFAULT, now: dt.datetime | None = None) -> dict[str, Any]:
    """The route's answer quality over the last `days` days (today included):

    - volume, helpful rate (helpful among the answers with feedback), ungrounded rate (among the
      answers that did not fail or come back empty), no-answer rate (answers not useful: not found
      or failed, among all), DEPENDENCY_UNAVAILABLE count, latency p50/p95 (ms);
    - the questions most often left unanswered (not useful), case- and space-folded;
    - the same figures per day, oldest first, every day of the window present.

    A fixed number of statements whatever the row count."""
    now = now or timezone.now()
    today = timezone.localtime(now).date()
    first_day = today - dt.timedelta(days=days - 1)
    since = timezone.make_aware(dt.datetime.combine(first_day, dt.time.min))
    rows = RagQuery.objects.filter(route=route, created_at__gte=since, created_at__lte=now)
    daily = rows.annotate(day=TruncDate("created_at")).values("day").annotate(**_figure_expressions())
    per_day = {row["day"]: row for row in daily.order_by("day")}
    days_out = []
    for offset in range(days):
        day = first_day + dt.timedelta(days=offset)
        figures = per_day.get(day)
        summary = _summary(figures) if figures else _summary({
            "volume": 0, "with_feedback": 0, "helpful": 0, "answered": 0, "ungrounded": 0, "no_answer": 0,
            "unavailable": 0, "p50": None, "p95": None})
        days_out.append({"date": day.isoformat(), **summary})
    unanswered = (rows.filter(useful=False).annotate(folded=Lower(Trim("question"))).values("folded")
                  .annotate(count=Count("id")).order_by("-count", "folded")[:TOP_UNANSWERED])
    return {
        "route": route.key,
        "days": days,
        "from": first_day.isoformat(),
        "to": today.isoformat(),
        **_summary(_figures(rows)),
        "top_unanswered": [{"question": row["folded"], "count": row["count"]} for row in unanswered],
        "per_day": days_out,
    }
