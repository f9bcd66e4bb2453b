import pytest

from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.routes.factories import RouteFactory


@pytest.fixture
def route(db):
    return RouteFactory(key="store-assistant", name="门店助手")


@pytest.fixture
def agent_client(route):
    return AgentClientFactory(project=route.project, allowed_routes=[route.key])


@pytest.fixture
def issued(agent_client):
    return session_for(agent_client, principal=PRINCIPAL)
