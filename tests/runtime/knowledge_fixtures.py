"""Fixtures of the agent knowledge tests (load with `pytest_plugins`): a knowledge-only route
(no direct business tools) and a second route sharing one KB, an agent session granted both,
three short Chinese documents, and the knowledge clock."""

from __future__ import annotations

import pytest

from apps.knowledge import services
from apps.runtime.knowledge import references
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.projects.factories import ProjectFactory
from tests.routes.factories import RouteFactory
from tests.runtime.knowledge_helpers import DELIVERY, REFUND, T0, WARRANTY


@pytest.fixture
def clock(monkeypatch):
    """The knowledge clock, set by the test: `clock.at = T0 + 10`."""

    class Clock:
        at = T0

    monkeypatch.setattr(references, "now", lambda: Clock.at)
    return Clock


@pytest.fixture
def project(db):
    return ProjectFactory()


@pytest.fixture
def kroute(project):
    return RouteFactory(project=project, key="policy-desk", name="政策咨询", knowledge_enabled=True,
                        tools_direct_enabled=False)


@pytest.fixture
def other_route(project):
    return RouteFactory(project=project, key="after-sales", name="售后", knowledge_enabled=True)


@pytest.fixture
def kb(project, kroute, other_route):
    kb = KnowledgeBaseFactory(project=project, name="门店政策")
    services.route_knowledge_bind(route=kroute, knowledge_base=kb)
    services.route_knowledge_bind(route=other_route, knowledge_base=kb)
    return kb


@pytest.fixture
def kclient(project, kroute, other_route):
    return AgentClientFactory(project=project, allowed_routes=[kroute.key, other_route.key])


@pytest.fixture
def ksession(kclient):
    return session_for(kclient, principal=PRINCIPAL)


@pytest.fixture
def docs(kb):
    return ingest_texts(kb, {"退款.md": f"# 退款\n\n{REFUND}", "配送.md": f"# 配送\n\n{DELIVERY}",
                             "保修.md": f"# 保修\n\n{WARRANTY}"})
