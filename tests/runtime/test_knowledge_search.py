import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.knowledge import services
from apps.knowledge.models import Document
from apps.routes.services import route_update
from apps.runtime.knowledge import document_revision, knowledge_scope_get
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import EmbeddingsEndpoint
from tests.ledger.helpers import complete_run, open_turn, post_json
from tests.runtime.knowledge_helpers import (
    REFUND,
    document_body,
    ingest_texts,
    row_counts,
    search,
    search_url,
)

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def test_a_search_answers_hints_of_the_matching_document(api_client, ksession, kroute, docs, clock):
    response = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货", limit=1)
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    refund = docs["退款.md"]
    hint = body["hints"][0]
    assert body == {
        "schema_version": "bailing.agent-knowledge-search.v1",
        "route": "policy-desk",
        "knowledge_scope_revision": knowledge_scope_get(route=kroute).revision,
        "status": "ok",
        "trust": "reference_only",
        "hints": [{
            "ref": hint["ref"],
            "title": "退款.md",
            "summary": REFUND,
            "revision": document_revision(title="退款.md", body=document_body(refund)),
            "score": hint["score"],
            "expires_at": "2027-01-15T08:05:00Z",
        }],
        "truncated": False,
    }
    assert isinstance(hint["score"], float) and 0 < hint["score"] <= 1
    assert HEX64.match(hint["revision"])


def test_hints_point_at_distinct_documents_best_first(api_client, ksession, kroute, docs):
    body = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货").json()
    titles = [hint["title"] for hint in body["hints"]]
    assert titles[0] == "退款.md"
    assert sorted(titles) == ["保修.md", "退款.md", "配送.md"]
    scores = [hint["score"] for hint in body["hints"]]
    assert scores == sorted(scores, reverse=True)


def test_at_most_three_documents_even_with_more_matches(api_client, ksession, kroute, kb):
    ingest_texts(kb, {f"退款{n}.md": f"# 退款\n\n退款政策第{n}条：七天无理由退货。" for n in range(5)})
    body = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货").json()
    assert len(body["hints"]) == 3
    assert len({hint["title"] for hint in body["hints"]}) == 3


def test_limit_caps_the_hints(api_client, ksession, kroute, docs):
    body = search(api_client, ksession.access_token, kroute.key, "退款政策", limit=2).json()
    assert len(body["hints"]) == 2


def test_a_document_with_many_matching_sections_is_one_hint(api_client, ksession, kroute, kb):
    sections = "\n\n".join(f"# 第{n}节\n\n退款政策第{n}条：七天无理由退货。" for n in range(6))
    ingest_texts(kb, {"长文.md": sections})
    body = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货").json()
    assert [hint["title"] for hint in body["hints"]] == ["长文.md"]


def test_the_route_threshold_is_applied_and_never_lowered_to_fill(api_client, ksession, kroute, docs):
    query = "退款政策 七天无理由退货 店长审批"
    assert len(search(api_client, ksession.access_token, kroute.key, query).json()["hints"]) == 3
    route_update(route=kroute, knowledge_score_threshold=0.95)
    body = search(api_client, ksession.access_token, kroute.key, query).json()
    assert [hint["title"] for hint in body["hints"]] == ["退款.md"]
    assert all(hint["score"] >= 0.95 for hint in body["hints"])


def test_no_hit_above_the_threshold_is_ok_with_no_hints(api_client, ksession, kroute, docs):
    route_update(route=kroute, knowledge_score_threshold=1.0)
    body = search(api_client, ksession.access_token, kroute.key, "天气 下雨").json()
    assert (body["status"], body["hints"], body["truncated"]) == ("ok", [], False)


@pytest.fixture
def e5_kb(project, kroute):
    """The route's KB on the local e5 model, whose hybrid scores carry how likely the KB answers."""
    from apps.knowledge.models import EmbeddingModel

    model = (EmbeddingModel.objects.filter(provider="local").first()
             or services.embedding_model_register(name="e5-runtime-test", provider="local", dimension=384))
    kb = KnowledgeBaseFactory(project=project, name="门店政策 e5", embedding_model=model)
    services.route_knowledge_bind(route=kroute, knowledge_base=kb)
    ingest_texts(kb, {"退款.md": f"# 退款\n\n{REFUND}",
                      "配送.md": "# 配送\n\n配送说明：同城订单当天送达，外地订单三到五天送达。"})
    return kb


def test_a_threshold_on_an_e5_route_says_no_knowledge_for_a_question_it_does_not_cover(
        api_client, ksession, kroute, e5_kb):
    uncovered = "量子色动力学中的渐近自由是谁发现的"
    before = search(api_client, ksession.access_token, kroute.key, uncovered).json()
    assert before["status"] == "ok" and before["hints"]
    assert all(hint["score"] < 0.2 for hint in before["hints"])  # no longer 1.0 for the best of nothing
    route_update(route=kroute, knowledge_score_threshold=0.5)
    body = search(api_client, ksession.access_token, kroute.key, uncovered).json()
    assert (body["status"], body["hints"]) == ("ok", [])
    covered = search(api_client, ksession.access_token, kroute.key, "七天无理由退货怎么退款").json()
    assert [hint["title"] for hint in covered["hints"]][:1] == ["退款.md"]
    assert covered["hints"][0]["score"] >= 0.5


