import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.projects.models import Membership
from apps.routes.models import Route
from tests.projects.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form_data(project, **overrides):
    data = {
        "project": str(project.pk), "key": "new-route", "name": "New route", "description": "",
        "enabled": "on", "audience_policy": "any", "allowed_audiences": "", "system_prompt": "",
        "agent_client_instructions": "", "agent_client_active_tool_limit": "8",
        "system_info_name": "", "system_info_summary": "", "system_info_domains": "",
        "system_info_boundaries": "", "write_tools": "", "force_approval_tools": "",
        "unattended_write_tools": "", "max_tool_calls": "5", "permission": "full",
        "knowledge_mode": "chunk", "knowledge_top_k": "5", "knowledge_max_docs": "4",
        "knowledge_score_threshold": "", "memory_recent_messages": "12", "memory_recent_budget_chars": "8000",
        "memory_per_message_chars": "2000", "memory_summary_max_chars": "1200",
    }
    data.update(overrides)
    return data


def test_operator_sees_only_routes_of_their_projects():
    membership = MembershipFactory(role=Membership.Role.VIEWER)
    mine = RouteFactory(project=membership.project, key="mine")
    RouteFactory(key="theirs")

    response = _client_for(membership.user).get("/admin/routes/route/")

    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == [mine]


def test_operator_cannot_open_a_route_of_another_project():
    membership = MembershipFactory()
    other = RouteFactory()
    response = _client_for(membership.user).get(f"/admin/routes/route/{other.pk}/change/")
    assert response.status_code == 302  # the admin's "does not exist" redirect to the index
    assert Route.objects.get(pk=other.pk).name == other.name


def test_viewer_can_read_but_not_change_a_route():
    membership = MembershipFactory(role=Membership.Role.VIEWER)
    route = RouteFactory(project=membership.project, name="Before")
    client = _client_for(membership.user)

    assert client.get(f"/admin/routes/route/{route.pk}/change/").status_code == 200
    response = client.post(f"/admin/routes/route/{route.pk}/change/",
                           _form_data(membership.project, key=route.key, name="After"))

    assert response.status_code == 403
    route.refresh_from_db()
    assert route.name == "Before"


def test_editor_creates_a_route_through_the_admin():
    membership = MembershipFactory(role=Membership.Role.EDITOR)
    response = _client_for(membership.user).post(
        "/admin/routes/route/add/", _form_data(membership.project, write_tools="order_update,stock_adjust")
    )
    assert response.status_code == 302
    route = Route.objects.get(key="new-route")
    assert route.write_tools == ["order_update", "stock_adjust"]
    assert route.unattended_write_tools is None


def test_admin_form_shows_the_validation_message_and_writes_nothing():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    response = _client_for(membership.user).post(
        "/admin/routes/route/add/", _form_data(membership.project, key="auto", write_tools="*")
    )
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["key"] == ["'auto' is reserved and cannot be a route key."]
    assert "Wildcards are not allowed: list exact operationIds (found '*')." in form.errors["write_tools"]
    assert Route.objects.count() == 0


def test_operator_cannot_create_a_route_in_a_project_they_do_not_edit():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    foreign = ProjectFactory()
    response = _client_for(membership.user).post("/admin/routes/route/add/", _form_data(foreign))
    assert response.status_code == 200
    assert "project" in response.context["adminform"].form.errors
    assert Route.objects.count() == 0


def test_change_page_shows_the_profile_revision_read_only():
    membership = MembershipFactory()
    route = RouteFactory(project=membership.project)
    from apps.routes.selectors import route_profile

    response = _client_for(membership.user).get(f"/admin/routes/route/{route.pk}/change/")
    assert route_profile(route=route)["revision"] in response.content.decode()


def test_superuser_sees_every_project():
    ProjectFactory.create_batch(3)
    admin = UserFactory(is_superuser=True)
    response = _client_for(admin).get("/admin/projects/project/")
    assert response.context["cl"].result_count == 3


def test_route_list_query_count_does_not_grow_with_rows():
    membership = MembershipFactory()
    RouteFactory.create_batch(3, project=membership.project)
    client = _client_for(membership.user)
    client.get("/admin/routes/route/")  # warm caches (content types, permissions)
    with CaptureQueriesContext(connection) as few:
        client.get("/admin/routes/route/")
    RouteFactory.create_batch(10, project=membership.project)
    with CaptureQueriesContext(connection) as many:
        response = client.get("/admin/routes/route/")
    assert response.context["cl"].result_count == 13
    assert len(many.captured_queries) == len(few.captured_queries)
