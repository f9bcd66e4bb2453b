"""Inline knowledge in the turn context, through the real ingestion pipeline (in-process) and
the retrieval selector."""

import json

import pytest

from apps.knowledge import ingest, services
from apps.ledger.models import Run
from apps.routes.services import route_update
from tests.agent_auth.helpers import bearer
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import EmbeddingsEndpoint, upload
from tests.ledger.helpers import ledger_counts, open_turn

CORPUS = {
    "refund.md": "# 售后政策\n\n## 退款\n\n七天无理由退款，商品须未使用。",
    "delivery.md": "# 配送\n\n同城订单当日送达，偏远地区三天。",
    "staff.md": "# 员工\n\nAda 是三号店的店长，负责排班。",
}


def _ingest(kb, files):
    documents = services.document_upload(kb=kb, files=[upload(name, text.encode()) for name, text in files.items()])
    for document in documents:
        assert ingest.document_ingest(document_id=document.pk) == "completed"
    return {document.filename: document for document in documents}


@pytest.fixture
def kb(route):
    kb = KnowledgeBaseFactory(project=route.project)
    services.route_knowledge_bind(route=route, knowledge_base=kb)
    route_update(route=route, knowledge_enabled=True)
    return kb


@pytest.fixture
def documents(kb):
    return _ingest(kb, CORPUS)


def _context(api_client, issued, route, text, n=1, **overrides):
    response = open_turn(api_client, issued.access_token, route.key, n, user_input=text, **overrides)
    assert response.status_code == 200, response.content
    return response.json()["context"]


def test_hits_become_knowledge_and_refs(api_client, issued, route, documents):
    context = _context(api_client, issued, route, "退款政策是什么？")
    first = context["knowledge"][0]
    assert first["ref"] == "knowledge:1"
    assert first["title"] == "refund.md"
    assert "七天无理由退款" in first["content"]
    ref = context["knowledge_refs"][0]
    assert (ref["ref"], ref["doc_id"], ref["title"]) == ("knowledge:1", str(documents["refund.md"].pk), "refund.md")
    assert isinstance(ref["score"], float)


def test_refs_are_in_turn_order_and_match_the_entries(api_client, issued, route, documents):
    context = _context(api_client, issued, route, "退款 配送 员工")
    assert [entry["ref"] for entry in context["knowledge"]] == [
        f"knowledge:{n}" for n in range(1, len(context["knowledge"]) + 1)]
    assert [ref["ref"] for ref in context["knowledge_refs"]] == [entry["ref"] for entry in context["knowledge"]]
    assert [set(ref) for ref in context["knowledge_refs"]] == [
        {"ref", "doc_id", "title", "chapter_path", "score"}] * len(context["knowledge_refs"])
    assert [set(entry) for entry in context["knowledge"]] == [
        {"ref", "title", "chapter_path", "content"}] * len(context["knowledge"])


def test_the_route_max_docs_bounds_the_documents(api_client, issued, route, documents):
    route_update(route=route, knowledge_max_docs=1)
    context = _context(api_client, issued, route, "退款 配送 员工")
    assert len({ref["doc_id"] for ref in context["knowledge_refs"]}) == 1


def test_no_knowledge_when_the_route_has_it_off(api_client, issued, route, documents):
    route_update(route=route, knowledge_enabled=False)
    context = _context(api_client, issued, route, "退款政策是什么？")
    assert (context["knowledge"], context["knowledge_refs"]) == ([], [])


def test_no_knowledge_without_a_bound_base(api_client, issued, route):
    route_update(route=route, knowledge_enabled=True)
    context = _context(api_client, issued, route, "退款政策是什么？")
    assert (context["knowledge"], context["knowledge_refs"]) == ([], [])


def test_knowledge_of_an_unbound_base_never_appears(api_client, issued, route, kb, documents):
    stray = KnowledgeBaseFactory(project=route.project, embedding_model=kb.embedding_model)
    _ingest(stray, {"secret.md": "# 机密\n\n退款审批的内部口令。"})
    context = _context(api_client, issued, route, "退款")
    assert "secret.md" not in [entry["title"] for entry in context["knowledge"]]


def test_the_replay_keeps_the_frozen_knowledge(api_client, issued, route, kb, documents):
    first = open_turn(api_client, issued.access_token, route.key, user_input="退款政策是什么？")
    _ingest(kb, {"refund-2.md": "# 新退款政策\n\n退款改为十五天。"})
    again = open_turn(api_client, issued.access_token, route.key, user_input="退款政策是什么？")
    assert again.content == first.content


def test_knowledge_stays_within_its_budget_and_the_context_within_64_kib(api_client, issued, route, kb):
    route_update(route=route, knowledge_top_k=10, knowledge_max_docs=10)
    _ingest(kb, {f"long-{n}.md": f"# 长文 {n}\n\n" + "退款规则说明。" * 1500 for n in range(6)})
    context = _context(api_client, issued, route, "退款规则")
    knowledge_bytes = len(json.dumps(context["knowledge"], ensure_ascii=False, separators=(",", ":")).encode())
    assert len(context["knowledge"]) >= 1
    assert knowledge_bytes <= 16 * 1024 + 2
    assert len(json.dumps(context, ensure_ascii=False, separators=(",", ":")).encode()) <= 64 * 1024
    assert Run.objects.get().context_stats["knowledge_hits"] > len(context["knowledge"])


def test_bootstrap_counts_the_bound_base(api_client, issued, route, kb):
    profile = api_client.get(f"/agent-api/v1/workspaces/{route.key}/bootstrap",
                             **bearer(issued.access_token)).json()["profile"]
    assert (profile["knowledge"]["enabled"], profile["knowledge"]["sources"]) == (True, 1)
    body = open_turn(api_client, issued.access_token, route.key).json()
    assert body["profile_revision"] == profile["revision"]


def test_a_failing_embedder_is_503_and_stores_nothing(api_client, issued, route):
    with EmbeddingsEndpoint(dimension=32) as endpoint:
        model = EmbeddingModelFactory(provider="openai", dimension=32,
                                      options={"base_url": endpoint.url, "backoff_seconds": 0, "max_retries": 0})
        kb = KnowledgeBaseFactory(project=route.project, embedding_model=model)
        _ingest(kb, {"refund.md": CORPUS["refund.md"]})
        services.route_knowledge_bind(route=route, knowledge_base=kb)
        route_update(route=route, knowledge_enabled=True)
        endpoint.statuses = [400]
        response = open_turn(api_client, issued.access_token, route.key, user_input="退款政策")
    assert response.status_code == 503
    assert response.json()["error"] == "knowledge_unavailable"
    assert response["Retry-After"] == "5"
    assert ledger_counts() == {"Conversation": 0, "Message": 0, "Run": 0, "MemoryNote": 0}


def test_knowledge_delivery_is_part_of_the_request_hash():
    from apps.runtime.turns import TurnRequest

    keys = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m", "user_input": "q"}
    assert TurnRequest(**keys).hash == TurnRequest(**keys, knowledge_delivery="inline").hash
    assert TurnRequest(**keys).hash != TurnRequest(**keys, knowledge_delivery="on_demand").hash
