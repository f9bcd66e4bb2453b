"""Fixtures for the route surface and the agent tool endpoints: the demo store spec compiled into a
real provider through the tools services, and a route drawing from it (load with `pytest_plugins`)."""

import pytest

from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.tools.conftest import TEST_SECRET_KEY
from tests.tools.factories import STORE_SPEC, ToolProviderFactory
from tests.tools.surface_helpers import STORE_TOOLS


@pytest.fixture
def tool_keys(settings):
    settings.TOOL_SECRET_KEYS = [TEST_SECRET_KEY]


@pytest.fixture
def store_provider(tool_keys, route):
    return ToolProviderFactory(project=route.project, name="store", spec=STORE_SPEC)


@pytest.fixture
def tool_route(route, store_provider):
    """`route` drawing every store tool, with two of the three write tools opened to agents."""
    return route_tools_set(route=route, sources=[SourceSpec(provider=store_provider, allowed_tools=STORE_TOOLS)],
                           write_tools=["stock_adjust", "order_refund"], tools_direct_enabled=True)

