"""The console's landing page: pending approvals whose agent session ended are not counted as work
(their calls cannot run) but apart, saying why."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.agent_auth.models import AgentSession
from apps.agent_auth.services import session_revoke
from apps.projects.models import Membership
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.projects.factories import MembershipFactory
from tests.tools.approval_helpers import pending_approval

pytest_plugins = ["tests.tools.surface_fixtures"]


@pytest.fixture
def owner(route) -> Client:
    client = Client()
    client.force_login(MembershipFactory(project=route.project, role=Membership.Role.OWNER).user)
    return client


def test_pending_approvals_of_an_ended_agent_session_are_counted_apart(owner, api_client, issued, tool_route):
    revoked = session_for(issued.session.client, principal={**PRINCIPAL, "id": "u-2"})
    pending_approval(api_client, issued.access_token, n=1)
    for n in (2, 3):
        pending_approval(api_client, revoked.access_token, n=n)
    session_revoke(session=revoked.session, revoked_by=AgentSession.RevokedBy.OPERATOR, reason="Lost laptop")

    response = owner.get("/admin/")
    [board] = response.context["dashboard"]
    assert (board.approvals_pending, board.approvals_session_ended) == (1, 2)
    page = response.content.decode()
    assert 'data-stat="approvals_pending">1<' in page
    assert 'data-stat="approvals_session_ended"' in page
    assert "· 2 more whose agent session ended: they cannot run</span>" in page
    assert "status=pending&amp;session=live" in page  # the tile's list shows what it counts

