"""The operator's dry-run of a route (builder API and route page) shows exactly the knowledge-base
count and `capabilities` an agent session acting on someone's behalf gets from bootstrap."""

import pytest

from apps.knowledge.services import route_knowledge_bind
from apps.projects.models import Membership
from apps.routes.services import route_update
from apps.tools.route_tools import route_tools_set
from tests.agent_auth.helpers import bearer
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory

pytest_plugins = ["tests.tools.surface_fixtures"]


@pytest.fixture
def operator_client(route):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(MembershipFactory(project=route.project, role=Membership.Role.VIEWER).user)
    return client


def _bootstrap(api_client, issued):
    return api_client.get("/agent-api/v1/workspaces/store-assistant/bootstrap", **bearer(issued.access_token)).json()


def test_the_dry_run_is_what_bootstrap_shows(api_client, operator_client, issued, tool_route):
    route_tools_set(route=tool_route, force_approval_tools=["stock_adjust"])
    route_update(route=tool_route, knowledge_enabled=True)
    route_knowledge_bind(route=tool_route, knowledge_base=KnowledgeBaseFactory(project=tool_route.project))
    bootstrap = _bootstrap(api_client, issued)
    dry_run = operator_client.get("/api/v1/builder/routes/store-assistant/dry-run").json()["data"]
    assert dry_run["capabilities"] == bootstrap["capabilities"]
    assert dry_run["kb_count"] == bootstrap["profile"]["knowledge"]["sources"] == 1
    assert dry_run["capabilities"]["authorized_total"] == 6  # 2 read-only, 2 writes, kb_search and kb_read
