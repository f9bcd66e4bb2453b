from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from apps.agent_auth.services import IssuedTokens
from apps.projects.models import Membership
from apps.projects.tokens import operator_token_create
from apps.routes.models import Route
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.projects.factories import MembershipFactory
from tests.routes.factories import RouteFactory


@dataclass
class TaskWorld:
    route: Route
    first: IssuedTokens
    second: IssuedTokens
    owner: Membership
    operator_token: str
    api: APIClient


@pytest.fixture
def world(db) -> TaskWorld:
    route = RouteFactory(key="store-assistant", name="门店助手", tools_direct_enabled=True)
    agent_client = AgentClientFactory(project=route.project, allowed_routes=[route.key])
    first = session_for(agent_client, principal=PRINCIPAL)
    second = session_for(agent_client, principal={**PRINCIPAL, "id": "u-1002"})
    owner = MembershipFactory(project=route.project, role=Membership.Role.OWNER)
    _, token = operator_token_create(user=owner.user, name="tasks", scopes=["tasks:write"])
    api = APIClient()
    api.raise_request_exception = False
    return TaskWorld(route=route, first=first, second=second, owner=owner, operator_token=token, api=api)
