"""The console as an owner of a project of their own sees it: the `owner` membership and `browser`,
Django's test client signed in as that owner. Imported by the conftests of the packages that use
them (tests/tools, tests/knowledge); a module may name another owner."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.projects.models import Membership
from tests.projects.factories import MembershipFactory


@pytest.fixture
def owner():
    """An owner of a project of their own."""
    return MembershipFactory(role=Membership.Role.OWNER)


@pytest.fixture
def browser(owner) -> Client:
    """Django's test client, signed in to the console as `owner`."""
    client = Client()
    client.force_login(owner.user)
    return client
