import datetime as dt
import json

import pytest
from django.utils import timezone

from apps.answers.selectors import rag_report
from apps.ledger.models import RagQuery
from tests.answers.conftest import rag_url
from tests.answers.factories import RagQueryFactory
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def plain_route(owner):
    return RouteFactory(project=owner.project, key="records")


def test_list_is_newest_first_with_paging(client, plain_route):
    old = RagQueryFactory(route=plain_route, question="旧问题", days_ago=2)
    new = RagQueryFactory(route=plain_route, question="新问题", days_ago=0)
    response = client.get(rag_url(plain_route.key, "queries"), {"limit": 1})
    assert response.status_code == 200
    assert [row["query_id"] for row in response.json()["data"]] == [str(new.pk)]
    meta = response.json()["meta"]
    assert (meta["total"], meta["offset"], meta["limit"]) == (2, 0, 1)
    assert meta["next_cursor"].endswith(f".{new.pk}")
    second = client.get(rag_url(plain_route.key, "queries"), {"limit": 1, "offset": 1}).json()
    assert [row["query_id"] for row in second["data"]] == [str(old.pk)]


def test_list_filters_by_feedback_and_grounded(client, plain_route):
    helpful = RagQueryFactory(route=plain_route, helpful=True)
    RagQueryFactory(route=plain_route, helpful=False)
    ungrounded = RagQueryFactory(route=plain_route, grounded=False)
    url = rag_url(plain_route.key, "queries")
    assert [r["query_id"] for r in client.get(url, {"feedback": "helpful"}).json()["data"]] == [str(helpful.pk)]
    assert [r["query_id"] for r in client.get(url, {"grounded": "false"}).json()["data"]] == [str(ungrounded.pk)]
    assert client.get(url, {"feedback": "none"}).json()["meta"]["total"] == 1


def test_list_shows_only_this_route(client, plain_route, owner):
    RagQueryFactory(route=RouteFactory(project=owner.project, key="other"))
    assert client.get(rag_url(plain_route.key, "queries")).json()["meta"]["total"] == 0


@pytest.mark.parametrize("params", [{"feedback": "maybe"}, {"grounded": "yes"}, {"limit": "0"}, {"offset": "-1"}])
def test_list_bad_filter_is_400(client, plain_route, params):
    response = client.get(rag_url(plain_route.key, "queries"), params)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_feedback_is_recorded(client, plain_route):
    query = RagQueryFactory(route=plain_route)
    response = client.post(rag_url(plain_route.key, f"queries/{query.pk}/feedback"),
                           {"helpful": False, "note": "没说运费"}, format="json")
    assert response.status_code == 200
    assert response.json()["data"]["feedback"]["helpful"] is False
    query.refresh_from_db()
    assert (query.helpful, query.feedback_note) == (False, "没说运费")
    assert query.feedback_at is not None


def test_later_feedback_replaces_earlier(client, plain_route):
    query = RagQueryFactory(route=plain_route, helpful=False)
    client.post(rag_url(plain_route.key, f"queries/{query.pk}/feedback"), {"helpful": True}, format="json")
    query.refresh_from_db()
    assert (query.helpful, query.feedback_note) == (True, "")


def test_a_null_note_is_no_note(client, plain_route):
    query = RagQueryFactory(route=plain_route, feedback_note="旧的")
    response = client.post(rag_url(plain_route.key, f"queries/{query.pk}/feedback"), {"helpful": True, "note": None},
                           format="json")
    assert response.status_code == 200
    query.refresh_from_db()
    assert (query.helpful, query.feedback_note) == (True, "")


def test_feedback_on_unknown_query_is_404(client, plain_route):
    response = client.post(rag_url(plain_route.key, "queries/8a7c1f5e-58f3-4c55-9d1c-3f7f0a6a0c11/feedback"),
                           {"helpful": True}, format="json")
    assert response.status_code == 404
    assert response.json()["error"] == "rag_query_not_found"


def test_feedback_on_malformed_id_is_404(client, plain_route):
    response = client.post(rag_url(plain_route.key, "queries/not-a-uuid/feedback"), {"helpful": True}, format="json")
    assert response.status_code == 404
    assert response.json()["error"] == "rag_query_not_found"


def test_feedback_on_another_projects_query_is_404_and_unchanged(client, plain_route):
    theirs = RagQueryFactory(route=RouteFactory(key=plain_route.key))
    response = client.post(rag_url(plain_route.key, f"queries/{theirs.pk}/feedback"), {"helpful": True},
                           format="json")
    assert response.status_code == 404
    assert response.json()["error"] == "rag_query_not_found"
    theirs.refresh_from_db()
    assert (theirs.helpful, theirs.feedback_at) == (None, None)


def test_feedback_through_another_projects_route_is_404(client, plain_route):
    theirs = RagQueryFactory(route=RouteFactory(key="theirs"))
    response = client.post(rag_url("theirs", f"queries/{theirs.pk}/feedback"), {"helpful": True}, format="json")
    assert response.status_code == 404
    assert response.json()["error"] == "route_not_found"
    theirs.refresh_from_db()
    assert theirs.helpful is None


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "queries"), ("GET", "report"), ("POST", "query"),
    ("POST", "queries/00000000-0000-0000-0000-000000000000/feedback"),
])
def test_a_route_key_with_a_nul_is_404_not_500(client, plain_route, method, path):
    # The key reached PostgreSQL, which refuses NUL in text: 500 internal_error.
    before = RagQuery.objects.count()
    body = json.dumps({"question": "退款要几天"} if path == "query" else {"helpful": True})
    response = client.generic(method, rag_url("a%00b", path), body, content_type="application/json")
    assert (response.status_code, response.json()["error"]) == (404, "route_not_found")
    assert RagQuery.objects.count() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"helpful": True, "note": "长" * 2001}, "note"),
        ({}, "helpful"),
        ({"helpful": "yes"}, "helpful"),
        ({"helpful": 1}, "helpful"),
        ({"helpful": True, "rating": 5}, "rating"),
    ],
)
def test_bad_feedback_is_422_and_unchanged(client, plain_route, body, field):
    query = RagQueryFactory(route=plain_route)
    response = client.post(rag_url(plain_route.key, f"queries/{query.pk}/feedback"), body, format="json")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_feedback"
    assert field in response.json()["fields"]
    query.refresh_from_db()
    assert (query.helpful, query.feedback_note, query.feedback_at) == (None, "", None)


