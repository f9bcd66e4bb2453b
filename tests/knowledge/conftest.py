from __future__ import annotations

from pathlib import Path

import pytest

from tests.projects.console_fixtures import browser, owner

FIXTURES = Path(__file__).resolve().parent / "fixtures"

__all__ = ["browser", "owner"]  # the console's fixtures, for this package's tests


@pytest.fixture
def fixture_bytes():
    def read(name: str) -> bytes:
        return (FIXTURES / name).read_bytes()

    return read


@pytest.fixture
def client(api_client, owner):
    """The DRF test client, logged in as `owner`."""
    api_client.force_login(owner.user)
    return api_client