def test_a_route_without_knowledge_is_disabled(api_client, ksession, kroute, docs):
    route_update(route=kroute, knowledge_enabled=False)
    body = search(api_client, ksession.access_token, kroute.key).json()
    assert (body["status"], body["hints"]) == ("disabled", [])
    assert body["knowledge_scope_revision"] == knowledge_scope_get(route=kroute).revision


def test_a_route_without_sources_is_disabled(api_client, ksession, kroute):
    body = search(api_client, ksession.access_token, kroute.key).json()
    assert (body["status"], body["hints"]) == ("disabled", [])


def test_hints_come_only_from_completed_documents(api_client, ksession, kroute, docs):
    Document.objects.filter(pk=docs["退款.md"].pk).update(status=Document.Status.EMBEDDING)
    body = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货").json()
    assert "退款.md" not in [hint["title"] for hint in body["hints"]]


def test_a_kb_not_bound_to_the_route_is_never_searched(api_client, ksession, kroute, project, kb, docs):
    other = KnowledgeBaseFactory(project=project, name="内部资料", embedding_model=kb.embedding_model)
    ingest_texts(other, {"内部退款.md": "# 内部\n\n退款政策内部版：七天无理由退货。"})
    body = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货 内部版").json()
    assert "内部退款.md" not in [hint["title"] for hint in body["hints"]]


@pytest.fixture
def remote(project):
    """A KB embedded by an OpenAI-compatible endpoint: a real local server, up while documents are
    ingested (`with remote.endpoint:`), down afterwards (connection refused, no retries)."""
    endpoint = EmbeddingsEndpoint()
    model = EmbeddingModelFactory(provider="openai", options={"base_url": endpoint.url, "max_retries": 0})
    kb = KnowledgeBaseFactory(project=project, name="远程知识库", embedding_model=model)
    kb.endpoint = endpoint
    yield kb
    endpoint.server.server_close()


def test_an_embedder_failure_is_unavailable_never_no_knowledge(api_client, ksession, kroute, remote):
    with remote.endpoint:
        ingest_texts(remote, {"远程退款.md": f"# 退款\n\n{REFUND}"})
    services.route_knowledge_bind(route=kroute, knowledge_base=remote)  # the endpoint is down now
    response = search(api_client, ksession.access_token, kroute.key, "退款政策")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["hints"], body["truncated"]) == ("unavailable", [], False)


def test_one_failing_source_among_several_is_partial(api_client, ksession, kroute, remote, docs):
    with remote.endpoint:
        ingest_texts(remote, {"远程退款.md": f"# 退款\n\n{REFUND}"})
    services.route_knowledge_bind(route=kroute, knowledge_base=remote)
    body = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货").json()
    assert body["status"] == "partial"
    assert body["hints"][0]["title"] == "退款.md"
    assert "远程退款.md" not in [hint["title"] for hint in body["hints"]]


def test_sources_with_different_models_are_merged_by_rank(api_client, ksession, kroute, remote, docs):
    with remote.endpoint:
        ingest_texts(remote, {"远程退款.md": f"# 退款\n\n{REFUND}"})
        services.route_knowledge_bind(route=kroute, knowledge_base=remote)
        body = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货", limit=2).json()
    assert body["status"] == "ok"
    assert sorted(hint["title"] for hint in body["hints"]) == ["远程退款.md", "退款.md"]


def test_long_titles_leave_hints_out_rather_than_exceed_4096_bytes(api_client, ksession, kroute, kb):
    ingest_texts(kb, {f"{'售后服务与退款政策说明' * 20}{n}.md": f"# 退款\n\n{REFUND}第{n}版。" for n in range(3)})
    response = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货")
    body = response.json()
    assert len(response.content) <= 4096
    assert (len(body["hints"]), body["truncated"]) == (2, True)


