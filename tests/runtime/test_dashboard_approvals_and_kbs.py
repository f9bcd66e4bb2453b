"""The console's landing page: pending approvals whose agent session ended are not counted as work
(their calls cannot run) but apart, saying why; a knowledge base turned off reads as off."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.agent_auth.models import AgentSession
from apps.agent_auth.services import session_revoke
from apps.knowledge.models import KnowledgeBase
from apps.projects.models import Membership
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory
from tests.tools.approval_helpers import pending_approval

pytest_plugins = ["tests.tools.surface_fixtures"]


@pytest.fixture
def owner(route) -> Client:
    client = Client()
    client.force_login(MembershipFactory(project=route.project, role=Membership.Role.OWNER).user)
    return client


def _kb_row(page: str, name: str) -> str:
    start = page.index(f'<tr data-kb="{name}">')
    return page[start:page.index("</tr>", start)]


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
    assert "· 2 more whose agent session ended: they cannot run now</span>" in page
    assert "status=pending&amp;session=live" in page  # the tile's list shows what it counts


def test_a_knowledge_base_turned_off_reads_as_off_on_the_landing_page(owner, route):
    kb = KnowledgeBaseFactory(project=route.project, name="门店知识库")
    KnowledgeBase.objects.filter(pk=kb.pk).update(enabled=False)
    row = _kb_row(owner.get("/admin/").content.decode(), kb.name)
    assert 'data-kb-state="off">off</span>' in row
    assert '<span class="bh-muted" data-kb-index="ready">index ready, not served</span>' in row
    assert '<span class="bh-badge bh-ok">ready</span>' not in row

