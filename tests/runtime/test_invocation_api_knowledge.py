"""The built-in kb_search and kb_read through the governed invocation endpoint: run in-process on
the knowledge protocol's services and budgets (no HTTP, no worker), keyed and replayed like any call."""

import json
import secrets

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.routes.models import Route
from apps.runtime.knowledge import scope as knowledge_scope
from apps.tools.models import Invocation, InvocationJournalEntry
from apps.tools.surface import route_surface
from tests.ledger.helpers import open_turn, post_json
from tests.runtime.knowledge_helpers import chunks_locked

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

URL = "/agent-api/v1/tool-invocations"


def _call(api_client, ksession, kroute, run_id, tool, arguments, invocation_id=None):
    revision = route_surface(route=kroute, session=ksession.session).revision
    return post_json(api_client, URL, {"invocation_id": invocation_id or secrets.token_hex(32), "route": kroute.key,
                                       "capability_revision": revision, "agent_run_id": run_id, "tool": tool,
                                       "arguments": arguments}, ksession.access_token)


def _ready(api_client, ksession, kroute):
    Route.objects.filter(pk=kroute.pk).update(tools_direct_enabled=True)
    kroute.refresh_from_db()
    return open_turn(api_client, ksession.access_token, kroute.key).json()["run_id"]


def test_kb_search_then_kb_read_in_process(api_client, ksession, kroute, docs):
    run_id = _ready(api_client, ksession, kroute)
    invocation_id = secrets.token_hex(32)
    found = _call(api_client, ksession, kroute, run_id, "kb_search", {"query": "退款"}, invocation_id).json()
    assert (found["state"], found["ok"], found["auto_retry_allowed"]) == ("executed", True, False)
    assert "business_status" not in found
    passages = json.loads(found["text"])
    assert (passages["schema_version"], passages["status"]) == ("bailing.kb-search.v1", "ok")
    first = passages["hits"][0]
    assert set(first) == {"ref", "title", "chapter_path", "content", "score", "truncated"}
    assert "退款" in first["content"]
    assert len(found["text"].encode()) <= 8192
    read = _call(api_client, ksession, kroute, run_id, "kb_read", {"ref": first["ref"]}).json()
    assert read["state"] == "executed"
    assert json.loads(read["text"])["schema_version"] == "bailing.agent-knowledge-read.v1"
    again = _call(api_client, ksession, kroute, run_id, "kb_search", {"query": "退款"}, invocation_id).json()
    assert again == found
    inv = Invocation.objects.get(invocation_id=invocation_id)
    assert (inv.provider_id, inv.journal_state, inv.frozen_arguments) == (None, "completed", "")
    assert list(InvocationJournalEntry.objects.filter(invocation=inv).values_list("state", flat=True)) == [
        "completed"]


def test_kb_search_leaves_out_a_document_turned_off(api_client, ksession, kroute, docs):
    from apps.knowledge.services import document_set_enabled

    run_id = _ready(api_client, ksession, kroute)

    def titles() -> set[str]:
        found = _call(api_client, ksession, kroute, run_id, "kb_search", {"query": "退款 配送"}).json()
        return {hit["title"] for hit in json.loads(found["text"])["hits"]}

    assert "退款.md" in titles()
    document_set_enabled(document=docs["退款.md"], enabled=False)
    remaining = titles()
    assert "退款.md" not in remaining and "配送.md" in remaining


def test_kb_read_of_a_foreign_reference_is_business_rejected(api_client, ksession, kroute, docs):
    run_id = _ready(api_client, ksession, kroute)
    body = _call(api_client, ksession, kroute, run_id, "kb_read", {"ref": "not-a-reference"}).json()
    assert (body["state"], body["ok"], body["business_status"]) == ("business_rejected", False, 400)
    assert json.loads(body["text"])["error"] == "knowledge_reference_invalid"


def test_kb_search_checks_its_input_schema(api_client, ksession, kroute, docs):
    run_id = _ready(api_client, ksession, kroute)
    body = _call(api_client, ksession, kroute, run_id, "kb_search", {"query": "退款", "limit": 99}).json()
    assert body["state"] == "rejected_before_dispatch"
    assert "limit:" in body["text"]
    # a blank query, which the knowledge search endpoint refuses too
    blank = _call(api_client, ksession, kroute, run_id, "kb_search", {"query": "   "}).json()
    assert blank["state"] == "rejected_before_dispatch" and "query:" in blank["text"]


def test_a_built_in_call_past_the_runs_max_tool_calls_is_refused_before_it_searches(api_client, ksession, kroute,
                                                                                    docs):
    run_id = _ready(api_client, ksession, kroute)
    Route.objects.filter(pk=kroute.pk).update(max_tool_calls=1)
    kroute.refresh_from_db()
    assert _call(api_client, ksession, kroute, run_id, "kb_search", {"query": "退款"}).json()["state"] == "executed"
    with CaptureQueriesContext(connection) as queries:
        body = _call(api_client, ksession, kroute, run_id, "kb_search", {"query": "退款"}).json()
    assert (body["state"], body["ok"], body["auto_retry_allowed"]) == ("rejected_before_dispatch", False, False)
    assert body["text"].startswith("This run has made its 1 tool call,")
    assert not [query for query in queries.captured_queries if "knowledge_chunk" in query["sql"]]
    assert Invocation.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_built_in_call_while_knowledge_is_unavailable_may_be_retried_and_keeps_nothing(api_client, ksession,
                                                                                          kroute, docs, monkeypatch):
    run_id = _ready(api_client, ksession, kroute)
    ref = json.loads(_call(api_client, ksession, kroute, run_id, "kb_search", {"query": "退款"}).json()["text"])[
        "hits"][0]["ref"]
    before = Invocation.objects.count()
    monkeypatch.setattr(knowledge_scope, "LOCK_TIMEOUT_MS", 100)
    invocation_id = secrets.token_hex(32)
    with chunks_locked():
        body = _call(api_client, ksession, kroute, run_id, "kb_read", {"ref": ref}, invocation_id).json()
    assert (body["state"], body["ok"], body["auto_retry_allowed"]) == ("rejected_before_dispatch", False, True)
    # retry_after_ms and rate_limit belong to a tool's own rate limit only (the contract's words).
    assert "retry_after_ms" not in body and "rate_limit" not in body
    assert body["text"].endswith("Retry this same invocation in a few seconds.")
    assert Invocation.objects.count() == before
    again = _call(api_client, ksession, kroute, run_id, "kb_read", {"ref": ref}, invocation_id).json()
    assert again["state"] == "executed"
