"""The optional reranker over a KB's fused candidates, against a real HTTP rerank API."""

import json

import pytest

from apps.knowledge import errors as kb_errors
from apps.knowledge import selectors, services
from apps.knowledge.models import Chunk, CostRecord, KnowledgeBase
from apps.knowledge.pipeline.retrieve import SearchOptions, search
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.knowledge.rerankers import RerankEndpoint
from tests.local_server import HANDLED_WAIT_SECONDS
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db

CORPUS = {
    "refund.md": "# 退款\n\n退款在七天内处理，质量问题可以退款。",
    "shipping.md": "# 配送\n\n配送需要三天，偏远地区五天。",
    "invoice.md": "# 发票\n\n发票在退款完成后作废，重新开具需要七天。",
    "warranty.md": "# 保修\n\n保修期一年，质量问题免费维修。",
}
QUERY = "质量问题退款要几天"
OPTIONS = dict(mode="hybrid", top_k=10, rollup=False)


@pytest.fixture(autouse=True)
def local_rerankers(settings):
    """The endpoints here listen on 127.0.0.1, an address outside the public internet: allowed as a
    deployment allows a reranker in its own network. Tests of the refusal empty it."""
    settings.KNOWLEDGE_RERANK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    return settings


@pytest.fixture
def kb():
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, CORPUS)
    return kb


def _configure(kb, url, **extra):
    return services.knowledge_base_update(kb=kb, reranker={"base_url": url, "model": "bge-reranker-v2-m3",
                                                           "candidates": 20, "timeout_ms": 2000, **extra})


def _fused(kb) -> list:
    return [hit.chunk_id for hit in search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS,
                                                                                       rerank=False)).hits]


def test_the_reranker_reorders_the_fused_candidates(kb):
    with RerankEndpoint() as endpoint:
        kb = _configure(kb, endpoint.url)
        fused = _fused(kb)
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert [hit.chunk_id for hit in result.hits] == list(reversed(fused))
    assert result.trace[0]["status"] == "ok" and result.trace[0]["fallback"] is None


def test_the_rerank_request_has_the_common_shape(kb):
    with RerankEndpoint() as endpoint:
        kb = _configure(kb, endpoint.url)
        fused = _fused(kb)
        search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    [request] = endpoint.requests
    assert request["path"] == "/v1/rerank"
    assert set(request) == {"path", "model", "query", "documents", "top_n"}
    assert request["model"] == "bge-reranker-v2-m3" and request["query"] == QUERY
    assert request["top_n"] == len(fused) == len(request["documents"])
    chunks = {c.pk: c for c in Chunk.objects.filter(pk__in=fused)}
    assert request["documents"] == [f"{chunks[cid].chapter_path}\n{chunks[cid].text}" for cid in fused]


def test_each_rerank_call_writes_a_cost_record_with_the_route(kb):
    route = RouteFactory(project=kb.project, knowledge_enabled=True)
    services.route_knowledge_bind(route=route, knowledge_base=kb)
    with RerankEndpoint() as endpoint:
        _configure(kb, endpoint.url)
        selectors.route_knowledge_search(route=route, query=QUERY)
    [record] = CostRecord.objects.all()
    assert (record.call_kind, record.knowledge_base_id, record.route_id) == ("rerank", kb.pk, route.pk)
    assert record.units == len(endpoint.requests[0]["documents"])
    assert record.usage == {"total_tokens": 7 * record.units}
    assert record.ok is True and record.error_code == "" and record.model == "bge-reranker-v2-m3"
    assert record.latency_ms >= 0


def test_the_key_is_sent_from_the_named_environment_variable(kb, monkeypatch):
    monkeypatch.setenv("RERANK_TEST_KEY", "rk-secret-123")
    with RerankEndpoint() as endpoint:
        kb = _configure(kb, endpoint.url, api_key_env="RERANK_TEST_KEY")
        search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert endpoint.headers[0]["Authorization"] == "Bearer rk-secret-123"


