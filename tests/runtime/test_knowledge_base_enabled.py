"""A knowledge base turned off: no agent search, read, turn, answer or bootstrap reads it, while
its bindings, documents and index stay; turned on again, it is read as before."""

import pytest

from apps.answers.services import rag_query_answer
from apps.knowledge import services
from apps.knowledge.models import Chunk, Document, RouteKnowledgeBinding
from apps.knowledge.selectors import route_knowledge_bases, route_knowledge_search
from apps.runtime.knowledge.scope import knowledge_scope_get
from tests.agent_auth.helpers import bearer
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.ledger.helpers import open_turn
from tests.runtime.knowledge_helpers import first_ref, get_capabilities, ingest_texts, read, search

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

QUERY = "退款政策 七天无理由退货"


def _off(kb) -> None:
    services.knowledge_base_update(kb=kb, enabled=False)


def _titles(body: dict) -> list[str]:
    return [hint["title"] for hint in body["hints"]]


@pytest.fixture
def warehouse(project, kroute, kb):
    """A second KB on the same route, with its own refund rule."""
    second = KnowledgeBaseFactory(project=project, name="仓库规则", embedding_model=kb.embedding_model)
    services.route_knowledge_bind(route=kroute, knowledge_base=second)
    ingest_texts(second, {"仓库退款.md": "# 仓库退款\n\n仓库退款政策：七天无理由退货的商品退回仓库后登记。"})
    return second


def test_a_kb_turned_off_gives_no_hints_and_the_route_reads_its_other_kb(api_client, ksession, kroute, kb, docs,
                                                                          warehouse, clock):
    before = search(api_client, ksession.access_token, kroute.key, QUERY).json()
    assert "退款.md" in _titles(before) and "仓库退款.md" in _titles(before)
    _off(kb)
    body = search(api_client, ksession.access_token, kroute.key, QUERY).json()
    assert (body["status"], _titles(body)) == ("ok", ["仓库退款.md"])
    assert body["knowledge_scope_revision"] != before["knowledge_scope_revision"]
    # Nothing else changed: the binding, the documents and their chunks stay.
    assert RouteKnowledgeBinding.objects.filter(route=kroute, knowledge_base=kb).exists()
    assert Document.objects.filter(knowledge_base=kb, status=Document.Status.COMPLETED).count() == 3
    assert Chunk.objects.filter(document__knowledge_base=kb).exists()


def test_a_route_whose_only_kb_is_off_is_disabled_and_says_so_in_its_capabilities(api_client, ksession, kroute,
                                                                                  kb, docs):
    _off(kb)
    body = search(api_client, ksession.access_token, kroute.key, QUERY).json()
    assert (body["status"], body["hints"]) == ("disabled", [])
    capabilities = get_capabilities(api_client, ksession.access_token, kroute.key).json()
    assert (capabilities["supported"], capabilities["enabled"]) == (True, False)


def test_a_ref_into_a_kb_turned_off_is_scope_changed_and_reads_again_once_it_is_on(api_client, ksession, kroute, kb,
                                                                                    docs, clock):
    ref = first_ref(api_client, ksession.access_token, kroute.key, QUERY)
    _off(kb)
    response = read(api_client, ksession.access_token, kroute.key, ref)
    assert (response.status_code, response.json()["error"]) == (409, "knowledge_scope_changed")
    assert response["Cache-Control"] == "no-store"
    services.knowledge_base_update(kb=kb, enabled=True)
    again = first_ref(api_client, ksession.access_token, kroute.key, QUERY)
    assert read(api_client, ksession.access_token, kroute.key, again).status_code == 200


def test_the_scope_and_the_route_search_leave_a_kb_off_out(kroute, kb, docs, warehouse):
    _off(kb)
    scope = knowledge_scope_get(route=kroute)
    assert scope.knowledge_base_ids == [warehouse.pk]
    assert {hit.title for hit in route_knowledge_search(route=kroute, query=QUERY)} == {"仓库退款.md"}
    # The route's configuration still binds both.
    assert set(route_knowledge_bases(route=kroute)) == {kb, warehouse}


def test_a_turn_carries_no_knowledge_of_a_kb_turned_off_and_bootstrap_counts_only_kbs_on(api_client, ksession,
                                                                                        kroute, kb, docs,
                                                                                        warehouse):
    profile_url = f"/agent-api/v1/workspaces/{kroute.key}/bootstrap"
    before = api_client.get(profile_url, **bearer(ksession.access_token)).json()["profile"]
    assert before["knowledge"]["sources"] == 2
    _off(kb)
    profile = api_client.get(profile_url, **bearer(ksession.access_token)).json()["profile"]
    assert profile["knowledge"]["sources"] == 1
    assert profile["revision"] != before["revision"]
    response = open_turn(api_client, ksession.access_token, kroute.key, user_input="退款政策是什么？")
    assert response.status_code == 200, response.content
    titles = {entry["title"] for entry in response.json()["context"]["knowledge"]}
    assert titles == {"仓库退款.md"}


def test_an_answer_quotes_no_kb_turned_off(kroute, kb, docs):
    assert rag_query_answer(route=kroute, question="退款政策是什么？").evidence != []
    _off(kb)
    answer = rag_query_answer(route=kroute, question="退款政策是什么？")
    assert answer.evidence == []
