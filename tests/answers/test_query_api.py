import pytest
from django.db import connection

from apps.answers.services import NOT_FOUND_ZH
from apps.ledger.models import RagQuery
from apps.projects.tokens import operator_token_create
from tests.answers.conftest import rag_url
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db

PUBLIC_FIELDS = {"query_id", "answer", "evidence", "confidence", "used_web_search", "trace", "grounded", "useful",
                 "missing_points", "error_code", "error_message", "interaction_mode"}


def test_answer_quotes_the_supporting_sentence_with_its_citation(client, route):
    response = client.post(rag_url(route.key), {"question": "质量问题的商品可以在多少天内退款？"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == PUBLIC_FIELDS
    assert body["answer"] == "质量问题的商品可以在三十天内退款。[1]"
    assert body["grounded"] is True
    assert body["useful"] is True
    assert body["used_web_search"] is False
    assert body["error_code"] is None
    assert body["interaction_mode"] == "knowledge"
    assert 0 < body["confidence"] < 1
    assert [step["step"] for step in body["trace"]] == ["retrieve", "rerank", "generate"]


def test_evidence_names_document_chapter_and_quote(client, route):
    body = client.post(rag_url(route.key), {"question": "质量问题的商品可以在多少天内退款？"}, format="json").json()
    first = body["evidence"][0]
    assert first["ref"] == 1
    assert first["document_title"] == "policy.zh.md"
    assert first["chapter_path"] == "售后政策 / 退款 / 质量问题"
    assert first["quote"] == "质量问题的商品可以在三十天内退款。"
    assert first["cited"] is True
    assert isinstance(first["score"], float)


def test_every_answer_is_recorded(client, route, owner):
    body = client.post(rag_url(route.key), {"question": "质量问题的商品可以在多少天内退款？",
                                            "conversation_id": "conv-1"}, format="json").json()
    row = RagQuery.objects.get(pk=body["query_id"])
    assert (row.route_id, row.project_id, row.asked_by_id) == (route.pk, route.project_id, owner.user_id)
    assert row.question == "质量问题的商品可以在多少天内退款？"
    assert row.answer == body["answer"]
    assert row.conversation_id == "conv-1"
    assert row.evidence == body["evidence"]
    assert row.generator == "extractive"


def test_no_hit_is_an_honest_not_found(client, owner):
    empty = KnowledgeBaseFactory(project=owner.project)
    route = RouteFactory(project=owner.project, key="empty-kb")
    route.knowledge_bindings.create(knowledge_base=empty)
    body = client.post(rag_url(route.key), {"question": "退款要多久？"}, format="json").json()
    assert body["answer"] == NOT_FOUND_ZH
    assert (body["useful"], body["grounded"], body["evidence"]) == (False, True, [])
    assert body["error_code"] == "FAILED_RETRIEVAL"
    assert body["missing_points"] == ["退款要多久？"]
    assert body["confidence"] == 0.0
    assert RagQuery.objects.get(pk=body["query_id"]).useful is False


def test_unrelated_question_is_not_answered_from_unrelated_passages(client, route):
    body = client.post(rag_url(route.key), {"question": "木星有几颗卫星？"}, format="json").json()
    assert body["answer"] == NOT_FOUND_ZH
    assert body["error_code"] == "FAILED_RETRIEVAL"
    assert body["useful"] is False


def test_english_question_gets_an_english_not_found(client, owner):
    empty = KnowledgeBaseFactory(project=owner.project)
    route = RouteFactory(project=owner.project, key="empty-en")
    route.knowledge_bindings.create(knowledge_base=empty)
    body = client.post(rag_url(route.key), {"question": "How long do refunds take?"}, format="json").json()
    assert body["answer"] == "The knowledge holds nothing that answers this question."


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "question"),
        ({"question": ""}, "question"),
        ({"question": "   \n\t "}, "question"),
        ({"question": "问" * 2001}, "question"),
        ({"question": 42}, "question"),
        ({"question": None}, "question"),
        ({"question": "退款？", "conversation_id": "c" * 256}, "conversation_id"),
        ({"question": "退款？", "conversation_id": 7}, "conversation_id"),
        ({"question": "退款？", "top_k": 3}, "top_k"),
        ({"question": "退款？", "allow_web_fallback": True}, "allow_web_fallback"),
    ],
)
def test_bad_question_is_422_and_nothing_is_recorded(client, route, body, field):
    response = client.post(rag_url(route.key), body, format="json")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_rag_query"
    assert field in response.json()["fields"]
    assert RagQuery.objects.count() == 0


def test_longest_question_and_conversation_id_are_accepted(client, route):
    response = client.post(rag_url(route.key), {"question": "退" * 2000, "conversation_id": "c" * 255},
                           format="json")
    assert response.status_code == 200
    assert RagQuery.objects.get().conversation_id == "c" * 255


def test_unknown_route_is_404_and_nothing_is_recorded(client, route):
    response = client.post(rag_url("no-such-route"), {"question": "退款？"}, format="json")
    assert response.status_code == 404
    assert response.json()["error"] == "route_not_found"
    assert RagQuery.objects.count() == 0


def test_route_of_another_project_is_404(client, route):
    stranger = RouteFactory(key="their-route")
    response = client.post(rag_url(stranger.key), {"question": "退款？"}, format="json")
    assert response.status_code == 404
    assert response.json()["error"] == "route_not_found"
    assert RagQuery.objects.count() == 0


def test_token_without_query_scope_is_403_and_nothing_is_recorded(api_client, route, owner):
    _, token = operator_token_create(user=owner.user, name="debug only", scopes=["knowledge:debug"])
    response = api_client.post(rag_url(route.key), {"question": "退款？"}, format="json",
                               HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 403
    assert response.json()["error"] == "insufficient_scope"
    assert RagQuery.objects.count() == 0


def test_token_with_query_scope_asks(api_client, route, owner):
    _, token = operator_token_create(user=owner.user, name="rag", scopes=["knowledge:query"])
    response = api_client.post(rag_url(route.key), {"question": "换货收费吗？"}, format="json",
                               HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert response.json()["answer"] == "换货不收取费用。[1]"


def test_anonymous_is_401(api_client, route):
    response = api_client.post(rag_url(route.key), {"question": "退款？"}, format="json")
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert RagQuery.objects.count() == 0


def test_failing_record_write_still_answers_with_null_query_id(client, route):
    with connection.cursor() as cursor:
        cursor.execute("CREATE FUNCTION rag_refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'disk full'; "
                       "END $$ LANGUAGE plpgsql")
        cursor.execute("CREATE TRIGGER rag_refuse BEFORE INSERT ON ledger_ragquery FOR EACH ROW "
                       "EXECUTE FUNCTION rag_refuse()")
    response = client.post(rag_url(route.key), {"question": "质量问题的商品可以在多少天内退款？"}, format="json")
    assert response.status_code == 200
    assert response.json()["query_id"] is None
    assert response.json()["answer"] == "质量问题的商品可以在三十天内退款。[1]"
    assert RagQuery.objects.count() == 0


def test_null_conversation_id_is_no_conversation(client, route):
    response = client.post(rag_url(route.key), {"question": "换货收费吗？", "conversation_id": None}, format="json")
    assert response.status_code == 200
    assert RagQuery.objects.get().conversation_id == ""
