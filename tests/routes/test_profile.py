import re

import pytest

from apps.routes.selectors import route_profile
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


def test_instructions_are_the_system_prompt_then_the_agent_instructions_labelled():
    route = RouteFactory(system_prompt="路由规则正文", agent_client_instructions="补充规则正文")
    assert route_profile(route=route)["instructions"] == (
        "【路由系统规则】\n路由规则正文\n\n【本地 Agent 补充规则】\n补充规则正文"
    )


def test_instructions_without_agent_instructions_have_one_section():
    route = RouteFactory(system_prompt="Only the route rules", agent_client_instructions="")
    assert route_profile(route=route)["instructions"] == "【路由系统规则】\nOnly the route rules"


def test_revision_is_64_hex_and_stable():
    route = RouteFactory()
    first = route_profile(route=route)["revision"]
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    route.refresh_from_db()
    assert route_profile(route=route)["revision"] == first


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("system_prompt", "changed"),
        ("agent_client_instructions", "changed"),
        ("memory_recent_messages", 3),
        ("knowledge_top_k", 9),
        ("knowledge_score_threshold", 0.5),
        ("write_tools", ["order_update"]),
        ("max_tool_calls", 7),
        ("name", "Renamed"),
    ],
)
def test_any_profile_change_makes_a_new_revision(field, value):
    route = RouteFactory()
    before = route_profile(route=route)["revision"]
    setattr(route, field, value)
    assert route_profile(route=route)["revision"] != before


def test_knowledge_source_count_changes_the_revision_and_enables_knowledge():
    route = RouteFactory(knowledge_enabled=True)
    without = route_profile(route=route, knowledge_sources=0)
    with_one = route_profile(route=route, knowledge_sources=1)
    assert without["knowledge"]["enabled"] is False
    assert with_one["knowledge"] == {
        "enabled": True, "sources": 1, "mode": "chunk", "top_k": 5, "max_docs": 4, "page_boost": False
    }
    assert without["revision"] != with_one["revision"]


def test_profile_never_carries_target_config_beyond_the_system_prompt():
    route = RouteFactory(system_prompt="rules")
    profile = route_profile(route=route)
    assert set(profile) == {"revision", "instructions", "memory", "knowledge", "governance"}
    assert profile["governance"] == {
        "planner": "local_agent", "execution": "bailinghub_governed", "authorization": "server_revalidated",
        "knowledge_trust": "reference_only", "tool_results_trust": "untrusted_data",
        "hidden_reasoning_sync": False, "max_tool_calls": 5, "permission": "full",
    }
