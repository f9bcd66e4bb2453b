"""The console for people who use a keyboard or a screen reader."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.knowledge.services import route_knowledge_bind
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.knowledge.test_admin_search import POLICY
from tests.routes.factories import RouteFactory
from tests.tools.approval_helpers import pending_approval
from tests.tools.factories import STORE_SPEC, ToolProviderFactory

LARGE_NOTE = "".join(f"第{n}行：盘点差异说明。\n" for n in range(1500))


@pytest.fixture
def journeys(project):
    """A project as an operator finds it mid-day: a route reading a knowledge base with a document, a
    tool provider, a refund waiting for approval (with its conversation and run in the ledger)."""
    route = RouteFactory(project=project, key="store-assistant", name="门店助手", tools_direct_enabled=True)
    kb = KnowledgeBaseFactory(project=project, name="After-sales")
    ingest_texts(kb, {"policy.md": POLICY})
    route_knowledge_bind(route=route, knowledge_base=kb)
    provider = ToolProviderFactory(project=project, name="store", spec=STORE_SPEC)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=["stock_adjust"])],
                    write_tools=["stock_adjust"], tools_direct_enabled=True)
    agent = session_for(AgentClientFactory(project=project, name="Counter assistant", app_id="counter-app",
                                           allowed_routes=[route.key]), principal=PRINCIPAL)
    approval = pending_approval(APIClient(), agent.access_token, tool="stock_adjust",
                                arguments={"sku": "SKU-1", "quantity": 500, "note": LARGE_NOTE})
    return {"project": project, "route": route, "kb": kb, "provider": provider, "approval": approval}


def test_a_tabular_rows_controls_name_their_column_and_row(logged_in_page, journeys):
    provider = journeys["provider"]
    page = logged_in_page
    page.goto(f"/admin/tools/toolprovider/{provider.pk}/change/")
    switches = page.locator("#tools-group input[type=checkbox][name$='-enabled']")
    assert sorted(s.get_attribute("aria-label") for s in switches.all()) == sorted(
        f"Enabled: {name}" for name in provider.tools.values_list("name", flat=True))
