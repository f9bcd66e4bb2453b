"""unique_race: a write that breaks the named unique constraint answers the caller's error and
leaves the transaction usable; a write that breaks any other stays an IntegrityError."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from apps.core.integrity import unique_race, unique_violated
from apps.projects.models import PROJECT_NAME_CONSTRAINT, Membership, Project
from tests.projects.factories import MembershipFactory, ProjectFactory

pytestmark = pytest.mark.django_db


class NameTaken(Exception):
    pass


def test_the_named_constraint_is_the_callers_error_and_the_transaction_goes_on():
    taken = ProjectFactory(name="Retail")
    with transaction.atomic():
        with pytest.raises(NameTaken) as raised, unique_race(PROJECT_NAME_CONSTRAINT, NameTaken):
            ProjectFactory(name="RETAIL")
        assert unique_violated(raised.value) == PROJECT_NAME_CONSTRAINT
        assert list(Project.objects.values_list("pk", flat=True)) == [taken.pk]  # the savepoint rolled back


def test_another_constraint_stays_an_integrity_error():
    member = MembershipFactory()
    with pytest.raises(IntegrityError) as raised, unique_race(PROJECT_NAME_CONSTRAINT, NameTaken):
        MembershipFactory(project=member.project, user=member.user)
    assert unique_violated(raised.value) == "membership_unique_user"
    assert list(Membership.objects.values_list("pk", flat=True)) == [member.pk]
