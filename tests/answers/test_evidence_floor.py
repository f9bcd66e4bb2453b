"""RAG over calibrated scores (the local e5 model): evidence unlikely to answer is not answered
from, and confidence reads the best evidence score; over relative scores (the hashing test model)
neither does."""

import re

import pytest

from apps.answers.services import CONFIDENCE_CALIBRATED, CONFIDENCE_RELATIVE, NOT_FOUND_EN, NOT_FOUND_ZH
from apps.knowledge import services
from apps.knowledge.models import EmbeddingModel, RouteKnowledgeBinding
from apps.ledger.models import RagQuery
from tests.answers.conftest import rag_url
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db

CORPUS = {
    "sic.md": "# 材料\n\n碳化硅功率器件的耐压等级可以达到一千二百伏。",
    "refund.md": "# Policy\n\nThe refund window is seven days after delivery. Items must be unused.",
    "cats.md": "# Pets\n\nCats sleep for most of the day and hunt at night.",
}
COVERED = "碳化硅功率器件的耐压等级是多少？"


@pytest.fixture(scope="module")
def e5_model(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        model = EmbeddingModel.objects.filter(provider="local").first()
        yield model or services.embedding_model_register(name="e5-test", provider="local", dimension=384)


@pytest.fixture
def e5_route(owner, e5_model):
    kb = KnowledgeBaseFactory(project=owner.project, embedding_model=e5_model)
    ingest_texts(kb, CORPUS)
    route = RouteFactory(project=owner.project, key="e5-help")
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=kb)
    return route


def _ask(client, route, question):
    response = client.post(rag_url(route.key), {"question": question}, format="json")
    assert response.status_code == 200
    return response.json()


def _step(body, name):
    return next(step for step in body["trace"] if step["step"] == name)


def test_a_covered_question_is_answered_with_confidence_from_support_and_the_best_evidence_score(client, e5_route):
    body = _ask(client, e5_route, COVERED)
    assert (body["useful"], body["error_code"]) == (True, None)
    assert "一千二百伏" in body["answer"]
    assert _step(body, "retrieve")["scores_calibrated"] is True
    best = max(item["score"] for item in body["evidence"])
    assert best >= 0.4
    support = _step(body, "generate")["support"]
    assert body["confidence"] == pytest.approx(CONFIDENCE_CALIBRATED.of(support=support, score=best), abs=2e-4)
    assert body["confidence"] != pytest.approx(CONFIDENCE_RELATIVE.of(support=support, score=0.0), abs=2e-4)


@pytest.mark.parametrize(("question", "not_found"), [
    ("量子色动力学中的渐近自由是谁发现的？", NOT_FOUND_ZH),
    ("How do I rotate the TLS certificate of a Kubernetes ingress?", NOT_FOUND_EN),
])
def test_a_question_the_knowledge_does_not_cover_is_not_answered_from_what_ranked_first(client, e5_route, question,
                                                                                        not_found):
    body = _ask(client, e5_route, question)
    assert body["evidence"], "the weak evidence is still shown"
    assert max(item["score"] for item in body["evidence"]) < 0.4
    assert (body["answer"], body["useful"], body["error_code"]) == (not_found, False, "FAILED_RETRIEVAL")
    assert body["confidence"] == 0.0
    assert not any(item["cited"] for item in body["evidence"])
    best = max(item["score"] for item in body["evidence"])
    assert _step(body, "generate") == {"step": "generate", "ms": 0.0, "status": "skipped",
                                       "reason": "evidence_unlikely_to_answer", "best_score": best, "floor": 0.4}
    assert RagQuery.objects.get(pk=body["query_id"]).useful is False


def test_the_floor_is_the_setting(client, e5_route, settings):
    settings.RAG_EVIDENCE_SCORE_MIN = 1.0
    body = _ask(client, e5_route, COVERED)
    assert (body["useful"], body["error_code"]) == (False, "FAILED_RETRIEVAL")
    assert _step(body, "generate")["reason"] == "evidence_unlikely_to_answer"
    settings.RAG_EVIDENCE_SCORE_MIN = 0.0
    body = _ask(client, e5_route, COVERED)
    assert (body["useful"], body["error_code"]) == (True, None)


def test_relative_scores_meet_no_floor_and_confidence_rests_on_support(client, route, settings):
    """The hashing test model has no calibration: its best hit scores about 1 whatever it is."""
    settings.RAG_EVIDENCE_SCORE_MIN = 1.0
    body = _ask(client, route, "质量问题的商品可以在多少天内退款？")
    assert (body["useful"], body["error_code"]) == (True, None)
    assert _step(body, "retrieve")["scores_calibrated"] is False
    support = _step(body, "generate")["support"]
    assert body["confidence"] == pytest.approx(CONFIDENCE_RELATIVE.of(support=support, score=0.0), abs=2e-4)


def test_no_evidence_says_so_in_the_trace(client, owner):
    empty = KnowledgeBaseFactory(project=owner.project)
    route = RouteFactory(project=owner.project, key="empty-kb")
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=empty)
    body = _ask(client, route, "退款要多久？")
    assert body["evidence"] == []
    assert _step(body, "generate") == {"step": "generate", "ms": 0.0, "status": "skipped", "reason": "no_evidence"}


def test_the_playground_says_why_it_did_not_answer(owner, e5_route):
    from django.test import Client
    from django.urls import reverse

    console = Client()
    console.force_login(owner.user)
    kb = e5_route.knowledge_bindings.get().knowledge_base
    page = console.post(reverse("admin:ledger_ragquery_ask", args=[kb.pk]),
                        {"question": "量子色动力学中的渐近自由是谁发现的？"}).content.decode()
    assert "not found</span>" in page
    trace = re.search(r'<p class="rag-trace" id="rag-trace">(.*?)</p>', page, re.S).group(1)
    assert re.search(r"generate 0\.0 ms \(skipped: the best passage found scores 0\.\d\d, under the floor of 0\.40, so "
                     r"the knowledge most likely does not answer this\)", trace), trace
    assert RagQuery.objects.count() == 0


def test_the_floor_reads_the_best_candidate_a_reranker_put_out_of_the_evidence(client, e5_route, settings):
    """The test reranker reverses the fused order: with top_k 1 the evidence is the candidate fused
    last, far under the floor, while the KB answers the question well."""
    from apps.knowledge import services as knowledge_services
    from tests.knowledge.rerankers import RerankEndpoint

    settings.KNOWLEDGE_RERANK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    e5_route.knowledge_top_k = 1
    e5_route.save(update_fields=["knowledge_top_k"])
    kb = e5_route.knowledge_bindings.get().knowledge_base
    with RerankEndpoint() as endpoint:
        knowledge_services.knowledge_base_update(kb=kb, reranker={
            "base_url": endpoint.url, "model": "bge-reranker-v2-m3", "candidates": 20, "timeout_ms": 2000})
        body = _ask(client, e5_route, COVERED)
    assert _step(body, "rerank")["status"] == "applied"
    assert [item["document_title"] for item in body["evidence"]] != ["sic.md"]
    assert max(item["score"] for item in body["evidence"]) < 0.4
    assert _step(body, "generate")["status"] == "ok"  # asked: the search's best candidate clears the floor


def test_no_evidence_under_a_route_threshold_says_which(client, e5_route):
    e5_route.knowledge_score_threshold = 1.0
    e5_route.save(update_fields=["knowledge_score_threshold"])
    body = _ask(client, e5_route, COVERED)
    assert body["evidence"] == []
    assert _step(body, "generate") == {"step": "generate", "ms": 0.0, "status": "skipped", "reason": "no_evidence",
                                       "score_threshold": 1.0}
