"""The builder API's read of a task counts each run's invocations by state in one query: it made
one query per run (up to a hundred for a busy task). Its list of tasks, a page after a cursor
included, reads as many statements for four tasks as for one."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.tasks.services import MemberSpec, PolicySpec, task_create
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.agent_auth.helpers import bearer
from tests.ledger.helpers import open_turn
from tests.tools.approval_helpers import call
from tests.tools.factories import ToolProviderFactory
from tests.tools.surface_helpers import STORE_TOOLS

pytestmark = pytest.mark.django_db

CONVERSATION = "local-conversation-1"  # turn_body's


@pytest.fixture
def task(world):
    provider = ToolProviderFactory(project=world.route.project, name="store")
    route_tools_set(route=world.route, sources=[SourceSpec(provider=provider, allowed_tools=STORE_TOOLS)],
                    write_tools=["stock_adjust", "order_refund"], tools_direct_enabled=True)
    task, _ = task_create(project=world.route.project, user=world.owner.user, request_id="reads",
                          members=[MemberSpec(session_id=str(world.first.session.pk), workspace=world.route.key,
                                              client_conversation_id=CONVERSATION, allowed_tools=("order_refund",))],
                          policy=PolicySpec())
    return task


def _refund_awaiting_approval(world, task, n: int) -> str:
    """A bound run whose one call (a high-risk refund) waits for approval: nothing is dispatched."""
    binding = {"schema_version": "bailing.agent-task-binding.v1", "task_id": str(task.pk),
               "scope_hash": task.scope_hash}
    run = open_turn(world.api, world.first.access_token, world.route.key, n, task_binding=binding).json()
    answer = call(world.api, world.first.access_token, run, route_key=world.route.key, n=n).json()
    assert answer["state"] == "awaiting_approval", answer
    return run["run_id"]


def _read(world, task) -> tuple[int, list[dict]]:
    with CaptureQueriesContext(connection) as queries:
        response = world.api.get(f"/api/v1/builder/tasks/{task.pk}", **bearer(world.operator_token))
    assert response.status_code == 200, response.json()
    return len(queries.captured_queries), response.json()["data"]["runs"]


def test_reading_a_task_makes_as_many_queries_with_four_runs_as_with_one(world, task):
    _read(world, task)  # the token's first use also records it (last_used_at)
    _refund_awaiting_approval(world, task, 1)
    with_one, _ = _read(world, task)
    for n in (2, 3, 4):
        _refund_awaiting_approval(world, task, n)
    with_four, runs = _read(world, task)
    assert (len(runs), with_four) == (4, with_one)


def _list(world, query: str = "") -> tuple[int, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = world.api.get(f"/api/v1/builder/tasks{query}", **bearer(world.operator_token))
    assert response.status_code == 200, response.json()
    return len(queries.captured_queries), [row["id"] for row in response.json()["data"]]


def _another_task(world, n: int) -> str:
    task, _ = task_create(project=world.route.project, user=world.owner.user, request_id=f"list-{n}",
                          members=[MemberSpec(session_id=str(world.first.session.pk), workspace=world.route.key,
                                              client_conversation_id=f"conversation-{n}", allowed_tools=())],
                          policy=PolicySpec())
    return str(task.pk)


def test_listing_tasks_makes_as_many_queries_with_four_tasks_as_with_one(world, task):
    _list(world)  # the token's first use also records it (last_used_at)
    with_one, _ = _list(world)
    ids = [str(task.pk), *(_another_task(world, n) for n in (2, 3, 4))]
    with_four, listed = _list(world)
    assert (listed, with_four) == (ids, with_one)


def test_a_page_after_a_cursor_makes_as_many_queries_with_three_tasks_as_with_one(world, task):
    first = _list(world)[1][0]
    _another_task(world, 2)
    with_one, _ = _list(world, f"?cursor={first}")
    ids = [_another_task(world, n) for n in (3, 4)]
    with_three, listed = _list(world, f"?cursor={first}")
    assert (len(listed), listed[1:], with_three) == (3, ids, with_one)


def test_each_run_counts_its_own_invocations_by_state(world, task):
    first = _refund_awaiting_approval(world, task, 1)
    second = _refund_awaiting_approval(world, task, 2)
    _, runs = _read(world, task)
    assert {run["run_id"]: run["invocations"] for run in runs} == {first: {"awaiting_approval": 1},
                                                                   second: {"awaiting_approval": 1}}
