"""Right-to-left values an agent chose, on the approval queue and an approval's page: each identifier
reads left to right as stored, isolated from the words around it, and escaped; names keep their own
direction inside a <bdi> (apps.core.bidi). Before, conv-مستخدم-935e06 read conv-935-مستخدمe06."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils.html import escape

from apps.projects.models import Membership
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.routes.factories import RouteFactory
from tests.tools.approval_fixtures import console_client
from tests.tools.approval_helpers import pending_approval

pytest_plugins = ["tests.tools.surface_fixtures"]

CONVERSATION = "conv-مستخدم-935e06<script>alert(1)</script>"
PRINCIPAL_ID = "مستخدم<b>"
ON_BEHALF_OF = "مستخدم@example.com"
AGENT_IDS = [CONVERSATION, PRINCIPAL_ID, ON_BEHALF_OF]


def ident(value: str) -> str:
    return f'<span class="bh-ident" dir="ltr">{escape(value)}</span>'


@pytest.fixture
def route(db):
    return RouteFactory(key="store-assistant", name="متجر <i>الرياض</i>", tools_direct_enabled=True)


@pytest.fixture
def approval(api_client, route, tool_route):
    client = AgentClientFactory(project=route.project, name="مساعد الصندوق", app_id="counter-app",
                                allowed_routes=[route.key])
    issued = session_for(client, principal={**PRINCIPAL, "id": PRINCIPAL_ID}, on_behalf_of=ON_BEHALF_OF)
    return pending_approval(api_client, issued.access_token, conversation=CONVERSATION)


@pytest.fixture
def owner(route) -> Client:
    return console_client(route.project, Membership.Role.OWNER, "owner")


@pytest.mark.parametrize("value", AGENT_IDS)
def test_the_queue_shows_an_agents_id_left_to_right_isolated_and_escaped(approval, owner, value):
    page = owner.get("/admin/tools/approval/").content.decode()
    assert ident(value) in page
    assert "<script>alert(1)" not in page


@pytest.mark.parametrize("value", [*AGENT_IDS, "counter-app"])
def test_an_approvals_page_shows_an_agents_id_left_to_right_isolated_and_escaped(approval, owner, value):
    page = owner.get(f"/admin/tools/approval/{approval.pk}/change/").content.decode()
    assert ident(value) in page
    assert "<script>alert(1)" not in page


def test_an_approvals_page_shows_the_invocation_id_left_to_right(approval, owner):
    page = owner.get(f"/admin/tools/approval/{approval.pk}/change/").content.decode()
    assert ident(approval.invocation.invocation_id) in page


def _breadcrumbs(page: str) -> str:
    return re.search(r'<div class="breadcrumbs">(.*?)</div>', page, re.S).group(1)


def test_an_approvals_breadcrumbs_show_the_tool_name_as_an_identifier(approval, owner):
    page = owner.get(f"/admin/tools/approval/{approval.pk}/change/").content.decode()
    assert _breadcrumbs(page).rstrip().endswith(f"&rsaquo; {ident(approval.tool_name)}")


def test_the_execution_switchs_breadcrumbs_keep_the_projects_name_in_an_isolate(approval, owner, route):
    route.project.name = "مشروع \u202e<i>"
    route.project.save(update_fields=["name"])
    page = owner.get(f"/admin/tools/approval/execution/{route.project.pk}/").content.decode()
    assert _breadcrumbs(page).rstrip().endswith(f"&rsaquo; Tool execution — <bdi>{escape(route.project.name)}</bdi>")


@pytest.mark.parametrize("url", ["/admin/tools/approval/", "/admin/tools/approval/{pk}/change/"])
def test_names_keep_their_direction_in_an_isolate(approval, owner, url):
    page = owner.get(url.format(pk=approval.pk)).content.decode()
    assert f"<bdi>{escape('متجر <i>الرياض</i>')}</bdi>" in page
    assert "<bdi>مساعد الصندوق</bdi>" in page
    assert "<i>الرياض" not in page


@pytest.mark.parametrize("value", [PRINCIPAL_ID, ON_BEHALF_OF])
def test_an_invocations_page_shows_the_agents_ids_left_to_right(approval, owner, value):
    page = owner.get(f"/admin/tools/invocation/{approval.invocation_id}/change/").content.decode()
    assert ident(value) in page


def test_the_agent_sessions_list_shows_on_whose_behalf_left_to_right(approval, owner):
    page = owner.get("/admin/agent_auth/agentsession/").content.decode()
    assert ident(ON_BEHALF_OF) in page


def test_an_agent_authorizations_page_shows_on_whose_behalf_left_to_right(approval, owner):
    authorization = approval.invocation.session.authorization
    page = owner.get(f"/admin/agent_auth/agentauthorization/{authorization.pk}/change/").content.decode()
    assert ident(ON_BEHALF_OF) in page
