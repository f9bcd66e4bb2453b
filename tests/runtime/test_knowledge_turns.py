"""`knowledge_delivery: "on_demand"` turns, and an agent host using the protocol end to end."""

import http.client
import json
from urllib.parse import urlsplit

import pytest

from apps.knowledge import services
from apps.ledger.models import Run
from apps.routes.services import route_update
from apps.runtime.knowledge import knowledge_scope_get
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import EmbeddingsEndpoint
from tests.ledger.helpers import open_turn
from tests.runtime.knowledge_helpers import (
    REFUND,
    capabilities_url,
    chain_body,
    document_body,
    ingest_texts,
    read,
    read_url,
    search_url,
)

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

ASK = "退款政策是怎样的？七天无理由退货吗"


def _on_demand(api_client, ksession, kroute, n=1, **overrides):
    return open_turn(api_client, ksession.access_token, kroute.key, n, user_input=ASK,
                     knowledge_delivery="on_demand", **overrides)


def test_an_on_demand_turn_carries_hints_instead_of_bodies(api_client, ksession, kroute, docs, clock):
    response = _on_demand(api_client, ksession, kroute)
    assert response.status_code == 200
    body = response.json()
    context = body["context"]
    assert (context["knowledge"], context["knowledge_refs"]) == ([], [])
    delivery = context["knowledge_delivery"]
    hints = delivery["hints"]
    assert delivery == {
        "schema_version": "bailing.agent-knowledge-delivery.v1",
        "mode": "on_demand",
        "protocol": "bailing.agent-knowledge.v1",
        "knowledge_scope_revision": knowledge_scope_get(route=kroute).revision,
        "status": "ok",
        "hints": hints,
    }
    assert hints[0]["title"] == "退款.md"
    assert [sorted(hint) for hint in hints] == [["expires_at", "ref", "revision", "score", "summary", "title"]] * len(
        hints)
    assert len(json.dumps(delivery, ensure_ascii=False, separators=(",", ":")).encode()) <= 4096
    assert REFUND not in json.dumps(context, ensure_ascii=False).replace(hints[0]["summary"], "")


def test_instructions_governance_and_memory_stay(api_client, ksession, kroute, docs):
    inline = open_turn(api_client, ksession.access_token, kroute.key, 1, user_input=ASK).json()["context"]
    on_demand = _on_demand(api_client, ksession, kroute, 2).json()["context"]
    assert on_demand["instructions"] == inline["instructions"]
    assert on_demand["governance"] == inline["governance"]
    assert [entry["content"] for entry in on_demand["memory"]["recent"]] == [ASK]


def test_a_turn_without_the_option_keeps_inline_bodies(api_client, ksession, kroute, docs):
    context = open_turn(api_client, ksession.access_token, kroute.key, user_input=ASK).json()["context"]
    assert "knowledge_delivery" not in context
    assert context["knowledge"][0]["title"] == "退款.md"
    assert REFUND in context["knowledge"][0]["content"]


def test_the_hints_of_a_turn_are_read_with_its_run(api_client, ksession, kroute, docs):
    body = _on_demand(api_client, ksession, kroute).json()
    ref = body["context"]["knowledge_delivery"]["hints"][0]["ref"]
    page = read(api_client, ksession.access_token, kroute.key, ref, run_id=body["run_id"])
    assert page.status_code == 200
    assert page.json()["content"] == document_body(docs["退款.md"])
    assert page.json()["run_id"] == body["run_id"]
    refused = read(api_client, ksession.access_token, kroute.key, ref)
    assert (refused.status_code, refused.json()["error"]) == (400, "knowledge_reference_invalid")


def test_switching_the_mode_on_the_same_turn_is_409(api_client, ksession, kroute, docs):
    assert open_turn(api_client, ksession.access_token, kroute.key, user_input=ASK).status_code == 200
    switched = _on_demand(api_client, ksession, kroute)
    assert (switched.status_code, switched.json()["error"]) == (409, "turn_conflict")
    assert Run.objects.count() == 1


def test_an_on_demand_turn_replays_its_bytes(api_client, ksession, kroute, docs):
    first = _on_demand(api_client, ksession, kroute)
    again = _on_demand(api_client, ksession, kroute)
    assert again.content == first.content
    assert Run.objects.get().knowledge_delivery == "on_demand"


def test_an_on_demand_turn_on_a_route_without_knowledge_says_disabled(api_client, ksession, kroute, docs):
    route_update(route=kroute, knowledge_enabled=False)
    delivery = _on_demand(api_client, ksession, kroute).json()["context"]["knowledge_delivery"]
    assert (delivery["status"], delivery["hints"]) == ("disabled", [])


