import re

import pytest

from apps.agent_auth.models import AgentSession
from apps.core.revisions import revision_of
from apps.routes.models import AGENT_INSTRUCTIONS_MAX_CHARS, SYSTEM_PROMPT_MAX_CHARS
from apps.routes.services import route_update
from apps.tools.surface import route_surface
from tests.agent_auth.helpers import PRINCIPAL, bearer, session_for
from tests.routes.factories import RouteFactory

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _system_info(api_client, issued, key="store-assistant"):
    return api_client.get(f"/agent-api/v1/workspaces/{key}/system-info", **bearer(issued.access_token))


def _bootstrap(api_client, issued, key="store-assistant", **headers):
    return api_client.get(f"/agent-api/v1/workspaces/{key}/bootstrap", **bearer(issued.access_token), **headers)


def _refused(response, status, error):
    assert response.status_code == status
    assert response.json()["error"] == error
    assert response["Cache-Control"] == "no-store"


# System info


def test_system_info_of_a_configured_route(api_client, agent_client, issued):
    response = _system_info(api_client, issued)
    assert response.status_code == 200
    system = {"name": "百灵门店系统", "summary": "订单、库存与售后。", "domains": ["订单查询", "库存"],
              "boundaries": ["不处理线上订单"]}
    assert response.json() == {
        "schema_version": "bailing.agent-system-info.v1",
        "binding": {"client_app_id": agent_client.app_id, "session_id": str(issued.session.pk),
                    "workspace": "store-assistant"},
        "metadata_status": "configured",
        "revision": revision_of(system),
        "system": system,
        "tool_status": "not_loaded",
        "availability": "unknown",
    }
    assert HEX64.match(response.json()["revision"])
    assert response["Cache-Control"] == "no-store"


def test_system_info_of_a_route_without_metadata(api_client, issued):
    response = _system_info(api_client, issued, "hr-helpdesk")
    body = response.json()
    assert response.status_code == 200
    assert (body["metadata_status"], body["revision"], body["system"]) == ("missing", None, None)


def test_system_info_does_not_need_the_runtime_switch(api_client, issued, route):
    route_update(route=route, agent_client_enabled=False)
    body = _system_info(api_client, issued).json()
    assert (body["availability"], body["unavailable_reason"]) == ("unavailable", "agent_client_disabled")
    assert body["metadata_status"] == "configured"


def test_system_info_does_not_need_direct_tools(api_client, issued, route):
    route_update(route=route, tools_direct_enabled=False)
    body = _system_info(api_client, issued).json()
    assert (body["availability"], body["unavailable_reason"]) == ("unavailable", "agent_direct_disabled")


def test_system_info_revision_follows_the_metadata(api_client, issued, route):
    before = _system_info(api_client, issued).json()["revision"]
    route_update(route=route, system_info_summary="订单与库存。")
    assert _system_info(api_client, issued).json()["revision"] != before


# Bootstrap


def test_bootstrap_is_the_runtime_profile(api_client, issued, route):
    response = _bootstrap(api_client, issued)
    assert response.status_code == 200
    body = response.json()
    assert list(body) == ["schema_version", "workspace", "profile", "capabilities", "active_tools"]
    assert body["schema_version"] == "bailing.agent-runtime-profile.v1"
    assert body["workspace"] == {"route": "store-assistant", "name": "门店助手", "description": "门店店员助手。"}
    profile = body["profile"]
    assert set(profile) == {"revision", "instructions", "memory", "knowledge", "governance"}
    assert HEX64.match(profile["revision"])
    assert profile["instructions"] == (
        "【路由系统规则】\n你是门店助手。\n\n【本地 Agent 补充规则】\n只在店员要求时调用写工具。"
    )
    assert profile["memory"] == {"recent_messages": 12, "recent_budget_chars": 8000, "per_message_chars": 2000,
                                 "summary_enabled": False, "summary_max_chars": 1200}
    assert profile["knowledge"] == {"enabled": False, "sources": 0, "mode": "chunk", "top_k": 5, "max_docs": 4,
                                    "page_boost": False}
    assert profile["governance"] == {
        "planner": "local_agent", "execution": "bailinghub_governed", "authorization": "server_revalidated",
        "knowledge_trust": "reference_only", "tool_results_trust": "untrusted_data",
        "hidden_reasoning_sync": False, "max_tool_calls": 5, "permission": "full",
    }
    assert body["capabilities"] == {"revision": route_surface(route=route, session=issued.session).revision,
                                    "authorized_total": 0, "active_limit": 8,
                                    "readonly": 0, "writes": 0, "approval_required": 0}
    assert body["active_tools"] == []
    assert response["ETag"] == f'"{revision_of(body)}"'


def test_bootstrap_instructions_stay_within_100000_characters_at_the_longest_settings(api_client, issued, route):
    # The wire rule (contracts-beyond-seeds §6): bootstrap `instructions` ≤100,000 characters. The
    # route's two texts at their limits, with their section markers, stay under it.
    route.system_prompt = "令" * SYSTEM_PROMPT_MAX_CHARS
    route.agent_client_instructions = "示" * AGENT_INSTRUCTIONS_MAX_CHARS
    route.full_clean()
    route.save()
    instructions = _bootstrap(api_client, issued).json()["profile"]["instructions"]
    assert instructions.count("令") == SYSTEM_PROMPT_MAX_CHARS
    assert instructions.count("示") == AGENT_INSTRUCTIONS_MAX_CHARS
    assert len(instructions) <= 100_000


