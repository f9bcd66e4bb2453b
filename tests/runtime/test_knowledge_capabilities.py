import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.knowledge import services
from apps.routes.services import route_update
from apps.runtime.knowledge import knowledge_scope_get
from tests.agent_auth.helpers import bearer
from tests.runtime.knowledge_helpers import capabilities_url, get_capabilities, row_counts

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

HEX64 = re.compile(r"^[0-9a-f]{64}$")
LIMITS = {"search_max_results": 3, "search_max_bytes": 4096, "read_default_bytes": 16384, "read_max_bytes": 32768,
          "reference_ttl_seconds": 300, "read_chain_max_bytes": 131072}


def test_capabilities_answer_the_protocol_and_its_fixed_limits(api_client, ksession, kroute, kb):
    response = get_capabilities(api_client, ksession.access_token, kroute.key)
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert response.json() == {
        "schema_version": "bailing.agent-knowledge-capabilities.v1",
        "protocol": "bailing.agent-knowledge.v1",
        "supported": True,
        "route": "policy-desk",
        "enabled": True,
        "knowledge_scope_revision": knowledge_scope_get(route=kroute).revision,
        "delivery_modes": ["inline", "on_demand"],
        "limits": LIMITS,
    }
    assert HEX64.match(response.json()["knowledge_scope_revision"])


def test_knowledge_does_not_need_direct_business_tools(api_client, ksession, kroute, kb):
    assert kroute.tools_direct_enabled is False
    assert get_capabilities(api_client, ksession.access_token, kroute.key).json()["enabled"] is True


def test_capabilities_are_disabled_when_the_route_reads_no_knowledge(api_client, ksession, kroute, kb):
    route_update(route=kroute, knowledge_enabled=False)
    body = get_capabilities(api_client, ksession.access_token, kroute.key).json()
    assert (body["supported"], body["enabled"]) == (True, False)


def test_capabilities_are_disabled_without_a_bound_knowledge_base(api_client, ksession, kroute):
    body = get_capabilities(api_client, ksession.access_token, kroute.key).json()
    assert (body["supported"], body["enabled"]) == (True, False)


def test_capabilities_are_disabled_when_no_source_has_a_configured_embedder(api_client, ksession, kroute, kb,
                                                                           settings):
    settings.KNOWLEDGE_EMBEDDERS = {key: path for key, path in settings.KNOWLEDGE_EMBEDDERS.items()
                                    if key != "hashing"}
    assert get_capabilities(api_client, ksession.access_token, kroute.key).json()["enabled"] is False


def test_capabilities_need_the_runtime_switch(api_client, ksession, kroute, kb):
    route_update(route=kroute, agent_client_enabled=False)
    response = get_capabilities(api_client, ksession.access_token, kroute.key)
    assert (response.status_code, response.json()["error"]) == (403, "agent_client_disabled")


def test_capabilities_need_the_agent_bearer(api_client, kroute, kb):
    response = api_client.get(capabilities_url(kroute.key))
    assert (response.status_code, response.json()["error"]) == (401, "unauthorized")
    assert response["Cache-Control"] == "no-store"


def test_capabilities_of_a_route_outside_the_grant_are_unavailable(api_client, ksession, project, kb):
    response = get_capabilities(api_client, ksession.access_token, "not-granted")
    assert (response.status_code, response.json()["error"]) == (404, "route_unavailable")


def test_the_scope_revision_follows_every_part_of_the_knowledge_configuration(kroute, kb):
    seen = {knowledge_scope_get(route=kroute).revision}
    route_update(route=kroute, knowledge_score_threshold=0.3)
    seen.add(knowledge_scope_get(route=kroute).revision)
    route_update(route=kroute, knowledge_top_k=7)
    seen.add(knowledge_scope_get(route=kroute).revision)
    services.knowledge_base_rebuild(kb=kb)  # a building generation is not yet the scope
    assert knowledge_scope_get(route=kroute).revision in seen
    services.route_knowledge_unbind(route=kroute, knowledge_base=kb)
    seen.add(knowledge_scope_get(route=kroute).revision)
    assert len(seen) == 4


def test_capabilities_read_the_scope_in_one_query(api_client, ksession, kroute, kb, django_assert_num_queries):
    api_client.get(capabilities_url(kroute.key), **bearer(ksession.access_token))  # warm the session
    # session, route, scope; the scope is read in a savepoint with its wait limits (3 statements)
    with django_assert_num_queries(6):
        get_capabilities(api_client, ksession.access_token, kroute.key)


def test_an_indent_in_accept_does_not_change_the_bytes(api_client, ksession, kroute, kb):
    plain = get_capabilities(api_client, ksession.access_token, kroute.key)
    indented = get_capabilities(api_client, ksession.access_token, kroute.key, HTTP_ACCEPT="application/json; indent=4")
    assert indented.content == plain.content
    assert b"\n" not in plain.content


def test_capabilities_write_nothing(api_client, ksession, kroute, kb):
    get_capabilities(api_client, ksession.access_token, kroute.key)  # warm the session
    before = row_counts()
    with CaptureQueriesContext(connection) as queries:
        response = get_capabilities(api_client, ksession.access_token, kroute.key)
    assert response.json()["enabled"] is True
    writes = [q["sql"] for q in queries.captured_queries
              if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]
    assert writes == []
    assert row_counts() == before
