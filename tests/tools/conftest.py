import pytest
from django.test import Client

from apps.projects.models import Membership

# The suite's tool secret key (tests/conftest.py sets it for every test), for rows built outside a
# test's own settings, such as module-scoped worlds.
from tests.conftest import TOOL_SECRET_KEY as TEST_SECRET_KEY
from tests.projects.factories import MembershipFactory

__all__ = ["TEST_SECRET_KEY"]


@pytest.fixture
def owner():
    """An owner of a project of their own (a module may name another owner)."""
    return MembershipFactory(role=Membership.Role.OWNER)


@pytest.fixture
def browser(owner) -> Client:
    """The console, signed in as `owner`."""
    client = Client()
    client.force_login(owner.user)
    return client
