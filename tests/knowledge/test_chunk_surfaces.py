"""A disabled or edited chunk, as every other reader sees it: the builder search API and the
agent knowledge search and read."""

from __future__ import annotations

import pytest

from apps.knowledge import services
from apps.knowledge.models import Chunk
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.knowledge.test_chunk_overrides import DAMAGED, EDITED, HANDBOOK
from tests.projects.factories import UserFactory
from tests.runtime.knowledge_helpers import DELIVERY, REFUND, WARRANTY, document_body, read, search

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.runtime.knowledge_fixtures"]


@pytest.fixture
def handbook(owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    ingest_texts(kb, {"handbook.md": HANDBOOK})
    return kb


def _builder_search(client, kb, query: str, mode: str) -> list[str]:
    body = {"query": query, "top_k": 10, "hybrid": mode == "hybrid"}
    response = client.post(f"/api/v1/builder/knowledge-bases/{kb.pk}/search", body, format="json")
    assert response.status_code == 200, response.content
    return [hit["content"] for hit in response.json()["data"]["hits"]]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_the_builder_search_api_no_longer_returns_a_disabled_chunk(client, owner, handbook, mode):
    damaged = Chunk.objects.get(document__knowledge_base=handbook, kind="child", text=DAMAGED)
    services.chunk_disable(chunk=damaged, user=owner.user)
    contents = _builder_search(client, handbook, "photographs damaged parcels claims desk", mode)
    assert all("photographs" not in content for content in contents)


def test_the_builder_search_api_finds_an_edit_by_its_new_word(client, owner, handbook):
    damaged = Chunk.objects.get(document__knowledge_base=handbook, kind="child", text=DAMAGED)
    services.chunk_text_edit(chunk=damaged, text=EDITED, user=owner.user)
    contents = _builder_search(client, handbook, "pictures emailed", "hybrid")
    assert EDITED in contents[0]
    assert all("photographs" not in content for content in contents)


def _refund_chunk(kb) -> Chunk:
    return Chunk.objects.get(document__knowledge_base=kb, kind="child", text__contains="无理由退货")


def test_an_agent_search_no_longer_hints_at_a_disabled_chunks_document(api_client, ksession, kroute, kb, docs):
    services.chunk_disable(chunk=_refund_chunk(kb), user=UserFactory())
    response = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货")
    assert response.status_code == 200
    assert "退款.md" not in [hint["title"] for hint in response.json()["hints"]]


def test_an_agent_reads_no_disabled_text_and_an_older_reference_is_refused(api_client, ksession, kroute, kb, docs,
                                                                           clock):
    response = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货")
    ref = next(h["ref"] for h in response.json()["hints"] if h["title"] == "退款.md")
    services.chunk_disable(chunk=_refund_chunk(kb), user=UserFactory())
    answer = read(api_client, ksession.access_token, kroute.key, ref)
    assert (answer.status_code, answer.json()["error"]) == (409, "knowledge_changed")
    assert REFUND not in document_body(docs["退款.md"])
    assert (DELIVERY in document_body(docs["配送.md"]), WARRANTY in document_body(docs["保修.md"])) == (True, True)


def test_an_agent_reads_the_edited_text(api_client, ksession, kroute, kb, docs, clock):
    services.chunk_text_edit(chunk=_refund_chunk(kb), text="退款政策：七天内凭小票办理退货退款。", user=UserFactory())
    response = search(api_client, ksession.access_token, kroute.key, "凭小票办理退货")
    ref = next(h["ref"] for h in response.json()["hints"] if h["title"] == "退款.md")
    page = read(api_client, ksession.access_token, kroute.key, ref).json()
    assert "七天内凭小票办理退货退款。" in page["content"]
    assert "无理由退货" not in page["content"]