def test_a_failing_reranker_falls_back_to_the_fused_order_and_says_so(kb):
    with RerankEndpoint(status=500) as endpoint:
        kb = _configure(kb, endpoint.url)
        fused = _fused(kb)
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert [hit.chunk_id for hit in result.hits] == fused
    step = result.trace[0]
    assert (step["step"], step["status"], step["error_code"], step["fallback"]) == (
        "rerank", "failed", "rerank_http_error", "fused_order")
    assert CostRecord.objects.get().error_code == "rerank_http_error"


def test_a_slow_reranker_times_out_and_falls_back(kb):
    with RerankEndpoint(delay=1.0) as endpoint:
        kb = _configure(kb, endpoint.url, timeout_ms=200)
        fused = _fused(kb)
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert [hit.chunk_id for hit in result.hits] == fused
    assert result.trace[0]["error_code"] == "rerank_timeout"  # it answers, later: the search did not wait for it


def test_a_reranker_trickling_its_answer_times_out_at_the_deadline(kb):
    """Each byte within the timeout, the whole far over it: the search waited for all of it before
    it fell back."""
    from tests.local_server import TricklingServer

    body = json.dumps({"results": []}).encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    # The headers trickled, the body at once with their last byte: read whole without the deadline.
    with TricklingServer(answer, tail=answer.index(b"{")) as endpoint:
        # The headers take 2.5 s (71 bytes 35 ms apart). A timeout of 300 ms ran out on a loaded machine
        # before the search had connected: the endpoint never saw the request.
        kb = _configure(kb, f"http://127.0.0.1:{endpoint.port}/v1", timeout_ms=1200)
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
        assert endpoint.handled.wait(HANDLED_WAIT_SECONDS)
    assert result.trace[0]["error_code"] == "rerank_timeout"
    assert endpoint.outcomes == ["cut"]


def test_an_answer_nested_past_the_parsers_stack_falls_back(kb):
    """json's RecursionError escaped the reranker's handling: the search was a 500."""
    with RerankEndpoint(body=b"[" * 100_000) as endpoint:
        kb = _configure(kb, endpoint.url)
        fused = _fused(kb)
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert [hit.chunk_id for hit in result.hits] == fused
    assert result.trace[0]["error_code"] == "rerank_bad_response"


def test_a_malformed_answer_falls_back(kb):
    body = json.dumps({"results": [{"index": 99, "relevance_score": 1.0}]}).encode()
    with RerankEndpoint(body=body) as endpoint:
        kb = _configure(kb, endpoint.url)
        fused = _fused(kb)
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert [hit.chunk_id for hit in result.hits] == fused
    assert result.trace[0]["error_code"] == "rerank_bad_response"


def test_a_missing_key_falls_back_without_calling(kb, monkeypatch):
    monkeypatch.delenv("RERANK_TEST_ABSENT", raising=False)
    with RerankEndpoint() as endpoint:
        kb = _configure(kb, endpoint.url, api_key_env="RERANK_TEST_ABSENT")
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert endpoint.requests == []
    assert result.trace[0]["error_code"] == "rerank_key_missing"
    assert "RERANK_TEST_ABSENT" in result.trace[0]["message"]


def test_the_debug_search_shows_the_fallback(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    ingest_texts(kb, CORPUS)
    with RerankEndpoint(status=503) as endpoint:
        _configure(kb, endpoint.url)
        response = client.post(f"/api/v1/builder/knowledge-bases/{kb.pk}/search",
                               {"query": QUERY, "hybrid": True}, format="json")
    assert response.status_code == 200
    [step] = response.json()["data"]["trace"]
    assert (step["status"], step["fallback"], step["error_code"]) == ("failed", "fused_order", "rerank_http_error")
    assert response.json()["data"]["hits"]


def _superuser(membership):
    membership.user.is_superuser = True
    membership.user.save(update_fields=["is_superuser"])


def test_the_builder_api_configures_a_reranker_and_never_shows_a_key(client, owner, monkeypatch):
    monkeypatch.setenv("RERANK_TEST_KEY", "rk-secret-123")
    _superuser(owner)  # a key variable is the deployment's: a superuser names it
    kb = KnowledgeBaseFactory(project=owner.project)
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"reranker": {
        "base_url": "https://rerank.example.com/v1/", "model": "m", "api_key_env": "RERANK_TEST_KEY"}},
        format="json")
    assert response.status_code == 200
    assert response.json()["data"]["reranker"] == {"base_url": "https://rerank.example.com/v1", "model": "m",
                                                   "api_key_env": "RERANK_TEST_KEY", "candidates": 20,
                                                   "timeout_ms": 3000}
    assert "rk-secret-123" not in response.content.decode()


