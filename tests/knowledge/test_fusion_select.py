"""Fusion chosen per KB and per debug search: `rrf` (k=60) and the adaptive convex fusion."""

import pytest

from apps.knowledge.models import KnowledgeBase, PlaygroundQuery
from apps.knowledge.pipeline.candidates import Candidate
from apps.knowledge.pipeline.fusion import fuse
from apps.knowledge.pipeline.retrieve import SearchOptions, search
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

pytestmark = pytest.mark.django_db


def _hand_candidates() -> dict:
    # Channel ranks and scores fixed by hand:
    #   a: vector #1 (0.9), keyword #3 (2.0)     b: vector #2 (0.8), keyword #1 (10.0)
    #   c: vector #3 (0.5), keyword #2 (9.0)     d: vector #4 (0.1), not in the keyword channel
    return {
        "a": Candidate("a", vector_rank=1, vector_score=0.9, keyword_rank=3, keyword_score=2.0),
        "b": Candidate("b", vector_rank=2, vector_score=0.8, keyword_rank=1, keyword_score=10.0),
        "c": Candidate("c", vector_rank=3, vector_score=0.5, keyword_rank=2, keyword_score=9.0),
        "d": Candidate("d", vector_rank=4, vector_score=0.1),
    }


def test_rrf_orders_by_the_sum_of_reciprocal_ranks_with_k_60():
    # a = 1/61 + 1/63 = 0.032266, b = 1/62 + 1/61 = 0.032522, c = 1/63 + 1/62 = 0.032002, d = 1/64
    ranked = fuse(_hand_candidates(), fusion="rrf", dense_weight=0.9)
    assert [c.chunk_id for c in ranked] == ["b", "a", "c", "d"]
    assert [round(c.score, 6) for c in ranked] == [0.032522, 0.032266, 0.032002, 0.015625]


def test_convex_orders_by_the_weighted_normalised_scores():
    # dense min-max over 0.1–0.9: a 1, b 0.875, c 0.5, d 0; keyword over the best 10: a .2, b 1, c .9, d 0
    # w = 0.9: a = .9 + .02 = .92, b = .7875 + .1 = .8875, c = .45 + .09 = .54, d = 0
    ranked = fuse(_hand_candidates(), fusion="convex", dense_weight=0.9)
    assert [c.chunk_id for c in ranked] == ["a", "b", "c", "d"]
    assert [round(c.score, 4) for c in ranked] == [0.92, 0.8875, 0.54, 0.0]


CORPUS = {
    "refund.md": "# 退款\n\n退款在七天内处理，质量问题可以退款。",
    "shipping.md": "# 配送\n\n配送需要三天，偏远地区五天。",
    "invoice.md": "# 发票\n\n发票在退款完成后作废，重新开具需要七天。",
    "warranty.md": "# 保修\n\n保修期一年，质量问题免费维修。",
    "points.md": "# 积分\n\n积分在订单完成七天后到账。",
}
QUERY = "质量问题退款要几天"


@pytest.fixture
def kb():
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, CORPUS)
    return kb


def _rrf_by_hand(kb) -> list:
    """The RRF(k=60) order computed from each channel's own ranking of the same candidates."""
    options = dict(top_k=50, rollup=False)
    vector = search(kbs=[kb], query=QUERY, options=SearchOptions(mode="vector", **options)).hits
    keyword = search(kbs=[kb], query=QUERY, options=SearchOptions(mode="keyword", **options)).hits
    scores: dict = {}
    for hits in (vector, keyword):
        for rank, hit in enumerate(hits, start=1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + 1 / (60 + rank)
    return sorted(scores, key=lambda cid: (-scores[cid], str(cid)))


def test_a_kb_set_to_rrf_fuses_its_hybrid_searches_with_rrf(kb):
    KnowledgeBase.objects.filter(pk=kb.pk).update(fusion="rrf")
    kb.refresh_from_db()
    result = search(kbs=[kb], query=QUERY, options=SearchOptions(mode="hybrid", top_k=50, rollup=False,
                                                                  explain=True))
    assert [hit.chunk_id for hit in result.hits] == _rrf_by_hand(kb)
    assert {hit.explain["fusion"] for hit in result.hits} == {"rrf"}
    assert result.fusions == ["rrf"]


def test_a_kb_fuses_convexly_by_default(kb):
    result = search(kbs=[kb], query=QUERY, options=SearchOptions(mode="hybrid", top_k=50, rollup=False,
                                                                  explain=True))
    assert kb.fusion == "convex"
    assert {hit.explain["fusion"] for hit in result.hits} == {"convex"}
    assert all(0.0 <= hit.score <= 1.0 for hit in result.hits)


def test_a_search_option_overrides_the_kb_setting(kb):
    KnowledgeBase.objects.filter(pk=kb.pk).update(fusion="rrf")
    kb.refresh_from_db()
    result = search(kbs=[kb], query=QUERY, options=SearchOptions(mode="hybrid", top_k=3, fusion="convex",
                                                                  explain=True))
    assert {hit.explain["fusion"] for hit in result.hits} == {"convex"}


def test_the_debug_search_takes_fusion_rrf(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    ingest_texts(kb, CORPUS)
    response = client.post(f"/api/v1/builder/knowledge-bases/{kb.pk}/search",
                           {"query": QUERY, "hybrid": True, "top_k": 50, "fusion": "rrf", "explain": True},
                           format="json")
    assert response.status_code == 200
    data = response.json()["data"]
    assert data["fusion"] == "rrf"
    assert data["trace"] == []
    best = data["hits"][0]["explain"]
    ranks = [r for r in (best["vector"]["rank"], best["keyword"]["rank"]) if r is not None]
    assert data["hits"][0]["score"] == pytest.approx(sum(1 / (60 + r) for r in ranks), abs=1e-6)


def test_the_debug_search_uses_the_kb_fusion_when_none_is_given(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project, fusion="rrf")
    ingest_texts(kb, CORPUS)
    response = client.post(f"/api/v1/builder/knowledge-bases/{kb.pk}/search",
                           {"query": QUERY, "hybrid": True}, format="json")
    assert response.json()["data"]["fusion"] == "rrf"


def test_an_unknown_fusion_in_a_debug_search_is_422(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    before = PlaygroundQuery.objects.count()
    response = client.post(f"/api/v1/builder/knowledge-bases/{kb.pk}/search",
                           {"query": QUERY, "hybrid": True, "fusion": "mean"}, format="json")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_search"
    assert "fusion" in response.json()["fields"]
    assert PlaygroundQuery.objects.count() == before


def test_the_builder_api_sets_a_kb_fusion(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"fusion": "rrf"}, format="json")
    assert response.status_code == 200
    assert response.json()["data"]["fusion"] == "rrf"
    kb.refresh_from_db()
    assert kb.fusion == "rrf"


def test_an_unknown_kb_fusion_is_422_and_changes_nothing(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"fusion": "RRF"}, format="json")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_knowledge_base"
    assert response.json()["fields"]["fusion"]
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before


def test_an_unknown_fusion_at_creation_is_422_and_creates_nothing(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.count()
    response = client.post("/api/v1/builder/knowledge-bases", {
        "project_id": str(owner.project.pk), "name": "another", "embedding_model_id": str(kb.embedding_model_id),
        "embedding_dim": kb.embedding_dim, "fusion": "borda"}, format="json")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_knowledge_base"
    assert KnowledgeBase.objects.count() == before