def test_a_retrieval_failure_is_an_unavailable_delivery_not_a_failed_turn(api_client, ksession, kroute, kb,
                                                                          project):
    endpoint = EmbeddingsEndpoint()
    model = EmbeddingModelFactory(provider="openai", options={"base_url": endpoint.url, "max_retries": 0})
    remote = KnowledgeBaseFactory(project=project, name="远程", embedding_model=model)
    with endpoint:
        ingest_texts(remote, {"远程退款.md": f"# 退款\n\n{REFUND}"})
    services.route_knowledge_unbind(route=kroute, knowledge_base=kb)
    services.route_knowledge_bind(route=kroute, knowledge_base=remote)
    response = _on_demand(api_client, ksession, kroute)
    assert response.status_code == 200
    delivery = response.json()["context"]["knowledge_delivery"]
    assert (delivery["status"], delivery["hints"]) == ("unavailable", [])


# An agent host over HTTP against the live server.


class Hub:
    """Plain HTTP/1.1, never following redirects; answers (status, headers, raw bytes, JSON)."""

    def __init__(self, base_url: str, token: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port, self.token = parts.hostname, parts.port, token

    def call(self, method: str, path: str, body: dict | None = None):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=15)
        headers = {"Accept": "application/json", "Authorization": f"Bearer {self.token}"}
        payload = None
        if body is not None:
            payload = json.dumps(body, ensure_ascii=False).encode()
            headers["Content-Type"] = "application/json"
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        connection.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, raw, json.loads(raw)


@pytest.mark.django_db(transaction=True)
def test_an_agent_host_reads_knowledge_on_demand_through_a_whole_turn(live_server, ksession, kroute, kb):
    long_text = "\n\n".join(f"# 第{n}章\n\n{REFUND * 15}" for n in range(30))
    documents = ingest_texts(kb, {"退款手册.md": long_text, "配送.md": "# 配送\n\n同城订单当天送达。"})
    hub = Hub(live_server.url, ksession.access_token)

    status, _, _, bootstrap = hub.call("GET", f"/agent-api/v1/workspaces/{kroute.key}/bootstrap")
    assert (status, bootstrap["profile"]["knowledge"]["enabled"]) == (200, True)
    status, headers, _, capabilities = hub.call("GET", capabilities_url(kroute.key))
    assert (status, headers["cache-control"]) == (200, "no-store")
    assert capabilities["enabled"] and "on_demand" in capabilities["delivery_modes"]

    status, _, _, turn = hub.call("POST", f"/agent-api/v1/workspaces/{kroute.key}/turns", {
        "client_conversation_id": "c-1", "client_turn_id": "t-1", "user_message_id": "m-1",
        "user_input": "退款手册里七天无理由退货怎么规定？", "knowledge_delivery": "on_demand"})
    assert status == 200, turn
    run_id = turn["run_id"]
    delivery = turn["context"]["knowledge_delivery"]
    assert (turn["context"]["knowledge"], turn["context"]["knowledge_refs"]) == ([], [])
    assert delivery["knowledge_scope_revision"] == capabilities["knowledge_scope_revision"]
    assert delivery["hints"][0]["title"] == "退款手册.md"

    status, _, raw, found = hub.call("POST", search_url(kroute.key),
                                     {"query": "七天无理由退货 退款手册", "limit": 2, "run_id": run_id})
    assert (status, found["status"], found["run_id"]) == (200, "ok", run_id)
    assert len(raw) <= 4096
    hint = next(hint for hint in found["hints"] if hint["title"] == "退款手册.md")

    pages, cursor = [], None
    while True:
        request = {"ref": hint["ref"], "run_id": run_id, "max_bytes": 8192}
        if cursor:
            request["cursor"] = cursor
        status, headers, raw, page = hub.call("POST", read_url(kroute.key), request)
        assert (status, headers["cache-control"]) == (200, "no-store"), page
        assert len(raw) <= 8192
        assert page["revision"] == hint["revision"]
        pages.append(page["content"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert "".join(pages) == chain_body(documents["退款手册.md"], hint["ref"])
    assert len(pages) > 3 and page["budget_exhausted"] is False

    status, _, _, done = hub.call("POST", f"/agent-api/v1/runs/{run_id}/complete", {
        "assistant_message_id": "a-1", "status": "completed", "content": "七天内可无理由退货。"})
    assert (status, done) == (200, {"schema_version": "bailing.agent-run-completion.v1", "run_id": run_id,
                                    "status": "completed"})
    status, _, _, refused = hub.call("POST", read_url(kroute.key), {"ref": hint["ref"], "run_id": run_id})
    assert (status, refused["error"]) == (409, "run_not_active")
