import pytest

from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.routes.factories import RouteFactory


@pytest.fixture
def route(db):
    return RouteFactory(
        key="store-assistant", name="门店助手", description="门店店员助手。",
        system_prompt="你是门店助手。", agent_client_instructions="只在店员要求时调用写工具。",
        tools_direct_enabled=True,
        system_info_name="百灵门店系统", system_info_summary="订单、库存与售后。",
        system_info_domains=["订单查询", "库存"], system_info_boundaries=["不处理线上订单"],
    )


@pytest.fixture
def hr_route(route):
    return RouteFactory(project=route.project, key="hr-helpdesk", name="HR Helpdesk",
                        audience_policy="listed", allowed_audiences=["employee", "hr"])


@pytest.fixture
def agent_client(route, hr_route):
    return AgentClientFactory(project=route.project, allowed_routes=[route.key, hr_route.key])


@pytest.fixture
def issued(agent_client):
    """A session granted both routes, for an `employee` principal."""
    return session_for(agent_client, principal=PRINCIPAL)
