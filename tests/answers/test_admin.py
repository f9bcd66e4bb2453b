import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from apps.answers.services import rag_query_answer
from apps.ledger.models import RagQuery
from apps.ledger.rag import rag_query_feedback
from tests.answers.factories import RagQueryFactory
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def console(client, owner):
    from django.test import Client

    console = Client()
    console.force_login(owner.user)
    return console


def test_history_lists_only_the_operators_projects(console, route):
    mine = rag_query_answer(route=route, question="换货收费吗？")
    theirs = RagQueryFactory(question="别人的问题")
    response = console.get(reverse("admin:ledger_ragquery_changelist"))
    assert response.status_code == 200
    assert "换货收费吗？" in response.content.decode()
    assert theirs.question not in response.content.decode()
    assert reverse("admin:ledger_ragquery_report", args=[route.pk]) in response.content.decode()
    assert mine.query_id


def test_history_reads_a_fixed_number_of_statements(console, route):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def statements() -> int:
        with CaptureQueriesContext(connection) as captured:
            console.get(reverse("admin:ledger_ragquery_changelist"))
        return len(captured)

    for i in range(3):
        RagQueryFactory(route=route, question=f"问题{i}")
    few = statements()
    for i in range(3, 30):
        RagQueryFactory(route=route, question=f"问题{i}")
    assert statements() == few


def test_detail_shows_answer_evidence_and_chapter(console, route):
    answer = rag_query_answer(route=route, question="质量问题的商品可以在多少天内退款？")
    response = console.get(reverse("admin:ledger_ragquery_change", args=[answer.query_id]))
    page = response.content.decode()
    assert response.status_code == 200
    assert "质量问题的商品可以在三十天内退款。[1]" in page
    assert "售后政策 / 退款 / 质量问题" in page
    assert 'id="rag-evidence-1"' in page


def test_detail_of_another_projects_answer_is_not_shown(console):
    theirs = RagQueryFactory(question="别人的问题")
    response = console.get(reverse("admin:ledger_ragquery_change", args=[theirs.pk]))
    assert response.status_code == 302
    assert "别人的问题" not in response.content.decode()


def test_report_page_draws_both_charts(console, route):
    RagQueryFactory(route=route, helpful=True, days_ago=1)
    RagQueryFactory(route=route, helpful=False)
    RagQueryFactory(route=route, useful=False, question="运费谁出？", error_code="FAILED_RETRIEVAL")
    response = console.get(reverse("admin:ledger_ragquery_report", args=[route.pk]), {"days": 7})
    page = response.content.decode()
    assert response.status_code == 200
    assert '<svg id="rag-volume-chart"' in page and '<svg id="rag-helpful-chart"' in page
    assert page.count('class="rag-bar"') == 7
    assert '<span class="rag-value" id="rag-volume">3</span>' in page
    assert '<span class="rag-value" id="rag-helpful-rate">50 %</span>' in page
    assert "运费谁出？" in page


def test_the_report_of_one_question_says_question(console, route):
    RagQueryFactory(route=route)
    page = console.get(reverse("admin:ledger_ragquery_report", args=[route.pk])).content.decode()
    assert '<span class="rag-value" id="rag-volume">1</span><span class="rag-label">question</span>' in page


def test_report_of_another_projects_route_is_404(console):
    response = console.get(reverse("admin:ledger_ragquery_report", args=[RouteFactory().pk]))
    assert response.status_code == 404


