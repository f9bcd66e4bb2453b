"""A turn bound to a task, racing the task's cancel (found by a concurrency audit; the test failed
before its fix): the turn either pinned its run first, or is refused TASK_CANCELLED."""

from __future__ import annotations

import json

import pytest

from apps.ledger.models import Run
from apps.tasks.models import Task, TaskLedgerEntry, TaskRun
from tests.agent_auth.helpers import bearer
from tests.concurrency import at_once
from tests.ledger.helpers import turn_body
from tests.tasks.test_task_api import _create_body

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 12


def _post(world, url, body):
    def call(client):
        return client.generic("POST", url, json.dumps(body), content_type="application/json",
                              HTTP_AUTHORIZATION=f"Bearer {world.operator_token}")
    return call


def test_a_bound_turn_racing_a_cancel_never_pins_a_run_to_the_cancelled_task(world):
    """§5: "cancel is final"; a cancelled task refuses turns (TASK_CANCELLED). 6 of 20 turns racing
    the cancel were answered 200, their runs pinned to the task after the cancel committed."""
    pinned_after_cancel = []
    for n in range(ROUNDS):
        conversation = f"conv-{n}"
        body = _create_body(world, request_id=f"op-{n}")
        body["members"][0]["client_conversation_id"] = conversation
        created = at_once([_post(world, "/api/v1/builder/tasks", body)])[0]
        assert created[0] == 201, created
        task = Task.objects.get(pk=created[1]["data"]["id"])
        binding = {"schema_version": "bailing.agent-task-binding.v1", "task_id": str(task.pk),
                   "scope_hash": task.scope_hash}
        turn = turn_body(n, client_conversation_id=conversation, task_binding=binding)

        def open_bound(client, turn=turn):
            client.raise_request_exception = False
            return client.generic("POST", f"/agent-api/v1/workspaces/{world.route.key}/turns", json.dumps(turn),
                                  content_type="application/json", **bearer(world.first.access_token))

        results = at_once([open_bound, _post(world, f"/api/v1/builder/tasks/{task.pk}/control",
                                             {"request_id": f"cancel-{n}", "expected_revision": 1,
                                              "action": "cancel"})])
        assert results[1][0] == 200, results
        cancelled_at = TaskLedgerEntry.objects.get(task=task, kind="cancel").created_at
        link = TaskRun.objects.filter(task=task).first()
        if link is not None and Run.objects.get(pk=link.run_id).created_at > cancelled_at:
            pinned_after_cancel.append(results[0][0])
        elif results[0][0] != 200:  # the turn lost the race: refused as the contract says, nothing kept
            assert (results[0][0], results[0][1]["error"]) == (409, "TASK_CANCELLED"), results[0]
            assert link is None
    assert pinned_after_cancel == [], (f"{len(pinned_after_cancel)}/{ROUNDS} turns pinned a run to a task "
                                       f"after its cancel committed (answers: {pinned_after_cancel})")
