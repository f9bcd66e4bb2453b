"""The approval console's world, fixtures of tests/tools (its conftest imports them; a module's own
fixture of a name wins): a route (`route`; `tool_route`, tests.tools.surface_fixtures, draws the
store tools on it), an agent session on it (`issued`) and a pending approval reached the real way
(`approval`); and `console_client`, the console as a new member of a project in a given role."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.projects.factories import MembershipFactory, UserFactory
from tests.routes.factories import RouteFactory
from tests.tools.approval_helpers import pending_approval


def console_client(project, role: str, username: str) -> Client:
    """Django's test client signed in to the console as a new staff user of `project` in `role`."""
    user = UserFactory(username=username, is_staff=True, is_superuser=False)
    MembershipFactory(project=project, user=user, role=role)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def route(db):
    return RouteFactory(key="store-assistant", name="门店助手", tools_direct_enabled=True)


@pytest.fixture
def issued(route):
    return session_for(AgentClientFactory(project=route.project, allowed_routes=[route.key]), principal=PRINCIPAL)


@pytest.fixture
def approval(api_client, issued, tool_route):
    return pending_approval(api_client, issued.access_token)
