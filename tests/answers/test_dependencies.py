import pytest

from apps.knowledge import ingest, services
from apps.knowledge.models import EmbeddingModel
from apps.ledger.models import RagQuery
from tests.answers.conftest import rag_url
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import EmbeddingsEndpoint, upload
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


def test_embedder_failure_is_dependency_unavailable(client, owner):
    with EmbeddingsEndpoint(dimension=32) as endpoint:
        model = EmbeddingModelFactory(provider=EmbeddingModel.Provider.OPENAI, dimension=32,
                                      options={"base_url": endpoint.url, "max_retries": 0})
        kb = KnowledgeBaseFactory(project=owner.project, embedding_model=model)
        [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
        assert ingest.document_ingest(document_id=document.pk) == "completed"
        route = RouteFactory(project=owner.project, key="remote-embeddings")
        route.knowledge_bindings.create(knowledge_base=kb)
        endpoint.statuses = [500] * 5
        response = client.post(rag_url(route.key), {"question": "一个从未嵌入过的问题：退款多久？"}, format="json")
    body = response.json()
    assert response.status_code == 200
    assert body["error_code"] == "DEPENDENCY_UNAVAILABLE"
    assert body["answer"] == ""
    assert endpoint.url not in body["error_message"] and "127.0.0.1" not in body["error_message"]
    assert body["trace"] == [{"step": "retrieve", "ms": body["trace"][0]["ms"], "status": "failed"}]
    assert RagQuery.objects.get(pk=body["query_id"]).error_code == "DEPENDENCY_UNAVAILABLE"


def test_database_failure_during_retrieval_is_dependency_unavailable(client, route):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE knowledge_chunk RENAME TO knowledge_chunk_moved")
    response = client.post(rag_url(route.key), {"question": "质量问题多久可以退款？"}, format="json")
    body = response.json()
    assert response.status_code == 200
    assert body["error_code"] == "DEPENDENCY_UNAVAILABLE"
    assert "knowledge_chunk" not in body["error_message"]
    # The test's transaction is broken by then, so the record could not be written either.
    assert body["query_id"] is None


def test_a_configured_reranker_is_a_trace_step_and_its_cost_names_the_route(client, route, kb, settings):
    settings.KNOWLEDGE_RERANK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the endpoint's address
    from apps.knowledge.models import CostRecord
    from tests.knowledge.rerankers import RerankEndpoint

    with RerankEndpoint() as endpoint:
        services.knowledge_base_update(kb=kb, reranker={"base_url": endpoint.url, "model": "bge-reranker",
                                                        "candidates": 20, "timeout_ms": 2000})
        body = client.post(rag_url(route.key), {"question": "质量问题多久可以退款？"}, format="json").json()
    assert body["trace"][1] == {"step": "rerank", "ms": body["trace"][1]["ms"], "status": "applied"}
    assert CostRecord.objects.get().route_id == route.pk


def test_a_failing_reranker_keeps_the_fused_order_and_the_answer(client, route, kb, settings):
    settings.KNOWLEDGE_RERANK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the endpoint's address
    from tests.knowledge.rerankers import RerankEndpoint

    with RerankEndpoint(status=500) as endpoint:
        services.knowledge_base_update(kb=kb, reranker={"base_url": endpoint.url, "model": "bge-reranker",
                                                        "candidates": 20, "timeout_ms": 2000})
        body = client.post(rag_url(route.key), {"question": "质量问题的商品可以在多少天内退款？"},
                           format="json").json()
    assert body["trace"][1]["status"] == "fallback"
    assert body["trace"][1]["fallback"] == "fused_order"
    assert body["error_code"] is None
    assert body["answer"] == "质量问题的商品可以在三十天内退款。[1]"
