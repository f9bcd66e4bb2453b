import pytest

from apps.knowledge import ingest, services
from apps.knowledge.models import KeywordTermStat
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db



@pytest.fixture
def kb(owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    assert ingest.document_ingest(document_id=document.pk) == "completed"
    return kb


def _url(kb):
    return f"/api/v1/builder/knowledge-bases/{kb.pk}/search"


def test_hybrid_search_returns_hits_with_chapter_path(client, kb):
    response = client.post(_url(kb), {"query": "质量问题退款", "hybrid": True, "top_k": 2}, format="json")
    assert response.status_code == 200
    hits = response.json()["data"]["hits"]
    assert response.json()["data"]["mode"] == "hybrid"
    assert hits[0]["chapter_path"] == "售后政策 / 退款 / 质量问题"
    assert "三十天内退款" in hits[0]["content"]
    assert set(hits[0]) == {"chunk_id", "document_id", "chunk_index", "content", "score", "chapter_path",
                            "metadata"}
    assert len(hits) <= 2


def test_default_is_vector_search_with_four_hits(client, kb):
    response = client.post(_url(kb), {"query": "退款"}, format="json")
    data = response.json()["data"]
    assert data["mode"] == "vector"
    assert len(data["hits"]) == 4


def test_a_kb_turned_off_is_still_searched_and_says_it_is_off(client, kb):
    on = client.post(_url(kb), {"query": "退款"}, format="json").json()["data"]
    services.knowledge_base_update(kb=kb, enabled=False)
    off = client.post(_url(kb), {"query": "退款"}, format="json").json()["data"]
    assert (on["knowledge_base_enabled"], off["knowledge_base_enabled"]) == (True, False)
    assert on["hits"] and off["hits"] == on["hits"]


def test_explain_adds_the_channels(client, kb):
    response = client.post(_url(kb), {"query": "三十天", "hybrid": True, "explain": True, "top_k": 1},
                           format="json")
    explain = response.json()["data"]["hits"][0]["explain"]
    assert explain["keyword"]["rank"] == 1
    assert "三十" in explain["matched_terms"]
    assert set(explain) >= {"vector", "keyword", "matched_terms", "fused_score", "dense_weight"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "query"),
        ({"query": "   "}, "query"),
        ({"query": "x" * 2001}, "query"),
        ({"query": "退款", "top_k": 0}, "top_k"),
        ({"query": "退款", "top_k": 51}, "top_k"),
        ({"query": "退款", "top_k": "many"}, "top_k"),
        ({"query": "退款", "score_threshold": 1.5}, "score_threshold"),
        ({"query": "退款", "hybrid": "sometimes"}, "hybrid"),
        ({"query": "退款", "kb_ids": ["x"]}, "kb_ids"),
    ],
)
def test_bad_input_is_422_naming_the_field(client, kb, body, field):
    stats = KeywordTermStat.objects.count()
    response = client.post(_url(kb), body, format="json")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_search"
    assert field in response.json()["fields"]
    assert KeywordTermStat.objects.count() == stats


def test_top_k_of_1_and_50_and_a_query_of_2000_characters_are_accepted(client, kb):
    for body in ({"query": "退款", "top_k": 1}, {"query": "退款", "top_k": 50}, {"query": "退" * 2000}):
        response = client.post(_url(kb), body, format="json")
        assert response.status_code == 200, (body, response.json())
    assert len(client.post(_url(kb), {"query": "退款", "top_k": 1}, format="json").json()["data"]["hits"]) == 1


def test_a_hybrid_score_threshold_cuts_on_the_fused_score(client, kb):
    hits = client.post(_url(kb), {"query": "质量问题退款", "hybrid": True, "top_k": 5},
                       format="json").json()["data"]["hits"]
    scores = [hit["score"] for hit in hits]
    assert len(scores) >= 2 and scores[0] > scores[1]
    threshold = (scores[0] + scores[1]) / 2
    kept = client.post(_url(kb), {"query": "质量问题退款", "hybrid": True, "top_k": 5, "score_threshold": threshold},
                       format="json").json()["data"]["hits"]
    assert [hit["chunk_id"] for hit in kept] == [hits[0]["chunk_id"]]


def test_unknown_kb_is_404(client):
    response = client.post("/api/v1/builder/knowledge-bases/00000000-0000-0000-0000-000000000000/search",
                           {"query": "退款"}, format="json")
    assert response.status_code == 404


def test_a_kb_of_another_project_is_404(api_client, kb):
    stranger = MembershipFactory()
    api_client.force_login(stranger.user)
    response = api_client.post(_url(kb), {"query": "退款"}, format="json")
    assert response.status_code == 404


def test_search_requires_authentication(api_client, kb):
    response = api_client.post(_url(kb), {"query": "退款"}, format="json")
    assert (response.status_code, response.json()["error"]) == (401, "unauthorized")


def test_a_query_the_embedding_model_cannot_embed_is_503_with_the_endpoints_message(client, owner):
    from apps.knowledge.models import Chunk
    from tests.knowledge.factories import EmbeddingModelFactory
    from tests.knowledge.helpers import EmbeddingsEndpoint

    with EmbeddingsEndpoint() as endpoint:
        model = EmbeddingModelFactory(provider="openai", options={"base_url": endpoint.url})
        kb = KnowledgeBaseFactory(project=owner.project, embedding_model=model)
        [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
        assert ingest.document_ingest(document_id=document.pk) == "completed"
        chunks = Chunk.objects.count()
        endpoint.statuses = [400]
        response = client.post(_url(kb), {"query": "质量问题退款"}, format="json")
    body = response.json()
    assert (response.status_code, body["error"], response["Retry-After"]) == (503, "knowledge_unavailable", "5")
    assert body["message"] == ("The query could not be embedded: The embedding endpoint refused the request "
                               "(HTTP 400): scripted 400")
    assert endpoint.url not in body["message"]
    assert Chunk.objects.count() == chunks