def test_bootstrap_never_carries_credentials_or_models(api_client, issued, route):
    text = _bootstrap(api_client, issued).content.decode()
    for word in ("credential", "model", "target_config", "base_url", "secret", "bha_", "bhr_", "bhk_"):
        assert word not in text


def test_bootstrap_answers_304_to_its_etag(api_client, issued):
    etag = _bootstrap(api_client, issued)["ETag"]
    response = _bootstrap(api_client, issued, HTTP_IF_NONE_MATCH=etag)
    assert response.status_code == 304
    assert response.content == b""
    assert response["Cache-Control"] == "no-store"


def test_bootstrap_answers_304_to_a_weak_or_listed_etag(api_client, issued):
    etag = _bootstrap(api_client, issued)["ETag"]
    assert _bootstrap(api_client, issued, HTTP_IF_NONE_MATCH=f'"other", W/{etag}').status_code == 304


def test_an_indent_in_accept_changes_neither_the_bytes_nor_the_etag(api_client, issued):
    plain = _bootstrap(api_client, issued)
    indented = _bootstrap(api_client, issued, HTTP_ACCEPT="application/json; indent=8")
    assert indented.content == plain.content
    assert indented["ETag"] == plain["ETag"]


def test_a_changed_prompt_changes_revision_and_etag(api_client, issued, route):
    first = _bootstrap(api_client, issued)
    route_update(route=route, system_prompt="你是新的门店助手。")
    second = _bootstrap(api_client, issued, HTTP_IF_NONE_MATCH=first["ETag"])
    assert second.status_code == 200
    assert second.json()["profile"]["revision"] != first.json()["profile"]["revision"]


def test_bootstrap_needs_the_runtime_switch(api_client, issued, route):
    route_update(route=route, agent_client_enabled=False)
    _refused(_bootstrap(api_client, issued), 403, "agent_client_disabled")


def test_bootstrap_takes_three_queries(api_client, issued, django_assert_num_queries):
    # session (with client) + route + knowledge bindings count + tool sources (+ their tools, when any)
    with django_assert_num_queries(4):
        _bootstrap(api_client, issued)


# Route errors, shared by every /workspaces/:route/... endpoint


@pytest.fixture(params=["system-info", "bootstrap"])
def endpoint(request):
    return request.param


def _get(api_client, issued, key, endpoint):
    return api_client.get(f"/agent-api/v1/workspaces/{key}/{endpoint}", **bearer(issued.access_token))


@pytest.mark.parametrize("key", ["auto", "Store", "a", "-store", "x" * 65, "store.assistant", "%2A"])
def test_a_malformed_route_key_is_400_invalid_route(api_client, issued, endpoint, key):
    _refused(_get(api_client, issued, key, endpoint), 400, "invalid_route")


def test_a_route_not_granted_to_the_session_is_404(api_client, agent_client, endpoint):
    issued = session_for(agent_client, granted=["hr-helpdesk"])
    response = _get(api_client, issued, "store-assistant", endpoint)
    _refused(response, 404, "route_unavailable")
    # what to do, without saying which of outside the grant, disabled or missing it is
    assert response.json()["message"] == (
        "This route is not available to this session: GET /agent-api/v1/workspaces lists the ones it may use; "
        "for another, sign in again asking for it (an operator must allow it for the client).")


def test_a_nonexistent_route_looks_like_an_ungranted_one(api_client, issued, endpoint):
    missing = _get(api_client, issued, "no-such-route", endpoint)
    other_project = RouteFactory(key="elsewhere")
    ungranted = _get(api_client, issued, other_project.key, endpoint)
    assert missing.status_code == ungranted.status_code == 404
    assert missing.json() == ungranted.json()


def test_a_route_removed_from_the_client_allowlist_is_404(api_client, agent_client, issued, endpoint):
    agent_client.allowed_routes = ["hr-helpdesk"]
    agent_client.save()
    _refused(_get(api_client, issued, "store-assistant", endpoint), 404, "route_unavailable")


def test_a_disabled_route_is_404(api_client, issued, route, endpoint):
    route_update(route=route, enabled=False)
    _refused(_get(api_client, issued, "store-assistant", endpoint), 404, "route_unavailable")


def test_a_route_of_another_project_with_a_granted_key_is_404(api_client, issued, route, endpoint):
    route_update(route=route, enabled=False)
    RouteFactory(key="store-assistant")  # same key, another project
    _refused(_get(api_client, issued, "store-assistant", endpoint), 404, "route_unavailable")


def test_an_audience_the_route_does_not_admit_is_403(api_client, agent_client, endpoint):
    issued = session_for(agent_client, principal={**PRINCIPAL, "audience": "customer"})
    _refused(_get(api_client, issued, "hr-helpdesk", endpoint), 403, "audience_not_allowed")


def test_route_errors_come_after_authentication(api_client, issued, endpoint):
    AgentSession.objects.update(revoked_at="2026-01-01T00:00:00Z")
    _refused(_get(api_client, issued, "no-such-route", endpoint), 401, "unauthorized")