def test_playground_rag_mode_answers_without_recording(console, kb):
    response = console.get(reverse("admin:ledger_ragquery_ask", args=[kb.pk]), {"question": "换货收费吗？"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "换货不收取费用。[1]" in page
    assert RagQuery.objects.count() == 0


def test_playground_rag_mode_refuses_an_overlong_question_next_to_the_field(console, kb):
    response = console.get(reverse("admin:ledger_ragquery_ask", args=[kb.pk]), {"question": "问" * 2001})
    page = response.content.decode()
    assert response.status_code == 200
    assert 'class="errorlist' in page
    assert 'id="rag-result"' not in page


def test_playground_rag_mode_of_another_projects_kb_is_404(console):
    response = console.get(reverse("admin:ledger_ragquery_ask", args=[KnowledgeBaseFactory().pk]),
                           {"question": "换货收费吗？"})
    assert response.status_code == 404


# The ask form posts: a question of 2000 CJK characters is 18 KB percent-encoded, past any request
# line gunicorn accepts (tests/browser/test_long_queries.py asks one through gunicorn).
LONG_QUESTION = ("质量问题的商品可以在多少天内退款换货收费吗" * 100)[:2000]


def _ask_url(kb) -> str:
    return reverse("admin:ledger_ragquery_ask", args=[kb.pk])


def _csrf_client(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_playground_rag_mode_form_posts_with_a_csrf_token(console, kb):
    page = console.get(_ask_url(kb)).content.decode()
    assert f'<form method="post" action="{_ask_url(kb)}" class="rag-form module" id="rag-ask-form">' in page
    assert 'name="csrfmiddlewaretoken"' in page
    assert 'id="rag-result"' not in page


def test_playground_rag_mode_answers_a_posted_question_without_recording(console, kb):
    response = console.post(_ask_url(kb), {"question": "换货收费吗？"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "换货不收取费用。[1]" in page
    assert RagQuery.objects.count() == 0


def test_playground_rag_mode_answers_a_posted_question_of_2000_chinese_characters(console, kb):
    response = console.post(_ask_url(kb), {"question": LONG_QUESTION})
    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="rag-result"' in page and 'class="errorlist' not in page
    assert f'name="question" value="{LONG_QUESTION}"' in page
    assert RagQuery.objects.count() == 0


def test_playground_rag_mode_refuses_a_posted_question_over_2000_characters_next_to_the_field(console, kb):
    response = console.post(_ask_url(kb), {"question": LONG_QUESTION + "问"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "Ensure this value has at most 2000 characters (it has 2001)." in page
    assert 'id="rag-result"' not in page


def test_playground_rag_mode_refuses_a_posted_blank_question_next_to_the_field(console, kb):
    response = console.post(_ask_url(kb), {"question": "   "})
    page = response.content.decode()
    assert response.status_code == 200
    assert '<ul class="errorlist" id="id_question_error"><li>This field is required.</li></ul>' in page
    assert 'id="rag-result"' not in page


def test_playground_rag_mode_answers_a_post_with_the_pages_csrf_token(owner, kb):
    client = _csrf_client(owner.user)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get(_ask_url(kb)).content.decode())
    response = client.post(_ask_url(kb), {"question": "换货收费吗？", "csrfmiddlewaretoken": token.group(1)})
    assert response.status_code == 200
    assert "换货不收取费用。[1]" in response.content.decode()


def test_playground_rag_mode_refuses_a_post_without_the_csrf_token(owner, kb):
    response = _csrf_client(owner.user).post(_ask_url(kb), {"question": "换货收费吗？"})
    assert response.status_code == 403
    assert "换货不收取费用" not in response.content.decode()


def test_playground_rag_mode_answers_a_viewer(kb, owner):
    from apps.projects.models import Membership
    from tests.projects.factories import MembershipFactory

    viewer = MembershipFactory(project=owner.project, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(viewer.user)
    response = client.post(_ask_url(kb), {"question": "换货收费吗？"})
    assert response.status_code == 200
    assert "换货不收取费用。[1]" in response.content.decode()


def test_playground_rag_mode_of_another_projects_kb_is_404_on_a_post_too(console):
    response = console.post(_ask_url(KnowledgeBaseFactory()), {"question": "换货收费吗？"})
    assert response.status_code == 404


def test_playground_rag_mode_answers_get_and_post_only(console, kb):
    response = console.put(_ask_url(kb), "question=x", content_type="application/x-www-form-urlencoded")
    assert (response.status_code, response["Allow"]) == (405, "GET, HEAD, POST")


def test_search_playground_links_to_rag_mode_before_a_search(console, kb):
    page = console.get(reverse("admin:knowledge_knowledgebase_search", args=[kb.pk])).content.decode()
    assert f'<div id="pg-rag-mode"><a href="{_ask_url(kb)}">Ask in RAG mode</a>' in page


def test_search_playground_asks_its_query_in_rag_mode_by_post(console, kb):
    page = console.post(reverse("admin:knowledge_knowledgebase_search", args=[kb.pk]),
                        {"query": LONG_QUESTION}).content.decode()
    form = re.search(r'<div id="pg-rag-mode"><form method="post" action="([^"]*)">\s*'
                     r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]+">'
                     r'<input type="hidden" name="question" value="([^"]*)">', page)
    assert form.groups() == (_ask_url(kb), LONG_QUESTION)
    response = console.post(form.group(1), {"question": form.group(2)})
    assert response.status_code == 200
    assert 'id="rag-result"' in response.content.decode()


def test_the_report_links_probe_each_route_for_answers_rather_than_read_them_all(console, route):
    """The routes with a quality report are found with an EXISTS probe a route: a join of every
    answer, made DISTINCT over whole route rows, read all of them on each page of the history."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for i in range(3):
        RagQueryFactory(route=route, question=f"问题{i}")
    RouteFactory(project=route.project)  # no answers: no report link
    with CaptureQueriesContext(connection) as captured:
        response = console.get(reverse("admin:ledger_ragquery_changelist"))
    assert [linked.pk for linked, _ in response.context["report_routes"]] == [route.pk]
    joins = [q["sql"] for q in captured.captured_queries
             if 'FROM "routes_route"' in q["sql"] and 'JOIN "ledger_ragquery"' in q["sql"]]
    assert joins == []


def test_detail_isolates_a_feedback_note_from_the_date_after_it(console, route):
    """A note is free text from the feedback API, which takes U+202E: outside an isolate it ran on
    over the feedback's date printed after it, reversing it."""
    query = RagQueryFactory(route=route, question="换货收费吗？")
    rag_query_feedback(query=query, helpful=False, note="\u202e太慢<b>")
    page = console.get(reverse("admin:ledger_ragquery_change", args=[query.pk])).content.decode()
    assert f"— <bdi>{escape(chr(0x202e) + '太慢<b>')}</bdi> (" in page


def test_evidence_isolates_a_file_name_and_chapter_from_the_words_after_them(console, route):
    """A document's title is its uploaded file name and its chapter path comes from the file's
    headings, both of which may hold U+202E: outside an isolate it ran on over "— cited" and the score."""
    query = RagQueryFactory(route=route, question="换货收费吗？")
    RagQuery.objects.filter(pk=query.pk).update(evidence=[{
        "ref": 1, "document_title": "政策\u202e.md", "chapter_path": "退款\u202e / 质量", "quote": "换货不收取费用。",
        "score": 0.9, "cited": True, "document_id": "", "chunk_id": ""}])
    page = console.get(reverse("admin:ledger_ragquery_change", args=[query.pk])).content.decode()
    assert "[1] <bdi>政策\u202e.md</bdi> — cited" in page
    # The chapter path is the document's own text: its control is shown, not obeyed.
    assert ('<bdi>退款<code class="bh-bidi-escape" title="U+202E RIGHT-TO-LEFT OVERRIDE: shown, not applied">'
            '\\u202e</code> / 质量</bdi>\n    · score 0.900') in page


def test_rag_mode_isolates_each_missing_point(console, kb, monkeypatch):
    """The points are a model's text (a question's parts), joined by "; ": a U+202E in one ran on
    over the separators and the points after it, reversing them."""
    from dataclasses import replace

    from apps.answers import services as answers

    asked = answers.rag_answer_kbs

    def with_missing_points(**kwargs):
        return replace(asked(**kwargs), useful=True, missing_points=["保修\u202e期限", "运费"])

    monkeypatch.setattr(answers, "rag_answer_kbs", with_missing_points)
    page = console.post(reverse("admin:ledger_ragquery_ask", args=[kb.pk]), {"question": "换货收费吗？"})
    html = page.content.decode()
    missing = html.split('id="rag-missing">', 1)[1].split("</p>", 1)[0]
    assert missing == "Missing: <bdi>保修\u202e期限</bdi>; <bdi>运费</bdi>"


def test_playground_rag_mode_shows_an_override_in_its_answer_and_evidence_as_escapes(console, owner):
    """A right-to-left override in the quoted passage redrew the answer box: "Deluxe kettle price:
    [1].(derdnuh neetfif) YNC 1500", its citation moved (browser audit, high)."""
    kb = KnowledgeBaseFactory(project=owner.project)
    ingest_texts(kb, {"kettle.txt": "Deluxe kettle price: \u202e0051 CNY (fifteen hundred)."})
    page = console.post(reverse("admin:ledger_ragquery_ask", args=[kb.pk]),
                        {"question": "What is the deluxe kettle price?"}).content.decode()
    escape = ('<code class="bh-bidi-escape" title="U+202E RIGHT-TO-LEFT OVERRIDE: shown, not applied">'
              '\\u202e</code>')
    answer = page.split('id="rag-answer">', 1)[1].split("</div>", 1)[0]
    assert answer == f"<bdi>Deluxe kettle price: {escape}0051 CNY (fifteen hundred).[1]</bdi>"
    quote = page.split('<div class="rag-quote">', 1)[1].split("</div>", 1)[0]
    assert quote == f"<bdi>Deluxe kettle price: {escape}0051 CNY (fifteen hundred).</bdi>"
    assert "\u202e" not in page
