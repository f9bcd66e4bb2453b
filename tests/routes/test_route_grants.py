"""A route's key is what agent grants name: deleting or renaming a route in the console carries
its grants along (found by a browser audit: a deleted route's grants lived on, and a new route
created with the same key inherited them, sessions included)."""

import pytest
from django.test import Client

from apps.agent_auth.models import AgentAuthorization, AgentClient, AgentSession
from apps.ledger.models import Conversation
from apps.projects.models import Membership
from apps.routes.models import Route
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import approved_code, session_for
from tests.projects.factories import MembershipFactory
from tests.projects.helpers import admin_client
from tests.routes.factories import RouteFactory
from tests.routes.test_admin import _form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return MembershipFactory(role=Membership.Role.OWNER)


@pytest.fixture
def browser(owner) -> Client:
    return admin_client(owner.user)


@pytest.fixture
def granted(owner):
    """Two routes of the project; a client, a session and an approved authorization (its code not
    yet exchanged) granted both."""
    temp = RouteFactory(project=owner.project, key="temp-route")
    keep = RouteFactory(project=owner.project, key="keep-route")
    client = AgentClientFactory(project=owner.project, allowed_routes=["temp-route", "keep-route"])
    session_for(client)
    approved_code(client)
    return temp, keep, client


def _grants(client) -> list[list[str]]:
    client.refresh_from_db()
    session = AgentSession.objects.get(client=client)
    approved = AgentAuthorization.objects.get(client=client, status=AgentAuthorization.Status.APPROVED)
    return [client.allowed_routes, session.allowed_routes, approved.allowed_routes]


def test_deleting_a_route_ends_its_grants_and_a_new_route_of_its_key_inherits_none(browser, owner, granted):
    temp, _keep, client = granted
    page = browser.get(f"/admin/routes/route/{temp.pk}/delete/").content.decode()
    assert f"Agent client {client.name} loses access to it" in page
    assert "1 agent session loses access to it" in page
    response = browser.post(f"/admin/routes/route/{temp.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Route.objects.filter(pk=temp.pk).exists()
    assert _grants(client) == [["keep-route"], ["keep-route"], ["keep-route"]]
    RouteFactory(project=owner.project, key="temp-route")
    assert _grants(client) == [["keep-route"], ["keep-route"], ["keep-route"]]


def test_the_delete_action_ends_the_grants_too(browser, granted):
    temp, _keep, client = granted
    response = browser.post("/admin/routes/route/", {"action": "delete_selected", "_selected_action": [str(temp.pk)],
                                                     "post": "yes"})
    assert response.status_code == 302
    assert _grants(client) == [["keep-route"], ["keep-route"], ["keep-route"]]


def test_renaming_a_route_keeps_its_agents_under_the_new_key(browser, owner, granted):
    temp, _keep, client = granted
    data = _form_data(owner.project, key="renamed-route", name=temp.name, **{
        "knowledge_bindings-TOTAL_FORMS": "0", "knowledge_bindings-INITIAL_FORMS": "0"})
    response = browser.post(f"/admin/routes/route/{temp.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Route.objects.get(pk=temp.pk).key == "renamed-route"
    assert _grants(client) == [["renamed-route", "keep-route"], ["renamed-route", "keep-route"],
                               ["renamed-route", "keep-route"]]


def test_another_projects_grants_of_the_same_key_are_left_alone(browser, granted):
    temp, _keep, _client = granted
    other = AgentClientFactory(allowed_routes=[])
    RouteFactory(project=other.project, key="temp-route")
    AgentClient.objects.filter(pk=other.pk).update(allowed_routes=["temp-route"])
    browser.post(f"/admin/routes/route/{temp.pk}/delete/", {"post": "yes"})
    other.refresh_from_db()
    assert other.allowed_routes == ["temp-route"]


def test_a_route_with_history_is_kept_and_the_page_says_to_turn_it_off(browser, owner, granted):
    temp, _keep, client = granted
    session = AgentSession.objects.get(client=client)
    Conversation.objects.create(session=session, route=temp, client_conversation_id="conv-1",
                                principal_id=session.principal_id, on_behalf_of=session.on_behalf_of)
    assert Conversation.objects.filter(route=temp).exists()
    page = browser.get(f"/admin/routes/route/{temp.pk}/delete/").content.decode()
    assert "the ledger keeps its 1 conversation" in page
    assert "Turn the route off" in page
    assert "your account doesn" not in page
    browser.post(f"/admin/routes/route/{temp.pk}/delete/", {"post": "yes"})
    assert Route.objects.filter(pk=temp.pk).exists()
    assert _grants(client)[0] == ["temp-route", "keep-route"]


def test_a_route_stays_in_its_project(browser, owner, granted):
    """Moved to another project, a route kept the old project's grants, and a route made later there
    with its key inherited them."""
    temp, _keep, client = granted
    other = MembershipFactory(user=owner.user, role=Membership.Role.OWNER).project
    data = _form_data(other, key="temp-route", name=temp.name, **{
        "knowledge_bindings-TOTAL_FORMS": "0", "knowledge_bindings-INITIAL_FORMS": "0"})
    response = browser.post(f"/admin/routes/route/{temp.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Route.objects.get(pk=temp.pk).project_id == owner.project_id
    assert _grants(client)[0] == ["temp-route", "keep-route"]


def test_renaming_a_route_onto_another_routes_key_is_refused(browser, owner, granted):
    temp, _keep, client = granted
    data = _form_data(owner.project, key="keep-route", name=temp.name, **{
        "knowledge_bindings-TOTAL_FORMS": "0", "knowledge_bindings-INITIAL_FORMS": "0"})
    response = browser.post(f"/admin/routes/route/{temp.pk}/change/", data)
    assert response.status_code == 200
    assert "already exists" in response.content.decode()
    assert Route.objects.get(pk=temp.pk).key == "temp-route"
    assert _grants(client)[0] == ["temp-route", "keep-route"]


def test_grants_left_by_routes_deleted_before_are_dropped_by_the_migration(owner, granted):
    import importlib

    from django.apps import apps

    _temp, _keep, client = granted
    AgentClient.objects.filter(pk=client.pk).update(allowed_routes=["temp-route", "gone-route", "keep-route"])
    AgentSession.objects.filter(client=client).update(allowed_routes=["gone-route", "temp-route"])
    AgentAuthorization.objects.filter(client=client).update(allowed_routes=["gone-route"])
    other = AgentClientFactory(allowed_routes=[])
    RouteFactory(project=other.project, key="gone-route")
    AgentClient.objects.filter(pk=other.pk).update(allowed_routes=["gone-route"])

    migration = importlib.import_module("apps.agent_auth.migrations.0004_stale_route_grants")
    migration.drop_stale_route_grants(apps, None)

    assert _grants(client) == [["temp-route", "keep-route"], ["temp-route"], []]
    other.refresh_from_db()
    assert other.allowed_routes == ["gone-route"]  # a route of its own project
