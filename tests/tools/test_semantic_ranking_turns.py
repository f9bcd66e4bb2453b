"""A turn's `active_tools` and capability search by `run_id` follow the semantic order once the
surface is indexed, and a replayed turn keeps the tools it was answered with."""

import pytest

from apps.routes.services import route_update
from apps.tools import semantic
from apps.tools.models import ToolEmbedding
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, bearer, session_for
from tests.ledger.helpers import open_turn
from tests.routes.factories import RouteFactory

pytest_plugins = ["tests.tools.surface_fixtures"]

PARAPHRASE = "we received more units, update inventory"


@pytest.fixture
def route(db):
    return RouteFactory(key="store-assistant", tools_direct_enabled=True, agent_client_enabled=True)


@pytest.fixture
def issued(route):
    return session_for(AgentClientFactory(project=route.project, allowed_routes=[route.key]), principal=PRINCIPAL)


@pytest.fixture
def indexed_route(tool_route, store_provider):
    semantic.index_rebuild(provider_id=store_provider.pk)
    route_update(route=tool_route, agent_client_active_tool_limit=2)
    return tool_route


def _names(tools):
    return [tool["name"] for tool in tools]


def test_a_turns_active_tools_are_the_semantic_best(api_client, issued, indexed_route):
    body = open_turn(api_client, issued.access_token, "store-assistant", user_input=PARAPHRASE).json()
    assert _names(body["active_tools"])[0] == "stock_adjust"
    assert len(body["active_tools"]) == 2


def test_a_replayed_turn_keeps_its_tools_when_the_index_is_gone(api_client, issued, indexed_route):
    first = open_turn(api_client, issued.access_token, "store-assistant", user_input=PARAPHRASE).json()
    ToolEmbedding.objects.all().delete()
    replay = open_turn(api_client, issued.access_token, "store-assistant", user_input=PARAPHRASE).json()
    assert replay["active_tools"] == first["active_tools"]


def test_a_search_by_run_id_ranks_the_runs_input_semantically(api_client, issued, indexed_route):
    run_id = open_turn(api_client, issued.access_token, "store-assistant", user_input=PARAPHRASE).json()["run_id"]
    response = api_client.post("/agent-api/v1/workspaces/store-assistant/capabilities/search",
                               {"run_id": run_id, "limit": 1}, format="json", **bearer(issued.access_token))
    assert response.status_code == 200
    body = response.json()
    assert (body["query"], _names(body["tools"]), body["discovery"]["ranking"]) == (PARAPHRASE, ["stock_adjust"],
                                                                                     "semantic")
