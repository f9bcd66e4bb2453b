import pytest

from tests.core.hostile import World, make_world


@pytest.fixture
def world(db) -> World:
    return make_world()
