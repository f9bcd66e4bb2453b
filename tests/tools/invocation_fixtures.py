"""Fixtures of the invocation tests (load with ``pytest_plugins``): a real signed business server,
its provider compiled from tests/tools/fixtures/invocations.yaml, a route drawing every tool, an
agent session on it with an open run."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.ledger.helpers import open_turn
from tests.routes.factories import RouteFactory
from tests.tools.business_server import SECRET, BusinessServer
from tests.tools.factories import ToolProviderFactory
from tests.tools.invocation_helpers import ROUTE, SPEC, TOOLS, WRITES, Shop


@pytest.fixture
def business():
    server = BusinessServer().start()
    yield server
    server.stop()


UNDELIVERED_QUEUE = "test-invocations-undelivered"


@pytest.fixture
def shop(db, business, settings, request) -> Shop:
    if "dispatching" not in request.fixturenames:
        # No worker may take these calls, even when an earlier test started the session's worker:
        # the test decides when (and whether) the dispatcher runs.
        settings.TOOL_DISPATCH_QUEUE = UNDELIVERED_QUEUE
        request.addfinalizer(_undelivered_dropped)
    route = RouteFactory(key=ROUTE, name="Shop", tools_direct_enabled=True)
    provider = ToolProviderFactory(project=route.project, name="shop", base_url=business.base_url, secret=SECRET,
                                   spec=SPEC)
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=TOOLS)], write_tools=WRITES,
                    tools_direct_enabled=True)
    client_app = AgentClientFactory(project=route.project, allowed_routes=[ROUTE])
    issued = session_for(client_app, principal=PRINCIPAL)
    api = APIClient()
    turn = open_turn(api, issued.access_token, ROUTE)
    assert turn.status_code == 200, turn.content
    route.refresh_from_db()
    return Shop(client=api, token=issued.access_token, session=issued.session, route=route, provider=provider,
                server=business, run_id=turn.json()["run_id"])


def _undelivered_dropped() -> None:
    from bailinghub.celery import app

    with app.connection_for_write() as connection:
        connection.default_channel.client.delete(UNDELIVERED_QUEUE)


@pytest.fixture
def dispatching(transactional_db, celery_worker_session, settings):
    """Calls that reach the dispatcher: a real worker, and committed rows it can see. The wait for
    an answer is longer than in use: the test worker runs one task at a time, and other tasks
    (a provider's tool index) may run before a dispatch."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 30
    return celery_worker_session
