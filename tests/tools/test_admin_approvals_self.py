"""An approval asked by an agent that acts for the very operator who opens it (h4's B8: a high-risk
refund self-approved in one click). The console says so plainly, and approving one's own agent's
call takes an explicit acknowledgement; a colleague decides as before."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.projects.models import Membership
from apps.tools.models import Approval
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.projects.factories import MembershipFactory, UserFactory
from tests.routes.factories import RouteFactory
from tests.tools.approval_helpers import pending_approval, session_signed_in_on_page

pytest_plugins = ["tests.tools.surface_fixtures"]

QUEUE = "/admin/tools/approval/"


@pytest.fixture
def route(db):
    return RouteFactory(key="store-assistant", name="Store assistant", tools_direct_enabled=True)


@pytest.fixture
def agent_client(route):
    return AgentClientFactory(project=route.project, allowed_routes=[route.key])


def _owner(route, username: str):
    user = UserFactory(username=username, is_staff=True, is_superuser=False)
    MembershipFactory(project=route.project, user=user, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def grace(route):
    return _owner(route, "grace")


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def own_approval(api_client, agent_client, grace, tool_route) -> Approval:
    return pending_approval(api_client, session_signed_in_on_page(agent_client, grace).access_token)


def _approve(client: Client, approval: Approval, **extra: str):
    return client.post(f"{QUEUE}{approval.pk}/decide/", {"decision": "approved", "comment": "",
                                                        "decision_id": "console:own-1", **extra})


def test_the_page_says_plainly_that_the_approver_is_the_person_the_agent_acts_for(grace, own_approval):
    page = _logged_in(grace).get(f"{QUEUE}{own_approval.pk}/change/").content.decode()
    assert 'id="approval-self" data-relation="self"' in page
    assert "You are the person this agent acts for." in page
    assert 'id="approval-asker-you">you</span>' in page


def test_a_colleague_reads_no_such_warning(route, own_approval):
    page = _logged_in(_owner(route, "linus")).get(f"{QUEUE}{own_approval.pk}/change/").content.decode()
    assert 'id="approval-self"' not in page


def test_approving_ones_own_agents_call_without_acknowledging_it_is_refused_and_changes_nothing(grace, own_approval):
    response = _approve(_logged_in(grace), own_approval)
    assert response.status_code == 400
    assert "approving it yourself needs the box" in response.content.decode()
    own_approval.refresh_from_db()
    assert (own_approval.status, own_approval.decision_id, own_approval.approver_id) == (Approval.Status.PENDING, "",
                                                                                         None)


def test_approving_ones_own_agents_call_with_the_acknowledgement_is_recorded(grace, own_approval):
    response = _approve(_logged_in(grace), own_approval, own_call="on")
    assert response.status_code == 302
    own_approval.refresh_from_db()
    assert (own_approval.status, own_approval.approver_id) == (Approval.Status.APPROVED, grace.pk)


def test_denying_ones_own_agents_call_needs_no_acknowledgement(grace, own_approval):
    response = _logged_in(grace).post(f"{QUEUE}{own_approval.pk}/decide/", {
        "decision": "denied", "comment": "", "decision_id": "console:own-2"})
    assert response.status_code == 302
    own_approval.refresh_from_db()
    assert own_approval.status == Approval.Status.DENIED


def test_a_colleague_approves_in_one_click(route, own_approval):
    linus = _owner(route, "linus")
    assert _approve(_logged_in(linus), own_approval).status_code == 302
    own_approval.refresh_from_db()
    assert (own_approval.status, own_approval.approver_id) == (Approval.Status.APPROVED, linus.pk)


def test_a_business_user_named_as_the_operator_gets_a_softer_note(api_client, agent_client, grace, tool_route):
    issued = session_for(agent_client, principal=PRINCIPAL, on_behalf_of="grace")
    approval = pending_approval(api_client, issued.access_token)
    page = _logged_in(grace).get(f"{QUEUE}{approval.pk}/change/").content.decode()
    assert 'id="approval-self" data-relation="same_name"' in page
    assert 'id="approval-asker-you"' not in page


def test_a_self_approval_stays_visible_as_such_to_the_other_operators(route, grace, own_approval):
    _approve(_logged_in(grace), own_approval, own_call="on")
    page = _logged_in(_owner(route, "linus")).get(f"{QUEUE}{own_approval.pk}/change/").content.decode()
    assert 'id="decision-self-approved"' in page
