"""A new agent client's "Allowed routes" on the add form: only the chosen project's routes (h4's A10:
every project's routes were listed and the wrong ones refused only on save)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from apps.agent_auth.models import AgentClient
from apps.projects.models import Membership
from tests.projects.factories import MembershipFactory, UserFactory
from tests.routes.factories import RouteFactory

ADD = "/admin/agent_auth/agentclient/add/"


@pytest.fixture
def elsewhere(route):
    """Another project, with a route of the same key as `route` and one of its own."""
    same_key = RouteFactory(key="store-assistant", name="Another project's assistant")
    RouteFactory(project=same_key.project, key="hr-people")
    return same_key.project


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def superuser(db):
    return _logged_in(UserFactory(username="root", is_staff=True, is_superuser=True))


@pytest.fixture
def two_project_owner(route, elsewhere):
    user = UserFactory(username="owner-of-two", is_staff=True, is_superuser=False)
    MembershipFactory(project=route.project, user=user, role=Membership.Role.OWNER)
    MembershipFactory(project=elsewhere, user=user, role=Membership.Role.OWNER)
    return _logged_in(user)


def _choices(response) -> list[str]:
    return [key for key, _ in response.context["adminform"].form.fields["allowed_routes"].choices]


def test_a_form_opened_for_a_project_offers_only_its_routes(superuser, route, other_route, elsewhere):
    response = superuser.get(f"{ADD}?project={route.project.pk}")
    assert _choices(response) == ["hr-helpdesk", "store-assistant"]
    assert response.context["adminform"].form.initial["project"] == str(route.project.pk)


def test_each_route_tick_names_the_projects_that_have_its_key(two_project_owner, route, other_route, elsewhere):
    html = two_project_owner.get(ADD).content.decode()
    tick = r'<input type="checkbox" name="allowed_routes" value="([^"]+)" id="[^"]+" data-projects="([^"]*)"'
    ticks = dict(re.findall(tick, html))
    assert {key: set(projects.split()) for key, projects in ticks.items()} == {
        "hr-helpdesk": {str(route.project.pk)},
        "hr-people": {str(elsewhere.pk)},
        "store-assistant": {str(route.project.pk), str(elsewhere.pk)},
    }
    assert "agent_auth/client_routes.js" in html


def test_a_form_opened_for_a_project_the_operator_may_not_change_lists_their_own(two_project_owner, route,
                                                                                 other_route, elsewhere):
    foreign = RouteFactory(key="not-theirs")
    response = two_project_owner.get(f"{ADD}?project={foreign.project.pk}")
    assert "not-theirs" not in _choices(response)


def test_the_save_still_refuses_another_projects_route_and_creates_nothing(superuser, route, other_route, elsewhere):
    response = superuser.post(ADD, {
        "project": str(route.project.pk), "app_id": "store-desktop", "name": "Store desktop", "enabled": "on",
        "allowed_routes": ["hr-people"], "agent_authorize_url": "https://business.example.com/agent/authorize",
        "authorization_rate_limit": "10"})
    assert response.status_code == 200
    assert "No route with these keys in the project: hr-people" in response.content.decode()
    assert not AgentClient.objects.exists()


def test_a_posted_form_past_the_listing_limit_keeps_its_ticks(superuser, route, other_route, elsewhere, monkeypatch):
    """The save offered every project's routes while the page offered the chosen project's: past
    ROUTE_CHOICES_MAX of all of them, the ticked boxes became a note and the client was saved with
    no route (review)."""
    from apps.routes import admin as routes_admin

    monkeypatch.setattr(routes_admin, "ROUTE_CHOICES_MAX", 3)  # route's project has 2, all projects 4
    response = superuser.post(ADD, {
        "project": str(route.project.pk), "app_id": "store-desktop", "name": "Store desktop", "enabled": "on",
        "allowed_routes": ["store-assistant", "hr-helpdesk"],
        "agent_authorize_url": "https://business.example.com/agent/authorize", "authorization_rate_limit": "10"})
    assert response.status_code == 302, response.content.decode()[-3000:]
    assert sorted(AgentClient.objects.get(app_id="store-desktop").allowed_routes) == ["hr-helpdesk", "store-assistant"]
