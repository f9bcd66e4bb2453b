"""Route names are distinct within a project, ignoring case (and, where an operator or a service
writes one, as a person reads it: apps.core.names): the agent's workspace list and the sign-in page
show a route by its name, so two "Audit Desk" were two entries nobody could tell apart."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from apps.projects.models import Membership
from apps.routes.models import ROUTE_NAME_TAKEN, Route
from apps.routes.services import route_create, route_update
from tests.projects.factories import MembershipFactory, ProjectFactory
from tests.routes.factories import RouteFactory
from tests.routes.test_admin import _form_data, _route_form


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _renamed(route: Route, name: str) -> dict[str, str]:
    """The route page's POST: the route's settings as they are, under `name`."""
    return {**_route_form(route, []), "name": name}


@pytest.mark.django_db
def test_the_database_refuses_a_name_another_route_of_the_project_has_in_another_case():
    route = RouteFactory(name="Audit Desk")
    with pytest.raises(IntegrityError):
        RouteFactory(project=route.project, name="audit DESK")


@pytest.mark.django_db
def test_routes_of_two_projects_may_share_a_name():
    RouteFactory(name="Audit Desk")
    RouteFactory(name="Audit Desk")
    assert Route.objects.filter(name="Audit Desk").count() == 2


@pytest.mark.django_db
def test_adding_a_route_under_a_taken_name_says_so_beside_the_name():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    RouteFactory(project=membership.project, key="audit-desk", name="Audit Desk")
    response = _client_for(membership.user).post(
        "/admin/routes/route/add/", _form_data(membership.project, key="audit-nokb", name="audit desk"))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"name": [ROUTE_NAME_TAKEN]}
    assert ROUTE_NAME_TAKEN in response.content.decode()
    assert list(Route.objects.values_list("key", flat=True)) == ["audit-desk"]


@pytest.mark.django_db
def test_renaming_a_route_to_a_lookalike_of_another_routes_name_is_refused_beside_the_name():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    RouteFactory(project=membership.project, key="audit-desk", name="Audit Desk")
    other = RouteFactory(project=membership.project, key="audit-nokb", name="No KB")
    response = _client_for(membership.user).post(
        f"/admin/routes/route/{other.pk}/change/", _renamed(other, "Audit\u00a0Desk"))  # a no-break space
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"name": [ROUTE_NAME_TAKEN]}
    other.refresh_from_db()
    assert other.name == "No KB"


@pytest.mark.django_db
def test_renaming_a_route_to_its_own_name_in_another_case_is_allowed():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    route = RouteFactory(project=membership.project, key="audit-desk", name="Audit Desk")
    response = _client_for(membership.user).post(
        f"/admin/routes/route/{route.pk}/change/", _renamed(route, "AUDIT desk"))
    assert response.status_code == 302
    route.refresh_from_db()
    assert route.name == "AUDIT desk"


@pytest.mark.django_db
def test_the_services_refuse_a_taken_name_beside_the_name():
    project = ProjectFactory()
    route_create(project=project, key="audit-desk", name="Audit Desk")
    other = route_create(project=project, key="audit-nokb", name="No KB")
    with pytest.raises(ValidationError) as created:
        route_create(project=project, key="audit-two", name="ＡＵＤＩＴ desk")  # full-width letters
    with pytest.raises(ValidationError) as updated:
        route_update(route=other, name="audit desk")
    assert created.value.message_dict == {"name": [ROUTE_NAME_TAKEN]}
    assert updated.value.message_dict == {"name": [ROUTE_NAME_TAKEN]}
    assert sorted(Route.objects.values_list("name", flat=True)) == ["Audit Desk", "No KB"]


@pytest.mark.django_db(transaction=True)
def test_the_migration_renames_later_duplicates_within_a_project_and_keeps_the_first():
    """Routes made before the constraint keep the oldest one's name in each project; the later ones
    are numbered, past numbers another route of the project already holds, and a long name is
    shortened to fit. Another project's route of the same name stays."""
    try:
        MigrationExecutor(connection).migrate([("routes", "0005_knowledge_score_threshold_help")])
        project, elsewhere = ProjectFactory(), ProjectFactory()
        first = RouteFactory(project=project, key="first", name="Audit Desk")
        second = RouteFactory(project=project, key="second", name="audit desk")
        numbered = RouteFactory(project=project, key="numbered", name="Audit Desk (2)")
        third = RouteFactory(project=project, key="third", name="AUDIT DESK")
        other = RouteFactory(project=elsewhere, key="other", name="Audit Desk")
        long_one = RouteFactory(project=project, key="long-one", name="L" * 256)
        long_two = RouteFactory(project=project, key="long-two", name="l" * 256)
        # Python folds "İ" to "i̇" (two characters), PostgreSQL's lower() to "i", as 0007's index does.
        dotted = RouteFactory(project=project, key="dotted", name="İzmir Desk")
        plain = RouteFactory(project=project, key="plain", name="izmir desk")
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    names = dict(Route.objects.values_list("key", "name"))
    assert names == {first.key: "Audit Desk", second.key: "audit desk (3)", numbered.key: "Audit Desk (2)",
                     third.key: "AUDIT DESK (4)", other.key: "Audit Desk", long_one.key: "L" * 256,
                     long_two.key: "l" * 252 + " (2)", dotted.key: "İzmir Desk", plain.key: "izmir desk (2)"}