KEYED = {"base_url": "https://rerank.example.com/v1", "model": "m", "api_key_env": "RERANK_TEST_KEY"}


@pytest.mark.parametrize("setting", [KEYED, {**KEYED, "base_url": "https://attacker.example/v1"}])
def test_a_project_owner_cannot_send_a_deployment_key_to_a_base_url_of_their_choosing(client, owner, setting):
    """Any RERANK_ variable was taken from any operator who may edit a KB: pointed at a host of
    their own, a search sent the deployment's key there."""
    kb = KnowledgeBaseFactory(project=owner.project)
    if setting["base_url"] != KEYED["base_url"]:  # a keyed reranker a superuser set, pointed elsewhere
        services.knowledge_base_update(kb=kb, reranker=KEYED)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"reranker": setting}, format="json")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_knowledge_base"
    assert "superuser" in response.json()["fields"]["reranker.api_key_env"][0]
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before


def test_a_project_owner_keeps_a_superusers_keyed_reranker_while_changing_the_rest(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    services.knowledge_base_update(kb=kb, reranker=KEYED)
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"reranker": {**KEYED, "candidates": 5},
                                                                         "name": "renamed"}, format="json")
    assert response.status_code == 200
    kb.refresh_from_db()
    assert (kb.name, kb.rerank_api_key_env, kb.rerank_candidates) == ("renamed", "RERANK_TEST_KEY", 5)


def test_a_null_reranker_turns_it_off(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    _configure(kb, "https://rerank.example.com/v1")
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"reranker": None}, format="json")
    assert response.json()["data"]["reranker"] is None
    assert KnowledgeBase.objects.get(pk=kb.pk).rerank_base_url == ""


@pytest.mark.parametrize(("reranker", "field"), [
    ({"base_url": "ftp://rerank.example.com", "model": "m"}, "reranker.base_url"),
    ({"base_url": "https://user:pw@rerank.example.com", "model": "m"}, "reranker.base_url"),
    ({"base_url": "https://rerank.example.com", "model": ""}, "reranker.model"),
    ({"base_url": "https://rerank.example.com", "model": "m", "api_key_env": "sk-live-abc"}, "reranker.api_key_env"),
    ({"base_url": "https://rerank.example.com", "model": "m", "timeout_ms": 60000}, "reranker.timeout_ms"),
    ({"base_url": "https://rerank.example.com", "model": "m", "candidates": 0}, "reranker.candidates"),
    ({"base_url": "https://rerank.example.com", "model": "m", "api_key": "sk"}, "reranker.api_key"),
    ("https://rerank.example.com", "reranker"),
    # PostgreSQL refuses NUL in text: these were saved and answered 500.
    ({"base_url": "https://rerank\u0000.example.com", "model": "m"}, "reranker.base_url"),
    ({"base_url": "https://rerank.example.com", "model": "m\u0000"}, "reranker.model"),
])
def test_a_bad_reranker_config_is_422_and_changes_nothing(client, owner, reranker, field):
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"reranker": reranker}, format="json")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_knowledge_base"
    assert field in response.json()["fields"]
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before


