from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from apps.projects.models import Membership
from tests.projects.factories import MembershipFactory

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def fixture_bytes():
    def read(name: str) -> bytes:
        return (FIXTURES / name).read_bytes()

    return read


@pytest.fixture
def owner():
    """An owner of a fresh project, for the builder API."""
    return MembershipFactory(role=Membership.Role.OWNER)


@pytest.fixture
def browser(owner) -> Client:
    """Django's test client, signed in to the console as `owner`."""
    console = Client()
    console.force_login(owner.user)
    return console


@pytest.fixture
def client(api_client, owner):
    """The DRF test client, logged in as `owner`."""
    api_client.force_login(owner.user)
    return api_client
