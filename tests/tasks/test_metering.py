"""The task's counters under reservation, permits and settlement (contracts-beyond-seeds §5)."""

from __future__ import annotations

import uuid

import pytest

from apps.tasks.errors import (
    TaskConcurrencyExhausted,
    TaskDispatchUncertain,
    TaskPaused,
    TaskToolNotAllowed,
    TaskWriteBudgetExhausted,
)
from apps.tasks.metering import Bound, charge_permit, charge_reserve, charge_settle, invocation_task_check
from apps.tasks.models import Task, TaskCharge
from apps.tasks.services import MemberSpec, PolicySpec, task_control, task_create
from tests.ledger.helpers import open_turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def task(world):
    members = [MemberSpec(session_id=str(world.first.session.pk), workspace=world.route.key,
                          client_conversation_id="local-conversation-1", allowed_tools=("adjust_stock", "get_order"))]
    task, _ = task_create(project=world.route.project, user=world.owner.user, request_id="m", members=members,
                          policy=PolicySpec(max_write_calls=2, max_concurrent=2))
    return task


def _bound(task):
    return Bound(task_id=task.pk, member=task.members.get())


def _counters(task):
    task.refresh_from_db()
    return task.write_reserved, task.write_consumed, task.active_permits


def test_a_trusted_write_moves_its_reservation_to_consumption_and_frees_its_permit(task):
    call = uuid.uuid4()
    charge_permit(bound=_bound(task), invocation_pk=call, tool_name="adjust_stock", write=True)
    assert _counters(task) == (1, 0, 1)
    charge_settle(invocation_pk=call, outcome="trusted")
    assert _counters(task) == (0, 1, 0)
    charge_settle(invocation_pk=call, outcome="trusted")  # settling twice changes nothing
    assert _counters(task) == (0, 1, 0)


def test_an_uncertain_write_keeps_its_reservation_and_permit(task):
    call = uuid.uuid4()
    charge_permit(bound=_bound(task), invocation_pk=call, tool_name="adjust_stock", write=True)
    charge_settle(invocation_pk=call, outcome="uncertain")
    assert _counters(task) == (1, 0, 1)
    assert TaskCharge.objects.get(invocation_pk=call).outcome == "uncertain"


def test_a_call_proven_not_sent_gives_everything_back(task):
    call = uuid.uuid4()
    charge_permit(bound=_bound(task), invocation_pk=call, tool_name="adjust_stock", write=True)
    charge_settle(invocation_pk=call, outcome="released")
    assert _counters(task) == (0, 0, 0)


def test_a_write_awaiting_approval_reserves_and_takes_its_permit_on_dispatch_without_reserving_twice(task):
    call = uuid.uuid4()
    charge_reserve(bound=_bound(task), invocation_pk=call, tool_name="adjust_stock", write=True)
    assert _counters(task) == (1, 0, 0)
    charge_permit(bound=_bound(task), invocation_pk=call, tool_name="adjust_stock", write=True)
    assert _counters(task) == (1, 0, 1)


def test_the_write_budget_counts_reservations_and_consumption(task):
    for _ in range(2):
        call = uuid.uuid4()
        charge_permit(bound=_bound(task), invocation_pk=call, tool_name="adjust_stock", write=True)
        charge_settle(invocation_pk=call, outcome="trusted")
    with pytest.raises(TaskWriteBudgetExhausted):
        charge_reserve(bound=_bound(task), invocation_pk=uuid.uuid4(), tool_name="adjust_stock", write=True)
    # reads are not metered against the write budget
    charge_permit(bound=_bound(task), invocation_pk=uuid.uuid4(), tool_name="get_order", write=False)
    assert _counters(task) == (0, 2, 1)


def test_permits_are_bounded_by_max_concurrent_reads_included(task):
    charge_permit(bound=_bound(task), invocation_pk=uuid.uuid4(), tool_name="get_order", write=False)
    charge_permit(bound=_bound(task), invocation_pk=uuid.uuid4(), tool_name="get_order", write=False)
    with pytest.raises(TaskConcurrencyExhausted):
        charge_permit(bound=_bound(task), invocation_pk=uuid.uuid4(), tool_name="get_order", write=False)
    assert _counters(task) == (0, 0, 2)


def test_permits_held_only_by_uncertain_calls_refuse_as_dispatch_uncertain(task):
    """An uncertain call keeps its permit for good: TASK_CONCURRENCY_EXHAUSTED (429, "retry when one
    finishes") had agents retry for a permit no call would ever give back."""
    calls = [uuid.uuid4(), uuid.uuid4()]
    for call in calls:
        charge_permit(bound=_bound(task), invocation_pk=call, tool_name="get_order", write=False)
    charge_settle(invocation_pk=calls[0], outcome="uncertain")
    with pytest.raises(TaskConcurrencyExhausted):  # the other is still in flight: it will finish
        charge_permit(bound=_bound(task), invocation_pk=uuid.uuid4(), tool_name="get_order", write=False)
    charge_settle(invocation_pk=calls[1], outcome="uncertain")
    with pytest.raises(TaskDispatchUncertain) as refused:
        charge_permit(bound=_bound(task), invocation_pk=uuid.uuid4(), tool_name="adjust_stock", write=True)
    assert (refused.value.code, refused.value.status) == ("TASK_DISPATCH_UNCERTAIN", 409)
    assert _counters(task) == (0, 0, 2)
    assert TaskCharge.objects.count() == 2


def test_a_paused_task_grants_no_permit(world, task):
    task_control(task=task, user=world.owner.user, request_id="p", expected_revision=1, action="pause")
    with pytest.raises(TaskPaused):
        charge_permit(bound=_bound(task), invocation_pk=uuid.uuid4(), tool_name="get_order", write=False)
    assert _counters(task) == (0, 0, 0)


def test_a_tool_outside_the_members_exact_tools_is_refused(world, task):
    run_id = open_turn(world.api, world.first.access_token, world.route.key, task_binding={
        "schema_version": "bailing.agent-task-binding.v1", "task_id": str(task.pk),
        "scope_hash": task.scope_hash}).json()["run_id"]
    from apps.ledger.models import Run
    run = Run.objects.get(pk=run_id)
    assert invocation_task_check(session=world.first.session, run=run, tool_name="adjust_stock").task_id == task.pk
    with pytest.raises(TaskToolNotAllowed):
        invocation_task_check(session=world.first.session, run=run, tool_name="refund_order")


def test_a_session_outside_every_task_is_not_metered(world):
    run_id = open_turn(world.api, world.second.access_token, world.route.key).json()["run_id"]
    from apps.ledger.models import Run
    assert invocation_task_check(session=world.second.session, run=Run.objects.get(pk=run_id),
                                 tool_name="anything") is None
    assert Task.objects.count() == 0


