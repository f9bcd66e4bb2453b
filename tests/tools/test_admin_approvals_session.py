"""The approval queue and page when the call can no longer run: its agent session ended (only that
session can resume a call), or its tool left the route. They say so and suggest denying it; a call
that can never run cannot be approved, and approving one that cannot run now does not say it runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone

from apps.agent_auth.models import AgentSession
from apps.agent_auth.services import session_revoke
from apps.projects.models import Membership
from apps.tools import services
from apps.tools.models import Approval, Tool
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.tools.approval_fixtures import console_client
from tests.tools.approval_helpers import pending_approval

pytest_plugins = ["tests.tools.surface_fixtures"]

QUEUE = "/admin/tools/approval/"
REVOKED_LINE = "Can never run: its agent session was revoked. Deny it."


@pytest.fixture
def owner(route) -> Client:
    return console_client(route.project, Membership.Role.OWNER, "owner")


def _revoke(issued) -> None:
    session_revoke(session=issued.session, revoked_by=AgentSession.RevokedBy.OPERATOR, reason="Lost laptop")


def _expire(issued) -> None:
    AgentSession.objects.filter(pk=issued.session.pk).update(refresh_expires_at=timezone.now() - timedelta(seconds=1))


def _approve(client: Client, approval: Approval):
    return client.post(f"{QUEUE}{approval.pk}/decide/", {"decision": "approved", "decision_id": "console:1"})


@pytest.mark.parametrize("end,blocker,said", [(_revoke, "session_revoked", "was revoked"),
                                              (_expire, "session_expired", "expired")])
def test_the_approval_page_says_a_call_whose_session_ended_can_never_run_and_offers_only_deny(
        owner, approval, issued, end, blocker, said):
    end(issued)
    page = owner.get(f"{QUEUE}{approval.pk}/change/").content.decode()
    assert f'data-blocker="{blocker}">This call can never run: the agent session that made it {said}, and only ' \
           "that session can resume it" in page
    assert "It cannot be approved. Deny it to settle the call as denied." in page
    assert ('id="approve-button"' in page, 'id="deny-button"' in page) == (False, True)


def test_approving_a_call_of_a_revoked_session_is_refused_and_records_nothing(owner, approval, issued):
    _revoke(issued)
    response = _approve(owner, approval)
    assert response.status_code == 400
    assert "It cannot be approved. Deny it instead. Nothing was recorded." in response.content.decode()
    approval.refresh_from_db()
    assert (approval.status, approval.decision_id) == ("pending", "")


def test_approving_a_call_whose_tool_was_switched_off_does_not_say_the_agent_runs_it(owner, approval):
    services.tool_set_enabled(tool=Tool.objects.get(name="order_refund"), enabled=False)
    response = _approve(owner, approval)
    assert response.status_code == 302
    assert [str(message) for message in get_messages(response.wsgi_request)] == [
        "Approved, but the call cannot run as things now are: its tool is no longer on the route. The agent's resume "
        "is refused; see the page."]
    approval.refresh_from_db()
    assert approval.status == "approved"


def test_the_queue_row_says_a_call_whose_session_was_revoked_can_never_run(owner, approval, issued, api_client):
    live = pending_approval(api_client, session_for(issued.session.client, principal={**PRINCIPAL, "id": "u-2"})
                            .access_token, n=2)
    _revoke(issued)
    page = owner.get(QUEUE).content.decode()
    assert page.count('data-blocker="session_revoked"') == 1
    assert f"{REVOKED_LINE}</strong>" in page
    rows = {row.pk: row for row in owner.get(QUEUE).context["cl"].result_list}
    assert set(rows) == {approval.pk, live.pk}


def test_the_queue_says_an_approved_call_of_a_revoked_session_never_runs(owner, approval, issued):
    _approve(owner, approval)
    _revoke(issued)
    assert "Can never run: its agent session was revoked.</strong>" in owner.get(QUEUE).content.decode()


def test_the_queue_filters_by_whether_the_agent_session_can_still_resume_the_call(owner, approval, issued,
                                                                                  api_client):
    live = pending_approval(api_client, session_for(issued.session.client, principal={**PRINCIPAL, "id": "u-2"})
                            .access_token, n=2)
    _revoke(issued)
    shown = {value: [row.pk for row in owner.get(QUEUE, {"status": "pending", "session": value})
                     .context["cl"].result_list] for value in ("live", "ended")}
    assert shown == {"live": [live.pk], "ended": [approval.pk]}
