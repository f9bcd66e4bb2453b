import pytest

from tests.agent_auth.factories import AgentClientFactory
from tests.routes.factories import RouteFactory


@pytest.fixture
def route(db):
    return RouteFactory(key="store-assistant", name="门店助手")


@pytest.fixture
def other_route(route):
    return RouteFactory(project=route.project, key="hr-helpdesk", name="HR Helpdesk")


@pytest.fixture
def agent_client(route, other_route):
    return AgentClientFactory(project=route.project, allowed_routes=[route.key, other_route.key])