def test_note_of_2000_characters_is_accepted(client, plain_route):
    query = RagQueryFactory(route=plain_route)
    response = client.post(rag_url(plain_route.key, f"queries/{query.pk}/feedback"),
                           {"helpful": True, "note": "长" * 2000}, format="json")
    assert response.status_code == 200


def _known_rows(route):
    # today: 4 answers (latencies 100, 200, 300, 400), one unhelpful, one helpful, one ungrounded;
    # two days ago: one "not found" twice for the same question, one failure.
    RagQueryFactory(route=route, latency_ms=100, helpful=True)
    RagQueryFactory(route=route, latency_ms=200, helpful=False)
    RagQueryFactory(route=route, latency_ms=300, grounded=False)
    RagQueryFactory(route=route, latency_ms=400)
    for question in ("运费谁出？", " 运费谁出？ "):
        RagQueryFactory(route=route, latency_ms=50, useful=False, question=question, answer="",
                        error_code="FAILED_RETRIEVAL", days_ago=2)
    RagQueryFactory(route=route, latency_ms=1000, useful=False, grounded=False, answer="", question="挂了吗",
                    error_code="DEPENDENCY_UNAVAILABLE", days_ago=2)


def test_report_figures_from_known_rows(plain_route):
    _known_rows(plain_route)
    report = rag_report(route=plain_route, days=7)
    assert report["volume"] == 7
    assert report["feedback_count"] == 2
    assert report["helpful_rate"] == 0.5
    assert report["ungrounded_rate"] == 0.25  # 1 of the 4 answers that did not fail or come back empty
    assert report["no_answer_rate"] == round(3 / 7, 4)
    assert report["dependency_unavailable"] == 1
    assert report["latency_ms"] == {"p50": 200.0, "p95": 820.0}  # percentile_cont over 50,50,100,200,300,400,1000
    assert report["top_unanswered"] == [{"question": "运费谁出？", "count": 2}, {"question": "挂了吗", "count": 1}]


def test_report_per_day_covers_every_day(plain_route):
    _known_rows(plain_route)
    report = rag_report(route=plain_route, days=7)
    days = report["per_day"]
    assert len(days) == 7
    today = timezone.localdate()
    assert days[-1]["date"] == today.isoformat()
    assert (days[-1]["volume"], days[-1]["helpful_rate"], days[-1]["no_answer_rate"]) == (4, 0.5, 0.0)
    assert days[-3]["date"] == (today - dt.timedelta(days=2)).isoformat()
    assert (days[-3]["volume"], days[-3]["no_answer_rate"], days[-3]["helpful_rate"]) == (3, 1.0, None)
    assert days[0]["volume"] == 0


def test_report_window_leaves_older_rows_out(plain_route):
    _known_rows(plain_route)
    assert rag_report(route=plain_route, days=1)["volume"] == 4


def test_report_api_answers_the_report(client, plain_route):
    _known_rows(plain_route)
    response = client.get(rag_url(plain_route.key, "report"), {"days": 7})
    assert response.status_code == 200
    assert response.json()["data"]["volume"] == 7
    assert response.json()["data"]["route"] == "records"


@pytest.mark.parametrize("days", ["0", "366", "x"])
def test_report_bad_days_is_400(client, plain_route, days):
    response = client.get(rag_url(plain_route.key, "report"), {"days": days})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_report_reads_a_fixed_number_of_statements(plain_route, django_assert_max_num_queries):
    _known_rows(plain_route)
    with django_assert_max_num_queries(3):
        rag_report(route=plain_route, days=30)


def test_records_keep_the_question_stripped(client, route):
    client.post(rag_url(route.key), {"question": "  换货收费吗？  "}, format="json")
    assert RagQuery.objects.get().question == "换货收费吗？"


def test_feedback_needs_the_query_scope_and_changes_nothing_without_it(api_client, plain_route, owner):
    from apps.projects.tokens import operator_token_create

    query = RagQueryFactory(route=plain_route)
    _, token = operator_token_create(user=owner.user, name="debug only", scopes=["knowledge:debug"])
    response = api_client.post(rag_url(plain_route.key, f"queries/{query.pk}/feedback"), {"helpful": True},
                               format="json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 403
    assert response.json()["error"] == "insufficient_scope"
    query.refresh_from_db()
    assert query.helpful is None


def test_a_key_in_two_of_my_projects_needs_project_id(client, plain_route, owner):
    from apps.projects.models import Membership
    from tests.projects.factories import MembershipFactory

    other = MembershipFactory(user=owner.user, role=Membership.Role.OWNER).project
    RouteFactory(project=other, key=plain_route.key)
    response = client.get(rag_url(plain_route.key, "queries"))
    assert response.status_code == 400
    assert "project_id" in response.json()["fields"]
    named = client.get(rag_url(plain_route.key, "queries"), {"project_id": str(plain_route.project_id)})
    assert named.status_code == 200
