"""Project names are unique ignoring case: every project select, filter and breadcrumb shows the
name alone, so two projects called "Bailing Retail" were two choices nobody could tell apart."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection
from django.db.migrations.executor import MigrationExecutor

from apps.projects.models import PROJECT_NAME_TAKEN, Project
from apps.projects.services import project_create
from tests.projects.factories import ProjectFactory, UserFactory
from tests.projects.helpers import admin_client

ADD_URL = "/admin/projects/project/add/"


@pytest.mark.django_db
def test_the_database_refuses_a_name_another_project_has_in_another_case():
    ProjectFactory(name="Bailing Retail")
    with pytest.raises(IntegrityError):
        ProjectFactory(name="bailing RETAIL")


@pytest.mark.django_db
def test_adding_a_project_under_a_taken_name_says_so_beside_the_name():
    ProjectFactory(name="Bailing Retail", slug="bailing-retail")
    client = admin_client(UserFactory(is_staff=True, is_superuser=True))
    response = client.post(ADD_URL, {"name": "BAILING retail", "slug": "bailing-retail-2", "description": "",
                                     "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"name": [PROJECT_NAME_TAKEN]}
    assert list(Project.objects.values_list("name", flat=True)) == ["Bailing Retail"]


@pytest.mark.django_db
def test_renaming_a_project_to_its_own_name_in_another_case_is_allowed():
    project = ProjectFactory(name="Bailing Retail", slug="bailing-retail")
    client = admin_client(UserFactory(is_staff=True, is_superuser=True))
    response = client.post(f"/admin/projects/project/{project.pk}/change/", {
        "name": "Bailing RETAIL", "slug": "bailing-retail", "description": "",
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"})
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.name == "Bailing RETAIL"


@pytest.mark.django_db
def test_the_service_refuses_a_taken_name():
    ProjectFactory(name="Bailing Retail")
    with pytest.raises(ValidationError, match="already has this name"):
        project_create(name="bailing retail", slug="other")
    assert Project.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_migration_renames_later_duplicates_and_keeps_the_first():
    """Projects made before the constraint keep the oldest one's name; the later ones are numbered,
    past numbers another project already holds, and a long name is shortened to fit."""
    try:
        MigrationExecutor(connection).migrate([("projects", "0006_alter_operatortoken_name_alter_project_name")])
        first = ProjectFactory(name="Bailing Retail", slug="first")
        second = ProjectFactory(name="bailing retail", slug="second")
        numbered = ProjectFactory(name="Bailing Retail (2)", slug="numbered")
        third = ProjectFactory(name="BAILING RETAIL", slug="third")
        long_one = ProjectFactory(name="L" * 200, slug="long-one")
        long_two = ProjectFactory(name="l" * 200, slug="long-two")
        # Python folds "İ" to "i̇" (two characters), PostgreSQL's lower() to "i", as 0008's index does.
        dotted = ProjectFactory(name="İzmir Store", slug="dotted")
        plain = ProjectFactory(name="izmir store", slug="plain")
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    names = dict(Project.objects.values_list("slug", "name"))
    assert names == {first.slug: "Bailing Retail", second.slug: "bailing retail (3)",
                     numbered.slug: "Bailing Retail (2)", third.slug: "BAILING RETAIL (4)",
                     long_one.slug: "L" * 200, long_two.slug: "l" * 196 + " (2)",
                     dotted.slug: "İzmir Store", plain.slug: "izmir store (2)"}
