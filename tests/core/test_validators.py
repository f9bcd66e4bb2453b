"""Names the console prints beside other text refuse the invisible bidi controls
(apps.core.validators.validate_shown_name): in a message, an option or a heading, U+202E laid the
words after the name out backwards ("… was added successfully", a one-time token)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.core.validators import BIDI_CONTROLS, validate_shown_name
from apps.tasks.models import Task
from tests.agent_auth.factories import AgentClientFactory
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import ProjectFactory
from tests.projects.helpers import admin_client
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("control", sorted(BIDI_CONTROLS))
def test_every_bidi_control_is_refused_with_its_code(control):
    with pytest.raises(ValidationError) as error:
        validate_shown_name(f"Handbook {control}v2")
    assert error.value.code == "bidi_control"


@pytest.mark.parametrize("name", ["Handbook v2", "دليل المتجر", "מדריך", "知识库 一", "café — notes"])
def test_names_in_any_script_pass(name):
    validate_shown_name(name)


@pytest.mark.parametrize("make", [
    lambda name: ProjectFactory.build(name=name, slug="p"),
    lambda name: RouteFactory.build(project=ProjectFactory(), key="store", name=name),
    lambda name: KnowledgeBaseFactory.build(project=ProjectFactory(), name=name),
    lambda name: AgentClientFactory.build(project=ProjectFactory(), name=name),
    lambda name: Task(project=ProjectFactory(), name=name),
], ids=["project", "route", "knowledge base", "agent client", "task"])
def test_each_shown_name_field_refuses_an_override(make):
    with pytest.raises(ValidationError) as error:
        make("Handbook \u202e v2").clean_fields()
    assert [e.code for e in error.value.error_dict["name"]] == ["bidi_control"]


def test_the_project_form_refuses_it_beside_the_field_and_creates_nothing(django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    response = admin_client(root).post("/admin/projects/project/add/", {"name": "Shop \u202e", "slug": "shop"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["name"] == [
        "Invisible direction controls (such as U+202E) are not allowed in a name: they reorder the text shown "
        "after it."]
    assert not ProjectFactory._meta.model.objects.exists()


def test_uuid_parse_takes_the_8_4_4_4_12_form_in_either_case_only():
    import uuid

    from apps.core.validators import uuid_parse
    from tests.core.hostile import NON_CANONICAL_UUID_FORMS, non_canonical_uuid

    value = uuid.uuid4()
    assert uuid_parse(str(value)) == uuid_parse(str(value).upper()) == uuid_parse(value) == value
    assert [uuid_parse(non_canonical_uuid(str(value), form)) for form in NON_CANONICAL_UUID_FORMS] == [None] * 4
    assert [uuid_parse(other) for other in (value.int, f" {value}", f"{value}\n", "", None)] == [None] * 5
