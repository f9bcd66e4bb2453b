"""Switching a tool off in the console (its page, or the tools list's action) says which calls it
strands: those still waiting for their approval, whose agents' resume is then refused."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.projects.models import Membership
from apps.tools.approvals import approval_decide
from apps.tools.models import Tool
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.tools.approval_fixtures import console_client
from tests.tools.approval_helpers import pending_approval

pytest_plugins = ["tests.tools.surface_fixtures"]

STRANDED = ("Calls still waiting for their approval cannot run while this tool is off: 2 pending approvals and 1 "
            "approved call not yet resumed. Their agents' resume is refused (tool_not_found), an approved call's "
            "for good, and their approval pages say so; deny the pending ones in the "
            "<a href=\"/admin/tools/approval/?status=pending\">approval queue</a>, or switch it back on before they "
            "are decided.")


@pytest.fixture
def waiting(route, api_client, tool_route):
    """Three calls of order_refund waiting for their approval: two pending, one approved."""
    issued = session_for(AgentClientFactory(project=route.project, allowed_routes=[route.key]), principal=PRINCIPAL)
    approvals = [pending_approval(api_client, issued.access_token, n=n) for n in (1, 2, 3)]
    approval_decide(approval_id=approvals[0].pk, projects=[route.project], decision_id="d-1", decision="approved")
    return Tool.objects.get(provider__project=route.project, name="order_refund")


@pytest.fixture
def owner(route) -> Client:
    return console_client(route.project, Membership.Role.OWNER, "owner")


def _messages(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def test_disabling_a_tool_from_the_list_names_the_calls_it_strands_counted_in_one_query(owner, waiting):
    with CaptureQueriesContext(connection) as queries:
        response = owner.post("/admin/tools/tool/", {"action": "disable_tools", "_selected_action": [waiting.pk]})
    assert response.status_code == 302
    assert _messages(response) == ["1 tool disabled.", STRANDED]
    assert len([q for q in queries.captured_queries if 'FROM "tools_approval"' in q["sql"]]) == 1


def test_disabling_a_tool_on_its_page_names_the_calls_it_strands(owner, waiting):
    response = owner.post(f"/admin/tools/tool/{waiting.pk}/change/", {"_save": "Save"})
    assert response.status_code == 302
    assert STRANDED in _messages(response)
    waiting.refresh_from_db()
    assert waiting.enabled is False