def test_a_search_of_exactly_4096_bytes_keeps_every_hint_and_one_more_byte_drops_one(
        api_client, ksession, kroute, kb, clock):
    """Three hints whose titles are long Chinese names: the third title is sized so that the
    whole answer is 4096 bytes exactly, then one byte longer."""
    long_text = REFUND * 3  # the summaries are cut at 512 bytes
    base = ingest_texts(kb, {
        f"{'甲' * 150}.md": f"# 甲\n\n{long_text}",
        f"{'乙' * 150}.md": f"# 乙\n\n七天无理由退货。{long_text}",
        "丙.md": f"# 丙\n\n退款政策。{long_text}",
    })
    query = "退款政策 七天无理由退货"

    def answer_with_third_title(title):
        services.document_delete(document=Document.objects.get(knowledge_base=kb, filename__startswith="丙"))
        ingest_texts(kb, {title: f"# 丙\n\n退款政策。{long_text}"})
        return search(api_client, ksession.access_token, kroute.key, query)

    first = search(api_client, ksession.access_token, kroute.key, query)
    assert len(first.json()["hints"]) == 3 and base
    gap = 4096 - len(first.content)
    assert 0 < gap <= 3 * 240
    exact_title = "丙" + "文" * (gap // 3) + "x" * (gap % 3) + ".md"
    exact = answer_with_third_title(exact_title)
    assert len(exact.content) == 4096
    assert (len(exact.json()["hints"]), exact.json()["truncated"]) == (3, False)
    over = answer_with_third_title("丙" + "文" * (gap // 3) + "x" * (gap % 3 + 1) + ".md")
    assert len(over.content) < 4096
    assert (len(over.json()["hints"]), over.json()["truncated"]) == (2, True)


def test_summaries_are_exact_excerpts_of_the_hit_within_512_bytes(api_client, ksession, kroute, kb):
    text = "前言。" * 100 + "退款政策：七天无理由退货。" + "后记。" * 100
    document = ingest_texts(kb, {"长.md": f"# 长\n\n{text}"})["长.md"]
    hint = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货").json()["hints"][0]
    assert hint["summary"] in document_body(document)
    assert "退款政策" in hint["summary"]
    assert len(hint["summary"].encode()) <= 512


def test_a_search_bound_to_a_ready_run_echoes_it(api_client, ksession, kroute, docs):
    run_id = open_turn(api_client, ksession.access_token, kroute.key).json()["run_id"]
    body = search(api_client, ksession.access_token, kroute.key, run_id=run_id).json()
    assert body["run_id"] == run_id
    assert list(body)[:3] == ["schema_version", "route", "run_id"]


def test_a_finished_run_cannot_search(api_client, ksession, kroute, docs):
    run_id = open_turn(api_client, ksession.access_token, kroute.key).json()["run_id"]
    complete_run(api_client, ksession.access_token, run_id)
    response = search(api_client, ksession.access_token, kroute.key, run_id=run_id)
    assert (response.status_code, response.json()["error"]) == (409, "run_not_active")


def test_a_run_of_another_route_is_not_found(api_client, ksession, kroute, other_route, docs):
    run_id = open_turn(api_client, ksession.access_token, other_route.key).json()["run_id"]
    response = search(api_client, ksession.access_token, kroute.key, run_id=run_id)
    assert (response.status_code, response.json()["error"]) == (404, "run_not_found")


def test_a_run_of_another_session_is_not_found(api_client, ksession, kclient, kroute, docs):
    other = session_for(kclient, principal=PRINCIPAL)
    run_id = open_turn(api_client, other.access_token, kroute.key).json()["run_id"]
    response = search(api_client, ksession.access_token, kroute.key, run_id=run_id)
    assert (response.status_code, response.json()["error"]) == (404, "run_not_found")


@pytest.mark.parametrize("fields", [
    {"query": ""},
    {"query": "   \n "},
    {"query": "退" * 2001},
    {"query": 42},
    {"query": "退款\x00"},
    {"query": "退款", "limit": 0},
    {"query": "退款", "limit": 4},
    {"query": "退款", "limit": "2"},
    {"query": "退款", "limit": True},
    {"query": "退款", "run_id": "not-a-uuid"},
    {"query": "退款", "kb_ids": ["x"]},
    {"limit": 1},
])
def test_a_malformed_search_is_400_and_changes_nothing(api_client, ksession, kroute, docs, fields):
    before = row_counts()
    response = post_json(api_client, search_url(kroute.key), fields, ksession.access_token)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert row_counts() == before


def test_a_query_of_2000_characters_is_accepted(api_client, ksession, kroute, docs):
    response = search(api_client, ksession.access_token, kroute.key, "退" * 2000)
    assert response.status_code == 200


def test_a_search_writes_nothing(api_client, ksession, kroute, docs):
    before = row_counts()
    assert search(api_client, ksession.access_token, kroute.key).status_code == 200
    assert row_counts() == before


def test_search_needs_the_runtime_switch(api_client, ksession, kroute, docs):
    route_update(route=kroute, agent_client_enabled=False)
    response = search(api_client, ksession.access_token, kroute.key)
    assert (response.status_code, response.json()["error"]) == (403, "agent_client_disabled")


def test_validating_more_hints_costs_no_more_queries(api_client, ksession, kroute, docs):
    counts = []
    for limit in (1, 3):
        with CaptureQueriesContext(connection) as queries:
            body = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货", limit=limit).json()
        assert len(body["hints"]) == limit
        counts.append(len(queries.captured_queries))
    assert counts[0] == counts[1]