def _admin_post(owner, kb, **fields):
    """The KB's console page posted by `owner`: its settings as they are, a keyless reranker at
    rerank.example.com, and `fields` over them."""
    from django.test import Client

    browser = Client()
    browser.force_login(owner.user)
    return browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/change/", {
        "name": kb.name, "description": "", "strategy": "auto", "min_chars": "0", "max_chars": "200",
        "overlap_chars": "0", "fusion": "rrf", "rerank_base_url": "https://rerank.example.com/v1",
        "rerank_model": "m", "rerank_api_key_env": "", "rerank_candidates": "20", "rerank_timeout_ms": "3000",
        "generations-TOTAL_FORMS": "0", "generations-INITIAL_FORMS": "0",
        "route_bindings-TOTAL_FORMS": "0", "route_bindings-INITIAL_FORMS": "0", **fields,
    })


def _key_field(response) -> str:
    """The key variable's row of the page, its errors included."""
    return response.content.decode().split("field-rerank_api_key_env", 1)[1].split("</div>\n", 2)[0]


def test_the_admin_form_shows_a_bad_reranker_setting_beside_its_field(owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = _admin_post(owner, kb, rerank_api_key_env="sk-live-abc")
    assert response.status_code == 200
    field = _key_field(response)
    assert "errorlist" in field and "environment variable" in field
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before


def test_the_admin_form_says_every_wrong_field_at_once_strategy_and_reranker(owner):
    # The reranker's URL was checked only once the chunk sizes were right: a second submit.
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = _admin_post(owner, kb, max_chars="99999", overlap_chars="-5", rerank_base_url="not a url")
    errors = response.context["adminform"].form.errors
    assert {"max_chars", "overlap_chars", "rerank_base_url"} <= set(errors)
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before


def test_the_admin_form_refuses_a_name_that_reads_as_another_kbs(owner):
    # The console's KB form shares the builder API's rule (apps.core.names).
    KnowledgeBaseFactory(project=owner.project, name="Audit Dup")
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = _admin_post(owner, kb, name="audit\u00a0DUP")
    assert response.context["adminform"].form.errors["name"] == [kb_errors.KnowledgeBaseNameTaken.message]
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before
    # A lookalike saved before the rule keeps its name through an edit of something else.
    KnowledgeBase.objects.filter(pk=kb.pk).update(name="AUDIT DUP")
    assert _admin_post(owner, kb, name="AUDIT DUP", description="kept").status_code == 302


def test_the_admin_form_refuses_a_key_variable_without_a_reranker(owner):
    """Typed without a base URL and model, the variable's name was saved as no reranker: dropped
    without a word."""
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = _admin_post(owner, kb, name="renamed", rerank_base_url="", rerank_model="",
                           rerank_api_key_env="RERANK_API_KEY")
    assert response.status_code == 200
    field = _key_field(response)
    assert "errorlist" in field and "base URL and model" in field
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before


def test_the_admin_form_turns_a_keyed_reranker_off_when_its_base_url_and_model_are_cleared(owner):
    """The key variable's box shows the saved name: "leave empty for no reranker" (the base URL's
    help) was refused beside the key, which the operator had not typed."""
    kb = _configure(KnowledgeBaseFactory(project=owner.project), "https://rerank.example.com/v1",
                    api_key_env="RERANK_API_KEY")
    response = _admin_post(owner, kb, rerank_base_url="", rerank_model="", rerank_api_key_env="RERANK_API_KEY",
                           rerank_timeout_ms="2000")
    assert response.status_code == 302, response.content.decode()[:3000]
    kb.refresh_from_db()
    assert (kb.rerank_base_url, kb.rerank_model, kb.rerank_api_key_env) == ("", "", "")


def test_the_admin_form_sets_fusion_and_a_reranker(owner):
    _superuser(owner)  # a key variable is the deployment's: a superuser names it
    kb = KnowledgeBaseFactory(project=owner.project)
    response = _admin_post(owner, kb, rerank_api_key_env="RERANK_KEY", rerank_candidates="30",
                           rerank_timeout_ms="2500")
    assert response.status_code == 302, response.content.decode()[:3000]
    kb.refresh_from_db()
    assert (kb.fusion, kb.rerank_base_url, kb.rerank_model, kb.rerank_api_key_env, kb.rerank_candidates,
            kb.rerank_timeout_ms) == ("rrf", "https://rerank.example.com/v1", "m", "RERANK_KEY", 30, 2500)


def test_the_admin_form_refuses_a_key_variable_from_a_project_owner(owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = _admin_post(owner, kb, rerank_base_url="https://attacker.example/v1", rerank_api_key_env="RERANK_KEY")
    assert response.status_code == 200
    field = _key_field(response)
    assert "errorlist" in field and "Only a superuser may name a key variable" in field
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before


def test_operators_see_their_projects_cost_records_only(owner):
    from django.test import Client

    mine = KnowledgeBaseFactory(project=owner.project)
    other = KnowledgeBaseFactory(embedding_model=mine.embedding_model)
    CostRecord.objects.create(call_kind="rerank", knowledge_base=mine, model="mine-model", units=3)
    CostRecord.objects.create(call_kind="rerank", knowledge_base=other, model="other-model", units=5)
    browser = Client()
    browser.force_login(owner.user)
    page = browser.get("/admin/knowledge/costrecord/").content.decode()
    assert "mine-model" in page and "other-model" not in page


def test_the_cost_record_list_reads_its_newest_page_by_an_index():
    """The console's list is newest first: read in an index's order, a page stops at its last row
    rather than sorting every record (57 ms at 50,000). Sorting is made dearer than any index here,
    so the plan sorts only when no index gives that order."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")
    plan = CostRecord.objects.order_by(*CostRecord._meta.ordering)[:100].explain()
    assert "Sort" not in plan


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "TOOL_SECRET_KEYS", "BAILING_DEMO_PASSWORD",
                                  "RERANK_", "rerank_key", "X_RERANK_KEY"])
def test_a_reranker_may_name_only_a_rerank_variable_for_its_key(client, owner, name):
    """Any variable name was taken, so a project's operator could have the server's SECRET_KEY or
    database URL sent as a bearer token to a base URL of their own."""
    kb = KnowledgeBaseFactory(project=owner.project)
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"reranker": {
        "base_url": "https://rerank.example.com/v1/", "model": "m", "api_key_env": name}}, format="json")
    assert response.status_code == 422
    assert "RERANK_" in json.dumps(response.json())
    kb.refresh_from_db()
    assert (kb.rerank_base_url, kb.rerank_api_key_env) == ("", "")


def test_a_key_variable_saved_before_the_rule_is_never_read(kb, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "the-servers-own-secret")
    with RerankEndpoint() as endpoint:
        kb = _configure(kb, endpoint.url)
        KnowledgeBase.objects.filter(pk=kb.pk).update(rerank_api_key_env="SECRET_KEY")
        kb.refresh_from_db()
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert endpoint.requests == [] and endpoint.headers == []
    assert result.trace[0]["error_code"] == "rerank_key_refused"
    assert "the-servers-own-secret" not in json.dumps(result.trace)


# --- Where a reranker may be: the public internet, or a network the deployment allows ---------------


@pytest.mark.parametrize("base_url", [
    "http://127.0.0.1:8080/v1", "http://localhost:8080/v1", "http://10.0.0.5/v1", "http://169.254.169.254/v1",
    "http://[::1]:8080/v1", "http://[::ffff:127.0.0.1]/v1", "http://100.64.0.1/v1", "http://0.0.0.0/v1",
])
def test_a_reranker_at_an_address_outside_the_public_internet_is_refused_when_saved(client, owner, local_rerankers,
                                                                                  base_url):
    """Any operator who could edit a KB pointed its reranker at the hub's own network, and each search
    reported the HTTP status an internal service answered (a port scan by trace)."""
    local_rerankers.KNOWLEDGE_RERANK_ALLOWED_NETWORKS = []
    _superuser(owner)  # not a question of who: the deployment decides where rerankers may be
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"reranker": {
        "base_url": base_url, "model": "m"}}, format="json")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_knowledge_base"
    assert "KNOWLEDGE_RERANK_ALLOWED_NETWORKS" in response.json()["fields"]["reranker.base_url"][0]
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before


def test_a_network_the_deployment_allows_takes_a_reranker(client, owner, local_rerankers):
    local_rerankers.KNOWLEDGE_RERANK_ALLOWED_NETWORKS = ["10.2.0.0/16"]
    kb = KnowledgeBaseFactory(project=owner.project)
    response = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"reranker": {
        "base_url": "http://10.2.7.1:9000/v1", "model": "m"}}, format="json")
    assert response.status_code == 200
    assert KnowledgeBase.objects.get(pk=kb.pk).rerank_base_url == "http://10.2.7.1:9000/v1"
    refused = client.patch(f"/api/v1/builder/knowledge-bases/{kb.pk}", {"reranker": {
        "base_url": "http://10.3.7.1:9000/v1", "model": "m"}}, format="json")
    assert (refused.status_code, list(refused.json()["fields"])) == (422, ["reranker.base_url"])


def test_a_search_does_not_call_a_reranker_whose_host_resolves_outside_the_allowed_networks(kb, local_rerankers):
    """Checked when saved, and again when called: the host's address may have changed since (DNS),
    or the deployment's networks."""
    with RerankEndpoint() as endpoint:
        kb = _configure(kb, endpoint.url.replace("127.0.0.1", "localhost"))
        fused = _fused(kb)
        local_rerankers.KNOWLEDGE_RERANK_ALLOWED_NETWORKS = ["10.0.0.0/8"]
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert [hit.chunk_id for hit in result.hits] == fused
    assert (result.trace[0]["status"], result.trace[0]["error_code"]) == ("failed", "rerank_address_refused")
    assert endpoint.requests == []
    assert CostRecord.objects.get(call_kind="rerank").error_code == "rerank_address_refused"


def test_the_reranker_is_called_at_the_address_checked_with_its_own_host_name(kb, monkeypatch):
    """The connection goes to the address that was checked, not to a second DNS answer (rebinding):
    a name only the check can resolve is reached, and the reranker sees its own host name."""
    from apps.core import outbound

    checked = outbound.host_resolve

    def resolve(host, port, policy):
        return checked("127.0.0.1" if host == "reranker.invalid" else host, port, policy)

    monkeypatch.setattr(outbound, "host_resolve", resolve)
    with RerankEndpoint() as endpoint:
        url = endpoint.url.replace("127.0.0.1", "reranker.invalid")
        kb = _configure(kb, url)
        result = search(kbs=[kb], query=QUERY, options=SearchOptions(**OPTIONS))
    assert (result.trace[0]["status"], len(endpoint.requests)) == ("ok", 1)
    assert endpoint.headers[0]["Host"] == url.split("/")[2]


def test_the_admin_form_refuses_a_reranker_in_the_hubs_own_network_beside_its_field(owner, local_rerankers):
    local_rerankers.KNOWLEDGE_RERANK_ALLOWED_NETWORKS = []
    kb = KnowledgeBaseFactory(project=owner.project)
    before = KnowledgeBase.objects.values().get(pk=kb.pk)
    response = _admin_post(owner, kb, rerank_base_url="http://169.254.169.254/latest")
    assert response.status_code == 200
    field = response.content.decode().split("field-rerank_base_url", 1)[1].split("</div>\n", 2)[0]
    assert "errorlist" in field and "KNOWLEDGE_RERANK_ALLOWED_NETWORKS" in field
    assert KnowledgeBase.objects.values().get(pk=kb.pk) == before


@pytest.mark.parametrize("name", ["KNOWLEDGE_URL_ALLOWED_NETWORKS", "KNOWLEDGE_RERANK_ALLOWED_NETWORKS"])
def test_a_setting_of_allowed_networks_that_is_not_one_stops_the_boot_naming_it(settings, name):
    from django.apps import apps
    from django.core.exceptions import ImproperlyConfigured

    setattr(settings, name, ["10.0.0.0/8", "intranet"])
    with pytest.raises(ImproperlyConfigured, match=f"{name}: 'intranet' is not a network"):
        apps.get_app_config("knowledge")._allowed_networks_check()
